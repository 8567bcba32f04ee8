#!/usr/bin/env node
// The ojsd-bench workload against Redis peers, for bench/compare.sh.
//
//   node peer-bench.js --kind bullmq|list --port 6379 --jobs N --producers P --workers C
//                      [--inflight K] [--batch B] [--rate R]
//
// --inflight K: each producer connection keeps K adds in flight (pipelined on its one
//   connection, as a BullMQ app adding from many requests does); default 1.
// --batch B (list only): LPUSH of B values per command, and each consumer takes up to B
//   per command with BLMPOP (RIGHT, COUNT B; Redis >= 7); default 1 (LPUSH / BRPOP).
// --rate R: offered load, R jobs/s over all producers, each pacing its commands to its
//   share on a fixed schedule (a late command is sent at once, so the average holds), as
//   ojsd-bench --rate does; default: as fast as possible.
// kind=bullmq: P Queue instances (one connection each) call Queue.add one job at a time;
//   Worker instances (BULL_WORKER_INSTANCES, default 1) share `concurrency` C between them.
//   A job counts as done at the Worker's `completed` event (BullMQ's ACK: moveToFinished).
// kind=list: a bare Redis list, P connections LPUSH one job at a time, C connections each
//   BRPOP one at a time. A job counts as done when BRPOP returns it (there is no ACK).
// Each job carries ~300 bytes of args, its sequence number and the producer's send time.
// Pickup latency (latency_ms) is measured as ojsd-bench measures it: from the send time
// written into the job when its command is built (just before it is written to the socket)
// to the moment the consumer's BRPOP/BLMPOP reply (bullmq: the processor call) has been
// received, before the job is parsed. Both clocks are the same wall clock on one machine.
// latency_after_push_reply_ms counts the same pickups from the moment the producer had the
// LPUSH (bullmq: add) reply instead, 0 when the consumer had the job first, as ojsd-bench.
// Producers and consumers run in two child processes (Node is single-threaded; ojsd-bench
// uses threads), started together; the parent prints one JSON object.
// Modules come from NODE_PATH (compare.sh points it at bench/peers/node_modules).
'use strict';

const { fork } = require('child_process');
const { performance } = require('perf_hooks');

function parseArgs(argv) {
  const o = { kind: 'list', port: 6379, jobs: 10000, producers: 16, workers: 16, payload: 300, timeout: 600, inflight: 1, batch: 1, rate: 0, role: 'main' };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '');
    o[k] = ['kind', 'role'].includes(k) ? argv[i + 1] : Number(argv[i + 1]);
  }
  return o;
}

const opts = parseArgs(process.argv.slice(2));
const nowMs = () => performance.timeOrigin + performance.now(); // wall clock, sub-ms
const QUEUE = 'bench';
const LIST = 'bench:list';

function padding(payload) {
  const fixed = JSON.stringify([123456, { user_id: 123456, email: 'user123456@example.com', template: 'welcome_email', locale: 'en-US', plan: 'pro', trial: false }, '']).length;
  const words = 'lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod ';
  let s = '';
  while (s.length < payload - fixed) s += words;
  return s.slice(0, Math.max(0, payload - fixed));
}

function job(seq, pad) {
  return {
    args: [seq, { user_id: seq, email: `user${seq}@example.com`, template: 'welcome_email', locale: 'en-US', plan: 'pro', trial: false }, pad],
    meta: { bench_seq: seq, bench_ts: nowMs() },
  };
}

function share(n, p, i) {
  return [Math.floor((n * i) / p), Math.floor((n * (i + 1)) / p)];
}

async function producerRole() {
  const pad = padding(opts.payload);
  const conns = [];
  if (opts.kind === 'bullmq') {
    const { Queue } = require('bullmq');
    for (let i = 0; i < opts.producers; i++) {
      const q = new Queue(QUEUE, { connection: { host: '127.0.0.1', port: opts.port } });
      await q.waitUntilReady();
      conns.push({ send: (ds) => (ds.length === 1 ? q.add('bench.work', ds[0]) : q.addBulk(ds.map((d) => ({ name: 'bench.work', data: d })))), close: () => q.close() });
    }
  } else {
    const Redis = require('ioredis');
    for (let i = 0; i < opts.producers; i++) {
      const r = new Redis({ host: '127.0.0.1', port: opts.port });
      await r.ping();
      conns.push({ send: (ds) => r.lpush(LIST, ...ds.map((d) => JSON.stringify(d))), close: () => r.quit() });
    }
  }
  process.send({ ready: true });
  await new Promise((res) => process.once('message', res));
  let pushed = 0;
  const replyAt = new Float64Array(opts.jobs);
  const inflight = Math.max(1, opts.inflight);
  const unit = Math.max(1, opts.batch);
  // Milliseconds between two commands of one producer at the offered rate.
  const interval = opts.rate > 0 ? (unit * opts.producers * 1000) / opts.rate : 0;
  const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
  await Promise.all(conns.map(async (c, i) => {
    const [from, to] = share(opts.jobs, opts.producers, i);
    let next = from, sent = 0;
    const t0 = performance.now();
    await Promise.all(Array.from({ length: inflight }, async () => {
      while (next < to) {
        if (interval) {
          const wait = t0 + interval * sent++ - performance.now();
          if (wait > 0) await sleep(wait);
        }
        const s = next;
        const e = Math.min(to, s + unit);
        next = e;
        const ds = [];
        for (let k = s; k < e; k++) ds.push(job(k, pad));
        await c.send(ds);
        const at = nowMs();
        for (let k = s; k < e; k++) replyAt[k] = at;
        pushed += e - s;
      }
    }));
  }));
  process.send({ pushDone: nowMs(), pushed, replyAt: Array.from(replyAt) });
  await Promise.all(conns.map((c) => c.close()));
}

async function consumerRole() {
  const seen = new Uint8Array(opts.jobs);
  const lat = new Float64Array(opts.jobs);
  const gotAt = new Float64Array(opts.jobs);
  let done = 0, dup = 0, foreign = 0, nlat = 0, finished = false;
  let finish;
  const allDone = new Promise((res) => { finish = res; });
  const take = (data, got) => {
    const seq = data && data.meta ? data.meta.bench_seq : undefined;
    if (typeof seq !== 'number' || seq < 0 || seq >= opts.jobs) { foreign++; return; }
    const t = got || nowMs();
    if (nlat < lat.length) lat[nlat++] = t - data.meta.bench_ts;
    if (!seen[seq]) gotAt[seq] = t;
    if (seen[seq]++) dup++;
  };
  const completeOne = () => {
    done++;
    if (done === opts.jobs && !finished) { finished = true; finish(nowMs()); }
  };
  let start, stop;
  if (opts.kind === 'bullmq') {
    const { Worker } = require('bullmq');
    const instances = Math.max(1, Number(process.env.BULL_WORKER_INSTANCES || 1));
    const workers = [];
    start = () => {
      for (let i = 0; i < instances; i++) {
        const [a, b] = share(opts.workers, instances, i);
        const w = new Worker(QUEUE, async (j) => { take(j.data, nowMs()); }, {
          connection: { host: '127.0.0.1', port: opts.port },
          concurrency: Math.max(1, b - a),
        });
        w.on('completed', completeOne);
        w.on('error', (e) => console.error('worker error', e.message));
        workers.push(w);
      }
    };
    stop = () => Promise.all(workers.map((w) => w.close(true)));
  } else {
    const Redis = require('ioredis');
    const conns = [];
    for (let i = 0; i < opts.workers; i++) {
      const r = new Redis({ host: '127.0.0.1', port: opts.port });
      await r.ping();
      conns.push(r);
    }
    start = () => {
      for (const r of conns) {
        (async () => {
          while (!finished) {
            if (opts.batch > 1) {
              const res = await r.call('BLMPOP', 1, 1, LIST, 'RIGHT', 'COUNT', opts.batch);
              const got = nowMs();
              if (!res) continue;
              for (const v of res[1]) { take(JSON.parse(v), got); completeOne(); }
              continue;
            }
            const res = await r.brpop(LIST, 1);
            const got = nowMs();
            if (!res) continue;
            take(JSON.parse(res[1]), got);
            completeOne();
          }
        })().catch((e) => { if (!finished) console.error('consumer error', e.message); });
      }
    };
    stop = () => Promise.all(conns.map((r) => r.disconnect()));
  }
  process.send({ ready: true });
  await new Promise((res) => process.once('message', res));
  start();
  const end = await allDone;
  const sorted = Array.from(lat.subarray(0, nlat)).sort((a, b) => a - b);
  const pct = (p) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] : 0);
  let missing = 0;
  for (let i = 0; i < opts.jobs; i++) if (!seen[i]) missing++;
  process.send({
    end, dup, missing, foreign, gotAt: Array.from(gotAt),
    latency_ms: { p50: pct(50), p90: pct(90), p99: pct(99), max: sorted[sorted.length - 1] || 0 },
  });
  await stop();
}

async function main() {
  if (opts.role === 'producer') return producerRole();
  if (opts.role === 'consumer') return consumerRole();
  const args = process.argv.slice(2);
  const cons = fork(__filename, [...args, '--role', 'consumer']);
  const prod = fork(__filename, [...args, '--role', 'producer']);
  const killAll = () => { cons.kill('SIGKILL'); prod.kill('SIGKILL'); };
  const timer = setTimeout(() => { console.error('peer-bench: timed out'); killAll(); process.exit(1); }, opts.timeout * 1000);
  // A child that dies before its two messages (ready, result) fails the run at once (a
  // crash, a missing module) instead of leaving the parent waiting for the timeout.
  for (const [name, child] of [['consumer', cons], ['producer', prod]]) {
    let messages = 0;
    child.on('message', () => { messages++; });
    child.once('exit', (code) => {
      if (messages < 2) { console.error(`peer-bench: ${name} exited (${code}) before reporting`); killAll(); process.exit(1); }
    });
  }
  const next = (child) => new Promise((res) => child.once('message', res));
  await Promise.all([next(cons), next(prod)]);
  const t0 = nowMs();
  const consDone = next(cons);
  const prodDone = next(prod);
  cons.send('go');
  prod.send('go');
  const [p, c] = await Promise.all([prodDone, consDone]);
  clearTimeout(timer);
  const r3 = (x) => Math.round(x * 1000) / 1000;
  const after = [];
  for (let i = 0; i < opts.jobs; i++) {
    if (p.replyAt[i] && c.gotAt[i]) after.push(Math.max(0, c.gotAt[i] - p.replyAt[i]));
  }
  after.sort((a, b) => a - b);
  const pa = (q) => (after.length ? after[Math.min(after.length - 1, Math.ceil((q / 100) * after.length) - 1)] : 0);
  const out = {
    kind: opts.kind, jobs: opts.jobs, producers: opts.producers, workers: opts.workers, inflight: opts.inflight,
    batch: opts.batch, rate_offered: opts.rate || null,
    jobs_per_s: r3(opts.jobs / ((c.end - t0) / 1000)),
    push_per_s: r3(p.pushed / ((p.pushDone - t0) / 1000)),
    elapsed_s: r3((c.end - t0) / 1000),
    latency_ms: Object.fromEntries(Object.entries(c.latency_ms).map(([k, v]) => [k, r3(v)])),
    latency_after_push_reply_ms: { p50: r3(pa(50)), p90: r3(pa(90)), p99: r3(pa(99)), max: r3(after[after.length - 1] || 0), samples: after.length },
    exactly_once: { ok: c.dup === 0 && c.missing === 0, duplicates: c.dup, missing: c.missing, foreign: c.foreign },
  };
  console.log(JSON.stringify(out));
  setTimeout(() => { killAll(); process.exit(out.exactly_once.ok ? 0 : 1); }, 2000).unref();
  await Promise.all([new Promise((r) => cons.once('exit', r)), new Promise((r) => prod.once('exit', r))]);
  process.exit(out.exactly_once.ok ? 0 : 1);
}

main().catch((e) => { console.error(e); process.exit(1); });
