//! Cluster-wide caps (issue 19, `[[limit]]`): the lease semaphore against a real ZooKeeper.
//! Many sessions take and give back leases at once and never hold more than `max`; a holder
//! whose session ends frees its lease; a taker that finds the limit full holds nothing. And a
//! real `zkcron run`: two jobs that share a limit of one never run at once, and both run.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::daemon::{DaemonNode, schedule_text};
use support::zk_cluster::try_wait_for;
use support::{expire_session, shared_ensemble, unique_chroot};
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

/// Each run appends `S <job> <ms>` when it starts and `E <job> <ms>` when it ends.
fn timed_job(name: &str, out: &std::path::Path) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\nlimits = [\"db\"]\n\
         shell = 'echo \"S $ZKCRON_JOB $(date +%s%3N)\" >> {out}; sleep 0.6; \
         echo \"E $ZKCRON_JOB $(date +%s%3N)\" >> {out}'\n",
        out = out.display()
    )
}

/// The most runs alive at once in `log`, and how many started per job.
fn overlap(log: &str) -> (usize, BTreeMap<String, usize>) {
    let mut events: Vec<(i64, i32)> = Vec::new();
    let mut started = BTreeMap::new();
    for line in log.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [kind, job, ms] = parts[..] else { continue };
        let Ok(ms) = ms.parse::<i64>() else { continue };
        // At the same millisecond an end counts before a start.
        if kind == "S" {
            events.push((ms, 1));
            *started.entry(job.to_owned()).or_default() += 1;
        } else {
            events.push((ms, -1));
        }
    }
    events.sort();
    let (mut alive, mut most) = (0i32, 0i32);
    for (_, step) in events {
        alive += step;
        most = most.max(alive);
    }
    (usize::try_from(most).unwrap_or(0), started)
}

#[tokio::test]
async fn two_jobs_sharing_a_limit_of_one_never_run_at_once_and_both_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("runs.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("limits-daemon"));
    let jobs = format!(
        "[[limit]]\nname = \"db\"\nmax = 1\n{}{}",
        timed_job("a", &out),
        timed_job("b", &out)
    );
    let text = schedule_text(
        &connect,
        "limits",
        Duration::from_secs(4),
        Duration::from_secs(1),
        &jobs,
    );
    let node = DaemonNode::start(dir.path(), "l1", &text);
    node.wait_log("owns the lock", Duration::from_secs(10))
        .await;
    let started = try_wait_for("both jobs run three times", Duration::from_secs(15), || {
        let log = std::fs::read_to_string(&out).unwrap_or_default();
        let (_, started) = overlap(&log);
        let done = (started.values().filter(|n| **n >= 3).count() == 2).then_some(started);
        async move { done }
    })
    .await
    .unwrap_or_else(|not_reached| {
        let log = std::fs::read_to_string(&out).unwrap_or_default();
        panic!("{not_reached}\n{log}\n{}", node.log_tail())
    });
    let log = std::fs::read_to_string(&out).unwrap_or_default();
    let (most, _) = overlap(&log);
    assert_eq!(
        most, 1,
        "never two runs at once under a limit of one: {started:?}\n{log}"
    );
}

/// The queue of [`limits::acquire`]: first come, first served, nothing held while waiting, and
/// a wait given up leaves nothing behind.
#[tokio::test]
async fn waiting_runs_get_the_lease_in_the_order_they_came_and_a_given_up_wait_leaves_nothing() {
    let (clients, dir, _) = sessions("limits-queue", 3).await;
    let Taken::Held(first) = take(&clients[0], &dir, 1, "first").await else {
        panic!("the first takes it");
    };
    let cancel_second = tokio_util::sync::CancellationToken::new();
    let cancel_third = tokio_util::sync::CancellationToken::new();
    let wait = |client: Client, run: &'static str, cancel: tokio_util::sync::CancellationToken| {
        let dir = dir.clone();
        tokio::spawn(async move {
            let me = holder(run, "n");
            limits::acquire(&client, &dir, 1, &me, Acls::anyone_all(), &cancel).await
        })
    };
    let second = wait(clients[1].clone(), "second", cancel_second.clone());
    // The second is in the queue before the third comes.
    support::wait_until("the second waits", Duration::from_secs(5), || {
        let (client, dir) = (clients[0].clone(), dir.clone());
        async move { client.list_children(&dir).await.map_or(0, |c| c.len()) == 2 }
    })
    .await;
    let third = wait(clients[2].clone(), "third", cancel_third.clone());
    support::wait_until("the third waits", Duration::from_secs(5), || {
        let (client, dir) = (clients[0].clone(), dir.clone());
        async move { client.list_children(&dir).await.map_or(0, |c| c.len()) == 3 }
    })
    .await;
    let held = limits::holders(&clients[0], &dir).await.expect("holders");
    assert_eq!(held[0].run_id, "first", "{held:?}");
    limits::give_back(&clients[0], &first)
        .await
        .expect("given back");
    let lease = second.await.expect("task").expect("the second's turn");
    assert!(!third.is_finished(), "the third still waits: one at a time");
    cancel_third.cancel();
    assert!(matches!(
        third.await.expect("task"),
        Err(limits::LimitError::GivenUp { .. })
    ));
    let left = limits::holders(&clients[0], &dir).await.expect("holders");
    assert_eq!(
        left.iter().map(|h| h.run_id.as_str()).collect::<Vec<_>>(),
        ["second"],
        "the given-up wait left nothing"
    );
    limits::give_back(&clients[1], &lease)
        .await
        .expect("given back");
    drop(cancel_second);
}
