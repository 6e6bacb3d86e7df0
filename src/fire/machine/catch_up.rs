//! Catch-up, the part of the fire machine that runs when a node starts being able to fire (it
//! acquired the lock, or ZooKeeper came back): resolve runs the previous owner left open
//! (`on_interrupted`), decide about ticks nobody fired (`misfire`, `starting_deadline`), and
//! record every gap as one `missed` record — the ticks after the job's newest record, and those
//! behind it that no record stands for (a node claimed a later tick before their record was
//! written, then lost the lock).
//!
//! Owns: one job's catch-up while it is decided ([`CatchUp`]), which records are interrupted,
//! which missed ticks start and in what order, which ticks behind the newest record are holes,
//! the gaps' reasons. A brand-new job (no records)
//! never backfills. It decides and hands back what to send: the router claims.
//! Must not: do I/O (the listing comes in as [`JobRecords`]), fire on-time ticks, or reach into
//! the router's state (what it needs comes in as [`Ground`]).

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::claims::Claims;
use super::protocol::{Action, CatchUpAction, FireReason, Item, JobRecords, Me};
use super::runs::{Retry, Runs};
use super::unrecorded::Unrecorded;
use crate::config::{Concurrency, JobConfig, Misfire, OnInterrupted};
use crate::delayed::submission::SubmissionId;
use crate::ids::{FencingToken, JobName, NodeId};
use crate::run::SubmissionInput;
use crate::run::{RunRecord, RunStatus};

/// How many of a job's newest records are read for runs left open.
pub const RESOLVE_WINDOW: usize = 10;
/// Ticks counted one by one in a gap; a longer outage is recorded with this as a lower bound.
const GAP_COUNT_LIMIT: u64 = 100_000;
/// Ticks looked at at most behind a job's newest record for ones no record stands for.
const HOLE_LOOK_LIMIT: usize = 10_000;

/// One job's catch-up while it is being decided.
#[derive(Debug, Default)]
pub(super) struct CatchUp {
    /// The missed ticks to start, once the listing is in.
    planned: Option<Vec<Item>>,
    /// Interrupted records being marked; their reruns start first.
    marks_out: usize,
    reruns: Vec<Item>,
    /// The payloads of submissions whose runs may be rerun.
    payloads: HashMap<SubmissionId, Arc<Vec<u8>>>,
}

/// Ticks nobody fired: from `first` to `last`, `count` of them.
#[derive(Debug, Clone, Copy)]
struct Gap {
    first: DateTime<Utc>,
    last: DateTime<Utc>,
    count: u64,
}

impl Gap {
    fn of(ticks: &[DateTime<Utc>]) -> Option<Self> {
        Some(Self {
            first: *ticks.first()?,
            last: *ticks.last()?,
            count: u64::try_from(ticks.len()).unwrap_or(u64::MAX),
        })
    }

    fn add(gap: &mut Option<Gap>, tick: DateTime<Utc>) {
        match gap {
            Some(gap) => {
                gap.last = tick;
                gap.count += 1;
            }
            None => {
                *gap = Some(Gap {
                    first: tick,
                    last: tick,
                    count: 1,
                })
            }
        }
    }
}

/// What catch-up needs to know of the node, at the time of the listing.
pub(super) struct Ground<'a> {
    pub me: &'a Me,
    pub token: FencingToken,
    pub config: &'a Arc<JobConfig>,
    /// The runs alive or retrying on this node.
    pub runs: &'a Runs,
    /// The claims out or held on this node.
    pub claims: &'a Claims,
    /// The records this node owes the ledger, or has out: it writes them itself.
    pub unrecorded: &'a Unrecorded,
    /// Since when this node has fired the job's ticks as its schedule says now: no earlier
    /// tick is looked for behind its newest record.
    pub schedule_since: DateTime<Utc>,
    /// The newest tick of the job started here or found recorded.
    pub newest_tick: Option<DateTime<Utc>>,
    /// The first tick this node handles itself (held behind catch-up, or queued).
    pub first_handled: Option<DateTime<Utc>>,
    /// The latest stretch without a connection to ZooKeeper: `(from, until)`.
    pub outage: Option<(DateTime<Utc>, Option<DateTime<Utc>>)>,
    /// The last tick of the newest run of skipped ticks recorded (`calendars`).
    pub calendar_through: Option<DateTime<Utc>>,
    pub now: DateTime<Utc>,
}

/// A record that starts nothing, for the router to send through the fenced claim.
#[derive(Debug)]
pub(super) enum RecordOnly {
    /// A new record (a gap's `missed`).
    Create(RunRecord),
    /// Written over the stored record at its version (a retry past its deadline).
    Again(RunRecord, i32),
}

/// What a job's listing decided, for the router to act on in this order: the marks, the
/// retries kept, the records written, then the catch-up's plan.
#[derive(Debug, Default)]
pub(super) struct Listed {
    /// [`CatchUpAction::MarkInterrupted`] for each run its owner left open.
    pub marks: Vec<Action>,
    pub retries: Vec<Retry>,
    pub records: Vec<RecordOnly>,
    /// The newest tick the ledger holds for the job.
    pub latest: Option<DateTime<Utc>>,
    /// The last tick of a run of skipped ticks this listing recorded.
    pub calendar_through: Option<DateTime<Utc>>,
}

impl CatchUp {
    /// Still waiting for its listing (a listing for a catch-up dropped meanwhile is not).
    pub fn awaits_listing(&self) -> bool {
        self.planned.is_none()
    }

    /// Decides about the listing of `records`: marks, retries, gaps and the ticks to start.
    /// `not_started`: runs of ours that never started, kept for this catch-up.
    pub fn listed(
        &mut self,
        ground: &Ground<'_>,
        records: JobRecords,
        not_started: Vec<Item>,
    ) -> Listed {
        let mut listed = Listed::default();
        let mut unstarted = Vec::new();
        let kept = |record: &RunRecord| {
            not_started.iter().any(|item| {
                item.again
                    .as_ref()
                    .is_some_and(|(r, _)| r.run_id == record.run_id)
            })
        };
        for (record, version) in &records.newest {
            // A run this node still has a claim out for is the claim's answer's to resolve (a
            // claim read back across a lost session, answered after this listing: the soak).
            if record.status.is_final()
                || record.fencing_token >= ground.token
                || ground.runs.alive_of_run(&record.run_id)
                || ground.claims.out_for(record)
                || kept(record)
            {
                continue;
            }
            if let (Some(id), RunStatus::Claimed) = (&record.submission_id, record.status) {
                // A submission's run is recorded `running` before its process starts, so a
                // record still `claimed` never ran: it is taken over, whatever on_interrupted
                // says. The claim's compare-and-set fences a previous owner that wakes up.
                match submission_of(record, id, &records.payloads) {
                    Some(submission) => unstarted.push(Item {
                        tick: DateTime::from_timestamp_millis(record.scheduled_unix_ms)
                            .unwrap_or(ground.now),
                        reason: FireReason::CaughtUp,
                        again: Some((record.clone(), *version)),
                        submission: Some(submission),
                        parents: Vec::new(),
                    }),
                    None => {
                        tracing::warn!(job = %record.job, id = %id, "claimed submission not taken over: its submission node is gone");
                    }
                }
                continue;
            }
            if records.guard_holder.as_deref() == Some(record.run_id.as_str())
                || may_still_run(ground, record, &records.live_members)
            {
                continue;
            }
            let mut marked = record.clone();
            marked.status = RunStatus::Interrupted;
            marked.error = Some(format!(
                "node {} lost the lock before the run ended",
                record.node_id
            ));
            self.marks_out += 1;
            listed
                .marks
                .push(Action::CatchUp(CatchUpAction::MarkInterrupted {
                    record: marked,
                    version: *version,
                    closes: ground.config.on_interrupted != OnInterrupted::Rerun,
                }));
        }
        resume_retries(ground, &records, &mut listed);
        record_holes(ground, &records, &mut listed);
        let latest = records.ticks.iter().copied().max();
        let planned = plan_missed(ground, latest, &mut listed);
        listed.latest = latest.and_then(DateTime::from_timestamp_millis);
        self.planned = Some(planned);
        self.payloads = records.payloads;
        self.reruns.extend(not_started);
        self.reruns.extend(unstarted);
        listed
    }

    /// Answer to [`CatchUpAction::MarkInterrupted`]: the record as stored, and whether its run starts
    /// again (for its notice), if it was marked.
    pub fn marked(
        &mut self,
        record: RunRecord,
        result: Result<i32, String>,
        rerun: bool,
        now: DateTime<Utc>,
    ) -> Option<(RunRecord, bool)> {
        self.marks_out = self.marks_out.saturating_sub(1);
        let version = match result {
            Ok(version) => version,
            Err(why) => {
                tracing::warn!(job = %record.job, run_id = record.run_id, error = why, "interrupted run not marked (the record changed meanwhile)");
                return None;
            }
        };
        tracing::warn!(job = %record.job, run_id = record.run_id, node = %record.node_id, "run interrupted by the loss of its owner");
        let told = record.clone();
        let submission = match &record.submission_id {
            None => Ok(None),
            Some(id) => submission_of(&record, id, &self.payloads)
                .map(Some)
                .ok_or(id),
        };
        let again = rerun && submission.is_ok();
        match (rerun, submission) {
            (true, Ok(submission)) => {
                let tick = DateTime::from_timestamp_millis(record.scheduled_unix_ms).unwrap_or(now);
                self.reruns.push(Item {
                    tick,
                    reason: FireReason::Rerun,
                    again: Some((record.clone(), version)),
                    submission,
                    parents: Vec::new(),
                });
            }
            (true, Err(id)) => {
                tracing::warn!(job = %record.job, id = %id, "interrupted submission not rerun: its submission node is gone");
            }
            (false, _) => {}
        }
        Some((told, again))
    }

    /// A rerun of submission `id` is planned: it starts through this catch-up.
    pub fn reruns_submission(&self, id: &str) -> bool {
        self.reruns.iter().any(|item| item.is_submission(id))
    }

    /// Everything is known: the listing is in and no mark is out.
    pub fn decided(&self) -> bool {
        self.marks_out == 0 && self.planned.is_some()
    }

    /// The items to start, in order: reruns first, then missed ticks oldest first.
    pub fn into_backlog(mut self, job: &JobName) -> impl Iterator<Item = Item> {
        self.reruns.sort_by_key(|item| item.tick);
        for item in &self.reruns {
            tracing::info!(job = %job, tick = %item.tick, "rerunning the interrupted run");
        }
        self.reruns
            .into_iter()
            .chain(self.planned.into_iter().flatten())
    }
}

/// The submission input of `record`'s submission `id`, if its payload was read.
fn submission_of(
    record: &RunRecord,
    id: &SubmissionId,
    payloads: &HashMap<SubmissionId, Arc<Vec<u8>>>,
) -> Option<SubmissionInput> {
    Some(SubmissionInput {
        // The record keeps its links through every attempt.
        traceparent: None,
        id: id.as_str().to_owned(),
        payload: Arc::clone(payloads.get(id)?),
        requested_by: record.requested_by.clone(),
        marker_names_job: record.marker_names_job,
    })
}

/// Retries that an earlier owner promised in a failed run's record (`retry_at_unix_ms`): kept
/// at their time as the runs' next attempts, through the same fenced claim, so each attempt
/// runs once whoever owns the lock then (issue 24). One whose time is older than the job's
/// `starting_deadline` is recorded missed instead.
fn resume_retries(ground: &Ground<'_>, records: &JobRecords, listed: &mut Listed) {
    let now = ground.now;
    let deadline = chrono::Duration::from_std(ground.config.starting_deadline).unwrap_or_default();
    for (record, version) in &records.newest {
        let Some(at) = record
            .retry_at_unix_ms
            .and_then(DateTime::from_timestamp_millis)
        else {
            continue;
        };
        if !matches!(record.status, RunStatus::Failed | RunStatus::TimedOut)
            || ground.runs.retry_waits(&record.run_id)
            || ground.runs.alive_of_run(&record.run_id)
        {
            continue;
        }
        let submission = match &record.submission_id {
            None => None,
            Some(id) => match submission_of(record, id, &records.payloads) {
                Some(submission) => Some(submission),
                None => {
                    tracing::warn!(job = %record.job, id = %id, "retry not resumed: its submission node is gone");
                    continue;
                }
            },
        };
        // A submission's retry is a promise to its submitter: kept however late. A tick's
        // is held to the job's starting_deadline, like the tick itself.
        if record.submission_id.is_none() && at + deadline < now {
            tracing::warn!(job = %record.job, run_id = record.run_id, attempt = record.attempt + 1, due = %at, "retry missed: older than the job's starting_deadline");
            let me = (&ground.me.node_id, ground.me.ip.as_str());
            let mut missed = record.next_attempt(me, ground.token, now.timestamp_millis());
            missed.status = RunStatus::Missed;
            missed.error = Some(format!(
                "attempt {} (a retry due at {at}) was past its starting_deadline when a node could start it",
                missed.attempt
            ));
            missed.missed_from_unix_ms = Some(missed.scheduled_unix_ms);
            missed.missed_ticks = Some(1);
            listed.records.push(RecordOnly::Again(missed, *version));
            continue;
        }
        listed.retries.push(Retry {
            at,
            record: record.clone(),
            version: *version,
            submission,
            resumed: true,
        });
    }
}

/// An open record of an unguarded job whose node is still a live member may be finishing
/// (`on_lost = finish`); for a guarded job the guard is the proof, and our own earlier
/// process is gone.
fn may_still_run(ground: &Ground<'_>, record: &RunRecord, live: &[NodeId]) -> bool {
    ground.config.concurrency != Concurrency::Forbid
        && record.node_id != ground.me.node_id
        && live.contains(&record.node_id)
}

/// Ticks behind the job's newest record that no record stands for, recorded `missed`, one
/// record per run of them. Such a tick is one whose `missed` record a node could not write (a
/// refused or unanswered claim) before it claimed a later tick and lost the lock (issue 53's
/// soak); no claim ever reaches it again, for an older tick never starts after a newer one,
/// and the gaps of [`plan_missed`] begin after the newest record.
///
/// Looked for only where the listing shows every record (the newest [`RESOLVE_WINDOW`] ticks',
/// so that a gap's or a calendar's record is known to stand for the ticks it covers), and only
/// since this node has fired the schedule as it is now: a tick of an older schedule is not
/// this one's to account for. A tick this node still has a claim out for, or owes a record of
/// itself, is left to that claim or record.
fn record_holes(ground: &Ground<'_>, records: &JobRecords, listed: &mut Listed) {
    let config = ground.config;
    let name = &config.spec.name;
    let mut window = records.ticks.clone();
    window.sort_unstable();
    window.dedup();
    let window = &window[window.len().saturating_sub(RESOLVE_WINDOW)..];
    let (Some(&oldest), Some(&newest)) = (window.first(), window.last()) else {
        return;
    };
    let mut floor = oldest.max(ground.schedule_since.timestamp_millis());
    let mut covered = Vec::with_capacity(window.len());
    for &tick in window {
        let record = records
            .newest
            .iter()
            .map(|(record, _)| record)
            .find(|record| record.submission_id.is_none() && record.scheduled_unix_ms == tick);
        match record {
            Some(record) => covered.push(covers(record)),
            // Not read (a newer zkcron's): what it stands for is unknown; look above it only.
            None => floor = floor.max(tick),
        }
    }
    let Some(mut cursor) = DateTime::from_timestamp_millis(floor).filter(|_| floor < newest) else {
        return;
    };
    let (mut holes, mut gap) = (Vec::new(), None);
    let mut looked = 0;
    while let Some(next) = config
        .next_tick_after(cursor)
        .filter(|next| next.timestamp_millis() < newest)
    {
        looked += 1;
        if looked > HOLE_LOOK_LIMIT {
            tracing::warn!(job = %name, from = %next, looked = HOLE_LOOK_LIMIT, "catch-up: ticks behind the newest record not all looked at");
            break;
        }
        let ms = next.timestamp_millis();
        cursor = next;
        let stands_for = covered
            .iter()
            .find(|(from, through)| (*from..=*through).contains(&ms));
        if let Some(&(_, through)) = stands_for {
            cursor = DateTime::from_timestamp_millis(through).map_or(next, |t| t.max(next));
        } else if config.calendars.skips(next).is_none()
            && !ground.claims.out_for_tick(name, ms)
            && !ground.unrecorded.covers(name, ms)
        {
            Gap::add(&mut gap, next);
            continue;
        }
        holes.extend(gap.take());
    }
    holes.extend(gap);
    for hole in holes {
        let why = "no node recorded these ticks and a later one ran: its owner lost the lock \
                   before recording them";
        listed
            .records
            .push(RecordOnly::Create(gap_record(ground, hole, why)));
    }
}

/// The first and last tick `record` stands for: a gap's, a calendar's run of skipped ticks, or
/// its own.
fn covers(record: &RunRecord) -> (i64, i64) {
    let tick = record.scheduled_unix_ms;
    (
        record
            .missed_from_unix_ms
            .map_or(tick, |from| from.min(tick)),
        record
            .skipped_through_unix_ms
            .map_or(tick, |to| to.max(tick)),
    )
}

/// The ticks after the job's latest record that nobody fired, and before the first tick this
/// node handles itself: which start (per `misfire`, within `starting_deadline`), and one
/// `missed` record per gap for the others.
fn plan_missed(ground: &Ground<'_>, latest_ms: Option<i64>, listed: &mut Listed) -> Vec<Item> {
    let (config, now) = (ground.config, ground.now);
    let name = &config.spec.name;
    // A brand-new job has no record: nothing was missed, nothing backfills.
    let Some(latest) = latest_ms.and_then(DateTime::from_timestamp_millis) else {
        return Vec::new();
    };
    // A missed tick older than one already started here is covered by it.
    let after = ground
        .newest_tick
        .map_or(latest, |started| started.max(latest));
    let horizon = chrono::Duration::from_std(config.starting_deadline)
        .ok()
        .and_then(|deadline| now.checked_sub_signed(deadline))
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let mut beyond: Option<Gap> = None;
    let mut within = Vec::new();
    let mut cursor = after;
    while let Some(next) = config
        .next_tick_after(cursor)
        .filter(|next| *next <= now && ground.first_handled.is_none_or(|first| *next < first))
    {
        cursor = next;
        // A tick its calendars skip was never due: neither run nor missed, but recorded once
        // for its run of skipped ticks, as its owner would have when it came.
        if let Some(skip) = config.calendars.skips(next) {
            let through = listed.calendar_through.max(ground.calendar_through);
            if through.is_none_or(|through| next > through) {
                let (record, last) = ground
                    .me
                    .skipped_run(config, next, &skip, ground.token, now);
                listed.records.push(RecordOnly::Create(record));
                listed.calendar_through = Some(last);
            }
            continue;
        }
        if next >= horizon {
            within.push(next);
            continue;
        }
        Gap::add(&mut beyond, next);
        if beyond.is_some_and(|gap| gap.count >= GAP_COUNT_LIMIT) {
            // A very long outage: count no further; the record says "at least".
            cursor = cursor.max(horizon - chrono::Duration::milliseconds(1));
        }
    }
    if let Some(gap) = beyond {
        let cause = gap_cause(ground, gap);
        let deadline = humantime::format_duration(config.starting_deadline);
        let at_least = if gap.count >= GAP_COUNT_LIMIT {
            "at least "
        } else {
            ""
        };
        let why = format!("{cause}; {at_least}older than starting_deadline ({deadline})");
        listed
            .records
            .push(RecordOnly::Create(gap_record(ground, gap, &why)));
    }
    let Some(gap) = Gap::of(&within) else {
        return Vec::new();
    };
    let cause = gap_cause(ground, gap);
    let start = match config.misfire {
        Misfire::Skip => {
            tracing::info!(job = %name, missed = within.len(), "missed ticks skipped (misfire = skip)");
            let why = format!("{cause}; not caught up (misfire = skip)");
            listed
                .records
                .push(RecordOnly::Create(gap_record(ground, gap, &why)));
            return Vec::new();
        }
        Misfire::RunOnce => {
            let last = within.split_off(within.len() - 1);
            if let Some(gap) = Gap::of(&within) {
                let why = format!("{cause}; only the latest missed tick ran (misfire = run_once)");
                listed
                    .records
                    .push(RecordOnly::Create(gap_record(ground, gap, &why)));
            }
            last
        }
        Misfire::RunAll => within,
    };
    tracing::info!(job = %name, ticks = start.len(), policy = ?config.misfire, "catching up missed ticks");
    start
        .into_iter()
        .map(|tick| Item {
            submission: None,
            tick,
            reason: FireReason::CaughtUp,
            again: None,
            parents: Vec::new(),
        })
        .collect()
}

/// Why nobody fired a gap: this node was cut off from ZooKeeper during it, or no node owned
/// the lock (the owner died and the takeover delay ran).
fn gap_cause(ground: &Ground<'_>, gap: Gap) -> &'static str {
    match ground.outage {
        Some((from, until)) if from <= gap.last && until.is_none_or(|u| u >= gap.first) => {
            "zookeeper was unreachable"
        }
        _ => "no node owned the lock",
    }
}

/// A tick popped long after its time while this node owned the lock: it was stopped or
/// starved. The gap runs to the last tick before now (the queue skips past them).
pub(super) fn stalled_gap(
    me: &Me,
    token: FencingToken,
    config: &JobConfig,
    tick: DateTime<Utc>,
    now: DateTime<Utc>,
) -> RunRecord {
    let mut gap = Gap {
        first: tick,
        last: tick,
        count: 1,
    };
    while let Some(next) = config.next_tick_after(gap.last).filter(|t| *t <= now) {
        if gap.count >= GAP_COUNT_LIMIT {
            break;
        }
        gap.last = next;
        gap.count += 1;
    }
    let why = "this node was stalled past the ticks (a frozen process or an overloaded host)";
    missed_record(me, token, config, gap, why, now)
}

/// Ticks held behind catch-up that it delayed past the late-tick rule.
pub(super) fn late_held(
    me: &Me,
    token: FencingToken,
    config: &JobConfig,
    ticks: &[DateTime<Utc>],
    now: DateTime<Utc>,
) -> Option<RunRecord> {
    let why = "catch-up before them ran past their time";
    Some(missed_record(me, token, config, Gap::of(ticks)?, why, now))
}

fn gap_record(ground: &Ground<'_>, gap: Gap, why: &str) -> RunRecord {
    missed_record(ground.me, ground.token, ground.config, gap, why, ground.now)
}

/// One `missed` record for the gap, named by its last tick (so the job's progress is right for
/// the next catch-up), for the fenced claim.
fn missed_record(
    me: &Me,
    token: FencingToken,
    config: &JobConfig,
    gap: Gap,
    why: &str,
    now: DateTime<Utc>,
) -> RunRecord {
    tracing::info!(job = %config.spec.name, from = %gap.first, to = %gap.last, ticks = gap.count, reason = why, "missed ticks recorded");
    let mut record = RunRecord::claimed(
        &config.spec.name,
        gap.last.timestamp_millis(),
        (&me.node_id, me.ip.as_str()),
        token,
        now.timestamp_millis(),
    );
    record.status = RunStatus::Missed;
    record.error = Some(why.to_owned());
    record.missed_from_unix_ms = Some(gap.first.timestamp_millis());
    record.missed_ticks = Some(gap.count);
    record
}

#[cfg(test)]
mod tests;
