// The Node client and worker against a real ojsd (OJSD_BIN, default target/debug/ojsd).
"use strict";
const { test } = require("node:test");
const assert = require("node:assert/strict");
const { spawn } = require("node:child_process");
const { getEventListeners } = require("node:events");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const readline = require("node:readline");
const ojsd = require("../ojsd");
const { Client, Worker, OjsdError } = ojsd;

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

/** A logger that keeps what it is told. */
function recorder() {
  const lines = [];
  return { lines, info: (m) => lines.push(m), warn: (m) => lines.push(m) };
}

/** Record every FETCH and ACK any Client sends, as [wid, verb, payload]. */
function recordCommands(t) {
  const sent = [];
  const call = Client.prototype.call;
  Client.prototype.call = function (verb, payload) {
    if (verb === "FETCH" || verb === "ACK") sent.push([this.wid, verb, payload]);
    return call.call(this, verb, payload);
  };
  t.after(() => { Client.prototype.call = call; });
  return sent;
}

test("ackFetch takes the next job in the same round trip", async (t) => {
  const srv = await server();
  t.after(() => srv.close());
  const c = await Client.connect(srv.addr);
  const w = await Client.connect(srv.addr, { wid: "w-af" });
  t.after(() => { c.close(); w.close(); });
  const a = await c.push({ type: "t.a", queue: "af", args: [1] });
  const b = await c.push({ type: "t.a", queue: "af", args: [2] });
  const first = await w.fetch(["af"]);
  assert.equal(first.id, a.id);
  const next = await w.ackFetch(first.id, ["af"], { n: 1 });
  assert.deepEqual([next.id, next.state], [b.id, "active"]);
  assert.deepEqual((await c.job(a.id)).result, { n: 1 });
  assert.equal(await w.ackFetch(next.id, ["af"], undefined, { waitMs: 0 }), null, "no job left: null");
  assert.equal((await c.job(b.id)).state, "completed");
  // A refused ACK is the reply, and nothing is fetched.
  const d = await c.push({ type: "t.a", queue: "af" });
  await assert.rejects(w.ackFetch(a.id, ["af"], null, { waitMs: 0 }), (e) => e.code === "INVALID_STATE_TRANSITION");
  assert.equal((await c.job(d.id)).state, "available");
});

test("ackb completes a fetched batch in one round trip", async (t) => {
  const srv = await server();
  t.after(() => srv.close());
  const c = await Client.connect(srv.addr);
  const w = await Client.connect(srv.addr, { wid: "w-ab" });
  t.after(() => { c.close(); w.close(); });
  const ids = (await c.pushb([0, 1, 2].map(() => ({ type: "t.a", queue: "ab" })))).map((j) => j.id);
  const got = await w.fetch(["ab"], 3);
  assert.deepEqual(got.map((j) => j.id), ids);
  const reply = await w.ackb([[ids[0], { n: 1 }], ids[1], "0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b"]);
  assert.equal(reply.acked, 2);
  assert.deepEqual(reply.rejected.map((r) => [r.index, r.code]), [[2, "NOT_FOUND"]]);
  assert.deepEqual((await c.job(ids[0])).result, { n: 1 });
  assert.deepEqual(await Promise.all(ids.map(async (i) => (await c.job(i)).state)), ["completed", "completed", "active"]);
  assert.deepEqual(await w.ackb([]), { acked: 0, rejected: [] });
});

test("each ACK of a worker carries the next job, and HELLO names its queues", async (t) => {
  const srv = await server();
  t.after(() => srv.close());
  const c = await Client.connect(srv.addr);
  t.after(() => c.close());
  const jobs = [];
  for (let i = 0; i < 5; i++) jobs.push(await c.push({ type: "n.x", args: [i], queue: "n" }));
  const sent = recordCommands(t);
  const w = new Worker({ addr: srv.addr, queues: ["n"], beatMs: 200, logger: null });
  w.register("n.x", (i) => i * 10);
  const running = w.run({ signals: false });
  t.after(async () => { w.stop(); await running; });
  for (const j of jobs) await waitFor("the jobs", async () => (await c.job(j.id)).state === "completed");
  const ours = sent.filter(([wid]) => wid === w.wid).map(([, verb, p]) => [verb, p]);
  assert.deepEqual(ours.slice(0, 6).map(([v]) => v), ["FETCH", "ACK", "ACK", "ACK", "ACK", "ACK"]);
  assert.deepEqual(ours.slice(1, 6).map(([, p]) => p.id), jobs.map((j) => j.id));
  assert.ok(ours.slice(1, 6).every(([, p]) => JSON.stringify(p.fetch) === '["n"]'));
  const results = [];
  for (const j of jobs) results.push((await c.job(j.id)).result);
  assert.deepEqual(results, [0, 10, 20, 30, 40]);
  const me = (await c.call("WORKERS")).workers.find((x) => x.id === w.wid);
  assert.deepEqual([me.queues, me.concurrency, me.jobs_completed], [["n"], 1, 5]);
});

test("a stopping worker ACKs without taking a new job, and run() resolves to stopped", async (t) => {
  const srv = await server();
  t.after(() => srv.close());
  const c = await Client.connect(srv.addr);
  t.after(() => c.close());
  const first = await c.push({ type: "s.x", args: [1], queue: "s" });
  const second = await c.push({ type: "s.x", args: [2], queue: "s" });
  const sent = recordCommands(t);
  const w = new Worker({ addr: srv.addr, queues: ["s"], beatMs: 200, logger: null });
  w.register("s.x", (n) => { w.stop(); return n; }); // stop while the first job runs
  assert.equal(await w.run({ signals: false }), "stopped");
  assert.equal((await c.job(first.id)).state, "completed");
  assert.equal((await c.job(second.id)).state, "available");
  const acks = sent.filter(([wid, verb]) => wid === w.wid && verb === "ACK").map(([, , p]) => p);
  assert.deepEqual(acks, [{ id: first.id, result: 1 }]);
});

test("SIGTERM makes run() resolve to stopped", async (t) => {
  const srv = await server();
  t.after(() => srv.close());
  const script = `const { Worker } = require(${JSON.stringify(path.resolve(__dirname, "../ojsd"))});
    new Worker({ addr: ${JSON.stringify(srv.addr)}, beatMs: 100 }).run().then((s) => console.log("run ->", s));`;
  const child = spawn(process.execPath, ["-e", script], { stdio: ["ignore", "pipe", "inherit"] });
  t.after(() => child.kill("SIGKILL"));
  let out = "";
  const exited = new Promise((r) => child.once("exit", r));
  child.stdout.on("data", (d) => { out += d; });
  await waitFor("the worker to connect", () => out.includes("connected to ojsd"));
  child.kill("SIGTERM");
  await exited;
  assert.match(out, /run -> stopped/);
});

test("heartbeats leave no abort listeners behind", async (t) => {
  const srv = await server();
  t.after(() => srv.close());
  const warnings = [];
  const onWarning = (w) => warnings.push(w.name);
  process.on("warning", onWarning);
  t.after(() => process.off("warning", onWarning));
  const log = recorder();
  const w = new Worker({ addr: srv.addr, queues: ["hb"], beatMs: 5, logger: log });
  const running = w.run({ signals: false });
  const c = await Client.connect(srv.addr);
  t.after(() => c.close());
  let beats = 0;
  const beat = Client.prototype.beat;
  Client.prototype.beat = function (...a) { beats++; return beat.apply(this, a); };
  t.after(() => { Client.prototype.beat = beat; });
  await waitFor("50 heartbeats", () => beats >= 50);
  // One listener per loop that is sleeping at most (the beat loop here), not one per beat.
  assert.ok(getEventListeners(w.stopper.signal, "abort").length <= 2);
  w.stop();
  assert.equal(await running, "stopped");
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(warnings.filter((n) => n === "MaxListenersExceededWarning"), []);
  assert.deepEqual(log.lines.map((l) => l.split(" ")[0]), ["connected"]);
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
  const w = new Worker({ addr: srv.addr, queues: ["work"], beatMs: 200, logger: null });
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
  const w = new Worker({ addr: srv.addr, queues: ["q"], beatMs: 100, logger: null });
  w.register("t.x", () => "ran");
  const running = w.run({ signals: false });
  await waitFor("the worker to register", async () => (await c.call("WORKERS")).workers.some((x) => x.id === w.wid));
  await c.call("WORKER", `QUIET ${w.wid}`);
  assert.equal(await running, "quiet");
  const job = await c.push({ type: "t.x", queue: "q" });
  await new Promise((r) => setTimeout(r, 500));
  assert.equal((await c.job(job.id)).state, "available", "a quiet worker fetches nothing");

  const w2 = new Worker({ addr: srv.addr, queues: ["q"], beatMs: 100, logger: null });
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
  const log = recorder();
  const w = new Worker({ addr: srv.addr, queues: ["r"], beatMs: 200, logger: log });
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
  // Each change of connection state is logged once, whatever the number of connections
  // (a beat and a fetch one here) and of failed attempts.
  assert.deepEqual(log.lines.map((l) => l.split(" ")[0]), ["connected", "lost", "cannot", "connected"]);
});
