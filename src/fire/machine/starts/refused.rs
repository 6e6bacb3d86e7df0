//! The claim path's answer to a claim that was not applied: its request failed, or the stored
//! record it came to write over was gone. A scheduled tick is then claimed once more while it is
//! on time, or recorded `missed` with why; never dropped unrecorded (issue 53).
//!
//! Owns: which refused claims are claimed again and which are recorded instead.
//! Must not: write anything itself (the driver does, on an [`Action`](super::Action)).

use std::sync::Arc;

use super::{ClaimId, Ctx, Starts};
use crate::fire::machine::protocol::is_late;
use crate::run::{ClaimMode, RunRecord, RunStatus};

impl Starts {
    /// A claim that was not applied: its request failed, or it went unanswered and was read
    /// back absent. A scheduled tick is then nobody's yet, and dropping it left it neither run
    /// nor recorded (issue 53: a connection lost under packet loss, the session kept). While
    /// this node may fire it and it is on time, it is claimed once more; else it is recorded
    /// `missed`, with why. A submission stays pending in the ledger, and a retry or rerun keeps
    /// its stored record: those are let go as before, for their own paths to find again.
    pub(super) fn claim_failed(&mut self, ctx: &mut Ctx<'_>, id: ClaimId, again: bool, why: &str) {
        let Some(pending) = self.claims.get(&id) else {
            return;
        };
        let (job, tick) = (&pending.config.spec.name, pending.tick);
        let scheduled = pending.submission.is_none()
            && pending.stored.is_none()
            && !pending.is_members()
            && pending.reason.in_tick_order();
        if !scheduled {
            tracing::warn!(job = %job, %tick, error = why, "not firing: not claimed");
            return self.settle(ctx, id);
        }
        let ours = ctx.lock.may_fire && ctx.lock.token == Some(pending.token);
        if ours && !again && !is_late(&pending.config, tick, ctx.now) {
            tracing::warn!(job = %job, %tick, error = why, "tick not claimed: claiming it once more");
            return self.claim_again(ctx, id);
        }
        tracing::warn!(job = %job, %tick, error = why, "not firing: tick not claimed; recording it missed");
        let (mut record, mode) = pending.record_once_more(ctx.me, pending.token, ctx.now);
        record.status = RunStatus::Missed;
        record.error = Some(format!("its claim failed: {why}"));
        let config = Arc::clone(&pending.config);
        self.settle(ctx, id);
        self.send_record_only(ctx, &config, record, mode);
    }

    /// A scheduled tick's stored record was gone when a claim came to write over it (its next
    /// attempt, its rerun, a record of what became of it): nothing stands for the tick now,
    /// and no claim reaches a tick behind its job's newest again, so it is recorded `missed`
    /// afresh (issue 53's soak: records of claims read back as applied after an outage were
    /// absent a moment later, and their reruns were dropped).
    pub(super) fn record_vanished(&mut self, ctx: &mut Ctx<'_>, id: ClaimId) {
        let Some(pending) = self.claims.get(&id) else {
            return;
        };
        let (config, tick, token) = (Arc::clone(&pending.config), pending.tick, pending.token);
        let name = &config.spec.name;
        tracing::warn!(job = %name, %tick, "the tick's record vanished before it was written over: recording the tick missed");
        let me = (&ctx.me.node_id, ctx.me.ip.as_str());
        let tick_ms = tick.timestamp_millis();
        let mut record = RunRecord::claimed(name, tick_ms, me, token, ctx.now.timestamp_millis());
        record.status = RunStatus::Missed;
        record.error = Some("its record vanished before the run could be claimed again".into());
        record.missed_from_unix_ms = Some(tick_ms);
        record.missed_ticks = Some(1);
        self.settle(ctx, id);
        self.send_record_only(ctx, &config, record, ClaimMode::Create);
    }
}
