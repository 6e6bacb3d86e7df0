//! The chaos suite's faults of the delayed queue's PostgreSQL store (issue 55): the database
//! paused for longer than the ZooKeeper session, restarted while due work is claimed and
//! running, and the owner killed with `kill -9` in the middle of a burst of claims. Each runs a
//! real `zkcron run` against the shared ensemble and a PostgreSQL server of its own, and checks
//! what the promises say: no submission runs twice, none is lost, every one ends recorded in
//! the store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::support::daemon::{DaemonNode, now_ms, schedule_text, submit_spaced};
use super::support::postgres::PgServer;
use super::support::{fault_lock, shared_ensemble, try_wait_for, unique_chroot, wait_for};
use zkcron::delayed::submission::SubmissionId;
use zkcron::ledger::postgres::{PgStore, Where};
use zkcron::run::{RunRecord, RunStatus};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(3);
/// Process start, a JVM pause or a busy core on a loaded 2-core machine.
const SLACK: Duration = Duration::from_secs(5);
/// The lock group the schedules below name, as the store keys it.
const GROUP: &str = "/zkcron/pgc";

/// A node's schedule: the delayed queue in `dsn_file`'s database; one on-demand job that
/// appends `<id> <node> <attempt>` to `log` and then sleeps `runs_for`.
fn schedule(connect: &str, dsn_file: &Path, log: &Path, runs_for: &str) -> String {
    let jobs = format!(
        "[delayed]\nstore = \"postgres\"\ndsn_file = \"{}\"\n\n\
         [[job]]\nname = \"close\"\nstarting_deadline = \"120s\"\nhistory = 1000\n\
         shell = 'echo \"$ZKCRON_SUBMISSION_ID $ZKCRON_NODE $ZKCRON_ATTEMPT\" >> {}; sleep {runs_for}'\n",
        dsn_file.display(),
        log.display()
    );
    schedule_text(connect, "pgc", SESSION, DELAY, &jobs)
}

struct Setup {
    dir: tempfile::TempDir,
    server: PgServer,
    dsn: String,
    log: PathBuf,
    text: String,
}

async fn setup(test: &str, runs_for: &str) -> Setup {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = PgServer::start().expect("a PostgreSQL server of its own");
    let dsn = server.create_database(test).await.expect("a database");
    let dsn_file = dir.path().join("dsn");
    std::fs::write(&dsn_file, &dsn).expect("dsn file");
    let log = dir.path().join("runs.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot(test));
    let text = schedule(&connect, &dsn_file, &log, runs_for);
    Setup {
        dir,
        server,
        dsn,
        log,
        text,
    }
}

/// How many times each id ran, from the job's log.
fn runs(log: &Path) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        if let Some(id) = line.split_whitespace().next() {
            *counts.entry(id.to_owned()).or_insert(0) += 1;
        }
    }
    counts
}

/// Each of `ids`' ended record in the store, once every one has ended; on the bound, where
/// each one that has not ended is.
async fn all_ended(
    dsn: &str,
    ids: &[String],
    within: Duration,
    nodes: &[&DaemonNode],
) -> Vec<RunRecord> {
    let store = PgStore::open(dsn, GROUP).await.expect("the store opens");
    let ended = try_wait_for("every submission ended in the store", within, || {
        let store = &store;
        async move {
            let mut ended = Vec::new();
            for id in ids {
                let id = SubmissionId::parse(id).ok()?;
                match store.find(&id).await.ok()? {
                    Some(Where::Ended { record, .. }) => ended.push(*record),
                    _ => return None,
                }
            }
            Some(ended)
        }
    })
    .await;
    if let Ok(ended) = ended {
        return ended;
    }
    let mut where_they_are = Vec::new();
    for id in ids {
        let found = match SubmissionId::parse(id) {
            Ok(parsed) => store.find(&parsed).await,
            Err(_) => continue,
        };
        if !matches!(found, Ok(Some(Where::Ended { .. }))) {
            where_they_are.push(format!("{id}: {found:?}"));
        }
    }
    panic!(
        "not every submission ended in the store within {within:?}; {} did not:\n{}\n{}",
        where_they_are.len(),
        where_they_are.join("\n"),
        nodes
            .iter()
            .map(|node| {
                let said: Vec<String> = node
                    .log()
                    .lines()
                    .filter(|line| {
                        line.contains(" WARN ")
                            || line.contains(" ERROR ")
                            || line.contains("lock acquired")
                    })
                    .take(60)
                    .map(str::to_owned)
                    .collect();
                format!("--- {} warned:\n{}", node.node_id, said.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Every one of `wanted` ended `succeeded` in the store within `within`, and ran once.
async fn each_ran_once_and_succeeded(
    setup: &Setup,
    wanted: &[String],
    within: Duration,
    node: &DaemonNode,
) {
    let ended = all_ended(&setup.dsn, wanted, within, &[node]).await;
    let counts = runs(&setup.log);
    for id in wanted {
        assert_eq!(counts.get(id), Some(&1), "{id} ran once: {counts:?}");
    }
    assert!(
        ended
            .iter()
            .all(|record| record.status == RunStatus::Succeeded),
        "{ended:?}"
    );
}

fn ids(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|n| format!("{prefix}{n:04}")).collect()
}

#[tokio::test]
async fn postgres_paused_beyond_the_session_timeout_delays_the_queue_and_loses_nothing() {
    let _slot = fault_lock();
    let setup = setup("pgc-pause", "0").await;
    let node = DaemonNode::start(setup.dir.path(), "c1", &setup.text);
    node.wait_log("owns the lock", SESSION + SLACK).await;
    let first_due = now_ms() + 3_000;
    submit_spaced(&node.config, "close", 50, first_due, 100, "p").await;
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(first_due + 1_500 - now_ms()).unwrap_or(0),
    ))
    .await;
    setup.server.pause().expect("paused");
    // Longer than the session timeout: the owner keeps the lock, the store answers nothing.
    tokio::time::sleep(SESSION * 3).await;
    setup.server.resume().expect("resumed");

    each_ran_once_and_succeeded(&setup, &ids("p", 50), SLACK * 3, &node).await;
}

#[tokio::test]
async fn postgres_restarted_while_due_work_is_claimed_and_running_ends_every_run_once() {
    let _slot = fault_lock();
    let setup = setup("pgc-restart", "2").await;
    let node = DaemonNode::start(setup.dir.path(), "c1", &setup.text);
    node.wait_log("owns the lock", SESSION + SLACK).await;
    let first_due = now_ms() + 3_000;
    submit_spaced(&node.config, "close", 30, first_due, 100, "r").await;
    wait_for("a third of them running", SLACK * 2, || {
        let started = runs(&setup.log).len();
        async move { (started >= 10).then_some(()) }
    })
    .await;
    // Their ends, and the rest's claims, meet a server that is gone, then a new one.
    setup.server.restart().expect("restarted");

    each_ran_once_and_succeeded(&setup, &ids("r", 30), SLACK * 4, &node).await;
}

#[tokio::test]
async fn kill_9_of_the_owner_in_a_burst_of_claims_runs_none_twice_and_records_every_one() {
    let _slot = fault_lock();
    let setup = setup("pgc-kill", "0.3").await;
    let mut first = DaemonNode::start(setup.dir.path(), "c1", &setup.text);
    first.wait_log("owns the lock", SESSION + SLACK).await;
    let second = DaemonNode::start(setup.dir.path(), "c2", &setup.text);
    second.wait_log("zkcron started", SLACK).await;
    let first_due = now_ms() + 3_000;
    // 100 a second for 3 s: claims go out in batches while the owner dies.
    submit_spaced(&first.config, "close", 300, first_due, 10, "k").await;
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(first_due + 1_000 - now_ms()).unwrap_or(0),
    ))
    .await;
    first.kill();

    let wanted = ids("k", 300);
    let ended = all_ended(
        &setup.dsn,
        &wanted,
        SESSION + DELAY + SLACK * 4,
        &[&first, &second],
    )
    .await;
    let counts = runs(&setup.log);
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ran twice: {twice:?}");
    // Every one ran, or is recorded interrupted (its run was cut by the kill: on_interrupted
    // = "skip", the default), never left open or pending.
    for record in &ended {
        let id = record
            .submission_id
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        match record.status {
            RunStatus::Succeeded => assert_eq!(counts.get(&id), Some(&1), "{record:?}"),
            RunStatus::Interrupted => {}
            other => panic!("{id} ended {other:?}: {record:?}"),
        }
    }
    assert!(
        ended.iter().any(|r| r.node_id.as_str() == "c2"),
        "the next owner ran the rest"
    );
}
