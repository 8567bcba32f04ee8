//! The engine's typed results: what every command answers, before any front end has
//! chosen a wire format. The TCP front ends encode these as RESP (`protocol::reply`), the
//! HTTP front end renders its own JSON shapes from the same values, and neither ever parses
//! the engine's output again or reads an error's message to learn what went wrong (errors
//! carry a stable [`ErrorCode`](crate::error::ErrorCode) and, for invalid definitions, a
//! structured list of [`Problem`](crate::error::Problem)s).
//!
//! The documents serialize (serde) to the JSON the OJS TCP dialect has always sent, field
//! for field and in the same order; a job is carried as its canonical OJS envelope, already
//! encoded by the engine (the same bytes it stored), so relaying one costs no encoding.

use crate::engine::request::WorkerDirective;
use crate::error::{OjsError, OjsResult};
use crate::job::{Job, State};
use bytes::Bytes;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::store::{ClusterNode, ClusterState};

/// What a command answers, or why it was refused.
pub type Answered = Result<Answer, OjsError>;

/// A typed result of one engine command. It serializes (serde) so that a node can hand
/// the answer of a forwarded request back to the node its client is connected to
/// (`cluster::peer`); front ends render it themselves and never send this form to clients.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Answer {
    /// Done; nothing to report.
    Ok,
    /// Nothing to hand out: a FETCH that found no job within its wait.
    Nothing,
    /// One job (PUSH, FETCH, JOB, DEAD GET).
    Job(JobView),
    /// Several jobs in order (PUSHB, FETCH with a count).
    Jobs(Vec<JobView>),
    /// BEAT when the worker has a pending directive.
    Directive(WorkerDirective),
    Info(Box<Info>),
    /// CLUSTER.
    Cluster(Box<ClusterState>),
    Queues(QueueList),
    QueueStats(Box<QueueStats>),
    Purged(Purged),
    History(History),
    Workers(WorkerList),
    JobPage(JobPage),
    Overview(Box<Overview>),
    DeadPage(DeadPage),
    DeadStats(Box<DeadStats>),
    DeadRetried(DeadRetried),
    DeadDeleted(DeadDeleted),
    CronPage(CronPage),
    CronJob(CronJob),
    Workflow(WorkflowView),
    WorkflowPage(WorkflowPage),
    /// PUSH of each job on its own (Faktory's PUSHB).
    PushedEach(PushedEach),
    /// MUTATE and QUEUE REMOVE: how many jobs matched and how many changed.
    Mutated(Mutated),
    Flushed(Flushed),
    /// QUEUE LATENCY, in the order asked.
    Latencies(Vec<QueueLatency>),
}

/// How many jobs went in, and the refused ones by their position in the request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PushedEach {
    pub accepted: usize,
    pub rejected: Vec<(usize, OjsError)>,
}

/// MUTATE, QUEUE REMOVE.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mutated {
    pub matched: usize,
    pub changed: usize,
}

/// FLUSH: what was deleted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flushed {
    pub jobs: usize,
    pub workflows: usize,
}

/// One queue's wait: seconds since its longest-waiting job was enqueued (0 when empty).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueLatency {
    pub queue: String,
    pub seconds: f64,
}

/// A job as the engine holds it: its canonical OJS envelope (ojs-core §5), encoded.
#[derive(Debug, Clone, PartialEq)]
pub struct JobView {
    json: Bytes,
}

impl JobView {
    /// A view of an envelope the engine encoded from a [`Job`].
    pub(crate) fn encoded(json: Bytes) -> JobView {
        JobView { json }
    }

    /// The envelope's JSON, as stored.
    pub fn json(&self) -> &Bytes {
        &self.json
    }

    /// The envelope as a typed job (for a front end that speaks another job dialect).
    pub fn job(&self) -> OjsResult<Job> {
        serde_json::from_slice(&self.json).map_err(|e| {
            OjsError::new(
                crate::error::ErrorCode::BackendError,
                format!("job envelope: {e}"),
            )
        })
    }
}

impl Serialize for JobView {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // The bytes are JSON the engine wrote; embed them as they are.
        let text = std::str::from_utf8(&self.json).map_err(serde::ser::Error::custom)?;
        let raw: &serde_json::value::RawValue =
            serde_json::from_str(text).map_err(serde::ser::Error::custom)?;
        raw.serialize(s)
    }
}

impl<'de> Deserialize<'de> for JobView {
    /// The envelope as the peer sent it: raw JSON, kept as its bytes (never parsed into
    /// values and rendered again).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JobView, D::Error> {
        let raw = Box::<serde_json::value::RawValue>::deserialize(d)?;
        Ok(JobView {
            json: Bytes::copy_from_slice(raw.get().as_bytes()),
        })
    }
}

/// A map of state names to counts, as [`StateCounts`] and each entry of [`QueueCountsMap`]
/// render them (`paused` too, for the latter).
fn state_counts_from<'de, A: MapAccess<'de>>(
    mut map: A,
) -> Result<(StateCounts, Option<bool>), A::Error> {
    let mut counts = StateCounts::default();
    let mut paused = None;
    while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
        if key == "paused" {
            paused = Some(map.next_value::<bool>()?);
            continue;
        }
        let i = State::ALL
            .iter()
            .position(|s| s.as_str() == key)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown state {key:?}")))?;
        counts.0[i] = map.next_value()?;
    }
    Ok((counts, paused))
}

/// Jobs per lifecycle state, rendered as `{"scheduled": n, "available": n, ...}` in the
/// order of [`State::ALL`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateCounts(pub [usize; 8]);

impl StateCounts {
    pub fn get(&self, s: State) -> usize {
        State::ALL
            .iter()
            .position(|x| *x == s)
            .map_or(0, |i| self.0[i])
    }
}

impl Serialize for StateCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(8))?;
        for (state, n) in State::ALL.iter().zip(self.0) {
            m.serialize_entry(state.as_str(), &n)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for StateCounts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StateCounts, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StateCounts;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of states to counts")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<StateCounts, A::Error> {
                Ok(state_counts_from(map)?.0)
            }
        }
        d.deserialize_map(V)
    }
}

/// INFO: the server, totals, each queue's counts, the workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Info {
    pub server: ServerInfo,
    pub totals: Totals,
    pub queues: QueueCountsMap,
    pub workers: Vec<InfoWorker>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    #[serde(deserialize_with = "crate::wire::interned")]
    pub name: crate::wire::Name,
    #[serde(deserialize_with = "crate::wire::interned")]
    pub version: crate::wire::Name,
    pub now: String,
    pub uptime_s: u64,
    pub connections: usize,
    /// `fjall` or `sled`.
    #[serde(deserialize_with = "crate::wire::interned")]
    pub store: crate::wire::Name,
    pub store_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub enqueued: u64,
    pub completed: u64,
    pub failed: u64,
    pub jobs: usize,
    pub dead: usize,
    pub unique_keys: usize,
    pub waiting_fetches: usize,
}

/// `{"<queue>": {"paused": bool, "<state>": n, ...}}` in the engine's queue order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueCountsMap(pub Vec<QueueCounts>);

#[derive(Debug, Clone, PartialEq)]
pub struct QueueCounts {
    pub name: String,
    pub paused: bool,
    pub counts: StateCounts,
}

impl Serialize for QueueCountsMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct One<'a>(&'a QueueCounts);
        impl Serialize for One<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(Some(9))?;
                m.serialize_entry("paused", &self.0.paused)?;
                for (state, n) in State::ALL.iter().zip(self.0.counts.0) {
                    m.serialize_entry(state.as_str(), &n)?;
                }
                m.end()
            }
        }
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for q in &self.0 {
            m.serialize_entry(&q.name, &One(q))?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for QueueCountsMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<QueueCountsMap, D::Error> {
        struct One(bool, StateCounts);
        impl<'de> Deserialize<'de> for One {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<One, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = One;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("a queue's counts")
                    }
                    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<One, A::Error> {
                        let (counts, paused) = state_counts_from(map)?;
                        Ok(One(paused.unwrap_or(false), counts))
                    }
                }
                d.deserialize_map(V)
            }
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = QueueCountsMap;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of queues to their counts")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<QueueCountsMap, A::Error> {
                let mut out = Vec::new();
                while let Some((name, One(paused, counts))) = map.next_entry::<String, One>()? {
                    out.push(QueueCounts {
                        name,
                        paused,
                        counts,
                    });
                }
                Ok(QueueCountsMap(out))
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InfoWorker {
    pub wid: String,
    #[serde(deserialize_with = "crate::wire::interned")]
    pub state: crate::wire::Name,
    pub last_seen: Option<String>,
    pub active_jobs: usize,
    /// What the worker's HELLO said about itself.
    pub info: Value,
}

/// QUEUE LIST.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueList {
    pub total: usize,
    pub queues: Vec<QueueSummary>,
}

/// One queue's name, pause state, jobs per state and recent throughput.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueSummary {
    pub name: String,
    /// `active` or `paused`.
    #[serde(deserialize_with = "crate::wire::interned")]
    pub state: crate::wire::Name,
    pub paused: bool,
    pub counts: StateCounts,
    pub throughput: Throughput,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    pub processed_per_minute: u64,
    pub failed_per_minute: u64,
    pub processed_last_5m: u64,
    pub failed_last_5m: u64,
}

/// QUEUE STATS: the summary plus depth, the oldest waiting job and its latency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueStats {
    #[serde(flatten)]
    pub summary: QueueSummary,
    pub depth: usize,
    pub oldest_available_at: Option<String>,
    pub latency_ms: i64,
    pub workers: usize,
    /// QUEUE LIMIT's limit, when the queue has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<Value>,
}

/// QUEUE PURGE.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Purged {
    pub queue: String,
    pub purged_count: usize,
    #[serde(deserialize_with = "crate::wire::interned_list")]
    pub states: Vec<crate::wire::Name>,
}

/// WORKERS.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerList {
    pub total: usize,
    pub workers: Vec<WorkerView>,
    pub summary: WorkerSummary,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerView {
    pub id: String,
    /// `running`, `quiet` or `terminate`.
    #[serde(deserialize_with = "crate::wire::interned")]
    pub state: crate::wire::Name,
    pub connected: bool,
    pub connections: usize,
    pub stale: bool,
    pub last_heartbeat_at: Option<String>,
    pub started_at: Option<String>,
    pub active_jobs: usize,
    pub active_job_ids: Vec<String>,
    pub jobs_completed: u64,
    pub queues: Value,
    pub concurrency: Value,
    pub hostname: Value,
    pub info: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerSummary {
    pub total: usize,
    pub running: usize,
    pub quiet: usize,
    pub terminate: usize,
    pub stale: usize,
}

/// JOBS: one page of jobs, newest first; `total` counts every match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobPage {
    pub total: usize,
    pub jobs: Vec<JobView>,
}

/// OVERVIEW: the last five minutes in buckets, and recent pickup latency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    pub now_ms: i64,
    pub bucket_ms: i64,
    /// Oldest first; the last is the bucket in progress.
    pub points: Vec<OverviewPoint>,
    pub pickup: Pickup,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OverviewPoint {
    /// Start of the bucket, unix ms.
    pub at_ms: i64,
    pub enqueued: u32,
    pub completed: u32,
    /// Failed attempts.
    pub failed: u32,
    /// Jobs available and active across all queues, as last sampled in the bucket.
    pub available: u64,
    pub active: u64,
}

/// Throughput over time (ojs-admin-api §10.2), oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct History {
    pub period_ms: i64,
    pub points: Vec<HistoryPoint>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HistoryPoint {
    /// Start of the period, unix ms.
    pub at_ms: i64,
    /// Jobs completed.
    pub processed: u64,
    /// Failed attempts.
    pub failed: u64,
    /// Jobs accepted.
    pub enqueued: u64,
}

/// From `enqueued_at` to FETCH, over the pickups of the last minute (up to 4,096).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Pickup {
    pub samples: usize,
    pub p50_ms: Option<u32>,
    pub p99_ms: Option<u32>,
}

/// DEAD LIST: one page, newest first; `total` counts every match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadPage {
    pub total: usize,
    pub jobs: Vec<JobView>,
}

/// DEAD STATS (ojs-dead-letter §10.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadStats {
    pub total: usize,
    pub by_queue: serde_json::Map<String, Value>,
    pub by_error_type: std::collections::BTreeMap<String, u64>,
    pub oldest_at: Option<String>,
    pub newest_at: Option<String>,
    pub retention: DeadRetention,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadRetention {
    pub max_age: String,
    pub max_count: usize,
    pub next_prune_at: Option<String>,
}

/// DEAD RETRY with a filter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadRetried {
    pub matched: usize,
    pub retried: usize,
    pub failed: usize,
    pub errors: Vec<BulkError>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkError {
    pub job_id: String,
    pub error: String,
}

/// DEAD DELETE with a filter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadDeleted {
    pub matched: usize,
    pub deleted: usize,
}

/// CRON LIST: one page of registrations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CronPage {
    pub cron_jobs: Vec<Value>,
    pub count: usize,
    pub pagination: Pagination,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pagination {
    pub total: usize,
    pub limit: usize,
    pub offset: usize,
    pub has_more: bool,
}

/// One cron registration (ojs-cron §8): its definition, next and last run, run count and
/// running jobs, as one JSON object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CronJob {
    pub cron_job: Value,
    /// CRON ADD: whether the registration is new (false: it replaced one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
}

/// A workflow with every node's state (ojs-workflows §11), as one JSON object.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowView {
    pub id: String,
    pub doc: Value,
}

/// WORKFLOW LIST: one page of workflows, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowPage {
    pub total: usize,
    pub workflows: Vec<WorkflowSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowSummary {
    pub id: String,
    #[serde(rename = "type")]
    #[serde(deserialize_with = "crate::wire::interned")]
    pub kind: crate::wire::Name,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(deserialize_with = "crate::wire::interned")]
    pub state: crate::wire::Name,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    pub job_count: u32,
    pub completed_count: u32,
    pub failed_count: u32,
}

impl Serialize for WorkflowView {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.doc.serialize(s)
    }
}

impl<'de> Deserialize<'de> for WorkflowView {
    /// The document as serialized; its id is the document's `id`.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<WorkflowView, D::Error> {
        let doc = Value::deserialize(d)?;
        let id = doc
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| serde::de::Error::custom("a workflow without an id"))?
            .to_string();
        Ok(WorkflowView { id, doc })
    }
}

/// A worker directive's name as BEAT and the worker list show it.
pub fn directive_name(d: Option<WorkerDirective>) -> &'static str {
    match d {
        None => "running",
        Some(WorkerDirective::Quiet) => "quiet",
        Some(WorkerDirective::Terminate) => "terminate",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_counts_render_every_state_in_order() {
        let mut c = StateCounts::default();
        c.0[1] = 3;
        let v = serde_json::to_string(&c).unwrap();
        assert_eq!(
            v,
            r#"{"scheduled":0,"available":3,"pending":0,"active":0,"completed":0,"retryable":0,"cancelled":0,"discarded":0}"#
        );
        assert_eq!(c.get(State::Available), 3);
    }

    fn counts() -> StateCounts {
        StateCounts([1, 2, 3, 4, 5, 6, 7, 8])
    }

    fn summary() -> QueueSummary {
        QueueSummary {
            name: "q".into(),
            state: "paused",
            paused: true,
            counts: counts(),
            throughput: Throughput {
                processed_per_minute: 1,
                failed_per_minute: 2,
                processed_last_5m: 3,
                failed_last_5m: 4,
            },
        }
    }

    fn job() -> JobView {
        JobView::encoded(Bytes::from_static(
            br#"{"specversion":"1.0","id":"019300000000700080000000000000a1","type":"t","queue":"q","args":[1,"\u00e9"],"state":"available"}"#,
        ))
    }

    /// One value of every variant (the `match` makes a new variant fail to compile here
    /// until it has one), each through JSON and back unchanged.
    fn one_of_each() -> Vec<Answer> {
        let all = vec![
            Answer::Ok,
            Answer::Nothing,
            Answer::Job(job()),
            Answer::Jobs(vec![job(), job()]),
            Answer::Directive(WorkerDirective::Quiet),
            Answer::Info(Box::new(Info {
                server: ServerInfo {
                    name: "ojsd",
                    version: "9.9.9-peer",
                    now: "2026-01-01T00:00:00Z".into(),
                    uptime_s: 5,
                    connections: 2,
                    store: "postgres",
                    store_bytes: 1 << 40,
                },
                totals: Totals {
                    enqueued: 1,
                    completed: 2,
                    failed: 3,
                    jobs: 4,
                    dead: 5,
                    unique_keys: 6,
                    waiting_fetches: 7,
                },
                queues: QueueCountsMap(vec![
                    QueueCounts {
                        name: "b".into(),
                        paused: true,
                        counts: counts(),
                    },
                    QueueCounts {
                        name: "a".into(),
                        paused: false,
                        counts: StateCounts::default(),
                    },
                ]),
                workers: vec![InfoWorker {
                    wid: "w1".into(),
                    state: "quiet",
                    last_seen: None,
                    active_jobs: 1,
                    info: serde_json::json!({"hostname": "h"}),
                }],
            })),
            Answer::Cluster(Box::new(ClusterState {
                store: "postgres",
                partitions: 1,
                nodes: vec![ClusterNode {
                    id: "n1".into(),
                    addr: Some("127.0.0.1:1".into()),
                    partitions: vec![0],
                    epoch: Some(3),
                    lease_until: Some("2026-01-01T00:00:05.000Z".into()),
                    heartbeat_at: None,
                    role: "active",
                    local: true,
                }],
                unowned: vec![],
            })),
            Answer::Queues(QueueList {
                total: 1,
                queues: vec![summary()],
            }),
            Answer::QueueStats(Box::new(QueueStats {
                summary: summary(),
                depth: 3,
                oldest_available_at: Some("2026-01-01T00:00:00Z".into()),
                latency_ms: -1,
                workers: 2,
                rate_limit: Some(serde_json::json!({"max": 5})),
            })),
            Answer::Purged(Purged {
                queue: "q".into(),
                purged_count: 3,
                states: vec!["available", "scheduled"],
            }),
            Answer::History(History {
                period_ms: 60_000,
                points: vec![HistoryPoint {
                    at_ms: 1,
                    processed: 2,
                    failed: 3,
                    enqueued: 4,
                }],
            }),
            Answer::Workers(WorkerList {
                total: 1,
                workers: vec![WorkerView {
                    id: "w".into(),
                    state: "running",
                    connected: true,
                    connections: 1,
                    stale: false,
                    last_heartbeat_at: None,
                    started_at: Some("x".into()),
                    active_jobs: 0,
                    active_job_ids: vec!["j".into()],
                    jobs_completed: 9,
                    queues: serde_json::json!(["q"]),
                    concurrency: Value::Null,
                    hostname: serde_json::json!("h"),
                    info: serde_json::json!({}),
                }],
                summary: WorkerSummary {
                    total: 1,
                    running: 1,
                    quiet: 0,
                    terminate: 0,
                    stale: 0,
                },
            }),
            Answer::JobPage(JobPage {
                total: 10,
                jobs: vec![job()],
            }),
            Answer::Overview(Box::new(Overview {
                now_ms: 5,
                bucket_ms: 1000,
                points: vec![OverviewPoint {
                    at_ms: 1,
                    enqueued: 2,
                    completed: 3,
                    failed: 4,
                    available: 5,
                    active: 6,
                }],
                pickup: Pickup {
                    samples: 3,
                    p50_ms: Some(1),
                    p99_ms: None,
                },
            })),
            Answer::DeadPage(DeadPage {
                total: 1,
                jobs: vec![job()],
            }),
            Answer::DeadStats(Box::new(DeadStats {
                total: 2,
                by_queue: serde_json::json!({"q": 2}).as_object().unwrap().clone(),
                by_error_type: [("E".to_string(), 2)].into_iter().collect(),
                oldest_at: None,
                newest_at: Some("t".into()),
                retention: DeadRetention {
                    max_age: "P180D".into(),
                    max_count: 10,
                    next_prune_at: None,
                },
            })),
            Answer::DeadRetried(DeadRetried {
                matched: 3,
                retried: 2,
                failed: 1,
                errors: vec![BulkError {
                    job_id: "j".into(),
                    error: "gone".into(),
                }],
            }),
            Answer::DeadDeleted(DeadDeleted {
                matched: 2,
                deleted: 2,
            }),
            Answer::CronPage(CronPage {
                cron_jobs: vec![serde_json::json!({"name": "c"})],
                count: 1,
                pagination: Pagination {
                    total: 1,
                    limit: 10,
                    offset: 0,
                    has_more: false,
                },
            }),
            Answer::CronJob(CronJob {
                cron_job: serde_json::json!({"name": "c"}),
                created: Some(true),
            }),
            Answer::Workflow(WorkflowView {
                id: "wf1".into(),
                doc: serde_json::json!({"id": "wf1", "type": "chain"}),
            }),
            Answer::WorkflowPage(WorkflowPage {
                total: 1,
                workflows: vec![WorkflowSummary {
                    id: "wf1".into(),
                    kind: "chain",
                    name: None,
                    state: "running",
                    created_at: "t".into(),
                    completed_at: None,
                    job_count: 2,
                    completed_count: 1,
                    failed_count: 0,
                }],
            }),
            Answer::PushedEach(PushedEach {
                accepted: 1,
                rejected: vec![(
                    1,
                    OjsError::new(crate::error::ErrorCode::InvalidPayload, "bad"),
                )],
            }),
            Answer::Mutated(Mutated {
                matched: 2,
                changed: 1,
            }),
            Answer::Flushed(Flushed {
                jobs: 3,
                workflows: 1,
            }),
            Answer::Latencies(vec![QueueLatency {
                queue: "q".into(),
                seconds: 1.25,
            }]),
        ];
        for a in &all {
            // Exhaustive: a new variant must be added above.
            match a {
                Answer::Ok
                | Answer::Nothing
                | Answer::Job(_)
                | Answer::Jobs(_)
                | Answer::Directive(_)
                | Answer::Info(_)
                | Answer::Cluster(_)
                | Answer::Queues(_)
                | Answer::QueueStats(_)
                | Answer::Purged(_)
                | Answer::History(_)
                | Answer::Workers(_)
                | Answer::JobPage(_)
                | Answer::Overview(_)
                | Answer::DeadPage(_)
                | Answer::DeadStats(_)
                | Answer::DeadRetried(_)
                | Answer::DeadDeleted(_)
                | Answer::CronPage(_)
                | Answer::CronJob(_)
                | Answer::Workflow(_)
                | Answer::WorkflowPage(_)
                | Answer::PushedEach(_)
                | Answer::Mutated(_)
                | Answer::Flushed(_)
                | Answer::Latencies(_) => {}
            }
        }
        all
    }

    #[test]
    fn every_answer_variant_round_trips_through_json() {
        let all = one_of_each();
        assert_eq!(all.len(), 26, "one value per variant");
        for a in all {
            let wire = serde_json::to_string(&Ok::<_, OjsError>(a.clone())).unwrap();
            let back: Answered = serde_json::from_str(&wire).unwrap();
            assert_eq!(back, Ok(a), "through {wire}");
        }
        let e: Answered = Err(OjsError::new(crate::error::ErrorCode::NotFound, "no job"));
        let back: Answered = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn a_job_travels_as_its_json_not_as_a_byte_array() {
        let wire = serde_json::to_string(&Answer::Job(job())).unwrap();
        assert_eq!(
            wire,
            format!("{{\"Job\":{}}}", std::str::from_utf8(job().json()).unwrap())
        );
    }
}
