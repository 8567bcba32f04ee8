"""ojsd's Faktory port driven by the unmodified PyPI `pyfaktory` library (pinned in run.sh).

pyfaktory has an API for everything used here: Producer.push / push_bulk, Client.info,
mutate, queue_pause / queue_unpause / queue_remove, and the Client's _fetch / _ack /
_fail / _beat, which its own Consumer calls (used directly so a test can hold a job).
Each test starts its own ojsd (helpers shared with test_faktory_py.py).
"""

import json
import logging
import sys
import threading
import time
import unittest
import warnings

from pyfaktory import Client, Consumer, Job, Producer
from pyfaktory.models import JobFilter, MutateOperation
from pyfaktory.util.enums import State

from test_faktory_py import Control, Ojsd, ojs_id

warnings.simplefilter("ignore", ResourceWarning)
logging.getLogger("FaktoryClient").setLevel(logging.CRITICAL)
logging.getLogger("FaktoryConsumer").setLevel(logging.CRITICAL)


class PyFaktory(unittest.TestCase):
    def setUp(self):
        self.srv = Ojsd()
        self.ctl = Control(self.srv.ojs_addr)
        self.producer_client = Client(faktory_url=self.srv.url, role="producer")
        self.producer_client.connect()
        self.producer = Producer(client=self.producer_client)

    def tearDown(self):
        self.producer_client.disconnect()
        self.srv.stop()

    def worker(self, wid="pyfaktory-w1"):
        c = Client(faktory_url=self.srv.url, role="consumer", worker_id=wid, beat_period=5)
        c.connect()
        self.addCleanup(c.disconnect)
        return c

    def test_push_fetch_ack_and_info(self):
        j = Job(jobtype="Adder_Job", args=[1, 2], queue="Math_Q", custom={"k": "v"})
        self.assertTrue(self.producer.push(j))
        info = self.producer_client.info()
        self.assertEqual(info["faktory"]["queues"].get("Math_Q"), 1, info)
        self.assertGreaterEqual(int(info["server"]["faktory_version"].split(".")[1]), 8)
        w = self.worker()
        got = w._fetch(["Math_Q"])
        self.assertEqual((got["jid"], got["jobtype"], got["args"]), (j.jid, "Adder_Job", [1, 2]))
        self.assertEqual(got["custom"], {"k": "v"})
        self.assertTrue(w._ack(j.jid))
        job = json.loads(self.ctl.call("JOB %s" % ojs_id(j.jid)))
        self.assertEqual(job["state"], "completed")

    def test_push_bulk_reports_the_bad_job(self):
        good = [Job(jobtype="Bulk", args=[i]) for i in range(3)]
        bad = Job(jobtype="Bulk", args=[], reserve_for=86401)
        errors = self.producer.push_bulk(good + [bad])
        self.assertEqual(list(errors), [bad.jid], errors)
        self.assertIn("reserved for more than one day", errors[bad.jid])
        info = self.producer_client.info()
        self.assertEqual(info["faktory"]["queues"].get("default"), 3, info)

    def test_fail_retry_and_mutate(self):
        j = Job(jobtype="Flaky", args=[], retry=3)
        self.producer.push(j)
        w = self.worker()
        self.assertEqual(w._fetch(["default"])["jid"], j.jid)
        self.assertTrue(w._fail(j.jid, "IOError", "disk full", ["a.py:1"]))
        info = self.producer_client.info()
        self.assertEqual(info["faktory"]["tasks"]["Retries"]["size"], 1, info)
        kill = MutateOperation(cmd="kill", target="retries",
                               filter=JobFilter(jids=[j.jid], regexp=None, jobtype=None))
        self.assertTrue(self.producer_client.mutate(kill))
        info = self.producer_client.info()
        self.assertEqual(info["faktory"]["tasks"]["Dead"]["size"], 1, info)
        requeue = MutateOperation(cmd="requeue", target="dead",
                                  filter=JobFilter(jids=None, regexp="*Flaky*", jobtype=None))
        self.assertTrue(self.producer_client.mutate(requeue))
        again = w._fetch(["default"])
        self.assertEqual(again["jid"], j.jid)

    def test_queue_pause_remove_and_quiet_beat(self):
        self.producer.push(Job(jobtype="P", args=[], queue="paused_q"))
        self.producer_client.queue_pause(["paused_q"])
        w = self.worker("pyfaktory-w2")
        self.assertIsNone(w._fetch(["paused_q"]))
        self.producer_client.queue_unpause(["paused_q"])
        self.producer_client.queue_remove(["paused_q"])
        self.assertNotIn("paused_q", self.producer_client.info()["faktory"]["queues"])
        self.producer.push(Job(jobtype="P", args=[], queue="q2"))
        self.ctl.ok("WORKER QUIET pyfaktory-w2")
        w._beat()
        # The BEAT's {"state": "quiet"} reached the library, which stops fetching.
        self.assertEqual(w.state, State.QUIET)

    def test_consumer_runs_a_registered_job(self):
        c = self.worker("pyfaktory-w3")
        consumer = Consumer(client=c, queues=["work_q"], concurrency=1, grace_period=1)
        consumer.register("Work", add_one)
        jids = []
        for x in (1, 2):
            j = Job(jobtype="Work", args=[x], queue="work_q")
            self.producer.push(j)
            jids.append(j.jid)
        t = threading.Thread(target=run_quietly, args=(consumer,), daemon=True)
        t.start()
        deadline = time.time() + 60
        while time.time() < deadline:
            states = [json.loads(self.ctl.call("JOB %s" % ojs_id(x)))["state"] for x in jids]
            if states == ["completed", "completed"]:
                break
            time.sleep(0.2)
        self.assertEqual(states, ["completed", "completed"])
        # The consumer stops once its BEAT is answered with terminate.
        self.ctl.ok("WORKER TERMINATE pyfaktory-w3")
        t.join(30)
        self.assertFalse(t.is_alive(), "the consumer stopped on terminate")


def add_one(x):
    """A job handler (run in the consumer's worker process)."""
    return x + 1


def run_quietly(consumer):
    try:
        consumer.run()
    except SystemExit:  # pyfaktory's run() always ends with sys.exit(1)
        pass


if __name__ == "__main__":
    result = unittest.main(verbosity=2, exit=False).result
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    print("pyfaktory: %d passed, %d failed" % (result.testsRun - failed, failed))
    sys.exit(1 if failed else 0)
