//! Failure notices and auto-pause (issue 20): a notice is decided once a record is stored —
//! once per final outcome, once per missed gap, on recovery when asked — and a job that failed
//! `pause_after_failures` times in a row pauses itself.

use super::*;
use crate::run::{Notice, NoticeKind};

const HOOK: &str = "on_failure = [\"/bin/true\"]\n";

/// Runs job "a"'s tick at `minute` to its end with `outcome`: the actions once its record is
/// stored.
fn run_to_record(m: &mut FireMachine, minute: i64, outcome: RunOutcome) -> Vec<Action> {
    let at = minute * 60_000;
    let claim = only_claim(&m.handle(Input::Tick, t(at - 250)));
    m.handle(ok(&claim), t(at - 249));
    let (run, _) = only_start(&m.handle(Input::Tick, t(at)));
    let finished = end_run(m, ended(&run, outcome, t(at)), t(at + 100));
    m.handle(written(&finished), t(at + 101))
}

fn notices(actions: &[Action]) -> Vec<&Notice> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::Notify(notice) => Some(notice.as_ref()),
            _ => None,
        })
        .collect()
}

fn pauses(actions: &[Action]) -> Vec<(&str, &str)> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::Control(ControlAction::PauseJob { job, reason }) => {
                Some((job.as_str(), reason.as_str()))
            }
            _ => None,
        })
        .collect()
}

const FAILED: RunOutcome = RunOutcome::Exited { code: 2 };
const FINE: RunOutcome = RunOutcome::Exited { code: 0 };

#[test]
fn a_failure_is_told_once_when_its_record_is_stored_and_a_recovery_when_asked() {
    let mut m = owning(&job(
        "a",
        "0 * * * * *",
        &format!("{HOOK}on_recovery = true"),
    ));
    let first = run_to_record(&mut m, 1, FAILED);
    let told = notices(&first);
    assert_eq!(told.len(), 1, "one notice: {first:?}");
    assert_eq!(
        (
            told[0].kind,
            told[0].record.status,
            told[0].record.exit_code,
            told[0].consecutive_failures,
            told[0].retries_left,
        ),
        (NoticeKind::Failure, RunStatus::Failed, Some(2), 1, 0)
    );
    assert_eq!(told[0].sent_by, me().node_id);
    let second = run_to_record(&mut m, 2, RunOutcome::TimedOut);
    assert_eq!(notices(&second)[0].consecutive_failures, 2);
    let back = run_to_record(&mut m, 3, FINE);
    let told = notices(&back);
    assert_eq!(told.len(), 1, "the recovery: {back:?}");
    assert_eq!(
        (told[0].kind, told[0].consecutive_failures),
        (NoticeKind::Recovery, 2),
        "it ends a run of two failures"
    );
    assert!(
        notices(&run_to_record(&mut m, 4, FINE)).is_empty(),
        "a success after a success is news to nobody"
    );
}

#[test]
fn nothing_is_told_without_a_channel_nor_a_recovery_unless_asked() {
    let mut quiet = owning(&job("a", "0 * * * * *", ""));
    assert!(notices(&run_to_record(&mut quiet, 1, FAILED)).is_empty());
    let mut hooked = owning(&job("a", "0 * * * * *", HOOK));
    run_to_record(&mut hooked, 1, FAILED);
    assert!(
        notices(&run_to_record(&mut hooked, 2, FINE)).is_empty(),
        "on_recovery is off by default"
    );
}

#[test]
fn a_record_not_stored_tells_nothing() {
    let mut m = owning(&job("a", "0 * * * * *", HOOK));
    let claim = only_claim(&m.handle(Input::Tick, t(59_750)));
    m.handle(ok(&claim), t(59_751));
    let (run, _) = only_start(&m.handle(Input::Tick, t(60_000)));
    let finished = end_run(&mut m, ended(&run, FAILED, t(60_000)), t(60_100));
    let refused = Input::Claims(ClaimInput::RecordWritten {
        run_id: finished.record.run_id.clone(),
        write: RecordWrite::Refused,
    });
    let actions = m.handle(refused, t(60_101));
    assert!(
        notices(&actions).is_empty(),
        "the next owner marked it interrupted and tells of that: {actions:?}"
    );
}

#[test]
fn n_failures_in_a_row_pause_the_job_and_a_success_starts_the_count_again() {
    let mut m = owning(&job("a", "0 * * * * *", "pause_after_failures = 2"));
    assert!(pauses(&run_to_record(&mut m, 1, FAILED)).is_empty());
    assert!(pauses(&run_to_record(&mut m, 2, FINE)).is_empty());
    assert!(pauses(&run_to_record(&mut m, 3, FAILED)).is_empty());
    let actions = run_to_record(&mut m, 4, FAILED);
    assert_eq!(
        pauses(&actions),
        [("a", "paused after 2 consecutive failures")],
        "the second failure in a row pauses it, with no channel set too"
    );
    assert!(
        pauses(&run_to_record(&mut m, 5, FAILED)).is_empty(),
        "a pause counts afresh: the next failure alone does not pause again"
    );
}

/// A new owner learns the run of failures from the records: the count is the cluster's.
#[test]
fn a_new_owner_learns_the_failures_from_the_records() {
    let mut m = machine(&job(
        "a",
        "0 * * * * *",
        &format!("{HOOK}on_recovery = true\npause_after_failures = 3"),
    ));
    let actions = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(0));
    assert!(
        actions.contains(&Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
            "a"
        ))))
    );
    let failed = |tick_ms: i64, status: RunStatus| {
        let mut record = stored("a", tick_ms, "n0", 1, status);
        record.finished_unix_ms = Some(tick_ms + 5);
        (record, 3)
    };
    let mut promised = failed(-60_000, RunStatus::Failed);
    promised.0.retry_at_unix_ms = Some(10_000);
    let records = JobRecords {
        ticks: vec![],
        newest: vec![
            failed(-240_000, RunStatus::Failed),
            failed(-180_000, RunStatus::Succeeded),
            failed(-120_000, RunStatus::TimedOut),
            // Not over: its retry counts when it ends.
            promised,
            failed(-90_000, RunStatus::Skipped),
            failed(-100_000, RunStatus::Interrupted),
        ],
        ..JobRecords::default()
    };
    let listed = Input::CatchUp(CatchUpInput::Listed {
        job: JobName::new("a"),
        result: Ok(records),
    });
    m.handle(listed, t(0));
    let actions = run_to_record(&mut m, 1, FAILED);
    assert_eq!(
        notices(&actions)[0].consecutive_failures,
        3,
        "timed out, interrupted and this one"
    );
    assert!(
        pauses(&actions).is_empty(),
        "a skip (the job was paused) since two of them: one since"
    );
    let actions = run_to_record(&mut m, 2, FINE);
    assert_eq!(
        notices(&actions)[0].kind,
        NoticeKind::Recovery,
        "the failures the old owner saw count"
    );
}

#[test]
fn a_retried_failure_is_told_at_its_end_or_at_every_attempt_when_asked() {
    let config = |extra: &str| {
        jobs(&job(
            "a",
            "0 * * * * *",
            &format!("{HOOK}retries = 2\n{extra}"),
        ))
        .pop()
        .expect("one job")
    };
    let attempt = |n: u32, retry: bool| {
        let mut record = stored("a", 60_000, "n1", 1, RunStatus::Failed);
        record.attempt = n;
        record.retry_at_unix_ms = retry.then_some(70_000);
        record
    };
    let me = me().node_id;
    for (extra, told_attempts) in [("", vec![3]), ("notify = \"every_attempt\"", vec![1, 2, 3])] {
        let config = config(extra);
        let mut streaks = crate::fire::machine::notices::Streaks::default();
        let mut told = Vec::new();
        for n in 1..=3 {
            let again = n < 3;
            let got = streaks.recorded(&attempt(n, again), &config, again, &me);
            if let Some(notice) = got.notice {
                let left = notice.retries_left;
                assert_eq!(left, if again { 3 - n } else { 0 }, "attempt {n}");
                told.push(notice.record.attempt);
            }
        }
        assert_eq!(told, told_attempts, "{extra:?}");
    }
}

#[test]
fn a_missed_gap_is_told_once_and_does_not_count_as_a_failure() {
    let config = jobs(&job(
        "a",
        "0 * * * * *",
        &format!("{HOOK}pause_after_failures = 1"),
    ))
    .pop()
    .expect("one job");
    let mut missed = stored("a", 600_000, "n1", 1, RunStatus::Missed);
    missed.missed_ticks = Some(10);
    let mut streaks = crate::fire::machine::notices::Streaks::default();
    let told = streaks.recorded(&missed, &config, false, &me().node_id);
    let notice = told.notice.expect("a notice for the gap");
    assert_eq!(
        notice.record.missed_ticks,
        Some(10),
        "one notice stands for ten ticks"
    );
    assert_eq!(told.pause, None, "nobody's run failed");
}
