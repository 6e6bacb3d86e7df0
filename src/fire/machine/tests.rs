//! The fire machine on a virtual clock: one test per transition of DESIGN.md's firing rules,
//! the three defects of issue 8 pinned, and a property test over random interleavings of ticks,
//! lock changes, claim results and run ends.

use std::collections::VecDeque;
use std::time::Duration;

use super::housekeeping::RELIST_AFTER;
use super::*;
use crate::control::Pauses;
use crate::delayed::submission::{DueBucket, Submission, SubmissionId};
use crate::ids::{FencingToken, NodeId, SessionId};
use crate::run::{Claim, ClaimMode, RunContext, RunOutcome, RunRecord, RunReport, RunStatus};

mod backfill;
mod broadcast;
mod broadcast_properties;
mod calendars;
mod chains;
mod clock_correction;
mod delayed;
mod groups;
mod guards;
mod jitter;
mod limits;
mod notices;
mod properties;
mod steering;
mod submitted_parents;
mod submitted_properties;
mod unrecorded;

const TOKEN: FencingToken = FencingToken(7);

/// 2030-01-01T00:00:00Z plus `ms`.
fn t(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_893_456_000_000 + ms).expect("in range")
}

fn ms(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis() - 1_893_456_000_000
}

/// Jobs from `[[job]]` tables (each needs name, schedule and shell).
fn jobs(tables: &str) -> Vec<Arc<JobConfig>> {
    crate::config::jobs_for_test(tables)
}

fn job(name: &str, schedule: &str, extra: &str) -> String {
    format!("[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\nshell = \"true\"\n{extra}\n")
}

fn me() -> Me {
    Me {
        node_id: NodeId::new("n1"),
        ip: "10.0.0.1".into(),
        trace_seed: None,
    }
}

/// A machine at t(0) firing `tables`, 250 ms claim-ahead, that knows no job is paused.
fn machine(tables: &str) -> FireMachine {
    let mut m = unread_pauses(tables);
    assert_eq!(
        m.handle(
            Input::Control(ControlInput::PausesRead(Pauses::new())),
            t(0)
        ),
        vec![]
    );
    m
}

/// A machine that has not read the pauses yet (just started).
fn unread_pauses(tables: &str) -> FireMachine {
    FireMachine::new(me(), Duration::from_millis(250), &jobs(tables), t(0))
}

fn owner(token: FencingToken) -> LockStatus {
    LockStatus {
        token: Some(token),
        may_fire: true,
        connected: true,
    }
}

fn follower() -> LockStatus {
    LockStatus {
        token: None,
        may_fire: false,
        connected: true,
    }
}

fn disconnected_owner(token: FencingToken) -> LockStatus {
    LockStatus {
        token: Some(token),
        may_fire: false,
        connected: false,
    }
}

/// A property test's lock step `kind`: 0 owner under `token`, 1 follower, 2 disconnected,
/// otherwise a new acquisition (`token` goes up by one).
fn lock_step(kind: u8, token: &mut i32) -> LockStatus {
    match kind {
        0 => owner(FencingToken(*token)),
        1 => follower(),
        2 => LockStatus {
            connected: false,
            may_fire: false,
            token: None,
        },
        _ => {
            *token += 1;
            owner(FencingToken(*token))
        }
    }
}

/// Feeds every timer expiry up to `until_ms`, as the driver would.
fn run_timer(m: &mut FireMachine, until_ms: i64) {
    while let Some(at) = m.next_deadline().filter(|at| ms(*at) <= until_ms) {
        m.handle(Input::Tick, at);
    }
}

/// A machine that owns the lock with nothing to catch up for `tables`' jobs.
fn owning(tables: &str) -> FireMachine {
    let mut m = machine(tables);
    let actions = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(0));
    for action in actions {
        if let Action::CatchUp(CatchUpAction::ListRecords(job)) = action {
            let listed = Input::CatchUp(CatchUpInput::Listed {
                job,
                result: Ok(JobRecords::default()),
            });
            assert_eq!(m.handle(listed, t(0)), vec![], "nothing to catch up");
        }
    }
    m
}

fn claims(actions: &[Action]) -> Vec<TickClaim> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Claims(ClaimAction::Claim(claim)) => Some(claim.clone()),
            _ => None,
        })
        .collect()
}

/// The records written (`ClaimAction::WriteRecord`) among `actions`.
fn records_written(actions: &[Action]) -> Vec<&Claim> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Claims(ClaimAction::WriteRecord(claim)) => Some(claim),
            _ => None,
        })
        .collect()
}

fn only_claim(actions: &[Action]) -> TickClaim {
    let all = claims(actions);
    assert_eq!(all.len(), 1, "one claim in {actions:?}");
    all[0].clone()
}

fn starts(actions: &[Action]) -> Vec<(Claim, RunContext)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Runs(RunAction::Start { claim, context, .. }) => {
                Some((claim.clone(), context.clone()))
            }
            _ => None,
        })
        .collect()
}

fn only_start(actions: &[Action]) -> (Claim, RunContext) {
    let all = starts(actions);
    assert_eq!(all.len(), 1, "one start in {actions:?}");
    all[0].clone()
}

/// The actions about ticks and runs: a node that can fire also reads the delayed submissions'
/// buckets as time goes by, which tests of ticks leave aside.
fn but_delayed(actions: Vec<Action>) -> Vec<Action> {
    actions
        .into_iter()
        .filter(|action| {
            !matches!(
                action,
                Action::Delayed(DelayedAction::Scan { .. })
                    | Action::Delayed(DelayedAction::RemoveEmptyBucket(_))
                    | Action::Delayed(DelayedAction::RemoveEmptyDay(_))
                    | Action::Delayed(DelayedAction::ReadSubmission { .. })
            )
        })
        .collect()
}

/// The ledger's answer to a successful claim.
/// A scan's answer: `found`, every bucket through `through` read, none of them present.
fn scanned(
    generation: u64,
    through: crate::delayed::submission::DueBucket,
    found: Vec<(
        crate::delayed::submission::SubmissionId,
        crate::delayed::submission::Submission,
    )>,
) -> Input {
    let result = Ok(super::Scanned {
        found,
        through,
        present: Vec::new(),
    });
    Input::Delayed(DelayedInput::Scanned { generation, result })
}

/// A scan's answer: the `pending` submissions in the buckets after `after` through `through`.
fn scan_of(
    pending: impl Iterator<Item = (SubmissionId, Submission)>,
    after: Option<DueBucket>,
    through: DueBucket,
) -> Scanned {
    let found = pending
        .filter(|(_, submission)| {
            let bucket = DueBucket::of(submission.due_unix_ms);
            after.is_none_or(|after| bucket > after) && bucket <= through
        })
        .collect();
    Scanned {
        found,
        through,
        present: Vec::new(),
    }
}

fn granted(claim: &TickClaim) -> Claim {
    Claim {
        path: format!(
            "/runs/{}/{}",
            claim.record.job, claim.record.scheduled_unix_ms
        ),
        version: 0,
        record: claim.record.clone(),
        guard: claim
            .guarded
            .then(|| format!("/running/{}", claim.record.job)),
        open: None,
        children: Vec::new(),
        payload: None,
        session: SessionId(1),
        sent: claim.record.clone(),
    }
}

/// The ledger's answer to a broadcast claim of `record` that succeeded (`n1`'s own record).
fn granted_broadcast(record: &RunRecord) -> Claim {
    Claim {
        path: format!("/runs/{}/{}~n1", record.job, record.scheduled_unix_ms),
        version: 0,
        record: record.clone(),
        guard: None,
        open: None,
        children: Vec::new(),
        payload: None,
        session: SessionId(1),
        sent: record.clone(),
    }
}

fn ok(claim: &TickClaim) -> Input {
    Input::Claims(ClaimInput::Done {
        id: claim.id,
        result: Ok(Box::new(granted(claim))),
    })
}

fn refused(claim: &TickClaim, why: ClaimRefused) -> Input {
    Input::Claims(ClaimInput::Done {
        id: claim.id,
        result: Err(why),
    })
}

fn ended(claim: &Claim, outcome: RunOutcome, at: DateTime<Utc>) -> Input {
    Input::Claims(ClaimInput::RunEnded {
        claim: Box::new(claim.clone()),
        report: RunReport {
            outcome,
            started_at: at,
            duration: Duration::from_millis(5),
            retry_after: None,
            output: String::new(),
        },
    })
}

fn written(claim: &Claim) -> Input {
    Input::Claims(ClaimInput::RecordWritten {
        run_id: claim.record.run_id.clone(),
        write: RecordWrite::Written(claim.version + 2),
    })
}

/// A stored record of `job`'s tick at `tick_ms`.
fn stored(job: &str, tick_ms: i64, node: &str, token: i32, status: RunStatus) -> RunRecord {
    let mut record = RunRecord::claimed(
        &JobName::new(job),
        t(tick_ms).timestamp_millis(),
        (&NodeId::new(node), "10.0.0.9"),
        FencingToken(token),
        t(tick_ms).timestamp_millis(),
    );
    record.status = status;
    record
}

fn listing(records: &[RunRecord]) -> JobRecords {
    JobRecords {
        ticks: records.iter().map(|r| r.scheduled_unix_ms).collect(),
        newest: records.iter().map(|r| (r.clone(), 1)).collect(),
        guard_holder: None,
        live_members: vec![NodeId::new("n1")],
        payloads: Default::default(),
    }
}

/// The answer to `ListRecords(job)` with these records.
fn listed(job: &str, records: &[RunRecord]) -> Input {
    Input::CatchUp(CatchUpInput::Listed {
        job: JobName::new(job),
        result: Ok(listing(records)),
    })
}

/// Feeds a run's end; returns the final record it writes (its one action).
fn end_run(m: &mut FireMachine, end: Input, at: DateTime<Utc>) -> Claim {
    match &m.handle(end, at)[..] {
        [Action::Claims(ClaimAction::WriteRecord(finished))] => finished.clone(),
        other => panic!("a run's end writes its final record, and only that: {other:?}"),
    }
}

/// Grants `claim`, starts its run at `tick_ms` and ends it 100 ms later with exit 0; returns
/// the final record it writes.
/// Drives what `actions` ask for at `now`: each claim answered by `answer`, every start run
/// and ended, every final record written.
fn drive_with(
    m: &mut FireMachine,
    actions: Vec<Action>,
    now: DateTime<Utc>,
    mut answer: impl FnMut(&TickClaim) -> Input,
) {
    let mut todo: VecDeque<Action> = actions.into();
    while let Some(action) = todo.pop_front() {
        let input = match action {
            Action::Claims(ClaimAction::Claim(claim)) => answer(&claim),
            Action::Runs(RunAction::Start { claim, .. }) => {
                ended(&claim, RunOutcome::Exited { code: 0 }, now)
            }
            Action::Claims(ClaimAction::WriteRecord(finished)) => written(&finished),
            _ => continue,
        };
        todo.extend(m.handle(input, now));
    }
}

fn run_granted(m: &mut FireMachine, claim: &TickClaim, tick_ms: i64) -> Claim {
    m.handle(ok(claim), t(tick_ms - 249));
    let (run, _) = only_start(&m.handle(Input::Tick, t(tick_ms)));
    let end = ended(&run, RunOutcome::Exited { code: 0 }, t(tick_ms));
    end_run(m, end, t(tick_ms + 100))
}

const EVERY_SECOND: &str = "* * * * * *";

#[test]
fn an_owner_claims_ahead_and_starts_at_the_tick() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    assert_eq!(m.next_deadline(), Some(t(750)), "claim 250 ms ahead of 1 s");
    let claim = only_claim(&m.handle(Input::Tick, t(750)));
    assert_eq!(claim.record.scheduled_unix_ms, t(1000).timestamp_millis());
    assert_eq!(
        (
            claim.record.status,
            claim.record.fencing_token,
            claim.mode,
            claim.guarded
        ),
        (RunStatus::Running, TOKEN, ClaimMode::Create, true),
        "forbid (the default) claims with the guard; a tick's claim says running"
    );
    assert_eq!(
        claim.record.started_unix_ms,
        Some(t(1000).timestamp_millis()),
        "from its planned start"
    );
    let prepared = m.handle(ok(&claim), t(752));
    let [Action::Runs(RunAction::Prepare { context: ahead, .. })] = prepared.as_slice() else {
        panic!("nothing starts before the tick; its process is prepared: {prepared:?}");
    };
    assert_eq!(ahead.run_id, claim.record.run_id);
    assert_eq!(
        m.next_deadline(),
        Some(t(995)),
        "a prepared start goes out START_LEAD ahead"
    );
    assert!(starts(&m.handle(Input::Tick, t(994))).is_empty());
    let at_lead = m.handle(Input::Tick, t(995));
    let [
        Action::Runs(RunAction::Start {
            not_before, record, ..
        }),
    ] = at_lead.as_slice()
    else {
        panic!("one start: {at_lead:?}");
    };
    assert_eq!(
        *not_before,
        t(1000),
        "the job's program starts at the tick, never before"
    );
    assert_eq!(
        *record,
        StartWrite::InClaim,
        "the claim said running: the start writes nothing"
    );
    let (started, context) = only_start(&at_lead);
    assert_eq!(
        started.record.started_unix_ms,
        Some(t(1000).timestamp_millis())
    );
    assert_eq!(&context, ahead, "the prepared process is the run's");
    assert_eq!(started.record.status, RunStatus::Running);
    assert_eq!(
        (
            context.attempt,
            context.resumed,
            context.fencing_token,
            context.scheduled_at
        ),
        (1, false, TOKEN, t(1000))
    );
    assert_eq!(m.running(), 1);
}

#[test]
fn a_prepared_run_is_given_up_when_its_claim_cannot_start() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    let claim = only_claim(&m.handle(Input::Tick, t(750)));
    assert!(matches!(
        m.handle(ok(&claim), t(752)).as_slice(),
        [Action::Runs(RunAction::Prepare { .. })]
    ));
    // The lock is lost between the claim and the tick: no start, and no process left waiting.
    m.handle(Input::Lock(LockInput::Changed(follower())), t(900));
    let at_tick = but_delayed(m.handle(Input::Tick, t(1000)));
    assert!(starts(&at_tick).is_empty(), "{at_tick:?}");
    let given_up: Vec<&Action> = at_tick
        .iter()
        .filter(|a| matches!(a, Action::Runs(RunAction::Unprepare { run_id }) if *run_id == claim.record.run_id))
        .collect();
    assert_eq!(given_up.len(), 1, "{at_tick:?}");
}

#[test]
fn a_run_claimed_at_or_after_its_instant_starts_at_once_unprepared() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    let claim = only_claim(&m.handle(Input::Tick, t(750)));
    let late = m.handle(ok(&claim), t(1003));
    assert_eq!(starts(&late).len(), 1);
    assert!(
        !late
            .iter()
            .any(|a| matches!(a, Action::Runs(RunAction::Prepare { .. }))),
        "{late:?}"
    );
}

#[test]
fn a_follower_declines_and_fires_a_declined_tick_after_acquiring_within_the_late_limit() {
    let mut m = machine(&job("a", EVERY_SECOND, ""));
    m.handle(Input::Lock(LockInput::Changed(follower())), t(0));
    assert_eq!(
        m.handle(Input::Tick, t(750)),
        vec![],
        "not the owner: no claim"
    );
    let acquired = but_delayed(m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(1100)));
    assert_eq!(
        acquired,
        vec![
            Action::CatchUp(CatchUpAction::PrepareJobs(vec![JobName::new("a")])),
            Action::CatchUp(CatchUpAction::ListRecords(JobName::new("a")))
        ],
        "catch-up decides first; the declined tick waits for it"
    );
    let listed = listed("a", &[stored("a", 0, "n2", 6, RunStatus::Succeeded)]);
    let claim = only_claim(&m.handle(listed, t(1105)));
    assert_eq!(claim.record.scheduled_unix_ms, t(1000).timestamp_millis());
    let (_, context) = only_start(&m.handle(ok(&claim), t(1108)));
    assert!(
        !context.resumed,
        "a declined tick fired within 1 s is on time"
    );
}

#[test]
fn a_declined_tick_past_the_late_limit_is_not_fired_but_caught_up_per_misfire() {
    let mut m = machine(&job("a", EVERY_SECOND, "misfire = \"skip\""));
    m.handle(Input::Lock(LockInput::Changed(follower())), t(0));
    run_timer(&mut m, 2300);
    // Ticks 1 and 2 were declined more than a second ago; 3 is not due yet.
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(3100));
    let listed = listed("a", &[stored("a", 0, "n2", 6, RunStatus::Succeeded)]);
    let actions = m.handle(listed, t(3105));
    let gap = only_claim(&actions);
    assert_eq!(gap.record.status, RunStatus::Missed);
    assert_eq!(
        (
            gap.record.missed_from_unix_ms,
            gap.record.scheduled_unix_ms,
            gap.record.missed_ticks
        ),
        (
            Some(t(1000).timestamp_millis()),
            t(2000).timestamp_millis(),
            Some(2)
        ),
        "one record for the gap, named by its last tick"
    );
    assert!(
        gap.record
            .error
            .as_deref()
            .is_some_and(|e| e.contains("misfire = skip")),
        "{:?}",
        gap.record.error
    );
    assert!(starts(&actions).is_empty());
}

#[test]
fn defect_2_catch_up_starts_the_missed_tick_before_the_declined_one() {
    // The owner died after tick 20; this node acquires at 26.47 with tick 26 declined.
    let mut m = machine(&job("a", EVERY_SECOND, ""));
    m.handle(Input::Lock(LockInput::Changed(follower())), t(0));
    for now in (750..=25_750).step_by(1000) {
        m.handle(Input::Tick, t(now));
    }
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(26_470));
    let listed = listed("a", &[stored("a", 20_000, "n2", 6, RunStatus::Succeeded)]);
    let actions = m.handle(listed, t(26_475));
    let all = claims(&actions);
    assert_eq!(
        all.len(),
        2,
        "the gap's record and the latest missed tick: {all:?}"
    );
    let (gap, caught) = (&all[0], &all[1]);
    assert_eq!(
        (gap.record.status, gap.record.missed_ticks, ms_of(gap)),
        (RunStatus::Missed, Some(4), 24_000),
        "ticks 21..24 are recorded missed (misfire = run_once)"
    );
    assert_eq!(ms_of(caught), 25_000);
    let actions = m.handle(ok(caught), t(26_480));
    let (run, context) = only_start(&actions);
    assert!(context.resumed);
    assert_eq!(run.record.scheduled_unix_ms, t(25_000).timestamp_millis());
    let declined = only_claim(&actions);
    assert_eq!(
        ms_of(&declined),
        26_000,
        "the declined tick only once 25 has started"
    );
    // Under forbid it finds the caught-up run's guard, and goes once that run has ended.
    assert_eq!(
        m.handle(refused(&declined, ClaimRefused::RunAlive), t(26_482)),
        vec![]
    );
    let finished = end_run(
        &mut m,
        ended(&run, RunOutcome::Exited { code: 0 }, t(26_480)),
        t(26_485),
    );
    let again = only_claim(&m.handle(written(&finished), t(26_487)));
    assert_eq!(ms_of(&again), 26_000);
    let (_, context) = only_start(&m.handle(ok(&again), t(26_490)));
    assert!(
        !context.resumed,
        "a declined tick started within 1 s is on time"
    );
}

fn ms_of(claim: &TickClaim) -> i64 {
    claim.record.scheduled_unix_ms - t(0).timestamp_millis()
}

#[test]
fn run_all_catches_up_in_order_one_after_another_then_the_declined_tick() {
    let mut m = machine(&job(
        "a",
        EVERY_SECOND,
        "misfire = \"run_all\"\nconcurrency = \"allow\"",
    ));
    m.handle(Input::Lock(LockInput::Changed(follower())), t(0));
    m.handle(Input::Tick, t(3750));
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(4100));
    let listed = listed("a", &[stored("a", 1000, "n2", 6, RunStatus::Succeeded)]);
    let mut now = 4105;
    let mut claimed = claims(&m.handle(listed, t(now)));
    let mut order = Vec::new();
    while let Some(claim) = claimed.pop() {
        assert!(claimed.is_empty(), "one claim at a time: {claimed:?}");
        order.push(ms_of(&claim));
        now += 5;
        let actions = m.handle(ok(&claim), t(now));
        let (run, _) = only_start(&actions);
        claimed = claims(&actions);
        let finished = end_run(
            &mut m,
            ended(&run, RunOutcome::Exited { code: 0 }, t(now)),
            t(now + 3),
        );
        claimed.extend(claims(&m.handle(written(&finished), t(now + 5))));
    }
    assert_eq!(
        order,
        [2000, 3000, 4000],
        "2 and 3 caught up in order, each after the one before ended, then the declined 4"
    );
}

#[test]
fn a_job_without_records_never_backfills() {
    let mut m = machine(&job("a", EVERY_SECOND, "misfire = \"run_all\""));
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(60_000));
    let listed = Input::CatchUp(CatchUpInput::Listed {
        job: JobName::new("a"),
        result: Ok(JobRecords::default()),
    });
    assert_eq!(m.handle(listed, t(60_001)), vec![]);
}

#[test]
fn ticks_beyond_the_starting_deadline_are_one_gap_of_their_own() {
    let extra = "misfire = \"run_all\"\nstarting_deadline = \"2s\"";
    let mut m = machine(&job("a", EVERY_SECOND, extra));
    m.handle(Input::Lock(LockInput::Changed(follower())), t(0));
    run_timer(&mut m, 9800);
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(10_100));
    let listed = listed("a", &[stored("a", 1000, "n2", 6, RunStatus::Succeeded)]);
    let all = claims(&m.handle(listed, t(10_100)));
    let beyond = &all[0];
    assert_eq!(
        (
            beyond.record.status,
            beyond
                .record
                .missed_from_unix_ms
                .map(|v| v - t(0).timestamp_millis()),
            ms_of(beyond),
            beyond.record.missed_ticks
        ),
        (RunStatus::Missed, Some(2000), 8000, Some(7)),
        "ticks 2..8 are older than the deadline"
    );
    assert!(
        beyond
            .record
            .error
            .as_deref()
            .is_some_and(|e| e.contains("starting_deadline"))
    );
    assert_eq!(
        ms_of(&all[1]),
        9000,
        "9 and 10 are within it; the first starts"
    );
    assert_eq!(all.len(), 2);
}

#[test]
fn a_gap_while_zookeeper_was_unreachable_says_so() {
    let mut m = owning(&job("a", EVERY_SECOND, "misfire = \"skip\""));
    m.handle(
        Input::Lock(LockInput::Changed(disconnected_owner(TOKEN))),
        t(100),
    );
    run_timer(&mut m, 3000);
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(3100));
    let listed = listed("a", &[stored("a", 0, "n1", 7, RunStatus::Succeeded)]);
    let all = claims(&m.handle(listed, t(3101)));
    assert_eq!(
        all.len(),
        2,
        "the gap's record, then the tick held behind catch-up"
    );
    let gap = &all[0];
    assert_eq!(
        (gap.record.status, gap.record.missed_ticks),
        (RunStatus::Missed, Some(2))
    );
    assert_eq!(ms_of(&all[1]), 3000);
    assert!(
        gap.record
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("zookeeper was unreachable")),
        "{:?}",
        gap.record.error
    );
}

#[test]
fn defect_1_a_forbid_tick_is_not_skipped_when_the_run_ends_before_it() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    let first = only_claim(&m.handle(Input::Tick, t(750)));
    m.handle(ok(&first), t(751));
    let (run, _) = only_start(&m.handle(Input::Tick, t(1000)));
    // The next claim goes out ahead while the run is alive and finds its guard.
    let second = only_claim(&m.handle(Input::Tick, t(1750)));
    assert_eq!(
        m.handle(refused(&second, ClaimRefused::RunAlive), t(1752)),
        vec![]
    );
    let end = m.handle(
        ended(&run, RunOutcome::Exited { code: 0 }, t(1000)),
        t(1990),
    );
    assert!(
        matches!(end[..], [Action::Claims(ClaimAction::WriteRecord(_))]),
        "{end:?}"
    );
    let Action::Claims(ClaimAction::WriteRecord(finished)) = &end[0] else {
        unreachable!()
    };
    // The guard is released with the record, 5 ms before the tick: claim again.
    let again = m.handle(written(finished), t(1995));
    let retry = claims(&again);
    assert_eq!(retry.len(), 1, "claimed once more: {again:?}");
    assert_eq!(retry[0].record.status, RunStatus::Running);
    assert_eq!(ms_of(&retry[0]), 2000);
    m.handle(ok(&retry[0]), t(1998));
    let (_, context) = only_start(&m.handle(Input::Tick, t(2000)));
    assert_eq!(context.scheduled_at, t(2000), "started, not skipped");
}

/// The owner of an hourly job whose first run ended with exit `code` at 01:00:06, and the final
/// record the machine asked to write.
fn owner_with_a_finished_hourly_run(code: i32) -> (FireMachine, Claim) {
    let mut m = owning(&job("a", "0 0 * * * *", ""));
    let hourly = 3_600_000;
    let claim = only_claim(&m.handle(Input::Tick, t(hourly - 250)));
    m.handle(ok(&claim), t(hourly - 240));
    let (run, _) = only_start(&m.handle(Input::Tick, t(hourly)));
    let finished = end_run(
        &mut m,
        ended(&run, RunOutcome::Exited { code }, t(hourly)),
        t(hourly + 6000),
    );
    (m, finished)
}

/// A run ends while the whole ensemble is paused: its final record's write fails. It is sent
/// again once the session is connected, not before (an outage does not use up the attempts),
/// so the record does not stay `running` with its guard alive for as long as the session lives
/// (found by the chaos suite's "pause of every server").
#[test]
fn a_final_record_whose_write_failed_is_written_again_once_connected() {
    let hourly = 3_600_000;
    let (mut m, finished) = owner_with_a_finished_hourly_run(0);
    m.handle(
        Input::Lock(LockInput::Changed(disconnected_owner(TOKEN))),
        t(hourly + 6001),
    );
    let failed = Input::Claims(ClaimInput::RecordWritten {
        run_id: finished.record.run_id.clone(),
        write: RecordWrite::Failed,
    });
    m.handle(failed.clone(), t(hourly + 6002));
    assert_eq!(
        m.next_deadline(),
        Some(t(2 * hourly - 250)),
        "nothing sent while disconnected"
    );

    let back = m.handle(
        Input::Lock(LockInput::Changed(owner(TOKEN))),
        t(hourly + 9000),
    );
    let again = records_written(&back);
    assert_eq!(again.len(), 1, "written again on reconnecting: {back:?}");
    assert_eq!(again[0].record, finished.record);
    assert_eq!(again[0].guard, finished.guard);
    // Failing again: after a backoff, while connected.
    m.handle(failed, t(hourly + 9010));
    assert_eq!(m.next_deadline(), Some(t(hourly + 10_010)));
    let retry = but_delayed(m.handle(Input::Tick, t(hourly + 10_010)));
    assert!(
        matches!(&retry[..], [Action::Claims(ClaimAction::WriteRecord(c))] if c.record == finished.record),
        "{retry:?}"
    );
    m.handle(written(&finished), t(hourly + 10_020));
    assert!(
        m.starts.rewrites.is_empty(),
        "written: nothing left to send"
    );
}

/// Issue 18: an old owner's final record met the record the next owner had already resolved
/// (`interrupted`), and ZooKeeper answered "changed by someone else". That answer is final: the
/// record is not sent again, neither after a backoff nor on reconnecting.
#[test]
fn a_final_record_refused_by_zookeeper_is_never_sent_again() {
    let hourly = 3_600_000;
    let (mut m, finished) = owner_with_a_finished_hourly_run(1);
    let refused = Input::Claims(ClaimInput::RecordWritten {
        run_id: finished.record.run_id.clone(),
        write: RecordWrite::Refused,
    });
    m.handle(refused, t(hourly + 6001));
    assert!(
        m.starts.rewrites.is_empty(),
        "a refusal is not queued to be sent again"
    );
    assert_eq!(
        m.next_deadline(),
        Some(t(2 * hourly - 250)),
        "nothing is due but the next tick's claim"
    );
    m.handle(
        Input::Lock(LockInput::Changed(disconnected_owner(TOKEN))),
        t(hourly + 7000),
    );
    let back = m.handle(
        Input::Lock(LockInput::Changed(owner(TOKEN))),
        t(hourly + 8000),
    );
    assert!(
        !back
            .iter()
            .any(|a| matches!(a, Action::Claims(ClaimAction::WriteRecord(_)))),
        "not sent again on reconnecting: {back:?}"
    );
}

/// Issue 18: a write that got no answer is sent again; when the second answer is a refusal,
/// that ends it: one refusal, no further attempts.
#[test]
fn a_record_sent_again_stops_at_the_first_refusal() {
    let hourly = 3_600_000;
    let (mut m, finished) = owner_with_a_finished_hourly_run(0);
    let answer = |write| {
        Input::Claims(ClaimInput::RecordWritten {
            run_id: finished.record.run_id.clone(),
            write,
        })
    };
    m.handle(answer(RecordWrite::Failed), t(hourly + 6001));
    assert_eq!(
        m.next_deadline(),
        Some(t(hourly + 6501)),
        "a failure is sent again"
    );
    let again = but_delayed(m.handle(Input::Tick, t(hourly + 6501)));
    assert!(
        matches!(&again[..], [Action::Claims(ClaimAction::WriteRecord(c))] if c.record == finished.record),
        "{again:?}"
    );
    m.handle(answer(RecordWrite::Refused), t(hourly + 6510));
    assert!(
        m.starts.rewrites.is_empty(),
        "the refusal ends the rewrites"
    );
    let later = m.handle(Input::Tick, t(hourly + 30_000));
    assert!(
        !later
            .iter()
            .any(|a| matches!(a, Action::Claims(ClaimAction::WriteRecord(_)))),
        "{later:?}"
    );
}

/// An owner of job `a` disconnected from t(100) (its timer run to `until`) and back at `back`,
/// whose catch-up claims its latest missed tick: the machine, that claim, and what granting it
/// brought (the caught-up run's start and the declined ticks' claims).
fn caught_up_after_a_disconnect(until: i64, back: i64) -> (FireMachine, TickClaim, Vec<Action>) {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    m.handle(
        Input::Lock(LockInput::Changed(disconnected_owner(TOKEN))),
        t(100),
    );
    run_timer(&mut m, until);
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(back));
    let listed = listed("a", &[stored("a", 0, "n1", 7, RunStatus::Succeeded)]);
    let caught = claims(&m.handle(listed, t(back + 10)))
        .pop()
        .expect("the caught-up tick");
    let actions = m.handle(ok(&caught), t(back + 20));
    (m, caught, actions)
}

#[test]
fn a_late_claim_waits_for_our_own_runs_record_instead_of_retrying_at_once() {
    // After a takeover the caught-up run starts after the declined tick's time; the declined
    // tick's claim finds its guard. A timer expiry before the run's record is written must not
    // turn that into a skip.
    let (mut m, caught, actions) = caught_up_after_a_disconnect(2750, 3270);
    assert_eq!(ms_of(&caught), 2000);
    let (run, _) = only_start(&actions);
    let declined = only_claim(&actions);
    assert_eq!(ms_of(&declined), 3000);
    assert_eq!(
        m.handle(refused(&declined, ClaimRefused::RunAlive), t(3292)),
        vec![]
    );
    let end = m.handle(
        ended(&run, RunOutcome::Exited { code: 0 }, t(3290)),
        t(3293),
    );
    assert_eq!(
        m.next_deadline(),
        Some(t(3750)),
        "the next tick's claim; no retry timer"
    );
    assert_eq!(
        m.handle(Input::Tick, t(3294)),
        vec![],
        "a spurious tick changes nothing"
    );
    let Action::Claims(ClaimAction::WriteRecord(finished)) = &end[0] else {
        panic!("{end:?}")
    };
    let again = only_claim(&m.handle(written(finished), t(3296)));
    assert_eq!(
        (ms_of(&again), again.record.status),
        (3000, RunStatus::Running)
    );
    let (_, context) = only_start(&m.handle(ok(&again), t(3298)));
    assert_eq!(context.scheduled_at, t(3000));
}

#[test]
fn a_forbid_tick_is_skipped_when_a_run_is_still_alive_at_its_time() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    let first = only_claim(&m.handle(Input::Tick, t(750)));
    m.handle(ok(&first), t(751));
    only_start(&m.handle(Input::Tick, t(1000)));
    let second = only_claim(&m.handle(Input::Tick, t(1750)));
    m.handle(refused(&second, ClaimRefused::RunAlive), t(1752));
    let again = only_claim(&m.handle(Input::Tick, t(2000)));
    assert_eq!(
        again.record.status,
        RunStatus::Running,
        "tried at the tick itself"
    );
    let skip = only_claim(&m.handle(refused(&again, ClaimRefused::RunAlive), t(2002)));
    assert_eq!(skip.record.status, RunStatus::Skipped);
    assert!(!skip.guarded);
    assert_eq!(
        skip.record.error.as_deref(),
        Some("a run of the job is still alive on this node (concurrency = forbid)")
    );
}

#[test]
fn on_lost_cancel_cancels_and_finish_lets_finish() {
    let tables = [
        job("c", EVERY_SECOND, "on_lost = \"cancel\""),
        job("f", EVERY_SECOND, "on_lost = \"finish\""),
    ]
    .join("");
    let mut m = owning(&tables);
    for claim in claims(&m.handle(Input::Tick, t(750))) {
        m.handle(ok(&claim), t(751));
    }
    let started = starts(&m.handle(Input::Tick, t(1000)));
    assert_eq!(started.len(), 2);
    let lost = m.handle(Input::Lock(LockInput::Changed(follower())), t(1200));
    assert_eq!(
        lost,
        vec![Action::Runs(RunAction::Cancel {
            run_id: format!("c-{}", t(1000).timestamp_millis())
        })],
        "only the cancel job is stopped"
    );
    assert!(
        claims(&m.handle(Input::Tick, t(1750))).is_empty(),
        "nothing new without the lock"
    );
}

#[test]
fn a_disconnected_owner_fires_nothing_new_and_cancels_nothing() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    let claim = only_claim(&m.handle(Input::Tick, t(750)));
    m.handle(ok(&claim), t(751));
    only_start(&m.handle(Input::Tick, t(1000)));
    assert_eq!(
        m.handle(
            Input::Lock(LockInput::Changed(disconnected_owner(TOKEN))),
            t(1100)
        ),
        vec![]
    );
    assert!(claims(&m.handle(Input::Tick, t(1750))).is_empty());
}

#[test]
fn a_claim_that_returns_after_the_lock_was_lost_does_not_start() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    let claim = only_claim(&m.handle(Input::Tick, t(750)));
    m.handle(Input::Lock(LockInput::Changed(follower())), t(800));
    m.handle(ok(&claim), t(801));
    let at_the_tick = m.handle(Input::Tick, t(1000));
    assert!(starts(&at_the_tick).is_empty());
    assert!(claim.guarded, "forbid, the default, takes a guard");
    assert!(
        at_the_tick.contains(&Action::Claims(ClaimAction::ReleaseGuard(granted(&claim)))),
        "the guard of a run that never was must not outlive the claim: {at_the_tick:?}"
    );
    assert_eq!(m.next_deadline(), Some(t(1750)), "the claim is forgotten");
}

/// Issue 53, the soak: a server restart cut the owner off for a moment between a tick's claim
/// and its start. Its session outlived the cut, so no other node took the lock and read the
/// record, and the tick was neither run nor recorded. It is kept for the catch-up that follows
/// the reconnection, which claims it again as the same attempt and starts it.
#[test]
fn a_tick_claimed_before_a_cut_its_session_outlives_is_claimed_again_once_back() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    let claim = only_claim(&m.handle(Input::Tick, t(750)));
    m.handle(ok(&claim), t(752));
    m.handle(
        Input::Lock(LockInput::Changed(disconnected_owner(TOKEN))),
        t(900),
    );
    let at_the_tick = but_delayed(m.handle(Input::Tick, t(1000)));
    assert!(starts(&at_the_tick).is_empty(), "{at_the_tick:?}");
    let back = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(1300));
    assert!(
        back.contains(&Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
            "a"
        )))),
        "{back:?}"
    );
    // The listing shows the claim's record as it is: ours, under this token.
    let again = only_claim(&m.handle(listed("a", std::slice::from_ref(&claim.record)), t(1310)));
    assert_eq!(
        (
            again.record.run_id.as_str(),
            again.record.attempt,
            again.mode
        ),
        (
            claim.record.run_id.as_str(),
            1,
            ClaimMode::Again { version: 0 }
        ),
        "the same run, the same attempt, fenced by the claim's version"
    );
    let (started, _) = only_start(&m.handle(ok(&again), t(1320)));
    assert_eq!(started.record.scheduled_unix_ms, t(1000).timestamp_millis());
}

/// Issue 53's soak (seed 1796226811841, three ticks): a tick's claim went unanswered, the next
/// tick was claimed and run once the session answered again, and the lock was lost before the
/// first claim was settled. Its `missed` record, with no lock to send it under, was dropped, and
/// the later run's record hid the tick from the next owner's catch-up. It is now kept and
/// recorded under the token of this node's next turn as owner.
#[test]
fn a_tick_whose_claim_failed_after_the_lock_was_lost_is_recorded_at_the_next_turn() {
    let mut m = owning(&job("a", EVERY_SECOND, "concurrency = \"allow\""));
    let first = only_claim(&m.handle(Input::Tick, t(750)));
    assert_eq!(first.record.scheduled_unix_ms, t(1000).timestamp_millis());
    let second = only_claim(&but_delayed(m.handle(Input::Tick, t(1750))));
    assert_eq!(second.record.scheduled_unix_ms, t(2000).timestamp_millis());
    m.handle(ok(&second), t(1760));
    m.handle(Input::Lock(LockInput::Changed(follower())), t(2500));
    let why = "no response from connection in 1600ms".to_owned();
    let dropped = m.handle(refused(&first, ClaimRefused::Failed(why)), t(2600));
    assert!(
        claims(&dropped).is_empty(),
        "no lock to send it under: {dropped:?}"
    );
    let next = FencingToken(TOKEN.0 + 1);
    m.handle(Input::Lock(LockInput::Changed(owner(next))), t(5000));
    let recorded: Vec<TickClaim> = claims(&m.handle(Input::Tick, t(5001)))
        .into_iter()
        .filter(|claim| claim.record.scheduled_unix_ms == t(1000).timestamp_millis())
        .collect();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].record.status, RunStatus::Missed);
    assert_eq!(recorded[0].record.fencing_token, next);
}

/// The same soak's case when the node that kept the record never owns the lock again (killed
/// before its next turn): the next owner's catch-up finds the tick behind the job's newest
/// record and records it missed, through the fenced claim; a tick of a schedule this node did
/// not fire yet is not looked for.
#[test]
fn the_next_owner_records_a_tick_a_later_run_hides_from_its_catch_up() {
    let tables = job("a", EVERY_SECOND, "concurrency = \"allow\"");
    let takeover = |loaded: i64| {
        let mut m = FireMachine::new(me(), Duration::from_millis(250), &jobs(&tables), t(loaded));
        m.handle(
            Input::Control(ControlInput::PausesRead(Pauses::new())),
            t(loaded),
        );
        let acquired = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(3_500));
        assert!(
            acquired.contains(&Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
                "a"
            )))),
            "{acquired:?}"
        );
        // n2 ran 1 s and 3 s; its record of 2 s never reached the ledger.
        let ran = [
            stored("a", 1_000, "n2", 6, RunStatus::Succeeded),
            stored("a", 3_000, "n2", 6, RunStatus::Succeeded),
        ];
        claims(&m.handle(listed("a", &ran), t(3_510)))
    };
    let recorded = takeover(0);
    let [hole] = &recorded[..] else {
        panic!("one record, of the hidden tick: {recorded:?}");
    };
    assert_eq!(
        (ms_of(hole), hole.record.status, hole.record.fencing_token),
        (2_000, RunStatus::Missed, TOKEN)
    );
    assert_eq!(hole.record.missed_ticks, Some(1));
    assert_eq!(
        takeover(2_500),
        vec![],
        "loaded after the tick: not this node's schedule's to account for"
    );
}

/// Issue 52: where telemetry is on, a run gets its trace at its first claim; where it is off,
/// no record carries one.
#[test]
fn a_run_claimed_where_telemetry_is_on_carries_its_trace() {
    let traced = Me {
        trace_seed: Some(42),
        ..me()
    };
    let mut m = FireMachine::new(
        traced,
        Duration::from_millis(250),
        &jobs(&job("a", EVERY_SECOND, "")),
        t(0),
    );
    m.handle(
        Input::Control(ControlInput::PausesRead(Pauses::new())),
        t(0),
    );
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(0));
    m.handle(listed("a", &[]), t(1));
    let claim = only_claim(&m.handle(Input::Tick, t(750)));
    assert_eq!(
        claim.record.trace,
        Some(crate::run::RunTrace::first(42, &claim.record.run_id))
    );
    let untraced = only_claim(&owning(&job("a", EVERY_SECOND, "")).handle(Input::Tick, t(750)));
    assert_eq!(untraced.record.trace, None, "telemetry off: no trace");
}

/// Issue 31, defect 3: the lock was lost between a tick's claim and its start during an
/// ensemble outage, and the release of the claim's guard got no answer. The session came back
/// with its ephemerals (taken back), so the guard did too: the release is sent again once
/// connected, and a later tick that finds the guard waits for the release's answer (up to the
/// late-tick rule) instead of being skipped as "a run alive on another node".
#[test]
fn issue_31_a_guard_whose_release_got_no_answer_is_released_once_back() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    let claim = only_claim(&m.handle(Input::Tick, t(750)));
    m.handle(ok(&claim), t(751));
    m.handle(
        Input::Lock(LockInput::Changed(disconnected_owner(TOKEN))),
        t(800),
    );
    let release = Action::Claims(ClaimAction::ReleaseGuard(granted(&claim)));
    let at_the_tick = m.handle(Input::Tick, t(1000));
    assert!(at_the_tick.contains(&release), "{at_the_tick:?}");
    let run_id = granted(&claim).record.run_id;
    let unanswered = Input::Claims(ClaimInput::GuardReleased {
        run_id: run_id.clone(),
        settled: false,
    });
    assert_eq!(
        m.handle(unanswered, t(1001)),
        vec![],
        "kept, not retried at once"
    );
    run_timer(&mut m, 3_700);

    // Back with the same session: connected, the lock ours again.
    let back = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(3_700));
    assert!(
        back.contains(&release),
        "sent again once connected: {back:?}"
    );
    // A peer fired the ticks of the outage. The tick whose claim the outage kept from
    // starting is claimed again as the same attempt, and recorded missed: a later one ran.
    let fired = stored("a", 3_000, "n2", 7, RunStatus::Succeeded);
    let rerun = only_claim(&m.handle(listed("a", &[fired]), t(3_710)));
    assert_eq!(
        (ms_of(&rerun), rerun.mode),
        (1_000, ClaimMode::Again { version: 0 })
    );
    let settled = m.handle(ok(&rerun), t(3_711));
    assert!(starts(&settled).is_empty(), "{settled:?}");
    let statuses: Vec<RunStatus> = records_written(&settled)
        .iter()
        .map(|claim| claim.record.status)
        .collect();
    assert_eq!(statuses, [RunStatus::Missed], "{settled:?}");
    let next = only_claim(&m.handle(Input::Tick, t(3_750)));
    assert_eq!(ms_of(&next), 4_000);
    let found = m.handle(refused(&next, ClaimRefused::RunAlive), t(3_760));
    assert_eq!(
        found,
        vec![release.clone()],
        "the release sent again, no skip"
    );
    assert_eq!(
        claims(&m.handle(Input::Tick, t(4_000))),
        vec![],
        "waits for the release's answer"
    );
    let released = Input::Claims(ClaimInput::GuardReleased {
        run_id,
        settled: true,
    });
    let again = only_claim(&m.handle(released, t(4_010)));
    assert_eq!(
        (ms_of(&again), again.record.status),
        (4_000, RunStatus::Running),
        "claimed again once the guard is gone"
    );
    only_start(&m.handle(ok(&again), t(4_020)));
}

#[test]
fn a_claimed_tick_too_late_to_start_is_recorded_missed() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    let claim = only_claim(&m.handle(Input::Tick, t(750)));
    let actions = m.handle(ok(&claim), t(2100));
    assert!(starts(&actions).is_empty());
    match &actions[..] {
        [Action::Claims(ClaimAction::WriteRecord(record))] => {
            assert_eq!(record.record.status, RunStatus::Missed)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_stalled_owner_records_the_ticks_it_slept_through_as_one_gap() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    let gap = only_claim(&m.handle(Input::Tick, t(5300)));
    assert_eq!(
        (gap.record.status, gap.record.missed_ticks, ms_of(&gap)),
        (RunStatus::Missed, Some(5), 5000),
        "ticks 1..5 passed while the node was frozen"
    );
    assert_eq!(
        m.next_deadline(),
        Some(t(5750)),
        "on time again from tick 6"
    );
}

/// Issue 34: a node whose clock moved forward right after it took over (corrected to the
/// servers' clock: `ensemble_clock`) pops ticks its predecessor ran. Those are accounted for by
/// the newest record; only the ticks after it that passed are recorded missed, not a gap
/// claiming ticks that ran.
#[test]
fn late_ticks_at_or_before_the_newest_record_are_not_recorded_missed() {
    let mut m = machine(&job("a", EVERY_SECOND, ""));
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(0));
    let listed = Input::CatchUp(CatchUpInput::Listed {
        job: JobName::new("a"),
        result: Ok(listing(&[stored(
            "a",
            4_000,
            "n2",
            6,
            RunStatus::Succeeded,
        )])),
    });
    m.handle(listed, t(1));
    // The clock jumps 5.3 s forward: ticks 1..5 pop late.
    let actions = m.handle(Input::Tick, t(5_300));
    let newest = t(4_000).timestamp_millis();
    let gaps: Vec<(i64, Option<i64>)> = claims(&actions)
        .iter()
        .map(|claim| (ms_of(claim), claim.record.missed_from_unix_ms))
        .collect();
    assert!(
        gaps.iter()
            .all(|(tick, from)| *tick > 4_000 && from.is_none_or(|from| from > newest)),
        "nothing recorded at or before the newest record (4 s): {gaps:?}"
    );
    assert!(
        gaps.iter().any(|(tick, _)| *tick == 5_000),
        "tick 5 is accounted for: {gaps:?}"
    );
}

#[test]
fn a_failed_claim_of_the_epoch_tells_the_lock() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    let claim = only_claim(&m.handle(Input::Tick, t(750)));
    assert_eq!(
        m.handle(refused(&claim, ClaimRefused::NotOwner), t(752)),
        vec![Action::Lock(LockAction::FenceFailed(TOKEN))]
    );
}

#[test]
fn an_interrupted_run_is_marked_and_rerun_as_the_next_attempt() {
    let mut m = machine(&job("a", "0 * * * * *", "on_interrupted = \"rerun\""));
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(5000));
    let open = stored("a", 0, "n2", 6, RunStatus::Running);
    let listed = Input::CatchUp(CatchUpInput::Listed {
        job: JobName::new("a"),
        result: Ok(listing(std::slice::from_ref(&open))),
    });
    let actions = m.handle(listed, t(5001));
    let [
        Action::CatchUp(CatchUpAction::MarkInterrupted {
            record,
            version: 1,
            closes: false,
        }),
    ] = &actions[..]
    else {
        panic!("{actions:?}")
    };
    assert_eq!(record.status, RunStatus::Interrupted);
    let marked = Input::CatchUp(CatchUpInput::Marked {
        record: Box::new(record.clone()),
        result: Ok(2),
    });
    let rerun = only_claim(&m.handle(marked, t(5003)));
    assert_eq!(rerun.mode, ClaimMode::Again { version: 2 });
    assert_eq!(
        (
            rerun.record.attempt,
            rerun.record.run_id.as_str(),
            rerun.record.fencing_token
        ),
        (2, open.run_id.as_str(), TOKEN)
    );
    let (_, context) = only_start(&m.handle(ok(&rerun), t(5005)));
    assert!(context.resumed);
}

#[test]
fn an_open_record_whose_run_may_still_be_alive_is_left_alone() {
    let extra = "on_interrupted = \"rerun\"\nconcurrency = \"allow\"";
    let mut m = machine(&job("a", "0 * * * * *", extra));
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(5000));
    let open = stored("a", 0, "n2", 6, RunStatus::Running);
    let mut records = listing(&[open]);
    records.live_members.push(NodeId::new("n2"));
    let listed = Input::CatchUp(CatchUpInput::Listed {
        job: JobName::new("a"),
        result: Ok(records),
    });
    assert_eq!(
        m.handle(listed, t(5001)),
        vec![],
        "n2 is alive and may be finishing it"
    );
}

/// The owner of a per-minute job with `retries = 1` and a 2 s backoff, its 60 s tick's run just
/// started: the machine and the run's claim.
fn running_a_job_with_one_retry() -> (FireMachine, Claim) {
    let mut m = owning(&job(
        "a",
        "0 * * * * *",
        "retries = 1\nretry_backoff = \"2s\"",
    ));
    let claim = only_claim(&m.handle(Input::Tick, t(59_750)));
    m.handle(ok(&claim), t(59_751));
    let (run, _) = only_start(&m.handle(Input::Tick, t(60_000)));
    (m, run)
}

/// [`running_a_job_with_one_retry`] after attempt 1 failed at 60 s and its record, which
/// promises attempt 2 at 62.1 s, was written.
fn a_retry_promised() -> (FireMachine, Claim) {
    let (mut m, run) = running_a_job_with_one_retry();
    let failed = end_run(
        &mut m,
        ended(&run, RunOutcome::Exited { code: 3 }, t(60_000)),
        t(60_100),
    );
    m.handle(written(&failed), t(60_105));
    (m, failed)
}

/// The record of job `a` (`extra` its further keys) whose one tick ran and ended `outcome`, its
/// report changed by `edit` first.
fn one_tick_ended(
    extra: &str,
    outcome: RunOutcome,
    edit: impl FnOnce(&mut RunReport),
) -> RunRecord {
    let mut m = owning(&job("a", "0 * * * * *", extra));
    let claim = only_claim(&m.handle(Input::Tick, t(59_750)));
    m.handle(ok(&claim), t(59_751));
    let (run, _) = only_start(&m.handle(Input::Tick, t(60_000)));
    let Input::Claims(ClaimInput::RunEnded { claim, mut report }) = ended(&run, outcome, t(60_000))
    else {
        unreachable!("ended() makes a RunEnded");
    };
    edit(&mut report);
    end_run(
        &mut m,
        Input::Claims(ClaimInput::RunEnded { claim, report }),
        t(60_100),
    )
    .record
}

/// Issue 20: a run's output is kept in its record as `keep_output` says.
#[test]
fn a_runs_output_is_kept_as_keep_output_says() {
    let kept = |extra: &str, outcome: RunOutcome| {
        one_tick_ended(extra, outcome, |report| {
            report.output = "said something\n".into();
        })
        .output
    };
    let failed = RunOutcome::Exited { code: 3 };
    let fine = RunOutcome::Exited { code: 0 };
    let said = Some("said something\n".to_owned());
    assert_eq!(
        kept("", failed.clone()),
        said,
        "a failure keeps it by default"
    );
    assert_eq!(kept("", RunOutcome::TimedOut), said, "so does a time-out");
    assert_eq!(
        kept("", fine.clone()),
        None,
        "a success does not by default"
    );
    assert_eq!(kept("keep_output = \"always\"", fine), said);
    assert_eq!(kept("keep_output = \"never\"", failed), None);
}

/// Issue 23: an HTTP answer is recorded with its status; a target's `Retry-After` sets the
/// retry's instant within the job's backoff bounds, and the doubling stops at the ceiling.
#[test]
fn an_http_answer_is_recorded_and_a_retry_after_is_honoured_within_the_backoff_bounds() {
    let end_with = |extra: &str, outcome: RunOutcome, retry_after: Option<u64>| {
        one_tick_ended(extra, outcome, |report| {
            report.retry_after = retry_after.map(Duration::from_secs);
        })
    };
    let busy = RunOutcome::Responded {
        status: 503,
        body: "busy".into(),
    };
    let bounds = "retries = 5\nretry_backoff = \"2s\"\nretry_backoff_max = \"10s\"";
    let asked = |seconds| end_with(bounds, busy.clone(), seconds).retry_at_unix_ms;
    assert_eq!(
        asked(Some(4)),
        Some(t(64_100).timestamp_millis()),
        "asked: 4 s"
    );
    assert_eq!(
        asked(Some(0)),
        Some(t(62_100).timestamp_millis()),
        "never sooner than retry_backoff"
    );
    assert_eq!(
        asked(Some(3600)),
        Some(t(70_100).timestamp_millis()),
        "never later than retry_backoff_max"
    );
    assert_eq!(
        asked(None),
        Some(t(62_100).timestamp_millis()),
        "the backoff"
    );

    let record = end_with(bounds, busy.clone(), None);
    assert_eq!(
        (record.status, record.http_status, record.output.as_deref()),
        (RunStatus::Failed, Some(503), Some("busy"))
    );
    assert_eq!(record.error.as_deref(), Some("answered HTTP 503"));
    let fine = RunOutcome::Responded {
        status: 204,
        body: String::new(),
    };
    let record = end_with("", fine, None);
    assert_eq!(
        (record.status, record.http_status, record.output),
        (RunStatus::Succeeded, Some(204), None)
    );
    let refused = RunOutcome::RequestFailed {
        error: "connection refused".into(),
    };
    let record = end_with("", refused, None);
    assert_eq!(
        (record.status, record.error.as_deref()),
        (RunStatus::Failed, Some("connection refused"))
    );
}

#[test]
fn the_doubling_backoff_stops_at_retry_backoff_max() {
    let config = jobs(&job(
        "a",
        "0 * * * * *",
        "retries = 20\nretry_backoff = \"1s\"\nretry_backoff_max = \"1m\"",
    ));
    let mut record = RunRecord::claimed(
        &JobName::new("a"),
        0,
        (&NodeId::new("n1"), "10.0.0.1"),
        TOKEN,
        0,
    );
    record.status = RunStatus::Failed;
    let pause = |attempt: u32, record: &mut RunRecord| {
        record.attempt = attempt;
        let at = runs::retry_at(record, &config[0], None, t(0)).expect("attempts remain");
        ms(at) / 1000
    };
    let pauses: Vec<i64> = (1..=8).map(|n| pause(n, &mut record)).collect();
    assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 60, 60]);
}

#[test]
fn a_failed_run_is_retried_after_its_backoff_as_the_next_attempt() {
    let (mut m, run) = running_a_job_with_one_retry();
    let failed = end_run(
        &mut m,
        ended(&run, RunOutcome::Exited { code: 3 }, t(60_000)),
        t(60_100),
    );
    assert_eq!(failed.record.status, RunStatus::Failed);
    assert_eq!(
        failed.record.retry_at_unix_ms,
        Some(t(62_100).timestamp_millis()),
        "the failure's own record says when attempt 2 is due: 2 s after the run ended"
    );
    assert_eq!(
        m.handle(written(&failed), t(60_105)),
        vec![],
        "no prune: a retry is due"
    );
    assert_eq!(m.next_deadline(), Some(t(62_100)));
    let retry = only_claim(&m.handle(Input::Tick, t(62_100)));
    assert_eq!(
        retry.mode,
        ClaimMode::Again {
            version: failed.version + 2
        }
    );
    assert_eq!(retry.record.attempt, 2);
    assert_eq!(retry.record.retry_at_unix_ms, None, "the promise is kept");
    let (retried, context) = only_start(&m.handle(ok(&retry), t(62_107)));
    assert!(!context.resumed);
    let failed = end_run(
        &mut m,
        ended(&retried, RunOutcome::Exited { code: 3 }, t(62_107)),
        t(62_200),
    );
    assert_eq!(
        failed.record.retry_at_unix_ms, None,
        "retries = 1: none promised"
    );
    assert_eq!(
        m.handle(written(&failed), t(62_205)),
        vec![Action::Prune {
            job: JobName::new("a"),
            keep: crate::layout::Keep::Records(100),
            remember: Duration::from_secs(3600),
        }],
        "retries = 1: no third attempt"
    );
}

/// Issue 53's soak (seed 1796260932099): a tick's stored record was gone when its next
/// claim came to write over it (its claim read back as applied after an outage, absent a moment
/// later). Dropped, the tick was neither run nor recorded; it is now recorded `missed` afresh.
#[test]
fn a_tick_whose_stored_record_vanished_is_recorded_missed_afresh() {
    let (mut m, failed) = a_retry_promised();
    let retry = only_claim(&m.handle(Input::Tick, t(62_100)));
    assert!(matches!(retry.mode, ClaimMode::Again { .. }));
    let recorded = claims(&m.handle(refused(&retry, ClaimRefused::Vanished), t(62_110)));
    let [missed] = &recorded[..] else {
        panic!("one record of the tick: {recorded:?}");
    };
    assert_eq!(
        (ms_of(missed), missed.mode, missed.record.status),
        (
            failed.record.scheduled_unix_ms - t(0).timestamp_millis(),
            ClaimMode::Create,
            RunStatus::Missed
        )
    );
    assert!(
        missed
            .record
            .error
            .as_deref()
            .is_some_and(|why| why.contains("vanished")),
        "{missed:?}"
    );
}

/// Issue 24 §1: a retry whose claim finds a run of the job alive (another node's, ending) tries
/// once more as what it is — the stored record at its version, the next attempt — not as a
/// first claim of the tick, which its record would refuse for good.
#[test]
fn a_retry_that_found_a_run_alive_claims_its_record_again_not_a_fresh_tick() {
    let (mut m, failed) = a_retry_promised();
    let retry = only_claim(&m.handle(Input::Tick, t(62_100)));
    let version = failed.version + 2;
    assert_eq!(retry.mode, ClaimMode::Again { version });
    let again = claims(&m.handle(refused(&retry, ClaimRefused::RunAlive), t(62_110)));
    assert_eq!(again.len(), 1, "tried once more at once: {again:?}");
    assert_eq!(again[0].mode, ClaimMode::Again { version });
    assert_eq!(
        (again[0].record.attempt, &again[0].record.run_id),
        (2, &failed.record.run_id)
    );
    // Alive again: the retry is recorded skipped over its own record, at its version.
    let skipped = claims(&m.handle(refused(&again[0], ClaimRefused::RunAlive), t(62_120)));
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].mode, ClaimMode::Again { version });
    assert_eq!(skipped[0].record.status, RunStatus::Skipped);
}

/// Issue 24 §1: a job removed by a reload drops its promised retry when it comes due, and says
/// so in the record (without the promise), so no later owner keeps it either.
#[test]
fn a_retry_of_a_job_that_left_the_schedule_is_dropped_and_recorded() {
    let (mut m, failed) = a_retry_promised();
    m.handle(
        Input::Reloaded(jobs(&job("b", EVERY_SECOND, ""))),
        t(61_000),
    );
    let dropped: Vec<Action> = m
        .handle(Input::Tick, t(62_100))
        .into_iter()
        .filter(|a| matches!(a, Action::Claims(ClaimAction::DropRetry { .. })))
        .collect();
    let [Action::Claims(ClaimAction::DropRetry { record, version })] = dropped.as_slice() else {
        panic!("one dropped retry: {dropped:?}");
    };
    assert_eq!(
        *version,
        failed.version + 2,
        "at the version the retry would claim"
    );
    assert_eq!(record.retry_at_unix_ms, None);
    assert_eq!(
        record.status,
        RunStatus::Failed,
        "the failure stays recorded"
    );
    assert!(
        record
            .error
            .as_deref()
            .is_some_and(|e| e.ends_with("attempt 2 dropped: the job left the schedule")),
        "{record:?}"
    );
    assert_eq!(m.next_deadline().map(|at| at > t(62_100)), Some(true));
}

#[test]
fn replace_cancels_the_running_run_and_starts_when_it_has_ended() {
    let mut m = owning(&job("a", EVERY_SECOND, "concurrency = \"replace\""));
    let first = only_claim(&m.handle(Input::Tick, t(750)));
    assert!(!first.guarded, "replace takes no guard");
    m.handle(ok(&first), t(751));
    let (run, _) = only_start(&m.handle(Input::Tick, t(1000)));
    let second = only_claim(&m.handle(Input::Tick, t(1750)));
    m.handle(ok(&second), t(1751));
    assert_eq!(
        but_delayed(m.handle(Input::Tick, t(2000))),
        vec![Action::Runs(RunAction::Cancel {
            run_id: run.record.run_id.clone()
        })]
    );
    let cancelled = end_run(&mut m, ended(&run, RunOutcome::Cancelled, t(1000)), t(2100));
    assert_eq!(cancelled.record.status, RunStatus::Cancelled);
    let (_, context) = only_start(&m.handle(written(&cancelled), t(2105)));
    assert_eq!(context.scheduled_at, t(2000));
}

#[test]
fn a_stop_withdraws_claimed_ticks_hands_over_then_stops_the_runs() {
    let tables = [job("a", EVERY_SECOND, ""), job("b", "*/2 * * * * *", "")].join("");
    let mut m = owning(&tables);
    let first = claims(&m.handle(Input::Tick, t(750)));
    let first_a = first
        .iter()
        .find(|c| c.record.job.as_str() == "a")
        .expect("a claims");
    m.handle(ok(first_a), t(751));
    let (run, _) = only_start(&m.handle(Input::Tick, t(1000)));
    let due = claims(&m.handle(Input::Tick, t(1750)));
    assert_eq!(due.len(), 2, "a and b at 2 s");
    m.handle(ok(&due[0]), t(1752));
    // Stop with one tick claimed and one claim still out.
    let stop = m.handle(Input::Shutdown, t(1800));
    let granted_first = granted(&due[0]);
    assert_eq!(
        stop,
        vec![
            Action::Runs(RunAction::Unprepare {
                run_id: granted_first.record.run_id.clone()
            }),
            Action::Claims(ClaimAction::Withdraw {
                id: due[0].id,
                claim: granted_first
            })
        ],
        "its prepared process is given up with it"
    );
    let late = m.handle(ok(&due[1]), t(1805));
    assert_eq!(
        late,
        vec![Action::Claims(ClaimAction::Withdraw {
            id: due[1].id,
            claim: granted(&due[1])
        })]
    );
    assert_eq!(
        m.handle(
            Input::Claims(ClaimInput::Withdrawn { id: due[0].id }),
            t(1806)
        ),
        vec![]
    );
    assert_eq!(
        m.handle(
            Input::Claims(ClaimInput::Withdrawn { id: due[1].id }),
            t(1807)
        ),
        vec![Action::Lock(LockAction::HandOver)]
    );
    assert!(
        starts(&m.handle(Input::Tick, t(2000))).is_empty(),
        "no start once stopping"
    );
    assert_eq!(
        m.handle(Input::Lock(LockInput::Released), t(1810)),
        vec![Action::Runs(RunAction::Cancel {
            run_id: run.record.run_id.clone()
        })]
    );
    let finished = end_run(&mut m, ended(&run, RunOutcome::Cancelled, t(1000)), t(1900));
    assert_eq!(m.handle(written(&finished), t(1905)), vec![Action::Stopped]);
}

#[test]
fn a_stop_hands_over_anyway_when_withdrawing_takes_too_long() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    let claim = only_claim(&m.handle(Input::Tick, t(750)));
    assert_eq!(
        m.handle(Input::Shutdown, t(800)),
        vec![],
        "waits for the claim's answer"
    );
    assert_eq!(m.next_deadline(), Some(t(2800)));
    assert_eq!(
        m.handle(Input::Tick, t(2800)),
        vec![Action::Lock(LockAction::HandOver)]
    );
    assert_eq!(
        m.handle(Input::Lock(LockInput::Released), t(2801)),
        vec![Action::Stopped]
    );
    let _ = claim;
}

/// Issue 31, defect 2: the wall clock steps back 20 s while a stop waits for a claim's answer.
/// The stop's limit is a length of time, not an instant of the schedule: it ends 2 s after
/// the stop all the same, not 22 s.
#[test]
fn a_clock_step_does_not_stretch_a_stops_limit() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    only_claim(&m.handle(Input::Tick, t(750)));
    assert_eq!(m.handle(Input::Shutdown, t(800)), vec![]);
    assert_eq!(m.next_deadline(), Some(t(2800)));
    // 200 ms later by the monotonic clock, the wall clock reads 20 s earlier.
    let step = chrono::Duration::seconds(-20);
    m.handle(Input::ClockStepped { by: step }, t(1000) + step);
    assert_eq!(
        m.next_deadline(),
        Some(t(2800) + step),
        "2 s after the stop"
    );
    assert_eq!(
        m.handle(Input::Tick, t(2800) + step),
        vec![Action::Lock(LockAction::HandOver)]
    );
}

/// Brings an owner of job `a` to some work in flight, for the stop table below; returns the
/// answers the driver still gives to it after the stop (each bounded there).
type InFlight = fn(&mut FireMachine) -> Vec<Input>;

/// Claimed at 750 and granted: its run waits prepared for 2000 (claimed ahead of the next tick).
fn granted_ahead(m: &mut FireMachine) -> TickClaim {
    run_timer(m, 1749);
    let claim = only_claim(&m.handle(Input::Tick, t(1750)));
    m.handle(ok(&claim), t(1751));
    claim
}

/// Started at 1000 and alive.
fn started(m: &mut FireMachine) -> Claim {
    let claim = only_claim(&m.handle(Input::Tick, t(750)));
    m.handle(ok(&claim), t(751));
    only_start(&m.handle(Input::Tick, t(1000))).0
}

/// Issue 31: a stop with each kind of work in flight. Nothing answers but what the driver
/// always answers within its bounds (a withdrawal, a final record's write: failed; a guard's
/// release: unsettled), the lock's release and the runs' ends after their cancel; a claim may
/// never be answered at all. Every row hands the lock over within [`WITHDRAW_LIMIT`] of the
/// stop, and stops.
#[test]
fn issue_31_a_stop_ends_whatever_is_in_flight() {
    let rows: [(&str, InFlight); 8] = [
        ("nothing", |_| vec![]),
        ("a claim never answered", |m| {
            run_timer(m, 1749);
            only_claim(&m.handle(Input::Tick, t(1750)));
            vec![]
        }),
        ("a claim granted, its run prepared", |m| {
            granted_ahead(m);
            vec![]
        }),
        ("a run alive", |m| {
            started(m);
            vec![]
        }),
        ("a final record being written", |m| {
            let run = started(m);
            let end = ended(&run, RunOutcome::Exited { code: 0 }, t(1050));
            let finished = end_run(m, end, t(1060));
            // No answer within the driver's request limit.
            let run_id = finished.record.run_id;
            let write = RecordWrite::Failed;
            vec![Input::Claims(ClaimInput::RecordWritten { run_id, write })]
        }),
        ("a final record waiting to be sent again", |m| {
            let run = started(m);
            let end = ended(&run, RunOutcome::Exited { code: 1 }, t(1050));
            let finished = end_run(m, end, t(1060));
            let run_id = finished.record.run_id;
            let write = RecordWrite::Failed;
            m.handle(
                Input::Claims(ClaimInput::RecordWritten { run_id, write }),
                t(1070),
            );
            vec![]
        }),
        ("a guard release unanswered", |m| {
            let claim = granted_ahead(m);
            m.handle(Input::Lock(LockInput::Changed(follower())), t(1800));
            m.handle(Input::Tick, t(2000));
            let run_id = granted(&claim).record.run_id;
            let settled = false;
            m.handle(
                Input::Claims(ClaimInput::GuardReleased { run_id, settled }),
                t(2001),
            );
            m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(2002));
            vec![]
        }),
        ("a catch-up listing failed, relisted during the stop", |m| {
            started(m);
            // Back from a short outage, the catch-up's listing fails: listed again in 5 s,
            // while the stop waits for the run's end.
            m.handle(
                Input::Lock(LockInput::Changed(disconnected_owner(TOKEN))),
                t(1100),
            );
            let back = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(1200));
            assert!(
                back.contains(&Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
                    "a"
                ))))
            );
            let job = JobName::new("a");
            let result = Err("connection loss".to_owned());
            m.handle(
                Input::CatchUp(CatchUpInput::Listed { job, result }),
                t(1210),
            );
            vec![]
        }),
    ];
    for (name, in_flight) in rows {
        let mut m = owning(&job("a", EVERY_SECOND, ""));
        let answers = in_flight(&mut m);
        let stop_at = t(2500);
        let mut inputs = VecDeque::from([Input::Shutdown]);
        inputs.extend(answers);
        let (mut now, mut handed_over_at, mut stopped) = (stop_at, None, false);
        // A cancelled run ends after its job's kill grace (a job that ignores SIGTERM).
        let grace = chrono::Duration::seconds(10);
        let mut ends: Vec<(DateTime<Utc>, Input)> = Vec::new();
        for _ in 0..100 {
            let input = match inputs.pop_front() {
                Some(input) => input,
                None => {
                    let deadline = m.next_deadline();
                    assert!(
                        deadline.is_none_or(|at| at > now || at == stop_at),
                        "{name}: a deadline left in the past: {deadline:?} at {now}"
                    );
                    let end = ends.first().map(|(at, _)| *at);
                    match (deadline, end) {
                        (Some(at), Some(end)) if end <= at => {
                            now = now.max(end);
                            ends.remove(0).1
                        }
                        (Some(at), _) => {
                            now = now.max(at);
                            Input::Tick
                        }
                        (None, Some(end)) => {
                            now = now.max(end);
                            ends.remove(0).1
                        }
                        (None, None) => break,
                    }
                }
            };
            for action in m.handle(input, now) {
                match action {
                    Action::Lock(LockAction::HandOver) => {
                        handed_over_at = Some(now);
                        inputs.push_back(Input::Lock(LockInput::Released));
                    }
                    Action::Claims(ClaimAction::Withdraw { id, .. }) => {
                        inputs.push_back(Input::Claims(ClaimInput::Withdrawn { id }))
                    }
                    Action::Claims(ClaimAction::WriteRecord(claim)) => {
                        inputs.push_back(Input::Claims(ClaimInput::RecordWritten {
                            run_id: claim.record.run_id,
                            write: RecordWrite::Failed,
                        }))
                    }
                    Action::Claims(ClaimAction::ReleaseGuard(claim)) => {
                        inputs.push_back(Input::Claims(ClaimInput::GuardReleased {
                            run_id: claim.record.run_id,
                            settled: false,
                        }))
                    }
                    Action::Runs(RunAction::Cancel { run_id }) => {
                        // The run started at 1000 ends as its cancel stops it.
                        let mut record = stored("a", 1000, "n1", TOKEN.0, RunStatus::Running);
                        record.run_id = run_id;
                        let run = Claim {
                            path: String::new(),
                            version: 1,
                            record: record.clone(),
                            guard: None,
                            open: None,
                            children: Vec::new(),
                            payload: None,
                            session: SessionId(1),
                            sent: record,
                        };
                        ends.push((now + grace, ended(&run, RunOutcome::Cancelled, now)));
                    }
                    Action::Stopped => stopped = true,
                    _ => {}
                }
            }
            if stopped {
                break;
            }
        }
        let limit = stop_at + chrono::Duration::from_std(WITHDRAW_LIMIT).expect("fits");
        let handed_over_at = handed_over_at.unwrap_or_else(|| panic!("{name}: never handed over"));
        assert!(
            handed_over_at <= limit,
            "{name}: handed over at {handed_over_at}"
        );
        assert!(stopped, "{name}: never stopped");
    }
}

#[test]
fn a_reloaded_schedule_never_repeats_a_tick() {
    let tables = job("a", EVERY_SECOND, "");
    let mut m = owning(&tables);
    let claim = only_claim(&m.handle(Input::Tick, t(750)));
    assert_eq!(ms_of(&claim), 1000);
    m.handle(Input::Reloaded(jobs(&tables)), t(800));
    // A reload reads the delayed submissions' buckets afresh, at once; no tick comes with it.
    assert_eq!(but_delayed(m.handle(Input::Tick, t(800))), vec![]);
    assert_eq!(
        m.next_deadline(),
        Some(t(1750)),
        "1 s was handed out already"
    );
    let added = [tables.clone(), job("b", EVERY_SECOND, "")].join("");
    assert_eq!(
        m.handle(Input::Reloaded(jobs(&added)), t(900)),
        vec![Action::CatchUp(CatchUpAction::PrepareJobs(vec![
            JobName::new("b")
        ]))]
    );
}

#[test]
fn ticks_that_come_while_catch_up_decides_wait_behind_it() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    m.handle(
        Input::Lock(LockInput::Changed(disconnected_owner(TOKEN))),
        t(100),
    );
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(700));
    assert!(
        claims(&m.handle(Input::Tick, t(750))).is_empty(),
        "held: catch-up is deciding"
    );
    let listed = listed("a", &[stored("a", 0, "n1", 7, RunStatus::Succeeded)]);
    let claim = only_claim(&m.handle(listed, t(760)));
    assert_eq!(ms_of(&claim), 1000);
}

#[test]
fn a_catch_up_whose_listing_fails_fires_what_it_held() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    m.handle(
        Input::Lock(LockInput::Changed(disconnected_owner(TOKEN))),
        t(100),
    );
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(700));
    m.handle(Input::Tick, t(750));
    let failed = Input::CatchUp(CatchUpInput::Listed {
        job: JobName::new("a"),
        result: Err("connection loss".into()),
    });
    assert_eq!(ms_of(&only_claim(&m.handle(failed, t(760)))), 1000);
}

#[test]
fn a_failed_catch_up_listing_is_tried_again_while_the_node_may_fire() {
    // What a dead owner left open (a claimed submission it never started, a run to mark
    // interrupted) is found by the listing: a listing that timed out must not leave it for the
    // next change of the lock.
    let mut m = machine(&job("a", "0 0 * * * *", ""));
    let acquired = but_delayed(m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(0)));
    assert!(
        acquired.contains(&Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
            "a"
        ))))
    );
    let failed = Input::CatchUp(CatchUpInput::Listed {
        job: JobName::new("a"),
        result: Err("no answer in time".into()),
    });
    assert_eq!(but_delayed(m.handle(failed, t(10_000))), vec![]);
    let again = t(10_000) + chrono::Duration::from_std(RELIST_AFTER).expect("small");
    assert_eq!(m.next_deadline(), Some(again));
    assert_eq!(
        but_delayed(m.handle(Input::Tick, again)),
        vec![Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
            "a"
        )))]
    );
    // Answered this time: nothing more to list.
    m.handle(listed("a", &[]), again);
    assert_ne!(m.next_deadline(), Some(again));

    // Not listed again once the node may no longer fire.
    let failed = Input::CatchUp(CatchUpInput::Listed {
        job: JobName::new("a"),
        result: Err("no answer in time".into()),
    });
    let mut m2 = machine(&job("a", "0 0 * * * *", ""));
    m2.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(0));
    m2.handle(failed, t(1_000));
    m2.handle(Input::Lock(LockInput::Changed(follower())), t(2_000));
    let later = t(1_000) + chrono::Duration::from_std(RELIST_AFTER).expect("small");
    assert!(
        !m2.handle(Input::Tick, later)
            .iter()
            .any(|a| matches!(a, Action::CatchUp(CatchUpAction::ListRecords(_)))),
        "a follower lists nothing"
    );
}

/// Issue 24: a node whose clock is 15 s behind takes over from an owner that recorded ticks up
/// to 25 s (its own clock). Records are kept by count, so those of 11 s to 20 s may be pruned
/// already: the claim alone would not stop them. No tick at or before the newest recorded one
/// is claimed; the first claim is the tick after it, and from then on every tick in order.
#[test]
fn a_node_whose_clock_is_behind_claims_nothing_at_or_before_the_newest_recorded_tick() {
    let mut m = machine(&job("a", EVERY_SECOND, "history = 5"));
    m.handle(Input::Lock(LockInput::Changed(follower())), t(0));
    run_timer(&mut m, 9_900);
    let listing = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(10_000));
    assert!(
        listing.contains(&Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
            "a"
        )))),
        "{listing:?}"
    );
    // Its ticks come while the listing is out: they wait behind catch-up.
    let mut claimed = Vec::new();
    for at in [10_750, 11_750] {
        claimed.extend(claims(&m.handle(Input::Tick, t(at))));
    }
    let newest: Vec<RunRecord> = (21_000..=25_000)
        .step_by(1000)
        .map(|tick| stored("a", tick, "n2", 6, RunStatus::Succeeded))
        .collect();
    claimed.extend(claims(&m.handle(listed("a", &newest), t(12_000))));
    let mut now = 12_000;
    while now < 28_000 {
        let Some(at) = m.next_deadline() else { break };
        now = ms(at);
        let actions = m.handle(Input::Tick, at);
        for claim in claims(&actions) {
            claimed.push(claim.clone());
            m.handle(ok(&claim), at);
        }
    }
    let ticks: Vec<i64> = claimed.iter().map(ms_of).collect();
    assert!(
        ticks.iter().all(|tick| *tick > 25_000),
        "nothing at or before the newest recorded tick (25 s) is claimed: {ticks:?}"
    );
    assert_eq!(
        ticks.first(),
        Some(&26_000),
        "the first claim is the tick after it: {ticks:?}"
    );
    assert!(ticks.windows(2).all(|w| w[0] < w[1]), "in order: {ticks:?}");
}

/// A failed run's record, from `node` under `token`, that promises its next attempt at `at_ms`.
fn failed_promising_a_retry(tick_ms: i64, at_ms: i64) -> RunRecord {
    let mut record = stored("a", tick_ms, "n2", 6, RunStatus::Failed);
    record.exit_code = Some(3);
    record.retry_at_unix_ms = Some(t(at_ms).timestamp_millis());
    record
}

/// Issue 24: the owner that ran attempt 1 died during the backoff. The retry it promised is in
/// the failed run's record; the new owner keeps it at its time, as attempt 2 through the fenced
/// claim (a compare-and-set of that very record), resumed.
#[test]
fn a_retry_promised_in_the_ledger_is_kept_by_the_next_owner_at_its_time() {
    let mut m = machine(&job(
        "a",
        "0 0 * * * *",
        "retries = 3\nretry_backoff = \"6s\"",
    ));
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(2_000));
    let failed = failed_promising_a_retry(0, 6_000);
    let listed = m.handle(listed("a", std::slice::from_ref(&failed)), t(2_000));
    assert!(
        claims(&listed).is_empty(),
        "not before its time: {listed:?}"
    );
    assert_eq!(m.next_deadline(), Some(t(6_000)));
    let retry = only_claim(&m.handle(Input::Tick, t(6_000)));
    assert_eq!(retry.mode, ClaimMode::Again { version: 1 });
    assert_eq!(
        (retry.record.attempt, retry.record.run_id.as_str()),
        (2, failed.run_id.as_str()),
        "the same run's next attempt"
    );
    let (_, context) = only_start(&m.handle(ok(&retry), t(6_002)));
    assert!(
        context.resumed,
        "ZKCRON_RESUMED=1: kept from an earlier owner"
    );
    assert_eq!(context.attempt, 2);
}

/// Issue 24: a promised retry found later than the job's starting_deadline is recorded missed,
/// over the failed record, through the same claim; it does not start.
#[test]
fn a_promised_retry_past_its_starting_deadline_is_recorded_missed() {
    let mut m = machine(&job(
        "a",
        "0 0 * * * *",
        "retries = 3\nstarting_deadline = \"10s\"",
    ));
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(60_000));
    let failed = failed_promising_a_retry(0, 6_000);
    let missed = only_claim(&m.handle(listed("a", &[failed]), t(60_000)));
    assert_eq!(missed.mode, ClaimMode::Again { version: 1 });
    assert_eq!(
        (missed.record.status, missed.record.attempt),
        (RunStatus::Missed, 2)
    );
    assert!(
        missed
            .record
            .error
            .as_deref()
            .is_some_and(|e| e.contains("starting_deadline")),
        "{:?}",
        missed.record.error
    );
    assert!(
        starts(&m.handle(ok(&missed), t(60_010))).is_empty(),
        "a record, not a run"
    );
}

/// Issue 24: a stopping owner still writes the promise with the failure, and leaves the retry
/// to the next owner instead of dropping it.
#[test]
fn a_stopping_owner_records_the_promised_retry_and_leaves_it() {
    let (mut m, run) = running_a_job_with_one_retry();
    m.handle(Input::Shutdown, t(60_050));
    let failed = end_run(
        &mut m,
        ended(&run, RunOutcome::Exited { code: 3 }, t(60_000)),
        t(60_100),
    );
    assert_eq!(
        failed.record.retry_at_unix_ms,
        Some(t(62_100).timestamp_millis()),
        "promised in the ledger"
    );
    m.handle(written(&failed), t(60_105));
    assert!(
        m.next_deadline().is_none_or(|at| at != t(62_100)),
        "not kept here: this node is stopping"
    );
}

#[test]
fn a_tick_whose_later_tick_won_the_guard_is_recorded_skipped_not_dropped() {
    // After a takeover, the caught-up run holds the guard while two declined ticks wait for it.
    // Woken together by its record, the later claim can win: the earlier tick must still end
    // recorded (it was dropped as "behind the ledger", leaving a tick with no record).
    let (mut m, _, actions) = caught_up_after_a_disconnect(3750, 3800);
    let (run, _) = only_start(&actions);
    let declined = claims(&actions);
    assert_eq!(declined.iter().map(ms_of).collect::<Vec<_>>(), [3000, 4000]);
    for claim in &declined {
        m.handle(refused(claim, ClaimRefused::RunAlive), t(3822));
    }
    let end = m.handle(
        ended(&run, RunOutcome::Exited { code: 0 }, t(3820)),
        t(3900),
    );
    let Action::Claims(ClaimAction::WriteRecord(finished)) = &end[0] else {
        panic!("{end:?}")
    };
    let again = claims(&m.handle(written(finished), t(3910)));
    assert_eq!(
        again.iter().map(ms_of).collect::<Vec<_>>(),
        [3000, 4000],
        "the earliest tick first"
    );
    let (_, later) = only_start(&m.handle(ok(&again[1]), t(4010)));
    assert_eq!(later.scheduled_at, t(4000));
    let skipped = only_claim(&m.handle(refused(&again[0], ClaimRefused::RunAlive), t(4012)));
    assert_eq!(
        (ms_of(&skipped), skipped.record.status),
        (3000, RunStatus::Skipped),
        "recorded, not dropped"
    );
}

/// Issue 53: a claim that was not applied (its connection lost, read back absent) while the
/// node keeps the lock. The tick is claimed once more while on time; failing again, or too
/// late, it is recorded `missed` with why — never dropped, neither run nor recorded.
#[test]
fn a_claim_not_applied_is_claimed_once_more_then_recorded_missed() {
    let failed = || ClaimRefused::Failed("connection lost; read back: not applied".to_owned());
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    let first = only_claim(&m.handle(Input::Tick, t(750)));
    let again = only_claim(&m.handle(refused(&first, failed()), t(800)));
    assert_eq!(
        (ms_of(&again), again.record.status),
        (1000, first.record.status),
        "the same tick, claimed once more"
    );
    let missed = only_claim(&m.handle(refused(&again, failed()), t(900)));
    assert_eq!(
        (ms_of(&missed), missed.record.status),
        (1000, RunStatus::Missed)
    );
    assert!(
        missed
            .record
            .error
            .as_deref()
            .is_some_and(|why| why.contains("its claim failed") && why.contains("connection lost")),
        "{:?}",
        missed.record.error
    );

    // Answered past the late-tick rule: recorded at once, not claimed again.
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    let first = only_claim(&m.handle(Input::Tick, t(750)));
    let late = only_claim(&m.handle(refused(&first, failed()), t(2_100)));
    assert_eq!(
        (ms_of(&late), late.record.status),
        (1000, RunStatus::Missed)
    );
}
