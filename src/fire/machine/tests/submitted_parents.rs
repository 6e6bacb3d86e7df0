//! A submitted (or triggered) parent's run makes its child's run (issue 36): its final record
//! leaves a mark with its payload for each child that follows it alone and admits its end; the
//! child's owner turns the mark into a submission of the child, due at the parent's instant,
//! which then runs as any submission does, naming its parent's run.

use super::*;
use crate::delayed::submission::{AfterRun, DueBucket, Submission, SubmissionId};
use crate::layout::MarkName;
use crate::run::{ChainMark, FoundMark, ParentRun};

/// Once a year, far from the instants here: the jobs' ticks stay out of the way.
const YEARLY: &str = "0 0 0 1 1 *";

/// `order`, submitted here, `notify` after it alone, `audit` after it and `clean` (a diamond:
/// the parents share a schedule), and `page` after it only when it failed.
fn chained() -> String {
    format!(
        "{}{}{}{}{}",
        job("order", YEARLY, ""),
        job("clean", YEARLY, ""),
        "[[job]]\nname = \"notify\"\nshell = \"cat\"\nafter = [\"order\"]\nstarting_deadline = \"10s\"\n",
        "[[job]]\nname = \"audit\"\nshell = \"true\"\nafter = [\"order\", \"clean\"]\n",
        "[[job]]\nname = \"page\"\nshell = \"true\"\nafter = [\"order\"]\nafter_status = \"failed\"\n",
    )
}

fn id(text: &str) -> SubmissionId {
    SubmissionId::parse(text).expect("valid id")
}

fn order(due_ms: i64, payload: &[u8]) -> Submission {
    Submission {
        job: JobName::new("order"),
        due_unix_ms: t(due_ms).timestamp_millis(),
        submitted_unix_ms: t(0).timestamp_millis(),
        payload: payload.to_vec(),
        requested_by: None,
        anonymous: false,
        marker_names_job: true,
        retry_of: None,
        traceparent: None,
        after: None,
    }
}

/// A machine owning the lock for [`chained`], every listing answered empty.
fn owning_chains() -> FireMachine {
    let mut m = machine(&chained());
    m.handle(
        Input::Delayed(DelayedInput::DueWatch { watching: true }),
        t(-1000),
    );
    for action in m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(0)) {
        let input = match action {
            Action::CatchUp(CatchUpAction::ListRecords(job)) => {
                Input::CatchUp(CatchUpInput::Listed {
                    job,
                    result: Ok(JobRecords::default()),
                })
            }
            Action::Chains(ChainsAction::ListMarks(job)) => {
                Input::Chains(ChainsInput::MarksListed {
                    job,
                    result: Ok(Vec::new()),
                })
            }
            _ => continue,
        };
        m.handle(input, t(0));
    }
    m
}

/// Runs submission `order-7` (due at 2 s, payload `42`) to its end as `outcome`; its final
/// record as written.
fn run_order(m: &mut FireMachine, outcome: RunOutcome) -> Claim {
    let read = Input::Delayed(DelayedInput::Read {
        id: id("order-7"),
        result: Ok(Some(order(2000, b"42"))),
    });
    m.handle(read, t(1000));
    let claim = claims(&m.handle(Input::Tick, t(2000)))
        .into_iter()
        .find(|c| c.record.submission_id.is_some())
        .expect("the submission is claimed at its due time");
    let started = starts(&m.handle(ok(&claim), t(2001)));
    let (run, context) = started.first().cloned().expect("the run starts");
    assert_eq!(
        context.submission.map(|s| s.payload.to_vec()),
        Some(b"42".to_vec())
    );
    let ended = m.handle(ended(&run, outcome, t(2100)), t(2100));
    records_written(&ended)
        .into_iter()
        .find(|c| c.record.job.as_str() == "order")
        .cloned()
        .expect("its final record is written")
}

fn children(claim: &Claim) -> Vec<&str> {
    let mut children: Vec<&str> = claim.children.iter().map(JobName::as_str).collect();
    children.sort_unstable();
    children
}

#[test]
fn a_submitted_parents_end_leaves_marks_with_its_payload_only_for_children_it_alone_makes_run() {
    let mut m = owning_chains();
    let succeeded = run_order(&mut m, RunOutcome::Exited { code: 0 });
    assert_eq!(
        children(&succeeded),
        ["notify"],
        "audit has two parents and page follows failures: {succeeded:?}"
    );
    assert_eq!(succeeded.payload.as_deref(), Some(&b"42".to_vec()));

    let mut m = owning_chains();
    let failed = run_order(&mut m, RunOutcome::Exited { code: 3 });
    assert_eq!(children(&failed), ["page"], "{failed:?}");
}

/// The trace `order-7`'s run was given at its first claim.
const PARENT_TRACE: crate::run::RunTrace = crate::run::RunTrace {
    trace_id: opentelemetry::trace::TraceId::from_bytes(
        0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736_u128.to_be_bytes(),
    ),
    span_id: opentelemetry::trace::SpanId::from_bytes(0x00f0_67aa_0ba9_02b7_u64.to_be_bytes()),
};

/// The mark `order-7`'s run (due at 2 s) left, ended `status`, carrying `42`.
fn submitted_mark(status: RunStatus) -> FoundMark {
    FoundMark {
        name: MarkName {
            submission: Some(id("order-7")),
            ..MarkName::of_tick(t(2000).timestamp_millis(), &JobName::new("order"))
        },
        mark: ChainMark {
            payload: b"42".to_vec(),
            trace: Some(PARENT_TRACE),
            ..ChainMark::of("order-2000-order-7", status)
        },
    }
}

fn marks_of(job: &str, marks: Vec<FoundMark>) -> Input {
    Input::Chains(ChainsInput::MarksListed {
        job: JobName::new(job),
        result: Ok(marks),
    })
}

/// The one child submit among `actions`.
fn only_submit(actions: &[Action]) -> (JobName, MarkName, SubmissionId, Submission) {
    let submits: Vec<_> = actions
        .iter()
        .filter_map(|action| match action {
            Action::Chains(ChainsAction::SubmitChild {
                job,
                mark,
                id,
                submission,
                token,
            }) => {
                assert_eq!(*token, TOKEN, "fenced by the owner's token");
                Some((
                    job.clone(),
                    mark.clone(),
                    id.clone(),
                    (**submission).clone(),
                ))
            }
            _ => None,
        })
        .collect();
    assert_eq!(submits.len(), 1, "one submit in {actions:?}");
    submits.into_iter().next().expect("one")
}

#[test]
fn a_submitted_parents_mark_becomes_one_submission_of_the_child_at_the_parents_instant() {
    let mut m = owning_chains();
    let mark = submitted_mark(RunStatus::Succeeded);
    let actions = m.handle(marks_of("notify", vec![mark.clone()]), t(60_000));
    let (job, name, child_id, submission) = only_submit(&actions);
    assert!(claims(&actions).is_empty(), "no claim of the mark itself");
    assert_eq!((job.as_str(), &name), ("notify", &mark.name));
    assert_eq!(child_id, id("order-7.notify"));
    assert_eq!(
        submission,
        Submission {
            job: JobName::new("notify"),
            due_unix_ms: t(2000).timestamp_millis(),
            submitted_unix_ms: t(60_000).timestamp_millis(),
            payload: b"42".to_vec(),
            requested_by: None,
            anonymous: true,
            marker_names_job: true,
            retry_of: None,
            // The child's run span links to its parent's run span.
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned()),
            after: Some(AfterRun {
                job: JobName::new("order"),
                run_id: "order-2000-order-7".to_owned(),
                status: "succeeded".to_owned(),
            }),
        }
    );
    // A listing while the submit is out submits nothing again.
    let again = m.handle(marks_of("notify", vec![mark.clone()]), t(60_001));
    assert!(
        !again
            .iter()
            .any(|a| matches!(a, Action::Chains(ChainsAction::SubmitChild { .. }))),
        "{again:?}"
    );

    // Made: the watch reports it, as any submission; once read, it is claimed at once, though
    // its due time is older than notify's starting_deadline (its lateness counts from its
    // submit), and run with the payload and the parent's run.
    let made = Input::Chains(ChainsInput::ChildSubmitted {
        job: JobName::new("notify"),
        mark: mark.name.clone(),
        submission: Box::new(submission.clone()),
        result: Ok(Some(child_id.clone())),
    });
    assert!(
        claims(&m.handle(made, t(60_010))).is_empty(),
        "the watch's to report"
    );
    let created = Input::Delayed(DelayedInput::Created {
        bucket: DueBucket::of(submission.due_unix_ms),
        id: child_id.clone(),
        job: Some(JobName::new("notify")),
    });
    assert_eq!(
        m.handle(created, t(60_010)),
        [Action::Delayed(DelayedAction::ReadSubmission {
            id: child_id.clone()
        })]
    );
    let read = Input::Delayed(DelayedInput::Read {
        id: child_id.clone(),
        result: Ok(Some(submission.clone())),
    });
    let claim = only_claim(&m.handle(read, t(60_010)));
    assert_eq!(claim.record.submission_id, Some(child_id.clone()));
    assert_eq!(claim.record.scheduled_unix_ms, t(2000).timestamp_millis());
    assert_eq!(claim.record.status, RunStatus::Running);
    assert_eq!(
        claim.record.parents,
        [ParentRun {
            job: JobName::new("order"),
            run_id: "order-2000-order-7".to_owned(),
            status: RunStatus::Succeeded,
            trace: None,
        }]
    );
    let (_, context) = only_start(&m.handle(ok(&claim), t(60_012)));
    assert_eq!(context.scheduled_at, t(2000), "the parent's instant");
    assert_eq!(context.parent_runs, ["order-2000-order-7"]);
    let input = context.submission.expect("a submission's run");
    assert_eq!(
        (input.id.as_str(), &**input.payload),
        ("order-7.notify", &b"42"[..])
    );
}

/// Without a watch on the due buckets, the submission made is considered at once: its bucket
/// is past, and the buckets are read a second at a time onwards.
#[test]
fn without_a_watch_a_childs_submission_is_claimed_once_made() {
    let mut m = machine(&chained());
    for action in m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(0)) {
        if let Action::CatchUp(CatchUpAction::ListRecords(job)) = action {
            let result = Ok(JobRecords::default());
            m.handle(Input::CatchUp(CatchUpInput::Listed { job, result }), t(0));
        }
    }
    let mark = submitted_mark(RunStatus::Succeeded);
    let actions = m.handle(marks_of("notify", vec![mark.clone()]), t(60_000));
    let (job, name, child_id, submission) = only_submit(&actions);
    let made = Input::Chains(ChainsInput::ChildSubmitted {
        job,
        mark: name,
        submission: Box::new(submission),
        result: Ok(Some(child_id.clone())),
    });
    let claim = only_claim(&m.handle(made, t(60_010)));
    assert_eq!(claim.record.submission_id, Some(child_id));
}

#[test]
fn a_submitted_parents_mark_a_child_does_not_follow_is_removed_and_a_failed_submit_read_again() {
    let mut m = owning_chains();
    // audit has two parents: it joins no submitted run.
    let diamond = submitted_mark(RunStatus::Succeeded);
    let actions = m.handle(marks_of("audit", vec![diamond.clone()]), t(60_000));
    assert_eq!(
        actions,
        vec![Action::Chains(ChainsAction::DropMarks {
            job: JobName::new("audit"),
            marks: vec![diamond.name],
        })]
    );
    // page follows failures only.
    let succeeded = submitted_mark(RunStatus::Succeeded);
    let actions = m.handle(marks_of("page", vec![succeeded.clone()]), t(60_000));
    assert!(
        matches!(&actions[..], [Action::Chains(ChainsAction::DropMarks { marks, .. })] if *marks == [succeeded.name.clone()]),
        "{actions:?}"
    );

    // notify's submit fails: its marks are read again shortly, and submitted then.
    let mark = submitted_mark(RunStatus::Succeeded);
    let (job, name, _, submission) =
        only_submit(&m.handle(marks_of("notify", vec![mark.clone()]), t(60_000)));
    let failed = Input::Chains(ChainsInput::ChildSubmitted {
        job,
        mark: name,
        submission: Box::new(submission),
        result: Err("connection loss".to_owned()),
    });
    assert!(claims(&m.handle(failed, t(60_001))).is_empty());
    let relisted = m.handle(Input::Tick, t(62_001));
    assert!(
        relisted.contains(&Action::Chains(ChainsAction::ListMarks(JobName::new(
            "notify"
        )))),
        "{relisted:?}"
    );
    only_submit(&m.handle(marks_of("notify", vec![mark]), t(62_002)));
}
