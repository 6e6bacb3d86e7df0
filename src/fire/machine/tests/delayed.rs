//! Delayed submissions on the virtual clock: read by bucket, claimed ahead and started at their
//! time through the one claim path, resumed or recorded missed after an outage, noticed through
//! the watch, kept for a job that is away.

use super::*;
use crate::delayed::submission::{DueBucket, Submission, SubmissionId};
use crate::fire::machine::{Scanned, StartWrite};

const ON_DEMAND: &str = "[[job]]\nname = \"close\"\nshell = \"cat\"\nstarting_deadline = \"10s\"\n";
/// [`ON_DEMAND`] whose runs replace each other: its submissions are claimed `claim_ahead` early
/// and written `running` at their start (`StartWrite::Before`), as those of any job whose start
/// may wait after its claim are.
const ON_DEMAND_AHEAD: &str = "[[job]]\nname = \"close\"\nshell = \"cat\"\nstarting_deadline = \"10s\"\nconcurrency = \"replace\"\n";

fn id(text: &str) -> SubmissionId {
    SubmissionId::parse(text).expect("valid id")
}

fn submission(job: &str, due_ms: i64, payload: &[u8]) -> Submission {
    Submission {
        job: JobName::new(job),
        due_unix_ms: t(due_ms).timestamp_millis(),
        submitted_unix_ms: t(0).timestamp_millis(),
        payload: payload.to_vec(),
        requested_by: None,
        anonymous: false,
        marker_names_job: false,
        retry_of: None,
        traceparent: None,
        after: None,
    }
}

/// The one scan among `actions`.
fn scan(actions: &[Action]) -> (u64, Option<DueBucket>, DueBucket) {
    let scans: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Delayed(DelayedAction::Scan {
                generation,
                after,
                through,
                ..
            }) => Some((*generation, *after, *through)),
            _ => None,
        })
        .collect();
    assert_eq!(scans.len(), 1, "one scan in {actions:?}");
    scans[0]
}

/// How far the one scan among `actions` reads on while the buckets are empty.
fn ahead_to(actions: &[Action]) -> DueBucket {
    let ahead: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Delayed(DelayedAction::Scan { ahead_to, .. }) => Some(*ahead_to),
            _ => None,
        })
        .collect();
    assert_eq!(ahead.len(), 1, "one scan in {actions:?}");
    ahead[0]
}

/// A machine of `tables` whose driver's watch on the due buckets is set.
fn watched(tables: &str) -> FireMachine {
    let mut m = machine(tables);
    m.handle(
        Input::Delayed(DelayedInput::DueWatch { watching: true }),
        t(-1000),
    );
    m
}

/// The watch's report of a new marker `id` (naming no job) in `bucket`.
fn created(bucket: DueBucket, id_text: &str) -> Input {
    Input::Delayed(DelayedInput::Created {
        bucket,
        id: id(id_text),
        job: None,
    })
}

/// A machine of [`ON_DEMAND`] that acquired the lock at t(0), and that acquisition's actions
/// (its first scan among them).
fn acquired_at_zero() -> (FireMachine, Vec<Action>) {
    let mut m = watched(ON_DEMAND);
    let acquired = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(0));
    (m, acquired)
}

/// An owner of `tables` whose first scan (from the oldest bucket, at `at_ms`) found `found`.
fn owning_with(
    tables: &str,
    at_ms: i64,
    found: Vec<(SubmissionId, Submission)>,
) -> (FireMachine, Vec<Action>) {
    let mut m = watched(tables);
    let acquired = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(at_ms));
    let (generation, after, through) = scan(&acquired);
    assert_eq!(after, None, "the first scan reads from the oldest bucket");
    assert_eq!(
        through,
        DueBucket::of(t(at_ms + 2000).timestamp_millis()),
        "through the horizon"
    );
    for action in acquired {
        if let Action::CatchUp(CatchUpAction::ListRecords(job)) = action {
            m.handle(
                Input::CatchUp(CatchUpInput::Listed {
                    job,
                    result: Ok(JobRecords::default()),
                }),
                t(at_ms),
            );
        }
    }
    let answer = scanned(generation, through, found);
    let actions = m.handle(answer, t(at_ms));
    (m, actions)
}

#[test]
fn a_submission_is_claimed_ahead_and_started_at_its_due_time_with_its_payload() {
    let due = submission("close", 1500, b"{\"order\":42}");
    let (mut m, actions) = owning_with(ON_DEMAND_AHEAD, 0, vec![(id("order-42"), due)]);
    assert!(claims(&actions).is_empty(), "not yet: {actions:?}");
    assert_eq!(
        m.next_deadline(),
        Some(t(1000)),
        "the next bucket's read comes first"
    );
    assert!(claims(&m.handle(Input::Tick, t(1000))).is_empty());
    assert_eq!(m.next_deadline(), Some(t(1250)), "claimed 250 ms ahead");
    let claim = only_claim(&m.handle(Input::Tick, t(1250)));
    assert_eq!(claim.record.submission_id, Some(id("order-42")));
    assert_eq!(claim.record.scheduled_unix_ms, t(1500).timestamp_millis());
    assert_eq!(claim.record.run_id, "close-1893456001500-order-42");
    assert_eq!(
        (claim.mode, claim.guarded, claim.record.status),
        (ClaimMode::Create, false, RunStatus::Claimed),
        "no guard (replace); claimed, not yet running"
    );
    assert!(
        starts(&m.handle(ok(&claim), t(1260))).is_empty(),
        "not before its time"
    );
    let (_, context) = only_start(&m.handle(Input::Tick, t(1500)));
    let input = context.submission.expect("a submission's run");
    assert_eq!(
        (input.id.as_str(), &input.payload[..]),
        ("order-42", &b"{\"order\":42}"[..])
    );
    assert_eq!((context.scheduled_at, context.resumed), (t(1500), false));
}

/// Issue 33: a submission of a job whose start waits for nothing after its claim (no limit,
/// `concurrency = "allow"`) is claimed at its instant, its claim saying `running`, and starts on
/// the claim's answer with no other write in front.
#[test]
fn a_submission_is_claimed_at_its_instant_saying_running_and_started_on_its_answer() {
    let due = submission("close", 1500, b"{\"order\":42}");
    let (mut m, _) = owning_with(ON_DEMAND, 0, vec![(id("order-42"), due)]);
    run_timer(&mut m, 1000);
    assert_eq!(m.next_deadline(), Some(t(1500)), "claimed at its instant");
    let claim = only_claim(&m.handle(Input::Tick, t(1500)));
    assert_eq!(
        (claim.record.status, claim.record.started_unix_ms),
        (RunStatus::Running, Some(t(1500).timestamp_millis()))
    );
    let start = m.handle(ok(&claim), t(1503));
    let [
        Action::Runs(RunAction::Start {
            record, context, ..
        }),
    ] = &start[..]
    else {
        panic!("{start:?}")
    };
    assert_eq!(*record, StartWrite::InClaim);
    let input = context.submission.as_ref().expect("a submission's run");
    assert_eq!(&input.payload[..], &b"{\"order\":42}"[..]);
    assert_eq!((context.scheduled_at, context.resumed), (t(1500), false));
}

/// An owner that claimed submission `order-42` of `close`, due at 1500, ahead, and started it
/// then, its record written `running` in front of the start.
fn a_submission_started_at_1500() -> (FireMachine, Claim) {
    let due = submission("close", 1500, b"order");
    let (mut m, _) = owning_with(ON_DEMAND_AHEAD, 0, vec![(id("order-42"), due)]);
    run_timer(&mut m, 1000);
    let claim = only_claim(&m.handle(Input::Tick, t(1250)));
    m.handle(ok(&claim), t(1260));
    let (started, _) = only_start(&m.handle(Input::Tick, t(1500)));
    (m, started)
}

/// Issue 31, defect 3: a submission's run whose record could not be marked `running` (the
/// ensemble went away between its claim and its start) never started its process. It is not
/// recorded `failed`: it is claimed again as the same attempt, at once while this node can
/// fire, else by the next catch-up.
#[test]
fn a_submission_whose_record_could_not_be_marked_running_is_run_again_as_the_same_attempt() {
    let (mut m, started) = a_submission_started_at_1500();
    let not_started = Input::Claims(ClaimInput::RunNotStarted {
        claim: Box::new(started.clone()),
        why: "no answer from zookeeper".to_owned(),
        maybe_written: false,
    });
    let actions = m.handle(not_started, t(1600));
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::Claims(ClaimAction::WriteRecord(_)))),
        "nothing recorded: the record still says claimed, {actions:?}"
    );
    let again = only_claim(&actions);
    assert_eq!(again.mode, ClaimMode::Again { version: 0 });
    assert_eq!(
        (again.record.run_id.as_str(), again.record.attempt),
        (started.record.run_id.as_str(), 1),
        "the same run, the same attempt"
    );
    let (_, context) = only_start(&m.handle(ok(&again), t(1610)));
    assert_eq!(
        context.submission.expect("its payload").payload[..],
        b"order"[..]
    );

    // The same, while the node cannot fire: kept for the catch-up that follows.
    let (started, _) = (granted(&again), ());
    m.handle(
        Input::Lock(LockInput::Changed(disconnected_owner(TOKEN))),
        t(1700),
    );
    let later = Input::Claims(ClaimInput::RunNotStarted {
        claim: Box::new(started.clone()),
        why: "no answer from zookeeper".to_owned(),
        maybe_written: false,
    });
    assert!(
        claims(&m.handle(later, t(1800))).is_empty(),
        "not while it cannot fire"
    );
    let back = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(3000));
    assert!(
        back.contains(&Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
            "close"
        ))))
    );
    // The listing shows the record as it is: claimed, by our token.
    let mut record = started.record.clone();
    record.status = RunStatus::Claimed;
    let taken = only_claim(&m.handle(listed("close", &[record]), t(3010)));
    assert_eq!(
        (
            taken.record.run_id.as_str(),
            taken.record.attempt,
            taken.mode
        ),
        (
            started.record.run_id.as_str(),
            1,
            ClaimMode::Again { version: 0 }
        ),
        "claimed again by the catch-up, once"
    );
}

/// Issue 31, defect 3: the `running` write of a run that never started was applied, and its
/// answer lost in the outage. Its claim again at the claimed version is refused; it is tried
/// once at the version the write made, and runs.
#[test]
fn a_run_whose_running_write_landed_unanswered_is_claimed_at_that_version() {
    let (mut m, started) = a_submission_started_at_1500();
    let not_started = Input::Claims(ClaimInput::RunNotStarted {
        claim: Box::new(started),
        why: "no answer from zookeeper".to_owned(),
        maybe_written: true,
    });
    let again = only_claim(&m.handle(not_started, t(1600)));
    assert_eq!(again.mode, ClaimMode::Again { version: 0 });
    let at_running = only_claim(&m.handle(refused(&again, ClaimRefused::AlreadyClaimed), t(1610)));
    assert_eq!(
        (at_running.mode, at_running.record.attempt),
        (ClaimMode::Again { version: 1 }, 1),
        "at the version the running write made, as the same attempt"
    );
    only_start(&m.handle(ok(&at_running), t(1620)));
}

#[test]
fn overdue_submissions_resume_at_once_and_those_beyond_the_deadline_are_recorded_missed() {
    let found = vec![
        (id("late"), submission("close", 5000, b"")),
        (id("too-late"), submission("close", 1000, b"")),
        (id("on-time"), submission("close", 12_500, b"")),
    ];
    let (mut m, actions) = owning_with(ON_DEMAND, 12_000, found);
    let all = claims(&actions);
    let missed: Vec<_> = all
        .iter()
        .filter(|c| c.record.status == RunStatus::Missed)
        .collect();
    assert_eq!(missed.len(), 1, "{all:?}");
    assert_eq!(missed[0].record.submission_id, Some(id("too-late")));
    assert!(
        missed[0]
            .record
            .error
            .as_deref()
            .is_some_and(|e| e.contains("starting_deadline")),
        "{:?}",
        missed[0].record
    );
    let late: Vec<_> = all
        .iter()
        .filter(|c| c.record.status == RunStatus::Running)
        .collect();
    assert_eq!(
        late.len(),
        1,
        "the late one, claimed running; the other waits for its instant: {all:?}"
    );
    let resumed = late
        .iter()
        .find(|c| c.record.submission_id == Some(id("late")))
        .expect("the late one is claimed");
    let (_, context) = only_start(&m.handle(ok(resumed), t(12_010)));
    assert!(
        context.resumed,
        "overdue when the node could fire: ZKCRON_RESUMED=1"
    );
    assert!(claims(&m.handle(Input::Tick, t(12_250))).is_empty());
    let on_time = only_claim(&m.handle(Input::Tick, t(12_500)));
    assert_eq!(on_time.record.submission_id, Some(id("on-time")));
    let (_, context) = only_start(&m.handle(ok(&on_time), t(12_502)));
    assert!(!context.resumed);
}

#[test]
fn the_watch_brings_a_new_submission_of_a_read_bucket_and_later_buckets_wait_for_the_horizon() {
    let (mut m, _) = owning_with(ON_DEMAND_AHEAD, 0, vec![]);
    let read = DueBucket::of(t(1000).timestamp_millis());
    assert_eq!(
        m.handle(created(read, "soon"), t(100)),
        vec![Action::Delayed(DelayedAction::ReadSubmission {
            id: id("soon")
        })]
    );
    let later = DueBucket::of(t(9000).timestamp_millis());
    assert_eq!(
        m.handle(created(later, "later"), t(100)),
        vec![],
        "read when the horizon reaches its bucket"
    );
    let answered = Input::Delayed(DelayedInput::Read {
        id: id("soon"),
        result: Ok(Some(submission("close", 1200, b""))),
    });
    assert!(claims(&m.handle(answered, t(120))).is_empty());
    let claim = only_claim(&m.handle(Input::Tick, t(950)));
    assert_eq!(claim.record.submission_id, Some(id("soon")));
    // The same id reported again (a scan racing the watch, or a reschedule) is read again, and
    // not claimed twice.
    assert_eq!(
        m.handle(created(read, "soon"), t(960)),
        vec![Action::Delayed(DelayedAction::ReadSubmission {
            id: id("soon")
        })]
    );
    let again = Input::Delayed(DelayedInput::Read {
        id: id("soon"),
        result: Ok(Some(submission("close", 1200, b""))),
    });
    assert!(claims(&m.handle(again, t(961))).is_empty());
}

/// A reschedule (issue 20) moves a queued submission's marker: the watch reports the new one,
/// the read finds the new due time, and the submission is claimed then, not at the old time.
#[test]
fn a_rescheduled_submission_is_claimed_at_its_new_time() {
    let (mut m, _) = owning_with(ON_DEMAND_AHEAD, 0, vec![]);
    let read = DueBucket::of(t(1000).timestamp_millis());
    let created = |id: &str| {
        Input::Delayed(DelayedInput::Created {
            bucket: read,
            id: crate::delayed::submission::SubmissionId::parse(id).expect("id"),
            job: None,
        })
    };
    m.handle(created("moved"), t(100));
    let first = Input::Delayed(DelayedInput::Read {
        id: id("moved"),
        result: Ok(Some(submission("close", 1200, b""))),
    });
    assert!(claims(&m.handle(first, t(120))).is_empty());
    // Moved to t(1800) before its claim went out.
    assert_eq!(
        m.handle(created("moved"), t(200)),
        vec![Action::Delayed(DelayedAction::ReadSubmission {
            id: id("moved")
        })]
    );
    let moved = Input::Delayed(DelayedInput::Read {
        id: id("moved"),
        result: Ok(Some(submission("close", 1800, b""))),
    });
    assert!(claims(&m.handle(moved, t(201))).is_empty());
    assert!(
        claims(&m.handle(Input::Tick, t(950))).is_empty(),
        "not claimed at its old time"
    );
    run_timer(&mut m, 1500);
    let claim = only_claim(&m.handle(Input::Tick, t(1550)));
    assert_eq!(claim.record.scheduled_unix_ms, t(1800).timestamp_millis());
}

/// Moved while the claim of its old time is out: that claim finds no marker, and the
/// submission is queued at its new time.
#[test]
fn a_submission_moved_under_its_claim_is_queued_at_its_new_time() {
    let (mut m, _) = owning_with(ON_DEMAND_AHEAD, 0, vec![]);
    let read = DueBucket::of(t(1000).timestamp_millis());
    m.handle(created(read, "moved"), t(100));
    let first = Input::Delayed(DelayedInput::Read {
        id: id("moved"),
        result: Ok(Some(submission("close", 1200, b""))),
    });
    m.handle(first, t(120));
    let claim = only_claim(&m.handle(Input::Tick, t(950)));
    let moved = Input::Delayed(DelayedInput::Read {
        id: id("moved"),
        result: Ok(Some(submission("close", 5000, b""))),
    });
    m.handle(created(read, "moved"), t(951));
    assert!(claims(&m.handle(moved, t(952))).is_empty());
    let lost = Input::Claims(ClaimInput::Done {
        id: claim.id,
        result: Err(ClaimRefused::AlreadyClaimed),
    });
    assert!(claims(&m.handle(lost, t(960))).is_empty());
    let again = only_claim(&m.handle(Input::Tick, t(4750)));
    assert_eq!(again.record.scheduled_unix_ms, t(5000).timestamp_millis());
    assert_eq!(again.record.submission_id, Some(id("moved")));
}

#[test]
fn the_next_bucket_is_read_when_the_horizon_reaches_it() {
    // The first scan stopped at second 2, which held a submission.
    let (mut m, _) = owning_with(ON_DEMAND, 0, vec![]);
    // Second 3 enters the 2 s horizon at t(1000).
    assert_eq!(m.next_deadline(), Some(t(1000)));
    let actions = m.handle(Input::Tick, t(1000));
    let (_, after, through) = scan(&actions);
    assert_eq!(after, Some(DueBucket::of(t(2000).timestamp_millis())));
    assert_eq!(through, DueBucket::of(t(3000).timestamp_millis()));
    assert_eq!(
        ahead_to(&actions),
        DueBucket::of(t(61_000).timestamp_millis()),
        "then on for a minute while the buckets are empty"
    );
}

#[test]
fn an_empty_queue_is_read_a_minute_at_a_time() {
    let (mut m, acquired) = acquired_at_zero();
    let (generation, _, _) = scan(&acquired);
    let ahead = ahead_to(&acquired);
    assert_eq!(ahead, DueBucket::of(t(60_000).timestamp_millis()));
    m.handle(scanned(generation, ahead, vec![]), t(5));
    // The bucket after the last one read enters the 2 s horizon at t(59 000): no wake before.
    assert_eq!(m.next_deadline(), Some(t(59_000)));
    let actions = m.handle(Input::Tick, t(59_000));
    let (_, after, _) = scan(&actions);
    assert_eq!(after, Some(ahead));
    // A submission made meanwhile into a bucket already read is reported by the watch.
    let created = created(DueBucket::of(t(30_000).timestamp_millis()), "late");
    assert_eq!(
        m.handle(created, t(59_010)),
        vec![Action::Delayed(DelayedAction::ReadSubmission {
            id: id("late")
        })]
    );
}

#[test]
fn a_watch_that_began_again_has_every_bucket_read_again() {
    let (mut m, acquired) = acquired_at_zero();
    let (generation, _, _) = scan(&acquired);
    m.handle(scanned(generation, ahead_to(&acquired), vec![]), t(5));
    let actions = m.handle(
        Input::Delayed(DelayedInput::DueWatch { watching: true }),
        t(20_000),
    );
    let (_, after, through) = scan(&actions);
    assert_eq!(after, None, "from the oldest bucket");
    assert_eq!(through, DueBucket::of(t(22_000).timestamp_millis()));
}

#[test]
fn without_the_watch_a_scan_reads_no_further_than_the_horizon() {
    let mut m = machine(ON_DEMAND);
    let acquired = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(0));
    let (_, _, through) = scan(&acquired);
    assert_eq!(
        ahead_to(&acquired),
        through,
        "nothing would report a submission made into a bucket read ahead"
    );
    let (mut m, _) = acquired_at_zero();
    let actions = m.handle(
        Input::Delayed(DelayedInput::DueWatch { watching: false }),
        t(10),
    );
    let (_, after, through) = scan(&actions);
    assert_eq!(after, None, "every bucket read again");
    assert_eq!(ahead_to(&actions), through);
}

#[test]
fn a_bucket_seen_is_removed_once_a_minute_after_its_end_and_a_past_day_once() {
    let (mut m, acquired) = acquired_at_zero();
    let (generation, _, _) = scan(&acquired);
    let seen = DueBucket::of(t(500).timestamp_millis());
    let answer = Input::Delayed(DelayedInput::Scanned {
        generation,
        result: Ok(Scanned {
            found: vec![],
            through: ahead_to(&acquired),
            present: vec![seen],
        }),
    });
    m.handle(answer, t(5));
    assert_eq!(m.next_deadline(), Some(t(59_000)), "the next scan first");
    let removals = |actions: &[Action]| {
        actions
            .iter()
            .filter(|a| {
                matches!(
                    a,
                    Action::Delayed(DelayedAction::RemoveEmptyBucket(_))
                        | Action::Delayed(DelayedAction::RemoveEmptyDay(_))
                )
            })
            .cloned()
            .collect::<Vec<_>>()
    };
    let actions = m.handle(Input::Tick, t(59_000));
    assert_eq!(removals(&actions), vec![], "not yet a minute past its end");
    assert_eq!(m.next_deadline(), Some(t(61_000)));
    let actions = m.handle(Input::Tick, t(61_000));
    assert_eq!(
        removals(&actions),
        vec![
            Action::Delayed(DelayedAction::RemoveEmptyBucket(seen)),
            Action::Delayed(DelayedAction::RemoveEmptyDay(seen.day - 1))
        ],
        "the bucket once, and the day before, a minute into the new day"
    );
    assert_eq!(removals(&m.handle(Input::Tick, t(62_000))), vec![]);
}

#[test]
fn a_submission_for_a_job_that_is_away_is_kept_and_fires_once_the_job_is_back() {
    let (mut m, actions) = owning_with(ON_DEMAND, 0, vec![(id("x"), submission("gone", 500, b""))]);
    assert!(
        claims(&actions).is_empty(),
        "kept, not claimed: {actions:?}"
    );
    let both = format!("{ON_DEMAND}[[job]]\nname = \"gone\"\nshell = \"cat\"\n");
    m.handle(Input::Reloaded(jobs(&both)), t(600));
    let actions = m.handle(Input::Tick, t(600));
    let (generation, after, through) = scan(&actions);
    assert_eq!(after, None, "a reload reads every bucket again");
    let found = scanned(
        generation,
        through,
        vec![(id("x"), submission("gone", 500, b""))],
    );
    let claim = only_claim(&m.handle(found, t(610)));
    assert_eq!(claim.record.job, JobName::new("gone"));
}

#[test]
fn a_scan_answered_after_the_lock_was_lost_claims_nothing() {
    let (mut m, acquired) = acquired_at_zero();
    let (generation, _, through) = scan(&acquired);
    m.handle(Input::Lock(LockInput::Changed(follower())), t(10));
    let late = scanned(
        generation,
        through,
        vec![(id("x"), submission("close", 100, b""))],
    );
    assert_eq!(m.handle(late, t(20)), vec![]);
    assert_eq!(
        m.handle(Input::Tick, t(200)),
        vec![],
        "a follower claims nothing"
    );
    let again = m.handle(
        Input::Lock(LockInput::Changed(owner(FencingToken(8)))),
        t(300),
    );
    let (next, after, _) = scan(&again);
    assert!(next > generation, "a fresh scan; the old answer is stale");
    assert_eq!(after, None, "from the oldest bucket again");
}

#[test]
fn a_failed_scan_is_tried_again_and_meanwhile_nothing_is_lost() {
    let (mut m, acquired) = acquired_at_zero();
    let (generation, _, _) = scan(&acquired);
    let failed = Input::Delayed(DelayedInput::Scanned {
        generation,
        result: Err("connection loss".into()),
    });
    assert_eq!(m.handle(failed, t(5)), vec![]);
    assert_eq!(m.next_deadline(), Some(t(1005)), "one second later");
    let (_, after, _) = scan(&m.handle(Input::Tick, t(1005)));
    assert_eq!(after, None, "still from the oldest bucket");
}

/// An open submission run another owner left, as catch-up lists it.
fn left_open(status: RunStatus) -> (RunRecord, JobRecords) {
    let mut record = RunRecord::claimed_submission(
        &JobName::new("close"),
        t(900).timestamp_millis(),
        &id("left"),
        (&NodeId::new("n2"), "10.0.0.2"),
        FencingToken(6),
        t(650).timestamp_millis(),
    );
    record.status = status;
    let records = JobRecords {
        newest: vec![(record.clone(), 1)],
        payloads: [(id("left"), Arc::new(b"payload".to_vec()))].into(),
        ..JobRecords::default()
    };
    (record, records)
}

fn acquire_with(records: JobRecords) -> (FireMachine, Vec<Action>) {
    let mut m = machine(ON_DEMAND);
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(1000));
    let actions = m.handle(
        Input::CatchUp(CatchUpInput::Listed {
            job: JobName::new("close"),
            result: Ok(records),
        }),
        t(1000),
    );
    (m, actions)
}

#[test]
fn a_submission_claimed_but_never_started_by_a_dead_owner_is_taken_over_as_the_same_attempt() {
    let (record, records) = left_open(RunStatus::Claimed);
    let (mut m, actions) = acquire_with(records);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::CatchUp(CatchUpAction::MarkInterrupted { .. }))),
        "never started: nothing to mark interrupted: {actions:?}"
    );
    let claim = only_claim(&actions);
    assert_eq!(
        claim.mode,
        ClaimMode::Again { version: 1 },
        "over the stored record, by compare-and-set"
    );
    assert_eq!(
        (claim.record.attempt, claim.record.fencing_token),
        (record.attempt, TOKEN)
    );
    assert_eq!(claim.record.submission_id, Some(id("left")));
    assert_eq!(
        claim.record.status,
        RunStatus::Running,
        "its claim, at or after its instant, says running before it starts"
    );
    let start = m.handle(ok(&claim), t(1010));
    let [
        Action::Runs(RunAction::Start {
            context, record, ..
        }),
    ] = &start[..]
    else {
        panic!("{start:?}")
    };
    assert_eq!(*record, StartWrite::InClaim, "no other write in front");
    assert!(context.resumed);
    assert_eq!(
        context.submission.as_ref().map(|s| &s.payload[..]),
        Some(&b"payload"[..])
    );
}

#[test]
fn a_submission_run_that_started_follows_on_interrupted_and_skip_closes_it() {
    let (_, records) = left_open(RunStatus::Running);
    let (_, actions) = acquire_with(records);
    let [Action::CatchUp(CatchUpAction::MarkInterrupted { record, closes, .. })] = &actions[..]
    else {
        panic!("{actions:?}")
    };
    assert_eq!(record.status, RunStatus::Interrupted);
    assert!(
        closes,
        "on_interrupted = skip: nothing runs it again, its open marker goes"
    );
}

#[test]
fn a_submission_made_while_its_bucket_is_being_read_is_not_lost() {
    let (mut m, acquired) = acquired_at_zero();
    let (generation, _, through) = scan(&acquired);
    // The scan listed the bucket a moment before this submission was made; its answer is late.
    let bucket = DueBucket::of(t(1500).timestamp_millis());
    assert_eq!(
        m.handle(
            Input::Delayed(DelayedInput::Created {
                bucket,
                id: id("racing"),
                job: None,
            }),
            t(5)
        ),
        vec![Action::Delayed(DelayedAction::ReadSubmission {
            id: id("racing")
        })],
        "a bucket being read counts as read"
    );
    let answer = scanned(generation, through, vec![]);
    m.handle(answer, t(10));
    let read = Input::Delayed(DelayedInput::Read {
        id: id("racing"),
        result: Ok(Some(submission("close", 1500, b""))),
    });
    m.handle(read, t(12));
    run_timer(&mut m, 1000);
    let claim = only_claim(&m.handle(Input::Tick, t(1500)));
    assert_eq!(claim.record.submission_id, Some(id("racing")));
}

#[test]
fn a_job_removed_while_its_submission_is_queued_keeps_it_for_when_it_is_back() {
    let both = format!("{ON_DEMAND}[[job]]\nname = \"other\"\nshell = \"cat\"\n");
    let (mut m, _) = owning_with(&both, 0, vec![(id("x"), submission("other", 1500, b""))]);
    m.handle(Input::Reloaded(jobs(ON_DEMAND)), t(100));
    let actions = m.handle(Input::Tick, t(100));
    let (generation, _, through) = scan(&actions);
    let found = vec![(id("x"), submission("other", 1500, b""))];
    let answer = scanned(generation, through, found.clone());
    assert!(claims(&m.handle(answer, t(110))).is_empty());
    run_timer(&mut m, 3000);
    // Back: read again, and fired although late (within its starting_deadline).
    m.handle(Input::Reloaded(jobs(&both)), t(3000));
    let (generation, after, through) = scan(&m.handle(Input::Tick, t(3000)));
    assert_eq!(after, None);
    let answer = scanned(generation, through, found);
    let claim = only_claim(&m.handle(answer, t(3010)));
    assert_eq!(claim.record.submission_id, Some(id("x")));
}

#[test]
fn old_records_are_pruned_at_most_every_half_second_however_many_runs_end() {
    let found = (0..3)
        .map(|n| (id(&format!("p{n}")), submission("close", 1500, b"")))
        .collect();
    // Ten records kept: every record asks for a prune (a tenth of `history`, at least one), so
    // that only the half-second decides which prunes go out.
    let table = format!("{ON_DEMAND}history = 10\n");
    let (mut m, _) = owning_with(&table, 0, found);
    m.handle(Input::Tick, t(1000));
    let claims = claims(&m.handle(Input::Tick, t(1500)));
    assert_eq!(claims.len(), 3);
    let mut runs = Vec::new();
    for claim in &claims {
        runs.extend(
            starts(&m.handle(ok(claim), t(1502)))
                .into_iter()
                .map(|(run, _)| run),
        );
    }
    assert_eq!(runs.len(), 3);
    let prunes = |actions: &[Action]| {
        actions
            .iter()
            .filter(|a| matches!(a, Action::Prune { .. }))
            .count()
    };
    let mut pruned = Vec::new();
    for (run, at) in runs.iter().zip([1600, 1700, 2700]) {
        let finished = end_run(
            &mut m,
            ended(run, RunOutcome::Exited { code: 0 }, t(at)),
            t(at),
        );
        pruned.push(prunes(&m.handle(written(&finished), t(at))));
        if at == 1700 {
            // Put off, not dropped: it comes half a second after the last one.
            assert_eq!(m.next_deadline(), Some(t(2100)));
            pruned.push(prunes(&m.handle(Input::Tick, t(2100))));
        }
    }
    assert_eq!(
        pruned,
        [1, 0, 1, 1],
        "at most every 500 ms, and none dropped"
    );
}

#[test]
fn a_job_at_its_max_running_holds_its_due_submissions_until_a_run_ends_others_go_on() {
    // 5 submissions of `close` (max_running = 2) and one of `refund`, all due at 1500.
    let tables = format!(
        "{}max_running = 2\n{}",
        ON_DEMAND,
        ON_DEMAND.replace("\"close\"", "\"refund\"")
    );
    let mut found: Vec<_> = (0..5)
        .map(|i| (id(&format!("c{i}")), submission("close", 1500, b"")))
        .collect();
    found.push((id("r0"), submission("refund", 1500, b"")));
    let (mut m, _) = owning_with(&tables, 0, found);
    run_timer(&mut m, 1000);
    let first = claims(&m.handle(Input::Tick, t(1500)));
    let ids = |claims: &[TickClaim]| -> Vec<String> {
        claims
            .iter()
            .filter_map(|c| c.record.submission_id.as_ref().map(|id| id.to_string()))
            .collect()
    };
    assert_eq!(
        ids(&first),
        ["c0", "c1", "r0"],
        "two of close, in due order (then id), and refund beside them"
    );
    assert_eq!(m.delayed.held(), 3, "the rest wait in memory");

    // The claims come back and start; no more of close while both are open.
    let mut started = Vec::new();
    for claim in &first {
        let answered = m.handle(ok(claim), t(1502));
        assert!(claims(&answered).is_empty());
        started.extend(starts(&answered));
    }
    assert_eq!(started.len(), 3);
    assert_eq!(
        m.next_deadline(),
        None,
        "no wake-up for the due ones of a full job"
    );
    let c0 = started
        .iter()
        .find(|(c, _)| c.record.submission_id == Some(id("c0")))
        .map(|(c, _)| c.clone())
        .expect("c0 started");
    // Its process ended: its final record is being written, still open.
    let finished = end_run(
        &mut m,
        ended(&c0, RunOutcome::Exited { code: 0 }, t(1500)),
        t(1510),
    );
    // Written: room for one more, claimed at once, the oldest waiting.
    let next = claims(&m.handle(written(&finished), t(1520)));
    assert_eq!(ids(&next), ["c2"]);
    assert_eq!(m.delayed.held(), 2);
}

/// Issue 24: once a run's record is pruned its id is free, and a submitter's retry makes a new
/// submission under it. The owner still held the id as known from the first run and never read
/// the new one: accepted, then pending forever (and fired by the next owner after a restart).
/// An id is known only while its claim is out.
#[test]
fn an_id_submitted_again_after_its_run_is_read_and_claimed_not_left_pending() {
    let first = submission("close", 1500, b"first");
    let (mut m, _) = owning_with(ON_DEMAND, 0, vec![(id("order-42"), first)]);
    m.handle(Input::Tick, t(1000));
    let claim = only_claim(&m.handle(Input::Tick, t(1500)));
    let (run, _) = only_start(&m.handle(ok(&claim), t(1502)));
    let finished = end_run(
        &mut m,
        ended(&run, RunOutcome::Exited { code: 0 }, t(1502)),
        t(1600),
    );
    m.handle(written(&finished), t(1610));

    let again = DueBucket::of(t(2500).timestamp_millis());
    assert_eq!(
        m.handle(created(again, "order-42"), t(1700)),
        vec![Action::Delayed(DelayedAction::ReadSubmission {
            id: id("order-42")
        })],
        "a new submission under a used id is read"
    );
    let read = Input::Delayed(DelayedInput::Read {
        id: id("order-42"),
        result: Ok(Some(submission("close", 2500, b"second"))),
    });
    assert!(claims(&m.handle(read, t(1710))).is_empty(), "not yet due");
    let claim = only_claim(&m.handle(Input::Tick, t(2500)));
    assert_eq!(
        (claim.record.submission_id, claim.record.scheduled_unix_ms),
        (Some(id("order-42")), t(2500).timestamp_millis()),
        "claimed at its new due time"
    );
}

/// Issue 33: an HTTP target that declares itself idempotent (`resend = "idempotent"`) is
/// claimed ahead and starts as soon as it is due, with no write in front of it: its record says
/// `claimed` until its final record. One sent at most once (the default) is claimed at its
/// instant instead, its claim saying `running`: that claim is the one write in front of the
/// request, where a claim ahead and a `running` write made two.
#[test]
fn an_http_targets_run_has_one_write_in_front_or_none_if_idempotent() {
    let setup = |resend: &str| {
        let tables = format!(
            "[[job]]\nname = \"close\"\nhttp = {{ url = \"http://127.0.0.1:9/close\", resend = \"{resend}\" }}\nstarting_deadline = \"10s\"\n"
        );
        let (mut m, _) = owning_with(
            &tables,
            0,
            vec![(id("order-7"), submission("close", 1500, b"p"))],
        );
        m.handle(Input::Tick, t(1000));
        m
    };
    let mut m = setup("idempotent");
    let claim = only_claim(&m.handle(Input::Tick, t(1250)));
    assert_eq!(claim.record.status, RunStatus::Claimed, "claimed ahead");
    m.handle(ok(&claim), t(1260));
    let start = m.handle(Input::Tick, t(1500));
    let [Action::Runs(RunAction::Start { record, claim, .. })] = &start[..] else {
        panic!("{start:?}")
    };
    assert_eq!(*record, StartWrite::Never);
    assert_eq!(claim.sent.status, RunStatus::Claimed, "stored as claimed");

    let mut m = setup("never");
    assert_eq!(
        m.next_deadline(),
        Some(t(1500)),
        "nothing to do before its instant"
    );
    assert!(
        claims(&m.handle(Input::Tick, t(1250))).is_empty(),
        "not ahead"
    );
    let claim = only_claim(&m.handle(Input::Tick, t(1500)));
    assert_eq!(
        (claim.record.status, claim.record.started_unix_ms),
        (RunStatus::Running, Some(t(1500).timestamp_millis())),
        "its claim says running"
    );
    let start = m.handle(ok(&claim), t(1504));
    let [Action::Runs(RunAction::Start { record, claim, .. })] = &start[..] else {
        panic!("{start:?}")
    };
    assert_eq!(
        *record,
        StartWrite::InClaim,
        "no write in front but its claim"
    );
    assert_eq!(claim.sent.status, RunStatus::Running);
}

/// Issue 33: the lock lost between the claim of a run at its instant (saying `running`) and its
/// answer: the request is never sent. Its record goes back to `claimed`, so that a next owner
/// sends it rather than recording it `interrupted`; and when this node owns the lock again first
/// (an outage of the whole ensemble), its catch-up leaves the record alone and claims the run
/// again as the same attempt, at the version the write-back made if it landed.
#[test]
fn a_run_claimed_running_at_its_instant_that_never_starts_is_claimed_again_not_lost() {
    let tables = "[[job]]\nname = \"close\"\nhttp = { url = \"http://127.0.0.1:9/close\" }\nstarting_deadline = \"10s\"\n";
    let (mut m, _) = owning_with(
        tables,
        0,
        vec![(id("order-7"), submission("close", 1500, b"p"))],
    );
    m.handle(Input::Tick, t(1000));
    let claim = only_claim(&m.handle(Input::Tick, t(1500)));
    m.handle(Input::Lock(LockInput::Changed(follower())), t(1502));
    let after = m.handle(ok(&claim), t(1504));
    assert!(
        !after
            .iter()
            .any(|a| matches!(a, Action::Runs(RunAction::Start { .. }))),
        "never sent: {after:?}"
    );
    let [back] = records_written(&after)[..] else {
        panic!("one record written back: {after:?}")
    };
    assert_eq!(
        (
            back.record.status,
            back.record.started_unix_ms,
            back.version
        ),
        (RunStatus::Claimed, None, 0),
        "claimed again, at the version its claim stored"
    );

    // The ensemble comes back and this node owns the lock again, before anyone read the
    // record: it says `running` (the write-back got no answer, but landed).
    let token = FencingToken(TOKEN.0 + 1);
    m.handle(Input::Lock(LockInput::Changed(owner(token))), t(9000));
    let mut stored = claim.record.clone();
    stored.status = RunStatus::Running;
    let listed = Input::CatchUp(CatchUpInput::Listed {
        job: JobName::new("close"),
        result: Ok(JobRecords {
            newest: vec![(stored, 0)],
            payloads: [(id("order-7"), Arc::new(b"p".to_vec()))].into(),
            ..JobRecords::default()
        }),
    });
    let caught_up = m.handle(listed, t(9010));
    assert!(
        !caught_up
            .iter()
            .any(|a| matches!(a, Action::CatchUp(CatchUpAction::MarkInterrupted { .. }))),
        "ours, never sent: not interrupted: {caught_up:?}"
    );
    let again = only_claim(&caught_up);
    assert_eq!(
        (again.mode, again.record.attempt, again.record.fencing_token),
        (ClaimMode::Again { version: 0 }, 1, token),
        "the same attempt, under the new token"
    );
    let refused = Input::Claims(ClaimInput::Done {
        id: again.id,
        result: Err(ClaimRefused::AlreadyClaimed),
    });
    let at_back = only_claim(&m.handle(refused, t(9020)));
    assert_eq!(
        at_back.mode,
        ClaimMode::Again { version: 1 },
        "at the version the write-back made"
    );
    let start = m.handle(ok(&at_back), t(9030));
    let [Action::Runs(RunAction::Start { context, .. })] = &start[..] else {
        panic!("{start:?}")
    };
    assert!(context.resumed);
}

/// Issue 53's soak: while a quota refused every create under the lock root, one submission's
/// claim was refused some 3000 times a minute: each refusal had it read again and claimed at
/// once. A failed claim's submission is read again only after a pause.
#[test]
fn a_submission_whose_claim_failed_is_read_again_only_after_a_pause() {
    let due = submission("close", 500, b"x");
    let (mut m, _) = owning_with(ON_DEMAND, 0, vec![(id("late"), due.clone())]);
    let claim = only_claim(&m.handle(Input::Tick, t(500)));
    let why = "refused: a ZooKeeper quota on a parent of the node is exceeded".to_owned();
    let failed = m.handle(refused(&claim, ClaimRefused::Failed(why)), t(510));
    assert!(claims(&failed).is_empty(), "{failed:?}");
    assert_eq!(
        failed,
        [Action::Delayed(DelayedAction::ReadSubmissionAfter {
            id: id("late"),
            after: std::time::Duration::from_secs(1),
        })],
    );
    let read = Input::Delayed(DelayedInput::Read {
        id: id("late"),
        result: Ok(Some(due)),
    });
    let again = only_claim(&m.handle(read, t(1520)));
    assert_eq!(
        again.record.run_id, claim.record.run_id,
        "the same run, claimed again"
    );
}

/// A claim sent under the old token is still out when this node takes the lock again: the new
/// acquisition's scan holds the submission for that claim, which the epoch then refuses. The
/// submission, still pending, is read again and claimed under the new token, not left to the
/// next scan from the oldest bucket.
#[test]
fn a_submission_whose_claim_the_epoch_refused_after_a_new_acquisition_is_read_again() {
    let due = submission("close", 500, b"x");
    let (mut m, _) = owning_with(ON_DEMAND, 0, vec![(id("late"), due.clone())]);
    let old = only_claim(&m.handle(Input::Tick, t(500)));
    assert_eq!(old.record.fencing_token, TOKEN);
    let next = FencingToken(TOKEN.0 + 1);
    m.handle(Input::Lock(LockInput::Changed(follower())), t(600));
    let acquired = m.handle(Input::Lock(LockInput::Changed(owner(next))), t(700));
    let (generation, _, through) = scan(&acquired);
    let held = m.handle(
        scanned(generation, through, vec![(id("late"), due.clone())]),
        t(700),
    );
    assert!(claims(&held).is_empty(), "held for the claim out: {held:?}");
    let refused = m.handle(refused(&old, ClaimRefused::NotOwner), t(710));
    assert!(
        refused.contains(&Action::Delayed(DelayedAction::ReadSubmission {
            id: id("late")
        })),
        "{refused:?}"
    );
    let read = Input::Delayed(DelayedInput::Read {
        id: id("late"),
        result: Ok(Some(due)),
    });
    let again = only_claim(&m.handle(read, t(720)));
    assert_eq!(again.record.fencing_token, next);
    assert_eq!(again.record.submission_id, Some(id("late")));
}

/// The soak (issue 53): a submission claimed at its instant, its claim saying `running`, went
/// unanswered while the session was lost; the node owned the lock again under a newer token,
/// and its catch-up listed the job before the claim was read back. The listing leaves the
/// record to the claim's answer, which finds the claim applied and the run never sent: the
/// record goes back to `claimed` and the run is taken over at once, as the same attempt —
/// never closed `interrupted` (it was: 3 of 3780 submissions never ran).
#[test]
fn a_run_whose_claim_is_out_is_left_by_catch_up_and_taken_over_on_its_answer() {
    let due = submission("close", 1500, b"order");
    let (mut m, _) = owning_with(ON_DEMAND, 0, vec![(id("order-42"), due)]);
    run_timer(&mut m, 1000);
    let claim = only_claim(&m.handle(Input::Tick, t(1500)));
    assert_eq!(claim.record.status, RunStatus::Running);
    m.handle(Input::Lock(LockInput::Changed(follower())), t(1600));
    let newer = FencingToken(TOKEN.0 + 1);
    m.handle(Input::Lock(LockInput::Changed(owner(newer))), t(1700));
    let mut records = listing(std::slice::from_ref(&claim.record));
    records
        .payloads
        .insert(id("order-42"), Arc::new(b"order".to_vec()));
    let listed = Input::CatchUp(CatchUpInput::Listed {
        job: JobName::new("close"),
        result: Ok(records),
    });
    let after_listing = m.handle(listed, t(1710));
    assert!(
        !after_listing.iter().any(|action| matches!(
            action,
            Action::CatchUp(CatchUpAction::MarkInterrupted { .. })
        )),
        "left to the claim's answer: {after_listing:?}"
    );
    let answered = m.handle(ok(&claim), t(1800));
    assert!(
        answered.iter().any(|action| matches!(
            action,
            Action::Claims(ClaimAction::WriteRecord(back)) if back.record.status == RunStatus::Claimed
        )),
        "written back to claimed: {answered:?}"
    );
    let again = claims(&answered);
    assert_eq!(again.len(), 1, "taken over at once: {answered:?}");
    assert_eq!(
        (&again[0].record.run_id, again[0].record.attempt),
        (&claim.record.run_id, 1)
    );
    assert!(
        matches!(again[0].mode, ClaimMode::Again { .. }),
        "{:?}",
        again[0].mode
    );
}
