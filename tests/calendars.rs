//! Calendars (`[[calendar]]`, `except`, `only`, issue 36) on real daemons and a real
//! ZooKeeper: a job whose calendar excludes today never runs and its run of skipped ticks is one
//! record naming the calendar, which the next owner after a kill -9 does not record again; a
//! job kept to today runs; `check --explain` marks the skipped fires; `status --json`,
//! `check --json` and `/v1/status` never name a skipped tick as the next fire (issue 50).
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::daemon::{DaemonNode, RECORD_FIRE, logs_of, read_fires, schedule_text, zkcron_ok};
use support::http::{logged_port, request};
use support::zk_cluster::try_wait_for;
use support::{fault_lock, shared_ensemble, unique_chroot};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(2);
/// Process start, a JVM pause or a busy core, on bounds that are otherwise exact.
const SLACK: Duration = Duration::from_secs(3);

/// The job's records as `history --json` shows them: (status, error, ticks it stands for).
fn records(job: &str, config: &Path) -> Vec<(String, String, u64)> {
    support::daemon::history_records(job, &[], config)
        .into_iter()
        .map(|record| {
            (
                record["status"].as_str().unwrap_or_default().to_owned(),
                record["error"].as_str().unwrap_or_default().to_owned(),
                record["missed_ticks"].as_u64().unwrap_or(1),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_calendar_excluding_today_skips_every_tick_in_one_record_across_a_kill_9() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("calendars"));
    // Today and tomorrow, so that midnight does not end the test's day.
    let today = chrono::Utc::now().date_naive();
    let days = [today, today.succ_opt().expect("a tomorrow")]
        .map(|day| format!("\"{day}\""))
        .join(", ");
    let jobs = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n\
         [[calendar]]\nname = \"today\"\ndates = [{days}]\n\
         [[job]]\nname = \"resting\"\nschedule = \"* * * * * *\"\nexcept = [\"today\"]\n\
         shell = '{RECORD_FIRE}{fires}'\n\
         [[job]]\nname = \"working\"\nschedule = \"* * * * * *\"\nonly = [\"today\"]\n\
         shell = '{RECORD_FIRE}{fires}'\n",
        fires = fires.display()
    );
    let text = schedule_text(&connect, "calendars", SESSION, DELAY, &jobs);
    let mut first = DaemonNode::start(dir.path(), "k1", &text);
    first.wait_log("lock acquired", SESSION + SLACK).await;
    let second = DaemonNode::start(dir.path(), "k2", &text);
    second
        .wait_log("zookeeper session established", SLACK)
        .await;
    let ran = |node: &'static str| {
        let fires = fires.clone();
        move || {
            let on = read_fires(&fires)
                .iter()
                .filter(|f| f.job == "working" && f.node == node)
                .count();
            async move { (on >= 3).then_some(()) }
        }
    };
    try_wait_for("working runs on k1", Duration::from_secs(15), ran("k1"))
        .await
        .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", logs_of(&[&first, &second])));
    let resting = records("resting", &first.config);
    assert_eq!(
        resting.len(),
        1,
        "one record for the whole run: {resting:?}"
    );
    let (status, why, ticks) = &resting[0];
    assert_eq!(status, "skipped");
    assert_eq!(why, "skipped by calendar \"today\" (except)");
    assert!(
        *ticks > 1000,
        "it stands for the rest of the day and more: {ticks}"
    );
    let explained = zkcron_ok(
        &["check", "--explain", "resting", "--count", "2"],
        &first.config,
    );
    assert!(
        explained.contains("not run: skipped by calendar \"today\" (except)"),
        "{explained}"
    );
    // Every view's next fire is the day after the calendar's two days, never one of them.
    let day_after = (today + chrono::Days::new(2))
        .and_hms_opt(0, 0, 0)
        .expect("a midnight")
        .and_utc()
        .timestamp_millis();
    let resting_in = |document: &serde_json::Value| -> serde_json::Value {
        document["jobs"]
            .as_array()
            .and_then(|jobs| jobs.iter().find(|job| job["name"] == "resting"))
            .cloned()
            .unwrap_or_else(|| panic!("resting among the jobs of {document}"))
    };
    let status: serde_json::Value =
        serde_json::from_str(&zkcron_ok(&["status", "--json"], &first.config)).expect("json");
    let next = resting_in(&status)["next_unix_ms"].as_i64();
    assert_eq!(next, Some(day_after), "status --json: {status}");
    let port = logged_port(&first.log()).expect("the listener's port in the log");
    let api = request(port, "GET", "/v1/status", None, None).await.json();
    let next = resting_in(&api)["next_unix_ms"].as_i64();
    assert_eq!(next, Some(day_after), "/v1/status: {api}");
    let checked: serde_json::Value =
        serde_json::from_str(&zkcron_ok(&["check", "--json"], &first.config)).expect("json");
    let next = resting_in(&checked)["next"][0]["unix_ms"].as_i64();
    assert_eq!(next, Some(day_after), "check --json: {checked}");

    first.kill();
    try_wait_for("working runs on k2", SESSION + DELAY + SLACK * 3, ran("k2"))
        .await
        .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", logs_of(&[&second])));
    let all = read_fires(&fires);
    assert!(
        all.iter().all(|f| f.job == "working"),
        "resting never runs: {all:?}"
    );
    let resting = records("resting", &second.config);
    assert_eq!(
        resting.len(),
        1,
        "the next owner knows the run is recorded: {resting:?}\n{}",
        second.log_tail()
    );
}
