//! The claim path's part in a member's own runs of broadcast ticks (issue 50): a broadcast tick
//! due on this node is claimed, started, ended and recorded by the claim path like every run;
//! what differs is what it is fenced by (this node's member znode, not the epoch) and so what
//! does not touch it — the lock's loss, a yield, the owner's newest tick, guards, leases.
//!
//! Owns: the claim of such a run (or its `skipped` record), and its answers: a stop or a member
//! znode gone before the start, a process that never started.
//! Must not: decide whether a tick is this node's (the broadcast part hands it over, after its
//! membership and tags), or sweep the members that did not claim (`sweeps`).

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::{ClaimId, Ctx, Pending, Starts};
use crate::config::{Concurrency, JobConfig};
use crate::fire::machine::protocol::{Action, ClaimAction, ClaimRefused};
use crate::ids::FencingToken;
use crate::run::{Claim, ClaimMode, RunRecord, RunStatus};

impl Starts {
    /// Claims this node's run of `config`'s broadcast tick `tick`, to start at its instant
    /// (jitter included). A `forbid` job whose run is still alive here records the tick
    /// `skipped` in the claim itself: no second write.
    pub fn claim_broadcast(
        &mut self,
        ctx: &mut Ctx<'_>,
        config: &Arc<JobConfig>,
        tick: DateTime<Utc>,
    ) {
        let name = &config.spec.name;
        let me = (&ctx.me.node_id, ctx.me.ip.as_str());
        // Not a fence: the member znode is. The token says who owned the lock meanwhile.
        let token = ctx.lock.token.unwrap_or(FencingToken(0));
        let now_ms = ctx.now.timestamp_millis();
        let mut record = ctx.me.traced(RunRecord::claimed_broadcast(
            name,
            tick.timestamp_millis(),
            me,
            token,
            now_ms,
        ));
        if config.concurrency == Concurrency::Forbid && self.runs.unended_of_job(name) {
            record.status = RunStatus::Skipped;
            record.finished_unix_ms = Some(now_ms);
            record.error = Some("an earlier run of the job is still running on this node".into());
        }
        let start_at = config.start_of(tick).max(ctx.now);
        let pending = Pending::of_broadcast(Arc::clone(config), &record, start_at);
        self.claims
            .send(pending, record, ClaimMode::Create, ctx.out);
    }

    /// Answer to a member's claim: the claim to start at its instant like any, or `None` when
    /// it starts nothing — refused (its record exists, or the member znode is gone) or the node
    /// is stopping (recorded `skipped`: the tick is this node's, and no one else runs it).
    pub(super) fn members_claimed(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: ClaimId,
        result: Result<Claim, ClaimRefused>,
    ) -> Option<Claim> {
        let pending = self.claims.get(&id)?;
        let claim = match result {
            Ok(claim) if ctx.stopping => {
                self.stopped_before_its_start(ctx, id, &claim);
                return None;
            }
            Ok(claim) => claim,
            Err(refused) => {
                let (job, tick) = (&pending.config.spec.name, pending.tick);
                tracing::info!(job = %job, %tick, ?refused, "broadcast tick not run here: its record for this node exists (run before a restart, or recorded missed) or this node is no member");
                self.settle(ctx, id);
                return None;
            }
        };
        Some(claim)
    }

    /// The stop: this node's claimed runs that have not started are recorded `skipped` now,
    /// not at their instant (the stop would not wait for it).
    pub fn stop_members(&mut self, ctx: &mut Ctx<'_>) {
        for (id, claim) in self.claims.members_claimed() {
            self.stopped_before_its_start(ctx, id, &claim);
        }
    }

    /// A member's claimed run the stop came before: recorded `skipped`, since its record says
    /// it runs and no other node will.
    pub(super) fn stopped_before_its_start(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: ClaimId,
        claim: &Claim,
    ) {
        let mut skipped = claim.clone();
        skipped.record.status = RunStatus::Skipped;
        skipped.record.finished_unix_ms = Some(ctx.now.timestamp_millis());
        skipped.record.error = Some("this node stopped before its start".into());
        self.members_unstarted(ctx, id, skipped);
    }

    /// A member's claimed run that does not start ends in `finished`, its record, which a stop
    /// waits for like a run's: no owner resolves a member's record.
    pub(super) fn members_unstarted(&mut self, ctx: &mut Ctx<'_>, id: ClaimId, finished: Claim) {
        if let Some(pending) = self.claims.get(&id) {
            let config = Arc::clone(&pending.config);
            self.runs.started(&finished, &config, false, None, ctx.now);
            self.runs.ended(&finished);
        }
        ctx.out
            .push(Action::Claims(ClaimAction::WriteRecord(finished)));
        self.settle(ctx, id);
    }

    /// A member's run whose process never started: recorded `failed`, since its record says it
    /// runs and no one else will run this node's tick (an owner's run is claimed again instead).
    pub(super) fn members_run_not_started(&mut self, ctx: &mut Ctx<'_>, claim: &Claim, why: &str) {
        let mut finished = claim.clone();
        finished.record.status = RunStatus::Failed;
        finished.record.finished_unix_ms = Some(ctx.now.timestamp_millis());
        finished.record.error = Some(format!("not started: {why}"));
        self.runs.ended(&finished);
        ctx.out
            .push(Action::Claims(ClaimAction::WriteRecord(finished)));
    }
}
