"""ojsd's Faktory port driven by the unmodified PyPI `faktory` library (faktory_worker_python).

Each test starts its own ojsd (--test-clock) and moves time over the OJS port.
The library's API: Client.queue (PUSH), Connection.fetch (FETCH), Worker (ACK and FAIL when
a registered task returns or raises, BEAT via Worker.heartbeat, run()). It has no call for
INFO, FLUSH, MUTATE, QUEUE, PUSHB, or a standalone ACK; those go as raw commands through the
library's own Connection (`reply()` + `get_message()`), see `raw()`.
"""

import hashlib
import json
import logging
import os
import sys
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import uuid
from datetime import datetime, timedelta, timezone

import faktory
from faktory._proto import Connection

# The library logs every failing task with a traceback: the failures here are on purpose.
logging.getLogger("faktory").setLevel(logging.CRITICAL)

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.join(HERE, "..", "..", os.environ.get("OJSD_BIN", "target/debug/ojsd"))


class Ojsd:
    """One ojsd process with its own data dir; restart() reuses the dir."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ojsd-fk-py-")
        self.proc = None
        self.spawn()

    def spawn(self):
        args = [BIN, "--listen", "127.0.0.1:0", "--faktory-listen", "127.0.0.1:0",
                "--http-listen", "127.0.0.1:0", "--data-dir", os.path.join(self.dir, "db"),
                "--test-clock", "--fetch-wait-ms", "300", "--log-level", "warn"]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        found = {}
        deadline = time.time() + 15
        while not ("ojs" in found and "faktory" in found):
            if time.time() > deadline:
                raise RuntimeError("ojsd did not print its addresses")
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("ojsd exited: %s" % self.proc.wait())
            for key, prefix in (("ojs", "ojsd listening on "), ("faktory", "ojsd faktory listening on ")):
                if line.startswith(prefix):
                    found[key] = line[len(prefix):].strip()
        # keep draining stdout so the server never blocks on a full pipe
        self.drain = threading.Thread(target=self.proc.stdout.read, daemon=True)
        self.drain.start()
        self.ojs_addr = found["ojs"]
        self.url = "tcp://" + found["faktory"]

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc and not self.proc.stdout.closed:
            self.drain.join(5)
            self.proc.stdout.close()

    def restart(self):
        self.kill9()
        self.spawn()

    def stop(self):
        self.kill9()
        shutil.rmtree(self.dir, ignore_errors=True)


class Control:
    """A minimal RESP client for the OJS port (CLOCK ADVANCE, WORKER QUIET/TERMINATE, JOB)."""

    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.f = self.sock.makefile("rb")
        assert self.read().startswith("HI"), "greeting"
        assert self.call('HELLO {"v":2}') == "OK"

    def read(self):
        line = self.f.readline().decode().rstrip("\r\n")
        if line[0] in "+-":
            return line[1:] if line[0] == "+" else ("-" + line[1:])
        n = int(line[1:])
        if n < 0:
            return None
        data = self.f.read(n + 2)[:n]
        return data.decode()

    def call(self, line):
        self.sock.sendall((line + "\r\n").encode())
        return self.read()

    def ok(self, line):
        r = self.call(line)
        assert r == "OK", "%s: %r" % (line, r)

    def advance(self, secs):
        self.ok("CLOCK ADVANCE %s" % secs)

    def job(self, jid):
        r = self.call("JOB " + ojs_id(jid))
        return json.loads(r) if r and r.startswith("{") else None

    def close(self):
        self.sock.close()


def ojs_id(jid):
    """The OJS id of a Faktory jid (PROTOCOL.md §15)."""
    if re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", jid):
        return jid
    b = bytearray(hashlib.sha256(jid.encode()).digest()[:16])
    b[6] = (b[6] & 0x0F) | 0x70
    b[8] = (b[8] & 0x3F) | 0x80
    return str(uuid.UUID(bytes=bytes(b)))


def raw(conn, cmd, payload=None):
    """A raw command through the library's Connection; returns the reply ('OK', 'ERR ...',
    a bulk string, or '' for $-1). MUTATE needs compact JSON: pass a str payload."""
    conn.reply(cmd, payload)
    return next(conn.get_message())


def compact(obj):
    return json.dumps(obj, separators=(",", ":"))


def in_future(secs):
    return (datetime.now(timezone.utc) + timedelta(seconds=secs)).isoformat().replace("+00:00", "Z")


class MyError(Exception):
    pass


def failing(*_args):
    raise MyError("x")


class FaktoryPy(unittest.TestCase):
    def setUp(self):
        self.srv = Ojsd()
        self.addCleanup(self.srv.stop)
        self.client = faktory.Client(faktory=self.srv.url, timeout=10)
        self.client.connect()
        self.addCleanup(self.client.disconnect)
        self.conn = self.client.faktory  # the library's Connection
        self.ctl = Control(self.srv.ojs_addr)
        self.addCleanup(self.ctl.close)

    # helpers -------------------------------------------------------------
    def push(self, task, args=(), **kw):
        jid = kw.pop("jid", None) or uuid.uuid4().hex
        self.assertTrue(self.client.queue(task, args=list(args), jid=jid, **kw), "PUSH %s" % task)
        return jid

    def fetch(self, *queues):
        return self.conn.fetch(list(queues) or ["default"])

    def info(self):
        return json.loads(raw(self.conn, "INFO"))

    def tasks(self):
        return self.info()["faktory"]["tasks"]

    def mutate(self, cmd, target, **flt):
        self.assertEqual(raw(self.conn, "MUTATE", compact({"cmd": cmd, "target": target, "filter": flt})), "OK")

    def worker(self, tasks, wid=None, queues=("default",)):
        w = faktory.Worker(faktory=self.srv.url, queues=list(queues), use_threads=True,
                           concurrency=1, worker_id=wid or uuid.uuid4().hex, timeout=10)
        for name, fn in tasks.items():
            w.register(name, fn)
        w.faktory.connect(worker_id=w.worker_id)
        w.heartbeat()  # also arms the worker's heartbeat timer, as run() does
        self.addCleanup(lambda: w.faktory.is_connected and w.faktory.disconnect())
        self.addCleanup(lambda: w.executor.shutdown(wait=False))
        return w

    def drive(self, w, until, timeout=10):
        """Run the worker's own tick() loop until `until()` holds."""
        end = time.time() + timeout
        while not until():
            self.assertLess(time.time(), end, "timed out driving the worker")
            w.tick()

    # tests ---------------------------------------------------------------
    def test_push_fetch_ack(self):
        jid = self.push("Adder", [1, "two", {"three": 3}], custom={"trace": "abc"}, retry=25)
        self.assertEqual(self.info()["faktory"]["queues"].get("default"), 1)
        got = self.fetch("default")
        self.assertIsNotNone(got)
        self.assertEqual(got["jid"], jid)
        self.assertEqual(got["jobtype"], "Adder")
        self.assertEqual(got["args"], [1, "two", {"three": 3}])
        self.assertEqual(got["queue"], "default")
        self.assertEqual(got["custom"], {"trace": "abc"})
        before = self.info()["faktory"]["total_processed"]
        # raw ACK: the library only ACKs inside Worker (its private _ack discards the reply)
        self.assertEqual(raw(self.conn, "ACK", {"jid": jid}), "OK")
        self.assertIsNone(self.fetch("default"))
        self.assertEqual(self.info()["faktory"]["total_processed"], before + 1)
        self.assertEqual((self.ctl.job(jid) or {}).get("state"), "completed")

    def test_worker_fail_retry_backoff_and_failure(self):
        calls = []

        def flaky(*args):
            calls.append(args)
            raise MyError("boom %d" % len(calls))

        jid = self.push("Flaky", [5], retry=25)
        w = self.worker({"Flaky": flaky})
        self.drive(w, lambda: self.tasks()["Retries"]["size"] == 1)
        self.assertEqual(len(calls), 1)
        self.assertEqual(self.info()["faktory"]["total_failures"], 1)
        self.assertIsNone(self.fetch("default"), "not fetchable before its backoff")
        self.ctl.advance(14)  # first backoff is 0^4 + 15 + rand(30) s: at least 15
        self.assertIsNone(self.fetch("default"), "not fetchable 14 s after the failure")
        self.ctl.advance(46)
        again = self.fetch("default")
        self.assertIsNotNone(again, "refetched 60 s after the failure")
        self.assertEqual(again["jid"], jid)
        f = again.get("failure") or {}
        self.assertEqual(f.get("retry_count"), 0)
        self.assertEqual(f.get("errtype"), "MyError")
        self.assertEqual(f.get("message"), "boom 1")
        self.assertEqual(f.get("remaining"), 25)
        self.assertIn("failed_at", f)
        self.assertIn("next_at", f)
        failed = datetime.fromisoformat(f["failed_at"].replace("Z", "+00:00"))
        nxt = datetime.fromisoformat(f["next_at"].replace("Z", "+00:00"))
        delay = (nxt - failed).total_seconds()
        self.assertTrue(15 <= delay < 45, "first retry delay %ss is 15 + rand(30)" % delay)

    def test_retry_zero_vanishes(self):
        jid = self.push("Once", retry=0)
        w = self.worker({"Once": failing})
        self.drive(w, lambda: self.info()["faktory"]["total_failures"] == 1)
        t = self.tasks()
        self.assertEqual(t["Retries"]["size"], 0)
        self.assertEqual(t["Dead"]["size"], 0)
        self.mutate("requeue", "dead", jids=[jid])
        self.mutate("requeue", "retries", jids=[jid])
        self.ctl.advance(3600)
        self.assertIsNone(self.fetch("default"), "the job never comes back")

    def test_retry_minus_one_goes_dead(self):
        jid = self.push("Doomed", retry=-1)
        w = self.worker({"Doomed": failing})
        self.drive(w, lambda: self.info()["faktory"]["total_failures"] == 1)
        t = self.tasks()
        self.assertEqual(t["Retries"]["size"], 0)
        self.assertEqual(t["Dead"]["size"], 1)
        self.mutate("requeue", "dead", jids=[jid])
        self.assertEqual(self.tasks()["Dead"]["size"], 0)
        self.assertEqual((self.fetch("default") or {}).get("jid"), jid)

    def test_scheduled_at(self):
        jid = self.push("Later", [7], at=in_future(3600))
        info = self.info()
        self.assertEqual(info["faktory"]["tasks"]["Scheduled"]["size"], 1)
        self.assertEqual(info["faktory"]["queues"].get("default", 0), 0)
        self.assertIsNone(self.fetch("default"))
        self.ctl.advance(1800)
        self.assertIsNone(self.fetch("default"), "still scheduled half-way")
        self.ctl.advance(1810)
        self.assertEqual((self.fetch("default") or {}).get("jid"), jid)

    def test_reservation_expiry(self):
        jid = self.push("Slow", reserve_for=60)
        self.assertEqual(self.fetch("default")["jid"], jid)
        self.ctl.advance(61)
        info = self.info()
        self.assertEqual(info["faktory"]["tasks"]["Retries"]["size"], 1, "expired job in retries")
        self.assertEqual(info["faktory"]["queues"].get("default", 0), 0)
        self.ctl.advance(60)
        again = self.fetch("default") or {}
        self.assertEqual(again.get("jid"), jid)
        self.assertEqual((again.get("failure") or {}).get("errtype"), "ReservationExpired")
        self.assertEqual(again["failure"].get("retry_count"), 0)

    def test_quiet_and_terminate_through_beat(self):
        wid = "pywid-quiet-1"
        w = self.worker({}, wid=wid)
        self.assertFalse(w.is_quiet)
        self.push("Held")
        self.ctl.ok("WORKER QUIET " + wid)
        w.heartbeat()
        self.assertTrue(w.is_quiet, "BEAT told the worker to go quiet")
        self.assertIsNone(w.faktory.fetch(["default"]), "a quiet worker gets $-1")
        self.assertEqual(self.info()["faktory"]["queues"].get("default"), 1)
        self.ctl.ok("WORKER TERMINATE " + wid)
        w.heartbeat()
        self.assertTrue(w.is_disconnecting, "BEAT told the worker to terminate")
        # raw BEAT: the library never sends current_state; Faktory 1.9 echoes it back
        w2 = self.worker({}, wid="pywid-state-2")
        reply = raw(w2.faktory, "BEAT", {"wid": "pywid-state-2", "current_state": "quiet"})
        self.assertEqual(json.loads(reply or "null"), {"state": "quiet"})
        self.assertIsNone(w2.faktory.fetch(["default"]), "a worker that reported quiet gets $-1")

    def test_info(self):
        self.push("A", queue="alpha")
        self.push("A", queue="alpha")
        self.push("B", queue="beta")
        info = self.info()
        m = re.match(r"^(\d+)\.(\d+)\.(\d+)", info["server"]["faktory_version"])
        self.assertIsNotNone(m, info["server"]["faktory_version"])
        self.assertTrue(int(m.group(1)) == 1 and int(m.group(2)) >= 8, "faktory_version >= 1.8")
        fk = info["faktory"]
        self.assertEqual(fk["queues"].get("alpha"), 2)
        self.assertEqual(fk["queues"].get("beta"), 1)
        self.assertEqual(fk["total_enqueued"], 3)
        self.assertEqual(fk["total_queues"], len(fk["queues"]))
        self.assertIsInstance(info.get("server_utc_time"), str)
        self.assertIsInstance(info["server"]["uptime"], int)
        for k in ("Busy", "Dead", "Retries", "Scheduled", "Workers"):
            self.assertIsInstance(fk["tasks"].get(k, {}).get("size"), int, "tasks.%s.size" % k)

    def test_flush(self):
        self.push("A", queue="q1")
        self.push("A", at=in_future(3600))
        self.push("R", retry=25)
        self.push("D", retry=-1)
        w = self.worker({"R": lambda: 1 / 0, "D": lambda: 1 / 0})
        self.drive(w, lambda: self.info()["faktory"]["total_failures"] == 2)
        self.assertEqual(raw(self.conn, "FLUSH"), "OK")
        info = self.info()
        self.assertEqual(sum(info["faktory"]["queues"].values()), 0, info["faktory"]["queues"])
        for k in ("Scheduled", "Retries", "Dead"):
            self.assertEqual(info["faktory"]["tasks"][k]["size"], 0, k)
        self.assertIsNone(self.fetch("q1", "default"))

    def test_mutate_scheduled_and_dead(self):
        at = in_future(3600)
        a = self.push("Alpha", ["plain"], at=at)
        b = self.push("Beta", ["plain"], at=at)
        self.push("Gamma", ["needle-xyz"], at=at)
        self.push("Delta", ["plain"], at=at)
        self.assertEqual(self.tasks()["Scheduled"]["size"], 4)
        self.mutate("kill", "scheduled", jids=[a])
        t = self.tasks()
        self.assertEqual((t["Scheduled"]["size"], t["Dead"]["size"]), (3, 1))
        self.mutate("requeue", "scheduled", jobtype="Beta")
        self.assertEqual(self.tasks()["Scheduled"]["size"], 2)
        self.assertEqual((self.fetch("default") or {}).get("jid"), b)
        self.mutate("discard", "scheduled", regexp="*needle-xyz*")
        t = self.tasks()
        self.assertEqual((t["Scheduled"]["size"], t["Dead"]["size"]), (1, 1))
        self.mutate("requeue", "dead", jids=[a])
        self.assertEqual(self.tasks()["Dead"]["size"], 0)
        self.assertEqual((self.fetch("default") or {}).get("jid"), a)
        self.mutate("clear", "scheduled")
        self.assertEqual(self.tasks()["Scheduled"]["size"], 0)

    def test_mutate_retries_and_dead(self):
        jids = [self.push(t, [arg], retry=25) for t, arg in
                (("K", "one"), ("D", "two"), ("R", "needle-abc"), ("S", "four"))]
        w = self.worker({t: failing for t in "KDRS"})
        self.drive(w, lambda: self.tasks()["Retries"]["size"] == 4)
        self.mutate("kill", "retries", jobtype="K")
        t = self.tasks()
        self.assertEqual((t["Retries"]["size"], t["Dead"]["size"]), (3, 1))
        self.mutate("discard", "retries", jids=[jids[1]])
        self.assertEqual(self.tasks()["Retries"]["size"], 2)
        self.mutate("requeue", "retries", regexp="*needle-abc*")
        self.assertEqual(self.tasks()["Retries"]["size"], 1)
        r = self.fetch("default") or {}
        self.assertEqual(r.get("jid"), jids[2])
        self.assertEqual((r.get("failure") or {}).get("errtype"), "MyError")
        self.mutate("clear", "retries")
        self.assertEqual(self.tasks()["Retries"]["size"], 0)
        self.mutate("discard", "dead", jobtype="K")
        self.assertEqual(self.tasks()["Dead"]["size"], 0)

    def test_queue_pause_resume_remove_latency(self):
        j1 = self.push("P", queue="paused_q")
        self.assertEqual(raw(self.conn, "QUEUE", "PAUSE paused_q"), "OK")
        self.assertIsNone(self.fetch("paused_q"), "a paused queue is skipped")
        self.assertEqual(raw(self.conn, "QUEUE", "RESUME paused_q"), "OK")
        self.assertEqual((self.fetch("paused_q") or {}).get("jid"), j1)
        j2 = self.push("P", queue="paused_q")
        self.assertEqual(raw(self.conn, "QUEUE", "PAUSE *"), "OK")
        self.assertIsNone(self.fetch("paused_q"), "PAUSE * pauses every queue")
        self.assertEqual(raw(self.conn, "QUEUE", "RESUME *"), "OK")
        self.assertEqual((self.fetch("paused_q") or {}).get("jid"), j2)
        self.push("G", queue="gone_q")
        self.push("G", queue="gone_q")
        self.push("K", queue="kept_q")
        self.ctl.advance(10)
        lat = json.loads(raw(self.conn, "QUEUE", "LATENCY gone_q kept_q") or "null")
        self.assertIsInstance(lat, dict)
        self.assertGreaterEqual(lat.get("gone_q", -1), 9)
        self.assertIn("kept_q", lat)
        self.assertEqual(raw(self.conn, "QUEUE", "REMOVE gone_q"), "OK")
        queues = self.info()["faktory"]["queues"]
        self.assertNotIn("gone_q", queues)
        self.assertEqual(queues.get("kept_q"), 1)
        self.assertIsNone(self.fetch("gone_q"))

    def test_pushb_reports_bad_jid(self):
        def job(jid, n):
            return {"jid": jid, "jobtype": "Bulk", "args": [n], "queue": "default"}
        good1, good2 = uuid.uuid4().hex, uuid.uuid4().hex
        reply = raw(self.conn, "PUSHB", json.dumps([job(good1, 1), job("short", 2), job(good2, 3)]))
        self.assertTrue(reply.startswith("{"), reply)
        rejected = json.loads(reply)
        self.assertEqual(list(rejected), ["short"])
        self.assertTrue(isinstance(rejected["short"], str) and rejected["short"])
        self.assertEqual(self.info()["faktory"]["queues"].get("default"), 2)
        got = sorted([(self.fetch("default") or {}).get("jid"), (self.fetch("default") or {}).get("jid")])
        self.assertEqual(got, sorted([good1, good2]))
        self.assertEqual(json.loads(raw(self.conn, "PUSHB", json.dumps([job(uuid.uuid4().hex, 4)]))), {})

    def test_names_with_capitals_and_underscore(self):
        jid = self.push("SendEmail_Job", ["x"], queue="Critical_Q")
        queues = self.info()["faktory"]["queues"]
        self.assertEqual(queues.get("Critical_Q"), 1, queues)
        self.assertEqual([q for q in queues if q.lower() == "critical_q" or "critical" in q.lower()],
                         ["Critical_Q"])
        got = self.fetch("Critical_Q") or {}
        self.assertEqual(got.get("jid"), jid)
        self.assertEqual(got.get("jobtype"), "SendEmail_Job")
        self.assertEqual(got.get("queue"), "Critical_Q")

    def test_queue_names_differing_in_case_are_distinct(self):
        upper = self.push("T", queue="Mixed_Q")
        self.push("T", queue="mixed_q")
        queues = self.info()["faktory"]["queues"]
        self.assertEqual((queues.get("Mixed_Q"), queues.get("mixed_q")), (1, 1), queues)
        self.assertEqual((self.fetch("Mixed_Q") or {}).get("jid"), upper)
        self.assertIsNone(self.fetch("Mixed_Q"))

    def test_ack_after_kill9_restart(self):
        jid = self.push("Durable", [42])
        self.assertEqual(self.fetch("default")["jid"], jid)
        # A FETCH reply leaves before its claim is on disk (PROTOCOL.md 4.1): a kill right
        # after it may lose the claim, and the job is then simply available again, never
        # handed out. Any later acknowledged write makes the claim durable (batches commit
        # in order), which is the case this test is about.
        self.push("Marker", [], queue="marker")
        self.srv.restart()  # SIGKILL, then start on the same data dir
        c2 = faktory.Client(faktory=self.srv.url, timeout=10)
        c2.connect()
        self.addCleanup(c2.disconnect)
        # raw ACK through the library's connection (no standalone ACK call in the library)
        self.assertEqual(raw(c2.faktory, "ACK", {"jid": jid}), "OK")
        ctl = Control(self.srv.ojs_addr)
        self.addCleanup(ctl.close)
        self.assertEqual((ctl.job(jid) or {}).get("state"), "completed")
        ctl.advance(3600)  # past the 1800 s reservation: it must not come back
        self.assertIsNone(c2.faktory.fetch(["default"]))

    def test_worker_run_end_to_end_and_terminate(self):
        seen = []
        lock = threading.Lock()

        def adder(a, b):
            with lock:
                seen.append(a + b)

        jids = [self.push("Adder", [i, 10]) for i in range(4)]
        wid = uuid.uuid4().hex
        w = faktory.Worker(faktory=self.srv.url, queues=["default"], use_threads=True,
                           concurrency=2, worker_id=wid, timeout=10)
        w.register("Adder", adder)
        w.send_heartbeat_every = 0.2
        th = threading.Thread(target=w.run, daemon=True)  # run() ends in sys.exit(1)
        th.start()
        end = time.time() + 15
        while len(seen) < 4 or any((self.ctl.job(j) or {}).get("state") != "completed" for j in jids):
            self.assertLess(time.time(), end, "worker did not finish the jobs: %s" % seen)
            time.sleep(0.1)
        self.assertEqual(sorted(seen), [10, 11, 12, 13])
        self.ctl.ok("WORKER TERMINATE " + wid)
        th.join(10)
        self.assertFalse(th.is_alive(), "run() returned after BEAT said terminate")
        self.assertFalse(w.faktory.is_connected)


if __name__ == "__main__":
    result = unittest.main(verbosity=2, exit=False).result
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    print("python: %d passed, %d failed" % (result.testsRun - failed, failed))
    sys.exit(1 if failed else 0)
