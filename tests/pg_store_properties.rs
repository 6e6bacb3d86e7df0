//! The PostgreSQL store's promises as a property (issue 55): random sequences of submits,
//! cancels, fence raises, claims (of what is due, from the start or a mark, and of chosen
//! submissions) and ends by two owners, against a real server, each answer checked against a
//! model of what the store promises. A submission is claimed at most once, only by the owner
//! whose token the fence holds, never lost, and in exactly one place at the end.

use crate::support;

use std::collections::{BTreeMap, HashSet};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use support::postgres::shared_postgres;
use zkcron::delayed::{Submission, SubmissionId};
use zkcron::ledger::postgres::{Chosen, ChosenClaim, Ended, Mark, PgStore, StoreError, Where};
use zkcron::ledger::submissions::Submitted;
use zkcron::run::{RunRecord, RunStatus};
use zkcron::{FencingToken, JobName, NodeId};

/// 2026-12-04T12:00:00Z: every due time of a case is within seconds of it.
const NOON: i64 = 1_796_385_600_000;
const GROUP: &str = "/zkcron/properties";

/// One step of a case. Owners are `false` (A) and `true` (B); keys name ids `k<key>`.
#[derive(Debug, Clone)]
enum Op {
    Submit {
        key: u8,
        due: u8,
    },
    Cancel {
        key: u8,
    },
    /// The owner gains the lock: its token is one past the fence's.
    Raise {
        owner: bool,
    },
    /// The owner raises its own token again, which is stale once the other raised past it.
    RaiseAgain {
        owner: bool,
    },
    ClaimDue {
        owner: bool,
        limit: u8,
        from_mark: bool,
    },
    ClaimChosen {
        owner: bool,
        keys: Vec<u8>,
    },
    End {
        owner: bool,
        key: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..12;
    prop_oneof![
        4 => (key.clone(), 0u8..6).prop_map(|(key, due)| Op::Submit { key, due }),
        1 => key.clone().prop_map(|key| Op::Cancel { key }),
        1 => any::<bool>().prop_map(|owner| Op::Raise { owner }),
        1 => any::<bool>().prop_map(|owner| Op::RaiseAgain { owner }),
        3 => (any::<bool>(), 1u8..5, any::<bool>())
            .prop_map(|(owner, limit, from_mark)| Op::ClaimDue { owner, limit, from_mark }),
        2 => (any::<bool>(), prop::collection::vec(key.clone(), 1..4))
            .prop_map(|(owner, keys)| Op::ClaimChosen { owner, keys }),
        2 => (any::<bool>(), key).prop_map(|(owner, key)| Op::End { owner, key }),
    ]
}

/// Where the model says a submission is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    Pending,
    Open { token: i32 },
    Ended,
}

/// What the store promises, kept beside it.
#[derive(Debug, Default)]
struct Model {
    fence: i32,
    tokens: [Option<i32>; 2],
    marks: [Option<(i64, String)>; 2],
    /// Each id's due time (as first submitted) and place.
    ids: BTreeMap<String, (i64, Place)>,
    claimed_ever: HashSet<String>,
}

impl Model {
    /// `name` was claimed with `token`: open from now on, and never claimed before.
    fn claimed(&mut self, name: &str, token: i32) -> Result<(), TestCaseError> {
        prop_assert!(
            self.claimed_ever.insert(name.to_owned()),
            "{name} claimed twice"
        );
        if let Some((_, place)) = self.ids.get_mut(name) {
            *place = Place::Open { token };
        }
        Ok(())
    }
}

fn id(key: u8) -> String {
    format!("k{key:02}")
}

fn submission(due: i64) -> Submission {
    Submission::plain(JobName::new("close"), due, NOON - 60_000, b"{}".to_vec())
}

fn node(owner: bool) -> NodeId {
    NodeId::new(if owner { "10.0.0.2" } else { "10.0.0.1" })
}

/// Runs `ops` on a fresh database with two owners' stores, checking each answer.
async fn run_case(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dsn = shared_postgres()
        .create_database("properties")
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let open = |dsn: String| async move {
        PgStore::open(&dsn, GROUP)
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))
    };
    let stores = [open(dsn.clone()).await?, open(dsn).await?];
    let mut model = Model::default();
    for op in ops {
        step(&stores, &mut model, &op).await?;
    }
    for (name, (due, place)) in &model.ids {
        let found = stores[0]
            .find(&parse(name))
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let matches = match (&found, place) {
            (Some(Where::Pending(s)), Place::Pending) => s.due_unix_ms == *due,
            (Some(Where::Open { record, .. }), Place::Open { token }) => {
                record.fencing_token == FencingToken(*token)
            }
            (Some(Where::Ended { .. }), Place::Ended) => true,
            _ => false,
        };
        prop_assert!(
            matches,
            "{name}: the model has {place:?}, the store {found:?}"
        );
    }
    Ok(())
}

fn parse(name: &str) -> SubmissionId {
    SubmissionId::parse(name).unwrap_or_else(|_| SubmissionId::generate())
}

async fn step(stores: &[PgStore; 2], model: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    let fail = |e: StoreError| TestCaseError::fail(e.to_string());
    match op {
        Op::Submit { key, due } => {
            let name = id(*key);
            let due = NOON + i64::from(*due) * 10;
            let answer = stores[0].submit(&parse(&name), &submission(due)).await;
            match model.ids.get(&name) {
                None => {
                    prop_assert_eq!(answer.map_err(fail)?, Submitted::Created);
                    model.ids.insert(name, (due, Place::Pending));
                }
                Some((first, _)) if *first == due => {
                    prop_assert_eq!(answer.map_err(fail)?, Submitted::AlreadyThere);
                }
                Some(_) => prop_assert!(
                    matches!(answer, Err(StoreError::Conflict { .. })),
                    "another due time under {name}: {answer:?}"
                ),
            }
        }
        Op::Cancel { key } => {
            let name = id(*key);
            let answer = stores[1].cancel(&parse(&name), NOON - 1).await;
            match model.ids.get_mut(&name) {
                None => prop_assert!(
                    matches!(answer, Err(StoreError::NotFound { .. })),
                    "a cancel of {name}, never submitted: {answer:?}"
                ),
                Some((_, place)) if *place == Place::Pending => {
                    prop_assert!(matches!(answer, Ok(Ok(_))), "{answer:?}");
                    *place = Place::Ended;
                }
                Some(_) => prop_assert!(matches!(answer, Ok(Err(_))), "{answer:?}"),
            }
        }
        Op::Raise { owner } => {
            let token = model.fence + 1;
            stores[usize::from(*owner)]
                .raise_fence(FencingToken(token))
                .await
                .map_err(fail)?;
            model.fence = token;
            model.tokens[usize::from(*owner)] = Some(token);
        }
        Op::RaiseAgain { owner } => {
            let Some(token) = model.tokens[usize::from(*owner)] else {
                return Ok(());
            };
            let answer = stores[usize::from(*owner)]
                .raise_fence(FencingToken(token))
                .await;
            if token == model.fence {
                prop_assert!(answer.is_ok(), "its own token again: {answer:?}");
            } else {
                prop_assert!(
                    matches!(answer, Err(StoreError::Fenced { .. })),
                    "{answer:?}"
                );
            }
        }
        Op::ClaimDue {
            owner,
            limit,
            from_mark,
        } => {
            let o = usize::from(*owner);
            let Some(token) = model.tokens[o] else {
                return Ok(());
            };
            let mark = model.marks[o]
                .clone()
                .filter(|_| *from_mark)
                .map(|(due, id)| Mark {
                    due_unix_ms: due,
                    id,
                });
            let answer = stores[o]
                .claim_due(
                    FencingToken(token),
                    mark.as_ref(),
                    NOON + 1000,
                    i64::from(*limit),
                    (&node(*owner), ""),
                    NOON,
                )
                .await;
            if token != model.fence {
                prop_assert!(
                    matches!(answer, Err(StoreError::Fenced { .. })),
                    "{answer:?}"
                );
                return Ok(());
            }
            let batch = answer.map_err(fail)?;
            let after = mark.map(|m| (m.due_unix_ms, m.id));
            let mut expected: Vec<(i64, String)> = model
                .ids
                .iter()
                .filter(|(_, (_, place))| *place == Place::Pending)
                .map(|(name, (due, _))| (*due, name.clone()))
                .filter(|key| after.as_ref().is_none_or(|after| key > after))
                .collect();
            expected.sort();
            expected.truncate(usize::from(*limit));
            let got: Vec<(i64, String)> = batch
                .claimed
                .iter()
                .map(|c| (c.submission.due_unix_ms, c.id.as_str().to_owned()))
                .collect();
            prop_assert_eq!(&got, &expected);
            for (_, name) in got {
                model.claimed(&name, token)?;
            }
            if let Some(reached) = batch.reached {
                model.marks[o] = Some((reached.due_unix_ms, reached.id));
            }
        }
        Op::ClaimChosen { owner, keys } => {
            let o = usize::from(*owner);
            let Some(token) = model.tokens[o] else {
                return Ok(());
            };
            // Duplicates kept: an id chosen twice is claimed once.
            let names: Vec<String> = keys.iter().map(|key| id(*key)).collect();
            let ids: Vec<SubmissionId> = names.iter().map(|name| parse(name)).collect();
            let dues: Vec<i64> = names
                .iter()
                .map(|name| model.ids.get(name).map_or(NOON, |(due, _)| *due))
                .collect();
            let records: Vec<RunRecord> = ids
                .iter()
                .zip(&dues)
                .map(|(which, due)| {
                    let job = JobName::new("close");
                    let at = (&node(*owner), "");
                    RunRecord::claimed_submission(&job, *due, which, at, FencingToken(token), NOON)
                })
                .collect();
            let chosen: Vec<Chosen<'_>> = ids
                .iter()
                .zip(&dues)
                .zip(&records)
                .map(|((which, due), record)| Chosen {
                    id: which,
                    due_unix_ms: *due,
                    record,
                })
                .collect();
            let answer = stores[o]
                .claim_chosen(FencingToken(token), &chosen, (&node(*owner), ""), NOON)
                .await;
            if token != model.fence {
                prop_assert!(
                    matches!(answer, Err(StoreError::Fenced { .. })),
                    "{answer:?}"
                );
                return Ok(());
            }
            let claims = answer.map_err(fail)?;
            for (name, claim) in names.iter().zip(claims) {
                let pending = model
                    .ids
                    .get(name)
                    .is_some_and(|(_, place)| *place == Place::Pending);
                let expected = if pending {
                    ChosenClaim::Claimed
                } else {
                    ChosenClaim::Gone
                };
                prop_assert_eq!(claim, expected, "{}", name);
                if pending {
                    model.claimed(name, token)?;
                }
            }
        }
        Op::End { owner, key } => {
            let o = usize::from(*owner);
            let Some(token) = model.tokens[o] else {
                return Ok(());
            };
            let name = id(*key);
            let due = model.ids.get(&name).map_or(NOON, |(due, _)| *due);
            let which = parse(&name);
            let mut record = RunRecord::claimed_submission(
                &JobName::new("close"),
                due,
                &which,
                (&node(*owner), ""),
                FencingToken(token),
                NOON,
            );
            record.status = RunStatus::Succeeded;
            let answer = stores[o]
                .end(&which, FencingToken(token), &record, NOON + 5)
                .await
                .map_err(fail)?;
            match model.ids.get_mut(&name) {
                Some((_, place)) if *place == (Place::Open { token }) => {
                    prop_assert_eq!(answer, Ended::Recorded);
                    *place = Place::Ended;
                }
                _ => prop_assert_eq!(answer, Ended::NotOurs),
            }
        }
    }
    Ok(())
}

#[test]
fn two_owners_random_steps_never_claim_twice_lose_nothing_and_obey_the_fence() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&prop::collection::vec(op(), 1..40), |ops| {
        runtime.block_on(run_case(ops))
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
