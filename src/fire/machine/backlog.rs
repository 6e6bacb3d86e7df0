//! A job's backlog: catch-up's answers turned into the job's ordered starts, one item after
//! another, then the ticks held behind them (DESIGN.md "Data flow": on_locked first, per job).
//!
//! Owns: the order — a listing decided (`records_listed`, `marked`), the next item once the one
//! before it has ended (`advance`), the held ticks once the last has started (`release_held`), and the calendar-skipped ticks held
//! until the listing said which run of skipped ticks already stands for them (`held_skips_listed`).
//! Must not: hold state of its own (each job's is in `jobs`), or claim but through the claim
//! path (`starts`), with what the router lends it in a [`Ctx`].

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::catch_up::{self, Ground, RecordOnly};
use super::ctx::Ctx;
use super::housekeeping::RELIST_AFTER;
use super::protocol::JobRecords;
use super::starts::Starts;
use crate::calendar::Skip;
use crate::config::{JobConfig, OnInterrupted};
use crate::ids::{FencingToken, JobName};
use crate::run::RunRecord;

/// What the router knows of a job beyond its part: when its next tick is queued, and the latest
/// stretch without ZooKeeper.
pub(super) struct Around {
    pub next_queued: Option<DateTime<Utc>>,
    pub outage: Option<(DateTime<Utc>, Option<DateTime<Utc>>)>,
}

/// Answer to [`CatchUpAction::ListRecords`](super::protocol::CatchUpAction::ListRecords): catch-up decides,
/// the claim path sends what it decided.
pub(super) fn records_listed(
    starts: &mut Starts,
    ctx: &mut Ctx<'_>,
    job: &JobName,
    result: Result<JobRecords, String>,
    around: Around,
) {
    let Some(token) = ctx.lock.token.filter(|_| ctx.lock.may_fire) else {
        return;
    };
    let Some(state) = ctx.jobs.get_mut(job) else {
        return;
    };
    let Some(catch_up) = state.catch_up.as_mut().filter(|c| c.awaits_listing()) else {
        return; // a listing for a catch-up that was dropped meanwhile
    };
    let records = match result {
        Ok(records) => records,
        Err(why) => {
            tracing::warn!(job = %job, error = why, retry_in = ?RELIST_AFTER, "catch-up: cannot list runs");
            // The skipped ticks held stay held until the relist answers: recorded now, with
            // nothing known of the owner before us, a run it recorded would be recorded twice;
            // kept, each is recorded once the listing says, or by the next owner's catch-up if
            // the lock goes first.
            state.catch_up = None;
            ctx.housekeeping.relist_later(job, ctx.now);
            return advance(starts, ctx, job);
        }
    };
    ctx.streaks.learned(job, &records.newest);
    // A run of ticks a calendar skips, recorded ahead by the owner before us.
    let calendar_through = records
        .newest
        .iter()
        .filter_map(|(record, _)| record.skipped_through_unix_ms)
        .max()
        .and_then(DateTime::from_timestamp_millis);
    state.calendar_through = state.calendar_through.max(calendar_through);
    let ground = Ground {
        me: ctx.me,
        token,
        config: &state.config,
        runs: &starts.runs,
        claims: &starts.claims,
        unrecorded: &starts.unrecorded,
        schedule_since: state.schedule_since,
        newest_tick: state.newest_tick,
        first_handled: state
            .held
            .iter()
            .map(|item| item.tick)
            .chain(around.next_queued)
            .min(),
        outage: around.outage,
        calendar_through: state.calendar_through,
        now: ctx.now,
    };
    let not_started = std::mem::take(&mut state.not_started);
    let listed = catch_up.listed(&ground, records, not_started);
    let (config, decided) = (Arc::clone(&state.config), catch_up.decided());
    ctx.out.extend(listed.marks);
    for retry in listed.retries {
        starts.runs.schedule_retry(retry);
    }
    for record in listed.records {
        match record {
            RecordOnly::Create(record) => starts.claim_record_only(ctx, &config, record),
            RecordOnly::Again(record, version) => {
                starts.claim_record_again(ctx, &config, record, version)
            }
        }
    }
    if let Some(state) = ctx.jobs.get_mut(job) {
        if let Some(latest) = listed.latest {
            state.raise_newest_tick(latest);
        }
        state.calendar_through = state.calendar_through.max(listed.calendar_through);
    }
    // Only now is it known which of the skipped ticks that came meanwhile a record stands for.
    held_skips_listed(starts, ctx, job, token);
    if decided {
        catch_up_decided(starts, ctx, job);
    }
}

/// Answer to [`CatchUpAction::MarkInterrupted`](super::protocol::CatchUpAction::MarkInterrupted).
pub(super) fn marked(
    starts: &mut Starts,
    ctx: &mut Ctx<'_>,
    record: RunRecord,
    result: Result<i32, String>,
) {
    let job = record.job.clone();
    let Some(state) = ctx.jobs.get_mut(&job) else {
        return;
    };
    let rerun = state.config.on_interrupted == OnInterrupted::Rerun;
    let Some(catch_up) = state.catch_up.as_mut() else {
        return;
    };
    let told = catch_up.marked(record, result, rerun, ctx.now);
    let decided = catch_up.decided();
    if let Some((record, again)) = told {
        starts.tell(ctx, &record, again);
    }
    if decided {
        catch_up_decided(starts, ctx, &job);
    }
}

/// Everything is known: reruns first, then missed ticks oldest first, then the ticks held
/// behind them.
fn catch_up_decided(starts: &mut Starts, ctx: &mut Ctx<'_>, job: &JobName) {
    let Some(state) = ctx.jobs.get_mut(job) else {
        return;
    };
    let Some(catch_up) = state.catch_up.take() else {
        return;
    };
    state.backlog.extend(catch_up.into_backlog(job));
    advance(starts, ctx, job);
}

/// Starts the next item of a job's catch-up sequence once the one before it has ended; when the
/// sequence is done, fires the ticks held behind it.
pub(super) fn advance(starts: &mut Starts, ctx: &mut Ctx<'_>, job: &JobName) {
    let Some(state) = ctx.jobs.get_mut(job) else {
        return;
    };
    if state.catch_up.is_some() || state.backlog_busy || ctx.stopping {
        return;
    }
    while let Some(item) = ctx.jobs.get_mut(job).and_then(|s| s.backlog.pop_front()) {
        if let Some(pause) = ctx
            .steering
            .pause_of(job)
            .filter(|_| item.submission.is_none())
        {
            // A loop, not a recursion through the claim path: a backlog can be long.
            starts.skip_paused(ctx, job, item, &pause);
            continue;
        }
        if let Some(state) = ctx.jobs.get_mut(job) {
            state.backlog_busy = true;
            state.backlog_claiming = true;
        }
        return starts.claim_item(ctx, job, item, true);
    }
    release_held(starts, ctx, job);
}

/// The ticks held behind catch-up go once its last item has started: a job's ticks start in
/// order, and catch-up's last run overlaps them only as its `concurrency` allows.
pub(super) fn release_held(starts: &mut Starts, ctx: &mut Ctx<'_>, job: &JobName) {
    let now = ctx.now;
    let Some(state) = ctx.jobs.get_mut(job) else {
        return;
    };
    let (Some(released), config) = (state.release_held(now), Arc::clone(&state.config)) else {
        return;
    };
    if let (Some(first), Some(newest)) = (released.accounted, state.newest_tick) {
        starts.behind_the_ledger(job, first, newest, now);
    }
    if !released.late.is_empty() {
        let ticks = &released.late;
        tracing::warn!(job = %job, ticks = ticks.len(), "tick missed: catch-up ran past its time");
        if let Some(record) = ctx
            .lock
            .token
            .and_then(|token| catch_up::late_held(ctx.me, token, &config, ticks, now))
        {
            starts.claim_record_only(ctx, &config, record);
        }
    }
    for item in released.in_time {
        starts.claim_item(ctx, job, item, false);
    }
}

/// `job`'s listing is in, and `calendar_through` has taken both the run the owner before us
/// recorded and the one catch-up recorded: the skipped ticks held meanwhile, in order, each
/// accounted for by one of those or the first of a run recorded now.
fn held_skips_listed(starts: &mut Starts, ctx: &mut Ctx<'_>, job: &JobName, token: FencingToken) {
    let Some(state) = ctx.jobs.get_mut(job) else {
        return;
    };
    let (held, config) = (
        std::mem::take(&mut state.held_skips),
        Arc::clone(&state.config),
    );
    for (tick, skip) in held {
        let through = ctx.jobs.get(job).and_then(|state| state.calendar_through);
        if through.is_some_and(|through| tick <= through) {
            tracing::debug!(job = %job, %tick, reason = skip.reason(), "tick skipped by calendar, recorded with its run");
            continue;
        }
        record_skipped_run(starts, ctx, &config, tick, &skip, token);
    }
}

/// Records the run of skipped ticks that starts at `tick`, through the claim path; its later
/// ticks are accounted for by it.
pub(super) fn record_skipped_run(
    starts: &mut Starts,
    ctx: &mut Ctx<'_>,
    job: &Arc<JobConfig>,
    tick: DateTime<Utc>,
    skip: &Skip,
    token: FencingToken,
) {
    let (record, last) = ctx.me.skipped_run(job, tick, skip, token, ctx.now);
    if let Some(state) = ctx.jobs.get_mut(&job.spec.name) {
        state.calendar_through = Some(last);
    }
    starts.claim_record_only(ctx, job, record);
}
