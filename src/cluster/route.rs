//! Which partition a request belongs to when the cluster has more than one.
//!
//! A queue belongs to partition `partition_of(queue, P)`: the first four bytes of the
//! SHA-256 of its name, big-endian, modulo `P` (stable across versions and platforms;
//! never Rust's `DefaultHasher`). Everything about a queue (its jobs, their states, its
//! limits, its dead letters) lives in its partition, served by that partition's engine.
//! A request names its partition by a queue, or by a job id (the router finds the job's
//! partition), or concerns every partition (INFO, listings): [`route`] says which.

pub use crate::engine::partition::partition_of;
use crate::engine::request::{Command, CronCmd, DeadCmd, QueueCmd, WorkflowCmd};

/// Where a request goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// One partition's engine.
    Part(u32),
    /// The engine of the partition that holds this job.
    Job(String),
    /// Each job to the engine of its partition (ACKB): split by partition, answers put
    /// back in the request's order.
    Jobs,
    /// A FETCH over queues of several partitions: those partitions, in the order of the
    /// queues that first name them.
    Fetch(Vec<u32>),
    /// Each partition on its own, answers merged (a listing: each partition's first
    /// `offset + limit`, merged in order, then the page cut out).
    All,
    /// The one partition that knows the name (a cron registration, a workflow): each is
    /// asked; the first answer that is not `NOT_FOUND` wins.
    Find,
    /// Not served across partitions: why.
    Refused(String),
}

/// One partition if every queue is in it, else the partitions in the queues' order.
fn of_queues<'a>(queues: impl IntoIterator<Item = &'a String>, parts: u32) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for q in queues {
        let p = partition_of(q, parts);
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

fn one_or<'a>(queues: impl IntoIterator<Item = &'a String>, parts: u32, what: &str) -> Route {
    let ps = of_queues(queues, parts);
    match ps.as_slice() {
        [] => Route::Part(0),
        [p] => Route::Part(*p),
        _ => Route::Refused(format!(
            "{what} names queues of {} partitions (of {parts}); in cluster mode one request \
             may change the queues of one partition only: send one per queue",
            ps.len()
        )),
    }
}

/// The route of `cmd` in a cluster of `parts` partitions (all to 0 when there is one).
pub fn route(cmd: &Command, parts: u32) -> Route {
    if parts <= 1 {
        return Route::Part(0);
    }
    match cmd {
        Command::Push { job, .. } if unique_across(&job.job) => refuse_unique(parts),
        Command::PushBatch(jobs) | Command::PushEach(jobs)
            if jobs.iter().any(|(j, _)| unique_across(&j.job)) =>
        {
            refuse_unique(parts)
        }
        Command::Push { job, .. } => Route::Part(partition_of(&job.job.queue, parts)),
        Command::PushBatch(jobs) => {
            one_or(jobs.iter().map(|(j, _)| &j.job.queue), parts, "a batch")
        }
        Command::PushEach(jobs) => one_or(jobs.iter().map(|(j, _)| &j.job.queue), parts, "a batch"),
        Command::Fetch { queues, .. } => {
            let ps = of_queues(queues, parts);
            match ps.as_slice() {
                [] => Route::Part(0),
                [p] => Route::Part(*p),
                _ => Route::Fetch(ps),
            }
        }
        Command::AckFetch { id, queues, .. } => match of_queues(queues, parts).as_slice() {
            // Answered by one engine when the job and the queues share it (the router
            // checks the job's partition); otherwise an ACK, then a FETCH.
            [_] => Route::Job(id.clone()),
            _ => Route::Fetch(of_queues(queues, parts)),
        },
        Command::Ack { id, .. }
        | Command::Fail { id, .. }
        | Command::Cancel { id }
        | Command::Activate { id }
        | Command::Job { id }
        | Command::Progress { id, .. } => Route::Job(id.clone()),
        // The router sends it to the partition that handed the jobs out.
        Command::AckBatch(_) => Route::Jobs,
        Command::Unclaim { ids } => Route::Job(ids.first().cloned().unwrap_or_default()),
        Command::Dead(DeadCmd::Get(id) | DeadCmd::Retry(id) | DeadCmd::Delete(id)) => {
            Route::Job(id.clone())
        }
        Command::Queue(q) => match q {
            QueueCmd::Stats(q)
            | QueueCmd::Purge { queue: q, .. }
            | QueueCmd::Limit { queue: q, .. } => Route::Part(partition_of(q, parts)),
            QueueCmd::Pause(v) => one_or(v, parts, "QUEUE PAUSE"),
            QueueCmd::Resume(v) => one_or(v, parts, "QUEUE RESUME"),
            QueueCmd::Remove(v) if !v.iter().any(|q| q == "*") => one_or(v, parts, "QUEUE REMOVE"),
            QueueCmd::Latency(v) if !v.iter().any(|q| q == "*") => {
                one_or(v, parts, "QUEUE LATENCY")
            }
            QueueCmd::Remove(_) | QueueCmd::Latency(_) | QueueCmd::List => Route::All,
        },
        Command::Jobs(q) => match &q.queue {
            Some(queue) => Route::Part(partition_of(queue, parts)),
            None => paged(q.offset, q.limit),
        },
        Command::Dead(DeadCmd::List { offset, limit, .. })
        | Command::Cron(CronCmd::List { offset, limit, .. })
        | Command::Workflow(WorkflowCmd::List { offset, limit, .. }) => paged(*offset, *limit),
        Command::Info
        | Command::Beat { .. }
        | Command::Worker { .. }
        | Command::ClockAdvance { .. }
        | Command::Workers
        | Command::Overview
        | Command::StatsHistory { .. }
        | Command::Mutate(_)
        | Command::Flush
        | Command::Dead(_) => Route::All,
        Command::Cluster | Command::Hello(_) | Command::End => Route::Part(0),
        // A cron registration lives in the partition of the queue its jobs go to, so
        // that its occurrences are enqueued by the engine that owns it.
        Command::Cron(CronCmd::Add(def)) => Route::Part(partition_of(def.template.queue(), parts)),
        Command::Cron(_) => Route::Find,
        // A workflow lives in the partition of its first job's queue; its jobs in other
        // partitions' queues are enqueued there through its outbox (workflow/outbox.rs).
        Command::Workflow(WorkflowCmd::Create { definition }) => {
            let mut queues = Vec::new();
            flow_queues(&definition.root, &mut queues);
            Route::Part(queues.first().map_or(0, |q| partition_of(q, parts)))
        }
        Command::Workflow(WorkflowCmd::Deliver { part, .. }) => Route::Part(*part),
        // An engine's own outbox is read by the node that runs it, never routed.
        Command::Workflow(WorkflowCmd::Outbox { .. } | WorkflowCmd::Delivered(_)) => {
            Route::Refused("an outbox is read by the node that holds its partition".into())
        }
        Command::Workflow(_) => Route::Find,
        // Never dispatched: the connection turns into a stream (`Router::subscription`,
        // which merges the partitions' logs when the filter names no single one).
        Command::Subscribe { .. } => Route::Part(0),
    }
}

/// A job whose uniqueness key leaves its queue out: it must be unique across queues, so
/// across partitions, which each enforce their own keys.
fn unique_across(job: &crate::job::Job) -> bool {
    job.unique
        .as_ref()
        .and_then(|u| crate::job::unique::UniquePolicy::parse(u, &job.args).ok())
        .is_some_and(|p| !p.queue)
}

fn refuse_unique(parts: u32) -> Route {
    Route::Refused(format!(
        "in cluster mode with several partitions (this cluster has {parts}) a unique job's \
         key must include its queue (\"unique\": {{\"keys\": [..., \"queue\"]}}): each \
         partition enforces the keys of its own queues, and a key across queues would not \
         be unique across partitions"
    ))
}

/// The deepest a listing may page across partitions: each is asked for its first
/// `offset + limit`, within what one request may ask (`check::MAX_PAGE`).
fn paged(offset: usize, limit: usize) -> Route {
    match offset.checked_add(limit) {
        Some(n) if n <= super::check::MAX_PAGE => Route::All,
        _ => Route::Refused(format!(
            "in cluster mode a listing pages at most {} entries deep (offset + limit); \
             narrow it to one queue instead",
            super::check::MAX_PAGE
        )),
    }
}

/// The queues of every job a workflow may enqueue, callbacks included.
fn flow_queues(flow: &crate::workflow::Flow, out: &mut Vec<String>) {
    for c in &flow.children {
        match c {
            crate::workflow::Def::Job(j) => out.push(j.template.queue().to_string()),
            crate::workflow::Def::Flow(f) => flow_queues(f, out),
        }
    }
    for (_, j) in &flow.callbacks {
        out.push(j.template.queue().to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_has_a_stable_partition() {
        // Fixed values: a change of hash would move every queue of a running cluster.
        assert_eq!(partition_of("default", 1), 0);
        let p = partition_of("default", 64);
        assert_eq!(p, partition_of("default", 64));
        use sha2::{Digest, Sha256};
        let d = Sha256::digest(b"default");
        assert_eq!(p, u32::from_be_bytes([d[0], d[1], d[2], d[3]]) % 64);
        // Queues spread over the partitions.
        let mut seen = [false; 8];
        for i in 0..200 {
            seen[partition_of(&format!("q{i}"), 8) as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }

    #[test]
    fn one_partition_routes_everything_to_it() {
        assert_eq!(route(&Command::Flush, 1), Route::Part(0));
        assert_eq!(route(&Command::Info, 1), Route::Part(0));
    }

    #[test]
    fn requests_route_by_queue_or_job() {
        let parts = 8;
        let (a, b) = (0..100)
            .map(|i| format!("q{i}"))
            .fold((None, None), |(a, b), q| match (&a, &b) {
                (None, _) => (Some(q), b),
                (Some(x), None) if partition_of(x, parts) != partition_of(&q, parts) => {
                    (a, Some(q))
                }
                _ => (a, b),
            });
        let (a, b) = (a.unwrap(), b.unwrap());
        let fetch = |queues: Vec<String>| Command::Fetch {
            queues,
            count: None,
            wait: None,
        };
        assert_eq!(
            route(&fetch(vec![a.clone()]), parts),
            Route::Part(partition_of(&a, parts))
        );
        assert_eq!(
            route(&fetch(vec![b.clone(), a.clone(), b.clone()]), parts),
            Route::Fetch(vec![partition_of(&b, parts), partition_of(&a, parts)])
        );
        assert_eq!(
            route(&Command::Job { id: "x".into() }, parts),
            Route::Job("x".into())
        );
        assert!(matches!(
            route(&Command::Queue(QueueCmd::Pause(vec![a.clone(), b])), parts),
            Route::Refused(_)
        ));
        // A unique key that leaves the queue out is refused; one with it routes by queue.
        let push = |unique: serde_json::Value| {
            let body = serde_json::json!({"type": "t", "args": [1], "queue": a, "unique": unique});
            let job = crate::engine::intake::Intake::default()
                .job(body, 60)
                .unwrap();
            Command::Push {
                job: Box::new(job),
                len: 60,
                resend: false,
            }
        };
        assert!(matches!(
            route(&push(serde_json::json!({"keys": ["type", "args"]})), parts),
            Route::Refused(_)
        ));
        assert_eq!(
            route(
                &push(serde_json::json!({"keys": ["type", "queue", "args"]})),
                parts
            ),
            Route::Part(partition_of(&a, parts))
        );
        assert_eq!(
            route(&push(serde_json::json!({"keys": ["type", "args"]})), 1),
            Route::Part(0)
        );
    }
}
