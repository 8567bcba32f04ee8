//! The event types the engine emits (ojs-events §3), one enum: a new one is added here,
//! with its stored code, and the compiler then knows every name. Codes are on disk: never
//! renumber, only append.

macro_rules! kinds {
    ($($variant:ident = $code:literal, $name:literal;)*) => {
        /// An event type, with its OJS name and its stored code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum EventKind {
            $($variant),*
        }

        impl EventKind {
            /// Every event type.
            pub const ALL: &'static [EventKind] = &[$(EventKind::$variant),*];

            /// The OJS name (`job.completed`).
            pub fn name(self) -> &'static str {
                match self {
                    $(EventKind::$variant => $name),*
                }
            }

            /// The code the compact log stores (never 0, which means "named in the record").
            pub fn code(self) -> u8 {
                match self {
                    $(EventKind::$variant => $code),*
                }
            }
        }
    };
}

kinds! {
    JobEnqueued = 1, "job.enqueued";
    JobScheduled = 2, "job.scheduled";
    JobStarted = 3, "job.started";
    JobCompleted = 4, "job.completed";
    JobFailed = 5, "job.failed";
    JobRetrying = 6, "job.retrying";
    JobDiscarded = 7, "job.discarded";
    JobCancelled = 8, "job.cancelled";
    JobExpired = 9, "job.expired";
    JobHeartbeat = 10, "job.heartbeat";
    JobProgress = 11, "job.progress";
    QueuePaused = 20, "queue.paused";
    QueueResumed = 21, "queue.resumed";
    WorkerStarted = 30, "worker.started";
    WorkerHeartbeat = 31, "worker.heartbeat";
    WorkerQuiet = 32, "worker.quiet";
    WorkerStopped = 33, "worker.stopped";
    CronTriggered = 40, "cron.triggered";
    CronSkipped = 41, "cron.skipped";
    WorkflowCreated = 50, "workflow.created";
    WorkflowStarted = 51, "workflow.started";
    WorkflowCompleted = 52, "workflow.completed";
    WorkflowFailed = 53, "workflow.failed";
    WorkflowCancelled = 54, "workflow.cancelled";
    WorkflowStepCompleted = 55, "workflow.step_completed";
    WorkflowStepFailed = 56, "workflow.step_failed";
    WorkflowJobCompleted = 57, "workflow.job_completed";
    WorkflowJobFailed = 58, "workflow.job_failed";
    WorkflowCallbackFired = 59, "workflow.callback_fired";
}

impl EventKind {
    pub fn from_name(name: &str) -> Option<EventKind> {
        EventKind::ALL.iter().copied().find(|k| k.name() == name)
    }

    pub fn from_code(code: u8) -> Option<EventKind> {
        EventKind::ALL.iter().copied().find(|k| k.code() == code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_are_unique_and_round_trip() {
        let mut codes = std::collections::HashSet::new();
        let mut names = std::collections::HashSet::new();
        for &k in EventKind::ALL {
            assert_ne!(k.code(), 0, "{k:?}");
            assert!(codes.insert(k.code()), "{k:?} code repeated");
            assert!(names.insert(k.name()), "{k:?} name repeated");
            assert_eq!(EventKind::from_code(k.code()), Some(k));
            assert_eq!(EventKind::from_name(k.name()), Some(k));
        }
    }
}
