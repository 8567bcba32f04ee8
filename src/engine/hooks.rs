//! Where features built on top of the job lifecycle (workflows, unique jobs, cron overlap)
//! learn that a job has finished. Called in the same batch as the transition, after the
//! job's own event, so whatever a feature does next commits atomically with it.

use super::txn::Txn;
use super::Engine;
use crate::job::State;
use uuid::Uuid;

impl Engine {
    /// `uid` just reached the terminal `state` (completed, discarded or cancelled).
    pub(super) fn settled(&mut self, txn: &mut Txn, uid: Uuid, state: State) {
        debug_assert!(state.is_terminal());
        self.cron_settled(txn, uid);
        self.workflow_job_settled(txn, uid, state);
    }

    /// `uid` was deleted (pruned, purged, or removed from the dead-letter set), possibly
    /// before it finished.
    pub(super) fn deleted(&mut self, txn: &mut Txn, uid: Uuid) {
        self.cron_settled(txn, uid);
        self.workflow_job_deleted(txn, uid);
    }

    /// `uid` was just claimed by a FETCH (available → active).
    pub(super) fn started(&mut self, txn: &mut Txn, uid: Uuid) {
        self.workflow_job_started(txn, uid);
    }
}
