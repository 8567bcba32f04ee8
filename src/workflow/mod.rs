//! Workflow definitions (ojs-workflows §3-§6, §10): the model a client's JSON is parsed
//! into, and its validation. Pure: no engine, no store. The engine's runtime
//! (`engine::workflows`) turns a `Definition` into jobs.
//!
//! A definition is a tree: a chain, group or batch whose `steps`/`jobs` are either job
//! envelopes or, when their `type` is `"chain"`, `"group"` or `"batch"`, nested workflows.
//! Those three names are therefore reserved inside a definition and cannot be job types.
//!
//! Beside them, the HTTP binding's shape (ojs-http-binding §14.1, what the OJS SDKs send):
//! a top-level object without `type` whose `steps` each carry an `id` and `depends_on`, a
//! general DAG (`Kind::Dag`, parsed by `parse::dag`). Its steps are jobs, not nested flows.

mod parse;

pub use parse::parse_definition;

use crate::job::template::Template;
use serde::{Deserialize, Serialize};

/// Deepest nesting accepted, counting the top-level workflow as level 1 (§10.2 asks for at
/// least 3). A chain of groups of chains is 3 levels.
pub const MAX_DEPTH: usize = 5;
/// Most jobs one workflow may define, callbacks included.
pub const MAX_JOBS: usize = 10_000;
/// Longest `name`, in characters.
pub const MAX_NAME_CHARS: usize = 255;
/// Longest client-chosen workflow `id`, in bytes.
pub const MAX_ID_BYTES: usize = 128;
/// Problems listed before the rest are summarized as "and N more".
pub const MAX_PROBLEMS: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Chain,
    Group,
    Batch,
    /// The binding's `steps` with `id` and `depends_on`: any acyclic graph of jobs.
    Dag,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Chain => "chain",
            Kind::Group => "group",
            Kind::Batch => "batch",
            Kind::Dag => "dag",
        }
    }

    /// The kinds a `type` names inside a definition; a DAG has no `type` (it is recognized
    /// by its shape), so `"dag"` stays an ordinary job type.
    pub fn from_type(t: &str) -> Option<Kind> {
        match t {
            "chain" => Some(Kind::Chain),
            "group" => Some(Kind::Group),
            "batch" => Some(Kind::Batch),
            _ => None,
        }
    }

    /// The field holding the children: ordered `steps` for a chain, `jobs` otherwise (§5.2).
    pub fn children_field(self) -> &'static str {
        match self {
            Kind::Chain | Kind::Dag => "steps",
            Kind::Group | Kind::Batch => "jobs",
        }
    }
}

/// A batch callback (§6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    OnComplete,
    OnSuccess,
    OnFailure,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::OnComplete, Role::OnSuccess, Role::OnFailure];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::OnComplete => "on_complete",
            Role::OnSuccess => "on_success",
            Role::OnFailure => "on_failure",
        }
    }

    /// The firing matrix of §6.5.
    pub fn fires(self, any_failed: bool) -> bool {
        match self {
            Role::OnComplete => true,
            Role::OnSuccess => !any_failed,
            Role::OnFailure => any_failed,
        }
    }
}

/// One job of a workflow, already validated: `template` is the flat OJS job (what PUSH
/// takes, `options` folded in), typed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDef {
    pub job_type: String,
    pub template: Box<Template>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Def {
    Job(JobDef),
    Flow(Flow),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flow {
    pub kind: Kind,
    pub id: Option<String>,
    pub name: Option<String>,
    pub children: Vec<Def>,
    /// Batch only, in `Role::ALL` order.
    pub callbacks: Vec<(Role, JobDef)>,
    /// DAG only: per child (same order), its step id and the children it depends on.
    pub dag: Vec<DagStep>,
}

/// A DAG step's identity and edges: `depends_on` holds indices into the DAG's children,
/// each at most once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DagStep {
    pub id: String,
    pub depends_on: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Definition {
    pub root: Flow,
    /// Jobs in steps/jobs at every level, callbacks excluded.
    pub job_count: usize,
    pub callback_count: usize,
}

pub use crate::error::Problem;

/// The one-line form used in `-ERR INVALID_PAYLOAD ...`: every problem with its path.
pub fn summary(problems: &[Problem]) -> String {
    let listed: Vec<String> = problems
        .iter()
        .map(|p| format!("{}: {}", p.path, p.message))
        .collect();
    format!("workflow validation failed: {}", listed.join("; "))
}

/// Workflow ids chosen by clients: `[A-Za-z0-9._:-]`, 1 to `MAX_ID_BYTES` bytes.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}
