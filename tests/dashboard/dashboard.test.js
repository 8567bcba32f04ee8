// The dashboard in a real browser: a real ojsd with jobs in every state, a worker, a cron
// job and a workflow; every page loaded, checked and photographed (target/dashboard-
// screenshots/), and the actions tried: retry a dead letter, pause a queue, quiet a worker;
// a job pushed while a page is open shows up through the live event stream; with
// --password the page asks for it, and an observer token gets no action buttons.
"use strict";
const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const { spawn } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const readline = require("node:readline");
const { chromium } = require("playwright-core");
const { Client } = require("../../clients/node/ojsd");

const ROOT = path.resolve(__dirname, "../..");
const BIN = process.env.OJSD_BIN || path.join(ROOT, "target/debug/ojsd");
const BROWSER = process.env.CHROMIUM || "/usr/bin/chromium";
const SHOTS = path.join(ROOT, "target/dashboard-screenshots");

async function startServer(extra = []) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ojsd-dash-"));
  const proc = spawn(BIN, ["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--data-dir", dir,
    "--log-level", "warn", "--fetch-wait-ms", "200", ...extra], { stdio: ["ignore", "pipe", "inherit"] });
  const addrs = await new Promise((resolve, reject) => {
    const found = {};
    readline.createInterface({ input: proc.stdout }).on("line", (line) => {
      let m = /^ojsd listening on (\S+)/.exec(line);
      if (m) found.tcp = m[1];
      m = /^ojsd http listening on (\S+)/.exec(line);
      if (m) found.http = m[1];
      if (found.tcp && found.http) resolve(found);
    });
    proc.once("exit", () => reject(new Error("ojsd exited")));
  });
  return { ...addrs, proc, dir, async stop() { proc.kill("SIGTERM"); await new Promise((r) => proc.once("exit", r)); fs.rmSync(dir, { recursive: true, force: true }); } };
}

async function http(srv, method, p, body, headers = {}) {
  const resp = await fetch(`http://${srv.http}${p}`, { method, headers: { "Content-Type": "application/json", ...headers }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await resp.text();
  return { status: resp.status, json: text ? JSON.parse(text) : null };
}

const push = async (srv, type, options = {}, args = []) => (await http(srv, "POST", "/ojs/v1/jobs", { type, args, options })).json.job;

let srv, browser, page, tcp, worker, ids = {};

before(async () => {
  fs.mkdirSync(SHOTS, { recursive: true });
  srv = await startServer();
  tcp = await Client.connect(srv.tcp);
  // A worker connected over TCP (it shows on the workers page) holding one active job.
  worker = await Client.connect(srv.tcp, { wid: "w-dash-1", labels: ["blue"] });
  ids.active = (await push(srv, "report.build", { queue: "reports" })).id;
  await worker.fetch(["reports"]);
  ids.available = (await push(srv, "email.send", { queue: "mail" }, ["ana@example.com"])).id;
  await push(srv, "email.send", { queue: "mail" }, ["bo@example.com"]);
  ids.scheduled = (await push(srv, "email.send", { queue: "mail", delay_until: new Date(Date.now() + 3600e3).toISOString() })).id;
  ids.pending = (await push(srv, "email.send", { queue: "mail", pending: true })).id;
  ids.cancelled = (await push(srv, "email.send", { queue: "mail" })).id;
  await http(srv, "DELETE", `/ojs/v1/jobs/${ids.cancelled}`);
  // completed, retryable and dead ones go through a worker on their own queue.
  const w2 = await Client.connect(srv.tcp, { wid: "w-dash-2" });
  ids.completed = (await push(srv, "image.resize", { queue: "media" }, [1])).id;
  await w2.fetch(["media"]);
  await w2.ack(ids.completed, { ok: true });
  ids.retryable = (await push(srv, "image.resize", { queue: "media", retry: { max_attempts: 5, initial_interval_ms: 3600000, max_interval_ms: 7200000 } }, [2])).id;
  await w2.fetch(["media"]);
  await w2.fail(ids.retryable, "Timeout", "the resizer timed out");
  ids.dead = (await push(srv, "image.resize", { queue: "media", retry: { max_attempts: 1 } }, [3])).id;
  await w2.fetch(["media"]);
  await w2.fail(ids.dead, "Corrupt", "not an image", ["at resize (image.js:10)"]);
  w2.close();
  await http(srv, "POST", "/ojs/v1/cron", { name: "nightly-report", cron: "0 2 * * *", timezone: "Europe/Paris", type: "report.build", args: [], options: { queue: "reports" } });
  const wf = await http(srv, "POST", "/ojs/v1/workflows", { type: "chain", name: "onboarding", steps: [
    { type: "user.create", args: [] },
    { type: "group", name: "welcome", jobs: [{ type: "email.send", args: [] }, { type: "sms.send", args: [] }] },
    { type: "crm.sync", args: [] }] });
  ids.workflow = wf.json.workflow.id;
  browser = await chromium.launch({ executablePath: BROWSER, args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
    "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"] });
  page = await browser.newPage({ viewport: { width: 1300, height: 860 } });
  page.on("pageerror", (e) => { throw e; });
});

after(async () => {
  await browser?.close();
  tcp?.close();
  worker?.close();
  await srv?.stop();
});

async function open(hash) {
  // Through a blank page: a goto that only changes the hash keeps the previous page's
  // `main section` in place, and the wait below would pass before the new page rendered.
  await page.goto("about:blank");
  await page.goto(`http://${srv.http}/${hash}`);
  await page.waitForSelector("main section");
}

const shot = (name) => page.screenshot({ path: path.join(SHOTS, `screenshot-${name}.png`), fullPage: true });

test("overview shows totals, charts and latency", async () => {
  await open("#/overview");
  await page.waitForSelector("#live.on");
  // Two mail jobs and the workflow's first step.
  const available = await page.textContent('.card[data-state="available"] .n');
  assert.equal(Number(available), 3);
  assert.equal(Number(await page.textContent('.card[data-state="discarded"] .n')), 1);
  assert.equal(await page.locator("svg[aria-label='Jobs per second'] path").count(), 3);
  await shot("overview");
});

test("queues: pause shows at once, and a job pushed while open arrives live", async () => {
  await open("#/queues");
  const mail = page.locator('tr[data-queue="mail"]');
  assert.equal(await mail.locator(".count-available").textContent(), "2");
  assert.match(await mail.locator(".latency").textContent(), /^\d[\d,]* ms$/);
  await mail.getByRole("button", { name: "Pause" }).click();
  await page.waitForSelector('tr[data-queue="mail"] .status .paused');
  const stats = await http(srv, "GET", "/ojs/v1/queues/mail/stats");
  assert.equal(stats.json.status, "paused");
  // Live: a PUSH from elsewhere shows up without a reload.
  await push(srv, "email.send", { queue: "mail" });
  await page.waitForFunction(() => document.querySelector('tr[data-queue="mail"] .count-available')?.textContent === "3");
  await shot("queues");
  await page.locator('tr[data-queue="mail"]').getByRole("button", { name: "Resume" }).click();
  await page.waitForSelector('tr[data-queue="mail"] .status .running');
});

test("jobs: list by queue and state, find one, see its envelope, errors and events", async () => {
  await open("#/jobs?queue=media");
  assert.equal(await page.locator("tbody tr[data-job]").count(), 3);
  await shot("jobs");
  await open(`#/job/${ids.retryable}`);
  const envelope = JSON.parse(await page.textContent("#envelope"));
  assert.equal(envelope.id, ids.retryable);
  assert.equal(envelope.state, "retryable");
  assert.ok((await page.textContent("main")).includes("the resizer timed out"));
  assert.ok((await page.textContent("main")).includes("job.started"));
  await shot("job");
});

test("scheduled and retrying", async () => {
  await open("#/scheduled");
  assert.equal(await page.locator(`tr[data-job="${ids.scheduled}"]`).count(), 1);
  assert.equal(await page.locator(`tr[data-job="${ids.retryable}"]`).count(), 1);
  await shot("scheduled");
});

test("workers: quiet shows on the page and reaches the worker", async () => {
  await open("#/workers");
  const row = page.locator('tr[data-worker="w-dash-1"]');
  assert.ok((await row.textContent()).includes("blue"));
  await row.getByRole("button", { name: "Quiet" }).click();
  await page.waitForSelector('tr[data-worker="w-dash-1"] .status .quiet');
  assert.equal(await worker.beat([ids.active]), "quiet");
  await shot("workers");
});

test("dead letters: retry puts the job back", async () => {
  await open("#/dead");
  const row = page.locator(`tr[data-job="${ids.dead}"]`);
  assert.ok((await row.textContent()).includes("not an image"));
  await shot("dead");
  await row.getByRole("button", { name: "Retry" }).click();
  await page.waitForFunction((id) => !document.querySelector(`tr[data-job="${id}"]`), ids.dead);
  assert.equal((await tcp.job(ids.dead)).state, "available");
});

test("cron shows the next run in the job's zone and can be disabled", async () => {
  await open("#/cron");
  const row = page.locator('tr[data-cron="nightly-report"]');
  assert.ok((await row.textContent()).includes("Europe/Paris"));
  await row.getByRole("button", { name: "Disable" }).click();
  await page.waitForSelector('tr[data-cron="nightly-report"] button:text("Enable")');
  await shot("cron");
});

test("workflows: the list and a drawing of the chain", async () => {
  await open("#/workflows");
  assert.equal(await page.locator(`tr[data-workflow="${ids.workflow}"]`).count(), 1);
  await shot("workflows");
  await open(`#/workflow/${ids.workflow}`);
  // Four jobs, one of them in a nested group drawn as a frame.
  assert.equal(await page.locator("#wf-drawing rect[data-state]").count(), 4);
  assert.ok((await page.textContent("#wf-drawing")).includes("group"));
  assert.equal(await page.locator('#wf-drawing rect[data-state="available"]').count(), 1, "the first step is enqueued");
  await shot("workflow");
});

test("with a password the dashboard asks for it", async () => {
  const locked = await startServer(["--password", "hunter2"]);
  try {
    const p = await browser.newPage();
    await p.goto(`http://${locked.http}/#/queues`);
    await p.waitForSelector("#login[open]");
    await p.fill("#password", "hunter2");
    await p.click("#login button");
    await p.waitForSelector("main section h2");
    assert.equal(await p.textContent("main h2"), "Queues");
    await p.screenshot({ path: path.join(SHOTS, "screenshot-login.png") });
    await p.close();
  } finally {
    await locked.stop();
  }
});

test("an observer token sees the data but no action buttons; an admin token sees them", async () => {
  const locked = await startServer(["--token", "observer:look-only", "--token", "admin:boss"]);
  try {
    const boss = { Authorization: "Bearer boss" };
    const job = (await http(locked, "POST", "/ojs/v1/jobs", { type: "email.send", args: [], options: { queue: "mail" } }, boss)).json.job;
    const signIn = async (token, hash) => {
      const p = await browser.newPage(); // a new context: its own sessionStorage
      p.on("pageerror", (e) => { throw e; });
      await p.goto(`http://${locked.http}/${hash}`);
      await p.waitForSelector("#login[open]");
      await p.fill("#password", token);
      await p.click("#login button");
      await p.waitForSelector("main section h2");
      return p;
    };
    const look = await signIn("look-only", "#/queues");
    assert.equal(await look.textContent("#role"), "observer");
    const row = look.locator('tr[data-queue="mail"]');
    assert.equal(await row.locator(".count-available").textContent(), "1", "the data is there");
    assert.equal(await look.locator("main button").count(), 0, "no action buttons on the queues page");
    await look.screenshot({ path: path.join(SHOTS, "screenshot-observer.png") });
    await look.goto("about:blank");
    await look.goto(`http://${locked.http}/#/job/${job.id}`);
    await look.waitForSelector("#envelope");
    assert.equal(await look.getByRole("button", { name: "Cancel" }).count(), 0, "no Cancel on a job");
    await look.close();

    const admin = await signIn("boss", "#/queues");
    assert.equal(await admin.textContent("#role"), "admin");
    await admin.locator('tr[data-queue="mail"]').getByRole("button", { name: "Pause" }).waitFor();
    assert.equal(await admin.locator('tr[data-queue="mail"] button').count(), 2, "Pause and Purge");
    await admin.close();
  } finally {
    await locked.stop();
  }
});
