// A thin client and worker for ojsd's TCP protocol (protocol/PROTOCOL.md), using only
// Node's standard library.
//
//   const { Client, Worker } = require("ojsd-client");
//   const c = await Client.connect("127.0.0.1:7419");
//   await c.push({ type: "email.send", args: ["a@b.c"] });
//   const w = new Worker({ addr: "127.0.0.1:7419", queues: ["default"] });
//   w.register("email.send", async (to) => { ... });
//   await w.run();
"use strict";
const net = require("node:net");
const tls = require("node:tls");
const os = require("node:os");
const crypto = require("node:crypto");

const MAX_REPLY_BYTES = 64 << 20; // up to 1000 jobs of up to 1 MiB in one FETCH COUNT reply
const MAX_LINE_BYTES = 64 << 10;

class ProtocolError extends Error {}

/** A `-ERR CODE message` reply: the command was refused and nothing changed. */
class OjsdError extends Error {
  constructor(code, message) {
    super(`${code} ${message}`.trim());
    this.code = code;
    this.detail = message;
  }
}

/** sha256(password ++ salt), then sha256 of the raw digest iterations-1 more times (§2). */
function passwordHash(password, salt, iterations) {
  let h = crypto.createHash("sha256").update(password + salt).digest();
  for (let i = 1; i < Math.max(1, iterations | 0); i++) h = crypto.createHash("sha256").update(h).digest();
  return h.toString("hex");
}

function splitAddr(addr) {
  const i = addr.lastIndexOf(":");
  return { host: addr.slice(0, i) || "127.0.0.1", port: Number(addr.slice(i + 1)) };
}

/** One connection; commands may be pipelined, replies resolve in order. */
class Client {
  static async connect(addr = "127.0.0.1:7419", opts = {}) {
    const c = new Client(addr, opts);
    await c.open();
    return c;
  }

  constructor(addr, { password, wid, labels = [], timeoutMs = 10000, tls: tlsOpts, hello } = {}) {
    Object.assign(this, { addr, password, wid, labels, timeoutMs, tlsOpts, helloExtra: hello || {} });
    this.buf = Buffer.alloc(0);
    this.waiting = []; // {resolve, reject} per reply owed, in order
    this.closed = true;
  }

  open() {
    const { host, port } = splitAddr(this.addr);
    return new Promise((resolve, reject) => {
      const onConnect = async () => {
        sock.setTimeout(0);
        try {
          const hi = await this._next();
          if (typeof hi !== "string" || !hi.startsWith("HI")) throw new ProtocolError(`expected +HI, got ${hi}`);
          const greeting = JSON.parse(hi.slice(2).trim() || "{}");
          const hello = { ...this.helloExtra, v: 2, hostname: os.hostname(), pid: process.pid };
          if (this.wid) Object.assign(hello, { wid: this.wid, labels: this.labels });
          if (greeting.s !== undefined) {
            if (this.password === undefined) throw new OjsdError("UNAUTHENTICATED", "the server needs a password");
            hello.pwdhash = passwordHash(this.password, greeting.s, greeting.i || 1);
          }
          await this.call("HELLO", hello);
          resolve(this);
        } catch (e) {
          this.close();
          reject(e);
        }
      };
      const sock = this.tlsOpts
        ? tls.connect({ host, port, ...this.tlsOpts }, onConnect)
        : net.connect({ host, port }, onConnect);
      this.sock = sock;
      this.closed = false;
      sock.setTimeout(this.timeoutMs, () => sock.destroy(new ProtocolError("connect timed out")));
      // The server sends +HI before anything else; queue a reader for it.
      sock.on("data", (d) => this._data(d));
      sock.on("error", (e) => this._fail(e));
      sock.on("close", () => this._fail(new ProtocolError("the server closed the connection")));
      sock.once("error", reject);
    });
  }

  _next() {
    return new Promise((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      this._drain();
    });
  }

  _fail(err) {
    this.closed = true;
    for (const w of this.waiting.splice(0)) w.reject(err);
  }

  _data(d) {
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    this._drain();
  }

  /** Parse as many whole replies as are buffered and hand them to their waiters. */
  _drain() {
    while (this.waiting.length) {
      const eol = this.buf.indexOf("\r\n");
      if (eol < 0) {
        if (this.buf.length > MAX_LINE_BYTES) return this.sock.destroy(new ProtocolError("a reply line is too long"));
        return;
      }
      const line = this.buf.subarray(0, eol).toString();
      let value;
      let used = eol + 2;
      if (line[0] === "+") value = line.slice(1);
      else if (line[0] === "-") {
        const rest = line.slice(1).replace(/^ERR /, "");
        const sp = rest.indexOf(" ");
        value = new OjsdError(sp < 0 ? rest : rest.slice(0, sp), sp < 0 ? "" : rest.slice(sp + 1));
      } else if (line[0] === "$") {
        const n = Number(line.slice(1));
        if (n < 0) value = null;
        else {
          if (!(n <= MAX_REPLY_BYTES)) return this.sock.destroy(new ProtocolError(`a reply of ${n} bytes is too large`));
          if (this.buf.length < used + n + 2) return; // wait for the rest
          try {
            value = JSON.parse(this.buf.subarray(used, used + n).toString());
          } catch {
            return this.sock.destroy(new ProtocolError("a reply that is not JSON"));
          }
          used += n + 2;
        }
      } else return this.sock.destroy(new ProtocolError(`unexpected reply ${line.slice(0, 80)}`));
      this.buf = this.buf.subarray(used);
      const w = this.waiting.shift();
      value instanceof OjsdError ? w.reject(value) : w.resolve(value);
    }
  }

  /** Send one command; resolves to "OK" (a simple reply), a JSON value, or null. */
  call(verb, payload) {
    if (this.closed) return Promise.reject(new ProtocolError("the connection is closed"));
    let line = verb;
    if (typeof payload === "string") line += " " + payload;
    else if (payload !== undefined) line += " " + JSON.stringify(payload);
    const reply = this._next();
    this.sock.write(line + "\r\n");
    return reply;
  }

  push(job) { return this.call("PUSH", { args: [], ...job }); }
  pushb(jobs) { return this.call("PUSHB", jobs.map((j) => ({ args: [], ...j }))); }
  fetch(queues = ["default"], count) { return this.call("FETCH", queues.join(" ") + (count ? ` COUNT ${count}` : "")); }
  ack(id, result) { return this.call("ACK", result === undefined ? { id } : { id, result }); }
  /**
   * Acknowledge a job and take the next one from `queues` in the same round trip
   * (`ACK {"id", "result", "fetch": queues}`, PROTOCOL §5.2): resolves to the next job, or
   * null when none came within the server's wait (`waitMs`, at most `--fetch-wait-ms`). A
   * reply at all means the ACK is durable; a refused ACK rejects and fetches nothing.
   */
  ackFetch(id, queues, result, { waitMs } = {}) {
    const body = { id, fetch: [...queues] };
    if (result !== undefined) body.result = result;
    if (waitMs !== undefined) body.wait_ms = waitMs;
    return this.call("ACK", body);
  }
  /**
   * Acknowledge several jobs in one round trip (`ACKB`, PROTOCOL §5.2), each on its own:
   * a job id, or `[id, result]`. Resolves to `{acked, rejected: [{index, code, message}]}`;
   * the acknowledged ones are durable once it resolves.
   */
  ackb(acks) {
    const body = acks.map((a) => {
      if (typeof a === "string") return { id: a };
      const [id, result] = a;
      return result === undefined ? { id } : { id, result };
    });
    if (body.length === 0) return Promise.resolve({ acked: 0, rejected: [] });
    return this.call("ACKB", body);
  }
  fail(id, type, message, backtrace) {
    const error = { type, message };
    if (backtrace && backtrace.length) error.backtrace = backtrace.slice(0, 50);
    return this.call("FAIL", { id, error });
  }
  /** null while the worker should run on, else "quiet" or "terminate". */
  async beat(active = []) {
    const r = await this.call("BEAT", { wid: this.wid, active_job_ids: active });
    return r && typeof r === "object" ? r.state : null;
  }
  job(id) { return this.call("JOB", id); }
  info() { return this.call("INFO"); }

  close() {
    if (this.sock && !this.closed) {
      this.closed = true;
      this.sock.end("END\r\n");
    }
  }
}

/** Wait `ms`, or less if `signal` aborts; leaves no listener behind either way. */
const sleep = (ms, signal) => new Promise((r) => {
  if (signal?.aborted) return r();
  const onAbort = () => { clearTimeout(t); r(); };
  const t = setTimeout(() => { signal?.removeEventListener("abort", onAbort); r(); }, ms);
  signal?.addEventListener("abort", onAbort, { once: true });
});

const SERVER_DOWN = new Set(["BACKEND_UNAVAILABLE"]); // e.g. while the server shuts down

/**
 * Fetches from `queues`, runs the handler registered for each job type, ACKs or FAILs,
 * beats every `beatMs`, obeys quiet/terminate, stops on SIGTERM/SIGINT (finishing what it
 * holds), and reconnects with capped exponential backoff when the server goes away.
 *
 * Each fetching loop FETCHes only when it holds no job: a job that succeeded is
 * acknowledged with `ACK {"id", "result", "fetch": queues}`, whose reply is the next job
 * (one durable round trip per job). While stopping it ACKs without `fetch`. Connection
 * state changes (connected, lost, retrying) are logged once each through `logger`
 * (default `console`; `null` for silence).
 */
class Worker {
  constructor({ addr = "127.0.0.1:7419", queues = ["default"], password, wid, concurrency = 1, beatMs = 15000, labels = [], tls: tlsOpts, logger = console } = {}) {
    Object.assign(this, { addr, queues, password, concurrency, beatMs, labels, tlsOpts });
    this.wid = wid || `node-${os.hostname()}-${process.pid}-${crypto.randomBytes(3).toString("hex")}`;
    this.handlers = new Map();
    this.active = new Set();
    this.state = "running"; // then "quiet", "terminate" or "stopped"
    this.connection = "new"; // "connected", "lost" or "retrying" once it has tried
    this.logger = logger;
    this.stopper = new AbortController();
  }

  register(type, fn) { this.handlers.set(type, fn); return this; }
  /** Stop fetching, finish the jobs in hand, and make run() resolve to "stopped". */
  stop() {
    if (this.state === "running") this.state = "stopped";
    this.stopper.abort();
  }
  get stopping() { return this.stopper.signal.aborted; }

  /** Log a change of connection state once, however many connections see it. */
  _connectionIs(state, error) {
    const before = this.connection;
    if (state === before || (state === "retrying" && before === "connected") || (state === "lost" && before !== "connected")) return;
    this.connection = state;
    const where = `ojsd at ${this.addr}`;
    const why = error && (error.message || String(error));
    if (!this.logger) return;
    if (state === "connected") this.logger.info(`connected to ${where} as ${this.wid}`);
    else if (state === "lost") this.logger.warn(`lost the connection to ${where}: ${why}`);
    else this.logger.warn(`cannot reach ${where} (${why}); retrying with backoff`);
  }

  async _connect() {
    let delay = 100;
    while (!this.stopping) {
      try {
        const c = await Client.connect(this.addr, {
          password: this.password, wid: this.wid, labels: this.labels, tls: this.tlsOpts,
          hello: { queues: this.queues, concurrency: this.concurrency },
        });
        this._connectionIs("connected");
        return c;
      } catch (e) {
        if (e instanceof OjsdError && e.code === "UNAUTHENTICATED") throw e;
        this._connectionIs("retrying", e);
      }
      await sleep(delay * (0.5 + Math.random()), this.stopper.signal);
      delay = Math.min(delay * 2, 10000);
    }
    return null;
  }

  /** Run one job and settle it; resolves to the next job when its ACK carried one. */
  async _process(c, job) {
    this.active.add(job.id);
    try {
      const fn = this.handlers.get(job.type);
      if (!fn) {
        await c.fail(job.id, "UnknownJobType", `no handler for ${JSON.stringify(job.type)}`);
        return null;
      }
      let result;
      try {
        result = await fn(...(job.args || []));
      } catch (e) {
        const err = e instanceof Error ? e : new Error(String(e));
        await c.fail(job.id, err.name || "Error", err.message, String(err.stack || "").split("\n"));
        return null;
      }
      if (result === undefined) result = null;
      if (this.stopping) {
        await c.ack(job.id, result); // take no new job while stopping
        return null;
      }
      return await c.ackFetch(job.id, this.queues, result);
    } catch (e) {
      if (!(e instanceof OjsdError) || SERVER_DOWN.has(e.code)) throw e;
      // The job was refused (cancelled, its reservation expired, ...), not the connection.
      this.logger?.warn(`job ${job.id} could not be settled: ${e.message}`);
      return null;
    } finally {
      this.active.delete(job.id);
    }
  }

  async _fetchLoop() {
    let c = null;
    let job = null;
    // A job in hand is always run, even while stopping: it is ours until settled.
    while (job || !this.stopping) {
      try {
        c = c || (await this._connect());
        if (!c) break;
        job = job ? await this._process(c, job) : await c.fetch(this.queues);
      } catch (e) {
        if (e instanceof OjsdError && e.code === "UNAUTHENTICATED") throw e;
        this._connectionIs("lost", e);
        c?.close();
        c = null; // the server went away or refused us: reconnect with backoff
        job = null; // a job claimed but not settled goes back after its timeout
        await sleep(100 + Math.random() * 200, this.stopper.signal);
      }
    }
    c?.close();
  }

  async _beatLoop() {
    let c = null;
    let wait = 50;
    while (!this.stopping) {
      await sleep(wait, this.stopper.signal);
      if (this.stopping) break;
      try {
        c = c || (await this._connect());
        if (!c) break;
        const state = await c.beat([...this.active]);
        if (state === "quiet" || state === "terminate") {
          if (this.state === "running" || this.state === "quiet") this.state = state;
          this.stop();
        }
        wait = this.beatMs;
      } catch (e) {
        this._connectionIs("lost", e);
        c?.close();
        c = null;
        wait = 100;
      }
    }
    c?.close();
  }

  /**
   * Work until quiet, terminate, stop() or a signal; resolves once in-flight jobs finish, to
   * why it ended: "quiet", "terminate" or "stopped".
   */
  async run({ signals = true } = {}) {
    const onSignal = () => this.stop();
    if (signals) { process.on("SIGTERM", onSignal); process.on("SIGINT", onSignal); }
    try {
      const loops = [this._beatLoop()];
      for (let i = 0; i < this.concurrency; i++) loops.push(this._fetchLoop());
      await Promise.all(loops);
    } finally {
      if (signals) { process.off("SIGTERM", onSignal); process.off("SIGINT", onSignal); }
    }
    return this.state;
  }
}

module.exports = { Client, Worker, OjsdError, ProtocolError, passwordHash };
