"""The Python client and worker against a real ojsd (OJSD_BIN, default target/debug/ojsd)."""
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
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

    def test_the_worker_reconnects_after_a_server_restart(self):
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
        second = self.c.push({"type": "r.x", "args": [21], "queue": "r"})
        wait_for("the job after the restart", lambda: self.c.job(second["id"])["state"] == "completed", 20)
        self.assertEqual(self.c.job(second["id"])["result"], 42)


if __name__ == "__main__":
    unittest.main()
