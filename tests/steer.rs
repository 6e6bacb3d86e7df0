//! `zkcron pause`, `resume`, `trigger` and `release` end to end (issue "Operate it"): real
//! `zkcron run` processes on the shared ensemble, the CLI as an operator runs it, the jobs' own
//! fire log and the ledger's records as the proof.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use support::daemon::{DaemonNode, RECORD_FIRE, assert_exit, now_ms, read_fires, schedule_text};
use support::http::{logged_port, request};
use support::{shared_ensemble, unique_chroot, wait_for};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(3);
/// A first fire after a start: session, acquisition, the next whole second, a busy machine.
const FIRST_FIRE: Duration = Duration::from_secs(10);

fn schedule(test: &str, jobs: &str) -> String {
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot(test));
    schedule_text(&connect, "steer", SESSION, DELAY, jobs)
}

fn every_second(name: &str, fires: &Path) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\nshell = '{RECORD_FIRE}{}'\n",
        fires.display()
    )
}

/// `zkcron ARGS --config CONFIG`, whatever its exit.
fn zkcron(args: &[&str], config: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .expect("run zkcron")
}

#[track_caller]
fn assert_exit_saying(output: &Output, code: i32, says: &str) {
    let said = support::daemon::assert_exit(output, code);
    assert!(said.contains(says), "{says:?} in\n{said}");
}

/// The job's records as `history --json` prints them, newest first.
fn history(job: &str, config: &Path) -> Vec<serde_json::Value> {
    support::daemon::history_records(job, &["--limit", "100"], config)
}

#[tokio::test]
async fn a_paused_job_skips_its_ticks_with_the_reason_and_fires_again_once_resumed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let jobs = format!(
        "{}{}",
        every_second("tick", &fires),
        every_second("other", &dir.path().join("other.log"))
    );
    let node = DaemonNode::start(dir.path(), "n1", &schedule("steer-pause", &jobs));
    wait_for("a first fire", FIRST_FIRE, || {
        let fired = !read_fires(&fires).is_empty();
        async move { fired.then_some(()) }
    })
    .await;

    let paused = zkcron(
        &["pause", "tick", "--reason", "downstream broken"],
        &node.config,
    );
    assert_exit_saying(&paused, 0, "tick paused");
    assert_exit_saying(
        &zkcron(&["pause", "tick"], &node.config),
        0,
        "was paused already",
    );
    // The owner hears of it through its watch: the next tick after that is recorded skipped,
    // with who paused it and why.
    let skipped = wait_for("a skipped tick", Duration::from_secs(5), || {
        let found = history("tick", &node.config).into_iter().find(|r| {
            r["status"] == "skipped"
                && r["error"].as_str().is_some_and(|e| {
                    e.starts_with("paused by ") && e.ends_with(": downstream broken")
                })
        });
        async move { found }
    })
    .await;
    let skipped_ms = skipped["scheduled_unix_ms"].as_i64().expect("a tick");
    let status = zkcron(&["status"], &node.config);
    assert_exit_saying(&status, 0, "paused since");
    assert_exit_saying(&status, 0, "downstream broken");
    let json = zkcron(&["status", "--json"], &node.config);
    assert!(json.status.success(), "{json:?}");
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).expect("one JSON object");
    assert_eq!(report["format"], 2);
    assert_eq!(report["lock"]["state"], "held");
    assert_eq!(report["lock"]["owner"]["node_id"], "n1");
    let jobs = report["jobs"].as_array().expect("jobs");
    let tick = jobs.iter().find(|j| j["name"] == "tick").expect("tick");
    assert_eq!(tick["paused"]["reason"], "downstream broken");
    assert_eq!(
        tick["next_unix_ms"],
        serde_json::Value::Null,
        "paused: no next fire"
    );
    let other = jobs.iter().find(|j| j["name"] == "other").expect("other");
    assert_eq!(other["paused"], serde_json::Value::Null);
    assert!(other["next_unix_ms"].as_i64().is_some(), "{other}");
    assert_exit_saying(&zkcron(&["trigger", "tick"], &node.config), 2, "is paused");

    // Three more ticks pass paused: none fires, each is recorded skipped, `other` goes on.
    let until = skipped_ms + 3000;
    wait_for(
        "three paused ticks recorded",
        Duration::from_secs(6),
        || {
            let done = history("tick", &node.config)
                .iter()
                .any(|r| r["scheduled_unix_ms"].as_i64() >= Some(until));
            async move { done.then_some(()) }
        },
    )
    .await;
    assert!(
        read_fires(&fires)
            .iter()
            .all(|f| f.scheduled_ms < skipped_ms),
        "nothing of tick fired from its first skipped tick on"
    );
    let recorded = history("tick", &node.config);
    for tick in (skipped_ms..=until).step_by(1000) {
        let record = recorded
            .iter()
            .find(|r| r["scheduled_unix_ms"].as_i64() == Some(tick))
            .unwrap_or_else(|| panic!("tick {tick} recorded: {recorded:?}"));
        assert_eq!(record["status"], "skipped", "{record}");
    }
    // Skipped records go out at claim time, ahead of the tick; `other` fires at it.
    let other = dir.path().join("other.log");
    wait_for(
        "other fires the last paused tick",
        Duration::from_secs(3),
        || {
            let fired = read_fires(&other).iter().any(|f| f.scheduled_ms == until);
            async move { fired.then_some(()) }
        },
    )
    .await;

    let resumed_ms = now_ms();
    assert_exit_saying(
        &zkcron(&["resume", "tick"], &node.config),
        0,
        "tick resumed",
    );
    assert_exit_saying(
        &zkcron(&["resume", "tick"], &node.config),
        0,
        "was not paused",
    );
    wait_for("a fire after resume", Duration::from_secs(5), || {
        let fired = read_fires(&fires)
            .iter()
            .any(|f| f.scheduled_ms > resumed_ms);
        async move { fired.then_some(()) }
    })
    .await;
    let replayed: Vec<i64> = read_fires(&fires)
        .iter()
        .map(|f| f.scheduled_ms)
        .filter(|ms| (skipped_ms..=until).contains(ms))
        .collect();
    assert_eq!(
        replayed,
        Vec::<i64>::new(),
        "paused ticks are never replayed"
    );
    assert_exit_saying(&zkcron(&["pause", "nope"], &node.config), 2, "not declared");
}

#[tokio::test]
async fn a_trigger_runs_the_job_once_now_recorded_with_who_asked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("manual.log");
    let jobs = format!(
        "[[job]]\nname = \"report\"\nshell = 'echo \"$ZKCRON_REQUESTED_BY $ZKCRON_RUN_ID\" >> {}'\n",
        out.display()
    );
    let node = DaemonNode::start(dir.path(), "n1", &schedule("steer-trigger", &jobs));
    node.wait_log("owns the lock", FIRST_FIRE).await;
    let asked = now_ms();
    let triggered = zkcron(&["trigger", "report"], &node.config);
    assert_exit_saying(&triggered, 0, "triggered");
    let id = String::from_utf8_lossy(&triggered.stdout).trim().to_owned();
    let line = wait_for("the triggered run", Duration::from_secs(5), || {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        async move { (!text.is_empty()).then_some(text) }
    })
    .await;
    // The account of the uid the command ran as: never `$USER`.
    let who = format!(
        "{}@",
        nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map_or_else(
                || format!("uid {}", nix::unistd::getuid()),
                |user| user.name
            )
    );
    assert!(line.starts_with(&who), "ZKCRON_REQUESTED_BY: {line}");
    assert!(line.trim_end().ends_with(&format!("-{id}")), "{line}");
    let records = history("report", &node.config);
    assert_eq!(records.len(), 1, "once: {records:?}");
    let record = &records[0];
    assert_eq!(record["status"], "succeeded");
    assert!(
        record["requested_by"]
            .as_str()
            .is_some_and(|by| by.starts_with(&who)),
        "{record}"
    );
    assert!(
        record["started_unix_ms"].as_i64().expect("started") - asked < 2000,
        "run now: {record}"
    );
    assert_exit_saying(
        &zkcron(&["trigger", "nope"], &node.config),
        2,
        "not declared",
    );
}

#[tokio::test]
async fn a_release_hands_the_lock_to_a_peer_without_losing_or_repeating_a_tick() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let token = dir.path().join("http.token");
    std::fs::write(&token, "release-token\n").expect("token file");
    let jobs = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n\n{}",
        token.display(),
        every_second("tick", &fires)
    );
    let text = schedule("steer-release", &jobs);
    let n1 = DaemonNode::start(dir.path(), "n1", &text);
    wait_for("a first fire", FIRST_FIRE, || {
        let fired = !read_fires(&fires).is_empty();
        async move { fired.then_some(()) }
    })
    .await;
    assert_exit_saying(
        &zkcron(&["release"], &n1.config),
        2,
        "no other node is alive",
    );
    let n2 = DaemonNode::start(dir.path(), "n2", &text);
    n2.wait_log("zookeeper session established", FIRST_FIRE)
        .await;
    // The peer registers its member node just after its session.
    wait_for("n2 listed as a member", Duration::from_secs(5), || {
        let status = zkcron(&["status"], &n1.config);
        let listed = String::from_utf8_lossy(&status.stdout).contains("members:       2");
        async move { listed.then_some(()) }
    })
    .await;
    let released_ms = now_ms();
    let released = zkcron(&["release", "--json"], &n1.config);
    assert_exit_saying(&released, 0, "\"to\":\"n2\"");
    let said: serde_json::Value = serde_json::from_slice(&released.stdout).expect("JSON");
    assert_eq!(
        (&said["group"], &said["from"], &said["to"]),
        (
            &serde_json::json!("default"),
            &serde_json::json!("n1"),
            &serde_json::json!("n2")
        ),
        "{said}"
    );
    let after = wait_for("a fire by n2", Duration::from_secs(5), || {
        let fire = read_fires(&fires)
            .into_iter()
            .find(|f| f.node == "n2" && f.scheduled_ms > released_ms);
        async move { fire }
    })
    .await;
    // Every tick from before the release to n2's first fire fired exactly once.
    let window: Vec<i64> = read_fires(&fires)
        .iter()
        .map(|f| f.scheduled_ms)
        .filter(|ms| *ms > released_ms - 3000 && *ms <= after.scheduled_ms)
        .collect();
    let first = window.iter().min().copied().expect("fires in the window");
    let expected: Vec<i64> = (first..=after.scheduled_ms).step_by(1000).collect();
    let mut sorted = window.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted, expected,
        "no tick lost or repeated across the release"
    );
    n1.wait_log("asked to hand the lock over", Duration::from_secs(1))
        .await;

    // Through HTTP: only the owner's API releases; n2 hands the lock back to n1.
    let port = |node: &DaemonNode| logged_port(&node.log()).expect("a listener");
    let refused = request(
        port(&n1),
        "POST",
        "/v1/release",
        Some("release-token"),
        None,
    )
    .await;
    assert_eq!(refused.status, 409, "{refused:?}");
    let released = request(
        port(&n2),
        "POST",
        "/v1/release",
        Some("release-token"),
        None,
    )
    .await;
    assert_eq!(released.status, 200, "{released:?}");
    let answer = released.json();
    assert_eq!(
        (answer["from"].as_str(), answer["to"].as_str()),
        (Some("n2"), Some("n1"))
    );
    let back_ms = now_ms();
    wait_for("a fire by n1 again", Duration::from_secs(5), || {
        let fired = read_fires(&fires)
            .iter()
            .any(|f| f.node == "n1" && f.scheduled_ms > back_ms);
        async move { fired.then_some(()) }
    })
    .await;
    drop((n1, n2));
}

/// Each group's owner, as `status --json` shows it.
fn group_owner(config: &Path, group: &str) -> Option<String> {
    let output = zkcron(&["status", "--json"], config);
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    status["groups"]
        .as_array()?
        .iter()
        .find(|g| g["name"] == group)?["lock"]["owner"]["node_id"]
        .as_str()
        .map(str::to_owned)
}

/// Issue 19: `POST /v1/release?group=NAME` hands over that group only, and only on its owner's
/// API (as the default group's release); an undeclared group is a 404.
#[tokio::test]
async fn a_groups_release_through_http_is_its_owners_and_moves_that_group_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    let token = dir.path().join("http.token");
    std::fs::write(&token, "release-token\n").expect("token file");
    let jobs = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n\n[[group]]\nname = \"g\"\n\n{}group = \"g\"\n",
        token.display(),
        every_second("tick", &dir.path().join("fires.log"))
    );
    let text = schedule("steer-release-group", &jobs);
    let n1 = DaemonNode::start(dir.path(), "n1", &text);
    let owned_by = |group: &'static str, node: &'static str| {
        let config = n1.config.clone();
        move || {
            let owned = group_owner(&config, group).as_deref() == Some(node);
            async move { owned.then_some(()) }
        }
    };
    wait_for("n1 owning g", FIRST_FIRE, owned_by("g", "n1")).await;
    wait_for(
        "n1 owning the default group",
        FIRST_FIRE,
        owned_by("default", "n1"),
    )
    .await;
    let n2 = DaemonNode::start(dir.path(), "n2", &text);
    wait_for("n2 listed as a member", Duration::from_secs(10), || {
        let status = zkcron(&["status"], &n1.config);
        let listed = String::from_utf8_lossy(&status.stdout).contains("members:       2");
        async move { listed.then_some(()) }
    })
    .await;
    let port = |node: &DaemonNode| logged_port(&node.log()).expect("a listener");
    let release = |node: &DaemonNode, query: &str| {
        let path = format!("/v1/release{query}");
        let port = port(node);
        async move { request(port, "POST", &path, Some("release-token"), None).await }
    };
    let refused = release(&n2, "?group=g").await;
    assert_eq!(refused.status, 409, "{refused:?}");
    assert!(
        refused.json()["error"]
            .as_str()
            .is_some_and(|e| e.contains("is owned by n1")),
        "{refused:?}"
    );
    let unknown = release(&n1, "?group=nope").await;
    assert_eq!(unknown.status, 404, "{unknown:?}");
    let released = release(&n1, "?group=g").await;
    assert_eq!(released.status, 200, "{released:?}");
    let answer = released.json();
    assert_eq!(
        (answer["from"].as_str(), answer["to"].as_str()),
        (Some("n1"), Some("n2"))
    );
    assert_eq!(
        group_owner(&n1.config, "default").as_deref(),
        Some("n1"),
        "the default group stays"
    );
    drop((n1, n2));
}

/// Issue 51 §6: each `--json` prints one document with its `format`, and each example of
/// docs/API.md has the fields the command prints, so the documentation cannot drift from them.
#[tokio::test]
async fn every_json_document_is_what_docs_api_shows() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let jobs = format!(
        "{}[[job]]\nname = \"close-order\"\ncommand = [\"/bin/true\"]\n",
        every_second("tick", &fires)
    );
    let node = DaemonNode::start(dir.path(), "n1", &schedule("steer-json", &jobs));
    let ran = wait_for("a succeeded run", FIRST_FIRE, || {
        let found = history("tick", &node.config)
            .into_iter()
            .find(|record| record["status"] == "succeeded");
        async move { found }
    })
    .await;
    let tick = ran["scheduled_unix_ms"].as_i64().expect("a tick");
    for steer in [
        &["pause", "tick", "--reason", "downstream broken"][..],
        &["resume", "tick"],
        &[
            "submit",
            "close-order",
            "--in",
            "1h",
            "--id",
            "order-4711",
            "--payload",
            "x",
        ],
    ] {
        assert_exit(&zkcron(steer, &node.config), 0);
    }
    let broken = dir.path().join("broken.toml");
    std::fs::write(
        &broken,
        std::fs::read_to_string(&node.config)
            .expect("the schedule")
            .replace("schedule = ", "schedul = "),
    )
    .expect("write the broken schedule");
    let pid = node.pid().to_string();
    let rfc3339 = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .expect("a tick's instant")
            .to_rfc3339()
    };
    let (from, to) = (rfc3339(tick - 1000), rfc3339(tick));
    let printed: Vec<(&str, Output, &Path)> = vec![
        (
            "history --json",
            zkcron(&["history", "tick", "--json"], &node.config),
            &node.config,
        ),
        (
            "audit --json",
            zkcron(&["audit", "--json"], &node.config),
            &node.config,
        ),
        (
            "delayed list --json",
            zkcron(&["delayed", "list", "--json"], &node.config),
            &node.config,
        ),
        (
            "delayed show --json",
            zkcron(&["delayed", "show", "order-4711", "--json"], &node.config),
            &node.config,
        ),
        (
            "backfill --json",
            zkcron(
                &[
                    "backfill",
                    "tick",
                    "--from",
                    &from,
                    "--to",
                    &to,
                    "--dry-run",
                    "--json",
                ],
                &node.config,
            ),
            &node.config,
        ),
        (
            "reload --json",
            zkcron(&["reload", "--pid", &pid, "--json"], &node.config),
            &node.config,
        ),
        (
            "check --json",
            zkcron(&["check", "--json"], &broken),
            &broken,
        ),
    ];
    let examples = support::api_doc::examples();
    for (name, output, config) in &printed {
        let document: serde_json::Value =
            serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
                panic!(
                    "{name} on {}: one JSON document ({err}): {output:?}",
                    config.display()
                )
            });
        assert_eq!(document["format"], 1, "{name}: {document}");
        let example = examples
            .get(*name)
            .unwrap_or_else(|| panic!("docs/API.md has an example of {name}"));
        let differences = support::api_doc::differences(example, &document);
        assert!(
            differences.is_empty(),
            "{name}: {differences:#?}\nprinted: {document}"
        );
    }
    // The API adds `node` to what `status --json` prints.
    let mut status = examples
        .get("status --json")
        .cloned()
        .expect("an example of status");
    status.as_object_mut().map(|fields| fields.remove("node"));
    let report: serde_json::Value =
        serde_json::from_slice(&zkcron(&["status", "--json"], &node.config).stdout)
            .expect("status --json: one JSON document");
    let differences = support::api_doc::differences(&status, &report);
    assert!(
        differences.is_empty(),
        "status --json: {differences:#?}\nprinted: {report}"
    );
    // Each example was held against a command: none is left unchecked.
    let checked: std::collections::BTreeSet<&str> = printed
        .iter()
        .map(|(name, _, _)| *name)
        .chain(["status --json"])
        .collect();
    let unchecked: Vec<&String> = examples
        .keys()
        .filter(|name| !checked.contains(name.as_str()))
        .collect();
    assert!(
        unchecked.is_empty(),
        "examples no test holds: {unchecked:?}"
    );
}
