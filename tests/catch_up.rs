//! Catch-up after downtime and reruns of interrupted runs, end to end with real `zkcron run`
//! processes (issue "Exactly once per tick"). Every test holds `fault_lock`.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;

use support::daemon::{DaemonNode, Fire, RECORD_FIRE, now_ms, read_fires, schedule_text};
use support::{fault_lock, shared_ensemble, unique_chroot, wait_for};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(3);
const SLACK: Duration = Duration::from_secs(1);

fn schedule(test: &str, jobs: &str) -> String {
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot(test));
    schedule_text(&connect, "cu", SESSION, DELAY, jobs)
}

fn job(name: &str, schedule: &str, fires: &Path, extra: &str, then: &str) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\n{extra}\nshell = '{RECORD_FIRE}{}{then}'\n",
        fires.display()
    )
}

async fn wait_fires(
    fires: &Path,
    what: &str,
    within: Duration,
    done: impl Fn(&[Fire]) -> bool,
) -> Vec<Fire> {
    wait_for(what, within, || {
        let all = read_fires(fires);
        let found = done(&all).then_some(all);
        async move { found }
    })
    .await
}

#[tokio::test]
async fn missed_ticks_are_skipped_run_once_or_all_within_the_starting_deadline() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = |name: &str| dir.path().join(format!("{name}.log"));
    let jobs = [
        job(
            "skip",
            "* * * * * *",
            &file("skip"),
            "misfire = \"skip\"",
            "",
        ),
        job(
            "once",
            "* * * * * *",
            &file("once"),
            "misfire = \"run_once\"",
            "",
        ),
        job(
            "all",
            "* * * * * *",
            &file("all"),
            "misfire = \"run_all\"",
            "",
        ),
        job(
            "near",
            "* * * * * *",
            &file("near"),
            "misfire = \"run_all\"\nstarting_deadline = \"2s\"",
            "",
        ),
    ]
    .join("\n");
    let text = schedule("catch-up", &jobs);
    let mut node = DaemonNode::start(dir.path(), "cu", &text);
    for name in ["skip", "once", "all", "near"] {
        wait_fires(&file(name), "two on-time fires", SESSION * 5, |f| {
            f.len() >= 2
        })
        .await;
    }
    node.signal(Signal::SIGTERM);
    assert!(node.wait_exit(Duration::from_secs(5)).await.success());
    let last: Vec<i64> = ["skip", "once", "all", "near"]
        .iter()
        .map(|name| read_fires(&file(name)).last().expect("a fire").scheduled_ms)
        .collect();

    // The scenario: every node down across several ticks of a 1 s job.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let restart_ms = now_ms();
    let _node = DaemonNode::start(dir.path(), "cu", &text);
    for name in ["skip", "once", "all", "near"] {
        wait_fires(
            &file(name),
            "an on-time fire after the restart",
            SESSION * 5,
            |f| {
                f.iter()
                    .any(|f| f.scheduled_ms > restart_ms && f.resumed == "0")
            },
        )
        .await;
    }
    // Let run_all's sequence end (each run takes a few ms; the sequence is a few ticks long).
    let all = wait_fires(
        &file("all"),
        "run_all caught up",
        Duration::from_secs(3),
        |f| f.iter().filter(|f| f.resumed == "1").count() >= 3,
    )
    .await;

    let resumed = |fires: &[Fire]| {
        fires
            .iter()
            .filter(|f| f.resumed == "1")
            .map(|f| f.scheduled_ms)
            .collect::<Vec<i64>>()
    };
    let skip = read_fires(&file("skip"));
    assert!(
        resumed(&skip).is_empty(),
        "misfire = skip fires nothing missed: {skip:?}"
    );

    let once = resumed(&read_fires(&file("once")));
    assert_eq!(
        once.len(),
        1,
        "misfire = run_once fires exactly one missed tick: {once:?}"
    );
    assert!(
        once[0] >= last[1] + 3000 && once[0] < restart_ms,
        "the latest missed tick: {once:?} after {}",
        last[1]
    );

    let caught = resumed(&all);
    let expected: Vec<i64> = (1..=i64::try_from(caught.len()).unwrap_or(0))
        .map(|k| last[2] + 1000 * k)
        .collect();
    assert_eq!(
        caught, expected,
        "misfire = run_all fires every missed tick, oldest first, in order"
    );
    assert!(
        caught.len() >= 3,
        "at least the three ticks of the downtime: {caught:?}"
    );

    let near = resumed(&read_fires(&file("near")));
    assert!(
        near.len() <= 2,
        "starting_deadline = 2s reaches back at most 2 ticks: {near:?}"
    );
    assert!(
        near.iter().all(|&t| t >= restart_ms - 2000),
        "nothing older than the starting deadline: {near:?}"
    );
    for name in ["skip", "once", "all", "near"] {
        assert_no_tick_fired_twice(name, &read_fires(&file(name)));
    }
}

/// Fails naming the first tick of job `name` found in `fires` more than once, wherever its lines
/// are: a caught-up tick is written after later on-time ones, so duplicates need not be adjacent.
fn assert_no_tick_fired_twice(name: &str, fires: &[Fire]) {
    let mut by_tick: BTreeMap<i64, Vec<&Fire>> = BTreeMap::new();
    for fire in fires {
        by_tick.entry(fire.scheduled_ms).or_default().push(fire);
    }
    if let Some((tick, twice)) = by_tick.iter().find(|(_, fired)| fired.len() > 1) {
        let ticks: Vec<i64> = fires.iter().map(|f| f.scheduled_ms).collect();
        panic!(
            "{name}: tick {tick} fired {} times: {twice:?}\nall ticks in fire order: {ticks:?}",
            twice.len()
        );
    }
}

#[test]
fn a_tick_fired_twice_on_non_adjacent_lines_is_caught() {
    let fire = |scheduled_ms: i64| Fire {
        scheduled_ms,
        node: "cu".into(),
        token: 1,
        job: "all".into(),
        run_id: format!("all-{scheduled_ms}"),
        attempt: 1,
        resumed: "0".into(),
        scheduled_at: String::new(),
    };
    let fires = [fire(1000), fire(2000), fire(1000)];
    let caught = std::panic::catch_unwind(|| assert_no_tick_fired_twice("all", &fires));
    let message = caught.expect_err("a tick fired twice passes");
    let message = message
        .downcast_ref::<String>()
        .expect("a formatted panic message");
    assert!(
        message.contains("all: tick 1000 fired 2 times"),
        "names the tick: {message}"
    );
    assert_no_tick_fired_twice("all", &[fire(2000), fire(1000), fire(3000)]);
}

#[tokio::test]
async fn an_interrupted_run_is_rerun_by_the_new_owner_as_attempt_2() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("long.log");
    // One tick a minute, a few seconds from now: nothing else of the job fires meanwhile.
    let second = (now_ms() / 1000 + 6) % 60;
    let text = schedule(
        "interrupted",
        &job(
            "long",
            &format!("{second} * * * * *"),
            &fires,
            "on_interrupted = \"rerun\"",
            "; sleep 20",
        ),
    );
    let mut nodes = [
        DaemonNode::start(dir.path(), "i1", &text),
        DaemonNode::start(dir.path(), "i2", &text),
    ];
    let first = wait_fires(
        &fires,
        "the long run starts",
        Duration::from_secs(10),
        |f| !f.is_empty(),
    )
    .await;
    let first = first[0].clone();
    assert_eq!((first.attempt, first.resumed.as_str()), (1, "0"));

    let owner = nodes
        .iter()
        .position(|n| n.node_id == first.node)
        .expect("owner is ours");
    nodes[owner].kill();
    let rerun = wait_fires(&fires, "the rerun", SESSION + DELAY + SLACK * 3, |f| {
        f.len() >= 2
    })
    .await;
    let rerun = rerun[1].clone();
    assert_eq!(rerun.run_id, first.run_id, "same run id");
    assert_eq!(rerun.scheduled_ms, first.scheduled_ms, "same tick");
    assert_eq!(rerun.attempt, 2, "the next attempt");
    assert_eq!(rerun.resumed, "1", "started by catch-up, not on time");
    assert!(rerun.token > first.token, "a fresh, larger fencing token");
    assert_ne!(rerun.node, first.node);
}

#[tokio::test]
async fn a_failed_run_is_retried_as_new_attempts_with_doubling_backoff() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("flaky.log");
    // One tick a minute, far enough ahead that the node owns the lock by then: 4 s was once
    // too little for a debug daemon's start beside the whole test pool, and the tick passed.
    let second = (now_ms() / 1000 + 8) % 60;
    let extra = "retries = 2\nretry_backoff = \"500ms\"";
    let text = schedule(
        "retries",
        &job(
            "flaky",
            &format!("{second} * * * * *"),
            &fires,
            extra,
            "; exit 3",
        ),
    );
    let _node = DaemonNode::start(dir.path(), "r1", &text);
    // The tick 8 s ahead, then 500 ms and 1 s of backoff: all three attempts within a few
    // seconds of it.
    let all = wait_fires(&fires, "three attempts", Duration::from_secs(14), |f| {
        f.len() >= 3
    })
    .await;
    let attempts: Vec<u32> = all.iter().map(|f| f.attempt).collect();
    assert_eq!(attempts, [1, 2, 3], "retries = 2: three attempts in all");
    assert!(
        all.iter().all(|f| f.run_id == all[0].run_id),
        "one run id for every attempt"
    );
    assert!(
        all[1].token >= all[0].token,
        "each attempt carries the current token"
    );

    // The record ends failed, at the last attempt, and no fourth attempt follows.
    let config = dir.path().join("r1.toml");
    let record = wait_for("the final record", Duration::from_secs(3), || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
            .args(["history", "flaky", "--json", "--config"])
            .arg(&config)
            .output()
            .ok();
        let line = out.and_then(|o| {
            let document = String::from_utf8_lossy(&o.stdout).into_owned();
            // Until the daemon has written a record the document may not be there yet.
            serde_json::from_str::<serde_json::Value>(&document)
                .ok()
                .map(|_| support::daemon::document_items(&document, "runs"))
                .and_then(|runs| runs.into_iter().next())
        });
        let done =
            line.filter(|l| l.contains("\"attempt\":3") && l.contains("\"status\":\"failed\""));
        async move { done }
    })
    .await;
    assert!(record.contains("\"exit_code\":3"), "{record}");
    assert_eq!(read_fires(&fires).len(), 3, "no fourth attempt");
}
