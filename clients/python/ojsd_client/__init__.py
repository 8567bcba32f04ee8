"""A thin, stdlib-only client and worker for ojsd's TCP protocol (protocol/PROTOCOL.md).

    from ojsd_client import Client, Worker
    c = Client("127.0.0.1:7419"); c.push({"type": "email.send", "args": ["a@b"]})
    w = Worker("127.0.0.1:7419", queues=["default"])
    @w.handler("email.send")
    def send(to): ...
    w.run()
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import signal
import socket
import ssl
import threading
import traceback
import uuid
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

__all__ = ["Client", "Worker", "OjsdError", "ProtocolError", "Job", "password_hash"]
__version__ = "0.2.0"

log = logging.getLogger("ojsd_client")

Job = Dict[str, Any]
"""A job envelope as the server returns it (PROTOCOL.md §3): `id`, `type`, `args`, `queue`, ..."""

MAX_REPLY_BYTES = 64 << 20  # one reply may carry up to 1000 jobs of up to 1 MiB each...
MAX_LINE_BYTES = 64 << 10  # ...but a status line is short


class ProtocolError(Exception):
    """The server sent something this client cannot read (or went away)."""


class OjsdError(Exception):
    """A `-ERR CODE message` reply: the command was refused and nothing changed."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code} {message}".strip())
        self.code, self.message = code, message


def password_hash(password: str, salt: str, iterations: int) -> str:
    """sha256(password ++ salt), then sha256 of the raw digest iterations-1 more times (PROTOCOL §2)."""
    h = hashlib.sha256((password + salt).encode()).digest()
    for _ in range(max(1, int(iterations)) - 1):
        h = hashlib.sha256(h).digest()
    return h.hex()


class Client:
    """One connection. Not thread-safe: give each thread its own Client.

    `hello` adds fields to the HELLO payload (the server keeps unknown ones with the worker's
    record and shows them in INFO/WORKERS; the Worker sends its `queues` and `concurrency`)."""

    def __init__(self, addr: str = "127.0.0.1:7419", password: Optional[str] = None,
                 wid: Optional[str] = None, labels: Optional[List[str]] = None,
                 timeout: float = 10.0, tls: Union[bool, ssl.SSLContext, None] = None,
                 hello: Optional[Dict[str, Any]] = None) -> None:
        host, _, port = addr.rpartition(":")
        self.addr, self.password, self.wid = (host or "127.0.0.1", int(port)), password, wid
        self.labels, self.timeout, self.tls = labels or [], timeout, tls
        self.hello_extra = dict(hello or {})
        self.sock: Optional[socket.socket] = None
        self.buf = b""
        self.connect()

    def connect(self) -> None:
        self.close()
        sock = socket.create_connection(self.addr, timeout=self.timeout)
        if self.tls:
            ctx = self.tls if isinstance(self.tls, ssl.SSLContext) else ssl.create_default_context()
            sock = ctx.wrap_socket(sock, server_hostname=self.addr[0])
        self.sock, self.buf = sock, b""
        try:
            self._handshake()
        except BaseException:
            self.sock = None
            sock.close()
            raise

    def _handshake(self) -> None:
        hi = self._line()
        if not hi.startswith("+HI"):
            raise ProtocolError(f"expected +HI, got {hi!r}")
        greeting = json.loads(hi[3:].strip() or "{}")
        hello: Dict[str, Any] = dict(self.hello_extra)
        hello.update({"v": 2, "hostname": socket.gethostname(), "pid": os.getpid()})
        if self.wid:
            hello["wid"], hello["labels"] = self.wid, self.labels
        if "s" in greeting:
            if self.password is None:
                raise OjsdError("UNAUTHENTICATED", "the server needs a password")
            hello["pwdhash"] = password_hash(self.password, greeting["s"], greeting.get("i", 1))
        self.call("HELLO", hello)

    def close(self) -> None:
        if self.sock:
            try:
                self.sock.sendall(b"END\r\n")
            except OSError:
                pass
            self.sock.close()
            self.sock = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fill(self) -> None:
        if self.sock is None:
            raise ProtocolError("the connection is closed")
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ProtocolError("the server closed the connection")
        self.buf += chunk

    def _line(self) -> str:
        while b"\r\n" not in self.buf:
            if len(self.buf) > MAX_LINE_BYTES:
                raise ProtocolError("a reply line is too long")
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line.decode()

    def _read(self) -> Any:
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

    def call(self, verb: str, payload: Any = None) -> Any:
        """Send one command; return "OK"/the text of a simple reply, a JSON value, or None."""
        if payload is None:
            line = verb
        elif isinstance(payload, str):
            line = f"{verb} {payload}"
        else:
            line = f"{verb} {json.dumps(payload, separators=(',', ':'))}"
        if self.sock is None:
            raise ProtocolError("the connection is closed")
        self.sock.sendall(line.encode() + b"\r\n")
        return self._read()

    def push(self, job: Job) -> Job:
        """Enqueue one job (the server gives it an id); returns the stored envelope."""
        return self.call("PUSH", dict({"args": []}, **job))

    def pushb(self, jobs: Iterable[Job]) -> List[Job]:
        """Enqueue several jobs atomically: all or none."""
        return self.call("PUSHB", [dict({"args": []}, **j) for j in jobs])

    def fetch(self, queues: Sequence[str] = ("default",),
              count: Optional[int] = None) -> Union[Job, List[Job], None]:
        """One job (a list of up to `count` with `count`), or None when none came in time."""
        tail = f" COUNT {int(count)}" if count else ""
        return self.call("FETCH", " ".join(queues) + tail)

    def ack(self, job_id: str, result: Any = None) -> str:
        """Complete a job; "OK" once the completion is durable."""
        body: Dict[str, Any] = {"id": job_id}
        if result is not None:
            body["result"] = result
        return self.call("ACK", body)

    def ack_fetch(self, job_id: str, queues: Sequence[str], result: Any = None,
                  wait_ms: Optional[int] = None) -> Optional[Job]:
        """Complete a job and take the next one from `queues` in the same round trip
        (`ACK {"id", "result", "fetch": queues}`, PROTOCOL §5.2): the next job, or None when
        none came within the server's wait (`wait_ms`, at most `--fetch-wait-ms`). A reply at
        all means the ACK is durable; a refused ACK raises OjsdError and fetches nothing."""
        body: Dict[str, Any] = {"id": job_id, "fetch": list(queues)}
        if result is not None:
            body["result"] = result
        if wait_ms is not None:
            body["wait_ms"] = int(wait_ms)
        return self.call("ACK", body)

    def ackb(self, acks: Iterable[Union[str, Tuple[str, Any]]]) -> Dict[str, Any]:
        """Complete several jobs in one round trip (`ACKB`, PROTOCOL §5.2), each on its own:
        a job id, or `(id, result)`. Returns `{"acked": n, "rejected": [{"index", "code",
        "message"}]}`; the acknowledged ones are durable once it returns."""
        body: List[Dict[str, Any]] = []
        for a in acks:
            if isinstance(a, str):
                body.append({"id": a})
            else:
                job_id, result = a
                body.append({"id": job_id} if result is None else {"id": job_id, "result": result})
        if not body:
            return {"acked": 0, "rejected": []}
        return self.call("ACKB", body)

    def fail(self, job_id: str, type_: str, message: str,
             backtrace: Optional[List[str]] = None) -> str:
        error: Dict[str, Any] = {"type": type_, "message": message}
        if backtrace:
            error["backtrace"] = backtrace[:50]
        return self.call("FAIL", {"id": job_id, "error": error})

    def beat(self, active: Iterable[str] = ()) -> Optional[str]:
        """None while the worker should run on, else "quiet" or "terminate"."""
        reply = self.call("BEAT", {"wid": self.wid, "active_job_ids": list(active)})
        return reply.get("state") if isinstance(reply, dict) else None

    def job(self, job_id: str) -> Job:
        return self.call("JOB", job_id)

    def info(self) -> Dict[str, Any]:
        return self.call("INFO")


Handler = Callable[..., Any]

_CONNECTION_ERRORS = (OSError, ProtocolError, ValueError)
_SERVER_DOWN = ("BACKEND_UNAVAILABLE",)  # e.g. while the server shuts down


class Worker:
    """Fetches jobs from `queues`, runs the handler registered for each job type, ACKs or
    FAILs, beats every `beat_every` seconds, obeys quiet/terminate, stops on SIGTERM/SIGINT,
    and reconnects with capped exponential backoff when the server goes away.

    Each fetching connection FETCHes only when it holds no job: a successful job is
    acknowledged with `ACK {"id", "result", "fetch": queues}`, whose reply is the next job
    (one durable round trip per job). While stopping it ACKs without `fetch`.

    Connection state changes (connected, lost, retrying) are logged once per change on the
    `ojsd_client` logger."""

    def __init__(self, addr: str = "127.0.0.1:7419", queues: Sequence[str] = ("default",),
                 password: Optional[str] = None, wid: Optional[str] = None,
                 concurrency: int = 1, beat_every: float = 15.0,
                 labels: Optional[List[str]] = None,
                 tls: Union[bool, ssl.SSLContext, None] = None,
                 logger: Optional[logging.Logger] = None) -> None:
        self.addr, self.queues, self.password, self.tls = addr, list(queues), password, tls
        self.wid = wid or f"py-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.concurrency, self.beat_every, self.labels = concurrency, beat_every, labels or []
        self.handlers: Dict[str, Handler] = {}
        self.active: set = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()  # quiet, terminate or a signal: fetch no more
        self.state = "running"  # then "quiet", "terminate" or "stopped"
        self.log = logger or log
        self.connection = "new"  # "connected", "lost" or "retrying" once it has tried

    def handler(self, job_type: str) -> Callable[[Handler], Handler]:
        def register(fn: Handler) -> Handler:
            self.handlers[job_type] = fn
            return fn
        return register

    def register(self, job_type: str, fn: Handler) -> None:
        self.handlers[job_type] = fn

    def stop(self, *_: object) -> None:
        """Stop fetching, finish the jobs in hand, and make run() return "stopped"."""
        with self.lock:
            if self.state == "running":
                self.state = "stopped"
        self.stopping.set()

    def _connection_is(self, state: str, error: Optional[BaseException] = None) -> None:
        """Log a change of connection state once, however many connections see it."""
        with self.lock:
            before = self.connection
            if state == before or (state == "retrying" and before == "connected") \
                    or (state == "lost" and before != "connected"):
                return
            self.connection = state
        host, port = self.addr.rpartition(":")[0] or "127.0.0.1", self.addr.rpartition(":")[2]
        where = f"ojsd at {host}:{port}"
        if state == "connected":
            self.log.info("connected to %s as %s", where, self.wid)
        elif state == "lost":
            self.log.warning("lost the connection to %s: %s", where, error)
        else:
            self.log.warning("cannot reach %s (%s); retrying with backoff", where, error)

    def _connect(self) -> Optional[Client]:
        delay = 0.1
        while not self.stopping.is_set():
            try:
                c = Client(self.addr, self.password, self.wid, self.labels, tls=self.tls,
                           hello={"queues": self.queues, "concurrency": self.concurrency})
                self._connection_is("connected")
                return c
            except OjsdError as e:
                if e.code in ("UNAUTHENTICATED",):
                    raise
                self._connection_is("retrying", e)
            except _CONNECTION_ERRORS as e:
                self._connection_is("retrying", e)
            self.stopping.wait(delay * (0.5 + random.random()))
            delay = min(delay * 2, 10.0)
        return None

    def _process(self, c: Client, job: Job) -> Optional[Job]:
        """Run one job and settle it; returns the next job when its ACK carried one."""
        with self.lock:
            self.active.add(job["id"])
        try:
            fn = self.handlers.get(job["type"])
            if fn is None:
                c.fail(job["id"], "UnknownJobType", f"no handler for {job['type']!r}")
                return None
            try:
                result = fn(*job.get("args", []))
            except Exception as e:  # the handler's failure is the job's, not the worker's
                c.fail(job["id"], type(e).__name__, str(e), traceback.format_exc().splitlines())
                return None
            if self.stopping.is_set():
                c.ack(job["id"], result)  # take no new job while stopping
                return None
            return c.ack_fetch(job["id"], self.queues, result)
        except OjsdError as e:
            if e.code in _SERVER_DOWN:
                raise
            # The job was refused (cancelled, its reservation expired, ...), not the
            # connection: it stays usable.
            self.log.warning("job %s could not be settled: %s", job["id"], e)
            return None
        finally:
            with self.lock:
                self.active.discard(job["id"])

    def _fetch_loop(self) -> None:
        c: Optional[Client] = None
        job: Optional[Job] = None
        # A job in hand is always run, even while stopping: it is ours until settled.
        while job is not None or not self.stopping.is_set():
            try:
                c = c or self._connect()
                if c is None:
                    return
                if job is None:
                    job = c.fetch(self.queues)  # type: ignore[assignment]
                else:
                    job = self._process(c, job)
            except (OjsdError, *_CONNECTION_ERRORS) as e:
                # The server went away or refused us (e.g. while shutting down): reconnect
                # with backoff. A job claimed but not settled goes back after its timeout.
                if isinstance(e, OjsdError) and e.code == "UNAUTHENTICATED":
                    raise
                self._connection_is("lost", e)
                if c:
                    c.close()
                c, job = None, None
                self.stopping.wait(0.1 + random.random() * 0.2)
        if c:
            c.close()

    def _beat_loop(self) -> None:
        c: Optional[Client] = None
        while not self.stopping.wait(self.beat_every if c else 0.05):
            try:
                c = c or self._connect()
                if c is None:
                    return
                with self.lock:
                    active = list(self.active)
                state = c.beat(active)
                if state in ("quiet", "terminate"):
                    with self.lock:
                        if self.state in ("running", "quiet"):
                            self.state = state
                    self.stopping.set()
            except (OjsdError, *_CONNECTION_ERRORS) as e:
                self._connection_is("lost", e)
                if c:
                    c.close()
                c = None
        if c:
            c.close()

    def run(self, install_signals: bool = True) -> str:
        """Work until quiet, terminate, stop() or a signal; in-flight jobs finish first.
        Returns why it ended: "quiet", "terminate" or "stopped"."""
        if install_signals and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.stop)
            signal.signal(signal.SIGINT, self.stop)
        threads = [threading.Thread(target=self._beat_loop, daemon=True)]
        threads += [threading.Thread(target=self._fetch_loop, daemon=True)
                    for _ in range(self.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return self.state
