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
    /// Letters of an engine's outbox (`WorkflowCmd::Outbox`), oldest first.
    Letters(Vec<crate::engine::request::Posted>),
    /// PUSH of each job on its own (Faktory's PUSHB).
    PushedEach(Each),
    /// ACKB: each ACK on its own.
    Acked(Each),
    /// MUTATE and QUEUE REMOVE: how many jobs matched and how many changed.
    Mutated(Mutated),
    Flushed(Flushed),
    /// QUEUE LATENCY, in the order asked.
    Latencies(Vec<QueueLatency>),
}

/// Items of a request taken each on its own (Faktory's PUSHB, ACKB): how many were
/// accepted, and the refused ones by their position in the request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Each {
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

    /// The job's id, read from the envelope without decoding the rest. An envelope the
    /// engine composed starts `{"specversion":"…","id":"…"` (`job/parts.rs`), read here
    /// without a JSON parse when neither string has an escape (a cluster node asks this of
    /// every job it hands out, to route its ACK); anything else is parsed.
    pub fn id(&self) -> Option<String> {
        fn plain_string(s: &[u8]) -> Option<(&[u8], &[u8])> {
            let end = s.iter().position(|&b| b == b'"' || b == b'\\')?;
            (s[end] == b'"').then(|| (&s[..end], &s[end + 1..]))
        }
        let composed = self
            .json
            .strip_prefix(br#"{"specversion":""#)
            .and_then(plain_string)
            .and_then(|(_, rest)| rest.strip_prefix(br#","id":""#))
            .and_then(plain_string)
            .and_then(|(id, _)| std::str::from_utf8(id).ok());
        if let Some(id) = composed {
            return Some(id.to_owned());
        }
        #[derive(Deserialize)]
        struct Id<'a> {
            #[serde(borrow)]
            id: std::borrow::Cow<'a, str>,
        }
        serde_json::from_slice::<Id>(&self.json)
            .ok()
            .map(|i| i.id.into_owned())
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
#[path = "api_tests.rs"]
mod tests;
