//! The router's side of broadcasts (`broadcast`): what the broadcast part is lent of the
//! machine, its answers, the ticks due here handed to the claim path, and this node's tags.
//!
//! Owns: routing those inputs to `broadcast`, lending it the lock and the pauses, and handing
//! the claim path (`starts::members`) the ticks that run here.
//! Must not: keep state of its own (`broadcast` holds it).

use chrono::{DateTime, Utc};

use super::FireMachine;
use super::broadcast::{Broadcasts, Lent};
use super::protocol::{Action, BroadcastInput};

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
            lock: self.lock,
            stopping: self.stopping.is_some(),
            steering: &self.steering,
            claim_ahead: self.claim_ahead,
            now,
        };
        (&mut self.broadcasts, lent)
    }

    /// An answer to a broadcast job's request.
    pub(super) fn broadcast_input(
        &mut self,
        input: BroadcastInput,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        match input {
            BroadcastInput::MembershipRead(result) => {
                let alive = self.starts.runs.members_alive();
                self.broadcasts.membership_read(result, alive, now, out);
            }
            BroadcastInput::MembersRead { job, tick, result } => {
                self.broadcasts.sweep_members_read(&job, tick, result);
            }
            BroadcastInput::TickRead { job, tick, result } => {
                let (broadcasts, lent) = self.broadcasts(now);
                if let Some((config, owed)) =
                    broadcasts.sweep_tick_read(&job, tick, result, &lent, out)
                {
                    for record in owed {
                        self.claim_path(now, out, |starts, ctx| {
                            starts.claim_record_only(ctx, &config, record);
                        });
                    }
                }
            }
        }
        self.maybe_stopped(out);
    }

    /// Time passed: the broadcast ticks due here go to the claim path; the sweeps go on.
    pub(super) fn broadcast_tick(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let (broadcasts, lent) = self.broadcasts(now);
        for (config, tick) in broadcasts.tick(&lent, out) {
            self.claim_path(now, out, |starts, ctx| {
                starts.claim_broadcast(ctx, &config, tick);
            });
        }
    }
}
