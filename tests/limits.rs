//! Cluster-wide caps (issue 19, `[[limit]]`): the lease semaphore against a real ZooKeeper.
//! Many sessions take and give back leases at once and never hold more than `max`; a holder
//! whose session ends frees its lease; a taker that finds the limit full holds nothing.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::{expire_session, shared_ensemble};
use zkcron::NodeId;
use zkcron::layout::{LedgerPaths, LockPaths};
use zkcron::ledger::limits::{self, LeaseHolder, Taken};
use zookeeper_client::{Acls, Client};

fn holder(run: &str, node: &str) -> LeaseHolder {
    LeaseHolder {
        run_id: run.to_owned(),
        node_id: NodeId::new(node),
    }
}

/// One take by run `run`, answered.
async fn take(client: &Client, dir: &str, max: usize, run: &str) -> Taken {
    limits::take(client, dir, max, &holder(run, "n"), Acls::anyone_all())
        .await
        .expect("answered")
}

/// `n` sessions on a fresh chroot, and the lease directory of limit `db-heavy`.
async fn sessions(chroot: &str, n: usize) -> (Vec<Client>, String, String) {
    let connect = shared_ensemble()
        .isolated_connect_string(chroot)
        .await
        .expect("chroot");
    let mut clients = Vec::new();
    for _ in 0..n {
        clients.push(Client::connect(&connect).await.expect("session"));
    }
    let ledger = LedgerPaths::new(&LockPaths::new("/zkcron", "g"));
    (clients, ledger.limit("db-heavy"), connect)
}

#[tokio::test]
async fn at_most_max_leases_are_held_and_a_full_limit_holds_nothing_for_the_taker() {
    let (clients, dir, _) = sessions("limits-max", 6).await;
    let mut takes = tokio::task::JoinSet::new();
    for (i, client) in clients.iter().cloned().enumerate() {
        let dir = dir.clone();
        takes.spawn(async move {
            let me = holder(&format!("run-{i}"), &format!("n{i}"));
            (
                i,
                limits::take(&client, &dir, 2, &me, Acls::anyone_all()).await,
            )
        });
    }
    let mut taken = vec![Taken::Full; clients.len()];
    while let Some(done) = takes.join_next().await {
        let (i, answer) = done.expect("take task");
        taken[i] = answer.expect("answered");
    }
    let held: Vec<&limits::Lease> = taken
        .iter()
        .filter_map(|t| match t {
            Taken::Held(lease) => Some(lease),
            Taken::Full => None,
        })
        .collect();
    assert_eq!(held.len(), 2, "{taken:?}");
    let listed = limits::holders(&clients[0], &dir).await.expect("holders");
    assert_eq!(
        listed.len(),
        2,
        "the full takers left nothing behind: {listed:?}"
    );

    // One is given back: the next taker gets it.
    let giver = taken
        .iter()
        .position(|t| matches!(t, Taken::Held(_)))
        .expect("a holder");
    let Taken::Held(lease) = &taken[giver] else {
        unreachable!()
    };
    limits::give_back(&clients[giver], lease)
        .await
        .expect("given back");
    let waiter = taken
        .iter()
        .position(|t| *t == Taken::Full)
        .expect("a waiter");
    let again = take(&clients[waiter], &dir, 2, "late").await;
    assert!(matches!(again, Taken::Held(_)), "{again:?}");
}

/// A lease is ephemeral: the session of the node that holds it ending (a kill -9 of the node)
/// frees it for the others.
#[tokio::test]
async fn a_lease_goes_with_its_holders_session() {
    let (clients, dir, connect) = sessions("limits-session", 2).await;
    let held = take(&clients[0], &dir, 1, "r").await;
    assert!(matches!(held, Taken::Held(_)));
    let full = take(&clients[1], &dir, 1, "s").await;
    assert_eq!(full, Taken::Full);
    expire_session(&connect, clients[0].session())
        .await
        .expect("session expired");
    let after = take(&clients[1], &dir, 1, "s").await;
    assert!(matches!(after, Taken::Held(_)), "{after:?}");
}

/// Many runs on several sessions take, hold a moment and give back, all at once: the count of
/// holders is never above `max`, and every run gets its turn.
#[tokio::test]
async fn under_contention_never_more_than_max_hold_at_once() {
    const MAX: usize = 3;
    let (clients, dir, _) = sessions("limits-contention", 4).await;
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut runs = tokio::task::JoinSet::new();
    for run in 0..24 {
        let client = clients[run % clients.len()].clone();
        let (dir, holding, most) = (dir.clone(), Arc::clone(&holding), Arc::clone(&most));
        runs.spawn(async move {
            let me = holder(&format!("run-{run}"), "n");
            loop {
                match limits::take(&client, &dir, MAX, &me, Acls::anyone_all()).await {
                    Ok(Taken::Held(lease)) => {
                        let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        holding.fetch_sub(1, Ordering::SeqCst);
                        limits::give_back(&client, &lease)
                            .await
                            .expect("given back");
                        return;
                    }
                    // Waiting holds nothing; try again shortly, as a waiting run would.
                    Ok(Taken::Full) => tokio::time::sleep(Duration::from_millis(5)).await,
                    Err(err) => panic!("{err}"),
                }
            }
        });
    }
    while let Some(done) = runs.join_next().await {
        done.expect("run task");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= MAX, "{most} held at once");
    assert!(
        most >= 2,
        "runs did overlap ({most}): the test exercised contention"
    );
    assert!(
        limits::holders(&clients[0], &dir)
            .await
            .expect("holders")
            .is_empty()
    );
}
