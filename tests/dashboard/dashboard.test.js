// The dashboard in a real browser: a real ojsd with jobs in every state, a worker, a cron
// job and workflows; every page loaded, checked and photographed (target/dashboard-
// screenshots/), and the actions tried: retry a dead letter, run a scheduled job now, retry
// a retrying one now, pause a queue, quiet a worker; a job's progress, error times and
// backtraces, heartbeats collapsed; workflow labels; an unknown page; every page at phone
// width; an empty server's first-job help, whose commands are run as shown; a job pushed
// while a page is open shows up through the live event stream; with --password the page
// asks for it, and an observer token gets no action buttons.
"use strict";
const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const { spawn, execFileSync } = require("node:child_process");
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
  // It reports progress, and its worker beats three times (three job.heartbeat events).
  await worker.call("PROGRESS", { id: ids.active, percent: 40, message: "rendering page 4 of 10" });
  for (let i = 0; i < 3; i++) assert.equal(await worker.beat([ids.active]), null);
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
  // For "Run now" and "Retry now": a scheduled job and a retrying one (an hour of backoff).
  const hour = { max_attempts: 5, initial_interval_ms: 3600000, max_interval_ms: 7200000 };
  ids.runNow = (await push(srv, "digest.send", { queue: "later", delay_until: new Date(Date.now() + 3600e3).toISOString() })).id;
  ids.retryNow = (await push(srv, "digest.send", { queue: "later", retry: hour })).id;
  await w2.fetch(["later"]);
  await w2.fail(ids.retryNow, "Timeout", "the mail server did not answer");
  // A workflow whose first step failed and waits for its retry, then a named batch with a
  // callback.
  const wf2 = await http(srv, "POST", "/ojs/v1/workflows", { type: "chain", name: "imports", steps: [
    { type: "import.fetch", args: [], options: { queue: "wf", retry: hour } },
    { type: "batch", name: "import-rows", jobs: [{ type: "import.row", args: [] }], callbacks: { on_complete: { type: "import.report", args: [] } } }] });
  ids.workflow2 = wf2.json.workflow.id;
  ids.wfStep = wf2.json.workflow.steps[0].job_id;
  assert.equal((await w2.fetch(["wf"])).id, ids.wfStep);
  await w2.fail(ids.wfStep, "Timeout", "the source did not answer");
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
  // Latency in a person's units (how long the oldest available mail job waited).
  assert.match(await mail.locator(".latency").textContent(), /^\d[\d.,]* (ms|s|min|h)$/);
  assert.deepEqual(await page.evaluate(() => [101162, 850, 4200, 7.2e6, 59990].map(fmtMs)),
    ["1.7 min", "850 ms", "4.2 s", "2 h", "1 min"]);
  await mail.getByRole("button", { name: "Pause" }).click();
  await page.waitForSelector('tr[data-queue="mail"] .status .paused');
  const stats = await http(srv, "GET", "/ojs/v1/queues/mail/stats");
  assert.equal(stats.json.status, "paused");
  // Live: a PUSH from elsewhere shows up without a reload.
  await push(srv, "email.send", { queue: "mail" });
  await page.waitForFunction(() => document.querySelector('tr[data-queue="mail"] .count-available')?.textContent === "3");
  await shot("queues");
  await page.locator('tr[data-queue="mail"]').getByRole("button", { name: "Resume" }).click();
  await page.waitForSelector('tr[data-queue="mail"] .status .active-q');
});

test("jobs: a Faktory client's job type and queue show as it wrote them", async () => {
  assert.deepEqual(await page.evaluate(() => [
    writtenName("type", "fk.x_53end_45mail"), writtenName("queue", "fk.-43ritical-5f-51"),
    writtenName("type", "email.send"), writtenName("queue", "mail"), writtenName("type", "fk.x_zz"),
  ]), ["SendEmail", "Critical_Q", "email.send", "mail", "fk.x_zz"]);
  // The escaped names a Faktory PUSH of jobtype SendEmail to queue Critical_Q is filed under.
  const job = await push(srv, "fk.x_53end_45mail", { queue: "fk.-43ritical-5f-51" });
  await open(`#/job/${job.id}`);
  await page.waitForSelector("#envelope");
  const text = await page.textContent("main");
  assert.ok(text.includes("SendEmail · queue Critical_Q"), text.slice(0, 300));
  await http(srv, "DELETE", `/ojs/v1/jobs/${job.id}`);
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
  assert.equal(await page.locator(`tr[data-job="${ids.scheduled}"]`).getByRole("button", { name: "Run now" }).count(), 1);
  assert.equal(await page.locator(`tr[data-job="${ids.retryable}"]`).getByRole("button", { name: "Retry now" }).count(), 1);
  await shot("scheduled");
});

test("a scheduled job can be run now and a retrying one retried now", async () => {
  await open(`#/job/${ids.runNow}`);
  assert.equal(await page.getByRole("button", { name: "Cancel" }).count(), 1);
  await shot("job-scheduled");
  await page.getByRole("button", { name: "Run now" }).click();
  await page.waitForSelector("main h2 .state.available");
  assert.equal((await tcp.job(ids.runNow)).state, "available");
  assert.equal(await page.getByRole("button", { name: "Run now" }).count(), 0);
  await shot("job-run-now");

  await open(`#/job/${ids.retryNow}`);
  assert.ok((await page.textContent("main")).includes("retry due"));
  await page.getByRole("button", { name: "Retry now" }).click();
  await page.waitForSelector("main h2 .state.available");
  const j = await tcp.job(ids.retryNow);
  assert.equal(j.state, "available");
  assert.equal(j.attempt, 1, "the failed attempt still counts");
  assert.equal(await page.locator("#errors tr.error-entry").count(), 1, "and its error is kept");
  await shot("job-retry-now");
});

test("a job's error history shows each error's time and its backtrace", async () => {
  await open(`#/job/${ids.dead}`);
  const envelope = JSON.parse(await page.textContent("#envelope"));
  const entry = page.locator("#errors tr.error-entry");
  assert.equal(await entry.count(), 1);
  const when = await page.evaluate((t) => new Date(t).toLocaleString(), envelope.errors[0].occurred_at);
  assert.equal(await entry.locator(".when").textContent(), when);
  const bt = entry.locator("details.backtrace");
  assert.equal(await bt.locator("summary").textContent(), "backtrace (1 line)");
  assert.equal(await bt.locator("pre").isVisible(), false, "folded at first");
  await bt.locator("summary").click();
  assert.equal(await bt.locator("pre").textContent(), "at resize (image.js:10)");
  // A dead job keeps its Retry (through the dead letters), not "Retry now".
  assert.equal(await page.getByRole("button", { name: "Retry", exact: true }).count(), 1);
  assert.equal(await page.getByRole("button", { name: "Retry now" }).count(), 0);
  await shot("job-errors");
});

test("a job's progress shows as a bar with its message, and heartbeats as one row", async () => {
  await open(`#/job/${ids.active}`);
  assert.equal(await page.getAttribute("#progress progress", "value"), "40");
  const text = await page.textContent("#progress");
  assert.ok(text.includes("40%") && text.includes("rendering page 4 of 10"), text);
  const beats = page.locator("#events tr.heartbeats");
  assert.equal(await beats.count(), 1);
  assert.match(await beats.textContent(), /3 heartbeats.*first .* · last /);
  assert.equal(await page.locator('#events tr[data-type="job.heartbeat"]').count(), 0);
  assert.equal(await page.locator('#events tr[data-type="job.started"]').count(), 1);
  await shot("job-progress");
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
  assert.equal(await row.locator(".cron-queue").textContent(), "reports");
  // The next five runs, each at 02:00 Paris time.
  const runs = row.locator(".next-runs li");
  assert.equal(await runs.count(), 5);
  const cron = (await http(srv, "GET", "/ojs/v1/cron/nightly-report")).json.cron_job;
  const paris = await page.evaluate((ts) => ts.map((t) => inZone(t, "Europe/Paris")), cron.next_runs);
  assert.deepEqual(await runs.allTextContents(), paris);
  for (const t of cron.next_runs) {
    assert.equal(new Intl.DateTimeFormat("en-GB", { timeZone: "Europe/Paris", hour: "2-digit", minute: "2-digit" }).format(new Date(t)), "02:00");
  }
  await shot("cron-next-runs");
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
  // The group under its name.
  assert.deepEqual(await page.locator("#wf-drawing .frame-title").allTextContents(), ["welcome (group) · waiting"]);
  assert.equal(await page.locator('#wf-drawing rect[data-state="available"]').count(), 1, "the first step is enqueued");
  await shot("workflow");
});

test("workflows: callbacks, batch names and a retrying step are labelled as such", async () => {
  await open(`#/workflow/${ids.workflow2}`);
  const drawing = page.locator("#wf-drawing");
  assert.deepEqual(await drawing.locator(".callback").allTextContents(), ["on complete"]);
  assert.ok(!(await drawing.textContent()).includes("on_"), "no raw on_complete");
  assert.ok((await drawing.locator(".frame-title").textContent()).startsWith("import-rows (batch)"));
  assert.equal(await drawing.locator('rect[data-state="retryable"]').count(), 1);
  assert.ok((await drawing.textContent()).includes("retryable (1 failed)"));
  await shot("workflow-retryable");
  // Retried now, the step is back in its queue: "retrying", not "available".
  const r = await http(srv, "POST", `/ojs/v1/admin/jobs/${ids.wfStep}/retry`);
  assert.equal(r.status, 200);
  await open(`#/workflow/${ids.workflow2}`);
  assert.equal(await drawing.locator('rect[data-state="retrying"]').count(), 1);
  assert.equal(await drawing.locator('rect[data-state="available"]').count(), 0);
  assert.ok((await drawing.textContent()).includes("retrying (try 2)"));
  await shot("workflow-retrying");
});

test("an unknown page says so instead of showing the overview", async () => {
  await open("#/nosuch");
  assert.equal(await page.textContent("main h2"), "Page not found");
  assert.ok((await page.textContent("main")).includes("#/nosuch"));
  assert.equal(await page.locator("#totals").count(), 0);
  assert.equal(await page.locator("#nav a.active").count(), 0);
  await shot("not-found");
});

test("at phone width (375 px) no page is wider than the screen", async () => {
  const phone = await browser.newPage({ viewport: { width: 375, height: 812 } });
  phone.on("pageerror", (e) => { throw e; });
  try {
    for (const hash of ["#/overview", "#/queues", "#/jobs?queue=media", `#/job/${ids.dead}`, `#/job/${ids.active}`, "#/scheduled",
      "#/workers", "#/dead", "#/cron", "#/workflows", `#/workflow/${ids.workflow2}`, "#/nosuch"]) {
      await phone.goto("about:blank");
      await phone.goto(`http://${srv.http}/${hash}`);
      await phone.waitForSelector("main section");
      const [scroll, inner] = await phone.evaluate(() => [document.documentElement.scrollWidth, innerWidth]);
      assert.ok(scroll <= inner, `${hash}: the page is ${scroll} px wide on a ${inner} px screen`);
      const name = hash.replace(/^#\//, "").split(/[/?]/)[0];
      if (["overview", "queues", "job", "cron", "workflow"].includes(name)) {
        await phone.screenshot({ path: path.join(SHOTS, `screenshot-phone-${name}.png`), fullPage: true });
      }
    }
    // The queues table scrolls inside its own box.
    await phone.goto(`http://${srv.http}/#/queues`);
    await phone.waitForSelector("main section .table-wrap");
    const [inner, outer] = await phone.evaluate(() => {
      const w = document.querySelector("main .table-wrap");
      return [w.scrollWidth, w.clientWidth];
    });
    assert.ok(inner > outer, `the queues table (${inner} px) scrolls in its ${outer} px box`);
  } finally {
    await phone.close();
  }
});

test("an empty server shows how to push a first job, and its commands work as shown", async () => {
  const fresh = await startServer();
  const p = await browser.newPage();
  p.on("pageerror", (e) => { throw e; });
  try {
    await p.goto(`http://${fresh.http}/#/overview`);
    await p.waitForSelector("#first-job");
    await p.waitForSelector("#live.on");
    const curl = await p.textContent("#first-job-curl");
    assert.ok(curl.startsWith(`curl -X POST http://${fresh.http}/ojs/v1/jobs `), curl);
    const tcpLine = await p.textContent("#first-job-tcp");
    const [host, port] = fresh.tcp.split(/:(?=\d+$)/);
    assert.ok(tcpLine.endsWith(`| nc ${host} ${port}`), tcpLine);
    await p.screenshot({ path: path.join(SHOTS, "screenshot-empty.png"), fullPage: true });
    // The curl command as shown; the page then shows the job instead of the help.
    const out = execFileSync("bash", ["-c", `${curl} -s -o /dev/null -w '%{http_code}'`]).toString();
    assert.equal(out, "201");
    await p.waitForSelector("#first-job", { state: "detached" });
    assert.equal(await p.textContent('.card[data-state="available"] .n'), "1");
    // The TCP line as shown, with a stand-in for nc when this machine has none.
    const nc = `node -e 'const s = require("net").connect(+process.argv[2], process.argv[1]); process.stdin.pipe(s); s.pipe(process.stdout);'`;
    const standIn = tcpLine.replace(/\| nc /, `| ${nc} `);
    const reply = execFileSync("bash", ["-c", `if command -v nc >/dev/null; then ${tcpLine}; else ${standIn}; fi`], { timeout: 10000 }).toString();
    assert.match(reply, /^\+HI .*\r\n\+OK\r\n\$\d+\r\n\{.*"type":"email.send"/s);
    await p.waitForFunction(() => document.querySelector('.card[data-state="available"] .n')?.textContent === "2");
  } finally {
    await p.close();
    await fresh.stop();
  }
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
