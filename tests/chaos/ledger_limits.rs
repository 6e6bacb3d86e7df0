//! The chaos suite's faults of ZooKeeper's own limits (issue 53): a quota on the lock root
//! exceeded with `zookeeper.enforceQuota` on, every create under it refused; and the servers'
//! `jute.maxbuffer` lowered below what a parent's children list and zkcron's batches take.

use std::time::Duration;

use zookeeper_client::{Acls, Client, CreateMode};

use super::support::chaos::{ChaosCluster, FAST, FaultWindow, REPLACED_WITHIN};
use super::support::fault_lock;
use super::support::zk_cluster::ServerOptions;
use super::{AFTER, BEFORE, CATCH_UP, now_ms};

/// The lock root of the chaos suite's nodes, as the servers name it (no chroot).
pub(super) const LOCK_ROOT: &str = "/zkcron/chaos";
/// What the owner says while its writes are refused, and once they are taken again.
const REFUSED: &str = "ZooKeeper refuses this node's claims and records: nothing runs until it takes them again, and the ticks are then recorded missed";
const TAKEN_AGAIN: &str = "ZooKeeper takes this node's writes again";

/// How long setting a quota may take: the admin client's server may be the one a fault just
/// restarted or stalled, so a lost connection is tried again on a new client.
const QUOTA_SET_WITHIN: Duration = Duration::from_secs(30);

/// Sets the hard count quota of `path` to `count` znodes (`-1`: none), as `setquota -N` does
/// in ZooKeeper 3.8: the limits node under `/zookeeper/quota`, and its stats node, which makes
/// the server count what is there. Each step may be sent again: a create that was applied
/// before its answer was lost is found as existing.
pub(super) async fn set_count_quota(cluster: &ChaosCluster, path: &str, count: i64) {
    let deadline = tokio::time::Instant::now() + QUOTA_SET_WITHIN;
    loop {
        let client = cluster.client().await;
        match try_set_count_quota(&client, path, count).await {
            Ok(()) => return,
            Err(err) if tokio::time::Instant::now() < deadline => {
                eprintln!("setting the quota of {path}: {err}; trying again on a new client");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(err) => panic!("setting the quota of {path} for {QUOTA_SET_WITHIN:?}: {err}"),
        }
    }
}

async fn try_set_count_quota(client: &Client, path: &str, count: i64) -> Result<(), String> {
    let quota = format!("/zookeeper/quota{path}");
    let limits = format!("{quota}/zookeeper_limits");
    let stats = format!("{quota}/zookeeper_stats");
    let text = format!("count=-1,bytes=-1,countHardLimit={count},byteHardLimit=-1");
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    client.mkdir(&quota, &open).await.ok();
    match client.create(&limits, text.as_bytes(), &open).await {
        Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
        Err(err) => return Err(format!("create {limits}: {err}")),
    }
    client
        .set_data(&limits, text.as_bytes(), None)
        .await
        .map_err(|err| format!("set {limits}: {err}"))?;
    match client.create(&stats, b"count=0,bytes=0", &open).await {
        Ok(_) | Err(zookeeper_client::Error::NodeExists) => Ok(()),
        Err(err) => Err(format!("create {stats}: {err}")),
    }
}

/// A quota of one znode on the lock root for 12 s: the owner's claims and records are refused
/// (its lock, its session and every member's ephemeral node stay). It says so at once, with
/// the fix, and `zkcron_writes_refused` is 1; nothing runs. The quota raised, it fires again
/// at the next tick and records every tick it could not run as missed — each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn a_quota_on_the_lock_root_exceeded() {
    let _guard = fault_lock();
    let name = "a quota on the lock root exceeded";
    let options = ServerOptions {
        enforce_quota: true,
        ..ServerOptions::default()
    };
    let mut cluster = ChaosCluster::start_on(name, 3, options, |_| async {}).await;
    cluster.run_for(BEFORE).await;
    let (owner, _) = cluster.owner_and_id().await;
    let from = now_ms();
    set_count_quota(&cluster, LOCK_ROOT, 1).await;
    let said = cluster
        .wait_logged(owner, REFUSED, from, Duration::from_secs(3))
        .await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    set_count_quota(&cluster, LOCK_ROOT, -1).await;
    let to = now_ms();
    let taken = cluster
        .wait_logged(owner, TAKEN_AGAIN, to, Duration::from_secs(3))
        .await;
    cluster.run_for(AFTER).await;
    assert_eq!(cluster.owner().await, owner, "the lock stayed where it was");
    cluster.note("refused_said_after_ms", serde_json::json!(said - from));
    cluster.note("taken_said_after_ms", serde_json::json!(taken - to));
    let window = FaultWindow::between(from, to, REPLACED_WITHIN + CATCH_UP);
    cluster.finish(Some(window)).await.assert_holds();
}

/// The servers' `jute.maxbuffer` in the scenario below: a children list of 4000 ticks (~70 KB),
/// a batch of 500 submissions (~125 KB) and a burst of claims are past it, a single record far
/// below it.
const LOWERED_JUTE_MAXBUFFER: u32 = 32 * 1024;
/// Old records planted under `runs/fast`, and how many go in one multi-op (~17 KB).
const PLANTED: i64 = 4000;
const PLANTED_PER_MULTI: i64 = 50;
/// The period of the chaos fleet's `long` job.
const LONG_PERIOD: Duration = Duration::from_secs(10);

/// Issue 53: the servers run with `jute.maxbuffer` at 32 KiB. A server never limits what it
/// answers, and zkcron's client reads a reply of any size: the next owner's catch-up lists
/// `runs/fast` (4000 children, ~70 KB) after the owner is killed, and fires on time. A server
/// closes the connection on a request past its limit: a batch of submissions that large goes
/// again one by one, and the owner's claims of a burst of submissions due at once are sent in
/// smaller multi-ops after the first that went unanswered — no request is sent again as it
/// was, so nothing loops. Every tick runs or is recorded, every submission runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn a_parent_and_requests_past_jute_maxbuffer() {
    let _guard = fault_lock();
    let name = "a parent and requests past jute.maxbuffer";
    let options = ServerOptions {
        jute_maxbuffer: Some(LOWERED_JUTE_MAXBUFFER),
        ..ServerOptions::default()
    };
    let mut cluster = ChaosCluster::start_keeping_history(name, 3, options).await;
    plant_old_records(&cluster.client().await).await;
    cluster.run_for(BEFORE).await;
    // A burst: 1500 submissions due within half a second, submitted in batches past the limit.
    let first_due = now_ms() + 6_000;
    let submitted = cluster.submit(1500, first_due, 0).await;
    let (owner, id) = cluster.owner_and_id().await;
    let from = cluster.kill(owner);
    cluster
        .wait_fast_start(from, Some(&id), REPLACED_WITHIN + CATCH_UP)
        .await;
    cluster.restart(owner);
    cluster.run_for(AFTER).await;
    cluster
        .assert_each_submission_ran_once(&submitted, Duration::from_secs(30))
        .await;
    let shrunk = (0..cluster.len())
        .filter_map(|node| cluster.logged_at(node, UNANSWERED, from))
        .count();
    cluster.note(
        "nodes_that_sent_smaller_multi_ops",
        serde_json::json!(shrunk),
    );
    // The next owner takes the burst over with the lock: the run of `long` it catches up
    // starts late and may outlive that job's next tick, recorded `skipped` (forbid).
    let settle = REPLACED_WITHIN + CATCH_UP + LONG_PERIOD;
    let window = FaultWindow::between(from, from, settle).hitting(id);
    cluster
        .finish(Some(window))
        .await
        .assert_failover_within(REPLACED_WITHIN);
}

/// What a node says when a multi-op went unanswered and it sends smaller ones.
const UNANSWERED: &str = "a multi-op went unanswered: the connection was lost under it. If the ZooKeeper servers' jute.maxbuffer is below its size (a server closes the connection on a larger request), set it back to 1 MiB, ZooKeeper's default; meanwhile this node sends smaller multi-ops";

/// Plants [`PLANTED`] skipped records of [`FAST`] a year back: its children list is then past
/// [`LOWERED_JUTE_MAXBUFFER`] (and kept: the jobs keep 5000 records).
async fn plant_old_records(client: &Client) {
    let parent = format!("{LOCK_ROOT}/runs/{FAST}");
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    client.mkdir(&parent, &open).await.ok();
    let year_ago = now_ms() / 1000 * 1000 - 365 * 86_400_000;
    let job = zkcron::JobName::new(FAST);
    let node = zkcron::NodeId::new("planted");
    for first in (0..PLANTED).step_by(usize::try_from(PLANTED_PER_MULTI).unwrap_or(1)) {
        let mut multi = client.new_multi_writer();
        for tick in (first..first + PLANTED_PER_MULTI).map(|i| year_ago + i * 1000) {
            let mut record = zkcron::run::RunRecord::claimed(
                &job,
                tick,
                (&node, "127.0.0.1"),
                zkcron::FencingToken(1),
                tick,
            );
            // Skipped: no chained child, retry or notice follows from it.
            record.status = zkcron::run::RunStatus::Skipped;
            record.finished_unix_ms = Some(tick);
            record.error = Some("planted by the chaos suite".to_owned());
            multi
                .add_create(&format!("{parent}/{tick}"), &record.to_bytes(), &open)
                .expect("a create in a multi-op");
        }
        multi.commit().await.expect("plant old records");
    }
}
