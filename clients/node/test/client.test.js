// The Node client and worker against a real ojsd (OJSD_BIN, default target/debug/ojsd).
"use strict";
const { test } = require("node:test");
const assert = require("node:assert/strict");
const { spawn } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const readline = require("node:readline");
const { Client, Worker, OjsdError } = require("../ojsd");

const BIN = process.env.OJSD_BIN || path.resolve(__dirname, "../../../target/debug/ojsd");

/** An ojsd on a free port with its own data dir; restartable on the same dir and port. */
class Server {
  constructor(extra = []) {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), "ojsd-node-"));
    this.extra = extra;
    this.addr = "127.0.0.1:0";
  }
  start() {
    this.proc = spawn(BIN, ["--listen", this.addr, "--data-dir", this.dir, "--http-listen", "off",
      "--log-level", "warn", "--test-clock", "--fetch-wait-ms", "300", ...this.extra],
      { stdio: ["ignore", "pipe", "ignore"] });
    const exited = new Promise((r) => this.proc.once("exit", r));
    this.exited = exited;
    return new Promise((resolve, reject) => {
      const rl = readline.createInterface({ input: this.proc.stdout });
      rl.on("line", (line) => {
        const m = /^ojsd listening on (\S+)/.exec(line);
        if (m) { this.addr = m[1]; resolve(this); }
      });
      exited.then(() => reject(new Error("ojsd exited before listening")));
    });
  }
  async stop() {
    if (this.proc.exitCode === null) { this.proc.kill("SIGTERM"); await this.exited; }
  }
  async close() {
    await this.stop();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

async function server(extra) {
  return new Server(extra).start();
}

async function waitFor(what, fn, ms = 10000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

test("push, fetch, ack, pipelining and typed errors", async (t) => {
  const srv = await server();
  t.after(() => srv.close());
  const c = await Client.connect(srv.addr);
  t.after(() => c.close());
  const job = await c.push({ type: "email.send", args: ["a@b.c"], queue: "mail" });
  assert.equal(job.state, "available");
  const w = await Client.connect(srv.addr, { wid: "w-1" });
  t.after(() => w.close());
  const got = await w.fetch(["mail"]);
  assert.deepEqual([got.id, got.args], [job.id, ["a@b.c"]]);
  assert.equal(await w.fetch(["empty"]), null);
  assert.equal(await w.ack(got.id, { sent: true }), "OK");
  const done = await c.job(job.id);
  assert.deepEqual([done.state, done.result], ["completed", { sent: true }]);
  await assert.rejects(c.push({ type: "Not Valid" }), (e) => e instanceof OjsdError && e.code === "INVALID_JOB_TYPE");
  // Pipelined: replies come back in order.
  const [a, b, info] = await Promise.all([c.push({ type: "p.a" }), c.push({ type: "p.b" }), c.info()]);
  assert.deepEqual([a.type, b.type], ["p.a", "p.b"]);
  assert.ok(info.totals);
  // PUSHB is atomic.
  const two = await c.pushb([{ type: "a.b", args: [1] }, { type: "a.b", args: [2] }]);
  assert.deepEqual(two.map((j) => j.args), [[1], [2]]);
  await assert.rejects(c.pushb([{ type: "a.b", queue: "q2" }, { type: "BAD" }]), OjsdError);
  const after = await c.info();
  assert.equal(after.queues.q2?.available ?? 0, 0);
});

test("the password is required and checked", async (t) => {
  const srv = await server(["--password", "s3cret"]);
  t.after(() => srv.close());
  const c = await Client.connect(srv.addr, { password: "s3cret" });
  assert.equal((await c.push({ type: "a.b" })).state, "available");
  c.close();
  await assert.rejects(Client.connect(srv.addr, { password: "wrong" }), (e) => e.code === "UNAUTHENTICATED");
});

test("a worker processes jobs and records failures", async (t) => {
  const srv = await server();
  t.after(() => srv.close());
  const c = await Client.connect(srv.addr);
  t.after(() => c.close());
  const w = new Worker({ addr: srv.addr, queues: ["work"], beatMs: 200 });
  w.register("math.add", async (a, b) => a + b);
  w.register("math.boom", () => { throw new RangeError("kaboom"); });
  const running = w.run({ signals: false });
  t.after(async () => { w.stop(); await running; });
  const ok = await c.push({ type: "math.add", args: [2, 3], queue: "work" });
  const bad = await c.push({ type: "math.boom", queue: "work" });
  const unknown = await c.push({ type: "math.nope", queue: "work" });
  await waitFor("the add job", async () => (await c.job(ok.id)).state === "completed");
  assert.equal((await c.job(ok.id)).result, 5);
  const failed = await waitFor("the failing job", async () => { const j = await c.job(bad.id); return j.state === "retryable" && j; });
  assert.deepEqual([failed.error.type, failed.error.message], ["RangeError", "kaboom"]);
  assert.ok(failed.error.backtrace.some((l) => l.includes("kaboom")));
  const nope = await waitFor("the unknown type", async () => { const j = await c.job(unknown.id); return j.state === "retryable" && j; });
  assert.equal(nope.error.type, "UnknownJobType");
});

test("quiet stops fetching and terminate stops the worker", async (t) => {
  const srv = await server();
  t.after(() => srv.close());
  const c = await Client.connect(srv.addr);
  t.after(() => c.close());
  const w = new Worker({ addr: srv.addr, queues: ["q"], beatMs: 100 });
  w.register("t.x", () => "ran");
  const running = w.run({ signals: false });
  await waitFor("the worker to register", async () => (await c.call("WORKERS")).workers.some((x) => x.id === w.wid));
  await c.call("WORKER", `QUIET ${w.wid}`);
  assert.equal(await running, "quiet");
  const job = await c.push({ type: "t.x", queue: "q" });
  await new Promise((r) => setTimeout(r, 500));
  assert.equal((await c.job(job.id)).state, "available", "a quiet worker fetches nothing");

  const w2 = new Worker({ addr: srv.addr, queues: ["q"], beatMs: 100 });
  w2.register("t.x", () => "ran");
  const running2 = w2.run({ signals: false });
  await waitFor("the second worker to take the job", async () => (await c.job(job.id)).state === "completed");
  await c.call("WORKER", `TERMINATE ${w2.wid}`);
  assert.equal(await running2, "terminate");
});

test("the worker reconnects after a server restart", async (t) => {
  const srv = await server();
  t.after(() => srv.close());
  let c = await Client.connect(srv.addr);
  const w = new Worker({ addr: srv.addr, queues: ["r"], beatMs: 200 });
  w.register("r.x", (n) => n * 2);
  const running = w.run({ signals: false });
  t.after(async () => { w.stop(); await running; });
  const first = await c.push({ type: "r.x", args: [1], queue: "r" });
  await waitFor("the first job", async () => (await c.job(first.id)).state === "completed");
  c.close();
  await srv.stop();
  await new Promise((r) => setTimeout(r, 500)); // the worker sees the server gone and backs off
  await srv.start(); // same data dir and address
  c = await Client.connect(srv.addr);
  t.after(() => c.close());
  const second = await c.push({ type: "r.x", args: [21], queue: "r" });
  await waitFor("the job after the restart", async () => (await c.job(second.id)).state === "completed", 20000);
  assert.equal((await c.job(second.id)).result, 42);
});
