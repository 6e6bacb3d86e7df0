//! Chains (`after`, issue 36): a parent's final record leaves its children's marks, once, at
//! its last attempt; a child's marks become one run at the parents' instant, or one `skipped`
//! record naming the parent that ended otherwise; a diamond waits for every parent.

use super::*;
use crate::run::ChainMark;
use crate::run::FoundMark;

/// `extract` every second (retried once), `load` after it, `report` after `extract` and `clean`.
fn chained() -> String {
    format!(
        "{}{}{}{}",
        job(
            "extract",
            EVERY_SECOND,
            "retries = 1\nretry_backoff = \"1s\""
        ),
        job("clean", EVERY_SECOND, ""),
        "[[job]]\nname = \"load\"\nshell = \"true\"\nafter = [\"extract\"]\n",
        "[[job]]\nname = \"report\"\nshell = \"true\"\nafter = [\"extract\", \"clean\"]\nstarting_deadline = \"10s\"\n",
    )
}

fn mark(parent: &str, tick_ms: i64, status: RunStatus) -> FoundMark {
    FoundMark {
        name: crate::layout::MarkName::of_tick(
            t(tick_ms).timestamp_millis(),
            &JobName::new(parent),
        ),
        mark: ChainMark::of(&format!("{parent}-{tick_ms}"), status),
    }
}

fn marks_of(job: &str, marks: Vec<FoundMark>) -> Input {
    Input::Chains(ChainsInput::MarksListed {
        job: JobName::new(job),
        result: Ok(marks),
    })
}

/// A machine owning the lock for [`chained`]: the acquisition lists every chained job's marks.
fn owning_chains() -> FireMachine {
    let mut m = machine(&chained());
    let mut listed = Vec::new();
    for action in m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(0)) {
        match action {
            Action::CatchUp(CatchUpAction::ListRecords(job)) => {
                let input = Input::CatchUp(CatchUpInput::Listed {
                    job,
                    result: Ok(JobRecords::default()),
                });
                m.handle(input, t(0));
            }
            Action::Chains(ChainsAction::ListMarks(job)) => listed.push(job.to_string()),
            _ => {}
        }
    }
    listed.sort();
    assert_eq!(
        listed,
        ["load", "report"],
        "the chained jobs' marks are read"
    );
    m
}

#[test]
fn a_parents_last_attempt_leaves_its_childrens_marks_and_a_promised_retry_none() {
    let mut m = owning_chains();
    m.handle(marks_of("load", vec![]), t(0));
    m.handle(marks_of("report", vec![]), t(0));
    let claim = claims(&m.handle(Input::Tick, t(750)))
        .into_iter()
        .find(|c| c.record.job.as_str() == "extract")
        .expect("extract's tick is claimed");
    m.handle(ok(&claim), t(751));
    let (run, _) = starts(&m.handle(Input::Tick, t(1000)))
        .into_iter()
        .find(|(c, _)| c.record.job.as_str() == "extract")
        .expect("extract starts");
    let failed = records_written(&m.handle(
        ended(&run, RunOutcome::Exited { code: 1 }, t(1000)),
        t(1100),
    ))
    .first()
    .copied()
    .cloned()
    .expect("the failure is recorded");
    assert!(
        failed.record.retry_at_unix_ms.is_some(),
        "a retry is promised"
    );
    assert!(
        failed.children.is_empty(),
        "a promised retry leaves no mark: {failed:?}"
    );
    m.handle(written(&failed), t(1101));

    let retry = claims(&m.handle(Input::Tick, t(2100)))
        .into_iter()
        .find(|c| c.record.job.as_str() == "extract" && c.record.attempt == 2)
        .expect("the retry is claimed");
    let (again, _) = starts(&m.handle(ok(&retry), t(2100)))
        .into_iter()
        .find(|(c, _)| c.record.attempt == 2)
        .expect("the retry starts");
    let last = records_written(&m.handle(
        ended(&again, RunOutcome::Exited { code: 0 }, t(2101)),
        t(2200),
    ))
    .first()
    .copied()
    .cloned()
    .expect("the last attempt is recorded");
    assert_eq!(last.record.status, RunStatus::Succeeded);
    let mut children: Vec<&str> = last.children.iter().map(JobName::as_str).collect();
    children.sort_unstable();
    assert_eq!(
        children,
        ["load", "report"],
        "its end leaves a mark for each child"
    );
}

#[test]
fn a_childs_complete_marks_become_one_run_at_the_parents_instant() {
    let mut m = owning_chains();
    let actions = m.handle(
        marks_of("load", vec![mark("extract", 1000, RunStatus::Succeeded)]),
        t(5000),
    );
    let claim = only_claim(&actions);
    assert_eq!(claim.record.job.as_str(), "load");
    assert_eq!(
        claim.record.scheduled_unix_ms,
        t(1000).timestamp_millis(),
        "the parent's instant"
    );
    assert_eq!(claim.mode, ClaimMode::Create);
    assert_eq!(claim.record.parents.len(), 1);
    assert_eq!(claim.record.parents[0].run_id, "extract-1000");
    // Listed again while its claim is out: not claimed twice.
    let again = m.handle(
        Input::Chains(ChainsInput::MarksChanged(Some(JobName::new("load")))),
        t(5001),
    );
    assert_eq!(
        again,
        vec![Action::Chains(ChainsAction::ListMarks(JobName::new(
            "load"
        )))]
    );
    let relisted = m.handle(
        marks_of("load", vec![mark("extract", 1000, RunStatus::Succeeded)]),
        t(5002),
    );
    assert!(claims(&relisted).is_empty(), "{relisted:?}");

    let granted = m.handle(ok(&claim), t(5003));
    let started = starts(&granted);
    let (run, context) = started.first().cloned().expect("the child starts at once");
    assert_eq!(
        context.scheduled_at,
        t(1000),
        "ZKCRON_SCHEDULED_AT is the parent's"
    );
    assert_eq!(
        context.parent_runs,
        ["extract-1000"],
        "ZKCRON_PARENT_RUN_ID"
    );
    let end = records_written(&m.handle(
        ended(&run, RunOutcome::Exited { code: 0 }, t(5003)),
        t(5100),
    ))
    .first()
    .copied()
    .cloned()
    .expect("recorded");
    assert!(end.children.is_empty(), "load has no children");
}

#[test]
fn a_parent_that_ended_otherwise_makes_the_childs_instant_skipped_naming_it() {
    let mut m = owning_chains();
    let actions = m.handle(
        marks_of("load", vec![mark("extract", 1000, RunStatus::TimedOut)]),
        t(5000),
    );
    let claim = only_claim(&actions);
    assert_eq!(claim.record.status, RunStatus::Skipped);
    let why = claim.record.error.clone().unwrap_or_default();
    assert!(
        why.contains("extract ended timed_out (after_status = succeeded)"),
        "{why}"
    );
    assert_eq!(claim.record.parents.len(), 1, "the claim takes the mark");
    assert!(
        starts(&m.handle(ok(&claim), t(5001))).is_empty(),
        "nothing runs"
    );
}

#[test]
fn a_diamond_waits_for_every_parent_and_gives_up_after_its_starting_deadline() {
    let mut m = owning_chains();
    let one = vec![mark("extract", 1000, RunStatus::Succeeded)];
    let waiting = m.handle(marks_of("report", one.clone()), t(5000));
    assert!(
        claims(&waiting).is_empty(),
        "clean has not ended yet: {waiting:?}"
    );

    let both = vec![one[0].clone(), mark("clean", 1000, RunStatus::Succeeded)];
    m.handle(Input::Chains(ChainsInput::MarksChanged(None)), t(5001));
    let ran = only_claim(&m.handle(marks_of("report", both), t(5002)));
    assert_ne!(ran.record.status, RunStatus::Skipped);
    assert_eq!(ran.record.parents.len(), 2, "one run for the two parents");

    // Another instant, clean never ending: given up on once 10 s (starting_deadline) passed.
    m.handle(Input::Chains(ChainsInput::MarksChanged(None)), t(5003));
    let lone = vec![mark("extract", 2000, RunStatus::Succeeded)];
    assert!(claims(&m.handle(marks_of("report", lone.clone()), t(11_000))).is_empty());
    m.handle(Input::Chains(ChainsInput::MarksChanged(None)), t(12_001));
    let skipped = only_claim(&m.handle(marks_of("report", lone), t(12_002)));
    assert_eq!(skipped.record.status, RunStatus::Skipped);
    let why = skipped.record.error.unwrap_or_default();
    assert!(
        why.contains("no run of clean ended at this instant"),
        "{why}"
    );
}

/// A chained claim sent under the old token is refused after this node took the lock again;
/// the new acquisition's listing skipped the instant while that claim was out, so its marks are
/// read again rather than left for the parent's next end.
#[test]
fn a_chained_claim_refused_under_an_older_token_of_ours_reads_the_marks_again() {
    let mut m = owning_chains();
    let marks = vec![mark("extract", 1000, RunStatus::Succeeded)];
    let old = only_claim(&m.handle(marks_of("load", marks.clone()), t(5000)));
    m.handle(Input::Lock(LockInput::Changed(follower())), t(5001));
    let acquired = m.handle(
        Input::Lock(LockInput::Changed(owner(FencingToken(TOKEN.0 + 1)))),
        t(5002),
    );
    assert!(
        acquired.contains(&Action::Chains(ChainsAction::ListMarks(JobName::new(
            "load"
        ))))
    );
    let skipped = m.handle(marks_of("load", marks.clone()), t(5003));
    assert!(claims(&skipped).is_empty(), "its claim is out: {skipped:?}");
    let refused = m.handle(refused(&old, ClaimRefused::NotOwner), t(5004));
    assert!(
        refused.contains(&Action::Chains(ChainsAction::ListMarks(JobName::new(
            "load"
        )))),
        "{refused:?}"
    );
    let again = only_claim(&m.handle(marks_of("load", marks), t(5005)));
    assert_eq!(again.record.fencing_token, FencingToken(TOKEN.0 + 1));
}

#[test]
fn a_chained_claim_that_finds_its_instant_taken_removes_the_marks_left() {
    let mut m = owning_chains();
    let claim = only_claim(&m.handle(
        marks_of("load", vec![mark("extract", 1000, RunStatus::Succeeded)]),
        t(5000),
    ));
    let actions = m.handle(refused(&claim, ClaimRefused::AlreadyClaimed), t(5001));
    assert!(
        actions.contains(&Action::Chains(ChainsAction::DropMarks {
            job: JobName::new("load"),
            marks: vec![crate::layout::MarkName::of_tick(
                t(1000).timestamp_millis(),
                &JobName::new("extract")
            )],
        })),
        "{actions:?}"
    );
}

#[test]
fn a_paused_child_leaves_its_marks_waiting() {
    let mut m = owning_chains();
    let mut pauses = Pauses::new();
    let pause = crate::control::Pause::new(Some("downstream broken"), "ops@h1", 0);
    pauses.insert(JobName::new("load"), pause);
    m.handle(Input::Control(ControlInput::PausesRead(pauses)), t(4000));
    let actions = m.handle(
        marks_of("load", vec![mark("extract", 1000, RunStatus::Succeeded)]),
        t(5000),
    );
    assert!(claims(&actions).is_empty(), "{actions:?}");
    let resumed = m.handle(
        Input::Control(ControlInput::PausesRead(Pauses::new())),
        t(6000),
    );
    assert!(
        resumed.contains(&Action::Chains(ChainsAction::ListMarks(JobName::new(
            "load"
        )))),
        "read again at the resume: {resumed:?}"
    );
}

#[test]
fn chained_runs_start_in_the_order_their_claims_come_back_not_their_instants() {
    let mut m = owning_chains();
    let marks = vec![
        mark("extract", 1000, RunStatus::Succeeded),
        mark("extract", 3000, RunStatus::Succeeded),
    ];
    let sent = claims(&m.handle(marks_of("load", marks), t(9000)));
    assert_eq!(sent.len(), 2, "{sent:?}");
    let (older, newer) = (&sent[0], &sent[1]);
    assert!(older.record.scheduled_unix_ms < newer.record.scheduled_unix_ms);
    assert_eq!(starts(&m.handle(ok(newer), t(9001))).len(), 1);
    assert_eq!(
        starts(&m.handle(ok(older), t(9002))).len(),
        1,
        "an older instant's child still runs after a newer one's"
    );
}

#[test]
fn a_backfilled_parent_makes_its_childrens_runs_only_when_asked() {
    for with_children in [false, true] {
        let mut m = owning_chains();
        let request = crate::control::BackfillRequest {
            job: JobName::new("clean"),
            ticks: vec![t(-60_000).timestamp_millis()],
            by: "ops@host".to_owned(),
            at_unix_ms: 0,
            with_children,
        };
        let taken = m.handle(
            Input::Control(ControlInput::BackfillsRead(vec![(
                "req-1".to_owned(),
                request,
            )])),
            t(100),
        );
        let claim = claims(&taken)
            .into_iter()
            .find(|c| c.record.backfill)
            .expect("the backfill's tick is claimed");
        let (run, _) = only_start(&m.handle(ok(&claim), t(101)));
        let end = end_run(
            &mut m,
            ended(&run, RunOutcome::Exited { code: 0 }, t(101)),
            t(200),
        );
        let expected: &[&str] = if with_children { &["report"] } else { &[] };
        let children: Vec<&str> = end.children.iter().map(JobName::as_str).collect();
        assert_eq!(children, expected, "with_children = {with_children}");
    }
}

#[test]
fn a_failed_reading_of_the_marks_is_tried_again_shortly_not_at_the_next_parents_end() {
    let mut m = owning_chains();
    m.handle(marks_of("report", vec![]), t(0));
    let failed = Input::Chains(ChainsInput::MarksListed {
        job: JobName::new("load"),
        result: Err("connection loss".into()),
    });
    assert!(m.handle(failed, t(100)).is_empty());
    assert!(
        m.next_deadline().is_some_and(|at| at <= t(2100)),
        "{:?}",
        m.next_deadline()
    );
    let again = m.handle(Input::Tick, t(2100));
    assert!(
        again.contains(&Action::Chains(ChainsAction::ListMarks(JobName::new(
            "load"
        )))),
        "read again: {again:?}"
    );
}
