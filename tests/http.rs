//! The node's HTTP listener end to end (issue "Operate it"): a real `zkcron run` with `[http]`,
//! real requests over loopback, the ledger and the jobs' own output as the proof.

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::daemon::{DaemonNode, RECORD_FIRE, read_fires, schedule_text, zkcron_ok};
use support::http::{Reply, logged_port, request};
use support::{shared_ensemble, unique_chroot, wait_for};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(3);
const FIRST_FIRE: Duration = Duration::from_secs(10);
const TOKEN: &str = "t0ken-for-tests";

/// A node with a 1 Hz job `tick`, an on-demand job `report`, and `[http]` on a free port with
/// the token in a file; returns it with its port.
async fn node_with_http(dir: &Path, test: &str) -> (DaemonNode, u16) {
    node_with_http_after(dir, test, |_| {}).await
}

/// Like [`node_with_http`], running `before` on the node's schedule file before it starts.
async fn node_with_http_after(
    dir: &Path,
    test: &str,
    before: impl FnOnce(&Path),
) -> (DaemonNode, u16) {
    let token = dir.join("http.token");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("token file");
    let fires = dir.join("fires.log");
    let jobs = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n\n\
         [[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nshell = '{RECORD_FIRE}{}'\n\n\
         [[job]]\nname = \"report\"\nshell = 'cat > {}/report-$ZKCRON_SUBMISSION_ID.out'\n",
        token.display(),
        fires.display(),
        dir.display()
    );
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot(test));
    let text = schedule_text(&connect, "http", SESSION, DELAY, &jobs);
    let early = dir.join("before.toml");
    std::fs::write(&early, &text).expect("schedule file");
    before(&early);
    let node = DaemonNode::start(dir, "n1", &text);
    node.wait_log("http listener up", FIRST_FIRE).await;
    let port = logged_port(&node.log()).expect("the listener's port in the log");
    (node, port)
}

#[track_caller]
fn assert_status(reply: &Reply, status: u16) {
    assert_eq!(reply.status, status, "{reply:?}");
}

#[tokio::test]
async fn reads_are_open_and_show_the_node_as_owner_with_its_lease_and_its_fires_counted() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Two submissions wait: the new owner counts them at once.
    let (node, port) = node_with_http_after(dir.path(), "http-read", |config| {
        for _ in 0..2 {
            zkcron_ok(&["submit", "report", "--in", "1h"], config);
        }
    })
    .await;
    assert_status(&request(port, "GET", "/healthz", None, None).await, 200);
    let fires = dir.path().join("fires.log");
    wait_for("two fires", FIRST_FIRE, || {
        let fired = read_fires(&fires).len() >= 2;
        async move { fired.then_some(()) }
    })
    .await;
    assert_status(&request(port, "GET", "/readyz", None, None).await, 200);

    let metrics = request(port, "GET", "/metrics", None, None).await;
    assert_status(&metrics, 200);
    assert!(
        metrics
            .headers
            .contains("content-type: application/openmetrics-text"),
        "{metrics:?}"
    );
    for line in [
        "zkcron_lock_owner 1",
        "zkcron_zk_session_state 1",
        "zkcron_lock_acquisitions_total 1",
        "# HELP zkcron_job_fire_lateness_seconds",
        "zkcron_delayed_pending 2",
    ] {
        assert!(metrics.body.contains(line), "{line:?} in\n{}", metrics.body);
    }
    // Every fire the job logged is counted by the lateness histogram (and more may come).
    let counted = |body: &str| -> u64 {
        body.lines()
            .find_map(|l| l.strip_prefix("zkcron_job_fire_lateness_seconds_count{job=\"tick\"} "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    let logged = read_fires(&fires).len() as u64;
    let again = request(port, "GET", "/metrics", None, None).await;
    assert!(
        counted(&again.body) >= logged,
        "{logged} fires in\n{}",
        again.body
    );

    let status = request(port, "GET", "/v1/status", None, None).await;
    assert_status(&status, 200);
    let status = status.json();
    assert_eq!(status["node"]["node_id"], "n1");
    assert_eq!(status["node"]["owner"], true);
    let heard = status["node"]["last_heard_unix_ms"]
        .as_i64()
        .expect("heard");
    let lease = status["node"]["lease_until_unix_ms"]
        .as_i64()
        .expect("a lease");
    assert_eq!(
        lease - heard,
        status["node"]["session_timeout_ms"]
            .as_i64()
            .expect("timeout")
    );
    assert_eq!(status["lock"]["owner"]["node_id"], "n1");
    assert_eq!(status["format"], 2);

    let runs = request(port, "GET", "/v1/jobs/tick/runs?limit=2", None, None).await;
    assert_status(&runs, 200);
    let runs = runs.json();
    assert_eq!(runs.as_array().map(Vec::len), Some(2), "{runs}");
    assert_eq!(runs[0]["job"], "tick");
    drop(node);
}

#[tokio::test]
async fn writes_need_the_token_and_go_through_zookeeper_like_the_cli() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (node, port) = node_with_http(dir.path(), "http-write").await;
    node.wait_log("owns the lock", FIRST_FIRE).await;

    let anonymous = request(port, "POST", "/v1/jobs/report/trigger", None, None).await;
    assert_status(&anonymous, 401);
    assert!(
        anonymous.headers.contains("www-authenticate: bearer"),
        "{anonymous:?}"
    );
    assert!(anonymous.json()["error"].as_str().is_some());
    let wrong = request(port, "POST", "/v1/jobs/report/trigger", Some("nope"), None).await;
    assert_status(&wrong, 401);
    assert_status(
        &request(port, "POST", "/v1/jobs/nope/trigger", Some(TOKEN), None).await,
        404,
    );

    let triggered = request(port, "POST", "/v1/jobs/report/trigger", Some(TOKEN), None).await;
    assert_status(&triggered, 202);
    let id = triggered.json()["submission_id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let out = dir.path().join(format!("report-{id}.out"));
    wait_for("the triggered run", Duration::from_secs(5), || {
        let ran = out.exists();
        async move { ran.then_some(()) }
    })
    .await;

    let body = r#"{"in": "1s", "id": "order-7", "payload": "{\"order\": 7}"}"#;
    let submitted = request(
        port,
        "POST",
        "/v1/jobs/report/submissions",
        Some(TOKEN),
        Some(body),
    )
    .await;
    assert_status(&submitted, 201);
    assert_eq!(submitted.json()["submission_id"], "order-7");
    let out = dir.path().join("report-order-7.out");
    let payload = wait_for("the submission's run", Duration::from_secs(5), || {
        let text = std::fs::read_to_string(&out).ok().filter(|t| !t.is_empty());
        async move { text }
    })
    .await;
    assert_eq!(payload, "{\"order\": 7}");
    let bad = request(
        port,
        "POST",
        "/v1/jobs/report/submissions",
        Some(TOKEN),
        Some(r#"{"in": "soon"}"#),
    )
    .await;
    assert_status(&bad, 400);
    assert_status(
        &request(port, "DELETE", "/v1/submissions/order-7", Some(TOKEN), None).await,
        409,
    );
    // Issue 20: a pending submission moved; a finished one neither moved nor retried.
    let later = r#"{"in": "1h", "id": "order-8", "payload": "eight"}"#;
    let submitted = request(
        port,
        "POST",
        "/v1/jobs/report/submissions",
        Some(TOKEN),
        Some(later),
    );
    assert_status(&submitted.await, 201);
    let moved = request(
        port,
        "POST",
        "/v1/submissions/order-8/reschedule",
        Some(TOKEN),
        Some(r#"{"in": "1s"}"#),
    )
    .await;
    assert_status(&moved, 200);
    assert_eq!(moved.json()["moved"], true);
    let out = dir.path().join("report-order-8.out");
    let payload = wait_for("the moved submission's run", Duration::from_secs(5), || {
        let text = std::fs::read_to_string(&out).ok().filter(|t| !t.is_empty());
        async move { text }
    })
    .await;
    assert_eq!(payload, "eight");
    for (path, body) in [
        (
            "/v1/submissions/order-7/reschedule",
            Some(r#"{"in": "1h"}"#),
        ),
        ("/v1/submissions/order-7/retry", None),
    ] {
        let refused = request(port, "POST", path, Some(TOKEN), body).await;
        assert_status(&refused, 409);
    }
    let failed = request(
        port,
        "GET",
        "/v1/submissions?state=failed",
        Some(TOKEN),
        None,
    )
    .await;
    assert_status(&failed, 200);
    assert!(failed.json().as_array().is_some(), "{failed:?}");
    assert_status(
        &request(
            port,
            "GET",
            "/v1/submissions?state=waiting",
            Some(TOKEN),
            None,
        )
        .await,
        400,
    );
    assert_status(
        &request(
            port,
            "DELETE",
            "/v1/submissions/never-made",
            Some(TOKEN),
            None,
        )
        .await,
        404,
    );

    let paused = request(
        port,
        "POST",
        "/v1/jobs/tick/pause",
        Some(TOKEN),
        Some(r#"{"reason": "from http"}"#),
    )
    .await;
    assert_status(&paused, 200);
    let status = request(port, "GET", "/v1/status", None, None).await.json();
    let tick = status["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|j| j["name"] == "tick").cloned())
        .expect("tick");
    assert_eq!(tick["paused"]["reason"], "from http");
    assert!(
        tick["paused"]["by"]
            .as_str()
            .is_some_and(|by| by.starts_with("http:127.0.0.1")),
        "{tick}"
    );
    assert_status(
        &request(port, "POST", "/v1/jobs/report/trigger", Some(TOKEN), None).await,
        202,
    );
    assert_status(
        &request(port, "POST", "/v1/jobs/tick/trigger", Some(TOKEN), None).await,
        409,
    );
    assert_status(
        &request(port, "POST", "/v1/jobs/tick/resume", Some(TOKEN), None).await,
        200,
    );
    // A lone node: no peer to hand the lock to.
    let release = request(port, "POST", "/v1/release", Some(TOKEN), None).await;
    assert_status(&release, 409);
    assert!(
        release.json()["error"]
            .as_str()
            .is_some_and(|e| e.contains("no other node")),
        "{release:?}"
    );
    drop(node);
}

/// Issue 24: several named tokens, stored hashed (`zkcron http-token`): a write token steers and
/// is recorded as who asked; a read-only one reads `/v1/` but writes nothing; without a token
/// `/v1/` is closed while `/metrics` and the health checks stay open.
#[tokio::test]
async fn named_tokens_read_or_write_and_the_writer_is_recorded_by_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let made = |name: &str, read_only: bool| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"));
        command.args(["http-token", name]);
        if read_only {
            command.arg("--read-only");
        }
        let output = command.output().expect("zkcron http-token");
        let text = String::from_utf8(output.stdout).expect("utf-8");
        let mut lines = text.lines().map(str::to_owned);
        let token = lines.next().expect("the token");
        let line = lines.next().expect("the tokens file line");
        assert!(
            !line.contains(&token),
            "the file holds a hash, not the token: {line}"
        );
        (token, line)
    };
    let (ops, ops_line) = made("ops", false);
    let (dash, dash_line) = made("dashboard", true);
    let tokens = dir.path().join("http.tokens");
    std::fs::write(
        &tokens,
        format!("# who may use the API\n{ops_line}\n{dash_line}\n"),
    )
    .expect("tokens file");
    let jobs = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\ntokens_file = \"{}\"\n\n\
         [[job]]\nname = \"report\"\nshell = 'true'\n",
        tokens.display()
    );
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("http-tokens"));
    let node = DaemonNode::start(
        dir.path(),
        "n1",
        &schedule_text(&connect, "http", SESSION, DELAY, &jobs),
    );
    node.wait_log("http listener up", FIRST_FIRE).await;
    let port = logged_port(&node.log()).expect("the listener's port in the log");
    node.wait_log("lock acquired", FIRST_FIRE).await;

    assert_status(&request(port, "GET", "/metrics", None, None).await, 200);
    assert_status(&request(port, "GET", "/v1/status", None, None).await, 401);
    assert_status(
        &request(port, "GET", "/v1/status", Some("not-a-token"), None).await,
        401,
    );
    assert_status(
        &request(port, "GET", "/v1/status", Some(&dash), None).await,
        200,
    );
    let refused = request(port, "POST", "/v1/jobs/report/trigger", Some(&dash), None).await;
    assert_status(&refused, 403);
    assert!(refused.body.contains("read-only"), "{refused:?}");

    let triggered = request(port, "POST", "/v1/jobs/report/trigger", Some(&ops), None).await;
    assert_status(&triggered, 202);
    let recorded = wait_for("the triggered run's record", FIRST_FIRE, || {
        let history = zkcron_ok(&["history", "report", "--json"], &node.config);
        let found = history.contains("\"requested_by\"").then_some(history);
        async move { found }
    })
    .await;
    assert!(
        recorded.contains("\"requested_by\":\"token:ops from 127.0.0.1\""),
        "who asked is the token's name and its peer: {recorded}"
    );
}
