//! The stored records of a workflow: its header and one node per step, job, nested
//! workflow or callback (serialized as JSON, one store record each), and the values that
//! pass between the state machine (`state`) and the engine.

use crate::events::EventKind;
use crate::job::template::Template;
use crate::workflow::{Kind, Role};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WfState {
    Pending,
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl WfState {
    pub fn as_str(self) -> &'static str {
        match self {
            WfState::Pending => "pending",
            WfState::Running => "running",
            WfState::Completed => "completed",
            WfState::Failed => "failed",
            WfState::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            WfState::Completed | WfState::Failed | WfState::Cancelled
        )
    }
}

/// A node's own progress. `Pending` means started: for a job, enqueued and not yet
/// finished (its live job state tells pending from active); for a nested workflow, running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    Waiting,
    Pending,
    Completed,
    Failed,
    Cancelled,
    /// A batch callback the firing matrix did not select (§6.5).
    Skipped,
}

impl NodeState {
    pub fn is_finished(self) -> bool {
        !matches!(self, NodeState::Waiting | NodeState::Pending)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    Job,
    Chain,
    Group,
    Batch,
    /// A workflow of steps with `depends_on` (the HTTP binding's shape).
    Dag,
}

impl From<Kind> for NodeKind {
    fn from(k: Kind) -> Self {
        match k {
            Kind::Chain => NodeKind::Chain,
            Kind::Group => NodeKind::Group,
            Kind::Batch => NodeKind::Batch,
            Kind::Dag => NodeKind::Dag,
        }
    }
}

impl NodeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Job => "job",
            NodeKind::Chain => "chain",
            NodeKind::Group => "group",
            NodeKind::Batch => "batch",
            NodeKind::Dag => "dag",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Node {
    pub kind: NodeKind,
    /// Dotted position from the top: `"1.0"` is job 0 of step 1; callbacks use their
    /// role (`"2.on_complete"`). Empty for the workflow itself.
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<u32>,
    /// Position among the parent's steps/jobs.
    #[serde(default)]
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// Job type of a job, or the id/name a nested workflow was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callbacks: Vec<u32>,
    /// A DAG step: the nodes (its siblings) it waits for. Its step id is `id`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deps: Vec<u32>,
    pub state: NodeState,
    /// The job to create when this node's turn comes; dropped once it is enqueued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<Template>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// The partition its job was enqueued in, when not the workflow's own (cluster mode:
    /// its end comes back as a letter, `outbox.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enqueued_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<DateTime<Utc>>,
    /// Group/batch/DAG: children finished, and how many of them failed.
    #[serde(default)]
    pub done: u32,
    #[serde(default)]
    pub failed: u32,
}

impl Node {
    pub(in crate::engine) fn new(
        kind: NodeKind,
        path: String,
        parent: Option<u32>,
        index: u32,
    ) -> Node {
        Node {
            kind,
            path,
            parent,
            index,
            role: None,
            job_type: None,
            id: None,
            name: None,
            children: Vec::new(),
            callbacks: Vec::new(),
            deps: Vec::new(),
            state: NodeState::Waiting,
            template: None,
            job_id: None,
            part: None,
            result: None,
            error: None,
            attempt: None,
            enqueued_at: None,
            started_at: None,
            completed_at: None,
            done: 0,
            failed: 0,
        }
    }

    pub fn is_job(&self) -> bool {
        self.kind == NodeKind::Job
    }
}

/// The workflow-level record (§3.1, §3.3, §8).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    pub id: String,
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub state: WfState,
    pub created_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_at: Option<DateTime<Utc>>,
    pub job_count: u32,
    pub callback_count: u32,
    pub completed_count: u32,
    pub failed_count: u32,
    /// Number of node records.
    pub nodes: u32,
}

/// How a workflow job ended, as the settle hook saw it (it travels between partitions in a
/// [`Letter`](super::outbox::Letter)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    Completed(Option<Value>),
    /// Discarded after its last attempt (or never enqueued): `{code, message, attempt}`.
    Failed(Value),
    Cancelled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settle {
    pub outcome: Outcome,
    pub attempt: u32,
    pub started_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Create the job of node `node` with these `parent_results` (§7).
    Enqueue {
        node: u32,
        parent_results: Map<String, Value>,
    },
    Event {
        kind: EventKind,
        data: Value,
    },
}

/// What WORKFLOW CANCEL produced: events, and the started jobs to cancel (node, job id).
pub type Cancellation = (Vec<Effect>, Vec<(u32, String)>);
