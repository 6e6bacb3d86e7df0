//! Lock groups on real daemons (issue 19): the groups spread over the nodes, at most ⌈G/N⌉ a
//! node once membership has settled, each tick fired once; and a job moved between groups by a
//! rolling reload (the nodes disagree for a while) fires no tick twice and loses none silently.
//! The fleet through a join, a kill -9 and a restart is a chaos scenario (tests/chaos.rs,
//! `twelve_groups_through_a_join_a_kill_and_a_restart`), checked by the suite's invariants.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;
use support::daemon::{
    DaemonNode, Fire, RECORD_FIRE, now_ms, read_fires, schedule_text, zkcron_ok, zkcron_status,
};
use support::zk_cluster::try_wait_for;
use support::{fault_lock, shared_ensemble, unique_chroot};
use zookeeper_client::Client;

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(2);
/// Process start, a JVM pause or a busy core, on bounds that are otherwise exact.
const SLACK: Duration = Duration::from_secs(3);

/// `[lock] rebalance_after` of these tests: short, so that a test sees several moves.
const SETTLE: &str = "2s";

fn groups_text(names: &[&str]) -> String {
    names
        .iter()
        .map(|name| format!("[[group]]\nname = \"{name}\"\n"))
        .collect()
}

fn every_second(name: &str, group: Option<&str>, fires: &Path) -> String {
    let group = group.map_or(String::new(), |g| format!("group = \"{g}\"\n"));
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\n{group}shell = '{RECORD_FIRE}{}'\n",
        fires.display()
    )
}

fn schedule(connect: &str, groups: &[&str], jobs: &str) -> String {
    schedule_text(
        connect,
        "groups",
        SESSION,
        DELAY,
        &format!("{}{jobs}", groups_text(groups)),
    )
    .replace(
        "[lock]\n",
        &format!("[lock]\nrebalance_after = \"{SETTLE}\"\n"),
    )
}

/// Who owns each group (`""`: the default group), as the lock nodes say.
async fn owners(client: &Client, groups: &[&str]) -> BTreeMap<String, Option<String>> {
    let mut owners = BTreeMap::new();
    let paths = std::iter::once((String::new(), "/zkcron/groups/lock".to_owned())).chain(
        groups
            .iter()
            .map(|g| ((*g).to_owned(), format!("/zkcron/groups/groups/{g}/lock"))),
    );
    for (group, path) in paths {
        let owner = match client.get_data(&path).await {
            Ok((data, _)) => serde_json::from_slice::<serde_json::Value>(&data)
                .ok()
                .and_then(|v| v["node_id"].as_str().map(str::to_owned)),
            Err(_) => None,
        };
        owners.insert(group, owner);
    }
    owners
}

/// No (job, tick) fired twice.
fn assert_once_per_tick(fires: &[Fire]) {
    let mut seen = BTreeSet::new();
    for fire in fires {
        assert!(
            seen.insert((fire.job.clone(), fire.scheduled_ms)),
            "{} fired twice for tick {}: {fires:?}",
            fire.job,
            fire.scheduled_ms
        );
    }
}

/// Every tick of per-second `job` in `ticks` ran (in `fires`) or is recorded in its history, in
/// any status: run, missed (a gap, from its first tick) or skipped. Err says which tick is lost.
fn assert_every_tick_accounted_for(
    job: &str,
    ticks: std::ops::RangeInclusive<i64>,
    fires: &[Fire],
    config: &Path,
) -> Result<(), String> {
    let ran: BTreeSet<i64> = fires
        .iter()
        .filter(|f| f.job == job)
        .map(|f| f.scheduled_ms)
        .collect();
    let history = zkcron_ok(&["history", job, "--json", "--limit", "500"], config);
    let recorded: Vec<(i64, i64)> = support::daemon::document_items(&history, "runs")
        .iter()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|r| {
            let tick = r["scheduled_unix_ms"].as_i64()?;
            Some((r["missed_from_unix_ms"].as_i64().unwrap_or(tick), tick))
        })
        .collect();
    for tick in ticks.step_by(1000) {
        let covered = ran.contains(&tick)
            || recorded
                .iter()
                .any(|(from, to)| (*from..=*to).contains(&tick));
        if !covered {
            return Err(format!(
                "{job}: tick {tick} neither ran nor is recorded: ran {ran:?}, recorded {recorded:?}"
            ));
        }
    }
    Ok(())
}

fn logs(nodes: &[&DaemonNode]) -> String {
    nodes
        .iter()
        .map(|node| format!("--- {}\n{}", node.node_id, node.log_tail()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn six_groups_spread_two_a_node_over_three_nodes_and_each_tick_fires_once() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let chroot = unique_chroot("groups");
    let connect = shared_ensemble()
        .isolated_connect_string(&chroot)
        .await
        .expect("chroot");
    let groups = ["g1", "g2", "g3", "g4", "g5"];
    let mut jobs = every_second("j0", None, &fires);
    for group in groups {
        jobs.push_str(&every_second(&format!("j-{group}"), Some(group), &fires));
    }
    let text = schedule(&connect, &groups, &jobs);
    let nodes: Vec<DaemonNode> = ["n1", "n2", "n3"]
        .iter()
        .map(|id| DaemonNode::start(dir.path(), id, &text))
        .collect();
    let client = Client::connect(&connect).await.expect("session");
    let started = std::time::Instant::now();
    // Settling (2 s) after the last join, then moves spaced by a second each: well within.
    let balanced = try_wait_for("every node owns two groups", SLACK * 8, || {
        let client = client.clone();
        async move {
            let owners = owners(&client, &groups).await;
            let mut load: BTreeMap<String, usize> = BTreeMap::new();
            for owner in owners.values() {
                *load.entry(owner.clone()?).or_default() += 1;
            }
            (load.len() == 3 && load.values().all(|n| *n == 2)).then_some(owners)
        }
    })
    .await
    .unwrap_or_else(|not_reached| {
        panic!("{not_reached}\n{}", logs(&nodes.iter().collect::<Vec<_>>()))
    });
    eprintln!("balanced after {:?}: {balanced:?}", started.elapsed());
    // Balanced and sticky: nothing moves any more. The window starts a second after the
    // balance was seen: that reading can follow a move closely, and the tick in flight during
    // a move is fired by whichever of the two nodes claimed it.
    let from_ms = now_ms() + 1_000;
    tokio::time::sleep(SLACK + Duration::from_secs(1)).await;
    assert_eq!(
        owners(&client, &groups).await,
        balanced,
        "no move once balanced"
    );
    let until_ms = now_ms() - 1_000;
    let all = read_fires(&fires);
    assert_once_per_tick(&all);
    // Each job fired every second of the quiet window, by its group's owner.
    for (group, owner) in &balanced {
        let job = if group.is_empty() {
            "j0".to_owned()
        } else {
            format!("j-{group}")
        };
        let window: Vec<&Fire> = all
            .iter()
            .filter(|f| f.job == job && f.scheduled_ms > from_ms && f.scheduled_ms <= until_ms)
            .collect();
        assert!(
            window.len() >= 2,
            "{job} fired {} times in the window",
            window.len()
        );
        assert!(
            window.iter().all(|f| Some(&f.node) == owner.as_ref()),
            "{job} fired by its group's owner {owner:?}: {window:?}"
        );
    }
    assert_status_shows_the_groups(&nodes[0].config, &balanced);
    // An operator moves one group: its owner hands it over, and another node takes it at once
    // (the balancer prefers another node while the handover is under way).
    let before = balanced["g1"].clone().expect("g1 owned");
    let said = zkcron_ok(&["release", "--group", "g1"], &nodes[0].config);
    // The command names the node that took it over, as it saw it: read again at once, the lock
    // may be between that node and the next one the balancer places it on (the taker now owns
    // three groups), so the read only has to find it owned again within a takeover.
    let taken_by = said
        .split_once(&format!("group g1 handed over from {before} to "))
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .map(str::to_owned);
    assert!(
        taken_by.as_ref().is_some_and(|node| *node != before),
        "g1 moved away from {before}: {said}"
    );
    try_wait_for("g1 owned after its handover", SLACK * 2, || {
        let owners = owners(&client, &groups);
        async move { owners.await["g1"].clone() }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{said}"));
    tokio::time::sleep(SLACK).await;
    assert_once_per_tick(&read_fires(&fires));
    for node in &nodes {
        node.signal(Signal::SIGTERM);
    }
}

/// `zkcron status` (JSON and text) shows each group with the owner its lock node names, the
/// groups each member owns, and each job's group (issue 19: "operators see it").
fn assert_status_shows_the_groups(config: &Path, owners: &BTreeMap<String, Option<String>>) {
    let json: serde_json::Value =
        serde_json::from_str(&zkcron_status(&["--json"], config)).expect("status JSON");
    assert_eq!(json["format"], 2, "{json}");
    let groups = json["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), owners.len(), "{json}");
    for group in groups {
        let name = group["name"].as_str().expect("a name");
        let key = if name == "default" { "" } else { name };
        assert_eq!(
            group["lock"]["owner"]["node_id"].as_str(),
            owners[key].as_deref(),
            "{name}'s owner: {json}"
        );
        let job = if key.is_empty() {
            "j0".to_owned()
        } else {
            format!("j-{name}")
        };
        assert_eq!(group["jobs"], serde_json::json!([job]), "{json}");
    }
    let balance = json["balance"].as_array().expect("balance");
    assert_eq!(balance.len(), 3, "{json}");
    assert!(
        balance
            .iter()
            .all(|m| m["groups"].as_array().map(Vec::len) == Some(2)),
        "two groups a member: {json}"
    );
    assert_eq!(json["unplaceable"], serde_json::json!([]), "{json}");
    let job_group = |job: &str| {
        json["jobs"]
            .as_array()
            .and_then(|jobs| jobs.iter().find(|j| j["name"] == job))
            .map(|j| j["group"].clone())
    };
    assert_eq!(job_group("j0"), Some(serde_json::json!("default")));
    assert_eq!(job_group("j-g3"), Some(serde_json::json!("g3")));
    let text = zkcron_status(&[], config);
    assert!(
        text.contains("groups:        6 (owned per member: n1 2, n2 2, n3 2)"),
        "{text}"
    );
    let g2_owner = owners["g2"].as_deref().expect("g2 owned");
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().take(2).eq(["g2", g2_owner])),
        "a line for g2 with its owner: {text}"
    );
}

#[tokio::test]
async fn a_job_moved_between_groups_by_a_rolling_reload_fires_no_tick_twice_and_loses_none() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("group-move"));
    let groups = ["a", "b"];
    // A second job pins each group's owner in the log.
    let jobs = |mover: &str| {
        format!(
            "{}{}{}",
            every_second("mover", Some(mover), &fires),
            every_second("in-a", Some("a"), &fires),
            every_second("in-b", Some("b"), &fires)
        )
    };
    let before = schedule(&connect, &groups, &jobs("a"));
    let after = schedule(&connect, &groups, &jobs("b"));
    let first = DaemonNode::start(dir.path(), "m1", &before);
    let second = DaemonNode::start(dir.path(), "m2", &before);
    let nodes = [&first, &second];
    let owner_of = |job: &str, fires: &[Fire]| {
        fires
            .iter()
            .rev()
            .find(|f| f.job == job)
            .map(|f| f.node.clone())
    };
    // a and b on different nodes, so that the reload moves the job between nodes. Three groups
    // on two nodes are balanced either way (2 and 1): when the start put a and b together,
    // an operator's release moves a.
    let client = Client::connect(&connect).await.expect("session");
    let owned = try_wait_for("groups a and b owned", SLACK * 4, || {
        let client = client.clone();
        async move {
            let owners = owners(&client, &groups).await;
            (owners["a"].is_some() && owners["b"].is_some()).then_some(owners)
        }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", logs(&nodes)));
    if owned["a"] == owned["b"] {
        zkcron_ok(&["release", "--group", "a"], &first.config);
    }
    try_wait_for("groups a and b owned by different nodes", SLACK * 8, || {
        let all = read_fires(&fires);
        let (a, b) = (owner_of("in-a", &all), owner_of("in-b", &all));
        let split = (a.is_some() && b.is_some() && a != b).then_some(());
        async move { split }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", logs(&nodes)));
    // The owner of a reloads first: for a while it fires the mover in neither group (it does
    // not own b), while the other node still files it under a (which it does not own).
    let all = read_fires(&fires);
    let a_owner = owner_of("in-a", &all).expect("a has an owner");
    let (early, late) = if a_owner == "m1" {
        (&first, &second)
    } else {
        (&second, &first)
    };
    let moved_at = now_ms();
    early.rewrite(&after);
    early.signal(Signal::SIGHUP);
    early.wait_log("schedule reloaded", SLACK).await;
    tokio::time::sleep(SLACK).await;
    late.rewrite(&after);
    late.signal(Signal::SIGHUP);
    late.wait_log("schedule reloaded", SLACK).await;
    let reloaded_at = now_ms();
    // The mover fires again, in b, on the node that owns b.
    try_wait_for(
        "the mover fires again after both reloads",
        SLACK * 2,
        || {
            let again = read_fires(&fires)
                .iter()
                .any(|f| f.job == "mover" && f.scheduled_ms > reloaded_at)
                .then_some(());
            async move { again }
        },
    )
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", logs(&nodes)));
    let all = read_fires(&fires);
    assert_once_per_tick(&all);
    // Every tick of the mover from before the move to after it either ran or is recorded.
    // From the tick before the move, or the mover's first tick when its group was only just
    // owned (the setup's release can be that recent).
    let first_fire = all
        .iter()
        .filter(|f| f.job == "mover")
        .map(|f| f.scheduled_ms)
        .min()
        .expect("the mover fired before the move");
    let first_tick = ((moved_at / 1000 - 1) * 1000).max(first_fire);
    let last_tick = (reloaded_at / 1000) * 1000;
    assert_every_tick_accounted_for("mover", first_tick..=last_tick, &all, &late.config)
        .unwrap_or_else(|broken| panic!("{broken}\n{}", logs(&nodes)));
    for node in nodes {
        node.signal(Signal::SIGTERM);
    }
}

/// Waits until every group has an owner and no node owns more than ⌈G/N⌉ of them, N being
/// `live`; returns the owners.
async fn wait_balanced(
    client: &Client,
    groups: &[&str],
    live: &[&DaemonNode],
    within: Duration,
    what: &str,
) -> BTreeMap<String, Option<String>> {
    let cap = (groups.len() + 1).div_ceil(live.len());
    let ids: BTreeSet<String> = live.iter().map(|n| n.node_id.clone()).collect();
    try_wait_for(what, within, || {
        let (client, ids) = (client.clone(), ids.clone());
        async move {
            let owners = owners(&client, groups).await;
            let mut load: BTreeMap<String, usize> = BTreeMap::new();
            for owner in owners.values() {
                *load.entry(owner.clone()?).or_default() += 1;
            }
            let balanced = load.keys().all(|node| ids.contains(node))
                && load.len() == ids.len()
                && load.values().all(|n| *n <= cap);
            balanced.then_some(owners)
        }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", logs(live)))
}

fn on_demand(name: &str, group: &str, fires: &Path) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\ngroup = \"{group}\"\nshell = '{RECORD_FIRE}{}'\n",
        fires.display()
    )
}

/// Delayed submissions follow their job's group (issue 19): zkcron names the job in the
/// pending marker, so each group's owner reads only its own; each runs once, on the owner of
/// its job's group; and a marker in the form without the job (a submitter that knows nothing of
/// groups, docs/DELAYED.md) still fires once.
#[tokio::test]
async fn submissions_run_once_on_the_owner_of_their_jobs_group_whatever_their_markers_name() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let chroot = unique_chroot("groups-delayed");
    let connect = shared_ensemble()
        .isolated_connect_string(&chroot)
        .await
        .expect("chroot");
    let groups = ["a", "b"];
    let jobs = format!(
        "{}{}",
        on_demand("sub-a", "a", &fires),
        on_demand("sub-b", "b", &fires)
    );
    let text = schedule(&connect, &groups, &jobs);
    let nodes: Vec<DaemonNode> = ["d1", "d2"]
        .iter()
        .map(|id| DaemonNode::start(dir.path(), id, &text))
        .collect();
    let client = Client::connect(&connect).await.expect("session");
    // Settled, so that the owner that runs a submission is the one read here.
    let live: Vec<&DaemonNode> = nodes.iter().collect();
    let owned = wait_balanced(&client, &groups, &live, SLACK * 8, "3 groups over 2 nodes").await;
    tokio::time::sleep(SLACK).await;
    assert_eq!(
        owners(&client, &groups).await,
        owned,
        "no move once balanced"
    );
    let paths =
        zkcron::layout::DelayedPaths::new(&zkcron::layout::LockPaths::new("/zkcron", "groups"));
    let zk = zkcron::ledger::Ledger::new(zkcron::zk::Zk::new(
        client.clone(),
        &zookeeper_client::Acls::anyone_all(),
        zkcron::zk::REQUEST_BOUND,
    ));
    let mut ids = Vec::new();
    for (job, n) in [("sub-a", 1), ("sub-a", 2), ("sub-b", 3), ("sub-b", 4)] {
        let id = format!("s{n}");
        zkcron_ok(
            &["submit", job, "--in", "2s", "--id", &id],
            &nodes[0].config,
        );
        let parsed = zkcron::delayed::submission::SubmissionId::parse(&id).expect("an id");
        // The CLI wrote through a server of its own: this session's server may not have applied
        // that write yet (CI twice read it as not pending) until it syncs with the leader.
        client.sync("/").await.expect("sync");
        let (submission, _) = zkcron::ledger::submissions::read(&zk, &paths, &parsed)
            .await
            .expect("read")
            .expect("pending");
        let marker = paths.marker_of(&parsed, &submission);
        assert!(
            submission.marker_names_job && marker.ends_with(&format!("/{id}~{job}")),
            "{marker}"
        );
        assert!(
            client.check_stat(&marker).await.expect("stat").is_some(),
            "{marker}"
        );
        ids.push((job, id));
    }
    // One in the form without the job, as a submitter that knows nothing of groups writes it.
    let plain = zkcron::delayed::submission::SubmissionId::parse("s5").expect("an id");
    let submission = zkcron::delayed::submission::Submission {
        job: zkcron::JobName::new("sub-b"),
        due_unix_ms: now_ms() + 2_000,
        submitted_unix_ms: now_ms(),
        payload: Vec::new(),
        requested_by: None,
        anonymous: false,
        marker_names_job: false,
        retry_of: None,
        traceparent: None,
        after: None,
    };
    zkcron::ledger::submissions::submit(&zk, &paths, &plain, &submission)
        .await
        .expect("submitted");
    assert!(paths.marker_of(&plain, &submission).ends_with("/s5"));
    ids.push(("sub-b", "s5".to_owned()));
    try_wait_for("every submission ran", SLACK * 4, || {
        let all = read_fires(&fires);
        let done = ids
            .iter()
            .all(|(_, id)| all.iter().any(|f| f.run_id.ends_with(&format!("-{id}"))));
        async move { done.then_some(()) }
    })
    .await
    .unwrap_or_else(|not_reached| {
        panic!("{not_reached}\n{}", logs(&nodes.iter().collect::<Vec<_>>()))
    });
    // Long enough for a second run of any of them to show.
    tokio::time::sleep(SLACK).await;
    let all = read_fires(&fires);
    for (job, id) in &ids {
        let runs: Vec<&Fire> = all
            .iter()
            .filter(|f| f.run_id.ends_with(&format!("-{id}")))
            .collect();
        assert_eq!(runs.len(), 1, "{id} ran once: {runs:?}");
        let group = &job[4..];
        assert_eq!(
            Some(&runs[0].node),
            owned[group].as_ref(),
            "{id} ran on the owner of group {group}: {owned:?}"
        );
    }
    for node in &nodes {
        node.signal(Signal::SIGTERM);
    }
}
