//! The chaos suite's clock faults (issue 53): a node whose wall clock is off the servers', or
//! steps and drifts while it runs, by libfaketime (its monotonic clock stays real).

use std::time::Duration;

use super::support::chaos::{ChaosCluster, FaultWindow, REPLACED_WITHIN};
use super::support::fault_lock;
use super::{AFTER, BEFORE, CATCH_UP};

/// How long each step of a clock is held: more than a clock check's period (the session
/// timeout), so that each is measured.
const HELD: Duration = Duration::from_secs(6);

/// Issue 53's break: the owner killed, and the one node left has a clock `offset_s` off the
/// servers'. It stood aside while the owner lived (its clock is off the fleet's); alone, it
/// takes over and fires by the servers' clock. Every tick from the takeover on is run, or
/// recorded missed — none early, none twice — within the failover time of a healthy node: the
/// owner's lock node gone, the node checks its clock at once and learns it is alone.
///
/// `then_s`: steps of its clock once it owns, each held a few seconds — a clock drifting
/// further off, then NTP stepping it back. Its schedule is the servers' time carried on its
/// monotonic clock: every tick still runs, on time.
async fn a_lone_node_off_the_servers_clock_takes_over(name: &str, offset_s: i64, then_s: &[i64]) {
    let _guard = fault_lock();
    let mut cluster = ChaosCluster::start(name, 1).await;
    let (skewed, _) = cluster.add_node_with_clock(Some(offset_s)).await;
    cluster.run_for(BEFORE).await;
    let (owner, id) = cluster.owner_and_id().await;
    assert_ne!(owner, skewed, "the node off the fleet's clock stands aside");
    let from = cluster.kill(owner);
    let within = REPLACED_WITHIN;
    cluster
        .wait_fast_start(from, Some(&id), within + CATCH_UP)
        .await;
    cluster.run_for(AFTER).await;
    for step in then_s {
        cluster.set_clock(skewed, *step);
        cluster.run_for(HELD).await;
    }
    cluster.run_for(AFTER).await;
    cluster.note("offset_s", serde_json::json!(offset_s));
    cluster.note("then_s", serde_json::json!(then_s));
    let report = cluster
        .finish(Some(FaultWindow::between(from, from, within).hitting(id)))
        .await;
    report.assert_failover_within(within);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_node_15_s_ahead_takes_over_from_a_killed_owner_then_its_clock_steps() {
    let name = "a lone node 15 s ahead takes over, drifts to 20 s and is stepped back";
    a_lone_node_off_the_servers_clock_takes_over(name, 15, &[20, 0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full chaos suite: scripts/chaos"]
async fn a_lone_node_10_min_behind_takes_over_from_a_killed_owner() {
    let name = "a lone node 10 min behind takes over";
    a_lone_node_off_the_servers_clock_takes_over(name, -600, &[]).await;
}
