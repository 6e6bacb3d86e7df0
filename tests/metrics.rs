//! Metrics scraped from a real 3-node cluster across a kill -9 of the owner (issue "Operate
//! it"): the owner gauge moves, the lateness histogram counts every fire, missed ticks are
//! counted by the node that records them.

use crate::support;

use std::time::Duration;

use support::daemon::{DaemonNode, RECORD_FIRE, now_ms, read_fires, schedule_text};
use support::http::{logged_port, request};
use support::{shared_ensemble, unique_chroot, wait_for};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(3);
const START: Duration = Duration::from_secs(10);

/// The value of the sample `name` (with its labels) in a scrape; 0 when absent.
fn sample(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|line| {
            line.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

async fn scrape(port: u16) -> String {
    request(port, "GET", "/metrics", None, None).await.body
}

#[tokio::test]
async fn the_owner_gauge_moves_on_failover_and_every_fire_and_missed_tick_is_counted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let jobs = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n\n\
         [[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nshell = '{RECORD_FIRE}{}'\n",
        fires.display()
    );
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("metrics"));
    let text = schedule_text(&connect, "metrics", SESSION, DELAY, &jobs);
    let mut nodes: Vec<(DaemonNode, u16)> = Vec::new();
    for id in ["n1", "n2", "n3"] {
        let node = DaemonNode::start(dir.path(), id, &text);
        node.wait_log("http listener up", START).await;
        let port = logged_port(&node.log()).expect("a port");
        nodes.push((node, port));
    }
    let first = wait_for("a first fire", START, || {
        let fire = read_fires(&fires).into_iter().next();
        async move { fire }
    })
    .await;
    let mut owners = Vec::new();
    for (node, port) in &nodes {
        if sample(&scrape(*port).await, "zkcron_lock_owner") == 1.0 {
            owners.push(node.node_id.clone());
        }
    }
    assert_eq!(
        owners,
        vec![first.node.clone()],
        "exactly the node that fires says it owns"
    );

    let index = nodes
        .iter()
        .position(|(node, _)| node.node_id == first.node)
        .expect("ours");
    let (mut killed, _) = nodes.remove(index);
    let killed_ms = now_ms();
    killed.kill();
    let taken = wait_for("a fire by a new owner", SESSION + DELAY + START, || {
        let fire = read_fires(&fires)
            .into_iter()
            .find(|f| f.scheduled_ms > killed_ms && f.node != first.node);
        async move { fire }
    })
    .await;
    let (new_owner, port) = nodes
        .iter()
        .find(|(node, _)| node.node_id == taken.node)
        .map(|(node, port)| (node, *port))
        .expect("one of ours");
    // Fires after the scrape may land in the log first: count the log, then scrape.
    let logged = read_fires(&fires)
        .iter()
        .filter(|f| f.node == new_owner.node_id)
        .count() as f64;
    let body = scrape(port).await;
    assert_eq!(sample(&body, "zkcron_lock_owner"), 1.0, "{body}");
    assert_eq!(sample(&body, "zkcron_lock_acquisitions_total"), 1.0);
    let counted = sample(
        &body,
        "zkcron_job_fire_lateness_seconds_count{job=\"tick\"}",
    );
    assert!(
        counted >= logged,
        "{logged} fires logged, {counted} counted:\n{body}"
    );
    // The takeover gap's record is claimed beside the first tick's, in its own round trip:
    // it may be counted just after that tick fired, so it is waited for (bounded), not read once.
    let missed_name = "zkcron_job_missed_ticks_total{job=\"tick\",reason=\"no_owner\"}";
    wait_for(
        "the takeover gap recorded missed and counted",
        START,
        || async move { (sample(&scrape(port).await, missed_name) >= 1.0).then_some(()) },
    )
    .await;
    for (node, port) in &nodes {
        if node.node_id != taken.node {
            let body = scrape(*port).await;
            assert_eq!(
                sample(&body, "zkcron_lock_owner"),
                0.0,
                "{}: {body}",
                node.node_id
            );
        }
    }
}
