//! The chaos suite's faults of ZooKeeper's own limits (issue 53): a quota on the lock root
//! exceeded with `zookeeper.enforceQuota` on, every create under it refused.

use std::time::Duration;

use zookeeper_client::{Acls, Client, CreateMode};

use super::support::chaos::{ChaosCluster, FaultWindow, REPLACED_WITHIN};
use super::support::fault_lock;
use super::support::zk_cluster::ServerOptions;
use super::{AFTER, BEFORE, CATCH_UP, now_ms};

/// The lock root of the chaos suite's nodes, as the servers name it (no chroot).
pub(super) const LOCK_ROOT: &str = "/zkcron/chaos";
/// What the owner says while its writes are refused, and once they are taken again.
const REFUSED: &str = "ZooKeeper refuses this node's claims and records: nothing runs until it takes them again, and the ticks are then recorded missed";
const TAKEN_AGAIN: &str = "ZooKeeper takes this node's writes again";

/// Sets the hard count quota of `path` to `count` znodes (`-1`: none), as `setquota -N` does
/// in ZooKeeper 3.8: the limits node under `/zookeeper/quota`, and its stats node, which makes
/// the server count what is there.
pub(super) async fn set_count_quota(client: &Client, path: &str, count: i64) {
    let quota = format!("/zookeeper/quota{path}");
    let limits = format!("{quota}/zookeeper_limits");
    let text = format!("count=-1,bytes=-1,countHardLimit={count},byteHardLimit=-1");
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    client.mkdir(&quota, &open).await.ok();
    match client.create(&limits, text.as_bytes(), &open).await {
        Ok(_) => {
            let stats = format!("{quota}/zookeeper_stats");
            client
                .create(&stats, b"count=0,bytes=0", &open)
                .await
                .unwrap_or_else(|err| panic!("create {stats}: {err}"));
        }
        Err(zookeeper_client::Error::NodeExists) => {
            client
                .set_data(&limits, text.as_bytes(), None)
                .await
                .unwrap_or_else(|err| panic!("set {limits}: {err}"));
        }
        Err(err) => panic!("create {limits}: {err}"),
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
    let client = cluster.client().await;
    let from = now_ms();
    set_count_quota(&client, LOCK_ROOT, 1).await;
    let said = cluster
        .wait_logged(owner, REFUSED, from, Duration::from_secs(3))
        .await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    set_count_quota(&client, LOCK_ROOT, -1).await;
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
