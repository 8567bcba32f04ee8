"""The Python client and worker against a real ojsd (OJSD_BIN, default target/debug/ojsd)."""
import logging
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ojsd_client  # noqa: E402
from ojsd_client import Client, OjsdError, Worker  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[3]
BIN = os.environ.get("OJSD_BIN", str(ROOT / "target" / "debug" / "ojsd"))


class Server:
    """An ojsd on a free port with its own data dir; restartable on the same dir and port."""

    def __init__(self, *extra):
        self.dir = tempfile.TemporaryDirectory()
        self.extra, self.addr, self.proc = list(extra), "127.0.0.1:0", None
        self.start()

    def start(self):
        args = [BIN, "--listen", self.addr, "--data-dir", self.dir.name, "--http-listen", "off",
                "--log-level", "warn", "--test-clock", "--fetch-wait-ms", "300", *self.extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for line in self.proc.stdout:
            m = re.match(r"ojsd listening on (\S+)", line)
            if m:
                self.addr = m.group(1)
                return
        raise RuntimeError("ojsd did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.proc.stdout.close()

    def close(self):
        if self.proc.poll() is None:
            self.stop()
        self.dir.cleanup()


def wait_for(what, fn, secs=10.0):
    deadline = time.time() + secs
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class ClientTests(unittest.TestCase):
    def setUp(self):
        self.srv = Server()
        self.addCleanup(self.srv.close)

    def test_push_fetch_ack_and_typed_errors(self):
        with Client(self.srv.addr) as c:
            job = c.push({"type": "email.send", "args": ["a@b.c"], "queue": "mail"})
            self.assertEqual(job["state"], "available")
            with Client(self.srv.addr, wid="w-1") as w:
                got = w.fetch(["mail"])
                self.assertEqual((got["id"], got["args"]), (job["id"], ["a@b.c"]))
                self.assertIsNone(w.fetch(["empty"]))
                self.assertEqual(w.ack(got["id"], {"sent": True}), "OK")
            done = c.job(job["id"])
            self.assertEqual((done["state"], done["result"]), ("completed", {"sent": True}))
            with self.assertRaises(OjsdError) as e:
                c.push({"type": "Not Valid"})
            self.assertEqual(e.exception.code, "INVALID_JOB_TYPE")
            with self.assertRaises(OjsdError) as e:
                c.job("no-such-job")
            self.assertIn(e.exception.code, ("NOT_FOUND", "INVALID_REQUEST"))

    def test_ack_fetch_takes_the_next_job_in_the_same_round_trip(self):
        with Client(self.srv.addr) as c, Client(self.srv.addr, wid="w-af") as w:
            a = c.push({"type": "t.a", "queue": "af", "args": [1]})
            b = c.push({"type": "t.a", "queue": "af", "args": [2]})
            first = w.fetch(["af"])
            self.assertEqual(first["id"], a["id"])
            nxt = w.ack_fetch(first["id"], ["af"], {"n": 1})
            self.assertEqual((nxt["id"], nxt["state"]), (b["id"], "active"))
            self.assertEqual(c.job(a["id"])["result"], {"n": 1})
            self.assertIsNone(w.ack_fetch(nxt["id"], ["af"], wait_ms=0), "no job left: null")
            self.assertEqual(c.job(b["id"])["state"], "completed")
            # A refused ACK is the reply, and nothing is fetched.
            d = c.push({"type": "t.a", "queue": "af"})
            with self.assertRaises(OjsdError) as e:
                w.ack_fetch(a["id"], ["af"], wait_ms=0)
            self.assertEqual(e.exception.code, "INVALID_STATE_TRANSITION")
            self.assertEqual(c.job(d["id"])["state"], "available")

    def test_ackb_completes_a_fetched_batch_in_one_round_trip(self):
        with Client(self.srv.addr) as c, Client(self.srv.addr, wid="w-ab") as w:
            ids = [j["id"] for j in c.pushb([{"type": "t.a", "queue": "ab"}] * 3)]
            got = w.fetch(["ab"], count=3)
            self.assertEqual([j["id"] for j in got], ids)
            reply = w.ackb([(ids[0], {"n": 1}), ids[1], "0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b"])
            self.assertEqual(reply["acked"], 2)
            self.assertEqual([(r["index"], r["code"]) for r in reply["rejected"]], [(2, "NOT_FOUND")])
            self.assertEqual(c.job(ids[0])["result"], {"n": 1})
            self.assertEqual([c.job(i)["state"] for i in ids], ["completed", "completed", "active"])
            self.assertEqual(w.ackb([]), {"acked": 0, "rejected": []})

    def test_pushb_is_atomic(self):
        with Client(self.srv.addr) as c:
            jobs = c.pushb([{"type": "a.b", "args": [1]}, {"type": "a.b", "args": [2]}])
            self.assertEqual([j["args"] for j in jobs], [[1], [2]])
            with self.assertRaises(OjsdError):
                c.pushb([{"type": "a.b", "queue": "q2"}, {"type": "BAD"}])
            self.assertEqual(c.info()["queues"].get("q2", {}).get("available", 0), 0)

    def test_password_is_required_and_checked(self):
        srv = Server("--password", "s3cret")
        self.addCleanup(srv.close)
        with Client(srv.addr, password="s3cret") as c:
            self.assertEqual(c.push({"type": "a.b"})["state"], "available")
        with self.assertRaises(OjsdError) as e:
            Client(srv.addr, password="wrong")
        self.assertEqual(e.exception.code, "UNAUTHENTICATED")


class WorkerTests(unittest.TestCase):
    def setUp(self):
        self.srv = Server()
        self.addCleanup(self.srv.close)
        self.c = Client(self.srv.addr)
        self.addCleanup(self.c.close)

    def start(self, worker):
        result = {}
        t = threading.Thread(target=lambda: result.setdefault("state", worker.run(install_signals=False)))
        t.start()
        self.addCleanup(lambda: (worker.stop(), t.join(10)))
        return t, result

    def test_jobs_are_processed_and_failures_recorded(self):
        w = Worker(self.srv.addr, queues=["work"], beat_every=0.2)
        seen = []

        @w.handler("math.add")
        def add(a, b):
            seen.append(a + b)
            return a + b

        @w.handler("math.boom")
        def boom():
            raise ValueError("kaboom")

        self.start(w)
        ok = self.c.push({"type": "math.add", "args": [2, 3], "queue": "work"})
        bad = self.c.push({"type": "math.boom", "queue": "work"})
        unknown = self.c.push({"type": "math.nope", "queue": "work"})
        done = wait_for("the add job", lambda: self.c.job(ok["id"])["state"] == "completed")
        self.assertTrue(done)
        self.assertEqual(self.c.job(ok["id"])["result"], 5)
        failed = wait_for("the failing job", lambda: (j := self.c.job(bad["id"]))["state"] == "retryable" and j)
        self.assertEqual((failed["error"]["type"], failed["error"]["message"]), ("ValueError", "kaboom"))
        self.assertTrue(any("kaboom" in line for line in failed["error"].get("backtrace", [])))
        nope = wait_for("the unknown type", lambda: (j := self.c.job(unknown["id"]))["state"] == "retryable" and j)
        self.assertEqual(nope["error"]["type"], "UnknownJobType")
        self.assertEqual(seen, [5])

    def test_quiet_stops_fetching_and_terminate_stops_the_worker(self):
        w = Worker(self.srv.addr, queues=["q"], beat_every=0.1)
        w.register("t.x", lambda: None)
        t, result = self.start(w)
        wait_for("the worker to register", lambda: any(x["id"] == w.wid for x in self.c.call("WORKERS")["workers"]))
        self.c.call("WORKER", f"QUIET {w.wid}")
        wait_for("quiet", lambda: w.stopping.is_set())
        t.join(10)
        self.assertEqual(result.get("state"), "quiet")
        job = self.c.push({"type": "t.x", "queue": "q"})
        time.sleep(0.5)
        self.assertEqual(self.c.job(job["id"])["state"], "available", "a quiet worker fetches nothing")

        w2 = Worker(self.srv.addr, queues=["q"], beat_every=0.1)
        w2.register("t.x", lambda: "ran")
        t2, result2 = self.start(w2)
        wait_for("the second worker to take the job", lambda: self.c.job(job["id"])["state"] == "completed")
        self.c.call("WORKER", f"TERMINATE {w2.wid}")
        t2.join(10)
        self.assertEqual(result2.get("state"), "terminate")

    def record_commands(self):
        """Every FETCH and ACK any Client sends, as (wid, verb, payload)."""
        sent, call = [], Client.call

        def spy(client, verb, payload=None):
            if verb in ("FETCH", "ACK"):
                sent.append((client.wid, verb, payload))
            return call(client, verb, payload)

        patcher = mock.patch.object(ojsd_client.Client, "call", spy)
        patcher.start()
        self.addCleanup(patcher.stop)
        return sent

    def test_each_ack_carries_the_next_job(self):
        jobs = [self.c.push({"type": "n.x", "args": [i], "queue": "n"}) for i in range(5)]
        sent = self.record_commands()
        w = Worker(self.srv.addr, queues=["n"], beat_every=0.2)
        w.register("n.x", lambda i: i * 10)
        self.start(w)
        for j in jobs:
            wait_for("the jobs", lambda: self.c.job(j["id"])["state"] == "completed")
        ours = [(verb, p) for wid, verb, p in sent if wid == w.wid]
        # One FETCH, then one ACK per job, each taking the next job in the same reply.
        self.assertEqual([v for v, _ in ours[:6]], ["FETCH"] + ["ACK"] * 5, ours)
        self.assertEqual([p["id"] for _, p in ours[1:6]], [j["id"] for j in jobs])
        self.assertTrue(all(p["fetch"] == ["n"] for _, p in ours[1:6]))
        self.assertEqual([self.c.job(j["id"])["result"] for j in jobs], [0, 10, 20, 30, 40])
        worker = next(x for x in self.c.call("WORKERS")["workers"] if x["id"] == w.wid)
        self.assertEqual((worker["queues"], worker["concurrency"]), (["n"], 1), "queues in HELLO")
        self.assertEqual(worker["jobs_completed"], 5)

    def test_a_stopping_worker_acks_without_taking_a_new_job(self):
        first = self.c.push({"type": "s.x", "args": [1], "queue": "s"})
        second = self.c.push({"type": "s.x", "args": [2], "queue": "s"})
        sent = self.record_commands()
        w = Worker(self.srv.addr, queues=["s"], beat_every=0.2)
        w.register("s.x", lambda n: w.stop() or n)  # stop while the first job runs
        t, result = self.start(w)
        t.join(10)
        self.assertEqual(result.get("state"), "stopped")
        self.assertEqual(self.c.job(first["id"])["state"], "completed")
        self.assertEqual(self.c.job(second["id"])["state"], "available")
        acks = [p for wid, verb, p in sent if wid == w.wid and verb == "ACK"]
        self.assertEqual(acks, [{"id": first["id"], "result": 1}])

    def test_sigterm_makes_run_return_stopped(self):
        script = (
            "import logging, sys\n"
            f"sys.path.insert(0, {str(pathlib.Path(__file__).resolve().parents[1])!r})\n"
            "from ojsd_client import Worker\n"
            "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(message)s')\n"
            f"print('run ->', Worker({self.srv.addr!r}, beat_every=0.1).run(), flush=True)\n"
        )
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        self.addCleanup(proc.kill)
        self.assertIn("connected to ojsd", proc.stdout.readline())
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
        self.assertIn("run -> stopped", out)

    def test_the_worker_reconnects_after_a_server_restart(self):
        records = []
        handler = logging.Handler()
        handler.emit = records.append
        logger = logging.getLogger("ojsd_client")
        logger.addHandler(handler)
        level = logger.level
        logger.setLevel(logging.INFO)
        self.addCleanup(lambda: (logger.removeHandler(handler), logger.setLevel(level)))
        w = Worker(self.srv.addr, queues=["r"], beat_every=0.2)
        w.register("r.x", lambda n: n * 2)
        self.start(w)
        first = self.c.push({"type": "r.x", "args": [1], "queue": "r"})
        wait_for("the first job", lambda: self.c.job(first["id"])["state"] == "completed")
        self.c.close()
        self.srv.stop()
        time.sleep(0.5)  # the worker sees the server gone and backs off
        self.srv.start()  # same data dir and address
        self.c = Client(self.srv.addr)
        self.addCleanup(self.c.close)
        second = self.c.push({"type": "r.x", "args": [21], "queue": "r"})
        wait_for("the job after the restart", lambda: self.c.job(second["id"])["state"] == "completed", 20)
        self.assertEqual(self.c.job(second["id"])["result"], 42)
        # Each change of connection state is logged once, whatever the number of
        # connections (a beat and a fetch one here) and of failed attempts.
        said = [r.getMessage().split(" ")[0] for r in records]
        self.assertEqual(said, ["connected", "lost", "cannot", "connected"], said)


if __name__ == "__main__":
    unittest.main()
