//! One cron registration in memory, its stored record (`c/<name>`), and how clients see it.

use crate::cron::{CronDef, Kind, Occurrence, Schedule};
use crate::job::validate::Limits;
use crate::job::{format_ts, parse_ts};
use chrono::{DateTime, NaiveDateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use uuid::Uuid;

const RECORD_VERSION: u32 = 1;
pub(super) const LOCAL_FORMAT: &str = "%Y-%m-%dT%H:%M:%S";

pub(super) struct Entry {
    pub def: CronDef,
    pub schedule: Schedule,
    pub created_at: DateTime<Utc>,
    /// Where `@every` intervals count from: the registration (or last schedule change).
    pub anchor: DateTime<Utc>,
    /// The next occurrence to evaluate; `None` while disabled.
    pub next: Option<Occurrence>,
    /// Scheduled time of the latest occurrence that enqueued a job.
    pub last_run_at: Option<DateTime<Utc>>,
    pub run_count: u64,
    /// Jobs this entry enqueued that have not finished, oldest first (overlap detection).
    pub jobs: Vec<Uuid>,
}

#[derive(Serialize, Deserialize)]
struct Record {
    v: u32,
    def: Value,
    created_at: String,
    anchor_ms: i64,
    next: Option<NextRecord>,
    last_run_at: Option<String>,
    run_count: u64,
    jobs: Vec<Uuid>,
}

#[derive(Serialize, Deserialize)]
struct NextRecord {
    at_ms: i64,
    /// Set for a DST gap: the first wall-clock time that did not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dst_skip: Option<String>,
}

pub(super) fn ms_time(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms)
}

impl Entry {
    pub(super) fn due_key(&self) -> Option<(i64, String)> {
        self.next
            .map(|n| (n.at.timestamp_millis(), self.def.name.clone()))
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let rec = Record {
            v: RECORD_VERSION,
            def: Value::Object(self.def.to_json()),
            created_at: format_ts(self.created_at),
            anchor_ms: self.anchor.timestamp_millis(),
            next: self.next.map(|n| NextRecord {
                at_ms: n.at.timestamp_millis(),
                dst_skip: n.local.map(|l| l.format(LOCAL_FORMAT).to_string()),
            }),
            last_run_at: self.last_run_at.map(format_ts),
            run_count: self.run_count,
            jobs: self.jobs.clone(),
        };
        serde_json::to_vec(&rec).unwrap_or_default()
    }

    pub(super) fn decode(
        bytes: &[u8],
        now: DateTime<Utc>,
        limits: &Limits,
    ) -> Result<Entry, String> {
        let rec: Record = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if rec.v != RECORD_VERSION {
            return Err(format!("unknown record version {}", rec.v));
        }
        let (def, schedule) = CronDef::parse(&rec.def, now, limits).map_err(|e| e.to_string())?;
        let next = match rec.next {
            None => None,
            Some(n) => {
                let at = ms_time(n.at_ms).ok_or("bad next time")?;
                let local = n
                    .dst_skip
                    .map(|l| NaiveDateTime::parse_from_str(&l, LOCAL_FORMAT))
                    .transpose()
                    .map_err(|e| e.to_string())?;
                let kind = if local.is_some() {
                    Kind::DstSkip
                } else {
                    Kind::Fire
                };
                Some(Occurrence { at, kind, local })
            }
        };
        Ok(Entry {
            def,
            schedule,
            created_at: parse_ts(&rec.created_at).ok_or("bad created_at")?,
            anchor: ms_time(rec.anchor_ms).ok_or("bad anchor")?,
            next,
            last_run_at: rec.last_run_at.as_deref().and_then(parse_ts),
            run_count: rec.run_count,
            jobs: rec.jobs,
        })
    }

    /// The registration as clients see it, with the system-managed fields (§2.2).
    pub(super) fn view(&self) -> Value {
        let mut m = self.def.to_json();
        let next_fire = self
            .next
            .and_then(|n| self.schedule.next_fire(n, self.anchor));
        m.insert("last_run_at".into(), json!(self.last_run_at.map(format_ts)));
        m.insert("next_run_at".into(), json!(next_fire.map(format_ts)));
        m.insert("run_count".into(), json!(self.run_count));
        m.insert("created_at".into(), json!(format_ts(self.created_at)));
        let ids: Vec<String> = self.jobs.iter().map(Uuid::to_string).collect();
        m.insert("active_job_ids".into(), json!(ids));
        Value::Object(m)
    }

    /// The fields every cron event carries: ojs-events §4.5 names plus ojs-cron §9's.
    pub(super) fn event_data(&self, scheduled: DateTime<Utc>) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("cron_name".into(), json!(self.def.name));
        m.insert("cron_expr".into(), json!(self.def.cron));
        m.insert("cron_expression".into(), json!(self.def.cron));
        m.insert("timezone".into(), json!(self.def.timezone));
        m.insert("job_type".into(), json!(self.def.job_type));
        m.insert("scheduled_at".into(), json!(format_ts(scheduled)));
        m.insert("scheduled_time".into(), json!(format_ts(scheduled)));
        m
    }
}
