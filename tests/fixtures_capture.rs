//! Captures the documents a build of zkcron stores in ZooKeeper, as fixtures for
//! `tests/stored_formats.rs` (issue 34). Not a test of its own (ignored): `scripts/capture-fixtures
//! REF` builds REF and runs it against this, writing `tests/fixtures/<name>/`.
//!
//! It runs that build's CLI and one `zkcron run` node against a real ZooKeeper: a pause, a
//! backfill request and submissions written before any owner (a backfill request is taken within
//! milliseconds of an owner seeing it), then ticks that succeed, fail and promise a retry, a
//! forbid run holding its guard, submissions run and remembered; last, a release request, made
//! while a second member and the owner are both stopped (SIGSTOP) for a moment, since an owner
//! takes one within milliseconds. Every znode with data under the lock is then read, and the first
//! of each kind is written as `<kind>.<ext>`.
//!
//! Environment: `ZKCRON_CAPTURE_OUT` (the directory to write), `ZKCRON_CAPTURE_BINARY` (the build
//! to run; this one by default).

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use support::daemon::DaemonNode;
use support::zk_cluster::{ZkEnsemble, try_wait_for};
use zookeeper_client::Client;

const LOCK: &str = "capture";

#[tokio::test]
#[ignore = "a tool: scripts/capture-fixtures runs it"]
async fn capture_fixtures() {
    let out = PathBuf::from(std::env::var_os("ZKCRON_CAPTURE_OUT").expect("ZKCRON_CAPTURE_OUT"));
    let binary = std::env::var_os("ZKCRON_CAPTURE_BINARY").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_zkcron")),
        PathBuf::from,
    );
    let ensemble = ZkEnsemble::start(1).expect("zookeeper");
    let connect = ensemble.connect_string();
    let dir = tempfile::tempdir().expect("temp dir");
    let schedule = format!(
        "[zookeeper]\nconnect = \"{connect}\"\nsession_timeout = \"4s\"\n\n\
         [lock]\nname = \"{LOCK}\"\ntakeover_delay = \"1s\"\n\n\
         [[job]]\nname = \"every-second\"\nschedule = \"* * * * * *\"\ncommand = [\"/bin/true\"]\n\n\
         [[job]]\nname = \"flaky\"\nschedule = \"*/2 * * * * *\"\ncommand = [\"/bin/false\"]\n\
         retries = 1\nretry_backoff = \"1h\"\n\n\
         [[job]]\nname = \"long\"\nschedule = \"*/3 * * * * *\"\nshell = \"sleep 60\"\n\
         concurrency = \"forbid\"\n\n\
         [[job]]\nname = \"quiet\"\nschedule = \"0 0 0 1 1 *\"\ncommand = [\"/bin/true\"]\n\n\
         [[job]]\nname = \"deliver\"\ncommand = [\"/bin/cat\"]\nhistory = 1\n"
    );
    let config = dir.path().join("cli.toml");
    // Where the build knows [[limit]] (0.1.0 does not), the forbid job holds a lease too.
    let limited = schedule.replace(
        "concurrency = \"forbid\"\n",
        "concurrency = \"forbid\"\nlimits = [\"db\"]\n",
    ) + "\n[[limit]]\nname = \"db\"\nmax = 1\n";
    std::fs::write(&config, &limited).expect("schedule");
    let knows_limits = Command::new(&binary)
        .arg("check")
        .arg(&config)
        .output()
        .is_ok_and(|out| out.status.success());
    let schedule = if knows_limits { limited } else { schedule };
    std::fs::write(&config, &schedule).expect("schedule");

    // Before any owner: what an owner would take at once.
    let cli = |args: &[&str]| {
        let output = Command::new(&binary)
            .args(args)
            .arg("--config")
            .arg(&config)
            .output()
            .expect("run the zkcron CLI");
        eprintln!(
            "zkcron {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output.status.success()
    };
    assert!(cli(&["pause", "quiet", "--reason", "fixture"]), "pause");
    let hour_ago = chrono::Utc::now() - chrono::Duration::hours(1);
    let from = hour_ago.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    // Only builds that have it (0.1.0 has no backfill).
    cli(&[
        "backfill",
        "every-second",
        "--from",
        &from,
        "--to",
        &from,
        "--include-pruned",
    ]);
    assert!(cli(&["trigger", "every-second"]), "trigger");
    let mut captured = BTreeMap::new();
    capture(&connect, &mut captured).await;

    let mut node = DaemonNode::start_binary(&binary, dir.path(), "capture-1", &schedule);
    for (id, payload) in [("first", "hello"), ("second", "again")] {
        assert!(
            cli(&[
                "submit",
                "deliver",
                "--in",
                "0s",
                "--id",
                id,
                "--payload",
                payload
            ]),
            "submit {id}"
        );
    }
    assert!(
        cli(&[
            "submit",
            "deliver",
            "--in",
            "1h",
            "--id",
            "later",
            "--payload",
            "p"
        ]),
        "submit later"
    );
    let client = Client::connect(&connect).await.expect("zookeeper session");
    // The flaky job's failure promising its retry, and the long job's guard: both events an owner
    // makes within seconds of starting.
    let seen = try_wait_for(
        "a promised retry and a forbid run's guard",
        Duration::from_secs(30),
        || {
            let client = client.clone();
            async move {
                let retries = children(&client, &format!("/zkcron/{LOCK}/retries/flaky")).await;
                let guard = client
                    .check_stat(&format!("/zkcron/{LOCK}/running/long"))
                    .await
                    .ok()
                    .flatten();
                let leases = children(&client, &format!("/zkcron/{LOCK}/limits/db")).await;
                let leased = !knows_limits || !leases.is_empty();
                (!retries.is_empty() && guard.is_some() && leased).then_some(())
            }
        },
    )
    .await;
    if seen.is_err() {
        eprintln!(
            "no promised retry or no guard within 30 s:\n{}",
            node.log_tail()
        );
    }
    capture(&connect, &mut captured).await;
    let stores = Stores {
        connect: &connect,
        client: &client,
    };
    capture_release_request(
        &binary,
        &config,
        dir.path(),
        &schedule,
        &node,
        stores,
        &mut captured,
    )
    .await;
    node.kill();

    std::fs::create_dir_all(&out).expect("fixture dir");
    for (kind, data) in &captured {
        std::fs::write(out.join(kind), data).expect("write fixture");
    }
    let written: Vec<&String> = captured.keys().collect();
    eprintln!("captured into {}: {written:?}", out.display());
    assert!(
        captured.keys().any(|kind| kind.starts_with("run-record")),
        "{written:?}"
    );
}

/// The ensemble the documents are read from.
#[derive(Clone, Copy)]
struct Stores<'a> {
    connect: &'a str,
    client: &'a Client,
}

/// Starts a second member, stops both members for a moment (well inside the session timeout)
/// and makes a release request with `binary`'s CLI meanwhile, so that it is there to be read.
async fn capture_release_request(
    binary: &Path,
    config: &Path,
    dir: &Path,
    schedule: &str,
    owner: &DaemonNode,
    Stores { connect, client }: Stores<'_>,
    captured: &mut BTreeMap<String, Vec<u8>>,
) {
    let mut peer = DaemonNode::start_binary(binary, dir, "capture-2", schedule);
    let members = format!("/zkcron/{LOCK}/members");
    let two = try_wait_for("a second member", Duration::from_secs(30), || async {
        (children(client, &members).await.len() >= 2).then_some(())
    })
    .await;
    if two.is_err() {
        eprintln!("no second member within 30 s:\n{}", peer.log_tail());
        peer.kill();
        return;
    }
    owner.signal(Signal::SIGSTOP);
    peer.signal(Signal::SIGSTOP);
    let release = Command::new(binary)
        .args(["release", "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let request = format!("/zkcron/{LOCK}/control/release");
    // Bounded by the session timeout (4 s): the stopped members must not lose their sessions.
    let made = try_wait_for("a release request", Duration::from_secs(3), || async {
        client.check_stat(&request).await.ok().flatten().map(|_| ())
    })
    .await;
    match made {
        Ok(()) => capture(connect, captured).await,
        Err(_) => eprintln!("no release request within 3 s"),
    }
    owner.signal(Signal::SIGCONT);
    peer.signal(Signal::SIGCONT);
    if let Ok(mut release) = release {
        let _ = release.wait();
    }
    peer.kill();
}

/// Reads every znode with data under the lock and keeps the first of each kind not kept yet.
async fn capture(connect: &str, captured: &mut BTreeMap<String, Vec<u8>>) {
    let client = Client::connect(connect).await.expect("zookeeper session");
    let root = format!("/zkcron/{LOCK}");
    let mut todo = vec![root.clone()];
    while let Some(path) = todo.pop() {
        for child in children(&client, &path).await {
            todo.push(format!("{path}/{child}"));
        }
        let Ok((data, _)) = client.get_data(&path).await else {
            continue;
        };
        let relative = path.strip_prefix(&root).unwrap_or(&path);
        if data.is_empty() {
            continue;
        }
        if let Some(kind) = kind_of(relative, &data) {
            captured.entry(kind).or_insert(data);
        }
    }
}

async fn children(client: &Client, path: &str) -> Vec<String> {
    let mut names = client.list_children(path).await.unwrap_or_default();
    names.sort();
    names
}

/// The fixture's file name for a document at `relative` (under the lock) holding `data`.
fn kind_of(relative: &str, data: &[u8]) -> Option<String> {
    let parts: Vec<&str> = relative.trim_start_matches('/').split('/').collect();
    let json = || serde_json::from_slice::<serde_json::Value>(data).ok();
    Some(match parts.as_slice() {
        ["runs", _, name] => {
            let record = json()?;
            let status = record["status"].as_str()?.replace('_', "-");
            let of = if name.contains('-') {
                "submission"
            } else {
                "tick"
            };
            let retry = if record["retry_at_unix_ms"].is_i64() {
                "-retry"
            } else {
                ""
            };
            format!("run-record-{of}-{status}{retry}.json")
        }
        ["delayed", "ids", _, _] => {
            let header = data.split(|b| *b == b'\n').next()?;
            let header: serde_json::Value = serde_json::from_slice(header).ok()?;
            if header.get("payload_sha256").is_some() {
                "submission-tombstone.bin".to_owned()
            } else if header.get("requested_by").is_some() {
                "submission-triggered.bin".to_owned()
            } else {
                "submission.bin".to_owned()
            }
        }
        ["delayed", "forget", ..] => "forget-list.txt".to_owned(),
        ["members", _] => "member.json".to_owned(),
        ["lock"] => "lock.json".to_owned(),
        ["epoch"] => "epoch.json".to_owned(),
        ["running", _] => "guard.txt".to_owned(),
        ["limits", _, _] => "lease.json".to_owned(),
        ["control", "paused", _] => "pause.json".to_owned(),
        ["control", "release"] => "release-request.json".to_owned(),
        ["control", "backfill", _] => "backfill-request.json".to_owned(),
        ["audit", _, _] => "audit-entry.json".to_owned(),
        _ => {
            eprintln!("not a known document: {relative}");
            return None;
        }
    })
}
