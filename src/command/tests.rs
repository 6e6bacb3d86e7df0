//! What each command leaves in the audit trail, done and refused: one entry for every action
//! the trail keeps, none for a submit or a dry run (the real door against ZooKeeper is
//! `tests/audit.rs`).

use std::collections::BTreeMap;

use super::*;
use crate::control::backfill::Plan;
use crate::delayed::client::Submitted;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("an instant")
        .with_timezone(&Utc)
}

fn id(text: &str) -> SubmissionId {
    SubmissionId::parse(text).expect("an id")
}

fn submission(job: &str) -> Submission {
    Submission {
        job: JobName::new(job),
        due_unix_ms: 1_795_000_000_000,
        submitted_unix_ms: 1_794_000_000_000,
        payload: Vec::new(),
        requested_by: None,
        anonymous: false,
        marker_names_job: false,
        retry_of: None,
        traceparent: None,
        after: None,
    }
}

fn actor() -> Actor {
    Actor {
        by: "alice@ops-1".into(),
        from: "cli".into(),
        who: zkcron_who(),
    }
}

fn zkcron_who() -> crate::audit::Who {
    crate::audit::Who {
        account: Some("alice".into()),
        host: Some("ops-1".into()),
        zookeeper: Some("digest:ops".into()),
        ..crate::audit::Who::default()
    }
}

fn refused() -> Result<Outcome, CommandError> {
    Err(SteerError::NoOwner.into())
}

/// Every variant, with an outcome it can have, and what its entry must say: the action, the
/// job, the arguments; `None` where the trail keeps nothing.
#[allow(clippy::type_complexity)]
fn every_command() -> Vec<(
    Command,
    Outcome,
    Option<(
        &'static str,
        Option<&'static str>,
        Vec<(&'static str, &'static str)>,
    )>,
)> {
    let backfill = |dry_run| Command::Backfill {
        job: JobName::new("nightly"),
        from: at("2026-11-01T00:00:00Z"),
        to: at("2026-11-02T00:00:00Z"),
        options: BackfillOptions {
            dry_run,
            ..BackfillOptions::default()
        },
    };
    let backfilled = Outcome::Backfilled(Backfill {
        plan: Plan {
            job: JobName::new("nightly"),
            ticks: Vec::new(),
        },
        requested: vec![1, 2],
    });
    let receipt = Receipt {
        id: id("new-1"),
        outcome: Submitted::Created,
    };
    vec![
        (
            Command::Trigger {
                job: JobName::new("nightly"),
            },
            Outcome::Triggered(id("t-1")),
            Some(("trigger", Some("nightly"), vec![("submission_id", "t-1")])),
        ),
        (
            Command::Pause {
                job: JobName::new("nightly"),
                reason: Some("db migration".into()),
            },
            Outcome::Paused(Paused::Now),
            Some(("pause", Some("nightly"), vec![("reason", "db migration")])),
        ),
        (
            Command::Resume {
                job: JobName::new("nightly"),
            },
            Outcome::Resumed(None),
            Some(("resume", Some("nightly"), vec![("was", "not paused")])),
        ),
        (
            backfill(false),
            backfilled.clone(),
            Some((
                "backfill",
                Some("nightly"),
                vec![
                    ("from", "2026-11-01T00:00:00+00:00"),
                    ("to", "2026-11-02T00:00:00+00:00"),
                    ("ticks", "2"),
                ],
            )),
        ),
        (backfill(true), backfilled, None),
        (
            Command::Release {
                group: None,
                owner: None,
            },
            Outcome::Released(Released {
                from: NodeId::new("a"),
                to: NodeId::new("b"),
                after: std::time::Duration::from_millis(5),
            }),
            Some((
                "release",
                None,
                vec![("group", "default"), ("from", "a"), ("to", "b")],
            )),
        ),
        (
            Command::Submit(SubmitRequest {
                traceparent: None,
                job: JobName::new("deliver"),
                due: at("2026-11-01T00:00:00Z"),
                id: None,
                payload: Vec::new(),
            }),
            Outcome::Submitted(receipt.clone()),
            None,
        ),
        (
            Command::Cancel { id: id("later") },
            Outcome::Cancelled(submission("deliver")),
            Some(("cancel", Some("deliver"), vec![("submission_id", "later")])),
        ),
        (
            Command::Reschedule {
                id: id("later"),
                due: at("2026-11-01T00:00:00Z"),
            },
            Outcome::Rescheduled(Rescheduled::Moved(submission("deliver"))),
            Some((
                "reschedule",
                Some("deliver"),
                vec![
                    ("due", "2026-11-01T00:00:00+00:00"),
                    ("submission_id", "later"),
                ],
            )),
        ),
        (
            Command::Retry {
                id: id("old"),
                due: at("2026-11-01T00:00:00Z"),
                new_id: None,
            },
            Outcome::Retried(receipt),
            Some((
                "retry",
                None,
                vec![
                    ("due", "2026-11-01T00:00:00+00:00"),
                    ("submission_id", "old"),
                    ("new_id", "new-1"),
                ],
            )),
        ),
    ]
}

#[test]
fn every_command_leaves_one_entry_when_the_trail_keeps_it_done_or_refused() {
    let rows = every_command();
    // A new variant must get a row here: this counts them.
    assert_eq!(rows.len(), 10, "one row per variant, two for backfill");
    for (command, outcome, want) in rows {
        let done = command.audit_entry(&Ok(outcome), &actor());
        let Some((action, job, args)) = want else {
            assert_eq!(done, None, "{command:?} is not kept");
            assert_eq!(
                command.audit_entry(&refused(), &actor()),
                None,
                "{command:?} refused"
            );
            continue;
        };
        let entry = done.unwrap_or_else(|| panic!("{command:?}: an entry"));
        assert_eq!(entry.action, action, "{command:?}");
        assert_eq!(entry.action, command.action(), "{command:?}");
        assert_eq!(entry.job.as_deref(), job, "{command:?}");
        let want: BTreeMap<String, String> = args
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        assert_eq!(entry.args, want, "{command:?}");
        assert_eq!(
            (entry.by.as_str(), entry.from.as_str()),
            ("alice@ops-1", "cli")
        );
        assert_eq!(
            entry.who,
            zkcron_who(),
            "{command:?}: how the actor is known"
        );
        assert_eq!(entry.result, "ok", "{command:?}");

        let refusal = command
            .audit_entry(&refused(), &actor())
            .unwrap_or_else(|| panic!("{command:?}: a refusal is kept too"));
        assert_eq!(refusal.action, action);
        assert_eq!(
            refusal.result,
            "nobody owns the lock: there is nothing to release"
        );
    }
}

#[test]
fn a_pause_of_a_paused_job_and_a_resume_say_what_they_found() {
    let pause = Command::Pause {
        job: JobName::new("j"),
        reason: None,
    };
    let earlier = Pause::new(None, "bob@ops-2", 0);
    let entry = pause
        .audit_entry(
            &Ok(Outcome::Paused(Paused::Already(earlier.clone()))),
            &actor(),
        )
        .expect("kept");
    assert_eq!(
        entry.args.get("was").map(String::as_str),
        Some("paused already")
    );
    let resume = Command::Resume {
        job: JobName::new("j"),
    };
    let entry = resume
        .audit_entry(&Ok(Outcome::Resumed(Some(earlier))), &actor())
        .expect("kept");
    assert_eq!(
        entry.args.get("paused_by").map(String::as_str),
        Some("bob@ops-2")
    );
}
