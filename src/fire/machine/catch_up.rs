//! Catch-up, the part of the fire machine that runs when a node starts being able to fire (it
//! acquired the lock, or ZooKeeper came back): resolve runs the previous owner left open
//! (`on_interrupted`), decide about ticks nobody fired (`misfire`, `starting_deadline`), and
//! record every gap as one `missed` record.
//!
//! Owns: one job's catch-up while it is decided ([`CatchUp`]), which records are interrupted,
//! which missed ticks start and in what order, the gaps' reasons. A brand-new job (no records)
//! never backfills. It decides and hands back what to send: the router claims.
//! Must not: do I/O (the listing comes in as [`JobRecords`]), fire on-time ticks, or reach into
//! the router's state (what it needs comes in as [`Ground`]).

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::protocol::{Action, FireReason, Item, JobRecords, Me};
use super::runs::{Retry, Runs};
use crate::config::{Concurrency, JobConfig, Misfire, OnInterrupted};
use crate::delayed::submission::SubmissionId;
use crate::ids::{FencingToken, JobName, NodeId};
use crate::run::SubmissionInput;
use crate::run::{RunRecord, RunStatus};

/// How many of a job's newest records are read for runs left open.
pub const RESOLVE_WINDOW: usize = 10;
/// Ticks counted one by one in a gap; a longer outage is recorded with this as a lower bound.
const GAP_COUNT_LIMIT: u64 = 100_000;

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
    /// The newest tick of the job started here or found recorded.
    pub newest_tick: Option<DateTime<Utc>>,
    /// The first tick this node handles itself (held behind catch-up, or queued).
    pub first_handled: Option<DateTime<Utc>>,
    /// The latest stretch without a connection to ZooKeeper: `(from, until)`.
    pub outage: Option<(DateTime<Utc>, Option<DateTime<Utc>>)>,
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
    /// [`Action::MarkInterrupted`] for each run its owner left open.
    pub marks: Vec<Action>,
    pub retries: Vec<Retry>,
    pub records: Vec<RecordOnly>,
    /// The newest tick the ledger holds for the job.
    pub latest: Option<DateTime<Utc>>,
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
            if record.status.is_final()
                || record.fencing_token >= ground.token
                || ground.runs.alive_of_run(&record.run_id)
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
            listed.marks.push(Action::MarkInterrupted {
                record: marked,
                version: *version,
                closes: ground.config.on_interrupted != OnInterrupted::Rerun,
            });
        }
        resume_retries(ground, &records, &mut listed);
        let latest = records.ticks.iter().copied().max();
        let planned = plan_missed(ground, latest, &mut listed.records);
        listed.latest = latest.and_then(DateTime::from_timestamp_millis);
        self.planned = Some(planned);
        self.payloads = records.payloads;
        self.reruns.extend(not_started);
        self.reruns.extend(unstarted);
        listed
    }

    /// Answer to [`Action::MarkInterrupted`]: the record as stored, and whether its run starts
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
                });
            }
            (true, Err(id)) => {
                tracing::warn!(job = %record.job, id = %id, "interrupted submission not rerun: its submission node is gone");
            }
            (false, _) => {}
        }
        Some((told, again))
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

/// The ticks after the job's latest record that nobody fired, and before the first tick this
/// node handles itself: which start (per `misfire`, within `starting_deadline`), and one
/// `missed` record per gap for the others.
fn plan_missed(
    ground: &Ground<'_>,
    latest_ms: Option<i64>,
    gaps: &mut Vec<RecordOnly>,
) -> Vec<Item> {
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
        gaps.push(RecordOnly::Create(gap_record(ground, gap, &why)));
    }
    let Some(gap) = Gap::of(&within) else {
        return Vec::new();
    };
    let cause = gap_cause(ground, gap);
    let start = match config.misfire {
        Misfire::Skip => {
            tracing::info!(job = %name, missed = within.len(), "missed ticks skipped (misfire = skip)");
            let why = format!("{cause}; not caught up (misfire = skip)");
            gaps.push(RecordOnly::Create(gap_record(ground, gap, &why)));
            return Vec::new();
        }
        Misfire::RunOnce => {
            let last = within.split_off(within.len() - 1);
            if let Some(gap) = Gap::of(&within) {
                let why = format!("{cause}; only the latest missed tick ran (misfire = run_once)");
                gaps.push(RecordOnly::Create(gap_record(ground, gap, &why)));
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
mod tests {
    use std::path::Path;

    use super::*;

    const TOKEN: FencingToken = FencingToken(7);

    /// 2030-01-01T00:00:00Z plus `s` seconds.
    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_893_456_000 + s, 0).expect("in range")
    }

    /// Job `report`, every minute, with `extra` keys.
    fn report(extra: &str) -> Arc<JobConfig> {
        let text = format!(
            "[zookeeper]\nconnect = \"zk:2181\"\n[lock]\nname = \"g\"\n\
             [[job]]\nname = \"report\"\nschedule = \"0 * * * * *\"\nshell = \"true\"\n{extra}\n"
        );
        let config = crate::config::parse(Path::new("t.toml"), &text, &|_| None).expect("valid");
        Arc::clone(&config.jobs[0])
    }

    fn me() -> Me {
        Me {
            node_id: NodeId::new("n1"),
            ip: "10.0.0.1".into(),
        }
    }

    fn ground<'a>(
        me: &'a Me,
        config: &'a Arc<JobConfig>,
        runs: &'a Runs,
        now: DateTime<Utc>,
    ) -> Ground<'a> {
        Ground {
            me,
            token: TOKEN,
            config,
            runs,
            newest_tick: None,
            first_handled: None,
            outage: None,
            now,
        }
    }

    /// A record of tick `tick` by node `node` under `token`, in `status`.
    fn record(tick: DateTime<Utc>, node: &str, token: i32, status: RunStatus) -> RunRecord {
        let job = JobName::new("report");
        let node = NodeId::new(node);
        let ms = tick.timestamp_millis();
        let mut record = RunRecord::claimed(&job, ms, (&node, "10.0.0.2"), FencingToken(token), ms);
        record.status = status;
        record
    }

    fn listing(records: Vec<RunRecord>) -> JobRecords {
        JobRecords {
            ticks: records.iter().map(|r| r.scheduled_unix_ms).collect(),
            newest: records.into_iter().map(|r| (r, 3)).collect(),
            ..JobRecords::default()
        }
    }

    fn ticks(items: impl IntoIterator<Item = Item>) -> Vec<(DateTime<Utc>, FireReason)> {
        items
            .into_iter()
            .map(|item| (item.tick, item.reason))
            .collect()
    }

    fn missed(records: &[RecordOnly]) -> Vec<(i64, u64, String)> {
        records
            .iter()
            .map(|written| match written {
                RecordOnly::Create(r) | RecordOnly::Again(r, _) => {
                    assert_eq!(r.status, RunStatus::Missed);
                    let from = r.missed_from_unix_ms.expect("a gap's first tick");
                    let error = r.error.clone().unwrap_or_default();
                    (
                        from / 1000 - 1_893_456_000,
                        r.missed_ticks.unwrap_or(0),
                        error,
                    )
                }
            })
            .collect()
    }

    #[test]
    fn missed_ticks_start_per_misfire_within_the_deadline_and_the_rest_are_one_gap() {
        let (me, runs) = (me(), Runs::default());
        let done = record(at(0), "n2", 3, RunStatus::Succeeded);
        let cases = [
            // Ticks at 60, 120 and 180 s were missed; now is 210 s.
            (
                "misfire = \"run_all\"\nstarting_deadline = \"1h\"",
                vec![60, 120, 180],
                vec![],
            ),
            (
                "misfire = \"run_once\"\nstarting_deadline = \"1h\"",
                vec![180],
                vec![(60, 2)],
            ),
            (
                "misfire = \"skip\"\nstarting_deadline = \"1h\"",
                vec![],
                vec![(60, 3)],
            ),
            // The tick at 60 s is past the 100 s deadline: a gap of its own.
            (
                "misfire = \"run_all\"\nstarting_deadline = \"100s\"",
                vec![120, 180],
                vec![(60, 1)],
            ),
        ];
        for (keys, started, gaps) in cases {
            let config = report(keys);
            let mut catch_up = CatchUp::default();
            assert!(catch_up.awaits_listing());
            let ground = ground(&me, &config, &runs, at(210));
            let listed = catch_up.listed(&ground, listing(vec![done.clone()]), Vec::new());
            assert!(
                listed.marks.is_empty() && listed.retries.is_empty(),
                "{keys}"
            );
            assert_eq!(listed.latest, Some(at(0)));
            let found: Vec<(i64, u64)> = missed(&listed.records)
                .into_iter()
                .map(|(from, count, error)| {
                    assert!(error.contains("no node owned the lock"), "{error}");
                    (from, count)
                })
                .collect();
            assert_eq!(found, gaps, "{keys}");
            assert!(catch_up.decided() && !catch_up.awaits_listing());
            let want: Vec<_> = started
                .into_iter()
                .map(|s| (at(s), FireReason::CaughtUp))
                .collect();
            let job = JobName::new("report");
            assert_eq!(ticks(catch_up.into_backlog(&job)), want, "{keys}");
        }
    }

    #[test]
    fn a_brand_new_job_catches_up_nothing_and_a_started_tick_covers_older_ones() {
        let (me, runs, config) = (me(), Runs::default(), report("misfire = \"run_all\""));
        let mut catch_up = CatchUp::default();
        let listed = catch_up.listed(
            &ground(&me, &config, &runs, at(210)),
            listing(vec![]),
            vec![],
        );
        assert!(listed.records.is_empty() && listed.latest.is_none());
        assert_eq!(catch_up.into_backlog(&JobName::new("report")).count(), 0);

        let mut catch_up = CatchUp::default();
        let mut started_here = ground(&me, &config, &runs, at(210));
        started_here.newest_tick = Some(at(120));
        started_here.first_handled = Some(at(180));
        let done = record(at(0), "n2", 3, RunStatus::Succeeded);
        catch_up.listed(&started_here, listing(vec![done]), vec![]);
        let backlog = ticks(catch_up.into_backlog(&JobName::new("report")));
        assert_eq!(
            backlog,
            vec![],
            "60 and 120 covered by 120, 180 handled on time"
        );
    }

    #[test]
    fn a_gap_during_an_outage_says_zookeeper_was_unreachable() {
        let (me, runs) = (me(), Runs::default());
        let config = report("misfire = \"skip\"");
        let mut cut_off = ground(&me, &config, &runs, at(210));
        cut_off.outage = Some((at(50), Some(at(200))));
        let mut catch_up = CatchUp::default();
        let done = record(at(0), "n2", 3, RunStatus::Succeeded);
        let listed = catch_up.listed(&cut_off, listing(vec![done]), vec![]);
        let gaps = missed(&listed.records);
        assert_eq!(gaps.len(), 1);
        assert!(
            gaps[0].2.starts_with("zookeeper was unreachable"),
            "{gaps:?}"
        );
    }

    #[test]
    fn open_runs_of_older_tokens_are_marked_and_rerun_before_the_missed_ticks() {
        let (me, runs) = (me(), Runs::default());
        let config =
            report("on_interrupted = \"rerun\"\nmisfire = \"run_all\"\nstarting_deadline = \"1h\"");
        let open = record(at(0), "n2", 3, RunStatus::Running);
        let ours_now = record(at(60), "n2", TOKEN.0, RunStatus::Running);
        let mut catch_up = CatchUp::default();
        let ground = ground(&me, &config, &runs, at(150));
        let listed = catch_up.listed(&ground, listing(vec![open.clone(), ours_now]), vec![]);
        let [
            Action::MarkInterrupted {
                record,
                version: 3,
                closes: false,
            },
        ] = &listed.marks[..]
        else {
            panic!("one mark, of the older token's run: {:?}", listed.marks);
        };
        assert_eq!(
            (record.run_id.as_str(), record.status),
            (open.run_id.as_str(), RunStatus::Interrupted)
        );
        assert!(!catch_up.decided(), "the mark is out");

        let told = catch_up.marked(record.clone(), Ok(4), true, at(151));
        assert_eq!(
            told.map(|(r, again)| (r.status, again)),
            Some((RunStatus::Interrupted, true))
        );
        assert!(catch_up.decided());
        let backlog: Vec<Item> = catch_up.into_backlog(&JobName::new("report")).collect();
        assert_eq!(
            ticks(backlog.iter().cloned()),
            vec![(at(0), FireReason::Rerun), (at(120), FireReason::CaughtUp)]
        );
        assert_eq!(
            backlog[0].again.as_ref().map(|(_, v)| *v),
            Some(4),
            "rerun at the marked version"
        );
    }

    #[test]
    fn a_mark_refused_is_no_rerun_and_a_forbid_guard_proves_a_run_alive() {
        let (me, runs) = (me(), Runs::default());
        let config = report("on_interrupted = \"rerun\"\nconcurrency = \"forbid\"");
        let open = record(at(0), "n2", 3, RunStatus::Running);
        let mut guarded = listing(vec![open.clone()]);
        guarded.guard_holder = Some(open.run_id.clone());
        let mut catch_up = CatchUp::default();
        let listed = catch_up.listed(&ground(&me, &config, &runs, at(30)), guarded, vec![]);
        assert!(listed.marks.is_empty(), "its guard says it is alive");

        let mut catch_up = CatchUp::default();
        catch_up.listed(
            &ground(&me, &config, &runs, at(30)),
            listing(vec![open.clone()]),
            vec![],
        );
        assert_eq!(
            catch_up.marked(open, Err("changed".into()), true, at(31)),
            None
        );
        assert!(catch_up.decided());
        assert_eq!(catch_up.into_backlog(&JobName::new("report")).count(), 0);
    }

    #[test]
    fn a_promised_retry_is_kept_or_past_its_deadline_recorded_missed() {
        let (me, runs) = (me(), Runs::default());
        let config = report("starting_deadline = \"100s\"");
        let mut failed = record(at(0), "n2", 3, RunStatus::Failed);
        failed.retry_at_unix_ms = Some(at(30).timestamp_millis());
        let mut catch_up = CatchUp::default();
        let listed = catch_up.listed(
            &ground(&me, &config, &runs, at(40)),
            listing(vec![failed.clone()]),
            vec![],
        );
        let [retry] = &listed.retries[..] else {
            panic!("one retry kept: {listed:?}");
        };
        assert_eq!((retry.at, retry.version, retry.resumed), (at(30), 3, true));

        let mut catch_up = CatchUp::default();
        let listed = catch_up.listed(
            &ground(&me, &config, &runs, at(200)),
            listing(vec![failed]),
            vec![],
        );
        assert!(listed.retries.is_empty());
        // First, before the gaps of the ticks missed since.
        let Some(RecordOnly::Again(missed, 3)) = listed.records.first() else {
            panic!("the attempt recorded missed over the stored record: {listed:?}");
        };
        assert_eq!((missed.status, missed.attempt), (RunStatus::Missed, 2));
    }

    #[test]
    fn a_stall_is_one_gap_up_to_now_and_late_held_ticks_one_more() {
        let (me, config) = (me(), report(""));
        let stalled = stalled_gap(&me, TOKEN, &config, at(60), at(250));
        assert_eq!(
            (
                stalled.missed_from_unix_ms,
                stalled.scheduled_unix_ms,
                stalled.missed_ticks
            ),
            (
                Some(at(60).timestamp_millis()),
                at(240).timestamp_millis(),
                Some(4)
            )
        );
        assert_eq!(
            late_held(&me, TOKEN, &config, &[], at(250)).map(|r| r.run_id),
            None
        );
        let held = late_held(&me, TOKEN, &config, &[at(60), at(120)], at(250)).expect("a gap");
        assert_eq!((held.missed_ticks, held.fencing_token), (Some(2), TOKEN));
    }
}
