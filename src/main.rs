//! The `ojsd` binary: parse flags (and the config file), bind the listeners, open the
//! store, start the engine, serve, and shut down cleanly on SIGTERM/SIGINT.

use clap::{CommandFactory, FromArgMatches};
use ojsd::auth::AuthLimiter;
use ojsd::auth::Tokens;
use ojsd::cluster::{serve_peers, PeerServerConfig, Router};
use ojsd::config_file;
use ojsd::engine::{self, Config};
use ojsd::events::held::HeldLimits;
use ojsd::http::HttpConfig;
use ojsd::job::validate::Limits;
use ojsd::server::{self, ServerConfig};
use ojsd::store::{self, StoreError, StoreKind, DEFAULT_CACHE_MB};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

// The engine allocates and frees many small buffers per job (JSON, sled pages); mimalloc
// handles that pattern markedly better than glibc malloc (see bench/RESULTS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A durable background-job broker speaking the Open Job Spec over a Faktory-style protocol.
///
/// Every flag can also come from its `OJSD_*` environment variable or from the `--config`
/// file; a flag wins over the variable, which wins over the file.
///
/// With a subcommand (`ojsd queues`, `ojsd push ...`, `ojsd tail`, ...), it is instead an
/// admin client of a running server; `ojsd help <subcommand>` explains each.
#[derive(clap::Parser, Debug)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<ojsd::cli::Command>,
    /// A TOML file of settings: each key is a flag's long name (`max_line_bytes` or
    /// `max-line-bytes`); see ojsd.toml.sample.
    #[arg(long, env = "OJSD_CONFIG", value_name = "PATH")]
    config: Option<PathBuf>,
    /// Address for the TCP protocol (port 0 picks a free port; the chosen address is printed).
    #[arg(long, env = "OJSD_LISTEN", default_value = "127.0.0.1:7419")]
    listen: SocketAddr,
    /// Directory of the embedded database.
    #[arg(long, env = "OJSD_DATA_DIR", default_value = "./ojsd-data")]
    data_dir: PathBuf,
    /// Require clients to authenticate with this password (Faktory's scheme): one token
    /// with the admin role.
    #[arg(long, env = "OJSD_PASSWORD", hide_env_values = true)]
    password: Option<String>,
    /// A token with a role, `ROLE:SECRET` or `ROLE:@FILE` (the secret is the file's
    /// content); roles: admin, producer, worker, observer (PROTOCOL.md §13.7). Repeatable;
    /// the variable and the file's `tokens` key take a comma-separated list.
    #[arg(long = "token", alias = "tokens", env = "OJSD_TOKENS", value_name = "ROLE:SECRET",
          value_delimiter = ',', hide_env_values = true, action = clap::ArgAction::Append)]
    token: Vec<String>,
    /// Longest accepted command line, bytes.
    #[arg(long, env = "OJSD_MAX_LINE_BYTES", default_value_t = 1024 * 1024 + 64 * 1024)]
    max_line_bytes: usize,
    /// Largest accepted job envelope (and ACK result), bytes.
    #[arg(long, env = "OJSD_MAX_JOB_BYTES", default_value_t = 1024 * 1024)]
    max_job_bytes: usize,
    /// Largest HTTP request body, bytes; a larger one is refused with 413. At least
    /// --max-job-bytes; by default 4 times it (a batch carries several jobs).
    #[arg(long, env = "OJSD_MAX_BODY_BYTES")]
    max_body_bytes: Option<usize>,
    /// Visibility timeout for jobs that set no `timeout`, seconds.
    #[arg(long, env = "OJSD_DEFAULT_TIMEOUT", default_value_t = 1800)]
    default_timeout: u64,
    /// How long completed and cancelled jobs stay inspectable, seconds.
    #[arg(long, env = "OJSD_RETENTION", default_value_t = 86_400)]
    retention: u64,
    /// How long discarded (dead-letter) jobs are kept, seconds.
    #[arg(long, env = "OJSD_DEAD_RETENTION", default_value_t = 180 * 86_400)]
    dead_retention: u64,
    /// Most discarded jobs kept; the oldest are pruned first.
    #[arg(long, env = "OJSD_DEAD_MAX", default_value_t = 10_000)]
    dead_max: usize,
    /// A worker silent for this long is declared dead and its jobs requeued, seconds
    /// (three missed 15 s heartbeats).
    #[arg(long, env = "OJSD_HEARTBEAT_TIMEOUT", default_value_t = 45)]
    heartbeat_timeout: u64,
    /// How long an empty FETCH waits for a job, milliseconds.
    #[arg(long, env = "OJSD_FETCH_WAIT_MS", default_value_t = 2000)]
    fetch_wait_ms: u64,
    /// Sync each group commit on a second thread while the engine applies the next batch
    /// (true), or sync on the engine thread (false). Replies wait for their own batch to
    /// be durable either way. Default: true with `--store postgres` (a sync is a round
    /// trip to the database, which the engine need not wait out), false with the
    /// embedded stores (bench/RESULTS.md: no gain there).
    #[arg(long, env = "OJSD_COMMIT_PIPELINE", action = clap::ArgAction::Set)]
    commit_pipeline: Option<bool>,
    /// With --store postgres and several partitions: threads that run this node's
    /// partitions' engines, each thread several of them (a thread per partition sleeps and
    /// wakes per batch: bench/RESULTS.md). 0: automatic, a thread per 4 partitions held,
    /// up to one per core.
    #[arg(long, env = "OJSD_ENGINE_THREADS", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1024))]
    engine_threads: u32,
    /// Most bytes of unfinished jobs (encoded envelopes) held at once; a PUSH past it is
    /// refused with QUEUE_FULL. 0 = no limit.
    #[arg(long, env = "OJSD_MAX_QUEUED_BYTES", default_value_t = engine::DEFAULT_MAX_QUEUED_BYTES)]
    max_queued_bytes: u64,
    /// The database: fjall, or sled (ojsd's store before fjall), embedded in the data dir,
    /// which records which one wrote it and is refused by the other; or postgres
    /// (--postgres-url), which keeps everything in PostgreSQL and ignores --data-dir.
    #[arg(long, env = "OJSD_STORE", value_enum, default_value_t = StoreKind::DEFAULT)]
    store: StoreKind,
    /// With --store postgres: the database, as a URL (`postgres://user:pw@host:5432/db`)
    /// or libpq key=value pairs. Plain TCP or a Unix socket (`host=/run/postgresql`); no TLS.
    #[arg(
        long,
        env = "OJSD_POSTGRES_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    postgres_url: Option<String>,
    /// With --store postgres: the schema holding ojsd's tables (created if missing).
    #[arg(
        long,
        env = "OJSD_POSTGRES_SCHEMA",
        default_value = "public",
        value_name = "NAME"
    )]
    postgres_schema: String,
    /// With --store postgres: this node's id, the owner named in the partition's lease.
    /// Default: <hostname>-<pid>, which is persisted nowhere, so a restarted ojsd waits for
    /// the lease of a crashed predecessor to expire (--lease-ttl-ms); give a stable id to
    /// take its partition back at once. (On fjall and sled, only the name CLUSTER reports.)
    #[arg(long, env = "OJSD_NODE_ID", value_name = "ID")]
    node_id: Option<String>,
    /// With --store postgres: how long the partition's lease lasts past its last renewal
    /// (renewed every fifth of it), ms. A node that cannot renew stops writing a fifth of
    /// it before it runs out; another node may take the partition once it has. While
    /// another node holds it, this one is a standby: it serves its clients by forwarding
    /// to the holder (--peer-listen) and tries to take the partition every fifth of it.
    #[arg(long, env = "OJSD_LEASE_TTL_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(500..))]
    lease_ttl_ms: u64,
    /// With --store postgres: memory for committed records read back from PostgreSQL (a
    /// bounded cache in front of the table, so a record read twice costs one round trip),
    /// MiB; 0: none.
    #[arg(long, env = "OJSD_POSTGRES_CACHE_MB", default_value_t = 64)]
    postgres_cache_mb: u64,
    /// With --store postgres: the cluster's number of partitions, fixed when its tables are
    /// created (a node joining a cluster uses the cluster's). A queue belongs to one
    /// partition (by a hash of its name); each partition is served by one node at a time,
    /// and the nodes share them out evenly. 1: one node serves everything, the others
    /// stand by and forward.
    #[arg(long, env = "OJSD_PARTITIONS", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    partitions: u32,
    /// Address for the peer protocol (cluster mode, --store postgres): while this node holds
    /// the partition, the other nodes forward their clients' requests here. It is
    /// registered in PostgreSQL for them to find, so give one they can reach (not
    /// 0.0.0.0). TLS (--tls-cert) and the password apply as on --listen; a peer must
    /// authenticate as admin. Off unless set (a node without it cannot be forwarded to).
    #[arg(long, env = "OJSD_PEER_LISTEN", value_name = "ADDR")]
    peer_listen: Option<SocketAddr>,
    /// Cache of the embedded database (fjall's block cache, sled's page cache), MiB.
    #[arg(long, env = "OJSD_CACHE_MB", default_value_t = DEFAULT_CACHE_MB)]
    cache_mb: u64,
    /// Jobs kept in memory for their FETCH and ACK, MiB of their encoded size (about 1.5x
    /// that in memory for the usual job, kept lean; 4x for one with attributes OJS does
    /// not define, kept decoded; one job per KiB of it at most). Larger costs memory and
    /// saves CPU when workers fall behind producers: 64 against 16 gave 6-37% more jobs/s
    /// in batch mode and +74 MiB of RSS with 1,000,000 jobs queued (bench/RESULTS.md,
    /// round 12).
    #[arg(long, env = "OJSD_JOB_CACHE_MB", default_value_t = 64)]
    job_cache_mb: u64,
    /// Log filter: off, error, warn, info, debug, trace, or tracing directives that each
    /// name a level (`warn,ojsd::server=debug`).
    #[arg(long, env = "OJSD_LOG_LEVEL", default_value = "info", value_parser = parse_log_level)]
    log_level: String,
    /// Let `CLOCK ADVANCE <secs>` move the engine clock. For tests only: hidden from --help.
    #[arg(long, env = "OJSD_TEST_CLOCK", hide = true)]
    test_clock: bool,
    /// Address for HTTP: events over SSE, WebSocket and polling, /metrics, health; `off`
    /// disables it. Port 0 picks a free port; the chosen address is printed.
    #[arg(long, env = "OJSD_HTTP_LISTEN", default_value = "127.0.0.1:7420", value_parser = parse_http_listen)]
    http_listen: HttpListen,
    /// Browser origins allowed to call the HTTP API across origins (CORS), e.g.
    /// `https://admin.example.com`; repeat or separate with commas. None by default.
    #[arg(long = "cors-origin", env = "OJSD_CORS_ORIGINS", value_delimiter = ',')]
    cors_origin: Vec<String>,
    /// A second TCP listener that speaks the Faktory dialect (off unless set; Faktory
    /// clients expect 7419, so then move --listen elsewhere).
    #[arg(long, env = "OJSD_FAKTORY_LISTEN")]
    faktory_listen: Option<SocketAddr>,
    /// How long an SSE stream may stay silent before a keep-alive comment is sent, ms.
    #[arg(long, env = "OJSD_SSE_KEEPALIVE_MS", default_value_t = 15_000)]
    sse_keepalive_ms: u64,
    /// Bytes of events one subscriber (TCP SUBSCRIBE, an SSE stream, a WebSocket
    /// subscription) may have waiting for it; past it the subscriber reads the log instead.
    #[arg(long, env = "OJSD_MAX_SUBSCRIBER_BYTES", default_value_t = ojsd::events::held::DEFAULT_PER_SUBSCRIBER, value_parser = parse_positive_usize)]
    max_subscriber_bytes: usize,
    /// Bytes of events all subscribers together may have waiting for them; past it the
    /// buffers of subscribers that stopped reading are emptied (they resume from the log).
    #[arg(long, env = "OJSD_MAX_SUBSCRIBER_BYTES_TOTAL", default_value_t = ojsd::events::held::DEFAULT_TOTAL, value_parser = parse_positive_usize)]
    max_subscriber_bytes_total: usize,
    /// Most queues known at once; a job naming one more is refused with QUEUE_FULL until a
    /// queue has held nothing for 10 minutes and is forgotten. 0: no limit.
    #[arg(long, env = "OJSD_MAX_QUEUES", default_value_t = engine::DEFAULT_MAX_QUEUES)]
    max_queues: usize,
    /// Most (job type, queue) pairs with metric series of their own on /metrics (and
    /// queues with gauges of their own); the rest are summed under "_other".
    #[arg(long, env = "OJSD_MAX_METRIC_SERIES", default_value_t = engine::metrics::DEFAULT_MAX_SERIES, value_parser = parse_positive_usize)]
    max_metric_series: usize,
    /// Compact the store's jobs (or events) once this many records were deleted and at
    /// least as many as are left, so disk is given back after a large prune; 0: never.
    /// (fjall only: sled and PostgreSQL reclaim space on their own.)
    #[arg(long, env = "OJSD_COMPACT_AFTER_DELETES", default_value_t = engine::compact_after_deletes_default())]
    compact_after_deletes: u64,
    /// Bytes of replies a TCP connection may owe (pipelined, not yet read by the client)
    /// before the server stops reading its commands.
    #[arg(long, env = "OJSD_MAX_PENDING_REPLY_BYTES", default_value_t = server::DEFAULT_MAX_PENDING_REPLY_BYTES)]
    max_pending_reply_bytes: usize,
    /// Connections at once on each listener (TCP and HTTP counted apart); past it a new
    /// connection is refused with TOO_MANY_CONNECTIONS and closed.
    #[arg(long, env = "OJSD_MAX_CONNECTIONS", default_value_t = server::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// TCP connections at once that have not completed HELLO; when full, the oldest of them
    /// is closed to make room for a newcomer.
    #[arg(long, env = "OJSD_MAX_HANDSHAKING", default_value_t = server::DEFAULT_MAX_HANDSHAKING)]
    max_handshaking: usize,
    /// Time from connect to an accepted HELLO (TLS handshake included), and for an HTTP
    /// request's headers, ms.
    #[arg(long, env = "OJSD_HELLO_TIMEOUT_MS", default_value_t = server::DEFAULT_HELLO_TIMEOUT_MS)]
    hello_timeout_ms: u64,
    /// Time for an HTTP request's whole body to arrive after its headers, ms; past it the
    /// request gets 408 and the connection closes.
    #[arg(long, env = "OJSD_BODY_TIMEOUT_MS", default_value_t = ojsd::http::body::DEFAULT_BODY_TIMEOUT_MS)]
    body_timeout_ms: u64,
    /// A TCP connection without a worker id that sends nothing (and waits for no reply)
    /// this long is closed, ms; 0: never.
    #[arg(long, env = "OJSD_IDLE_TIMEOUT_MS", default_value_t = server::DEFAULT_IDLE_TIMEOUT_MS)]
    idle_timeout_ms: u64,
    /// Wrong passwords (a TCP HELLO's, an HTTP bearer token) allowed per client address
    /// per --auth-failure-window-ms, counted across all listeners; more are refused with
    /// RATE_LIMITED (HTTP: 429). 0: no limit.
    #[arg(long, env = "OJSD_MAX_AUTH_FAILURES", default_value_t = server::DEFAULT_MAX_AUTH_FAILURES)]
    max_auth_failures: u32,
    /// The window of --max-auth-failures, ms (the allowance refills evenly over it).
    #[arg(long, env = "OJSD_AUTH_FAILURE_WINDOW_MS", default_value_t = server::DEFAULT_AUTH_FAILURE_WINDOW_MS)]
    auth_failure_window_ms: u64,
    /// TLS certificate chain (PEM); with --tls-key, both listeners speak TLS only.
    #[arg(long, env = "OJSD_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "OJSD_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

/// `--http-listen`: an address, or `off`.
#[derive(Debug, Clone, Copy)]
struct HttpListen(Option<SocketAddr>);

/// A byte count of at least 1 (a zero bound would starve every subscriber).
fn parse_positive_usize(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_http_listen(s: &str) -> Result<HttpListen, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(HttpListen(None));
    }
    s.parse()
        .map(|a| HttpListen(Some(a)))
        .map_err(|e| format!("{e}; give an address like 127.0.0.1:7420, or off"))
}

/// `--log-level`: a level, or comma-separated tracing directives each of which names a
/// level (`target=level`). tracing would take a bare word that is not a level (`infoo`) as
/// a target name and log nothing of ojsd's, so that is refused rather than guessed at.
fn parse_log_level(s: &str) -> Result<String, String> {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    for d in s.split(',') {
        let d = d.trim();
        if !d.contains('=') && !LEVELS.iter().any(|l| l.eq_ignore_ascii_case(d)) {
            return Err(format!(
                "`{d}` is not a level ({}) nor a target=level directive",
                LEVELS.join(", ")
            ));
        }
    }
    tracing_subscriber::EnvFilter::try_new(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// The tracing filter for `--log-level`. fjall reports its routine work (recovering the
/// database, rotating journals, flushing) at info: at info and above those go to warn,
/// unless the filter names fjall or lsm_tree itself.
fn log_filter(level: &str) -> tracing_subscriber::EnvFilter {
    use tracing_subscriber::filter::LevelFilter;
    let mut filter = tracing_subscriber::EnvFilter::new(level);
    if filter
        .max_level_hint()
        .is_none_or(|l| l > LevelFilter::WARN)
    {
        for (target, directive) in [("fjall", "fjall=warn"), ("lsm_tree", "lsm_tree=warn")] {
            if !level.contains(target) {
                if let Ok(d) = directive.parse() {
                    filter = filter.add_directive(d);
                }
            }
        }
    }
    filter
}

/// `OJSD_*` variables that no flag reads, with the closest one a flag does read: a misspelt
/// variable (`OJSD_CORS_ORIGIN` for `OJSD_CORS_ORIGINS`) would otherwise be ignored without
/// a word. The test harnesses' own variables are not flags' and are left alone.
fn unknown_env_vars(cmd: &clap::Command) -> Vec<(String, Option<String>)> {
    const NOT_FLAGS: &[&str] = &[
        "OJSD_TEST_STORE",
        "OJSD_TEST_POSTGRES_URL",
        "OJSD_BIN",
        "OJSD_FUZZ",
        "OJSD_FUZZ_SECS",
        "OJSD_LAZYFS_PYTHON",
    ];
    // The admin subcommands read variables of their own (`OJSD_ADDR`).
    fn envs(cmd: &clap::Command, out: &mut Vec<String>) {
        out.extend(
            cmd.get_arguments()
                .filter_map(|a| a.get_env())
                .map(|e| e.to_string_lossy().into_owned()),
        );
        for sub in cmd.get_subcommands() {
            envs(sub, out);
        }
    }
    let mut known = Vec::new();
    envs(cmd, &mut known);
    let mut out = Vec::new();
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if !k.starts_with("OJSD_") || known.contains(&k) || NOT_FLAGS.contains(&k.as_str()) {
            continue;
        }
        // The known name sharing the longest prefix with it, if it shares most of it.
        let near = known
            .iter()
            .map(|n| {
                (
                    n.bytes().zip(k.bytes()).take_while(|(a, b)| a == b).count(),
                    n,
                )
            })
            .max_by_key(|(shared, _)| *shared)
            .filter(|(shared, n)| *shared * 4 >= k.len().max(n.len()) * 3)
            .map(|(_, n)| n.clone());
        out.push((k, near));
    }
    out
}

/// clap, with the config file's values (if there is one) as the defaults.
fn parse_args() -> Args {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let mut cmd = Args::command();
    for (name, near) in unknown_env_vars(&cmd) {
        match near {
            Some(n) => {
                eprintln!("ojsd: warning: {name} is not a setting ojsd reads; did you mean {n}?")
            }
            None => eprintln!("ojsd: warning: {name} is not a setting ojsd reads"),
        }
    }
    if let Some(path) = config_file::config_path(&argv, std::env::var_os("OJSD_CONFIG")) {
        cmd = config_file::apply(cmd, &path).unwrap_or_else(|msg| {
            clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("{msg}\n")).exit()
        });
    }
    let matches = cmd.get_matches_from(argv);
    Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// What clap cannot check flag by flag: values that must agree with each other.
fn check_args(args: &Args) -> Result<(), String> {
    if let Some(body) = args.max_body_bytes {
        if body < args.max_job_bytes {
            return Err(format!(
                "--max-body-bytes ({body}) is smaller than --max-job-bytes ({}): a job \
                 the server takes could not be sent over HTTP",
                args.max_job_bytes
            ));
        }
    }
    Ok(())
}

/// `--max-body-bytes`, or its default for `--max-job-bytes`.
fn max_body_bytes(args: &Args) -> usize {
    args.max_body_bytes
        .unwrap_or_else(|| ojsd::http::body::default_max_body_bytes(args.max_job_bytes))
}

fn main() {
    // No transparent huge pages for this process. mimalloc asks for them on its arenas
    // where the kernel allows (THP `madvise` mode, Debian's default), and then every
    // first touch of a 2 MiB region zeroes all of it: 5-7% of the engine's and the
    // connections' CPU went to that zeroing (`clear_page_erms` under
    // `do_huge_pmd_anonymous_page`). Without them: 5-20% less server CPU per job and
    // 13% less peak memory, back to back (bench/RESULTS.md, round 11). The flag is the
    // process's (and its children's); failing to set it (an old kernel) changes nothing.
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    let mut args = parse_args();
    if let Some(cmd) = args.command.take() {
        std::process::exit(ojsd::cli::run(cmd));
    }
    if let Err(msg) = check_args(&args) {
        // A usage error like clap's own (exit 2), before any port or data dir is touched.
        clap::Error::raw(clap::error::ErrorKind::ArgumentConflict, format!("{msg}\n")).exit()
    }
    let tokens = Tokens::from_config(args.password.as_deref(), &args.token).unwrap_or_else(|msg| {
        clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("{msg}\n")).exit()
    });
    let filter = log_filter(&args.log_level);
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let code = match run(args, tokens) {
        Ok(()) => 0,
        Err(e) => {
            // One plain line, whatever --log-level says: it is why the process ended.
            eprintln!("ojsd: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn run(args: Args, tokens: Tokens) -> Result<(), String> {
    // Certificates are read first: a bad one stops ojsd before any port or data dir.
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(ojsd::tls::load(cert, key)?),
        _ => None,
    };
    // The runtime exists first because tokio listeners register with it when made.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    // Both ports are bound before the data dir is touched: a port in use fails at once,
    // creates no data dir, and takes no lock. While the store opens and the index is
    // rebuilt, clients that connect wait in the listen backlog; none is refused.
    // On PostgreSQL the ports serve at once: a standby forwards its clients' requests to
    // the partition's holder (`cluster::Router`) until it holds the partition itself.
    let bind_all = || {
        let _in_runtime = runtime.enter();
        let listener = ojsd::listen::bind(args.listen)
            .map_err(|e| format!("cannot listen on {} (--listen): {e}", args.listen))?;
        let http_listener = match args.http_listen.0 {
            Some(addr) => Some(
                ojsd::listen::bind(addr)
                    .map_err(|e| format!("cannot listen on {addr} (--http-listen): {e}"))?,
            ),
            None => None,
        };
        let faktory_listener = match args.faktory_listen {
            Some(addr) => Some(
                ojsd::listen::bind(addr)
                    .map_err(|e| format!("cannot listen on {addr} (--faktory-listen): {e}"))?,
            ),
            None => None,
        };
        let peer_listener = match args.peer_listen {
            Some(addr) => Some(
                ojsd::listen::bind(addr)
                    .map_err(|e| format!("cannot listen on {addr} (--peer-listen): {e}"))?,
            ),
            None => None,
        };
        Ok::<_, String>((listener, http_listener, faktory_listener, peer_listener))
    };
    let (listener, http_listener, faktory_listener, peer_listener) = bind_all()?;
    let local_addr = listener.local_addr().map_err(|e| e.to_string())?;
    let peer_addr = match &peer_listener {
        Some(l) => Some(l.local_addr().map_err(|e| e.to_string())?),
        None => None,
    };
    let opening = std::time::Instant::now();
    let cache_bytes = args.cache_mb.saturating_mul(1024 * 1024);
    let node_id = args.node_id.clone().unwrap_or_else(store::default_node_id);
    let cfg = Config {
        limits: Limits {
            max_job_bytes: args.max_job_bytes,
        },
        default_timeout_secs: args.default_timeout,
        retention: Duration::from_secs(args.retention),
        dead_retention: Duration::from_secs(args.dead_retention),
        dead_max: args.dead_max,
        heartbeat_timeout: Duration::from_secs(args.heartbeat_timeout),
        fetch_wait: Duration::from_millis(args.fetch_wait_ms),
        test_clock: args.test_clock,
        max_queued_bytes: args.max_queued_bytes,
        commit_pipeline: args
            .commit_pipeline
            .unwrap_or(args.store == StoreKind::Postgres),
        max_queues: args.max_queues,
        max_metric_series: args.max_metric_series,
        compact_after_deletes: args.compact_after_deletes,
        engine_threads: args.engine_threads as usize,
        job_cache_bytes: usize::try_from(args.job_cache_mb.saturating_mul(1024 * 1024))
            .unwrap_or(usize::MAX),
        node_id: node_id.clone(),
        node_addr: Some(local_addr.to_string()),
        events: engine::EventConfig {
            held: HeldLimits {
                per_subscriber: args.max_subscriber_bytes,
                total: args.max_subscriber_bytes_total,
            },
            ..Default::default()
        },
        ..Config::default()
    };
    let peer_limits = ojsd::cluster::proto::Limits::new(args.max_line_bytes, max_body_bytes(&args));
    // The engine runs from here (one node), or once this node wins the partition's lease
    // (cluster mode): then the standby thread sends its thread here.
    let (engine_tx, engine_rx) = tokio::sync::oneshot::channel::<Result<EngineThread, String>>();
    let router = match args.store {
        StoreKind::Postgres => {
            let url = args.postgres_url.as_deref().ok_or(
                "--store postgres needs --postgres-url (or OJSD_POSTGRES_URL)".to_string(),
            )?;
            let shared = engine::Shared::new(cfg.events.held);
            let wake = Arc::new(tokio::sync::Notify::new());
            let link_cfg = ojsd::cluster::link::LinkConfig {
                node: node_id.clone(),
                secret: tokens.admin_secret(),
                tls: tls
                    .as_ref()
                    .map(|t| tokio_rustls::TlsConnector::from(t.peer.clone())),
                limits: peer_limits,
                connect_timeout: Duration::from_millis(args.hello_timeout_ms.clamp(100, 10_000)),
                lost: wake.clone(),
            };
            let intake =
                engine::intake::Intake::new(cfg.limits.clone(), engine::Clock::new(cfg.test_clock));
            let router = Router::cluster(intake, &shared, StoreKind::Postgres.name(), link_cfg);
            let mut opts = store::PostgresOptions::new(url, &node_id);
            opts.schema = args.postgres_schema.clone();
            opts.lease_ttl = Duration::from_millis(args.lease_ttl_ms);
            opts.renew_every = opts.lease_ttl / 5;
            // A standby until the partition is free: for as long as it takes.
            opts.acquire_wait = Duration::MAX;
            opts.addr = Some(local_addr.to_string());
            opts.peer_addr = peer_addr.map(|a| a.to_string());
            opts.read_cache_bytes = args.postgres_cache_mb.saturating_mul(1024 * 1024);
            opts.partitions = args.partitions;
            opts.commits_in_flight = if cfg.commit_pipeline {
                store::IN_FLIGHT_PIPELINED
            } else {
                store::IN_FLIGHT_INLINE
            };
            let r = router.clone();
            opts.standby = Some(store::StandbyHooks {
                holder: Arc::new(move |owner, addr| r.set_holder(owner, addr)),
                wake: wake.clone(),
            });
            let r = router.clone();
            let cfg = cfg.clone();
            let rt = runtime.handle().clone();
            std::thread::Builder::new()
                .name("ojsd-standby".into())
                .spawn(move || {
                    let started =
                        ojsd::cluster::node::serve(opts, r, cfg, shared, wake, opening, rt);
                    let _ = engine_tx.send(started);
                })
                .map_err(|e| e.to_string())?;
            router
        }
        kind => {
            let store = store::open(kind, &args.data_dir, cache_bytes).map_err(|e| match e {
                // These name the data dir and what to do themselves.
                StoreError::Locked { .. } | StoreError::WrongStore { .. } => e.to_string(),
                e => format!("cannot open data dir {}: {e}", args.data_dir.display()),
            })?;
            tracing::info!(
                store = %args.store,
                ms = opening.elapsed().as_millis() as u64,
                "store opened"
            );
            store.announce(&local_addr.to_string());
            let (handle, engine_thread) =
                engine::start(store, cfg).map_err(|e| format!("cannot start: {e}"))?;
            let _ = engine_tx.send(Ok(engine_thread));
            Router::Local(handle)
        }
    };
    // One allowance of wrong passwords per address for every listener (PROTOCOL.md §13.4).
    let auth_failures = AuthLimiter::shared(
        args.max_auth_failures,
        Duration::from_millis(args.auth_failure_window_ms),
    );
    let server_cfg = Arc::new(ServerConfig {
        tokens: tokens.clone(),
        max_line: args.max_line_bytes,
        max_job_bytes: args.max_job_bytes,
        max_pending_reply_bytes: args.max_pending_reply_bytes,
        max_connections: args.max_connections,
        max_handshaking: args.max_handshaking,
        hello_timeout: Duration::from_millis(args.hello_timeout_ms),
        idle_timeout: Duration::from_millis(args.idle_timeout_ms),
        auth_failures: auth_failures.clone(),
        tls: tls.as_ref().map(|t| t.tcp.clone()),
        dialect: server::Dialect::Ojs,
    });
    let handle = router;
    let result = runtime.block_on(async move {
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        // The engine's thread, once there is one; then its end.
        let engine_done = async move {
            let thread = match engine_rx.await {
                Ok(Ok(t)) => t,
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err("the standby thread ended".to_string()),
            };
            match tokio::task::spawn_blocking(move || thread.join()).await {
                Ok(Ok(Ok(()))) => Ok(()),
                Ok(Ok(Err(e))) => Err(format!("engine failed: {e}")),
                _ => Err("engine thread panicked".to_string()),
            }
        };
        tokio::pin!(engine_done);
        // Serve once the node can: on one node the engine runs already; in cluster mode it
        // holds the partition, or knows the holder to forward to (the ports are bound, so
        // clients that connect meanwhile wait in the listen backlog).
        let can_serve = async {
            while handle.role() == ojsd::cluster::Role::Waiting {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::select! {
            _ = can_serve => {}
            r = &mut engine_done => {
                return r.and(Err("engine stopped unexpectedly".to_string()));
            }
            _ = shutdown_signal() => return Ok(()),
        }
        // The lines are printed once the server serves.
        // Tests and scripts read this line to learn the port when --listen ends in :0.
        announce(&format!("ojsd listening on {local}"));
        // ... and this second one (only when HTTP is on) for the HTTP port.
        let http = match http_listener {
            Some(l) => {
                let addr = l.local_addr().map_err(|e| e.to_string())?;
                announce(&format!("ojsd http listening on {addr}"));
                let scheme = if tls.is_some() { "https" } else { "http" };
                tracing::info!("dashboard: {scheme}://{addr}/");
                let cfg = HttpConfig {
                    keepalive: Duration::from_millis(args.sse_keepalive_ms.max(1)),
                    tokens: tokens.clone(),
                    max_connections: args.max_connections,
                    handshake_timeout: Duration::from_millis(args.hello_timeout_ms),
                    tls: tls.as_ref().map(|t| t.http.clone()),
                    cors_origins: args.cors_origin.clone(),
                    max_body_bytes: max_body_bytes(&args),
                    body_timeout: Duration::from_millis(args.body_timeout_ms),
                    auth_failures: auth_failures.clone(),
                    tcp_port: Some(local.port()),
                };
                Some(tokio::spawn(ojsd::http::serve(l, handle.clone(), cfg)))
            }
            None => None,
        };
        let faktory = match faktory_listener {
            Some(l) => {
                let addr = l.local_addr().map_err(|e| e.to_string())?;
                announce(&format!("ojsd faktory listening on {addr}"));
                let cfg = Arc::new(ServerConfig {
                    dialect: server::Dialect::Faktory,
                    ..(*server_cfg).clone()
                });
                Some(tokio::spawn(server::accept_loop(l, handle.clone(), cfg)))
            }
            None => None,
        };
        let peers = match peer_listener {
            Some(l) => {
                let addr = l.local_addr().map_err(|e| e.to_string())?;
                announce(&format!("ojsd peer listening on {addr}"));
                let cfg = PeerServerConfig {
                    node: node_id.clone(),
                    tokens: tokens.clone(),
                    auth_failures: auth_failures.clone(),
                    tls: tls
                        .as_ref()
                        .map(|t| tokio_rustls::TlsAcceptor::from(t.tcp.clone())),
                    limits: peer_limits,
                    handshake_timeout: Duration::from_millis(args.hello_timeout_ms),
                };
                Some(tokio::spawn(serve_peers(l, handle.clone(), cfg)))
            }
            None => None,
        };
        tracing::info!(addr = %local, data_dir = %args.data_dir.display(), role = handle.role().name(), "ojsd ready");
        let accept = tokio::spawn(server::accept_loop(listener, handle.clone(), server_cfg));
        tokio::select! {
            _ = shutdown_signal() => {
                tracing::info!("shutting down: no new connections, finishing the engine batch");
                accept.abort();
                for t in [&http, &faktory, &peers].into_iter().flatten() {
                    t.abort();
                }
                if handle.local().is_none() {
                    // A standby: nothing of its own to finish.
                    return Ok(());
                }
                handle.shutdown();
                engine_done.await
            }
            r = &mut engine_done => match r {
                Err(e) => Err(e),
                Ok(()) => Err("engine stopped unexpectedly".to_string()),
            },
        }
    });
    // Connections still open are dropped with the runtime; their replies were all sent or refused.
    runtime.shutdown_background();
    result
}

/// The engine's thread.
type EngineThread = std::thread::JoinHandle<Result<(), StoreError>>;

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// A line on stdout for scripts and tests (the listening addresses). Stdout may be a closed
/// pipe (a supervisor that stopped reading): that must not stop the server, so a write
/// error is ignored where `println!` would panic.
fn announce(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
