//! The cluster's state as PostgreSQL's tables hold it (`ojs_nodes ⋈ ojs_partitions`), for
//! CLUSTER, `GET /ojs/v1/admin/cluster` and `ojsd cluster`. The query runs on the store's
//! own runtime and answers through a callback, so the engine thread that asks never waits
//! for PostgreSQL.

use super::postgres_store::{err, pool_err};
use super::{ClusterDone, ClusterNode, ClusterState, ClusterView, StoreError, StoreResult};
use deadpool_postgres::Pool;
use std::time::Duration;

/// Timestamps as RFC 3339 UTC with milliseconds.
const TS: &str = "'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'";

pub(super) struct PgClusterView {
    pub(super) pool: Pool,
    pub(super) rt: tokio::runtime::Handle,
    pub(super) nodes_sql: String,
    pub(super) parts_sql: String,
    pub(super) meta_sql: String,
    /// This node's id (`local: true` in the answer).
    pub(super) node: String,
    /// A node whose heartbeat is older than this is reported `gone`.
    pub(super) fresh: Duration,
}

impl PgClusterView {
    pub(super) fn new(
        pool: Pool,
        rt: tokio::runtime::Handle,
        s: &str,
        node: &str,
        ttl: Duration,
    ) -> PgClusterView {
        let ts = |col: &str| format!("to_char({col} AT TIME ZONE 'UTC', {TS})");
        PgClusterView {
            pool,
            rt,
            nodes_sql: format!(
                "SELECT n.node, n.client_addr, {hb}, \
                 COALESCE(array_agg(p.part ORDER BY p.part) \
                   FILTER (WHERE p.part IS NOT NULL AND p.lease_until > now()), '{{}}'), \
                 max(p.epoch) FILTER (WHERE p.lease_until > now()), \
                 {lease}, \
                 COALESCE(n.heartbeat_at > now() - $1::bigint * interval '1 millisecond', false), \
                 n.peer_addr \
                 FROM {s}.ojs_nodes n LEFT JOIN {s}.ojs_partitions p ON p.owner = n.node \
                 GROUP BY n.node ORDER BY n.node",
                hb = ts("n.heartbeat_at"),
                lease = ts("max(p.lease_until) FILTER (WHERE p.lease_until > now())"),
            ),
            parts_sql: format!(
                "SELECT part FROM {s}.ojs_partitions \
                 WHERE owner IS NULL OR lease_until IS NULL OR lease_until <= now() ORDER BY part"
            ),
            meta_sql: format!("SELECT value FROM {s}.ojs_meta WHERE key = 'partitions'"),
            node: node.to_string(),
            fresh: ttl,
        }
    }

    async fn query(
        pool: Pool,
        nodes_sql: String,
        parts_sql: String,
        meta_sql: String,
        node: String,
        fresh: Duration,
    ) -> StoreResult<ClusterState> {
        let client = pool.get().await.map_err(pool_err)?;
        let fresh_ms = i64::try_from(fresh.as_millis()).unwrap_or(i64::MAX);
        let partitions: u32 = match client.query_opt(&meta_sql, &[]).await.map_err(err)? {
            Some(r) => {
                let v: String = r.get(0);
                v.parse()
                    .map_err(|_| StoreError::Corrupt(format!("ojs_meta.partitions is {v:?}")))?
            }
            None => 1,
        };
        let mut nodes = Vec::new();
        for r in client.query(&nodes_sql, &[&fresh_ms]).await.map_err(err)? {
            let id: String = r.get(0);
            let parts: Vec<i32> = r.get(3);
            let alive: bool = r.get(6);
            let role = match (parts.is_empty(), alive) {
                (false, _) => "active",
                (true, true) => "standby",
                (true, false) => "gone",
            };
            nodes.push(ClusterNode {
                local: id == node,
                id,
                addr: r.get(1),
                peer_addr: r.get(7),
                heartbeat_at: r.get(2),
                partitions: parts.into_iter().map(|p| p as u32).collect(),
                epoch: r.get(4),
                lease_until: r.get(5),
                role,
            });
        }
        let unowned: Vec<u32> = client
            .query(&parts_sql, &[])
            .await
            .map_err(err)?
            .iter()
            .map(|r| r.get::<_, i32>(0) as u32)
            .collect();
        Ok(ClusterState {
            store: super::StoreKind::Postgres.name(),
            partitions,
            nodes,
            unowned,
        })
    }
}

impl ClusterView for PgClusterView {
    fn read(&self, done: ClusterDone) {
        let q = Self::query(
            self.pool.clone(),
            self.nodes_sql.clone(),
            self.parts_sql.clone(),
            self.meta_sql.clone(),
            self.node.clone(),
            self.fresh,
        );
        // If the store's runtime has shut down the task is dropped, and `done` with it: the
        // asker's reply channel closes, which front ends answer as "unavailable".
        self.rt.spawn(async move {
            let r = match tokio::time::timeout(Duration::from_secs(10), q).await {
                Ok(r) => r,
                Err(_) => Err(StoreError::Backend(
                    "postgres: the cluster query timed out".into(),
                )),
            };
            done(r);
        });
    }
}
