//! One blocking connection to the broker.

use std::io::{BufReader, BufWriter, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use serde_json::{json, Value};

use crate::handshake::{build_hello, open, parse_greeting};
use crate::wire::{self, Reply};
use crate::{Error, Result};

/// How to connect. `Default` is an anonymous producer without a password.
#[derive(Debug, Default, Clone)]
pub struct ConnectOptions {
    /// Worker id; set it for consumers so the server can track heartbeats.
    pub wid: Option<String>,
    /// Needed when the server greets with a salt.
    pub password: Option<String>,
    pub labels: Vec<String>,
    /// Defaults to the machine's hostname.
    pub hostname: Option<String>,
    /// Connect timeout and socket read/write timeout. Keep it above the
    /// server's FETCH block time (~2 s) when fetching.
    pub timeout: Option<Duration>,
}

/// What the server wants a worker process to do, from a BEAT reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directive {
    Running,
    Quiet,
    Terminate,
}

/// A connection. Not thread-safe by design: one per thread.
///
/// After an `Error::Io` or `Error::Protocol` the reply stream may be out of
/// step with the commands sent, so the client refuses further commands and
/// should be replaced with a fresh connection.
pub struct Client {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
    greeting: Value,
    broken: bool,
}

impl Client {
    /// Connect as a producer (no worker id, no password).
    pub fn connect(addr: &str) -> Result<Client> {
        Client::connect_with(addr, &ConnectOptions::default())
    }

    /// Connect, read the `HI` greeting and complete the `HELLO` handshake.
    pub fn connect_with(addr: &str, opts: &ConnectOptions) -> Result<Client> {
        let stream = open(addr, opts.timeout)?;
        // Request/response over small lines: Nagle would only add latency.
        stream.set_nodelay(true)?;
        stream.set_read_timeout(opts.timeout)?;
        stream.set_write_timeout(opts.timeout)?;
        let mut client = Client {
            reader: BufReader::new(stream.try_clone()?),
            writer: BufWriter::new(stream),
            greeting: Value::Null,
            broken: false,
        };
        client.greeting = parse_greeting(client.read_reply()?)?;
        let hello = build_hello(&client.greeting, opts)?;
        expect_ok(client.call(&format!("HELLO {hello}"))?)?;
        Ok(client)
    }

    /// The JSON payload of the server's `HI` greeting.
    pub fn greeting(&self) -> &Value {
        &self.greeting
    }

    /// Send one raw command line and read its reply. An error reply comes
    /// back as `Ok(Reply::Error{..})`, not as `Err`.
    pub fn call(&mut self, line: &str) -> Result<Reply> {
        self.send_line(line)?;
        self.flush()?;
        self.read_reply()
    }

    /// Queue one command line in the write buffer (for pipelining); call
    /// [`flush`](Self::flush) and then one `read_reply` per line sent.
    pub fn send_line(&mut self, line: &str) -> Result<()> {
        self.ensure_usable()?;
        wire::check_line(line)?;
        let r = wire::write_line(&mut self.writer, line);
        self.track(r)
    }

    pub fn flush(&mut self) -> Result<()> {
        self.ensure_usable()?;
        let r = self.writer.flush().map_err(Error::from);
        self.track(r)
    }

    /// Read the next reply from the server.
    pub fn read_reply(&mut self) -> Result<Reply> {
        self.ensure_usable()?;
        let r = wire::read_reply(&mut self.reader);
        self.track(r)
    }

    /// Enqueue one job; returns the stored envelope (with `id`, `state`, ...).
    pub fn push(&mut self, job: &Value) -> Result<Value> {
        let reply = self.command(&format!("PUSH {job}"))?;
        bulk_json(reply)
    }

    /// Enqueue several jobs atomically: all are stored or, on error, none.
    pub fn push_bulk(&mut self, jobs: &[Value]) -> Result<Vec<Value>> {
        let payload = serde_json::to_string(jobs)
            .map_err(|e| Error::Protocol(format!("cannot encode jobs: {e}")))?;
        match bulk_json(self.command(&format!("PUSHB {payload}"))?)? {
            Value::Array(stored) => Ok(stored),
            other => Err(unexpected("PUSHB", &other)),
        }
    }

    /// Fetch one job from the first non-empty queue, in order. `None` when
    /// nothing arrived within the server's block time. An empty `queues`
    /// slice means `["default"]`.
    pub fn fetch(&mut self, queues: &[&str]) -> Result<Option<Value>> {
        let line = format!("FETCH {}", queue_list(queues)?);
        match self.command(&line)? {
            Reply::Null => Ok(None),
            reply => bulk_json(reply).map(Some),
        }
    }

    /// Fetch up to `count` jobs in one round trip; empty when none arrived.
    pub fn fetch_many(&mut self, queues: &[&str], count: usize) -> Result<Vec<Value>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let line = format!("FETCH {} COUNT {count}", queue_list(queues)?);
        match self.command(&line)? {
            Reply::Null => Ok(Vec::new()),
            reply => match bulk_json(reply)? {
                Value::Array(jobs) => Ok(jobs),
                // Tolerate a server that sends a lone job for a batch of one.
                job @ Value::Object(_) => Ok(vec![job]),
                other => Err(unexpected("FETCH COUNT", &other)),
            },
        }
    }

    /// Report success, optionally with a result value stored on the job.
    pub fn ack(&mut self, id: &str, result: Option<&Value>) -> Result<()> {
        let mut body = json!({ "id": id });
        if let Some(r) = result {
            body["result"] = r.clone();
        }
        expect_ok(self.command(&format!("ACK {body}"))?)
    }

    /// Report success for several jobs in one round trip (`ACKB`, PROTOCOL.md
    /// §5.2), each `(id, result)` on its own: what a `fetch_many` handed out.
    /// Returns the refused ones by their position in `acks` with the server's
    /// error (empty when every one was acknowledged); the others are durable
    /// once this returns. At most 1000 per call; none is a no-op.
    pub fn ack_many(&mut self, acks: &[(&str, Option<&Value>)]) -> Result<Vec<(usize, Error)>> {
        if acks.is_empty() {
            return Ok(Vec::new());
        }
        let body: Vec<Value> = acks
            .iter()
            .map(|(id, result)| match result {
                Some(r) => json!({ "id": id, "result": r }),
                None => json!({ "id": id }),
            })
            .collect();
        let reply = bulk_json(self.command(&format!("ACKB {}", Value::Array(body)))?)?;
        let refused = reply
            .get("rejected")
            .and_then(Value::as_array)
            .ok_or_else(|| unexpected("ACKB", &reply))?;
        refused
            .iter()
            .map(|r| {
                let at = r.get("index").and_then(Value::as_u64);
                let code = r.get("code").and_then(Value::as_str);
                match (at, code) {
                    (Some(at), Some(code)) if (at as usize) < acks.len() => Ok((
                        at as usize,
                        Error::Server {
                            code: code.to_string(),
                            message: r
                                .get("message")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_string(),
                        },
                    )),
                    _ => Err(unexpected("ACKB", &reply)),
                }
            })
            .collect()
    }

    /// Report success and take the next job from `queues` in the same round
    /// trip (`ACK {"id", "result", "fetch": [...], "wait_ms"}`, PROTOCOL.md
    /// §5.2): the next job, or `None` when none came within the server's
    /// block time (`wait_ms`, at most the server's `--fetch-wait-ms`). A reply
    /// at all means the ACK is durable; a refused ACK is `Err(Error::Server)`
    /// and nothing was fetched. An empty `queues` slice means `["default"]`.
    pub fn ack_fetch(
        &mut self,
        id: &str,
        result: Option<&Value>,
        queues: &[&str],
        wait_ms: Option<u64>,
    ) -> Result<Option<Value>> {
        let queues: Vec<&str> = if queues.is_empty() {
            vec!["default"]
        } else {
            queues.to_vec()
        };
        for q in &queues {
            word(q, "queue name")?;
        }
        let mut body = json!({ "id": id, "fetch": queues });
        if let Some(r) = result {
            body["result"] = r.clone();
        }
        if let Some(ms) = wait_ms {
            body["wait_ms"] = json!(ms);
        }
        match self.command(&format!("ACK {body}"))? {
            Reply::Null => Ok(None),
            reply => bulk_json(reply).map(Some),
        }
    }

    /// Report failure; the server applies the job's retry policy.
    pub fn fail(
        &mut self,
        id: &str,
        error_type: &str,
        message: &str,
        backtrace: &[String],
    ) -> Result<()> {
        let body = json!({
            "id": id,
            "error": { "type": error_type, "message": message, "backtrace": backtrace },
        });
        expect_ok(self.command(&format!("FAIL {body}"))?)
    }

    /// Heartbeat for worker `wid`; the reply says whether to keep going.
    pub fn beat(&mut self, wid: &str, active_job_ids: &[String]) -> Result<Directive> {
        let body = json!({ "wid": wid, "active_job_ids": active_job_ids });
        match self.command(&format!("BEAT {body}"))? {
            Reply::Simple(_) => Ok(Directive::Running),
            reply => {
                let v = bulk_json(reply)?;
                match v.get("state").and_then(Value::as_str) {
                    Some("quiet") => Ok(Directive::Quiet),
                    Some("terminate") => Ok(Directive::Terminate),
                    Some("running") => Ok(Directive::Running),
                    _ => Err(unexpected("BEAT", &v)),
                }
            }
        }
    }

    pub fn cancel(&mut self, id: &str) -> Result<()> {
        expect_ok(self.command(&format!("CANCEL {}", json!({ "id": id })))?)
    }

    /// Release a job that was pushed with `"pending": true`.
    pub fn activate(&mut self, id: &str) -> Result<()> {
        expect_ok(self.command(&format!("ACTIVATE {}", json!({ "id": id })))?)
    }

    /// Look up one job envelope by id.
    pub fn job(&mut self, id: &str) -> Result<Value> {
        let reply = self.command(&format!("JOB {}", word(id, "job id")?))?;
        bulk_json(reply)
    }

    /// Server statistics.
    pub fn info(&mut self) -> Result<Value> {
        bulk_json(self.command("INFO")?)
    }

    /// The cluster's nodes and the partitions each holds (`CLUSTER`).
    pub fn cluster(&mut self) -> Result<Value> {
        bulk_json(self.command("CLUSTER")?)
    }

    pub fn pause_queues(&mut self, queues: &[&str]) -> Result<()> {
        self.queue_op("PAUSE", queues)
    }

    pub fn resume_queues(&mut self, queues: &[&str]) -> Result<()> {
        self.queue_op("RESUME", queues)
    }

    /// Ask worker `wid` (via its next BEAT) to stop fetching.
    pub fn quiet_worker(&mut self, wid: &str) -> Result<()> {
        expect_ok(self.command(&format!("WORKER QUIET {}", word(wid, "worker id")?))?)
    }

    /// Ask worker `wid` (via its next BEAT) to finish up and exit.
    pub fn terminate_worker(&mut self, wid: &str) -> Result<()> {
        expect_ok(self.command(&format!("WORKER TERMINATE {}", word(wid, "worker id")?))?)
    }

    /// Send any command line and read its answer: `Some(json)` for a bulk reply, `None`
    /// for `+OK` or a null reply; an error reply is `Err(Error::Server)`.
    pub fn request(&mut self, line: &str) -> Result<Option<Value>> {
        match self.command(line)? {
            Reply::Bulk(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| Error::Protocol(format!("invalid JSON in reply: {e}"))),
            _ => Ok(None),
        }
    }

    /// Say goodbye; the server closes the connection without replying.
    pub fn end(mut self) -> Result<()> {
        // Deliberately skips the `broken` check: END is harmless even on a
        // connection whose replies are out of step.
        wire::write_line(&mut self.writer, "END")?;
        self.writer.flush()?;
        let _ = self.writer.get_ref().shutdown(Shutdown::Write);
        Ok(())
    }

    fn queue_op(&mut self, op: &str, queues: &[&str]) -> Result<()> {
        if queues.is_empty() {
            return Err(Error::Protocol(format!(
                "QUEUE {op} needs at least one queue"
            )));
        }
        let line = format!("QUEUE {op} {}", queue_list(queues)?);
        expect_ok(self.command(&line)?)
    }

    /// `call`, with error replies turned into `Err(Error::Server)`.
    fn command(&mut self, line: &str) -> Result<Reply> {
        self.call(line)?.into_result()
    }

    fn ensure_usable(&self) -> Result<()> {
        if self.broken {
            return Err(Error::Protocol(
                "connection unusable after an earlier i/o or protocol error".into(),
            ));
        }
        Ok(())
    }

    /// Mark the connection broken on any error that may leave it out of sync.
    fn track<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            if e.is_connection_error() {
                self.broken = true;
            }
        }
        r
    }
}

/// Space-separated queue names; each must be a single non-empty word.
fn queue_list(queues: &[&str]) -> Result<String> {
    if queues.is_empty() {
        return Ok("default".into());
    }
    let words = queues
        .iter()
        .map(|q| word(q, "queue name"))
        .collect::<Result<Vec<_>>>()?;
    Ok(words.join(" "))
}

/// A token that goes on the command line unquoted.
fn word<'a>(s: &'a str, what: &str) -> Result<&'a str> {
    if s.is_empty() || s.chars().any(char::is_whitespace) {
        return Err(Error::Protocol(format!("invalid {what} {s:?}")));
    }
    Ok(s)
}

fn expect_ok(reply: Reply) -> Result<()> {
    match reply.into_result()? {
        Reply::Simple(_) => Ok(()),
        other => Err(Error::Protocol(format!("expected +OK, got {other:?}"))),
    }
}

fn bulk_json(reply: Reply) -> Result<Value> {
    match reply.into_result()? {
        Reply::Bulk(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| Error::Protocol(format!("invalid JSON in reply: {e}"))),
        other => Err(Error::Protocol(format!(
            "expected a bulk JSON reply, got {other:?}"
        ))),
    }
}

fn unexpected(cmd: &str, v: &Value) -> Error {
    Error::Protocol(format!("unexpected {cmd} reply {v}"))
}
