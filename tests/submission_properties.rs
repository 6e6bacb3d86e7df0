//! The submissions' use cases keep the same promises on both stores (issue 55): random
//! sequences of submits (the same request again, or another under the same id), cancels,
//! reschedules and reads through `ledger::submissions`, run once on a ledger that keeps the
//! queue in ZooKeeper and once on one that keeps it in PostgreSQL (a real ensemble, a real
//! server), each answer checked against one model of what the use cases promise: an id holds
//! one request, a resubmit of it is a no-op and another is a conflict, only a pending
//! submission is cancelled or moved, and a read shows where each one is.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use support::postgres::shared_postgres;
use zkcron::delayed::{Submission, SubmissionId};
use zkcron::layout::{LedgerPaths, LockPaths};
use zkcron::ledger::Ledger;
use zkcron::ledger::postgres::PgStore;
use zkcron::ledger::submissions::{self, Rescheduled, SubmissionError, SubmissionState, Submitted};
use zkcron::run::RunStatus;
use zkcron::zk::{REQUEST_BOUND, Zk};
use zkcron::{FencingToken, JobName};

/// 2030-01-01T00:00:00Z: every due time is days ahead of any clock, so nothing comes due.
const FAR: i64 = 1_893_456_000_000;

/// One step of a case; keys name ids `k<key>`, dues are minutes past [`FAR`].
#[derive(Debug, Clone)]
enum Op {
    Submit { key: u8, due: u8, payload: u8 },
    Cancel { key: u8 },
    Reschedule { key: u8, due: u8 },
    Show { key: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..6;
    prop_oneof![
        4 => (key.clone(), 0u8..3, 0u8..2)
            .prop_map(|(key, due, payload)| Op::Submit { key, due, payload }),
        2 => key.clone().prop_map(|key| Op::Cancel { key }),
        2 => (key.clone(), 0u8..3).prop_map(|(key, due)| Op::Reschedule { key, due }),
        2 => key.prop_map(|key| Op::Show { key }),
    ]
}

/// Where the model says a submission is, with its request's due time and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Pending { due: u8, payload: u8 },
    Cancelled { due: u8, payload: u8 },
}

fn id(key: u8) -> SubmissionId {
    SubmissionId::parse(&format!("k{key}")).unwrap_or_else(|err| panic!("{err}"))
}

fn due_ms(due: u8) -> i64 {
    FAR + i64::from(due) * 60_000
}

fn request(due: u8, payload: u8) -> Submission {
    Submission::plain(
        JobName::new("close"),
        due_ms(due),
        FAR - 86_400_000,
        vec![payload],
    )
}

/// A ledger of its own: a chroot on the shared ensemble, and a database of its own when the
/// queue is kept in PostgreSQL.
async fn ledger(in_postgres: bool, case: usize) -> Result<Ledger, TestCaseError> {
    let fail = |e: String| TestCaseError::fail(e);
    let store = if in_postgres { "pg" } else { "zk" };
    let connect = support::shared_ensemble()
        .isolated_connect_string(&format!("submission_properties_{store}_{case}"))
        .await
        .map_err(|e| fail(e.to_string()))?;
    let client = zookeeper_client::Client::connect(&connect)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let zk = Zk::new(client, &zookeeper_client::Acls::anyone_all(), REQUEST_BOUND);
    let ledger = Ledger::new(zk);
    if !in_postgres {
        return Ok(ledger);
    }
    let dsn = shared_postgres()
        .create_database("submission_properties")
        .await
        .map_err(|e| fail(e.to_string()))?;
    let store = PgStore::open(&dsn, "/zkcron/g")
        .await
        .map_err(|e| fail(e.to_string()))?;
    store
        .raise_fence(FencingToken(1))
        .await
        .map_err(|e| fail(e.to_string()))?;
    Ok(ledger.with_delayed_store(Arc::new(store)))
}

/// Runs `ops` on `ledger`, checking each answer against the model.
async fn run_case(ledger: &Ledger, ops: &[Op]) -> Result<(), TestCaseError> {
    let paths = LedgerPaths::new(&LockPaths::new("/zkcron", "g"));
    let mut model: BTreeMap<u8, Place> = BTreeMap::new();
    for op in ops {
        match *op {
            Op::Submit { key, due, payload } => {
                let answer =
                    submissions::submit(ledger, &paths.delayed, &id(key), &request(due, payload))
                        .await;
                match (model.get(&key).copied(), answer) {
                    (None, Ok(Submitted::Created)) => {
                        model.insert(key, Place::Pending { due, payload });
                    }
                    (
                        Some(
                            Place::Pending { due: d, payload: p }
                            | Place::Cancelled { due: d, payload: p },
                        ),
                        Ok(Submitted::AlreadyThere),
                    ) if (d, p) == (due, payload) => {}
                    (
                        Some(
                            Place::Pending { due: d, payload: p }
                            | Place::Cancelled { due: d, payload: p },
                        ),
                        Err(SubmissionError::Conflict { .. }),
                    ) if (d, p) != (due, payload) => {}
                    (place, answer) => {
                        prop_assert!(false, "{op:?} on {place:?} answered {answer:?}");
                    }
                }
            }
            Op::Cancel { key } => {
                let answer =
                    submissions::cancel(ledger, &paths.delayed, &paths, &id(key), FAR - 1).await;
                match (model.get(&key).copied(), answer) {
                    (None, Err(SubmissionError::NotFound { .. })) => {}
                    (Some(Place::Pending { due, payload }), Ok(cancelled)) => {
                        prop_assert!(cancelled.same_request(&request(due, payload)));
                        model.insert(key, Place::Cancelled { due, payload });
                    }
                    (Some(Place::Cancelled { .. }), Err(SubmissionError::NotPending { .. })) => {}
                    (place, answer) => {
                        prop_assert!(false, "{op:?} on {place:?} answered {answer:?}");
                    }
                }
            }
            Op::Reschedule { key, due } => {
                let answer =
                    submissions::reschedule(ledger, &paths.delayed, &paths, &id(key), due_ms(due))
                        .await;
                match (model.get(&key).copied(), answer) {
                    (None, Err(SubmissionError::NotFound { .. })) => {}
                    (
                        Some(Place::Pending { due: d, payload }),
                        Ok(Rescheduled::AlreadyThere(_)),
                    ) if d == due => {
                        let _ = payload;
                    }
                    (Some(Place::Pending { due: d, payload }), Ok(Rescheduled::Moved(moved)))
                        if d != due =>
                    {
                        prop_assert!(moved.same_request(&request(due, payload)));
                        model.insert(key, Place::Pending { due, payload });
                    }
                    (
                        Some(Place::Cancelled { .. }),
                        Err(SubmissionError::NotReschedulable { .. }),
                    ) => {}
                    (place, answer) => {
                        prop_assert!(false, "{op:?} on {place:?} answered {answer:?}");
                    }
                }
            }
            Op::Show { key } => {
                let answer = submissions::show(ledger, &paths.delayed, &paths, &id(key)).await;
                match (model.get(&key).copied(), answer) {
                    (None, Ok(None)) => {}
                    (
                        Some(Place::Pending { due, payload }),
                        Ok(Some((shown, SubmissionState::Pending))),
                    ) => {
                        prop_assert!(shown.same_request(&request(due, payload)), "{shown:?}");
                    }
                    (
                        Some(Place::Cancelled { due, payload }),
                        Ok(Some((shown, SubmissionState::Recorded(record)))),
                    ) => {
                        prop_assert!(shown.same_request(&request(due, payload)), "{shown:?}");
                        prop_assert_eq!(record.status, RunStatus::Cancelled);
                    }
                    (place, answer) => {
                        prop_assert!(false, "{op:?} on {place:?} answered {answer:?}");
                    }
                }
            }
        }
    }
    Ok(())
}

#[test]
fn the_submissions_use_cases_answer_the_same_on_both_stores() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut runner = TestRunner::new(Config {
        cases: 16,
        failure_persistence: None,
        ..Config::default()
    });
    let cases = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&prop::collection::vec(op(), 1..30), |ops| {
        let case = cases.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        runtime.block_on(async {
            for in_postgres in [false, true] {
                let ledger = ledger(in_postgres, case).await?;
                run_case(&ledger, &ops).await.map_err(|err| {
                    TestCaseError::fail(format!("in_postgres={in_postgres}: {err}"))
                })?;
            }
            Ok(())
        })
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
