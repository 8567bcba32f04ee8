//! Every partition's answer to one request, as one answer (cluster mode with more than
//! one partition): counts are summed, lists joined in the order the engine gives them
//! (queues by name; jobs, dead letters and workflows newest first; cron registrations by
//! name), and a page is cut from the merged list. Each partition is asked for its first
//! `offset + limit` entries of a page ([`per_partition`]).

use crate::engine::api::{
    DeadPage, DeadStats, Flushed, History, Info, InfoWorker, JobPage, JobView, Mutated, Overview,
    QueueList, Totals, WorkerList, WorkflowPage,
};
use crate::engine::request::{Command, CronCmd, DeadCmd, WorkflowCmd};
use crate::engine::{Answer, Answered};
use crate::error::{ErrorCode, OjsError};
use serde_json::Value;

/// What each partition is asked for `cmd`: a page from the start, `offset + limit` long.
pub fn per_partition(cmd: &Command) -> Command {
    let mut cmd = cmd.clone();
    match &mut cmd {
        Command::Jobs(q) => {
            q.limit = q.offset.saturating_add(q.limit);
            q.offset = 0;
        }
        Command::Dead(DeadCmd::List { limit, offset, .. })
        | Command::Cron(CronCmd::List { limit, offset, .. })
        | Command::Workflow(WorkflowCmd::List { limit, offset, .. }) => {
            *limit = offset.saturating_add(*limit);
            *offset = 0;
        }
        _ => {}
    }
    cmd
}

/// The page `offset..offset + limit` of `cmd`, if it is a listing.
fn window(cmd: &Command) -> (usize, usize) {
    match cmd {
        Command::Jobs(q) => (q.offset, q.limit),
        Command::Dead(DeadCmd::List { limit, offset, .. })
        | Command::Cron(CronCmd::List { limit, offset, .. })
        | Command::Workflow(WorkflowCmd::List { limit, offset, .. }) => (*offset, *limit),
        _ => (0, usize::MAX),
    }
}

fn cut<T>(v: Vec<T>, (offset, limit): (usize, usize)) -> Vec<T> {
    v.into_iter().skip(offset).take(limit).collect()
}

/// A job envelope's sort key: `field` (an RFC 3339 time the engine wrote, so strings order
/// as times) then the id (UUIDv7: creation order).
fn key(v: &JobView, field: &str) -> (String, String) {
    let doc: Value = serde_json::from_slice(v.json()).unwrap_or(Value::Null);
    let s = |k: &str| doc.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    (
        if field.is_empty() {
            String::new()
        } else {
            s(field)
        },
        s("id"),
    )
}

/// Every partition's answer to `cmd` as one. An error from any partition is the answer
/// (a count or a list without a partition would be wrong), except where noted.
pub fn merge(cmd: &Command, answers: Vec<Answered>) -> Answered {
    let win = window(cmd);
    match cmd {
        // The first directive any partition has for the worker; fine if one knew it.
        Command::Beat { .. } => {
            let mut first_err = None;
            let mut ok = false;
            for a in answers {
                match a {
                    Ok(Answer::Directive(d)) => return Ok(Answer::Directive(d)),
                    Ok(_) => ok = true,
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
            match (ok, first_err) {
                (false, Some(e)) => Err(e),
                _ => Ok(Answer::Ok),
            }
        }
        // Done where the worker is known, or the clock moved everywhere.
        Command::Worker { .. } | Command::ClockAdvance { .. } => {
            let mut first_err = None;
            let mut ok = None;
            for a in answers {
                match a {
                    Ok(a) => {
                        ok.get_or_insert(a);
                    }
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
            match (ok, first_err) {
                (Some(a), None) | (Some(a), Some(_)) if matches!(cmd, Command::Worker { .. }) => {
                    Ok(a)
                }
                (_, Some(e)) => Err(e),
                (Some(a), None) => Ok(a),
                (None, None) => Ok(Answer::Ok),
            }
        }
        _ => {
            let answers = answers.into_iter().collect::<Result<Vec<_>, _>>()?;
            merge_ok(answers, win)
        }
    }
}

fn mismatch(a: &Answer) -> OjsError {
    OjsError::new(
        ErrorCode::BackendError,
        format!("partitions answered in different shapes ({a:?})"),
    )
}

fn merge_ok(answers: Vec<Answer>, win: (usize, usize)) -> Answered {
    let mut it = answers.into_iter();
    let Some(first) = it.next() else {
        return Ok(Answer::Nothing);
    };
    let rest: Vec<Answer> = it.collect();
    macro_rules! each {
        ($variant:ident) => {
            rest.into_iter().map(|a| match a {
                Answer::$variant(x) => Ok(x),
                other => Err(mismatch(&other)),
            })
        };
    }
    Ok(match first {
        Answer::Info(mut a) => {
            for b in each!(Info) {
                *a = merge_info(*a, *b?);
            }
            Answer::Info(a)
        }
        Answer::Queues(mut a) => {
            for b in each!(Queues) {
                let b: QueueList = b?;
                a.total = a.total.saturating_add(b.total);
                a.queues.extend(b.queues);
            }
            a.queues.sort_by(|x, y| x.name.cmp(&y.name));
            Answer::Queues(a)
        }
        Answer::Mutated(mut a) => {
            for b in each!(Mutated) {
                let b: Mutated = b?;
                a.matched = a.matched.saturating_add(b.matched);
                a.changed = a.changed.saturating_add(b.changed);
            }
            Answer::Mutated(a)
        }
        Answer::Flushed(mut a) => {
            for b in each!(Flushed) {
                let b: Flushed = b?;
                a.jobs = a.jobs.saturating_add(b.jobs);
                a.workflows = a.workflows.saturating_add(b.workflows);
            }
            Answer::Flushed(a)
        }
        Answer::Latencies(mut a) => {
            for b in each!(Latencies) {
                a.extend(b?);
            }
            a.sort_by(|x, y| x.queue.cmp(&y.queue));
            Answer::Latencies(a)
        }
        Answer::Workers(mut a) => {
            for b in each!(Workers) {
                merge_workers(&mut a, b?);
            }
            Answer::Workers(a)
        }
        Answer::JobPage(a) => {
            let mut total = a.total;
            let mut jobs = a.jobs;
            for b in each!(JobPage) {
                let b: JobPage = b?;
                total = total.saturating_add(b.total);
                jobs.extend(b.jobs);
            }
            jobs.sort_by_cached_key(|j| std::cmp::Reverse(key(j, "")));
            Answer::JobPage(JobPage {
                total,
                jobs: cut(jobs, win),
            })
        }
        Answer::DeadPage(a) => {
            let mut total = a.total;
            let mut jobs = a.jobs;
            for b in each!(DeadPage) {
                let b: DeadPage = b?;
                total = total.saturating_add(b.total);
                jobs.extend(b.jobs);
            }
            jobs.sort_by_cached_key(|j| std::cmp::Reverse(key(j, "discarded_at")));
            Answer::DeadPage(DeadPage {
                total,
                jobs: cut(jobs, win),
            })
        }
        Answer::DeadStats(mut a) => {
            for b in each!(DeadStats) {
                merge_dead_stats(&mut a, *b?);
            }
            Answer::DeadStats(a)
        }
        Answer::DeadRetried(mut a) => {
            for b in each!(DeadRetried) {
                let b = b?;
                a.matched = a.matched.saturating_add(b.matched);
                a.retried = a.retried.saturating_add(b.retried);
                a.failed = a.failed.saturating_add(b.failed);
                a.errors.extend(b.errors);
            }
            Answer::DeadRetried(a)
        }
        Answer::DeadDeleted(mut a) => {
            for b in each!(DeadDeleted) {
                let b = b?;
                a.matched = a.matched.saturating_add(b.matched);
                a.deleted = a.deleted.saturating_add(b.deleted);
            }
            Answer::DeadDeleted(a)
        }
        Answer::CronPage(mut a) => {
            for b in each!(CronPage) {
                let b = b?;
                a.pagination.total = a.pagination.total.saturating_add(b.pagination.total);
                a.cron_jobs.extend(b.cron_jobs);
            }
            let name = |v: &Value| {
                v.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            a.cron_jobs.sort_by_cached_key(name);
            a.cron_jobs = cut(std::mem::take(&mut a.cron_jobs), win);
            a.count = a.cron_jobs.len();
            a.pagination.offset = win.0;
            a.pagination.limit = win.1;
            a.pagination.has_more = win.0.saturating_add(a.count) < a.pagination.total;
            Answer::CronPage(a)
        }
        Answer::WorkflowPage(a) => {
            let mut total = a.total;
            let mut workflows = a.workflows;
            for b in each!(WorkflowPage) {
                let b: WorkflowPage = b?;
                total = total.saturating_add(b.total);
                workflows.extend(b.workflows);
            }
            workflows.sort_by(|x, y| y.created_at.cmp(&x.created_at).then(y.id.cmp(&x.id)));
            Answer::WorkflowPage(WorkflowPage {
                total,
                workflows: cut(workflows, win),
            })
        }
        Answer::Overview(mut a) => {
            for b in each!(Overview) {
                merge_overview(&mut a, *b?);
            }
            Answer::Overview(a)
        }
        Answer::History(mut a) => {
            for b in each!(History) {
                merge_history(&mut a, b?);
            }
            Answer::History(a)
        }
        Answer::Ok => Answer::Ok,
        other => return Err(mismatch(&other)),
    })
}

pub fn merge_info(mut a: Info, b: Info) -> Info {
    let t: &mut Totals = &mut a.totals;
    t.enqueued = t.enqueued.saturating_add(b.totals.enqueued);
    t.completed = t.completed.saturating_add(b.totals.completed);
    t.failed = t.failed.saturating_add(b.totals.failed);
    t.jobs = t.jobs.saturating_add(b.totals.jobs);
    t.dead = t.dead.saturating_add(b.totals.dead);
    t.unique_keys = t.unique_keys.saturating_add(b.totals.unique_keys);
    t.waiting_fetches = t.waiting_fetches.saturating_add(b.totals.waiting_fetches);
    a.server.store_bytes = a.server.store_bytes.saturating_add(b.server.store_bytes);
    a.queues.0.extend(b.queues.0);
    a.queues.0.sort_by(|x, y| x.name.cmp(&y.name));
    for w in b.workers {
        match a.workers.iter_mut().find(|x| x.wid == w.wid) {
            Some(x) => merge_info_worker(x, w),
            None => a.workers.push(w),
        }
    }
    a
}

fn merge_info_worker(a: &mut InfoWorker, b: InfoWorker) {
    a.active_jobs = a.active_jobs.saturating_add(b.active_jobs);
    if b.last_seen > a.last_seen {
        a.last_seen = b.last_seen;
    }
}

/// A worker is registered with every partition: one entry, its jobs from all of them.
fn merge_workers(a: &mut WorkerList, b: WorkerList) {
    for w in b.workers {
        match a.workers.iter_mut().find(|x| x.id == w.id) {
            Some(x) => {
                x.active_jobs = x.active_jobs.saturating_add(w.active_jobs);
                x.active_job_ids.extend(w.active_job_ids);
                x.jobs_completed = x.jobs_completed.saturating_add(w.jobs_completed);
                x.connected |= w.connected;
                x.stale &= w.stale;
                if w.last_heartbeat_at > x.last_heartbeat_at {
                    x.last_heartbeat_at = w.last_heartbeat_at;
                }
                // A directive set on any partition is the worker's.
                if x.state == "running" {
                    x.state = w.state;
                }
            }
            None => a.workers.push(w),
        }
    }
    a.total = a.workers.len();
    let s = &mut a.summary;
    s.total = a.workers.len();
    s.running = a.workers.iter().filter(|w| w.state == "running").count();
    s.quiet = a.workers.iter().filter(|w| w.state == "quiet").count();
    s.terminate = a.workers.iter().filter(|w| w.state == "terminate").count();
    s.stale = a.workers.iter().filter(|w| w.stale).count();
}

fn merge_dead_stats(a: &mut DeadStats, b: DeadStats) {
    a.total = a.total.saturating_add(b.total);
    for (q, n) in b.by_queue {
        a.by_queue.insert(q, n);
    }
    for (k, n) in b.by_error_type {
        let e = a.by_error_type.entry(k).or_insert(0);
        *e = e.saturating_add(n);
    }
    a.oldest_at = match (a.oldest_at.take(), b.oldest_at) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    };
    a.newest_at = match (a.newest_at.take(), b.newest_at) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    a.retention.next_prune_at = match (a.retention.next_prune_at.take(), b.retention.next_prune_at)
    {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    };
}

/// Buckets of the same start time summed; pickup latency: samples summed, the
/// percentiles the worst of the partitions' (percentiles do not add up).
fn merge_overview(a: &mut Overview, b: Overview) {
    for p in b.points {
        match a.points.iter_mut().find(|x| x.at_ms == p.at_ms) {
            Some(x) => {
                x.enqueued = x.enqueued.saturating_add(p.enqueued);
                x.completed = x.completed.saturating_add(p.completed);
                x.failed = x.failed.saturating_add(p.failed);
                x.available = x.available.saturating_add(p.available);
                x.active = x.active.saturating_add(p.active);
            }
            None => a.points.push(p),
        }
    }
    a.points.sort_by_key(|p| p.at_ms);
    a.pickup.samples = a.pickup.samples.saturating_add(b.pickup.samples);
    a.pickup.p50_ms = a.pickup.p50_ms.max(b.pickup.p50_ms);
    a.pickup.p99_ms = a.pickup.p99_ms.max(b.pickup.p99_ms);
    a.now_ms = a.now_ms.max(b.now_ms);
}

fn merge_history(a: &mut History, b: History) {
    for p in b.points {
        match a.points.iter_mut().find(|x| x.at_ms == p.at_ms) {
            Some(x) => {
                x.processed = x.processed.saturating_add(p.processed);
                x.failed = x.failed.saturating_add(p.failed);
                x.enqueued = x.enqueued.saturating_add(p.enqueued);
            }
            None => a.points.push(p),
        }
    }
    a.points.sort_by_key(|p| p.at_ms);
}

/// Every partition's metrics as one view: series of the same job type and queue summed,
/// histograms bucket by bucket (every engine uses the same buckets), queue gauges summed
/// (a queue is in one partition; `_other` may be in several).
pub fn merge_metrics(
    views: Vec<crate::engine::metrics::MetricsView>,
) -> crate::engine::metrics::MetricsView {
    use crate::engine::metrics::{HistogramView, MetricsView};
    fn add(a: &mut HistogramView, b: &HistogramView) {
        if a.counts.len() < b.counts.len() {
            a.counts.resize(b.counts.len(), 0);
        }
        for (x, y) in a.counts.iter_mut().zip(&b.counts) {
            *x = x.saturating_add(*y);
        }
        a.sum += b.sum;
        a.count = a.count.saturating_add(b.count);
    }
    let mut out = MetricsView::default();
    for v in views {
        out.compactions = out.compactions.saturating_add(v.compactions);
        for s in v.series {
            match out
                .series
                .iter_mut()
                .find(|x| x.job_type == s.job_type && x.queue == s.queue)
            {
                Some(x) => {
                    x.enqueued = x.enqueued.saturating_add(s.enqueued);
                    x.completed = x.completed.saturating_add(s.completed);
                    x.failed = x.failed.saturating_add(s.failed);
                    add(&mut x.duration, &s.duration);
                    add(&mut x.wait, &s.wait);
                }
                None => out.series.push(s),
            }
        }
        for g in v.queues {
            match out.queues.iter_mut().find(|x| x.queue == g.queue) {
                Some(x) => {
                    x.depth = x.depth.saturating_add(g.depth);
                    x.active = x.active.saturating_add(g.active);
                    x.dead = x.dead.saturating_add(g.dead);
                }
                None => out.queues.push(g),
            }
        }
    }
    out
}
