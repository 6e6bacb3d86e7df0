//! The delayed queue's PostgreSQL store against a real server (issue 55): a submission's life
//! through its three tables, idempotent ids, the fence that stops a stale owner's claim, claims
//! that never share a row, the schema's migration by version, and a server restarted under it.

use crate::support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use support::postgres::{PgServer, shared_postgres};
use support::wait_until;
use zkcron::delayed::{Submission, SubmissionId};
use zkcron::ensemble::TlsFiles;
use zkcron::events::cursor::StoreMark;
use zkcron::layout::{LedgerPaths, LockPaths};
use zkcron::ledger::Ledger;
use zkcron::ledger::Remember;
use zkcron::ledger::chains;
use zkcron::ledger::postgres::{
    Chosen, ChosenClaim, Ended, Mark, PgStore, Pruned, StoreError, Submit, Updated, Where,
};
use zkcron::ledger::submissions::{self, JobsRead, SubmissionError, SubmissionState, Submitted};
use zkcron::run::{RunRecord, RunStatus};
use zkcron::zk::{REQUEST_BOUND, Zk};
use zkcron::{FencingToken, JobName, NodeId};

/// Bound on a lock wait showing in `pg_stat_activity`: the raise is sent at once and queues
/// behind the claim's share lock in milliseconds; the slack is for a crowded test pool.
const LOCK_WAIT_SEEN: Duration = Duration::from_secs(10);

/// Bound on a notification reaching the listener: sent at the submit's commit, on loopback;
/// milliseconds, the slack is for a crowded test pool.
const WAKE_SEEN: Duration = Duration::from_secs(10);

/// The request bound of the paused-server test: what a claim against it waits before it gives
/// up. Short, to keep the test short; long enough for a crowded pool's answer from a running
/// server (the store's own default is 10 s).
const PAUSE_BOUND: Duration = Duration::from_secs(2);

const GROUP: &str = "/zkcron/g";

fn node() -> NodeId {
    NodeId::new("10.0.0.1")
}

fn submission(job: &str, due: i64, payload: &[u8]) -> Submission {
    Submission::plain(JobName::new(job), due, due - 1000, payload.to_vec())
}

fn id(text: &str) -> SubmissionId {
    SubmissionId::parse(text).expect("a valid id")
}

/// A fresh database on the shared server and a store on it, its fence raised to `token`.
async fn store(test: &str, token: i32) -> (PgStore, String) {
    let dsn = shared_postgres()
        .create_database(test)
        .await
        .expect("a database");
    let store = PgStore::open(&dsn, GROUP).await.expect("the store opens");
    store
        .raise_fence(FencingToken(token))
        .await
        .expect("the fence rises");
    (store, dsn)
}

/// 2026-12-04T12:00:00Z, and the instants the tests submit around it.
const NOON: i64 = 1_796_385_600_000;

#[tokio::test]
async fn a_submission_is_pending_then_open_then_ended_and_never_in_two_places() {
    let (store, _) = store("life", 1).await;
    let close = id("order-1");
    let asked = submission("close", NOON, b"{\"order\":1}");
    assert_eq!(
        store.submit(&close, &asked).await.expect("submitted"),
        Submitted::Created
    );
    assert_eq!(
        store.find(&close).await.expect("found"),
        Some(Where::Pending(asked.clone()))
    );

    let early = store
        .claim_due(
            FencingToken(1),
            None,
            NOON - 1,
            10,
            (&node(), "10.0.0.1"),
            NOON - 300,
        )
        .await
        .expect("a claim");
    assert!(
        early.claimed.is_empty(),
        "claimed before it was due: {early:?}"
    );

    let batch = store
        .claim_due(
            FencingToken(1),
            None,
            NOON,
            10,
            (&node(), "10.0.0.1"),
            NOON - 250,
        )
        .await
        .expect("a claim");
    assert_eq!(batch.claimed.len(), 1, "{batch:?}");
    let claimed = &batch.claimed[0];
    assert_eq!(claimed.id, close);
    assert_eq!(claimed.submission, asked);
    assert_eq!(claimed.record.status, RunStatus::Claimed);
    assert_eq!(claimed.record.fencing_token, FencingToken(1));
    match store.find(&close).await.expect("found") {
        Some(Where::Open { submission, record }) => {
            assert_eq!(submission, asked);
            assert_eq!(*record, claimed.record, "the open run shows its claim");
        }
        other => panic!("not open after its claim: {other:?}"),
    }
    let again = store
        .claim_due(
            FencingToken(1),
            None,
            NOON + 60_000,
            10,
            (&node(), "10.0.0.1"),
            NOON,
        )
        .await
        .expect("a claim");
    assert!(again.claimed.is_empty(), "claimed twice: {again:?}");

    let mut done = claimed.record.clone();
    done.status = RunStatus::Succeeded;
    done.finished_unix_ms = Some(NOON + 40);
    assert_eq!(
        store
            .end(&close, FencingToken(1), &done, NOON + 40)
            .await
            .expect("ended"),
        Ended::Recorded
    );
    match store.find(&close).await.expect("found") {
        Some(Where::Ended { record, .. }) => assert_eq!(*record, done),
        other => panic!("not ended: {other:?}"),
    }
    assert_eq!(
        store
            .end(&close, FencingToken(1), &done, NOON + 50)
            .await
            .expect("answered"),
        Ended::NotOurs,
        "a second end wrote again"
    );
}

#[tokio::test]
async fn a_submit_wakes_the_listening_owner_of_its_lock_group_and_no_other() {
    let (store, dsn) = store("listen", 1).await;
    let mut woken = store.listen().await.expect("listening");
    let other = PgStore::open(&dsn, "/zkcron/other")
        .await
        .expect("the store opens");
    other
        .submit(&id("x-1"), &submission("close", NOON + 5, b""))
        .await
        .expect("submitted");
    store
        .submit(&id("s-1"), &submission("close", NOON, b""))
        .await
        .expect("submitted");
    // Notifications arrive in commit order: the other group's came first and was passed over.
    let wake = tokio::time::timeout(WAKE_SEEN, woken.recv()).await;
    assert_eq!(
        wake.expect("woken in time"),
        Some(Submit {
            due_unix_ms: NOON,
            id: Some(id("s-1")),
            job: Some(JobName::new("close")),
        }),
        "a single submit names its submission and its job"
    );

    let batch = [
        (id("b-1"), submission("close", NOON + 7, b"")),
        (id("b-2"), submission("close", NOON + 3, b"")),
    ];
    for result in store.submit_batch(&batch).await {
        assert_eq!(result.expect("submitted"), Submitted::Created);
    }
    let wake = tokio::time::timeout(WAKE_SEEN, woken.recv()).await;
    assert_eq!(
        wake.expect("woken in time"),
        Some(Submit {
            due_unix_ms: NOON + 3,
            id: None,
            job: None,
        }),
        "the batch's earliest due, and no one id"
    );
}

#[tokio::test]
async fn a_batch_submits_each_once_and_tells_resubmits_and_conflicts_apart() {
    let (store, _) = store("batch", 1).await;
    store
        .submit(&id("old"), &submission("close", NOON, b"x"))
        .await
        .expect("submitted");
    let batch = [
        (id("new-1"), submission("close", NOON, b"1")),
        (id("old"), submission("close", NOON, b"x")),
        (id("new-2"), submission("close", NOON + 86_400_000, b"2")),
        (id("new-1"), submission("close", NOON, b"1")),
        (id("new-3"), submission("close", NOON, b"3")),
    ];
    let mut results = store.submit_batch(&batch).await.into_iter();
    assert_eq!(
        results.next().map(Result::ok),
        Some(Some(Submitted::Created))
    );
    assert_eq!(
        results.next().map(Result::ok),
        Some(Some(Submitted::AlreadyThere))
    );
    assert_eq!(
        results.next().map(Result::ok),
        Some(Some(Submitted::Created))
    );
    assert_eq!(
        results.next().map(Result::ok),
        Some(Some(Submitted::AlreadyThere)),
        "an id twice in one batch"
    );
    assert_eq!(
        results.next().map(Result::ok),
        Some(Some(Submitted::Created))
    );
    let conflict = store
        .submit_batch(&[(id("new-3"), submission("close", NOON, b"other"))])
        .await;
    assert!(
        matches!(conflict[..], [Err(StoreError::Conflict { .. })]),
        "{conflict:?}"
    );
    let claimed = store
        .claim_due(
            FencingToken(1),
            None,
            NOON + 86_400_000,
            100,
            (&node(), ""),
            NOON,
        )
        .await
        .expect("a claim");
    let mut ids: Vec<_> = claimed.claimed.iter().map(|c| c.id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        ["new-1", "new-2", "new-3", "old"],
        "one pending row each"
    );
}

#[tokio::test]
async fn the_machines_chosen_claims_take_their_records_and_a_cancelled_one_is_gone() {
    let (store, _) = store("chosen", 4).await;
    for (name, due) in [
        ("a", NOON),
        ("b", NOON + 1),
        ("c", NOON + 2),
        ("later", NOON + 60_000),
    ] {
        store
            .submit(&id(name), &submission("close", due, b""))
            .await
            .expect("submitted");
    }
    let due = store
        .pending_between(NOON - 1, NOON + 2, 10, &JobsRead::all())
        .await
        .expect("read");
    let names: Vec<_> = due.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"], "the read of what is due");
    let first = store
        .pending_between(NOON - 1, NOON + 60_000, 1, &JobsRead::all())
        .await
        .expect("read");
    assert_eq!(first.len(), 1, "the limit");

    store
        .cancel(&id("b"), NOON - 5)
        .await
        .expect("answered")
        .expect("cancelled");
    let records: Vec<_> = due
        .iter()
        .map(|(which, s)| {
            RunRecord::claimed_submission(
                &s.job,
                s.due_unix_ms,
                which,
                (&node(), "10.0.0.1"),
                FencingToken(4),
                NOON - 250,
            )
        })
        .collect();
    let chosen: Vec<_> = due
        .iter()
        .zip(&records)
        .map(|((which, s), record)| Chosen {
            id: which,
            due_unix_ms: s.due_unix_ms,
            record,
        })
        .collect();
    let claims = store
        .claim_chosen(FencingToken(4), &chosen, (&node(), "10.0.0.1"), NOON - 250)
        .await
        .expect("claimed");
    assert_eq!(
        claims,
        [
            ChosenClaim::Claimed,
            ChosenClaim::Gone,
            ChosenClaim::Claimed
        ]
    );
    match store.find(&id("c")).await.expect("found") {
        Some(Where::Open { record, .. }) => assert_eq!(*record, records[2], "the chosen record"),
        other => panic!("not open: {other:?}"),
    }
    let again = store
        .claim_chosen(FencingToken(4), &chosen[..1], (&node(), ""), NOON)
        .await
        .expect("answered");
    assert_eq!(again, [ChosenClaim::Gone], "claimed twice");
    assert!(matches!(
        store
            .claim_chosen(FencingToken(3), &chosen[..1], (&node(), ""), NOON)
            .await,
        Err(StoreError::Fenced { .. })
    ));
}

/// The claim record of `which`, as the owner holding `token` chose it.
fn chosen_record(which: &SubmissionId, s: &Submission, token: i32) -> RunRecord {
    RunRecord::claimed_submission(
        &s.job,
        s.due_unix_ms,
        which,
        (&node(), "10.0.0.1"),
        FencingToken(token),
        NOON,
    )
}

#[tokio::test]
async fn named_groups_read_their_own_jobs_from_the_one_queue_each_behind_its_own_fence() {
    // The default group's owner holds token 5 of its epoch; group `batch`'s holds token 1 of
    // its own. Both claim from the fleet's one queue.
    let (default, _dsn) = store("groups", 5).await;
    let batch = default.fenced_by(&format!("{GROUP}/groups/batch"));
    batch
        .raise_fence(FencingToken(1))
        .await
        .expect("a group's fence rises on its own");
    let (mail, report) = (
        submission("mail", NOON, b""),
        submission("report", NOON, b""),
    );
    for (name, which) in [("m", &mail), ("r", &report)] {
        default.submit(&id(name), which).await.expect("submitted");
    }
    let batch_jobs = JobsRead::Only(vec!["report".to_owned()]);
    let read = |found: Vec<(SubmissionId, Submission)>| -> Vec<String> {
        found.into_iter().map(|(id, _)| id.to_string()).collect()
    };
    let batchs = batch
        .pending_between(NOON - 1, NOON, 10, &batch_jobs)
        .await
        .expect("read");
    assert_eq!(read(batchs), ["r"], "a named group reads its own jobs");
    let defaults = default
        .pending_between(NOON - 1, NOON, 10, &JobsRead::AllBut(vec!["report".into()]))
        .await
        .expect("read");
    assert_eq!(
        read(defaults),
        ["m"],
        "the default group reads all but theirs"
    );

    let (r, r_record) = (id("r"), chosen_record(&id("r"), &report, 1));
    let chosen = [Chosen {
        id: &r,
        due_unix_ms: NOON,
        record: &r_record,
    }];
    assert!(
        matches!(
            default
                .claim_chosen(FencingToken(1), &chosen, (&node(), ""), NOON)
                .await,
            Err(StoreError::Fenced { current: 5, .. })
        ),
        "a group's token is checked against its own fence, not another group's"
    );
    let claimed = batch
        .claim_chosen(FencingToken(1), &chosen, (&node(), ""), NOON)
        .await
        .expect("claimed");
    assert_eq!(claimed, [ChosenClaim::Claimed]);

    // A newer owner of `batch` raises its fence: the old one's writes land nowhere, while the
    // default group's fence stays where its own owner put it.
    let newer = default.fenced_by(&format!("{GROUP}/groups/batch"));
    newer.raise_fence(FencingToken(2)).await.expect("raised");
    let mut running = r_record.clone();
    running.status = RunStatus::Running;
    assert_eq!(
        batch
            .update_open(&r, &running, 0, FencingToken(1))
            .await
            .expect("answered"),
        Updated::Conflict,
        "a stale group owner's write"
    );
    assert_eq!(default.fence().await.expect("read"), Some(5));
    assert_eq!(newer.fence().await.expect("read"), Some(2));
}

#[tokio::test]
async fn a_next_owner_takes_an_open_run_over_and_the_old_owners_writes_find_it_gone() {
    let (old_owner, dsn) = store("take_over", 7).await;
    old_owner
        .submit(&id("run-1"), &submission("close", NOON, b""))
        .await
        .expect("submitted");
    let batch = old_owner
        .claim_due(FencingToken(7), None, NOON, 10, (&node(), "10.0.0.1"), NOON)
        .await
        .expect("a claim");
    let claim = batch.claimed[0].record.clone();
    let mut running = claim.clone();
    running.status = RunStatus::Running;
    let Updated::Written(version) = old_owner
        .update_open(&id("run-1"), &running, 0, FencingToken(7))
        .await
        .expect("written")
    else {
        panic!("the first write of an open run conflicted");
    };
    assert_eq!(
        old_owner
            .update_open(&id("run-1"), &running, 0, FencingToken(7))
            .await
            .expect("answered"),
        Updated::Conflict,
        "a stale version was written over"
    );

    // The new owner: its token raised, the open run read and marked as it decides.
    let new_owner = PgStore::open(&dsn, GROUP).await.expect("the store opens");
    new_owner
        .raise_fence(FencingToken(8))
        .await
        .expect("the fence rises");
    let open = new_owner.open_runs(None).await.expect("read");
    assert_eq!(open.len(), 1);
    assert_eq!((open[0].version, open[0].token), (version, FencingToken(7)));
    assert_eq!(open[0].record, running);
    let mut interrupted = running.clone();
    interrupted.status = RunStatus::Interrupted;
    interrupted.finished_unix_ms = Some(NOON + 5000);
    assert!(
        matches!(
            old_owner
                .take_over(
                    &id("run-1"),
                    FencingToken(7),
                    (&node(), ""),
                    &interrupted,
                    version
                )
                .await,
            Err(StoreError::Fenced { .. })
        ),
        "a stale owner took a run over"
    );
    let taken = new_owner
        .take_over(
            &id("run-1"),
            FencingToken(8),
            (&NodeId::new("10.0.0.2"), ""),
            &interrupted,
            version,
        )
        .await
        .expect("taken over");
    assert_eq!(taken, Updated::Written(version + 1));

    let mut succeeded = running.clone();
    succeeded.status = RunStatus::Succeeded;
    assert_eq!(
        old_owner
            .end(&id("run-1"), FencingToken(7), &succeeded, NOON + 6000)
            .await
            .expect("answered"),
        Ended::NotOurs,
        "the old owner ended a run the new one took over"
    );
    assert_eq!(
        new_owner
            .end(&id("run-1"), FencingToken(8), &interrupted, NOON + 5000)
            .await
            .expect("answered"),
        Ended::Recorded
    );
    let history = new_owner
        .history(&JobName::new("close"), 10)
        .await
        .expect("read");
    assert_eq!(history, [interrupted]);
    assert!(new_owner.open_runs(None).await.expect("read").is_empty());
}

#[tokio::test]
async fn a_claim_from_a_mark_takes_what_is_past_it_and_one_from_the_start_finds_the_rest() {
    let (store, _) = store("mark", 1).await;
    for (name, due) in [("b", NOON), ("a", NOON), ("c", NOON + 1), ("d", NOON + 2)] {
        store
            .submit(&id(name), &submission("close", due, b""))
            .await
            .expect("submitted");
    }
    let claim = |after: Option<Mark>, limit| {
        let store = &store;
        async move {
            store
                .claim_due(
                    FencingToken(1),
                    after.as_ref(),
                    NOON + 10,
                    limit,
                    (&node(), ""),
                    NOON,
                )
                .await
                .expect("a claim")
        }
    };
    let first = claim(None, 2).await;
    let ids: Vec<_> = first.claimed.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"], "(due, id) order");
    let reached = first.reached.clone().expect("a mark");
    assert_eq!((reached.due_unix_ms, reached.id.as_str()), (NOON, "b"));

    // Submitted late, due below the mark: a claim from the mark does not see it.
    store
        .submit(&id("late"), &submission("close", NOON - 5, b""))
        .await
        .expect("submitted");
    let next = claim(Some(reached), 10).await;
    let ids: Vec<_> = next.claimed.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["c", "d"]);
    let swept = claim(None, 10).await;
    let ids: Vec<_> = swept.claimed.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        ["late"],
        "a claim from the start finds what the mark passed over"
    );
    assert!(claim(None, 10).await.reached.is_none());
}

#[tokio::test]
async fn a_resubmit_of_the_same_request_changes_nothing_and_another_request_under_its_id_conflicts()
{
    let (store, _) = store("resubmit", 1).await;
    let order = id("order-2");
    let asked = submission("close", NOON, b"a");
    assert_eq!(
        store.submit(&order, &asked).await.expect("submitted"),
        Submitted::Created
    );
    let mut retried = asked.clone();
    retried.submitted_unix_ms += 5000;
    assert_eq!(
        store.submit(&order, &retried).await.expect("resubmitted"),
        Submitted::AlreadyThere
    );
    let other = submission("close", NOON, b"b");
    assert!(
        matches!(
            store.submit(&order, &other).await,
            Err(StoreError::Conflict { .. })
        ),
        "another payload under the same id was taken"
    );
    // Still remembered once claimed: the id is not free while its run is open.
    store
        .claim_due(FencingToken(1), None, NOON, 10, (&node(), ""), NOON)
        .await
        .expect("a claim");
    assert_eq!(
        store.submit(&order, &retried).await.expect("resubmitted"),
        Submitted::AlreadyThere
    );
    let batch = store
        .claim_due(FencingToken(1), None, NOON + 1000, 10, (&node(), ""), NOON)
        .await
        .expect("a claim");
    assert!(
        batch.claimed.is_empty(),
        "a resubmit made a second run: {batch:?}"
    );
}

#[tokio::test]
async fn a_stale_owner_claims_nothing_once_a_newer_owner_raised_the_fence() {
    let (old_owner, dsn) = store("stale", 5).await;
    old_owner
        .submit(&id("s-1"), &submission("close", NOON, b""))
        .await
        .expect("submitted");
    // The new owner gained the lock in ZooKeeper (token 6) while the old one was frozen.
    let new_owner = PgStore::open(&dsn, GROUP).await.expect("the store opens");
    new_owner
        .raise_fence(FencingToken(6))
        .await
        .expect("the fence rises");

    match old_owner
        .claim_due(FencingToken(5), None, NOON, 10, (&node(), ""), NOON)
        .await
    {
        Err(StoreError::Fenced { ours, current, .. }) => {
            assert_eq!((ours, current), (FencingToken(5), 6));
        }
        other => panic!("a stale owner's claim was not fenced: {other:?}"),
    }
    assert!(
        matches!(
            old_owner.raise_fence(FencingToken(5)).await,
            Err(StoreError::Fenced { .. })
        ),
        "the fence went back down"
    );
    let batch = new_owner
        .claim_due(
            FencingToken(6),
            None,
            NOON,
            10,
            (&NodeId::new("10.0.0.2"), ""),
            NOON,
        )
        .await
        .expect("the new owner claims");
    assert_eq!(batch.claimed.len(), 1, "{batch:?}");
    // Raising its own token again (a new connection) is no refusal.
    new_owner
        .raise_fence(FencingToken(6))
        .await
        .expect("the same token again");
    // A catch-up's raise for each job it lists is sent once a token: the old owner's, sent
    // again, would be refused (above), so an answer without a refusal is one never sent. Its
    // claims stay fenced.
    old_owner
        .raise_fence_once(FencingToken(5))
        .await
        .expect("not sent again");
    assert!(matches!(
        old_owner
            .claim_due(FencingToken(5), None, NOON, 10, (&node(), ""), NOON)
            .await,
        Err(StoreError::Fenced { .. })
    ));
}

#[tokio::test]
async fn a_raise_of_the_fence_waits_for_a_claim_in_flight() {
    let (_old_owner, dsn) = store("in_flight", 5).await;
    // A claim in flight holds the fence row FOR SHARE until its transaction ends; this
    // connection plays it, so that the test decides when it commits.
    let (claimer, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
        .await
        .expect("a connection");
    tokio::spawn(connection);
    claimer.batch_execute("BEGIN").await.expect("begin");
    claimer
        .execute(
            "SELECT token FROM zkcron_fence WHERE lock_group = $1 AND token = 5 FOR SHARE",
            &[&GROUP],
        )
        .await
        .expect("the claim's share lock");

    let new_owner = PgStore::open(&dsn, GROUP).await.expect("the store opens");
    let raise = tokio::spawn(async move { new_owner.raise_fence(FencingToken(6)).await });
    wait_until(
        "the raise waits on the fence row's lock",
        LOCK_WAIT_SEEN,
        || async {
            let waiting = claimer
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    &[],
                )
                .await
                .expect("pg_stat_activity");
            waiting.get::<_, i64>(0) > 0
        },
    )
    .await;
    assert!(
        !raise.is_finished(),
        "the fence rose under a claim in flight"
    );
    claimer.batch_execute("COMMIT").await.expect("commit");
    raise
        .await
        .expect("the raise's task")
        .expect("the fence rises once the claim is done");
}

#[tokio::test]
async fn claimers_at_once_never_take_the_same_submission() {
    const SUBMISSIONS: usize = 300;
    let (first, dsn) = store("skip_locked", 1).await;
    for n in 0..SUBMISSIONS {
        let due = NOON + i64::try_from(n % 7).expect("small");
        first
            .submit(&id(&format!("c-{n}")), &submission("close", due, b""))
            .await
            .expect("submitted");
    }
    let second = PgStore::open(&dsn, GROUP).await.expect("the store opens");
    let drain = |store: PgStore| async move {
        let mut taken = Vec::new();
        loop {
            let batch = store
                .claim_due(FencingToken(1), None, NOON + 10, 8, (&node(), ""), NOON)
                .await
                .expect("a claim");
            if batch.claimed.is_empty() {
                return taken;
            }
            taken.extend(batch.claimed.into_iter().map(|claimed| claimed.id));
        }
    };
    let (a, b) = tokio::join!(tokio::spawn(drain(first)), tokio::spawn(drain(second)));
    let (a, b) = (a.expect("first claimer"), b.expect("second claimer"));
    let mut all: Vec<_> = a.iter().chain(&b).cloned().collect();
    let distinct: HashSet<_> = all.iter().cloned().collect();
    assert_eq!(all.len(), distinct.len(), "a submission was claimed twice");
    all.sort();
    assert_eq!(all.len(), SUBMISSIONS, "a submission was never claimed");
}

#[tokio::test]
async fn a_cancelled_submission_is_never_claimed_and_a_claimed_one_is_not_cancelled() {
    let (store, _) = store("cancel", 1).await;
    let (kept, dropped) = (id("keep"), id("drop"));
    for which in [&kept, &dropped] {
        store
            .submit(which, &submission("close", NOON, b""))
            .await
            .expect("submitted");
    }
    let cancelled = store.cancel(&dropped, NOON - 10).await.expect("answered");
    assert!(cancelled.is_ok(), "not cancelled: {cancelled:?}");
    match store.find(&dropped).await.expect("found") {
        Some(Where::Ended { record, .. }) => assert_eq!(record.status, RunStatus::Cancelled),
        other => panic!("a cancel left {other:?}"),
    }
    let batch = store
        .claim_due(FencingToken(1), None, NOON, 10, (&node(), ""), NOON)
        .await
        .expect("a claim");
    let ids: Vec<_> = batch.claimed.iter().map(|claimed| &claimed.id).collect();
    assert_eq!(ids, vec![&kept], "a cancelled submission was claimed");
    match store.cancel(&kept, NOON + 10).await.expect("answered") {
        Err(Where::Open { .. }) => {}
        other => panic!("a claimed submission's cancel said {other:?}"),
    }
    assert!(matches!(
        store.cancel(&id("never"), NOON).await,
        Err(StoreError::NotFound { .. })
    ));
}

#[tokio::test]
async fn submissions_due_on_other_days_each_make_their_day_partition() {
    const DAY: i64 = 86_400_000;
    let (store, dsn) = store("partitions", 1).await;
    for (n, due) in [NOON - DAY, NOON, NOON + 30 * DAY].into_iter().enumerate() {
        store
            .submit(&id(&format!("d-{n}")), &submission("close", due, b""))
            .await
            .expect("submitted");
    }
    let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
        .await
        .expect("a connection");
    tokio::spawn(connection);
    let rows = client
        .query(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
             JOIN pg_class p ON p.oid = i.inhparent \
             WHERE p.relname = 'zkcron_pending' ORDER BY c.relname",
            &[],
        )
        .await
        .expect("the partitions");
    let names: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
    assert_eq!(
        names,
        [
            "zkcron_pending_d20790",
            "zkcron_pending_d20791",
            "zkcron_pending_d20821"
        ]
    );
    let batch = store
        .claim_due(FencingToken(1), None, NOON, 10, (&node(), ""), NOON)
        .await
        .expect("a claim");
    assert_eq!(
        batch.claimed.len(),
        2,
        "claims read every past day: {batch:?}"
    );
}

#[tokio::test]
async fn nodes_opening_a_new_database_together_migrate_it_once_and_a_newer_schema_is_refused() {
    let dsn = shared_postgres()
        .create_database("migrate")
        .await
        .expect("a database");
    let opened = futures_join_all(&dsn).await;
    assert!(opened.iter().all(Result::is_ok), "{opened:?}");
    let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
        .await
        .expect("a connection");
    tokio::spawn(connection);
    let applied = client
        .query_one("SELECT count(*) FROM zkcron_schema_history", &[])
        .await
        .expect("the history");
    // V1 (the queue), V2 (the chain marks) and V3 (the runs' change feed), each once.
    assert_eq!(applied.get::<_, i64>(0), 3, "a migration was applied twice");

    client
        .execute(
            "INSERT INTO zkcron_schema_history (version, name, applied_on, checksum) \
             VALUES (99, 'from_the_future', '2030-01-01', '0')",
            &[],
        )
        .await
        .expect("a newer version planted");
    match PgStore::open(&dsn, GROUP).await {
        Err(StoreError::NewerSchema { found, known }) => {
            assert_eq!(found, 99);
            assert!(known < 99);
        }
        other => panic!("a newer schema was not refused: {other:?}"),
    }
}

/// Four stores opening `dsn` at once.
async fn futures_join_all(dsn: &str) -> Vec<Result<PgStore, StoreError>> {
    let opens = (0..4).map(|_| {
        let dsn = dsn.to_owned();
        tokio::spawn(async move { PgStore::open(&dsn, GROUP).await })
    });
    let mut opened = Vec::new();
    for open in opens.collect::<Vec<_>>() {
        opened.push(open.await.expect("an open's task"));
    }
    opened
}

#[tokio::test]
async fn a_restarted_server_is_connected_to_again_and_keeps_what_was_committed() {
    let server = PgServer::start().expect("a server of its own");
    let dsn = server.create_database("restart").await.expect("a database");
    let store = PgStore::open(&dsn, GROUP).await.expect("the store opens");
    store
        .raise_fence(FencingToken(3))
        .await
        .expect("the fence rises");
    for n in 0..4 {
        store
            .submit(&id(&format!("r-{n}")), &submission("close", NOON + n, b""))
            .await
            .expect("submitted");
    }
    let first = store
        .claim_due(FencingToken(3), None, NOON + 1, 10, (&node(), ""), NOON)
        .await
        .expect("a claim");
    assert_eq!(first.claimed.len(), 2);

    server.restart().expect("the server restarts");
    // The store's connection died with the server: its first request may fail; the next one
    // connects again.
    let _ = store.find(&id("r-0")).await;
    match store.find(&id("r-0")).await.expect("reconnected") {
        Some(Where::Open { .. }) => {}
        other => panic!("a claim was lost across the restart: {other:?}"),
    }
    let rest = store
        .claim_due(FencingToken(3), None, NOON + 10, 10, (&node(), ""), NOON)
        .await
        .expect("a claim");
    let ids: Vec<_> = rest
        .claimed
        .iter()
        .map(|c| c.id.as_str().to_owned())
        .collect();
    assert_eq!(
        ids,
        ["r-2", "r-3"],
        "the restart lost or doubled a pending submission"
    );
}

#[tokio::test]
async fn a_paused_server_times_requests_out_and_a_resumed_one_is_connected_to_again() {
    let server = PgServer::start().expect("a server of its own");
    let dsn = server.create_database("paused").await.expect("a database");
    let store = PgStore::open(&dsn, GROUP)
        .await
        .expect("the store opens")
        .with_request_bound(PAUSE_BOUND);
    store
        .raise_fence(FencingToken(2))
        .await
        .expect("the fence rises");
    store
        .submit(&id("p-1"), &submission("close", NOON, b""))
        .await
        .expect("submitted");

    server.pause().expect("paused");
    let asked = store
        .claim_due(FencingToken(2), None, NOON, 10, (&node(), ""), NOON)
        .await;
    assert!(
        matches!(asked, Err(StoreError::TimedOut { .. })),
        "a claim against a paused server: {asked:?}"
    );
    // While it stays paused, a new connection's start is bounded too.
    let again = store.find(&id("p-1")).await;
    assert!(
        matches!(again, Err(StoreError::TimedOut { .. })),
        "{again:?}"
    );

    server.resume().expect("resumed");
    // The claim that timed out may have been applied once the server went on: it is pending or
    // open, never both and never lost.
    match store
        .find(&id("p-1"))
        .await
        .expect("answered after the resume")
    {
        Some(Where::Pending(_) | Where::Open { .. }) => {}
        other => panic!("the submission went missing: {other:?}"),
    }
}

#[tokio::test]
async fn a_prune_keeps_the_newest_runs_remembers_chosen_ids_and_frees_generated_ones() {
    const WINDOW: Duration = Duration::from_secs(3600);
    let (store, dsn) = store("prune", 1).await;
    let mut generated = submission("close", NOON + 2, b"g");
    generated.anonymous = true;
    let asked = [
        (id("old-1"), submission("close", NOON, b"1")),
        (id("old-2"), submission("close", NOON + 1, b"2")),
        (id("gen-3"), generated),
        (id("new-4"), submission("close", NOON + 3, b"4")),
    ];
    for result in store.submit_batch(&asked).await {
        result.expect("submitted");
    }
    let batch = store
        .claim_due(FencingToken(1), None, NOON + 3, 10, (&node(), ""), NOON)
        .await
        .expect("a claim");
    for (n, claimed) in batch.claimed.iter().enumerate() {
        let mut record = claimed.record.clone();
        record.status = RunStatus::Succeeded;
        let ended = NOON + 100 + i64::try_from(n).expect("small");
        record.finished_unix_ms = Some(ended);
        store
            .end(&claimed.id, FencingToken(1), &record, ended)
            .await
            .expect("ended");
    }

    let remember = Remember {
        now_unix_ms: NOON + 1000,
        window: WINDOW,
    };
    let pruned = store
        .prune_history(&JobName::new("close"), 1, remember, 100)
        .await
        .expect("pruned");
    assert_eq!(
        pruned,
        Pruned {
            records: 3,
            remembered: 2,
            freed: 1
        }
    );
    let history = store
        .history(&JobName::new("close"), 10)
        .await
        .expect("read");
    assert_eq!(history.len(), 1, "history = 1 keeps the newest run");
    assert_eq!(history[0].submission_id, Some(id("new-4")));
    match store.find(&id("old-1")).await.expect("found") {
        Some(Where::Remembered(tombstone)) => {
            assert_eq!(tombstone.remembered_until_unix_ms, NOON + 100 + 3_600_000);
        }
        other => panic!("a pruned id was not remembered: {other:?}"),
    }
    assert_eq!(
        store
            .submit(&id("old-1"), &submission("close", NOON, b"1"))
            .await
            .expect("resubmitted"),
        Submitted::AlreadyThere,
        "a resubmit within the window made a second run"
    );
    assert!(matches!(
        store
            .submit(&id("old-1"), &submission("close", NOON, b"other"))
            .await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(
        store.find(&id("gen-3")).await.expect("read"),
        None,
        "a generated id is freed"
    );

    // Past the window the sweep frees the ids, and the id may be used again.
    let freed = store
        .forget(NOON + 100 + 3_600_000 + 10, 100)
        .await
        .expect("forgotten");
    assert_eq!(freed, 2);
    assert_eq!(
        store
            .submit(
                &id("old-1"),
                &submission("close", NOON + 86_400_000, b"again")
            )
            .await
            .expect("submitted"),
        Submitted::Created
    );

    // Empty past days go; a day that still holds a row stays.
    const DAY: i64 = 86_400_000;
    store
        .submit(&id("yesterday"), &submission("close", NOON - DAY, b""))
        .await
        .expect("submitted");
    let dropped = store
        .drop_empty_days(NOON + 2 * DAY)
        .await
        .expect("dropped");
    assert!(
        !dropped.iter().any(|name| name == "zkcron_pending_d20790"),
        "a day with a pending row was dropped: {dropped:?}"
    );
    assert!(
        dropped.iter().any(|name| name == "zkcron_pending_d20791"),
        "today's emptied pending day stayed: {dropped:?}"
    );
    assert!(
        !dropped.iter().any(|name| name == "zkcron_ended_d20791"),
        "a day with the kept run was dropped: {dropped:?}"
    );
    let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
        .await
        .expect("a connection");
    tokio::spawn(connection);
    let left = client
        .query_one("SELECT count(*) FROM zkcron_pending", &[])
        .await
        .expect("counted");
    assert_eq!(
        left.get::<_, i64>(0),
        2,
        "the rows of the kept days are all there"
    );
}

/// A ledger carrying `store`, on a chroot `name` of its own on the shared ensemble, and a plain
/// client of that chroot to look into ZooKeeper with.
async fn ledger_on(store: Arc<PgStore>, name: &str) -> (Ledger, zookeeper_client::Client) {
    let connect = support::shared_ensemble()
        .isolated_connect_string(name)
        .await
        .expect("a chroot");
    let client = zookeeper_client::Client::connect(&connect)
        .await
        .expect("a session");
    let zk = Zk::new(
        client.clone(),
        &zookeeper_client::Acls::anyone_all(),
        REQUEST_BOUND,
    );
    (Ledger::new(zk).with_delayed_store(store), client)
}

#[tokio::test]
async fn the_ledgers_submission_use_cases_reach_the_store_and_write_nothing_to_zookeeper() {
    let (store, _) = store("ledger_use_cases", 1).await;
    let (ledger, client) = ledger_on(Arc::new(store), "pg_ledger_use_cases").await;
    let paths = LedgerPaths::new(&LockPaths::new("/zkcron", "g"));

    let asked = submission("close", NOON, b"{}");
    let submitted = submissions::submit(&ledger, &paths.delayed, &id("u-1"), &asked).await;
    assert_eq!(submitted.expect("submitted"), Submitted::Created);
    let other = submission("close", NOON, b"other");
    assert!(matches!(
        submissions::submit(&ledger, &paths.delayed, &id("u-1"), &other).await,
        Err(SubmissionError::Conflict { .. })
    ));
    match submissions::show(&ledger, &paths.delayed, &paths, &id("u-1")).await {
        Ok(Some((shown, SubmissionState::Pending))) => assert_eq!(shown, asked),
        other => panic!("not pending: {other:?}"),
    }
    let batch = [(id("u-2"), submission("close", NOON + 1, b""))];
    let reader = ledger.clone();
    let known = submissions::KnownParents::default();
    let results = submissions::submit_batch(&ledger, &reader, &paths.delayed, &batch, &known).await;
    assert!(
        matches!(results[..], [Ok(Submitted::Created)]),
        "{results:?}"
    );

    let cancelled =
        submissions::cancel(&ledger, &paths.delayed, &paths, &id("u-1"), NOON - 10).await;
    assert_eq!(cancelled.expect("cancelled"), asked);
    match submissions::show(&ledger, &paths.delayed, &paths, &id("u-1")).await {
        Ok(Some((_, SubmissionState::Recorded(record)))) => {
            assert_eq!(record.status, RunStatus::Cancelled);
        }
        other => panic!("not cancelled: {other:?}"),
    }
    assert!(matches!(
        submissions::cancel(&ledger, &paths.delayed, &paths, &id("u-1"), NOON).await,
        Err(SubmissionError::NotPending { .. })
    ));
    assert!(
        client
            .check_stat(&paths.delayed.dir)
            .await
            .expect("answered")
            .is_none(),
        "a submission kept in PostgreSQL wrote to ZooKeeper"
    );
}

/// An owner killed between a submitted parent's end in the store and its chain marks in
/// ZooKeeper: the end kept the marks, and the next owner's chore makes them, so the child does
/// not wait for good; made, they are no longer kept.
#[tokio::test]
async fn chain_marks_kept_with_an_end_are_made_by_the_next_owners_chore() {
    let (store, _) = store("kept_marks", 1).await;
    let store = Arc::new(store);
    let (ledger, client) = ledger_on(Arc::clone(&store), "pg_kept_marks").await;
    let parent = id("p-1");
    store
        .submit(&parent, &submission("extract", NOON, b""))
        .await
        .expect("submitted");
    let claimed = store
        .claim_due(FencingToken(1), None, NOON, 1, (&node(), ""), NOON)
        .await
        .expect("claimed");
    let mut done = claimed.claimed[0].record.clone();
    done.status = RunStatus::Succeeded;
    let mark = "/zkcron/g/after/load/1796385600000~extract~p-1".to_owned();
    let ended = store
        .end_leaving(
            &parent,
            FencingToken(1),
            &done,
            NOON + 10,
            &[(mark.clone(), b"m".to_vec())],
        )
        .await
        .expect("ended");
    assert_eq!(ended, Ended::Recorded);
    // The owner dies here: no mark in ZooKeeper, one kept in the store.
    assert_eq!(client.check_stat(&mark).await.expect("read"), None);
    assert_eq!(
        store.marks_left(NOON + 10, 10).await.expect("read").len(),
        1
    );
    assert!(
        store
            .marks_left(NOON + 9, 10)
            .await
            .expect("read")
            .is_empty(),
        "an end newer than asked is left to its live owner"
    );

    let made = chains::leave_kept_marks(&ledger, NOON + 10)
        .await
        .expect("made");
    assert_eq!(made, 1);
    let (data, _) = client.get_data(&mark).await.expect("the mark is made");
    assert_eq!(data, b"m");
    assert!(
        store
            .marks_left(NOON + 10, 10)
            .await
            .expect("read")
            .is_empty()
    );
}

/// `[delayed] tls`: the store reaches a server that serves TLS over TLS with the CA it is given
/// (the server's view of the connection says so), refuses a server its CA did not sign, and a
/// DSN that asks for TLS without the files is refused before any connection.
#[tokio::test]
async fn the_store_speaks_tls_with_the_ca_it_is_given_and_refuses_another() {
    let pki = support::tls::TestPki::new();
    let server = PgServer::start_with_tls(&pki.server_cert, &pki.server_key).expect("a server");
    let dsn = server.create_database("tls").await.expect("a database");
    let files = |ca: &std::path::Path| TlsFiles {
        ca: std::fs::read_to_string(ca).expect("the CA"),
        identity: None,
    };
    let store = PgStore::configured(&dsn, GROUP, Some(&files(&pki.ca))).expect("configured");
    store
        .submit(&id("t-1"), &submission("close", NOON, b""))
        .await
        .expect("submitted over TLS");
    let (admin, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
        .await
        .expect("a plain connection beside it");
    tokio::spawn(connection);
    let encrypted: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.datname = current_database() AND s.ssl",
            &[],
        )
        .await
        .expect("read")
        .get(0);
    assert!(encrypted >= 1, "the store's connection is not TLS");

    let strange = PgStore::configured(&dsn, GROUP, Some(&files(&pki.other_ca)))
        .expect("configured")
        .with_request_bound(PAUSE_BOUND);
    assert!(
        matches!(
            strange
                .submit(&id("t-2"), &submission("close", NOON, b""))
                .await,
            Err(StoreError::Unreachable(_))
        ),
        "a server another CA signed was trusted"
    );
    assert!(matches!(
        PgStore::configured(&format!("{dsn} sslmode=require"), GROUP, None),
        Err(StoreError::Tls(_))
    ));
}

/// Bound on the feed showing a committed change: it shows once every transaction begun before
/// it is over, and the other tests' transactions on the shared server (each database's count)
/// last milliseconds; the slack is for a crowded test pool.
const FEED_SEEN: Duration = Duration::from_secs(10);

/// The feed's changes after `after` once it shows at least `count` of them.
async fn changes_seen(
    store: &PgStore,
    after: &StoreMark,
    count: usize,
) -> Vec<zkcron::ledger::postgres::RunChange> {
    support::wait_for(
        &format!("{count} changes in the feed"),
        FEED_SEEN,
        || async {
            let changes = store.run_changes(after, 100).await.expect("read");
            (changes.len() >= count).then_some(changes)
        },
    )
    .await
}

#[tokio::test]
async fn the_runs_change_feed_tells_each_change_in_order_once_and_waits_for_a_late_commit() {
    let (store, dsn) = store("feed", 1).await;
    let start = store.change_horizon().await.expect("the horizon");
    let statuses = |changes: &[zkcron::ledger::postgres::RunChange]| -> Vec<(String, RunStatus)> {
        changes
            .iter()
            .map(|change| (change.mark.id.clone(), change.record.status))
            .collect()
    };
    assert!(
        store
            .run_changes(&start, 100)
            .await
            .expect("read")
            .is_empty(),
        "a pending submission is no run's change"
    );
    for which in ["a-1", "a-2", "a-3"] {
        store
            .submit(&id(which), &submission("close", NOON, b""))
            .await
            .expect("submitted");
    }
    let batch = store
        .claim_due(FencingToken(1), None, NOON, 10, (&node(), "10.0.0.1"), NOON)
        .await
        .expect("a claim");
    assert_eq!(batch.claimed.len(), 3);
    let claimed = changes_seen(&store, &start, 3).await;
    assert_eq!(
        statuses(&claimed),
        [
            ("a-1".to_owned(), RunStatus::Claimed),
            ("a-2".to_owned(), RunStatus::Claimed),
            ("a-3".to_owned(), RunStatus::Claimed),
        ],
        "one transaction's changes, by id"
    );
    assert_eq!(claimed[0].record.node_id, node());
    // Read two at a time, the third comes after the second's mark.
    let first_two = store.run_changes(&start, 2).await.expect("read");
    let rest = store
        .run_changes(&first_two[1].mark, 100)
        .await
        .expect("read");
    assert_eq!(statuses(&rest), [("a-3".to_owned(), RunStatus::Claimed)]);
    let after_claims = claimed[2].mark.clone();

    // A transaction that began before the next changes and commits after them holds them back.
    let (late, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
        .await
        .expect("a connection");
    tokio::spawn(connection);
    late.batch_execute("BEGIN; SELECT pg_current_xact_id();")
        .await
        .expect("a transaction with an id");

    let mut running = batch.claimed[1].record.clone();
    running.status = RunStatus::Running;
    store
        .update_open(&id("a-2"), &running, 0, FencingToken(1))
        .await
        .expect("written");
    let mut done = batch.claimed[0].record.clone();
    done.status = RunStatus::Succeeded;
    store
        .end(&id("a-1"), FencingToken(1), &done, NOON + 10)
        .await
        .expect("ended");
    assert!(
        store
            .run_changes(&after_claims, 100)
            .await
            .expect("read")
            .is_empty(),
        "a change was told while an earlier transaction could still commit"
    );
    late.batch_execute("COMMIT").await.expect("committed");
    let changed = changes_seen(&store, &after_claims, 2).await;
    assert_eq!(
        statuses(&changed),
        [
            ("a-2".to_owned(), RunStatus::Running),
            ("a-1".to_owned(), RunStatus::Succeeded),
        ],
        "in the order of their transactions, each once"
    );
    assert!(
        store
            .run_changes(&changed[1].mark, 100)
            .await
            .expect("read")
            .is_empty()
    );
    // A mark read now is past all of it.
    let now = store.change_horizon().await.expect("the horizon");
    assert!(now > changed[1].mark, "{now:?}");
    assert!(store.run_changes(&now, 100).await.expect("read").is_empty());

    // Transactions on either side of a power of ten come in the order of their ids, not of
    // their text: set on two rows by hand, both before the horizon.
    let below = 10_u64.pow(now.xid.ilog10());
    assert!(
        below >= 100,
        "initdb alone takes hundreds of transactions: {now:?}"
    );
    late.execute(
        "UPDATE zkcron_ended SET changed_xid = $1::text::xid8 WHERE id = 'a-1'",
        &[&below.to_string()],
    )
    .await
    .expect("set by hand");
    late.execute(
        "INSERT INTO zkcron_ended (lock_group, id, job, due_ms, ended_ms, record, submission, changed_xid) \
         SELECT lock_group, 'a-2', job, due_ms, ended_ms, record, submission, $1::text::xid8 \
         FROM zkcron_ended WHERE id = 'a-1'",
        &[&(below - 1).to_string()],
    )
    .await
    .expect("a row at the lower id");
    let from_start = StoreMark {
        xid: below - 2,
        id: String::new(),
    };
    let ordered: Vec<u64> = store
        .run_changes(&from_start, 100)
        .await
        .expect("read")
        .iter()
        .map(|change| change.mark.xid)
        .filter(|xid| [below - 1, below].contains(xid))
        .collect();
    assert_eq!(ordered, [below - 1, below]);
}
