"""A thin, stdlib-only client and worker for ojsd's TCP protocol (protocol/PROTOCOL.md).

    from ojsd_client import Client, Worker
    c = Client("127.0.0.1:7419"); c.push({"type": "email.send", "args": ["a@b"]})
    w = Worker("127.0.0.1:7419", queues=["default"])
    @w.handler("email.send")
    def send(to): ...
    w.run()
"""
import hashlib
import json
import os
import random
import signal
import socket
import ssl
import threading
import time
import traceback
import uuid

__all__ = ["Client", "Worker", "OjsdError", "ProtocolError"]

MAX_REPLY_BYTES = 64 << 20  # one reply may carry up to 1000 jobs of up to 1 MiB each...
MAX_LINE_BYTES = 64 << 10  # ...but a status line is short


class ProtocolError(Exception):
    """The server sent something this client cannot read (or went away)."""


class OjsdError(Exception):
    """A `-ERR CODE message` reply: the command was refused and nothing changed."""

    def __init__(self, code, message):
        super().__init__(f"{code} {message}".strip())
        self.code, self.message = code, message


def password_hash(password, salt, iterations):
    """sha256(password ++ salt), then sha256 of the raw digest iterations-1 more times (PROTOCOL §2)."""
    h = hashlib.sha256((password + salt).encode()).digest()
    for _ in range(max(1, int(iterations)) - 1):
        h = hashlib.sha256(h).digest()
    return h.hex()


class Client:
    """One connection. Not thread-safe: give each thread its own Client."""

    def __init__(self, addr="127.0.0.1:7419", password=None, wid=None, labels=None,
                 timeout=10.0, tls=None):
        host, _, port = addr.rpartition(":")
        self.addr, self.password, self.wid = (host or "127.0.0.1", int(port)), password, wid
        self.labels, self.timeout, self.tls = labels or [], timeout, tls
        self.sock, self.buf = None, b""
        self.connect()

    def connect(self):
        self.close()
        sock = socket.create_connection(self.addr, timeout=self.timeout)
        if self.tls:
            ctx = self.tls if isinstance(self.tls, ssl.SSLContext) else ssl.create_default_context()
            sock = ctx.wrap_socket(sock, server_hostname=self.addr[0])
        self.sock, self.buf = sock, b""
        hi = self._line()
        if not hi.startswith("+HI"):
            raise ProtocolError(f"expected +HI, got {hi!r}")
        greeting = json.loads(hi[3:].strip() or "{}")
        hello = {"v": 2, "hostname": socket.gethostname(), "pid": os.getpid()}
        if self.wid:
            hello["wid"], hello["labels"] = self.wid, self.labels
        if "s" in greeting:
            if self.password is None:
                raise OjsdError("UNAUTHENTICATED", "the server needs a password")
            hello["pwdhash"] = password_hash(self.password, greeting["s"], greeting.get("i", 1))
        self.call("HELLO", hello)

    def close(self):
        if self.sock:
            try:
                self.sock.sendall(b"END\r\n")
            except OSError:
                pass
            self.sock.close()
            self.sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ProtocolError("the server closed the connection")
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            if len(self.buf) > MAX_LINE_BYTES:
                raise ProtocolError("a reply line is too long")
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line.decode()

    def _read(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == "+":
            return rest
        if kind == "-":
            code, _, message = rest.removeprefix("ERR ").partition(" ")
            raise OjsdError(code, message)
        if kind == "$":
            n = int(rest)
            if n < 0:
                return None
            if n > MAX_REPLY_BYTES:
                raise ProtocolError(f"a reply of {n} bytes is over the client's limit")
            while len(self.buf) < n + 2:
                self._fill()
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return json.loads(data)
        raise ProtocolError(f"unexpected reply {line[:80]!r}")

    def call(self, verb, payload=None):
        """Send one command; return "OK"/the text of a simple reply, a JSON value, or None."""
        if payload is None:
            line = verb
        elif isinstance(payload, str):
            line = f"{verb} {payload}"
        else:
            line = f"{verb} {json.dumps(payload, separators=(',', ':'))}"
        self.sock.sendall(line.encode() + b"\r\n")
        return self._read()

    def push(self, job):
        """Enqueue one job (the server gives it an id); returns the stored envelope."""
        return self.call("PUSH", dict({"args": []}, **job))

    def pushb(self, jobs):
        """Enqueue several jobs atomically: all or none."""
        return self.call("PUSHB", [dict({"args": []}, **j) for j in jobs])

    def fetch(self, queues=("default",), count=None):
        tail = f" COUNT {int(count)}" if count else ""
        return self.call("FETCH", " ".join(queues) + tail)

    def ack(self, job_id, result=None):
        body = {"id": job_id}
        if result is not None:
            body["result"] = result
        return self.call("ACK", body)

    def fail(self, job_id, type_, message, backtrace=None):
        error = {"type": type_, "message": message}
        if backtrace:
            error["backtrace"] = backtrace[:50]
        return self.call("FAIL", {"id": job_id, "error": error})

    def beat(self, active=()):
        """None while the worker should run on, else "quiet" or "terminate"."""
        reply = self.call("BEAT", {"wid": self.wid, "active_job_ids": list(active)})
        return reply.get("state") if isinstance(reply, dict) else None

    def job(self, job_id):
        return self.call("JOB", job_id)

    def info(self):
        return self.call("INFO")


class Worker:
    """Fetches jobs from `queues`, runs the handler registered for each job type, ACKs or
    FAILs, beats every `beat_every` seconds, obeys quiet/terminate, stops on SIGTERM/SIGINT,
    and reconnects with capped exponential backoff when the server goes away."""

    def __init__(self, addr="127.0.0.1:7419", queues=("default",), password=None, wid=None,
                 concurrency=1, beat_every=15.0, labels=None, tls=None):
        self.addr, self.queues, self.password, self.tls = addr, list(queues), password, tls
        self.wid = wid or f"py-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.concurrency, self.beat_every, self.labels = concurrency, beat_every, labels or []
        self.handlers, self.active, self.lock = {}, set(), threading.Lock()
        self.stopping = threading.Event()  # quiet, terminate or a signal: fetch no more
        self.state = "running"

    def handler(self, job_type):
        def register(fn):
            self.handlers[job_type] = fn
            return fn
        return register

    def register(self, job_type, fn):
        self.handlers[job_type] = fn

    def stop(self, *_):
        self.stopping.set()

    def _connect(self):
        delay = 0.1
        while not self.stopping.is_set():
            try:
                return Client(self.addr, self.password, self.wid, self.labels, tls=self.tls)
            except OjsdError as e:
                if e.code in ("UNAUTHENTICATED",):
                    raise
            except (OSError, ProtocolError, ValueError):
                pass
            self.stopping.wait(delay * (0.5 + random.random()))
            delay = min(delay * 2, 10.0)
        return None

    def _process(self, c, job):
        with self.lock:
            self.active.add(job["id"])
        try:
            fn = self.handlers.get(job["type"])
            if fn is None:
                c.fail(job["id"], "UnknownJobType", f"no handler for {job['type']!r}")
                return
            try:
                result = fn(*job.get("args", []))
            except Exception as e:  # the handler's failure is the job's, not the worker's
                c.fail(job["id"], type(e).__name__, str(e), traceback.format_exc().splitlines())
            else:
                c.ack(job["id"], result)
        finally:
            with self.lock:
                self.active.discard(job["id"])

    def _fetch_loop(self):
        c = None
        while not self.stopping.is_set():
            try:
                c = c or self._connect()
                if c is None:
                    return
                job = c.fetch(self.queues)
                if job is not None:
                    self._process(c, job)
            except (OSError, ProtocolError, OjsdError, ValueError) as e:
                # The server went away or refused us (e.g. while shutting down): reconnect
                # with backoff. A job claimed but not settled goes back after its timeout.
                if isinstance(e, OjsdError) and e.code == "UNAUTHENTICATED":
                    raise
                if c:
                    c.close()
                c = None
                self.stopping.wait(0.1 + random.random() * 0.2)
        if c:
            c.close()

    def _beat_loop(self):
        c = None
        while not self.stopping.wait(self.beat_every if c else 0.05):
            try:
                c = c or self._connect()
                if c is None:
                    return
                with self.lock:
                    active = list(self.active)
                state = c.beat(active)
                if state in ("quiet", "terminate"):
                    self.state = state
                    self.stopping.set()
            except (OSError, ProtocolError, OjsdError, ValueError):
                if c:
                    c.close()
                c = None
        if c:
            c.close()

    def run(self, install_signals=True):
        """Work until quiet, terminate or a signal; in-flight jobs finish first."""
        if install_signals and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.stop)
            signal.signal(signal.SIGINT, self.stop)
        threads = [threading.Thread(target=self._beat_loop, daemon=True)]
        threads += [threading.Thread(target=self._fetch_loop, daemon=True) for _ in range(self.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return self.state
