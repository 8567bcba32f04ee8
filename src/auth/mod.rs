//! Who may do what: tokens with roles (`--token ROLE:SECRET`, `--password` as one admin
//! token) and the check of a presented credential against them, shared by every front end.
//! Which role each command or route needs is decided next to the command type
//! (`protocol::command::required_role`) and in the HTTP router (`http::router`).
//!
//! | role | may |
//! |---|---|
//! | `admin` | everything |
//! | `producer` | enqueue (PUSH, PUSHB, WORKFLOW CREATE), read a job or workflow by id, INFO |
//! | `worker` | what `producer` may, and FETCH, ACK, FAIL, BEAT, PROGRESS |
//! | `observer` | read everything (INFO, jobs, lists, events, metrics), change nothing |
//!
//! A server with no token at all (neither `--password` nor `--token`) is open: every
//! client acts as `admin`.

use sha2::{Digest, Sha256};
use std::fmt;
use std::sync::Arc;

mod limiter;
pub use limiter::AuthLimiter;

/// A token's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Admin,
    Producer,
    Worker,
    Observer,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Admin, Role::Producer, Role::Worker, Role::Observer];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Producer => "producer",
            Role::Worker => "worker",
            Role::Observer => "observer",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// Whether a client with this role may do what needs `need`. Roles are not a ladder:
    /// `worker` includes `producer`, `admin` includes every role, and `observer` (reading
    /// every job and event) and `producer` (writing jobs, reading only those it knows the
    /// id of) are apart.
    pub fn may(self, need: Need) -> bool {
        match (self, need) {
            (Role::Admin, _) => true,
            (_, Need::Any) => true,
            (Role::Worker, Need::Producer | Need::Worker) => true,
            (Role::Producer, Need::Producer) => true,
            (Role::Observer, Need::Observer) => true,
            (Role::Worker | Role::Producer | Role::Observer, _) => false,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The least a command or route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Any client that got in (every role).
    Any,
    /// `producer`, `worker` or `admin`.
    Producer,
    /// `worker` or `admin`.
    Worker,
    /// `observer` or `admin`.
    Observer,
    /// `admin` only.
    Admin,
}

impl Need {
    /// The role named in a refusal ("needs the worker role").
    pub fn role(self) -> &'static str {
        match self {
            Need::Any => "any",
            Need::Producer => "producer",
            Need::Worker => "worker",
            Need::Observer => "observer",
            Need::Admin => "admin",
        }
    }
}

/// Most tokens a server takes: a TCP HELLO is checked against each of them, thousands of
/// SHA-256 rounds apiece, so their number bounds the cost of one HELLO.
pub const MAX_TOKENS: usize = 32;

/// One configured token.
#[derive(Clone)]
struct Token {
    role: Role,
    secret: Box<str>,
}

/// The server's tokens. Empty: the server is open. Its `Debug` shows roles, never secrets.
#[derive(Clone, Default)]
pub struct Tokens {
    tokens: Arc<[Token]>,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.tokens.iter().map(|t| t.role))
            .finish()
    }
}

impl Tokens {
    /// `--password` (an admin token) and the `--token` specs, each `ROLE:SECRET` or
    /// `ROLE:@PATH` (the secret is the file's content without its final line break).
    /// Errors name the spec by position and never show a secret.
    pub fn from_config(password: Option<&str>, specs: &[String]) -> Result<Tokens, String> {
        let mut tokens: Vec<Token> = Vec::new();
        if let Some(pw) = password {
            if pw.is_empty() {
                return Err("--password is empty".into());
            }
            tokens.push(Token {
                role: Role::Admin,
                secret: pw.into(),
            });
        }
        for (i, spec) in specs.iter().enumerate() {
            let n = i + 1;
            let Some((role, secret)) = spec.split_once(':') else {
                return Err(format!(
                    "--token #{n}: expected ROLE:SECRET or ROLE:@FILE (roles: admin, producer, worker, observer)"
                ));
            };
            // The role is not echoed: a spec written the wrong way round holds the secret there.
            let role = Role::parse(role.trim()).ok_or_else(|| {
                format!(
                    "--token #{n}: unknown role before the first `:` (roles: admin, producer, worker, observer)"
                )
            })?;
            let secret = match secret.strip_prefix('@') {
                Some(path) => {
                    let text = std::fs::read_to_string(path).map_err(|e| {
                        format!("--token #{n} ({role}): cannot read the secret from {path}: {e}")
                    })?;
                    text.strip_suffix('\n')
                        .map(|t| t.strip_suffix('\r').unwrap_or(t))
                        .unwrap_or(&text)
                        .to_string()
                }
                None => secret.to_string(),
            };
            if secret.is_empty() {
                return Err(format!("--token #{n} ({role}): the secret is empty"));
            }
            if tokens.iter().any(|t| same(&t.secret, &secret)) {
                return Err(format!(
                    "--token #{n} ({role}): the same secret is given twice (with --password or another --token)"
                ));
            }
            tokens.push(Token {
                role,
                secret: secret.into(),
            });
        }
        if tokens.len() > MAX_TOKENS {
            return Err(format!(
                "{} tokens given; at most {MAX_TOKENS} (each HELLO is checked against every one)",
                tokens.len()
            ));
        }
        Ok(Tokens {
            tokens: tokens.into(),
        })
    }

    /// The secret a node answers another's peer challenge with: the first admin token's
    /// (`--password`'s when given).
    pub fn admin_secret(&self) -> Option<String> {
        self.tokens
            .iter()
            .find(|t| t.role == Role::Admin)
            .map(|t| t.secret.to_string())
    }

    /// No token configured: every client is `admin`.
    pub fn is_open(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The role of an HTTP bearer token, compared in constant time with every token (all
    /// of them, whichever matches).
    pub fn bearer(&self, given: &str) -> Option<Role> {
        let mut found = None;
        for t in self.tokens.iter() {
            if same(given, &t.secret) {
                found = Some(t.role);
            }
        }
        found
    }

    /// The role whose secret answers a HELLO challenge (`pwdhash` for `salt` and
    /// `iterations`): one hash per token, every token hashed whichever matches. Thousands
    /// of SHA-256 rounds per token: call it off the async threads.
    pub fn pwdhash(&self, given: &str, salt: &str, iterations: u32) -> Option<Role> {
        // A SHA-256 in hex is 64 characters: anything else cannot match, no need to hash.
        if given.len() != 64 {
            return None;
        }
        let mut found = None;
        for t in self.tokens.iter() {
            if same(given, &password_hash(&t.secret, salt, iterations)) {
                found = Some(t.role);
            }
        }
        found
    }
}

/// Faktory's password hash: `sha256(password ++ salt)`, then `sha256` over the raw digest
/// `iterations - 1` more times, in lowercase hex.
pub fn password_hash(password: &str, salt: &str, iterations: u32) -> String {
    let mut h = Sha256::new();
    h.update(password.as_bytes());
    h.update(salt.as_bytes());
    let mut digest = h.finalize();
    for _ in 1..iterations {
        digest = Sha256::digest(digest);
    }
    hex::encode(digest)
}

/// Compare without an early exit, so timing does not reveal how much of a secret matched
/// (only whether the lengths differ).
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_hash_matches_faktory_scheme() {
        // sha256("secret" ++ "abc"), then sha256 over the raw digest, iterations-1 times.
        let once = hex::encode(Sha256::digest(b"secretabc"));
        assert_eq!(password_hash("secret", "abc", 1), once);
        let twice = hex::encode(Sha256::digest(Sha256::digest(b"secretabc")));
        assert_eq!(password_hash("secret", "abc", 2), twice);
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }

    #[test]
    fn roles_grant_what_the_table_says() {
        use Need::*;
        let may = |r: Role| {
            [Any, Producer, Worker, Observer, Admin]
                .into_iter()
                .filter(|n| r.may(*n))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            may(Role::Admin),
            vec![Any, Producer, Worker, Observer, Admin]
        );
        assert_eq!(may(Role::Worker), vec![Any, Producer, Worker]);
        assert_eq!(may(Role::Producer), vec![Any, Producer]);
        assert_eq!(may(Role::Observer), vec![Any, Observer]);
    }

    #[test]
    fn specs_are_parsed_and_secrets_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("w");
        std::fs::write(&file, "from-file\n").unwrap();
        let t = Tokens::from_config(
            Some("pw"),
            &[
                "producer:p:with:colons".into(),
                format!("worker:@{}", file.display()),
            ],
        )
        .unwrap();
        assert_eq!(t.bearer("pw"), Some(Role::Admin));
        assert_eq!(t.bearer("p:with:colons"), Some(Role::Producer));
        assert_eq!(t.bearer("from-file"), Some(Role::Worker));
        assert_eq!(t.bearer("from-file\n"), None);
        assert_eq!(t.bearer(""), None);
        let h = password_hash("from-file", "salt", 3);
        assert_eq!(t.pwdhash(&h, "salt", 3), Some(Role::Worker));
        assert_eq!(t.pwdhash(&h, "salt", 4), None);
        assert_eq!(format!("{t:?}"), "[Admin, Producer, Worker]");

        for (specs, what) in [
            (vec!["nope:s3cr3t"], "unknown role"),
            (vec!["s3cr3t"], "expected ROLE:SECRET"),
            (vec!["admin:"], "empty"),
            (vec!["admin:s3cr3t", "observer:s3cr3t"], "twice"),
            (vec!["worker:@/nonexistent/s3cr3t"], "cannot read"),
        ] {
            let specs: Vec<String> = specs.into_iter().map(String::from).collect();
            let e = Tokens::from_config(None, &specs).unwrap_err();
            assert!(e.contains(what), "{e}");
            assert!(!e.contains("s3cr3t") || what == "cannot read", "{e}");
        }
        let many: Vec<String> = (0..=MAX_TOKENS).map(|i| format!("worker:t{i}")).collect();
        assert!(Tokens::from_config(None, &many).is_err());
        assert!(Tokens::from_config(None, &[]).unwrap().is_open());
    }
}
