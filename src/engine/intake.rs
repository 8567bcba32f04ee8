//! Building the engine's typed requests from what clients send, on the front end's own task:
//! a job envelope becomes a validated [`NewJob`], a cron registration a [`CronDef`], a
//! workflow definition a [`Definition`]. Every front end (the TCP dialects, HTTP) asks the
//! same [`Intake`], so a body is validated once, the same way, before it is queued; the
//! engine thread never parses client JSON.
//!
//! Times relative to now (`"+PT5S"`) are read from the engine's own clock, which a server
//! with `--test-clock` moves forward (`CLOCK ADVANCE`).

use super::clock::Clock;
use crate::cron::CronDef;
use crate::error::{OjsError, OjsResult};
use crate::job::validate::{parse_new_job, Limits, NewJob};
use crate::workflow::Definition;
use serde_json::Value;

/// What a front end needs to build requests: the job limits and the engine's clock.
#[derive(Debug, Clone, Default)]
pub struct Intake {
    limits: Limits,
    clock: Clock,
}

impl Intake {
    pub fn new(limits: Limits, clock: Clock) -> Intake {
        Intake { limits, clock }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The engine clock's time (`--test-clock` moves it).
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.clock.now()
    }

    /// One job envelope of `len` bytes on the wire, as PUSH takes it.
    pub fn job(&self, v: Value, len: usize) -> OjsResult<NewJob> {
        parse_new_job(v, len, self.clock.now(), &self.limits)
    }

    /// A batch that is enqueued all or nothing (PUSHB of the OJS dialect, HTTP's batch):
    /// the first invalid job refuses the batch, naming its position.
    pub fn batch(&self, jobs: Vec<(Value, usize)>) -> OjsResult<Vec<(NewJob, usize)>> {
        jobs.into_iter()
            .enumerate()
            .map(|(i, (v, len))| {
                self.job(v, len).map(|j| (j, len)).map_err(|e| OjsError {
                    message: format!("job {i}: {}; no job was enqueued", e.message),
                    ..e
                })
            })
            .collect()
    }

    /// A cron registration (ojs-cron §2.2): its schedule and job template are checked here.
    pub fn cron(&self, v: &Value) -> OjsResult<CronDef> {
        CronDef::parse(v, self.clock.now(), &self.limits).map(|(def, _)| def)
    }

    /// A workflow definition (ojs-workflows §11, or the binding's DAG shape).
    pub fn workflow(&self, v: &Value) -> OjsResult<Definition> {
        crate::workflow::parse_definition(v, &self.limits, self.clock.now()).map_err(|p| OjsError {
            message: crate::workflow::summary(&p),
            problems: p,
            ..OjsError::new(crate::error::ErrorCode::InvalidPayload, "")
        })
    }
}
