//! What the fire machine's router lends its parts for one input ([`Ctx`]), and what they hand
//! back for it to do next ([`Follow`]): the claim path and the backlog reach the rest of the
//! machine only through these.
//!
//! Owns: the lending contract.
//! Must not: decide anything.

use chrono::{DateTime, Utc};

use super::chains::Chains;
use super::housekeeping::Housekeeping;
use super::jobs::Jobs;
use super::notices::Streaks;
use super::protocol::{Action, ClaimRefused, Me};
use super::steering::Steering;
use crate::ids::JobName;
use crate::lock::LockStatus;

/// What the claim path is lent of the machine for one input.
pub(super) struct Ctx<'a> {
    pub me: &'a Me,
    /// The lock as the machine acts on it.
    pub lock: LockStatus,
    pub jobs: &'a mut Jobs,
    pub steering: &'a Steering,
    /// Who follows whom: the marks a final record leaves.
    pub chains: &'a Chains,
    /// The node is stopping: nothing new starts.
    pub stopping: bool,
    pub streaks: &'a mut Streaks,
    pub housekeeping: &'a mut Housekeeping,
    pub now: DateTime<Utc>,
    pub out: &'a mut Vec<Action>,
    /// What the router does next, in order.
    pub follows: Vec<Follow>,
}

impl Ctx<'_> {
    pub fn follow(&mut self, follow: Follow) {
        self.follows.push(follow);
    }
}

/// What the router does after the claim path, in order.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Follow {
    /// The job's backlog item ended or will not start: the next one may go.
    Advance(JobName),
    /// The job's last backlog item started: the ticks held behind it may go.
    ReleaseHeld(JobName),
    /// A claim was answered or given back: a stop or a handover may go on.
    HandOver,
    /// A run ended: a stop may be done.
    Stopped,
    /// A `missed` record of the owner's sweep of a broadcast tick was answered.
    SweepRecorded {
        job: JobName,
        tick: DateTime<Utc>,
        result: Result<(), ClaimRefused>,
    },
}
