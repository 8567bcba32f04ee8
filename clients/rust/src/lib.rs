//! Blocking client and worker for `ojsd`, a job broker that speaks a
//! Faktory-style line protocol carrying Open Job Spec (OJS) job envelopes.
//!
//! * [`Client`] is one connection: producers push jobs, consumers fetch and
//!   acknowledge them, admins inspect and control the broker.
//! * [`Worker`] runs handlers for fetched jobs on a pool of threads, each with
//!   its own connection, plus a heartbeat connection.
//!
//! Everything is std-only blocking I/O; no async runtime is needed.

mod client;
mod handshake;
mod runtime;
pub mod wire;
mod worker;

use std::fmt;

pub use client::{Client, ConnectOptions, Directive};
pub use handshake::password_hash;
pub use wire::Reply;
pub use worker::{Handler, JobOutcome, StopHandle, Worker, WorkerStats};

/// Everything that can go wrong talking to the broker.
#[derive(Debug)]
pub enum Error {
    /// The socket failed (refused, reset, timed out, closed mid-reply...).
    Io(std::io::Error),
    /// The broker answered with an error reply (`-ERR CODE message`).
    Server { code: String, message: String },
    /// The broker sent something this client cannot make sense of, or the
    /// caller asked for something that cannot be put on the wire.
    Protocol(String),
}

impl Error {
    /// The server error code (e.g. `"NOT_FOUND"`), if this is a server error.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Server { code, .. } => Some(code),
            _ => None,
        }
    }

    /// True when the connection can no longer be trusted to be in sync and
    /// should be replaced (as opposed to a server error, after which the
    /// connection is still usable).
    pub fn is_connection_error(&self) -> bool {
        matches!(self, Error::Io(_) | Error::Protocol(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "i/o error: {e}"),
            Error::Server { code, message } if message.is_empty() => {
                write!(f, "server error {code}")
            }
            Error::Server { code, message } => write!(f, "server error {code}: {message}"),
            Error::Protocol(m) => write!(f, "protocol error: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Convenience constructor for a minimal job envelope:
/// `{"type": job_type, "args": args}`. Add `queue`, `priority`, `meta`, ...
/// by indexing into the returned object.
pub fn job(job_type: &str, args: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "type": job_type, "args": args })
}

#[cfg(test)]
mod tests;

// Compile the README's examples as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
