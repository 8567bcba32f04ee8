//! The PostgreSQL store's schema and lease acquisition: ojsd's own migrations, versioned in
//! `ojs_meta`, run in one transaction under an advisory lock (so that nodes starting at
//! once are safe), the cluster's partition count (fixed when the schema is created), and
//! taking a partition (see `postgres_store.rs` and `postgres_node.rs`).

use super::postgres_store::{err, pool_err};
use super::{StoreError, StoreResult};
use deadpool_postgres::Pool;
use std::time::{Duration, Instant};

/// The layout this build writes (`ojs_meta.schema_version`): each step of [`MIGRATIONS`].
pub const SCHEMA_VERSION: usize = 4;
/// The most partitions a cluster may have (`--partitions`).
pub const MAX_PARTITIONS: u32 = 1024;
/// Migration steps; step `i` takes the schema from version `i` to `i + 1`. `{s}` is the
/// quoted schema name.
const MIGRATIONS: [&str; SCHEMA_VERSION] = [
    "
CREATE TABLE {s}.ojs_nodes (node text PRIMARY KEY, peer_addr text, heartbeat_at timestamptz);
CREATE TABLE {s}.ojs_partitions (part int PRIMARY KEY, owner text, epoch bigint NOT NULL,
    lease_until timestamptz);
CREATE TABLE {s}.ojs_kv (part int NOT NULL, space smallint NOT NULL, key bytea NOT NULL,
    value bytea NOT NULL, PRIMARY KEY (part, space, key));
INSERT INTO {s}.ojs_meta (key, value) VALUES ('partitions', '1');
",
    "
-- Version 2: peer_addr is the peer listener's (forwarding); the client address moves to
-- client_addr.
ALTER TABLE {s}.ojs_nodes ADD COLUMN client_addr text;
UPDATE {s}.ojs_nodes SET client_addr = peer_addr, peer_addr = NULL;
",
    "
-- Version 3: which partition holds a job (PgNode::locate), by the job space's keys alone
-- (space 0 is Space::Job; see postgres_node.rs for why a partial index).
CREATE INDEX IF NOT EXISTS ojs_kv_job_key ON {s}.ojs_kv (key) WHERE space = 0;
",
    "
-- Version 4: that index holds the job records (16-byte keys) and no longer their state
-- records (17 bytes), which are inserted with every job and rewritten by every
-- transition; and the table's pages keep a fifth free, so that a state record's rewrite
-- can stay on its page (a HOT update: no index entry).
DROP INDEX IF EXISTS {s}.ojs_kv_job_key;
CREATE INDEX ojs_kv_job_key ON {s}.ojs_kv (key) WHERE space = 0 AND octet_length(key) = 16;
ALTER TABLE {s}.ojs_kv SET (fillfactor = 80);
",
];
const _: () = assert!(
    super::Space::Job as usize == 0,
    "migration 3 indexes space 0"
);

/// A schema name as SQL: letters, digits and `_` only (it is spliced into statements).
pub(super) fn quote_schema(schema: &str) -> StoreResult<String> {
    let ok = !schema.is_empty()
        && schema.len() <= 63
        && schema
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !schema.as_bytes()[0].is_ascii_digit();
    if !ok {
        return Err(StoreError::Other(format!(
            "postgres schema name {schema:?}: use 1 to 63 letters, digits and _, not \
             starting with a digit"
        )));
    }
    Ok(format!("\"{schema}\""))
}

/// Register or refresh a node: `$1` its id, `$2` its client address, `$3` its peer
/// listener's (NULL keeps the one registered).
pub(super) fn heartbeat_sql(s: &str) -> String {
    format!(
        "INSERT INTO {s}.ojs_nodes (node, client_addr, peer_addr, heartbeat_at) \
         VALUES ($1, $2, $3, now()) \
         ON CONFLICT (node) DO UPDATE SET heartbeat_at = now(), \
         client_addr = COALESCE(EXCLUDED.client_addr, {s}.ojs_nodes.client_addr), \
         peer_addr = COALESCE(EXCLUDED.peer_addr, {s}.ojs_nodes.peer_addr)"
    )
}

/// `--partitions` as the cluster may have it: 1 to [`MAX_PARTITIONS`].
pub(super) fn check_partitions(p: u32) -> StoreResult<u32> {
    if (1..=MAX_PARTITIONS).contains(&p) {
        Ok(p)
    } else {
        Err(StoreError::Other(format!(
            "the partition count must be 1 to {MAX_PARTITIONS}, not {p}"
        )))
    }
}

/// Create or migrate the schema in one transaction under an advisory lock, and return the
/// cluster's partition count: `want` when this creates the schema, else the stored one
/// (a warning says so when they differ). Rows `0..P` of `ojs_partitions` are made to exist
/// (free, epoch 0), so that a schema created with one partition by an older ojsd works.
pub(super) async fn migrate(pool: &Pool, s: &str, schema: &str, want: u32) -> StoreResult<u32> {
    let mut client = pool.get().await.map_err(pool_err)?;
    let tx = client.transaction().await.map_err(err)?;
    // Nodes starting together wait for each other's migration here, however long it
    // takes: not bounded by the sessions' `lock_timeout` (a lease TTL, postgres_node.rs).
    tx.batch_execute("SET LOCAL lock_timeout = 0")
        .await
        .map_err(err)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('ojsd-migrate:' || $1::text))",
        &[&schema],
    )
    .await
    .map_err(err)?;
    // CREATE SCHEMA checks the CREATE privilege on the database even when the schema
    // exists, so a role that may only use its schema (`public`, say) asks first.
    let exists = tx
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])
        .await
        .map_err(err)?;
    if exists.is_none() {
        tx.batch_execute(&format!("CREATE SCHEMA {s}"))
            .await
            .map_err(err)?;
    }
    tx.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {s}.ojs_meta (key text PRIMARY KEY, value text NOT NULL)"
    ))
    .await
    .map_err(err)?;
    let row = tx
        .query_opt(
            &format!("SELECT value FROM {s}.ojs_meta WHERE key = 'schema_version'"),
            &[],
        )
        .await
        .map_err(err)?;
    let found: usize = match row {
        None => 0,
        Some(r) => {
            let v: String = r.get(0);
            v.parse()
                .map_err(|_| StoreError::Corrupt(format!("ojs_meta.schema_version is {v:?}")))?
        }
    };
    if found > SCHEMA_VERSION {
        return Err(StoreError::Backend(format!(
            "the postgres schema {schema} is at version {found}; this ojsd knows up to \
             {SCHEMA_VERSION} (was it written by a newer ojsd?)"
        )));
    }
    for step in &MIGRATIONS[found..] {
        tx.batch_execute(&step.replace("{s}", s))
            .await
            .map_err(err)?;
    }
    let stored = tx
        .query_opt(
            &format!("SELECT value FROM {s}.ojs_meta WHERE key = 'partitions'"),
            &[],
        )
        .await
        .map_err(err)?
        .map(|r| r.get::<_, String>(0));
    let parts = match stored {
        // Step 1 wrote '1' just now: this open creates the cluster, with its count.
        Some(_) if found == 0 => None,
        Some(v) => Some(
            v.parse()
                .ok()
                .and_then(|p| check_partitions(p).ok())
                .ok_or_else(|| StoreError::Corrupt(format!("ojs_meta.partitions is {v:?}")))?,
        ),
        None => None,
    };
    let parts = match parts {
        Some(p) => {
            if p != want {
                tracing::warn!(
                    schema,
                    stored = p,
                    asked = want,
                    "the cluster's partition count was fixed when its schema was created: \
                     using the stored one, not the one asked for"
                );
            }
            p
        }
        None => {
            tx.execute(
                &format!(
                    "INSERT INTO {s}.ojs_meta (key, value) VALUES ('partitions', $1) \
                     ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
                ),
                &[&want.to_string()],
            )
            .await
            .map_err(err)?;
            want
        }
    };
    tx.execute(
        &format!(
            "INSERT INTO {s}.ojs_partitions (part, owner, epoch, lease_until) \
             SELECT g, NULL, 0, NULL FROM generate_series(0, $1 - 1) g \
             ON CONFLICT (part) DO NOTHING"
        ),
        &[&(parts as i32)],
    )
    .await
    .map_err(err)?;
    if found < SCHEMA_VERSION {
        tx.execute(
            &format!(
                "INSERT INTO {s}.ojs_meta (key, value) VALUES ('schema_version', $1) \
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
            ),
            &[&SCHEMA_VERSION.to_string()],
        )
        .await
        .map_err(err)?;
        tracing::info!(
            schema,
            from = found,
            to = SCHEMA_VERSION,
            "migrated the postgres schema"
        );
    }
    tx.commit().await.map_err(err)?;
    Ok(parts)
}

/// Take partition `part` for `node` (registered in `ojs_nodes` with `addr`), trying every
/// `every` for up to `wait` while another node's lease is live. Meanwhile the node is a
/// standby: it heartbeats on each try and says who holds the partition when that changes
/// (and once a minute). A try that fails for want of the database (`Unavailable`:
/// PostgreSQL restarting) is a try like another: the standby waits on, on a new connection.
/// Returns the new epoch and when the winning statement was sent.
#[allow(clippy::too_many_arguments)]
pub(super) async fn acquire(
    pool: &Pool,
    s: &str,
    part: i32,
    node: &str,
    addrs: (Option<&str>, Option<&str>),
    ttl: Duration,
    every: Duration,
    wait: Duration,
    hooks: Option<&super::StandbyHooks>,
) -> StoreResult<(i64, Instant)> {
    // Between tries: `every`, or less when woken (at least 50 ms apart, so a burst of
    // failed forwards makes one extra try, not many).
    let nap = || async move {
        match hooks {
            Some(h) => tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = h.wake.notified() => tokio::time::sleep(Duration::from_millis(50)).await,
            },
            None => tokio::time::sleep(every).await,
        }
    };
    let sql = AcquireSql::new(s);
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    let every = every.max(Duration::from_millis(10));
    let t0 = Instant::now();
    let mut told: Option<(String, Instant)> = None;
    let mut away: Option<Instant> = None;
    let mut created = false;
    loop {
        let tried = try_take(pool, &sql, part, node, addrs, ttl_ms, &mut created).await;
        let (owner, until) = match tried {
            Ok(Taken::Yes(epoch, sent)) => return Ok((epoch, sent)),
            Ok(Taken::No {
                owner,
                until,
                peer,
                live,
            }) => {
                if let Some(h) = hooks {
                    (h.holder)(live.then(|| owner.clone()), peer);
                }
                if let Some(since) = away.take() {
                    tracing::warn!(
                        after_ms = since.elapsed().as_millis() as u64,
                        "standby: postgres answers again"
                    );
                }
                (owner, until)
            }
            Err(StoreError::Unavailable(e)) if t0.elapsed() < wait => {
                if away.is_none() {
                    tracing::warn!(error = %e, "standby: postgres is unavailable; trying again \
                        every {} ms", every.as_millis());
                    away = Some(Instant::now());
                }
                nap().await;
                continue;
            }
            Err(e) => return Err(e),
        };
        if t0.elapsed() >= wait {
            return Err(StoreError::Leased {
                part: part as u32,
                owner,
            });
        }
        let say = match &told {
            Some((o, at)) => *o != owner || at.elapsed() >= Duration::from_secs(60),
            None => true,
        };
        if say {
            tracing::info!(
                "standby: partition {part} is held by node {owner} until {until}; \
                 trying again every {} ms",
                every.as_millis()
            );
            told = Some((owner, Instant::now()));
        }
        nap().await;
    }
}

/// Take partition `$1` for node `$2` with a lease of `$3` ms if it is free, expired or
/// already this node's, moving its epoch on (returned).
pub(super) fn take_sql(s: &str) -> String {
    format!(
        "UPDATE {s}.ojs_partitions SET owner = $2, epoch = epoch + 1, \
         lease_until = now() + $3::bigint * interval '1 millisecond' \
         WHERE part = $1 AND (owner IS NULL OR owner = $2 OR lease_until < now()) \
         RETURNING epoch"
    )
}

struct AcquireSql {
    create: String,
    heartbeat: String,
    take: String,
    holder: String,
}

impl AcquireSql {
    fn new(s: &str) -> AcquireSql {
        AcquireSql {
            create: format!(
                "INSERT INTO {s}.ojs_partitions (part, owner, epoch, lease_until) \
                 VALUES ($1, NULL, 0, NULL) ON CONFLICT (part) DO NOTHING"
            ),
            heartbeat: heartbeat_sql(s),
            take: take_sql(s),
            holder: format!(
                "SELECT p.owner, to_char(p.lease_until AT TIME ZONE 'UTC', \
                 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), n.peer_addr, \
                 COALESCE(p.lease_until > now(), false) \
                 FROM {s}.ojs_partitions p LEFT JOIN {s}.ojs_nodes n ON n.node = p.owner \
                 WHERE p.part = $1"
            ),
        }
    }
}

enum Taken {
    /// The new epoch, and when the winning statement was sent.
    Yes(i64, Instant),
    No {
        owner: String,
        until: String,
        /// The holder's peer listener, if it registered one.
        peer: Option<String>,
        /// Whether its lease is live (not run out).
        live: bool,
    },
}

/// One try: heartbeat, take the partition if it is free or expired, else say who holds it.
async fn try_take(
    pool: &Pool,
    sql: &AcquireSql,
    part: i32,
    node: &str,
    (addr, peer_addr): (Option<&str>, Option<&str>),
    ttl_ms: i64,
    created: &mut bool,
) -> StoreResult<Taken> {
    let client = pool.get().await.map_err(pool_err)?;
    if !*created {
        client.execute(&sql.create, &[&part]).await.map_err(err)?;
        *created = true;
    }
    client
        .execute(&sql.heartbeat, &[&node, &addr, &peer_addr])
        .await
        .map_err(err)?;
    let sent = Instant::now();
    if let Some(row) = client
        .query_opt(&sql.take, &[&part, &node, &ttl_ms])
        .await
        .map_err(err)?
    {
        return Ok(Taken::Yes(row.get(0), sent));
    }
    let (owner, until, peer, live) = client
        .query_opt(&sql.holder, &[&part])
        .await
        .map_err(err)?
        .map(|r| {
            (
                r.get::<_, Option<String>>(0).unwrap_or_default(),
                r.get::<_, Option<String>>(1).unwrap_or_default(),
                r.get::<_, Option<String>>(2),
                r.get::<_, bool>(3),
            )
        })
        .unwrap_or_default();
    Ok(Taken::No {
        owner,
        until,
        peer,
        live,
    })
}

/// The store's SQL, with the schema spliced in.
pub(super) struct Sql {
    pub(super) get: String,
    pub(super) size: String,
    pub(super) kv: String,
}

impl Sql {
    pub(super) fn new(s: &str) -> Sql {
        Sql {
            get: format!(
                "SELECT value FROM {s}.ojs_kv WHERE part = $1 AND space = $2 AND key = $3"
            ),
            size: format!("SELECT pg_total_relation_size('{s}.ojs_kv'::regclass)"),
            kv: format!("SELECT key, value FROM {s}.ojs_kv WHERE part = $1 AND space = $2"),
        }
    }
}
