//! The event stream (issue 52), end to end on real `zkcron run` nodes and a real ensemble:
//! `zkcron events -f` follows runs, a pause and a failover of the owner in order, then the
//! failover of the node serving it, which it crosses with a gap said, never silently; the API
//! answers a cursor older than what a node kept with 410, and with `across_gap=true` the runs of
//! that range from their records.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::collections::HashSet;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::io::AsyncBufReadExt;

use support::daemon::{DaemonNode, history_records, schedule_text, zkcron_ok};
use support::http::{logged_port, request, request_with};
use support::{shared_ensemble, try_wait_for, unique_chroot};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(2);
/// Process start, a JVM pause or a busy core, on bounds that are otherwise exact.
const SLACK: Duration = Duration::from_secs(5);
/// A failover: the session's timeout, the takeover delay, the slack.
const FAILOVER: Duration = Duration::from_secs(2 + 2 + 5);
const TOKEN: &str = "events-test-token";

/// The events a follower printed, as JSON, shared with the task reading them.
type Printed = Arc<Mutex<Vec<serde_json::Value>>>;

fn printed(events: &Printed) -> Vec<serde_json::Value> {
    events.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Waits until an event printed since `from` matches.
async fn wait_event(
    events: &Printed,
    from: usize,
    what: &str,
    within: Duration,
    matches: impl Fn(&serde_json::Value) -> bool,
) -> usize {
    try_wait_for(what, within, || {
        let found = printed(events)
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, event)| matches(event))
            .map(|(at, _)| at);
        async move { found }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{:#?}", printed(events)))
}

fn is(event: &serde_json::Value, kind: &str, node: &str) -> bool {
    event["kind"] == kind && event["node"] == node
}

/// n1 owns; n2 serves `zkcron events -f`; n3 stands by. The follower sees n1's runs, a pause and
/// a resume, n1 killed (it leaves, the lock is owned by another, whose runs follow), then n2
/// killed: it resumes on n3, which began following after the follower's cursor, and says the
/// gap. Each event once, run events of a run never twice, the ids in order within each
/// node's stream.
#[tokio::test]
async fn events_follow_runs_a_pause_and_failovers_in_order_and_say_a_gap() {
    let dir = tempfile::tempdir().expect("temp dir");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("events"));
    let jobs = "[http]\nlisten = \"127.0.0.1:0\"\ntoken_env = \"ZKCRON_EVENTS_TOKEN\"\n\n\
                [[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nshell = \"true\"\n";
    let text = schedule_text(&connect, "events", SESSION, DELAY, jobs);
    let env = [("ZKCRON_EVENTS_TOKEN", Path::new(TOKEN))];
    let mut n1 = DaemonNode::start_with_env(dir.path(), "n1", &text, &env);
    n1.wait_log("lock acquired", SESSION + SLACK).await;
    let mut n2 = DaemonNode::start_with_env(dir.path(), "n2", &text, &env);
    let n3 = DaemonNode::start_with_env(dir.path(), "n3", &text, &env);
    n2.wait_log("http listener up", SLACK).await;
    n3.wait_log("http listener up", SLACK).await;

    let mut follower = tokio::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["events", "-f", "--json", "--since", "0s", "--config"])
        .arg(&n2.config)
        .env("ZKCRON_HTTP_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("zkcron events -f");
    let stdout = follower.stdout.take().expect("its stdout");
    let events: Printed = Arc::default();
    let reading = Arc::clone(&events);
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let event = serde_json::from_str(&line)
                .unwrap_or_else(|err| panic!("a JSON event ({err}): {line}"));
            reading
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(event);
        }
    });

    // n1's runs, as their records say: started, then ended.
    let started = wait_event(&events, 0, "a run of tick started on n1", SLACK * 2, |e| {
        is(e, "run_started", "n1") && e["job"] == "tick"
    })
    .await;
    let run_id = printed(&events)[started]["run_id"].clone();
    wait_event(&events, started, "that run ended", SLACK, |e| {
        e["kind"] == "run_ended" && e["run_id"] == run_id && e["status"] == "succeeded"
    })
    .await;
    zkcron_ok(&["pause", "tick", "--reason", "events test"], &n2.config);
    wait_event(&events, 0, "tick paused", SLACK, |e| {
        e["kind"] == "job_paused" && e["job"] == "tick"
    })
    .await;
    zkcron_ok(&["resume", "tick"], &n2.config);
    let resumed = wait_event(&events, 0, "tick resumed", SLACK, |e| {
        e["kind"] == "job_resumed" && e["job"] == "tick"
    })
    .await;

    // The owner killed: it leaves, another owns, and runs.
    n1.kill();
    let left = wait_event(&events, resumed, "n1 left", FAILOVER, |e| {
        is(e, "member_left", "n1")
    })
    .await;
    let owned = wait_event(&events, resumed, "another node owns", FAILOVER, |e| {
        e["kind"] == "owner_changed" && (e["node"] == "n2" || e["node"] == "n3")
    })
    .await;
    let owner = printed(&events)[owned]["node"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let ran = wait_event(&events, owned, "the new owner's run", SLACK * 2, |e| {
        is(e, "run_started", &owner)
    })
    .await;
    assert!(left < ran, "{:#?}", printed(&events));

    // The node serving the events killed: the follower resumes on n3, which says the gap.
    n2.kill();
    let gap = wait_event(&events, ran, "the gap n3 says", FAILOVER * 2, |e| {
        e["kind"] == "gap"
    })
    .await;
    wait_event(&events, gap, "runs after the gap", FAILOVER * 2, |e| {
        e["kind"] == "run_ended" && e["node"] == "n3"
    })
    .await;

    let all = printed(&events);
    // Within one node's stream the ids never go back.
    for pair in all[..gap].windows(2) {
        assert!(
            pair[0]["id"].as_i64() <= pair[1]["id"].as_i64(),
            "out of order: {pair:#?}\n{all:#?}"
        );
    }
    // A run's event is told once: its (run, status) never twice, across the gap too.
    let mut told = HashSet::new();
    for event in all.iter().filter(|e| e["run_id"].is_string()) {
        let key = (
            event["run_id"].to_string(),
            event["node"].to_string(),
            event["status"].to_string(),
        );
        assert!(told.insert(key), "told twice: {event}\n{all:#?}");
    }
    let stderr = follower.stderr.take();
    let _ = follower.start_kill();
    drop(stderr);
}

/// A node's API answers a cursor older than what it kept 410 Gone with the range, and, asked
/// to go across the gap, gives the runs of that range from their records, the gap event, and
/// then what it kept; a member's reloads, applied and refused, are told from its member node.
#[tokio::test]
async fn a_cursor_older_than_what_a_node_kept_is_answered_410_or_crossed_with_the_records() {
    let dir = tempfile::tempdir().expect("temp dir");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("events-410"));
    let jobs = "[http]\nlisten = \"127.0.0.1:0\"\ntoken_env = \"ZKCRON_EVENTS_TOKEN\"\n\n\
                [[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nshell = \"true\"\n";
    let text = schedule_text(&connect, "events410", SESSION, DELAY, jobs);
    let env = [("ZKCRON_EVENTS_TOKEN", Path::new(TOKEN))];
    let n1 = DaemonNode::start_with_env(dir.path(), "n1", &text, &env);
    n1.wait_log("lock acquired", SESSION + SLACK).await;
    let port = logged_port(&n1.log()).expect("n1's port");

    // Three runs ended before any follower asked: the hub that the first request starts
    // began following after them.
    try_wait_for("three succeeded runs", SLACK * 2, || {
        let records = history_records("tick", &[], &n1.config);
        let succeeded = records
            .iter()
            .filter(|r| r["status"] == "succeeded")
            .count();
        async move { (succeeded >= 3).then_some(()) }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", n1.log_tail()));

    // Everything kept, from 0: the runs from their records, no gap.
    let listing = |path: String| async move {
        let reply = request(port, "GET", &path, Some(TOKEN), None).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert!(
            reply.headers.contains("content-type: text/event-stream"),
            "{reply:?}"
        );
        reply
            .body
            .split("\n\n")
            .filter_map(|frame| frame.lines().find_map(|line| line.strip_prefix("data: ")))
            .map(|data| serde_json::from_str::<serde_json::Value>(data).expect("an event"))
            .collect::<Vec<_>>()
    };
    let listed = listing("/v1/events?follow=false&after=0&across_gap=true".to_owned()).await;
    assert!(listed.iter().all(|e| e["kind"] != "gap"), "{listed:#?}");
    let ended: Vec<serde_json::Value> = listed
        .into_iter()
        .filter(|e| e["kind"] == "run_ended")
        .collect();
    assert!(ended.len() >= 3, "{ended:#?}");
    let cursor = ended[0]["id"].as_i64().expect("an id");

    // The hub began following after that cursor: 410, saying what was lost.
    let gone = request(
        port,
        "GET",
        &format!("/v1/events?after={cursor}"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(gone.status, 410, "{gone:?}");
    let body = gone.json();
    assert_eq!(body["after"], cursor);
    let kept_from = body["kept_from"].as_i64().expect("kept_from");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("across_gap=true")),
        "{body}"
    );

    // Across the gap: the runs after the cursor from their records, in order, then the gap.
    let crossed = listing(format!(
        "/v1/events?follow=false&after={cursor}&across_gap=true"
    ))
    .await;
    let ids: Vec<i64> = crossed.iter().filter_map(|e| e["id"].as_i64()).collect();
    assert!(
        ids.windows(2).all(|pair| pair[0] <= pair[1]),
        "{crossed:#?}"
    );
    assert!(
        crossed
            .iter()
            .all(|e| e["id"].as_i64() > Some(cursor) || e["kind"] == "gap"),
        "{crossed:#?}"
    );
    assert!(
        crossed
            .iter()
            .any(|e| e["kind"] == "run_ended" && e["run_id"] == ended[1]["run_id"]),
        "{crossed:#?}"
    );
    let gaps: Vec<&serde_json::Value> = crossed.iter().filter(|e| e["kind"] == "gap").collect();
    assert_eq!(gaps.len(), 1, "{crossed:#?}");
    assert_eq!(gaps[0]["id"], kept_from.max(cursor));

    // A reload applied, then one refused, as the member node publishes them.
    let since = *ids.last().unwrap_or(&cursor);
    let reloads = |kind: &'static str| {
        let path = format!("/v1/events?follow=false&after={since}&across_gap=true");
        let listed = listing(path);
        async move {
            let listed = listed.await;
            listed
                .into_iter()
                .find(|e| e["kind"] == kind && e["node"] == "n1")
        }
    };
    n1.signal(Signal::SIGHUP);
    let applied = try_wait_for("reload_applied", SLACK * 2, || reloads("reload_applied"))
        .await
        .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", n1.log_tail()));
    assert!(
        applied["detail"]
            .as_str()
            .is_some_and(|d| d.contains("schedule")),
        "{applied}"
    );
    n1.rewrite(&format!(
        "{text}\n[[job]]\nname = \"broken\"\nschedule = \"not cron\"\n"
    ));
    n1.signal(Signal::SIGHUP);
    let refused = try_wait_for("reload_refused", SLACK * 2, || reloads("reload_refused"))
        .await
        .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", n1.log_tail()));
    assert!(
        refused["detail"]
            .as_str()
            .is_some_and(|d| d.contains("broken")),
        "{refused}"
    );

    // A cursor that is no event's id is refused.
    let bearer = format!("Bearer {TOKEN}");
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Last-Event-ID", "soon"),
    ];
    let bad = request_with(port, "GET", "/v1/events", &headers, None).await;
    assert_eq!(bad.status, 400, "{bad:?}");
}
