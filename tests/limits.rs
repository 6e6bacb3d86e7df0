//! Cluster-wide caps (issue 19, `[[limit]]`): the lease semaphore against a real ZooKeeper.
//! Many sessions take and give back leases at once and never hold more than `max`; a holder
//! whose session ends frees its lease; a taker that finds the limit full holds nothing. And
//! real `zkcron run`s: two jobs that share a limit of one never run at once, and both run; a
//! limit of two across three nodes never lets three run, through a kill -9 of a holder whose
//! lease then goes with its session.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::daemon::{DaemonNode, schedule_text};
use support::zk_cluster::try_wait_for;
use support::{expire_session, fault_lock, shared_ensemble, unique_chroot, within};
use zkcron::NodeId;
use zkcron::layout::{LedgerPaths, LockPaths};
use zkcron::ledger::Ledger;
use zkcron::ledger::limits::{self, LeaseHolder, Taken};
use zkcron::zk::{REQUEST_BOUND, Zk};
use zookeeper_client::{Acls, Client};

fn holder(run: &str, node: &str) -> LeaseHolder {
    LeaseHolder {
        run_id: run.to_owned(),
        node_id: NodeId::new(node),
    }
}

/// One take by run `run`, answered.
async fn take(client: &Ledger, dir: &str, max: usize, run: &str) -> Taken {
    limits::take(client, dir, max, &holder(run, "n"))
        .await
        .expect("answered")
}

/// A session as the library takes it.
fn door(client: Client) -> Ledger {
    Ledger::new(Zk::new(client, &Acls::anyone_all(), REQUEST_BOUND))
}

/// `n` sessions on a fresh chroot, as the library takes them, and the lease directory of limit
/// `db-heavy`.
async fn sessions(chroot: &str, n: usize) -> (Vec<Ledger>, String, String) {
    let (clients, dir, connect) = raw_sessions(chroot, n).await;
    (clients.into_iter().map(door).collect(), dir, connect)
}

/// `n` sessions on a fresh chroot, and the lease directory of limit `db-heavy`.
async fn raw_sessions(chroot: &str, n: usize) -> (Vec<Client>, String, String) {
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
            (i, limits::take(&client, &dir, 2, &me).await)
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
    let (raw, dir, connect) = raw_sessions("limits-session", 2).await;
    let clients: Vec<Ledger> = raw.iter().cloned().map(door).collect();
    let held = take(&clients[0], &dir, 1, "r").await;
    assert!(matches!(held, Taken::Held(_)));
    let full = take(&clients[1], &dir, 1, "s").await;
    assert_eq!(full, Taken::Full);
    expire_session(&connect, raw[0].session())
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
    let (raw, dir, _) = raw_sessions("limits-contention", 4).await;
    let clients: Vec<Ledger> = raw.iter().cloned().map(door).collect();
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut runs = tokio::task::JoinSet::new();
    for run in 0..24 {
        let client = clients[run % clients.len()].clone();
        let (dir, holding, most) = (dir.clone(), Arc::clone(&holding), Arc::clone(&most));
        runs.spawn(async move {
            let me = holder(&format!("run-{run}"), "n");
            loop {
                match limits::take(&client, &dir, MAX, &me).await {
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
    // The other sessions gave their leases back through servers of their own (CI once read
    // one still held without this).
    raw[0].sync("/").await.expect("sync");
    assert!(
        limits::holders(&clients[0], &dir)
            .await
            .expect("holders")
            .is_empty()
    );
}

/// A job of limit `limit` that fires every second, in `group` (`None`: the default group). Each
/// run appends `S <ms> <job> <node> <run id> <pid>` when it starts and `E <ms> …` (the same
/// fields) when it ends, `run_for` (a `sleep` argument) later or when it is stopped (SIGTERM);
/// `<pid>` is the job's shell. A run killed with SIGKILL writes no end.
fn timed_job(name: &str, group: Option<&str>, limit: &str, run_for: &str, out: &Path) -> String {
    let group = group.map_or(String::new(), |g| format!("group = \"{g}\"\n"));
    let fields = "$ZKCRON_JOB $ZKCRON_NODE $ZKCRON_RUN_ID $$";
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\n{group}limits = [\"{limit}\"]\n\
         shell = 'end() {{ echo \"E $(date +%s%3N) {fields}\" >> {out}; }}; trap \"end; exit 143\" TERM; \
         echo \"S $(date +%s%3N) {fields}\" >> {out}; sleep {run_for}; end'\n",
        out = out.display()
    )
}

/// One run of a [`timed_job`], as it logged itself; no `end_ms` while it has written no end.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    job: String,
    node: String,
    run_id: String,
    pid: i32,
    start_ms: i64,
    end_ms: Option<i64>,
}

/// The runs in the log of [`timed_job`]s, in the order they started.
fn runs(log: &str) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    // A line still being appended is read on the next look.
    for line in log.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [kind, ms, job, node, run_id, pid] = parts[..] else {
            panic!("run log line {line:?}")
        };
        let (ms, pid) = (
            ms.parse().expect("run log ms"),
            pid.parse().expect("run log pid"),
        );
        match kind {
            "S" => runs.push(Run {
                job: job.to_owned(),
                node: node.to_owned(),
                run_id: run_id.to_owned(),
                pid,
                start_ms: ms,
                end_ms: None,
            }),
            // A stop just after the end writes a second one: the first counts.
            "E" => {
                let run = runs
                    .iter_mut()
                    .rfind(|r| r.run_id == run_id && r.pid == pid)
                    .unwrap_or_else(|| panic!("an end with no start: {line:?}\n{log}"));
                run.end_ms.get_or_insert(ms);
            }
            _ => panic!("run log line {line:?}"),
        }
    }
    runs
}

/// The most of `runs` alive at once; a run that logged no end is alive until `open_until` says.
fn most_at_once<'a>(
    runs: impl IntoIterator<Item = &'a Run>,
    open_until: impl Fn(&Run) -> i64,
) -> usize {
    let mut events: Vec<(i64, i32)> = Vec::new();
    for run in runs {
        // At the same millisecond an end counts before a start.
        events.push((run.start_ms, 1));
        events.push((run.end_ms.unwrap_or_else(|| open_until(run)), -1));
    }
    events.sort_unstable();
    let (mut alive, mut most) = (0i32, 0i32);
    for (_, step) in events {
        alive += step;
        most = most.max(alive);
    }
    usize::try_from(most).unwrap_or(0)
}

#[tokio::test]
async fn two_jobs_sharing_a_limit_of_one_never_run_at_once_and_both_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("runs.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("limits-daemon"));
    let jobs = format!(
        "[[limit]]\nname = \"db\"\nmax = 1\n{}{}",
        timed_job("a", None, "db", "0.6", &out),
        timed_job("b", None, "db", "0.6", &out)
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
        let mut started: BTreeMap<String, usize> = BTreeMap::new();
        for run in runs(&log) {
            *started.entry(run.job).or_default() += 1;
        }
        let done = (started.values().filter(|n| **n >= 3).count() == 2).then_some(started);
        async move { done }
    })
    .await
    .unwrap_or_else(|not_reached| {
        let log = std::fs::read_to_string(&out).unwrap_or_default();
        panic!("{not_reached}\n{log}\n{}", node.log_tail())
    });
    let log = std::fs::read_to_string(&out).unwrap_or_default();
    let most = most_at_once(&runs(&log), |_| i64::MAX);
    assert_eq!(
        most, 1,
        "never two runs at once under a limit of one: {started:?}\n{log}"
    );
}

/// Issue 19 on three real daemons: six lock groups spread over the nodes, a job of limit
/// `db-heavy` (max 2) in each, every job wanting to run all the time. A node holding a lease is
/// killed with SIGKILL in the middle of its run: at no instant do more than two runs hold the
/// limit, the dead node's lease goes with its session (within the session timeout), and then two
/// runs hold it at once again (the dead lease no longer counts; the limit is not stuck).
#[tokio::test]
async fn a_limit_of_two_across_three_nodes_never_runs_three_and_a_killed_holders_lease_goes_with_its_session()
 {
    const SESSION: Duration = Duration::from_secs(2);
    const DELAY: Duration = Duration::from_secs(2);
    const MAX: usize = 2;
    /// A run's length: its node is killed in its first second, so it still holds its lease then.
    const RUN: Duration = Duration::from_secs(3);
    /// Process start, a JVM pause or a busy core, on bounds that are otherwise exact; a
    /// session ends within its timeout plus one ZooKeeper tick (200 ms).
    const SLACK: Duration = Duration::from_secs(2);
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("runs.log");
    let lock = "limits-kill";
    let connect = shared_ensemble()
        .isolated_connect_string(&unique_chroot(lock))
        .await
        .expect("chroot");
    let groups = ["g1", "g2", "g3", "g4", "g5"];
    let mut jobs = format!("[[limit]]\nname = \"db-heavy\"\nmax = {MAX}\n");
    for group in groups {
        jobs.push_str(&format!("[[group]]\nname = \"{group}\"\n"));
    }
    let run_for = RUN.as_secs().to_string();
    jobs.push_str(&timed_job("j0", None, "db-heavy", &run_for, &out));
    for group in groups {
        let name = format!("j-{group}");
        jobs.push_str(&timed_job(&name, Some(group), "db-heavy", &run_for, &out));
    }
    // Groups settle 2 s after the last join, so that the limit's jobs soon run on several nodes.
    let text = schedule_text(&connect, lock, SESSION, DELAY, &jobs)
        .replace("[lock]\n", "[lock]\nrebalance_after = \"2s\"\n");
    let mut nodes: Vec<DaemonNode> = ["n1", "n2", "n3"]
        .iter()
        .map(|id| DaemonNode::start(dir.path(), id, &text))
        .collect();
    let client = door(Client::connect(&connect).await.expect("session"));
    let leases = LedgerPaths::new(&LockPaths::new("/zkcron", lock)).limit("db-heavy");
    let read_runs = || runs(&std::fs::read_to_string(&out).unwrap_or_default());
    let report = |nodes: &[DaemonNode]| {
        let logs: Vec<String> = nodes
            .iter()
            .map(|node| format!("--- {}\n{}", node.node_id, node.log_tail()))
            .collect();
        let log = std::fs::read_to_string(&out).unwrap_or_default();
        let most = most_at_once(&runs(&log), |_| i64::MAX);
        format!(
            "--- runs ({most} at most at once, a run with no end counted to the end)\n{log}\n{}",
            logs.join("\n")
        )
    };
    let started = std::time::Instant::now();

    // The limit's jobs have run on two nodes or more (the groups have spread), runs wait for
    // the limit, and a lease is held by a run that started within the last second: it is
    // still well inside its run at the kill.
    let (victim, queue) = try_wait_for(
        "runs on two nodes, runs waiting, and a lease held by a run just started",
        Duration::from_secs(30),
        || {
            let (client, leases, runs) = (client.clone(), leases.clone(), read_runs());
            async move {
                let on: BTreeSet<&str> = runs.iter().map(|r| r.node.as_str()).collect();
                if on.len() < 2 {
                    return None;
                }
                let queue = limits::holders(&client, &leases).await.ok()?;
                if queue.len() <= MAX {
                    return None;
                }
                let fresh = support::daemon::now_ms() - 1_000;
                let victim = queue.iter().take(MAX).find(|h| {
                    runs.iter()
                        .any(|r| r.run_id == h.run_id && r.end_ms.is_none() && r.start_ms > fresh)
                })?;
                Some((victim.clone(), queue))
            }
        },
    )
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", report(&nodes)));
    eprintln!(
        "after {:?}: lease queue {queue:?}; killing {}",
        started.elapsed(),
        victim.node_id
    );
    let dead = nodes
        .iter()
        .position(|n| n.node_id == victim.node_id.as_str())
        .expect("the holder is one of ours");
    let freed_within = within(SESSION + SLACK);
    nodes[dead].kill();
    let killed = std::time::Instant::now();
    let of_dead = |queue: &[LeaseHolder]| -> Vec<LeaseHolder> {
        queue
            .iter()
            .filter(|h| h.node_id == victim.node_id)
            .cloned()
            .collect()
    };
    let left = of_dead(&limits::holders(&client, &leases).await.expect("holders"));
    assert!(
        left.contains(&victim),
        "the killed node's lease outlives its process until its session ends: {left:?}"
    );

    // Its run dies with it (its death signal), and is counted as running until seen dead.
    let dead_runs: Vec<Run> = read_runs()
        .into_iter()
        .filter(|r| r.node == victim.node_id.as_str() && r.end_ms.is_none())
        .collect();
    assert!(
        dead_runs.iter().any(|r| r.run_id == victim.run_id),
        "the killed lease's run is in the log: {dead_runs:?}"
    );
    support::wait_until("the killed node's runs die with it", SLACK, || {
        let all_dead = dead_runs
            .iter()
            .all(|r| support::is_dead(nix::unistd::Pid::from_raw(r.pid)));
        async move { all_dead }
    })
    .await;
    let seen_dead_ms = support::daemon::now_ms();

    // Its lease (and any place it had in the queue) goes with its session.
    try_wait_for(
        "the killed node's lease is freed within the session timeout",
        freed_within,
        || {
            let (client, leases) = (client.clone(), leases.clone());
            async move {
                let queue = limits::holders(&client, &leases).await.ok()?;
                of_dead(&queue).is_empty().then_some(())
            }
        },
    )
    .await
    .unwrap_or_else(|not_reached| {
        panic!(
            "{not_reached} (killed lease {victim:?})\n{}",
            report(&nodes)
        )
    });
    let freed_ms = support::daemon::now_ms();
    eprintln!(
        "the killed node's lease went {:?} after the kill",
        killed.elapsed()
    );

    // Not stuck: two runs that took their leases after that hold the limit at once.
    try_wait_for(
        "two runs started after the dead lease went run at once",
        RUN + DELAY + SLACK,
        || {
            let later: Vec<Run> = read_runs()
                .into_iter()
                .filter(|r| r.start_ms >= freed_ms)
                .collect();
            let both = (most_at_once(&later, |_| i64::MAX) >= MAX).then_some(());
            async move { both }
        },
    )
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", report(&nodes)));

    // Over the whole test, the killed run alive until it was seen dead and a run still going
    // alive for good: never more than the limit at once.
    let all = read_runs();
    let most = most_at_once(&all, |r| {
        if r.node == victim.node_id.as_str() {
            seen_dead_ms
        } else {
            i64::MAX
        }
    });
    assert!(
        most <= MAX,
        "{most} runs of limit db-heavy (max {MAX}) at once\n{}",
        report(&nodes)
    );
    let on: BTreeSet<&str> = all.iter().map(|r| r.node.as_str()).collect();
    eprintln!(
        "{} runs on {on:?} in {:?}, at most {most} at once",
        all.len(),
        started.elapsed()
    );
}

/// The queue of [`limits::acquire`]: first come, first served, nothing held while waiting, and
/// a wait given up leaves nothing behind.
#[tokio::test]
async fn waiting_runs_get_the_lease_in_the_order_they_came_and_a_given_up_wait_leaves_nothing() {
    let (raw, dir, _) = raw_sessions("limits-queue", 3).await;
    let clients: Vec<Ledger> = raw.iter().cloned().map(door).collect();
    let Taken::Held(first) = take(&clients[0], &dir, 1, "first").await else {
        panic!("the first takes it");
    };
    let cancel_second = tokio_util::sync::CancellationToken::new();
    let cancel_third = tokio_util::sync::CancellationToken::new();
    let wait = |client: Ledger, run: &'static str, cancel: tokio_util::sync::CancellationToken| {
        let dir = dir.clone();
        tokio::spawn(async move {
            let me = holder(run, "n");
            limits::acquire(&client, &dir, 1, &me, &cancel).await
        })
    };
    let second = wait(clients[1].clone(), "second", cancel_second.clone());
    // The second is in the queue before the third comes.
    support::wait_until("the second waits", Duration::from_secs(5), || {
        let (client, dir) = (raw[0].clone(), dir.clone());
        async move { client.list_children(&dir).await.map_or(0, |c| c.len()) == 2 }
    })
    .await;
    let third = wait(clients[2].clone(), "third", cancel_third.clone());
    support::wait_until("the third waits", Duration::from_secs(5), || {
        let (client, dir) = (raw[0].clone(), dir.clone());
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
