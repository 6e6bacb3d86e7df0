//! Backfill requests (issue 20): past ticks an operator asked to run (`zkcron backfill`), put
//! in their job's backlog in order and claimed through the one claim path, so a tick that has a
//! record by then (it ran meanwhile) is refused by ZooKeeper and not run.
//!
//! Owns: which requests this machine has seen, taking the ones for its jobs once it may fire,
//! and asking for each taken one to be removed.
//! Must not: check a tick against the ledger itself (the claim does), or start anything but
//! through the backlog, which runs a job's items one after another.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::{Action, FireMachine, FireReason, Item};
use crate::control::BackfillRequest;

/// The requests seen under `control/backfill`, by node name, not yet taken.
pub(super) type Backfills = BTreeMap<String, BackfillRequest>;

impl FireMachine {
    /// The requests waiting now (the driver's watch on `control/`).
    pub(super) fn backfills_read(
        &mut self,
        requests: Vec<(String, BackfillRequest)>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        self.backfills = requests.into_iter().collect();
        self.take_backfills(now, out);
    }

    /// Once this node may fire: each request for one of its jobs goes into the job's backlog,
    /// its ticks oldest first, and is removed. One for a job that no group fires is removed
    /// too; one for another group's job is that group's.
    pub(super) fn take_backfills(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if !self.lock.may_fire || self.stopping.is_some() {
            return;
        }
        let names: Vec<String> = self.backfills.keys().cloned().collect();
        for name in names {
            let Some(job) = self.backfills.get(&name).map(|r| r.job.clone()) else {
                continue;
            };
            if self.elsewhere.contains(&job) {
                continue;
            }
            let Some(request) = self.backfills.remove(&name) else {
                continue;
            };
            let Some(state) = self.jobs.get_mut(&job) else {
                tracing::warn!(job = %job, by = request.by, "backfill of a job not in the schedule: dropped");
                out.push(Action::RemoveBackfill(name));
                continue;
            };
            tracing::info!(job = %job, ticks = request.ticks.len(), by = request.by, "backfill taken: its ticks run in order");
            state.backlog.extend(
                request
                    .ticks
                    .iter()
                    .filter_map(|ms| DateTime::from_timestamp_millis(*ms))
                    .map(|tick| Item {
                        tick,
                        reason: FireReason::Backfill,
                        again: None,
                        submission: None,
                    }),
            );
            out.push(Action::RemoveBackfill(name));
            self.advance(&job, now, out);
        }
    }
}
