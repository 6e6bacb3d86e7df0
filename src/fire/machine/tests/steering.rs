//! Pauses, triggers and handing the lock over on request (issue "Operate it"), on the virtual
//! clock.

use super::*;
use crate::control::Pause;
use crate::delayed::submission::{Submission, SubmissionId};

fn paused(jobs: &[&str]) -> Input {
    Input::Control(ControlInput::PausesRead(
        jobs.iter()
            .map(|job| {
                (
                    JobName::new(*job),
                    Pause::new(Some("downstream broken"), "ops@h1", 0),
                )
            })
            .collect(),
    ))
}

#[test]
fn nothing_fires_before_the_pauses_are_read_then_the_owner_starts_as_on_acquisition() {
    let mut m = unread_pauses(&job("a", EVERY_SECOND, ""));
    let acquired = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(0));
    assert!(
        but_delayed(acquired.clone()).is_empty(),
        "no catch-up, no scan before the pauses are known: {acquired:?}"
    );
    assert!(
        claims(&m.handle(Input::Tick, t(750))).is_empty(),
        "declined"
    );
    let read = m.handle(
        Input::Control(ControlInput::PausesRead(Pauses::new())),
        t(800),
    );
    assert!(
        read.contains(&Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
            "a"
        )))),
        "the first reading starts catch-up like an acquisition: {read:?}"
    );
    let listed = m.handle(listed("a", &[]), t(810));
    let claim = only_claim(&listed);
    assert_eq!(
        claim.record.scheduled_unix_ms,
        t(1000).timestamp_millis(),
        "the tick declined meanwhile is fired within the late-tick rule"
    );
}

#[test]
fn a_paused_jobs_ticks_are_recorded_skipped_with_who_and_why_and_resume_fires_the_next() {
    let tables = [job("a", EVERY_SECOND, ""), job("b", EVERY_SECOND, "")].join("");
    let mut m = owning(&tables);
    assert_eq!(m.handle(paused(&["a"]), t(100)), vec![]);
    let due = claims(&m.handle(Input::Tick, t(750)));
    let (a, b): (Vec<_>, Vec<_>) = due.iter().partition(|c| c.record.job.as_str() == "a");
    assert_eq!((a.len(), b.len()), (1, 1), "{due:?}");
    assert_eq!(a[0].record.status, RunStatus::Skipped);
    assert_eq!(
        a[0].record.error.as_deref(),
        Some("paused by ops@h1: downstream broken")
    );
    assert!(!a[0].guarded, "a record only: no guard");
    assert_eq!(b[0].record.status, RunStatus::Running, "b is not paused");
    assert_eq!(
        m.handle(ok(a[0]), t(760)),
        vec![Action::Prune {
            job: JobName::new("a"),
            keep: crate::layout::Keep::Records(100),
            remember: Duration::from_secs(3600),
        }],
        "skipped records are kept to `history` like runs"
    );

    assert_eq!(
        m.handle(
            Input::Control(ControlInput::PausesRead(Pauses::new())),
            t(900)
        ),
        vec![]
    );
    let next = claims(&m.handle(Input::Tick, t(1750)));
    assert!(
        next.iter().all(|c| c.record.status == RunStatus::Running
            && c.record.scheduled_unix_ms == t(2000).timestamp_millis()),
        "resumed: a claims its next tick again, nothing replayed: {next:?}"
    );
    assert_eq!(next.len(), 2);
}

#[test]
fn catch_up_of_a_paused_job_records_the_ticks_skipped_instead_of_replaying_them() {
    let tables = job("a", EVERY_SECOND, "misfire = \"run_all\"\n");
    let mut m = unread_pauses(&tables);
    m.handle(paused(&["a"]), t(0));
    run_timer(&mut m, 3400);
    // Acquired at 3.5 s; the last record is of 1 s: 2 s and 3 s were missed by everyone.
    let acquired = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(3500));
    assert!(
        acquired.contains(&Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
            "a"
        ))))
    );
    let last = stored("a", 1000, "n2", 6, RunStatus::Succeeded);
    let caught = claims(&m.handle(listed("a", &[last]), t(3510)));
    assert!(!caught.is_empty());
    assert!(
        caught.iter().all(|c| c.record.status != RunStatus::Claimed),
        "nothing of a paused job is started by catch-up: {caught:?}"
    );
    assert!(
        caught.iter().any(|c| c.record.status == RunStatus::Skipped
            && c.record.error.as_deref() == Some("paused by ops@h1: downstream broken")),
        "{caught:?}"
    );
}

const ON_DEMAND: &str = "[[job]]\nname = \"close\"\nshell = \"cat\"\nstarting_deadline = \"10s\"\n";

fn submission(due_ms: i64, by: Option<&str>) -> Submission {
    Submission {
        job: JobName::new("close"),
        due_unix_ms: t(due_ms).timestamp_millis(),
        submitted_unix_ms: t(0).timestamp_millis(),
        payload: Vec::new(),
        requested_by: by.map(str::to_owned),
        anonymous: false,
        marker_names_job: false,
        retry_of: None,
        traceparent: None,
        after: None,
    }
}

/// An owner of `tables` that read `found` in its first scan at t(0), and that scan's actions.
fn owning_with_submissions(
    tables: &str,
    pauses: Input,
    found: Vec<(SubmissionId, Submission)>,
) -> (FireMachine, Vec<Action>) {
    let mut m = unread_pauses(tables);
    m.handle(pauses, t(0));
    let acquired = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(0));
    let mut scan = None;
    for action in acquired {
        match action {
            Action::CatchUp(CatchUpAction::ListRecords(job)) => {
                m.handle(
                    Input::CatchUp(CatchUpInput::Listed {
                        job,
                        result: Ok(JobRecords::default()),
                    }),
                    t(0),
                );
            }
            Action::Delayed(DelayedAction::Scan {
                generation,
                through,
                ..
            }) => scan = Some((generation, through)),
            _ => {}
        }
    }
    let (generation, through) = scan.expect("a scan on acquisition");
    let scanned = m.handle(scanned(generation, through, found), t(0));
    (m, scanned)
}

#[test]
fn a_paused_jobs_submissions_wait_pending_and_are_claimed_on_resume() {
    let id = SubmissionId::parse("s1").expect("valid");
    let (mut m, scanned) = owning_with_submissions(
        ON_DEMAND,
        paused(&["close"]),
        vec![(id.clone(), submission(500, None))],
    );
    let mut all = claims(&scanned);
    for at in [250, 500, 1000, 1900] {
        all.extend(claims(&m.handle(Input::Tick, t(at))));
    }
    assert!(all.is_empty(), "held while paused: {all:?}");
    assert!(
        m.next_deadline().is_none_or(|at| at > t(1900)),
        "no wake-up for a paused job's submissions"
    );
    let resumed = claims(&m.handle(
        Input::Control(ControlInput::PausesRead(Pauses::new())),
        t(2000),
    ));
    assert_eq!(resumed.len(), 1, "claimed at once on resume");
    assert_eq!(resumed[0].record.submission_id, Some(id));
    assert_eq!(
        resumed[0].record.status,
        RunStatus::Running,
        "overdue: claimed at once, saying running"
    );
}

#[test]
fn a_trigger_is_recorded_and_run_as_manual_with_who_asked() {
    let id = SubmissionId::parse("t1").expect("valid");
    let (mut m, scanned) = owning_with_submissions(
        ON_DEMAND,
        Input::Control(ControlInput::PausesRead(Pauses::new())),
        vec![(id, submission(100, Some("ops@h1")))],
    );
    assert!(claims(&scanned).is_empty(), "claimed at its instant");
    let claim = only_claim(&m.handle(Input::Tick, t(100)));
    assert_eq!(claim.record.requested_by.as_deref(), Some("ops@h1"));
    let (started, context) = only_start(&m.handle(ok(&claim), t(102)));
    assert_eq!(started.record.requested_by.as_deref(), Some("ops@h1"));
    let input = context.submission.expect("a submission's run");
    assert_eq!(input.requested_by.as_deref(), Some("ops@h1"));
    assert!(!context.resumed);
}

#[test]
fn a_release_request_withdraws_unstarted_claims_then_yields_and_fires_nothing_meanwhile() {
    let mut m = owning(&job("a", EVERY_SECOND, "on_lost = \"cancel\"\n"));
    let first = only_claim(&m.handle(Input::Tick, t(750)));
    m.handle(ok(&first), t(751));
    let (run, _) = only_start(&m.handle(Input::Tick, t(1000)));
    let second = only_claim(&m.handle(Input::Tick, t(1750)));
    m.handle(ok(&second), t(1752));
    let asked = m.handle(Input::Control(ControlInput::ReleaseRequested), t(1800));
    let granted_second = granted(&second);
    assert_eq!(
        asked,
        vec![
            Action::Runs(RunAction::Unprepare {
                run_id: granted_second.record.run_id.clone()
            }),
            Action::Claims(ClaimAction::Withdraw {
                id: second.id,
                claim: granted_second
            })
        ],
        "the claimed tick goes back first, so the next owner fires it"
    );
    assert_eq!(
        m.handle(
            Input::Claims(ClaimInput::Withdrawn { id: second.id }),
            t(1810)
        ),
        vec![Action::Lock(LockAction::Yield)]
    );
    assert!(
        claims(&m.handle(Input::Tick, t(2750))).is_empty(),
        "no claim while yielding"
    );
    assert_eq!(
        m.handle(Input::Lock(LockInput::Changed(follower())), t(2800)),
        vec![Action::Runs(RunAction::Cancel {
            run_id: run.record.run_id.clone()
        })],
        "handed over: the running job follows on_lost"
    );
    assert_eq!(
        m.handle(Input::Control(ControlInput::ReleaseRequested), t(2900)),
        vec![],
        "not the owner now"
    );
}

#[test]
fn a_yield_that_does_not_move_the_lock_fires_again_after_its_limit() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    assert_eq!(
        m.handle(Input::Control(ControlInput::ReleaseRequested), t(100)),
        vec![Action::Lock(LockAction::Yield)]
    );
    let limit = chrono::Duration::from_std(super::super::steering::YIELD_LIMIT).expect("small");
    for at in (750..5000).step_by(1000) {
        assert!(
            claims(&m.handle(Input::Tick, t(at))).is_empty(),
            "still yielding"
        );
    }
    let again = m.handle(Input::Tick, t(100) + limit);
    assert!(
        again.contains(&Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
            "a"
        )))),
        "firing again starts as an acquisition does: {again:?}"
    );
}

/// Issue 24: a pause holds a promised retry — not started, not dropped, no busy wake-up while
/// paused — and the resume starts it at once.
#[test]
fn a_pause_holds_a_promised_retry_and_the_resume_starts_it() {
    let (mut m, failed) = a_retry_promised();
    m.handle(paused(&["a"]), t(61_000));
    assert!(
        m.next_deadline().is_none_or(|at| at > t(62_100)),
        "no wake-up for a held retry: {:?}",
        m.next_deadline()
    );
    assert!(
        claims(&m.handle(Input::Tick, t(62_500))).is_empty(),
        "held while paused"
    );
    let resumed = m.handle(
        Input::Control(ControlInput::PausesRead(Pauses::new())),
        t(70_000),
    );
    let due = m.next_deadline().expect("the held retry is due");
    let retry = only_claim(&[resumed, m.handle(Input::Tick, due.max(t(70_000)))].concat());
    assert_eq!(
        (retry.mode, retry.record.attempt),
        (
            ClaimMode::Again {
                version: failed.version + 2
            },
            2
        ),
        "the resume starts the held retry"
    );
}
