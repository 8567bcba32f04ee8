// ojsd's Faktory port driven by the unmodified npm `faktory-worker` library.
// Each test starts its own ojsd (--test-clock) and moves time over the OJS port.
// Where faktory-worker has no API for a command (QUEUE ..., BEAT with current_state) the
// raw command goes through the library's own connection pool (`client.send([...])`).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import faktory from 'faktory-worker';
import { Ojsd, ojsId, sleep, waitFor } from './helpers.mjs';

const { Client } = faktory;

/** Start an ojsd, a faktory-worker Client on its Faktory port and a control connection. */
async function setup(t, clientOpts = {}) {
  const srv = await Ojsd.start();
  const client = new Client({ ...srv.opts, ...clientOpts });
  await client.connect();
  const ctl = await srv.control();
  t.after(async () => {
    ctl.close();
    await client.close().catch(() => {});
    await srv.stop();
  });
  return { srv, client, ctl };
}

const jobErr = (code, message) => Object.assign(new Error(message), { code });
const tasks = (info) => info.faktory.tasks;
const qsize = (info, q) => info.faktory.queues[q] ?? 0;

test('push, fetch, ack round-trips the job', async (t) => {
  const { client, ctl } = await setup(t);
  const job = client.job('Adder', 1, 'two', { three: 3 });
  job.custom = { trace: 'abc' };
  const jid = await job.push();
  assert.equal(qsize(await client.info(), 'default'), 1);
  const got = await client.fetch('default');
  assert.ok(got, 'FETCH returned a job');
  assert.equal(got.jid, jid);
  assert.equal(got.jobtype, 'Adder');
  assert.deepEqual(got.args, [1, 'two', { three: 3 }]);
  assert.equal(got.queue, 'default');
  assert.deepEqual(got.custom, { trace: 'abc' });
  assert.ok(got.enqueued_at && !Number.isNaN(Date.parse(got.enqueued_at)), 'enqueued_at is a time');
  const before = (await client.info()).faktory.total_processed;
  assert.equal(await client.ack(jid), 'OK');
  assert.equal(await client.fetch('default'), null);
  const info = await client.info();
  assert.equal(qsize(info, 'default'), 0);
  assert.equal(info.faktory.total_processed, before + 1, 'total_processed counts the ACK');
  assert.equal((await ctl.job(ojsId(jid)))?.state, 'completed');
});

test('fail: retried with Faktory backoff and a failure object', async (t) => {
  const { client, ctl } = await setup(t);
  const jid = await client.push({ jobtype: 'Flaky', args: [1], retry: 25 });
  assert.equal((await client.fetch('default')).jid, jid);
  assert.equal(await client.fail(jid, jobErr('MyError', 'boom')), 'OK');
  let info = await client.info();
  assert.equal(tasks(info).Retries.size, 1, 'the failed job is in the retry set');
  assert.equal(info.faktory.total_failures, 1);
  assert.equal(await client.fetch('default'), null, 'not fetchable before its backoff');
  await ctl.advance(14); // first backoff is 0^4 + 15 + rand(30) s: at least 15
  assert.equal(await client.fetch('default'), null, 'not fetchable 14 s after the failure');
  await ctl.advance(46);
  const again = await client.fetch('default');
  assert.ok(again, 'refetched 60 s after the failure');
  assert.equal(again.jid, jid);
  const f = again.failure;
  assert.ok(f, 'the refetched job carries failure');
  assert.equal(f.retry_count, 0);
  assert.equal(f.errtype, 'MyError');
  assert.equal(f.message, 'boom');
  assert.equal(f.remaining, 25);
  const delay = (Date.parse(f.next_at) - Date.parse(f.failed_at)) / 1000;
  assert.ok(delay >= 15 && delay < 45, `first retry delay ${delay}s is 15 + rand(30)`);
  // second failure: retry_count 1, next delay 1 + 15 + rand(30)*2 <= 74 s
  assert.equal(await client.fail(jid, jobErr('OtherError', 'bang')), 'OK');
  await ctl.advance(80);
  const third = await client.fetch('default');
  assert.ok(third, 'refetched after the second backoff');
  assert.equal(third.failure.retry_count, 1);
  assert.equal(third.failure.errtype, 'OtherError');
  assert.equal(third.failure.message, 'bang');
});

test('retry: 0 makes a failed job vanish', async (t) => {
  const { client, ctl } = await setup(t);
  const jid = await client.push({ jobtype: 'Once', args: [], retry: 0 });
  assert.equal((await client.fetch('default')).jid, jid);
  assert.equal(await client.fail(jid, jobErr('E', 'x')), 'OK');
  const info = await client.info();
  assert.equal(tasks(info).Retries.size, 0);
  assert.equal(tasks(info).Dead.size, 0);
  await client.dead.withJids(jid).requeue();
  await client.retries.withJids(jid).requeue();
  await ctl.advance(3600);
  assert.equal(await client.fetch('default'), null, 'the job never comes back');
});

test('retry: -1 sends a failed job straight to the dead set', async (t) => {
  const { client } = await setup(t);
  const jid = await client.push({ jobtype: 'Doomed', args: [], retry: -1 });
  assert.equal((await client.fetch('default')).jid, jid);
  assert.equal(await client.fail(jid, jobErr('E', 'x')), 'OK');
  const info = await client.info();
  assert.equal(tasks(info).Retries.size, 0);
  assert.equal(tasks(info).Dead.size, 1);
  assert.equal(await client.dead.withJids(jid).requeue(), 'OK');
  assert.equal(tasks(await client.info()).Dead.size, 0);
  const back = await client.fetch('default');
  assert.equal(back?.jid, jid, 'MUTATE requeue brings the dead job back');
});

test('a job scheduled with `at` waits for the clock', async (t) => {
  const { client, ctl } = await setup(t);
  const job = client.job('Later', 7);
  job.at = new Date(Date.now() + 3600 * 1000);
  const jid = await job.push();
  let info = await client.info();
  assert.equal(tasks(info).Scheduled.size, 1);
  assert.equal(qsize(info, 'default'), 0);
  assert.equal(await client.fetch('default'), null);
  await ctl.advance(1800);
  assert.equal(await client.fetch('default'), null, 'still scheduled half-way');
  await ctl.advance(1810);
  const got = await client.fetch('default');
  assert.equal(got?.jid, jid, 'fetchable once the clock passed `at`');
  assert.equal(tasks(await client.info()).Scheduled.size, 0);
});

test('reservation expiry counts as a ReservationExpired failure', async (t) => {
  const { client, ctl } = await setup(t);
  const jid = await client.push({ jobtype: 'Slow', args: [], reserve_for: 60 });
  assert.equal((await client.fetch('default')).jid, jid);
  await ctl.advance(61);
  const info = await client.info();
  assert.equal(tasks(info).Retries.size, 1, 'the expired job is in the retry set');
  assert.equal(qsize(info, 'default'), 0);
  await ctl.advance(60);
  const again = await client.fetch('default');
  assert.equal(again?.jid, jid);
  assert.equal(again.failure?.errtype, 'ReservationExpired');
  assert.equal(again.failure.retry_count, 0);
});

test('BEAT: quiet and terminate directives; a quiet worker fetches nothing', async (t) => {
  const wid = 'nodewid-quiet-1';
  const { srv, client, ctl } = await setup(t, { wid });
  assert.equal(await client.beat(), 'OK');
  await client.push({ jobtype: 'Held', args: [] });
  await ctl.quiet(wid);
  assert.equal(await client.beat(), 'quiet');
  assert.equal(await client.fetch('default'), null, 'a quiet worker gets $-1');
  assert.equal(qsize(await client.info(), 'default'), 1, 'the job is still enqueued');
  await ctl.terminate(wid);
  assert.equal(await client.beat(), 'terminate');
  // Raw BEAT: faktory-worker sends only {wid}; current_state is echoed back by Faktory 1.9.
  const wid2 = 'nodewid-state-2';
  const c2 = new Client({ ...srv.opts, wid: wid2 });
  await c2.connect();
  t.after(() => c2.close());
  const reply = await c2.send(['BEAT', JSON.stringify({ wid: wid2, current_state: 'quiet' })]);
  assert.deepEqual(JSON.parse(reply), { state: 'quiet' });
  assert.equal(await c2.fetch('default'), null, 'a worker that reported quiet gets $-1');
});

test('INFO: version, queue sizes, task sizes, totals', async (t) => {
  const { client } = await setup(t);
  await client.push({ jobtype: 'A', args: [], queue: 'alpha' });
  await client.push({ jobtype: 'A', args: [], queue: 'alpha' });
  await client.push({ jobtype: 'B', args: [], queue: 'beta' });
  const info = await client.info();
  const m = /^(\d+)\.(\d+)\.(\d+)/.exec(info.server.faktory_version);
  assert.ok(m, `faktory_version ${info.server.faktory_version} is semver`);
  assert.ok(Number(m[1]) === 1 && Number(m[2]) >= 8, 'faktory_version >= 1.8');
  assert.equal(qsize(info, 'alpha'), 2);
  assert.equal(qsize(info, 'beta'), 1);
  assert.equal(info.faktory.total_enqueued, 3);
  assert.equal(info.faktory.total_queues, Object.keys(info.faktory.queues).length);
  assert.equal(typeof info.server_utc_time, 'string');
  assert.equal(typeof info.server.uptime, 'number');
  assert.equal(typeof info.server.connections, 'number');
  for (const k of ['Busy', 'Dead', 'Retries', 'Scheduled', 'Workers']) {
    assert.equal(typeof tasks(info)[k]?.size, 'number', `tasks.${k}.size`);
  }
});

test('FLUSH clears queues, scheduled, retries and dead', async (t) => {
  const { client } = await setup(t);
  await client.push({ jobtype: 'A', args: [], queue: 'q1' });
  await client.push({ jobtype: 'A', args: [], at: new Date(Date.now() + 3600e3).toISOString() });
  const dead = await client.push({ jobtype: 'D', args: [], retry: -1 });
  const retry = await client.push({ jobtype: 'R', args: [] });
  for (const jid of [dead, retry]) {
    assert.ok(await client.fetch('default'));
    await client.fail(jid, jobErr('E', 'x'));
  }
  assert.equal(await client.flush(), 'OK');
  const info = await client.info();
  const queued = Object.values(info.faktory.queues).reduce((a, b) => a + b, 0);
  assert.equal(queued, 0, `queues after FLUSH: ${JSON.stringify(info.faktory.queues)}`);
  assert.equal(tasks(info).Scheduled.size, 0);
  assert.equal(tasks(info).Retries.size, 0);
  assert.equal(tasks(info).Dead.size, 0);
  assert.equal(await client.fetch('q1', 'default'), null);
});

test('MUTATE on scheduled and dead: kill, requeue, discard by jids, jobtype, regexp', async (t) => {
  const { client } = await setup(t);
  const at = new Date(Date.now() + 3600e3).toISOString();
  const a = await client.push({ jobtype: 'Alpha', args: ['plain'], at });
  const b = await client.push({ jobtype: 'Beta', args: ['plain'], at });
  const c = await client.push({ jobtype: 'Gamma', args: ['needle-xyz'], at });
  const d = await client.push({ jobtype: 'Delta', args: ['plain'], at });
  assert.equal(tasks(await client.info()).Scheduled.size, 4);
  assert.equal(await client.scheduled.withJids(a).kill(), 'OK');
  let info = await client.info();
  assert.equal(tasks(info).Scheduled.size, 3);
  assert.equal(tasks(info).Dead.size, 1, 'kill moved the job to dead');
  assert.equal(await client.scheduled.ofType('Beta').requeue(), 'OK');
  info = await client.info();
  assert.equal(tasks(info).Scheduled.size, 2);
  assert.equal(qsize(info, 'default'), 1);
  assert.equal((await client.fetch('default'))?.jid, b, 'requeue by jobtype enqueued Beta');
  assert.equal(await client.scheduled.matching('*needle-xyz*').discard(), 'OK');
  info = await client.info();
  assert.equal(tasks(info).Scheduled.size, 1, 'discard by regexp removed Gamma only');
  assert.equal(tasks(info).Dead.size, 1, 'discard does not kill');
  assert.equal(await client.dead.withJids(a).requeue(), 'OK');
  assert.equal(tasks(await client.info()).Dead.size, 0);
  assert.equal((await client.fetch('default'))?.jid, a, 'requeue from dead enqueued Alpha');
  assert.equal(await client.scheduled.clear(), 'OK');
  assert.equal(tasks(await client.info()).Scheduled.size, 0, 'clear emptied scheduled');
  void c; void d;
});

test('MUTATE on retries and dead: kill, discard, requeue, clear', async (t) => {
  const { client } = await setup(t);
  const jids = [];
  for (const [type, arg] of [['K', 'one'], ['D', 'two'], ['R', 'needle-abc'], ['S', 'four']]) {
    jids.push(await client.push({ jobtype: type, args: [arg] }));
  }
  for (const jid of jids) {
    assert.equal((await client.fetch('default'))?.jid, jid);
    await client.fail(jid, jobErr('E', 'x'));
  }
  assert.equal(tasks(await client.info()).Retries.size, 4);
  assert.equal(await client.retries.ofType('K').kill(), 'OK');
  let info = await client.info();
  assert.equal(tasks(info).Retries.size, 3);
  assert.equal(tasks(info).Dead.size, 1);
  assert.equal(await client.retries.withJids(jids[1]).discard(), 'OK');
  assert.equal(tasks(await client.info()).Retries.size, 2);
  assert.equal(await client.retries.matching('*needle-abc*').requeue(), 'OK');
  info = await client.info();
  assert.equal(tasks(info).Retries.size, 1);
  const r = await client.fetch('default');
  assert.equal(r?.jid, jids[2], 'requeue by regexp enqueued R at once');
  assert.equal(r.failure?.errtype, 'E', 'the requeued job keeps its failure');
  assert.equal(await client.retries.clear(), 'OK');
  assert.equal(tasks(await client.info()).Retries.size, 0);
  assert.equal(await client.dead.ofType('K').discard(), 'OK');
  assert.equal(tasks(await client.info()).Dead.size, 0);
  const x = await client.push({ jobtype: 'X', args: [], retry: -1 });
  await client.fetch('default');
  await client.fail(x, jobErr('E', 'x'));
  assert.equal(tasks(await client.info()).Dead.size, 1);
  assert.equal(await client.dead.clear(), 'OK');
  assert.equal(tasks(await client.info()).Dead.size, 0);
  assert.equal(await client.fetch('default'), null, 'nothing left to fetch');
});

test('QUEUE PAUSE, RESUME, REMOVE, LATENCY (raw: faktory-worker has no QUEUE API)', async (t) => {
  const { client, ctl } = await setup(t);
  const j1 = await client.push({ jobtype: 'P', args: [], queue: 'paused_q' });
  assert.equal(await client.send(['QUEUE', 'PAUSE', 'paused_q']), 'OK');
  assert.equal(await client.fetch('paused_q'), null, 'a paused queue is skipped');
  assert.equal(await client.send(['QUEUE', 'RESUME', 'paused_q']), 'OK');
  assert.equal((await client.fetch('paused_q'))?.jid, j1);
  const j2 = await client.push({ jobtype: 'P', args: [], queue: 'paused_q' });
  assert.equal(await client.send(['QUEUE', 'PAUSE', '*']), 'OK');
  assert.equal(await client.fetch('paused_q'), null, 'PAUSE * pauses every queue');
  assert.equal(await client.send(['QUEUE', 'RESUME', '*']), 'OK');
  assert.equal((await client.fetch('paused_q'))?.jid, j2);
  await client.push({ jobtype: 'G', args: [], queue: 'gone_q' });
  await client.push({ jobtype: 'G', args: [], queue: 'gone_q' });
  await client.push({ jobtype: 'K', args: [], queue: 'kept_q' });
  await ctl.advance(10);
  const lat = JSON.parse(await client.send(['QUEUE', 'LATENCY', 'gone_q', 'kept_q']));
  assert.equal(typeof lat.gone_q, 'number');
  assert.ok(lat.gone_q >= 9, `latency of gone_q ${lat.gone_q} s counts the 10 s waited`);
  assert.equal(typeof lat.kept_q, 'number');
  assert.equal(await client.send(['QUEUE', 'REMOVE', 'gone_q']), 'OK');
  const info = await client.info();
  assert.ok(!('gone_q' in info.faktory.queues), 'REMOVE forgets the queue');
  assert.equal(qsize(info, 'kept_q'), 1, 'other queues untouched');
  assert.equal(await client.fetch('gone_q'), null);
});

test('PUSHB: the bad job is reported by jid, the others are enqueued', async (t) => {
  const { client } = await setup(t);
  const good1 = client.job('Bulk', 1);
  const bad = client.job('Bulk', 2);
  bad.jid = 'short';
  const good2 = client.job('Bulk', 3);
  const rejected = await client.pushBulk([good1, bad, good2]);
  assert.deepEqual(Object.keys(rejected), ['short']);
  assert.equal(typeof rejected.short.reason, 'string');
  assert.ok(rejected.short.reason.length > 0);
  assert.equal(qsize(await client.info(), 'default'), 2);
  const got = [(await client.fetch('default'))?.jid, (await client.fetch('default'))?.jid];
  assert.deepEqual(got.sort(), [good1.jid, good2.jid].sort());
  assert.deepEqual(await client.pushBulk([client.job('Bulk', 4)]), {}, 'all accepted: {}');
});

test('queue and jobtype names with capitals and _ round-trip', async (t) => {
  const { client } = await setup(t);
  const jid = await client.push({ jobtype: 'SendEmail_Job', args: ['x'], queue: 'Critical_Q' });
  const info = await client.info();
  assert.equal(info.faktory.queues.Critical_Q, 1, `INFO queues: ${JSON.stringify(info.faktory.queues)}`);
  assert.deepEqual(Object.keys(info.faktory.queues).filter((q) => /critical/i.test(q)), ['Critical_Q']);
  const got = await client.fetch('Critical_Q');
  assert.equal(got?.jid, jid);
  assert.equal(got.jobtype, 'SendEmail_Job');
  assert.equal(got.queue, 'Critical_Q');
});

test('queue names that differ only in case are different queues', async (t) => {
  const { client } = await setup(t);
  const upper = await client.push({ jobtype: 'T', args: [], queue: 'Mixed_Q' });
  await client.push({ jobtype: 'T', args: [], queue: 'mixed_q' });
  const info = await client.info();
  assert.equal(qsize(info, 'Mixed_Q'), 1);
  assert.equal(qsize(info, 'mixed_q'), 1);
  assert.equal((await client.fetch('Mixed_Q'))?.jid, upper);
  assert.equal(await client.fetch('Mixed_Q'), null, 'mixed_q job not handed out for Mixed_Q');
});

test('ACK by jid after kill -9 and restart completes the job', async (t) => {
  const srv = await Ojsd.start();
  t.after(() => srv.stop());
  const c1 = new Client(srv.opts);
  const jid = await c1.push({ jobtype: 'Durable', args: [42] });
  assert.equal((await c1.fetch('default'))?.jid, jid);
  // A FETCH reply leaves before its claim is on disk (PROTOCOL.md 4.1): a kill right after
  // it may lose the claim, and the job is then simply available again, never handed out.
  // A later acknowledged write makes the claim durable (batches commit in order), which is
  // the case this test is about.
  await c1.push({ jobtype: 'Marker', args: [], queue: 'marker' });
  await c1.close().catch(() => {});
  await srv.restart(); // SIGKILL, then start on the same data dir
  const c2 = new Client(srv.opts);
  t.after(() => c2.close());
  assert.equal(await c2.ack(jid), 'OK');
  const ctl = await srv.control();
  t.after(() => ctl.close());
  assert.equal((await ctl.job(ojsId(jid)))?.state, 'completed');
  await ctl.advance(3600); // past the 1800 s reservation: the job must not come back
  assert.equal(await c2.fetch('default'), null);
  assert.equal(tasks(await c2.info()).Retries.size, 0);
});

test('faktory.work(): a registered job function processes jobs end to end', async (t) => {
  const srv = await Ojsd.start();
  t.after(() => srv.stop());
  const ctl = await srv.control();
  t.after(() => ctl.close());
  const client = new Client(srv.opts);
  t.after(() => client.close());
  const seen = [];
  const f = faktory.create();
  f.register('Adder', async (a, b) => { seen.push(a + b); });
  let breaks = 0;
  f.register('Breaker', async () => { breaks += 1; throw jobErr('BrokeError', 'it broke'); });
  const jids = [];
  for (let i = 0; i < 4; i++) jids.push(await client.push({ jobtype: 'Adder', args: [i, 10] }));
  const broken = await client.push({ jobtype: 'Breaker', args: [] });
  const wid = 'nodeworker-e2e';
  const worker = await f.work({ ...srv.opts, wid, concurrency: 2, beatInterval: 0.2, queues: ['default'] });
  try {
    await waitFor(() => seen.length === 4, 10000, 'four Adder jobs');
    assert.deepEqual([...seen].sort(), [10, 11, 12, 13]);
    await waitFor(async () => tasks(await client.info()).Retries.size === 1, 10000, 'Breaker in retries');
    for (const jid of jids) {
      await waitFor(async () => (await ctl.job(ojsId(jid)))?.state === 'completed', 5000, `ACK of ${jid}`);
    }
    // 60 s in steps, so that the worker's 0.2 s heartbeats keep it alive on the engine clock
    for (let i = 0; i < 4; i++) { await ctl.advance(15); await sleep(300); }
    // the worker refetches the failed job: it fails again with retry_count 1
    await waitFor(() => breaks >= 2, 10000, 'Breaker refetched after its backoff');
    await waitFor(async () => tasks(await client.info()).Retries.size === 1, 10000, 'Breaker back in retries');
    void broken;
    // quiet through BEAT: the worker stops fetching
    await ctl.quiet(wid);
    await waitFor(() => worker.quieted === true, 5000, 'worker quieted by BEAT');
    await sleep(700); // let an in-flight FETCH come back empty
    const late = await client.push({ jobtype: 'Adder', args: [100, 0] });
    await sleep(1000);
    assert.equal(seen.includes(100), false, 'a quiet worker runs nothing new');
    assert.equal((await ctl.job(ojsId(late)))?.state, 'available', 'the late job is still enqueued');
  } finally {
    await f.stop();
  }
});
