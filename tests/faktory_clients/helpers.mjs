// Helpers for node.test.mjs: start an ojsd of our own, and a raw control connection to its
// OJS port (CLOCK ADVANCE, WORKER QUIET/TERMINATE, JOB). Nothing here speaks Faktory: the
// tests do that through the faktory-worker library.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';

const here = path.dirname(new URL(import.meta.url).pathname);
// OJSD_BIN: absolute, or relative to the repository root (run.sh exports it absolute).
const BIN = path.resolve(here, '..', '..', process.env.OJSD_BIN || 'target/debug/ojsd');

const live = new Set();
process.on('exit', () => { for (const p of live) { try { p.kill('SIGKILL'); } catch {} } });

function hostPort(addr) {
  const i = addr.lastIndexOf(':');
  return { host: addr.slice(0, i), port: Number(addr.slice(i + 1)) };
}

/** One ojsd process with its own data dir; `restart()` reuses the dir. */
export class Ojsd {
  constructor() {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ojsd-fk-node-'));
    this.proc = null;
  }

  static async start() {
    const s = new Ojsd();
    await s.spawn();
    return s;
  }

  async spawn() {
    const args = ['--listen', '127.0.0.1:0', '--faktory-listen', '127.0.0.1:0',
      '--http-listen', '127.0.0.1:0', '--data-dir', path.join(this.dir, 'db'),
      '--test-clock', '--fetch-wait-ms', '300', '--log-level', 'warn'];
    const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    live.add(proc);
    this.proc = proc;
    const rl = readline.createInterface({ input: proc.stdout });
    const addrs = await new Promise((resolve, reject) => {
      const found = {};
      const timer = setTimeout(() => reject(new Error('ojsd did not print its addresses')), 15000);
      proc.once('exit', (code) => { clearTimeout(timer); reject(new Error(`ojsd exited: ${code}`)); });
      rl.on('line', (line) => {
        let m;
        if ((m = /^ojsd listening on (\S+)/.exec(line))) found.ojs = m[1];
        else if ((m = /^ojsd http listening on (\S+)/.exec(line))) found.http = m[1];
        else if ((m = /^ojsd faktory listening on (\S+)/.exec(line))) found.faktory = m[1];
        if (found.ojs && found.faktory) { clearTimeout(timer); resolve(found); }
      });
    });
    proc.removeAllListeners('exit');
    proc.on('exit', () => live.delete(proc));
    this.ojsAddr = addrs.ojs;
    this.faktoryAddr = addrs.faktory;
    const { host, port } = hostPort(addrs.faktory);
    this.host = host;
    this.port = port;
  }

  /** Options for faktory-worker's Client / Worker. */
  get opts() { return { host: this.host, port: this.port }; }

  async kill9() {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const gone = new Promise((r) => p.once('exit', r));
    p.kill('SIGKILL');
    await gone;
  }

  async restart() { await this.kill9(); await this.spawn(); }

  async stop() {
    await this.kill9();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }

  /** A control connection to the OJS port. */
  async control() { return Control.connect(this.ojsAddr); }
}

/** A minimal RESP client for the OJS port. */
export class Control {
  static async connect(addr) {
    const c = new Control();
    const { host, port } = hostPort(addr);
    c.sock = net.connect(port, host);
    c.buf = Buffer.alloc(0);
    c.waiters = [];
    c.sock.on('data', (d) => { c.buf = Buffer.concat([c.buf, d]); c.pump(); });
    c.sock.on('error', (e) => { for (const w of c.waiters.splice(0)) w.reject(e); });
    const hi = await c.read();
    if (hi.type !== 'simple' || !hi.value.startsWith('HI')) throw new Error(`greeting ${JSON.stringify(hi)}`);
    const ok = await c.call('HELLO {"v":2}');
    if (ok.value !== 'OK') throw new Error(`HELLO: ${JSON.stringify(ok)}`);
    return c;
  }

  parse() {
    const nl = this.buf.indexOf('\r\n');
    if (nl < 0) return null;
    const line = this.buf.subarray(0, nl).toString();
    const t = line[0];
    if (t === '+' || t === '-') {
      this.buf = this.buf.subarray(nl + 2);
      return { type: t === '+' ? 'simple' : 'error', value: line.slice(1) };
    }
    if (t === '$') {
      const n = Number(line.slice(1));
      if (n < 0) { this.buf = this.buf.subarray(nl + 2); return { type: 'null', value: null }; }
      if (this.buf.length < nl + 2 + n + 2) return null;
      const value = this.buf.subarray(nl + 2, nl + 2 + n).toString();
      this.buf = this.buf.subarray(nl + 2 + n + 2);
      return { type: 'bulk', value };
    }
    throw new Error(`bad reply line ${line}`);
  }

  pump() {
    while (this.waiters.length) {
      const r = this.parse();
      if (!r) return;
      this.waiters.shift().resolve(r);
    }
  }

  read() {
    return new Promise((resolve, reject) => { this.waiters.push({ resolve, reject }); this.pump(); });
  }

  async call(line) {
    const p = this.read();
    this.sock.write(line + '\r\n');
    return p;
  }

  async ok(line) {
    const r = await this.call(line);
    if (r.type !== 'simple' || r.value !== 'OK') throw new Error(`${line}: ${JSON.stringify(r)}`);
  }

  advance(secs) { return this.ok(`CLOCK ADVANCE ${secs}`); }
  quiet(wid) { return this.ok(`WORKER QUIET ${wid}`); }
  terminate(wid) { return this.ok(`WORKER TERMINATE ${wid}`); }

  /** The OJS envelope of a job, or null when the server answers an error. */
  async job(id) {
    const r = await this.call(`JOB ${id}`);
    return r.type === 'bulk' ? JSON.parse(r.value) : null;
  }

  close() { this.sock.destroy(); }
}

/** The OJS id of a Faktory jid (PROTOCOL.md §15): SHA-256 of the jid shaped as a UUIDv7. */
export function ojsId(jid) {
  if (/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(jid)) return jid;
  const b = createHash('sha256').update(jid).digest().subarray(0, 16);
  b[6] = (b[6] & 0x0f) | 0x70;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Poll `fn` until it returns a truthy value or `ms` pass. */
export async function waitFor(fn, ms = 10000, what = 'condition') {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}
