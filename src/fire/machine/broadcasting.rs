//! The router's side of broadcasts (`broadcast`): what the broadcast part is lent of the
//! machine, the answers that are a broadcast run's, and this node's tags.
//!
//! Owns: routing those inputs to `broadcast` and lending it the lock, the pauses and who we are.
//! Must not: keep state of its own (`broadcast` holds it).

use chrono::{DateTime, Utc};

use super::FireMachine;
use super::broadcast::{Broadcasts, Lent};
use super::protocol::{Action, BroadcastInput, Input};

impl FireMachine {
    /// This node's `[node] tags`, which decide the broadcast jobs it runs.
    #[must_use]
    pub fn with_node_tags(
        mut self,
        tags: std::collections::BTreeSet<String>,
        now: DateTime<Utc>,
    ) -> Self {
        self.broadcasts.set_tags(tags, now);
        self
    }

    /// The broadcast part, with what it is lent of the rest of the machine.
    pub(super) fn broadcasts(&mut self, now: DateTime<Utc>) -> (&mut Broadcasts, Lent<'_>) {
        let lent = Lent {
            me: &self.me,
            lock: self.lock,
            stopping: self.stopping.is_some(),
            steering: &self.steering,
            claim_ahead: self.claim_ahead,
            now,
        };
        (&mut self.broadcasts, lent)
    }

    /// The answer about a broadcast run (its process, its final record), if `input` is one;
    /// handed back otherwise.
    pub(super) fn broadcast_answer(
        &mut self,
        input: Input,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) -> Option<Input> {
        let (broadcasts, lent) = self.broadcasts(now);
        let unanswered = match input {
            Input::RunEnded { claim, report } if broadcasts.owns(&claim.record.run_id) => {
                broadcasts.run_ended(*claim, &report, out);
                None
            }
            Input::RunNotStarted { claim, why, .. } if broadcasts.owns(&claim.record.run_id) => {
                broadcasts.run_not_started(&claim, &why, now, out);
                None
            }
            Input::RecordWritten { run_id, write } if broadcasts.owns(&run_id) => {
                broadcasts.record_written(&run_id, write, &lent);
                None
            }
            input => Some(input),
        };
        if unanswered.is_none() {
            self.maybe_stopped(out);
        }
        unanswered
    }

    /// An answer to a broadcast job's request.
    pub(super) fn broadcast_input(
        &mut self,
        input: BroadcastInput,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let (broadcasts, lent) = self.broadcasts(now);
        match input {
            BroadcastInput::Claimed { id, result } => {
                broadcasts.claimed(id, result.map(|claim| *claim), &lent, out);
            }
            BroadcastInput::MembershipRead(result) => broadcasts.membership_read(result, now, out),
            BroadcastInput::MembersRead { job, tick, result } => {
                broadcasts.sweep_members_read(&job, tick, result);
            }
            BroadcastInput::Swept { job, tick, result } => {
                broadcasts.sweeps.swept(&job, tick, result, now);
            }
        }
        self.maybe_stopped(out);
    }
}
