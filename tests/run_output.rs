//! A run's whole output (issue 52), end to end: real `zkcron run` nodes keep their runs' output
//! under systemd's state directory; `zkcron logs` fetches it from the node that ran it over its
//! HTTP API, follows a run still going, and, when that node is gone, says so and shows the tail
//! the record keeps. Another member passes the output on (the console's path).
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::AsyncBufReadExt;

use support::daemon::{DaemonNode, assert_exit, history_records, schedule_text, zkcron, zkcron_ok};
use support::http::{logged_port, request};
use support::{shared_ensemble, try_wait_for, unique_chroot};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(2);
/// Process start, a JVM pause or a busy core, on bounds that are otherwise exact.
const SLACK: Duration = Duration::from_secs(5);
const TOKEN: &str = "logs-test-token";
/// Lines of 64 characters and a newline: 16384 of them are a little over 1 MiB.
const BIG_LINES: usize = 16_384;

/// `zkcron logs ARGS` as an operator runs it, with the token in `ZKCRON_HTTP_TOKEN`.
fn logs(args: &[&str], config: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .arg("logs")
        .args(args)
        .arg("--config")
        .arg(config)
        .env("ZKCRON_HTTP_TOKEN", TOKEN)
        .output()
        .expect("run zkcron logs")
}

/// Waits for `job`'s newest record to have `status`; returns it.
async fn record_with(
    job: &str,
    status: &str,
    config: &Path,
    node: &DaemonNode,
) -> serde_json::Value {
    try_wait_for(&format!("{job} {status}"), SLACK * 3, || {
        let newest = history_records(job, &[], config).into_iter().next();
        let found = newest.filter(|record| record["status"] == status);
        async move { found }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", node.log_tail()))
}

/// n1 owns and runs the jobs; the CLI asks n1's API for a megabyte of output, follows a run that
/// prints for 5 s, asks n2 to pass n1's output on, and once n1 is gone gets the record's tail.
#[tokio::test]
async fn logs_fetches_a_runs_whole_output_from_the_node_that_ran_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("logs"));
    let jobs = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\ntoken_env = \"ZKCRON_LOGS_TOKEN\"\n\n\
         [[job]]\nname = \"big\"\nkeep_output = \"always\"\n\
         shell = \"awk 'BEGIN {{ for (i = 0; i < {BIG_LINES}; i++) printf \\\"%05d %058d\\\\n\\\", i, 0 }}'; echo done >&2\"\n\n\
         [[job]]\nname = \"slow\"\n\
         shell = \"for i in 1 2 3 4 5 6 7 8 9 10; do echo tick $i; sleep 0.5; done\"\n"
    );
    let text = schedule_text(&connect, "logs", SESSION, DELAY, &jobs);
    let state = |node: &str| dir.path().join(format!("state-{node}"));
    let token = Path::new(TOKEN);
    let mut n1 = DaemonNode::start_with_env(
        dir.path(),
        "n1",
        &text,
        &[
            ("STATE_DIRECTORY", &state("n1")),
            ("ZKCRON_LOGS_TOKEN", token),
        ],
    );
    n1.wait_log("lock acquired", SESSION + SLACK).await;
    let n2 = DaemonNode::start_with_env(
        dir.path(),
        "n2",
        &text,
        &[
            ("STATE_DIRECTORY", &state("n2")),
            ("ZKCRON_LOGS_TOKEN", token),
        ],
    );
    n2.wait_log("http listener up", SLACK).await;
    n2.wait_log("runs' whole output kept here", SLACK).await;

    // A megabyte, from the node that ran it, to a client that is not that node.
    zkcron_ok(&["trigger", "big"], &n2.config);
    let record = record_with("big", "succeeded", &n2.config, &n1).await;
    assert_eq!(record["node_id"], "n1");
    let output = logs(&["big"], &n2.config);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(
        lines.len(),
        BIG_LINES + 2,
        "every line, stderr's, and the end"
    );
    for (n, line) in lines[..BIG_LINES].iter().enumerate() {
        let (stamp, rest) = line.split_once(' ').expect("a stamped line");
        assert!(stamp.ends_with('Z') && stamp.len() == 24, "{line}");
        assert_eq!(rest, format!("stdout {n:05} {:058}", 0));
    }
    assert!(
        lines[BIG_LINES].ends_with(" stderr done"),
        "{}",
        lines[BIG_LINES]
    );
    assert!(lines[BIG_LINES + 1].ends_with(" zkcron ended: exited with code 0"));
    assert!(said.len() > 1 << 20, "{} bytes", said.len());
    // Kept on n1's disk alone, under systemd's state directory.
    assert!(state("n1").join("output").join("big").is_dir());
    assert!(!state("n2").join("output").join("big").exists());

    let json = logs(&["big", "--json"], &n2.config);
    let first: serde_json::Value =
        serde_json::from_slice(json.stdout.split(|&b| b == b'\n').next().expect("a line"))
            .expect("a JSON line");
    assert_eq!(first["stream"], "stdout");
    assert_eq!(first["line"], format!("00000 {:058}", 0));

    // The output takes the token; n2 passes n1's on, as the console asks it to.
    let port = logged_port(&n2.log()).expect("n2's port");
    let run_id = record["run_id"].as_str().expect("a run id");
    let path = format!("/v1/jobs/big/runs/{run_id}/output?node=n1");
    assert_eq!(request(port, "GET", &path, None, None).await.status, 401);
    let passed = request(port, "GET", &path, Some(TOKEN), None).await;
    assert_eq!(passed.status, 200, "{passed:?}");
    assert!(passed.body.contains(&format!("stdout 16383 {:058}", 0)));
    let here = request(
        port,
        "GET",
        &format!("/v1/jobs/big/runs/{run_id}/output"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(here.status, 404, "n2 did not run it: {here:?}");
    assert!(here.body.contains("is kept on node n2"), "{}", here.body);

    // -f prints a run's lines as they come, and ends with the run.
    zkcron_ok(&["trigger", "slow"], &n2.config);
    record_with("slow", "running", &n2.config, &n1).await;
    let mut follow = tokio::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["logs", "slow", "-f", "--config"])
        .arg(&n2.config)
        .env("ZKCRON_HTTP_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("zkcron logs -f");
    let stdout = follow.stdout.take().expect("its stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    let started = Instant::now();
    while let Some(line) = tokio::time::timeout(SLACK * 3, lines.next_line())
        .await
        .expect("a line within the bound")
        .expect("read a line")
    {
        seen.push((started.elapsed(), line));
    }
    let status = follow.wait().await.expect("logs -f exits");
    assert!(status.success(), "{seen:?}");
    let ticks: Vec<&str> = seen
        .iter()
        .filter_map(|(_, line)| line.split_once(" stdout ").map(|(_, text)| text))
        .collect();
    let expected: Vec<String> = (1..=10).map(|i| format!("tick {i}")).collect();
    assert_eq!(ticks, expected, "{seen:?}");
    let ended = seen.last().expect("an end line");
    assert!(
        ended.1.ends_with("zkcron ended: exited with code 0"),
        "{ended:?}"
    );
    // Followed, not fetched at the end: its first line came seconds before its last.
    let first_tick = seen
        .iter()
        .find(|(_, line)| line.ends_with("tick 1"))
        .expect("tick 1");
    assert!(
        ended.0 - first_tick.0 >= Duration::from_secs(2),
        "lines came as printed: {seen:?}"
    );

    // n1 gone: said, with the tail its record keeps.
    n1.kill();
    let gone = try_wait_for("n1 no longer a member", SESSION * 2 + SLACK, || {
        let output = logs(&["big"], &n2.config);
        // Until its session expires, n1 is a member that does not answer: said so too.
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(said.contains("node n1"), "{said}");
        let done = said.contains("not a live member").then_some(output);
        async move { done }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", n2.log_tail()));
    let said = assert_exit(&gone, 1);
    assert!(
        said.contains("node n1, which ran it, is not a live member"),
        "{said}"
    );
    assert!(
        said.contains(&format!("16383 {:058}", 0)),
        "the record's tail: {said}"
    );
    assert!(said.contains("done"), "{said}");

    // Asked for a run that is not there: refused.
    let refused = zkcron(&["logs", "big", "no-such-run"], &n2.config);
    let said = assert_exit(&refused, 2);
    assert!(said.contains("has no run no-such-run"), "{said}");
}
