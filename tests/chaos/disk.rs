//! The chaos suite's disk faults under the servers (issue 53): every server's fsync slowed to
//! seconds, and one server's disk full while the other two serve. The servers fsync their
//! transaction logs here, as in production (`forceSync=yes`); `support::io_faults` slows or
//! refuses their writes.

use std::time::Duration;

use super::support::chaos::{ChaosCluster, FaultWindow, REPLACED_WITHIN};
use super::support::fault_lock;
use super::support::io_faults::DiskFaults;
use super::support::zk_cluster::ServerOptions;
use super::{AFTER, BEFORE, CATCH_UP, now_ms};

const FAULTABLE: ServerOptions = ServerOptions {
    disk_faults: true,
    jute_maxbuffer: None,
    enforce_quota: false,
};

/// How long each fault lasts.
const SPAN: Duration = Duration::from_secs(12);

/// Every server's fsync takes 2 s for 12 s: each write of the ensemble (a claim, a record, a
/// session's ephemeral nodes) waits for its group commit's fsync. Ticks start late or are
/// recorded missed; whoever owns the lock afterwards fires on time again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn fsync_slowed_to_seconds_on_every_server() {
    let _guard = fault_lock();
    let name = "fsync slowed to 2 s on every server";
    let cluster = ChaosCluster::start_on(name, 3, FAULTABLE, |_| async {}).await;
    cluster.run_for(BEFORE).await;
    let from = now_ms();
    slow_every_disk(&cluster, 2_000);
    tokio::time::sleep(SPAN).await;
    slow_every_disk(&cluster, 0);
    let to = now_ms();
    cluster.run_for(AFTER).await;
    let window = FaultWindow::between(from, to, REPLACED_WITHIN + CATCH_UP);
    cluster.finish(Some(window)).await.assert_holds();
}

/// The ZooKeeper leader's disk is full for 12 s (its writes refused with ENOSPC), the other two
/// serve: the leader cannot log a transaction, the followers' acknowledgements still make a
/// quorum, and it leads on (ZooKeeper 3.8 neither exits nor steps down). The full disk freed,
/// the server is restarted, as an operator would after such an incident, and resyncs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn a_full_disk_on_the_zookeeper_leader() {
    let _guard = fault_lock();
    let name = "a full disk on the ZooKeeper leader";
    let mut cluster = ChaosCluster::start_on(name, 3, FAULTABLE, |_| async {}).await;
    cluster.run_for(BEFORE).await;
    let leader = cluster.ensemble.leader().await.expect("one leader");
    let (from, to, exited) = fill_disk_for(&mut cluster, leader, SPAN).await;
    cluster.note("leader_exited", serde_json::json!(exited));
    cluster.run_for(AFTER).await;
    let window = FaultWindow::between(from, to, REPLACED_WITHIN + CATCH_UP);
    cluster.finish(Some(window)).await.assert_holds();
}

/// Every server's fsync takes `fsync_ms` from now on (0: as long as the disk takes).
pub(super) fn slow_every_disk(cluster: &ChaosCluster, fsync_ms: u64) {
    let faults = DiskFaults {
        fsync_ms,
        full: false,
    };
    for server in 0..cluster.ensemble.len() {
        cluster
            .ensemble
            .fault_disk(server, faults)
            .expect("set the disk's speed");
    }
}

/// Fills `server`'s disk for `span` (its writes refused with `ENOSPC`), frees it, and starts
/// the server again, as an operator would after such an incident. When the disk was filled
/// and freed, and whether the server had exited meanwhile.
pub(super) async fn fill_disk_for(
    cluster: &mut ChaosCluster,
    server: usize,
    span: Duration,
) -> (i64, i64, bool) {
    let full = DiskFaults {
        fsync_ms: 0,
        full: true,
    };
    let from = now_ms();
    cluster
        .ensemble
        .fault_disk(server, full)
        .expect("fill the disk");
    tokio::time::sleep(span).await;
    cluster
        .ensemble
        .fault_disk(server, DiskFaults::default())
        .expect("free the disk");
    let to = now_ms();
    let exited = !cluster.ensemble.is_running(server);
    cluster
        .ensemble
        .restart(server)
        .await
        .expect("start the server again");
    (from, to, exited)
}
