//! What the fire driver tells the metrics: the inputs and actions it passes, seen on the way.
//!
//! Owns: which input or action counts as which fact (a run started, ended, recorded), and
//! counting each run's final record once, however often a failed write of it is sent again.
//! Must not: change an input or an action, or decide anything.

use std::collections::HashSet;

use crate::fire::machine::{Action, ClaimAction, ClaimInput, Input, RunAction};
use crate::lock::{LockEvent, LockStatus};
use crate::metrics::{Metrics, SessionState};
use crate::run::RunStatus;

/// The metrics and the runs whose final record is still to be counted.
#[derive(Debug)]
pub(super) struct Observer<'m> {
    metrics: &'m Metrics,
    ended: HashSet<String>,
    /// The lock group's name in the `group` label.
    group: &'m str,
    /// The node's unlabelled lock gauges are the default group's.
    lock_gauges: bool,
}

impl<'m> Observer<'m> {
    pub(super) fn new(metrics: &'m Metrics, group: &'m str, lock_gauges: bool) -> Self {
        Self {
            metrics,
            ended: HashSet::new(),
            group,
            lock_gauges,
        }
    }

    pub(super) fn status(&self, status: &LockStatus, session_up: bool) {
        let token = status.token.filter(|_| status.may_fire).map(|t| t.0);
        self.metrics
            .group_status(self.group, status.may_fire, token);
        if !self.lock_gauges {
            return;
        }
        let session = match (status.connected, session_up) {
            (true, _) => SessionState::Connected,
            (false, true) => SessionState::Disconnected,
            (false, false) => SessionState::None,
        };
        self.metrics.lock_status(status.may_fire, token, session);
    }

    pub(super) fn event(&self, event: &LockEvent) {
        match event {
            LockEvent::Acquired { .. } => {
                self.metrics.group_acquired(self.group);
                if self.lock_gauges {
                    self.metrics.acquired();
                }
            }
            LockEvent::Lost | LockEvent::HandedOver => {
                self.metrics.group_lost(self.group);
                if self.lock_gauges {
                    self.metrics.lost();
                }
            }
            LockEvent::OwnerChanged { .. } => {}
        }
    }

    pub(super) fn input(&mut self, input: &Input) {
        match input {
            Input::Claims(ClaimInput::RunEnded { claim, report }) => {
                self.metrics
                    .run_ended(&claim.record.job, report.duration.as_secs_f64());
                self.ended.insert(claim.record.run_id.clone());
            }
            Input::Claims(ClaimInput::RunNotStarted { claim, .. }) => {
                self.metrics.run_not_started(&claim.record.job)
            }
            // A record-only claim (skipped, missed) that went through.
            Input::Claims(ClaimInput::Done {
                result: Ok(claim), ..
            }) if matches!(claim.record.status, RunStatus::Skipped | RunStatus::Missed) => {
                self.metrics.recorded(&claim.record);
            }
            _ => {}
        }
    }

    pub(super) fn action(&mut self, action: &Action) {
        match action {
            Action::Runs(RunAction::Start { claim, .. }) => {
                let record = &claim.record;
                let started = record.started_unix_ms.unwrap_or(record.claimed_unix_ms);
                self.metrics
                    .run_started(&record.job, record.scheduled_unix_ms, started);
            }
            // A run's final record once; a claimed tick that will not start (missed, skipped).
            Action::Claims(ClaimAction::WriteRecord(claim))
                if self.ended.remove(&claim.record.run_id)
                    || matches!(claim.record.status, RunStatus::Skipped | RunStatus::Missed) =>
            {
                self.metrics.recorded(&claim.record);
            }
            _ => {}
        }
    }
}
