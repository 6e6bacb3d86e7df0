//! Failure notices and auto-pause (issue 20), end to end: real `zkcron run` processes, real
//! ZooKeeper, an `on_failure` command that writes each notice to a file, and a webhook on a real
//! local HTTP server (`support::receiver`).
//!
//! What the design promises, and what is checked here: a notice is sent by the node that stored
//! the final record, once, and never for a record not stored. An owner killed while the run is
//! going leaves no record of how it ended: the next owner records it `interrupted` and tells of
//! that, once.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::daemon::{
    DELAY, DaemonNode, RECORD_FIRE, SESSION, SLACK, logs_of, read_fires, schedule_text, zkcron_ok,
};
use support::receiver::{Receiver, Seen};
use support::zk_cluster::try_wait_for;
use support::{fault_lock, shared_ensemble, unique_chroot};

/// After the notices awaited came, how long a second one of the same outcome is given to show
/// up: a notice goes out within milliseconds of its record, so one sent twice would be here.
const NO_SECOND_WITHIN: Duration = Duration::from_secs(1);

/// The webhook's token, in the daemons' environment and in the commands' (which load the same
/// file, and refuse a `token_env` that is not set).
const TOKEN: (&str, &str) = ("ZKCRON_TEST_NOTICE_TOKEN", "s3cret");

/// Runs `zkcron ARGS --config CONFIG` with [`TOKEN`] set, asserts it succeeded, returns stdout.
fn zkcron_with_token(args: &[&str], config: &Path) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env(TOKEN.0, TOKEN.1)
        .output()
        .expect("run zkcron");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "zkcron {args:?}: {stderr}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// An `on_failure` command writing each notice (its stdin) to a file of its own in `dir`, whole
/// once it appears.
fn hook(dir: &Path) -> String {
    format!(
        "on_failure = [\"/bin/sh\", \"-c\", \"cat > {0}/.part-$$ && mv {0}/.part-$$ {0}/notice-$ZKCRON_RUN_ID-$ZKCRON_STATUS-$$.json\"]",
        dir.display()
    )
}

/// The notices the hook wrote, parsed.
fn notices(dir: &Path) -> Vec<serde_json::Value> {
    let mut found: Vec<serde_json::Value> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("notice-"))
                .map(|e| {
                    let text = std::fs::read_to_string(e.path()).expect("read a notice");
                    serde_json::from_str(&text).expect("a notice is one JSON document")
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort_by_key(|n| n["run_id"].as_str().map(str::to_owned));
    found
}

async fn wait_notices(
    dir: &Path,
    count: usize,
    within: Duration,
    nodes: &[&DaemonNode],
) -> Vec<serde_json::Value> {
    let found = try_wait_for(&format!("{count} notices"), within, || {
        let all = notices(dir);
        let done = (all.len() >= count).then_some(all);
        async move { done }
    })
    .await;
    found.unwrap_or_else(|not_reached| {
        panic!("{not_reached}: {:?}\n{}", notices(dir), logs_of(nodes))
    })
}

async fn wait_posts(receiver: &Receiver, count: usize, within: Duration) -> Vec<Seen> {
    try_wait_for(&format!("{count} webhook calls"), within, || {
        let seen = receiver.seen();
        let done = (seen.len() >= count).then_some(seen);
        async move { done }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}: {:?}", receiver.seen()))
}

#[tokio::test]
async fn each_failure_is_told_once_by_command_and_webhook_and_two_in_a_row_pause_the_job() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let receiver = Receiver::start().await;
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("notices"));
    let job = format!(
        "[[job]]\nname = \"fails\"\nshell = 'echo \"it broke: $ZKCRON_RUN_ID\"; echo oops >&2; exit 3'\n\
         {}\non_failure_webhook = {{ url = \"{}/unavailable-once\", token_env = \"ZKCRON_TEST_NOTICE_TOKEN\" }}\n\
         pause_after_failures = 2\n",
        hook(dir.path()),
        receiver.base
    );
    let text = schedule_text(&connect, "notices", SESSION, DELAY, &job);
    let token = [(TOKEN.0, Path::new(TOKEN.1))];
    let first = DaemonNode::start_with_env(dir.path(), "n1", &text, &token);
    first.wait_log("lock acquired", SESSION + SLACK).await;
    let second = DaemonNode::start_with_env(dir.path(), "n2", &text, &token);
    second
        .wait_log("zookeeper session established", SLACK)
        .await;
    let nodes = [&first, &second];

    zkcron_with_token(
        &["submit", "fails", "--in", "1s", "--id", "f-1"],
        &first.config,
    );
    let told = wait_notices(dir.path(), 1, SLACK * 2, &nodes).await;
    let notice = &told[0];
    assert_eq!(
        (
            notice["notice"].as_str(),
            notice["status"].as_str(),
            notice["exit_code"].as_i64(),
            notice["submission_id"].as_str(),
            notice["sent_by"].as_str(),
            notice["retries_left"].as_i64(),
            notice["consecutive_failures"].as_i64(),
        ),
        (
            Some("failure"),
            Some("failed"),
            Some(3),
            Some("f-1"),
            Some("n1"),
            Some(0),
            Some(1)
        ),
        "{notice}"
    );
    let run_id = notice["run_id"].as_str().expect("run id").to_owned();
    assert_eq!(
        notice["output"].as_str(),
        Some(format!("it broke: {run_id}\noops\n").as_str()),
        "the run's last output, stdout and stderr"
    );
    // The webhook answered 503 first: the same notice, tried again.
    let posts = wait_posts(&receiver, 2, SLACK * 2).await;
    for post in &posts {
        assert_eq!(post.method, "POST");
        assert_eq!(post.header("authorization"), "Bearer s3cret");
        assert_eq!(post.header("content-type"), "application/json");
        let body: serde_json::Value = serde_json::from_slice(&post.body).expect("JSON body");
        assert_eq!(body["run_id"].as_str(), Some(run_id.as_str()));
    }

    zkcron_with_token(
        &["submit", "fails", "--in", "1s", "--id", "f-2"],
        &first.config,
    );
    wait_notices(dir.path(), 2, SLACK * 2, &nodes).await;
    let config = first.config.clone();
    try_wait_for("the job pauses itself", SLACK, || {
        let status = zkcron_with_token(&["status"], &config);
        let done = status
            .contains("paused by zkcron: paused after 2 consecutive failures")
            .then_some(());
        async move { done }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", first.log_tail()));
    wait_posts(&receiver, 3, SLACK * 2).await;
    tokio::time::sleep(NO_SECOND_WITHIN).await;
    let told = notices(dir.path());
    assert_eq!(told.len(), 2, "one notice per failure: {told:?}");
    assert_eq!(told[1]["consecutive_failures"].as_i64(), Some(2));
    assert_eq!(
        receiver.seen().len(),
        3,
        "a webhook call per failure, and one retry"
    );

    // Paused: a submission waits; resumed, it runs (and fails: one notice more).
    zkcron_with_token(
        &["submit", "fails", "--in", "1s", "--id", "f-3"],
        &first.config,
    );
    zkcron_with_token(&["resume", "fails"], &first.config);
    let told = wait_notices(dir.path(), 3, SLACK * 2, &nodes).await;
    assert_eq!(
        told[2]["submission_id"].as_str(),
        Some("f-3"),
        "resumed: {told:?}"
    );
}

#[tokio::test]
async fn an_owner_killed_during_a_run_leaves_one_notice_of_the_interruption() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("notices-kill"));
    let job = format!(
        "[[job]]\nname = \"slow\"\nshell = '{RECORD_FIRE}{}; sleep 3; exit 1'\n{}\n",
        fires.display(),
        hook(dir.path())
    );
    let text = schedule_text(&connect, "notices-kill", SESSION, DELAY, &job);
    let mut first = DaemonNode::start(dir.path(), "k1", &text);
    first.wait_log("lock acquired", SESSION + SLACK).await;
    let second = DaemonNode::start(dir.path(), "k2", &text);
    second
        .wait_log("zookeeper session established", SLACK)
        .await;
    zkcron_ok(
        &["submit", "slow", "--in", "1s", "--id", "s-1"],
        &first.config,
    );
    try_wait_for("the run starts", SLACK * 2, || {
        let done = (!read_fires(&fires).is_empty()).then_some(());
        async move { done }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", first.log_tail()));
    // Between the run's start and its end (3 s later): nobody will know how it ended.
    first.kill();

    let told = wait_notices(dir.path(), 1, SESSION + DELAY + SLACK * 2, &[&second]).await;
    tokio::time::sleep(NO_SECOND_WITHIN).await;
    let told_now = notices(dir.path());
    assert_eq!(told_now.len(), 1, "exactly one notice: {told_now:?}");
    assert_eq!(
        (
            told[0]["status"].as_str(),
            told[0]["sent_by"].as_str(),
            told[0]["node"].as_str(),
            told[0]["submission_id"].as_str(),
        ),
        (Some("interrupted"), Some("k2"), Some("k1"), Some("s-1")),
        "the next owner tells of the interruption: {}",
        told[0]
    );
}
