//! Jobs that follow jobs (`after`, issue 36) on real daemons and a real ZooKeeper: every
//! succeeded run of a parent has exactly one run of its child, at the parent's instant, across
//! a kill -9 of the owner mid-chain; a child in another lock group is run by that group's
//! owner; a diamond with one failing parent records the child's instant `skipped`, naming it.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use support::daemon::{DaemonNode, logs_of, schedule_text, zkcron_ok};
use support::zk_cluster::try_wait_for;
use support::{fault_lock, shared_ensemble, unique_chroot};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(2);
/// Process start, a JVM pause or a busy core, on bounds that are otherwise exact.
const SLACK: Duration = Duration::from_secs(3);

/// Appends `$ZKCRON_JOB $ZKCRON_SCHEDULED_UNIX_MS $ZKCRON_PARENT_RUN_ID $ZKCRON_NODE` to `log`.
fn record_start(log: &Path) -> String {
    format!(
        "echo \"$ZKCRON_JOB $ZKCRON_SCHEDULED_UNIX_MS ${{ZKCRON_PARENT_RUN_ID:--}} $ZKCRON_NODE\" >> {}",
        log.display()
    )
}

/// One start a job recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Start {
    job: String,
    scheduled_ms: i64,
    parents: String,
    node: String,
}

fn starts(log: &Path) -> Vec<Start> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.len(), 4, "start line {line:?}");
            Start {
                job: f[0].to_owned(),
                scheduled_ms: f[1].parse().expect("scheduled ms"),
                parents: f[2].to_owned(),
                node: f[3].to_owned(),
            }
        })
        .collect()
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn starts_of<'s>(all: &'s [Start], job: &str) -> Vec<&'s Start> {
    all.iter().filter(|s| s.job == job).collect()
}

/// The job's records as `zkcron history --json` shows them: (scheduled ms, status, run id,
/// parents' run ids).
fn records(job: &str, config: &Path) -> Vec<(i64, String, String, Vec<String>)> {
    support::daemon::history_records(job, &["--limit", "1000"], config)
        .into_iter()
        .map(|record| {
            let parents = record["parents"]
                .as_array()
                .map(|all| {
                    all.iter()
                        .map(|p| p["run_id"].as_str().unwrap_or_default().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            (
                record["scheduled_unix_ms"].as_i64().expect("scheduled"),
                record["status"].as_str().expect("status").to_owned(),
                record["run_id"].as_str().expect("run id").to_owned(),
                parents,
            )
        })
        .collect()
}

/// Waits until every run of `parent` that `admits` has a child run in `log`, and no parent run is
/// still open; returns the parent's records.
async fn chain_settled(
    parent: &str,
    child: &str,
    log: &Path,
    config: &Path,
    nodes: &[&DaemonNode],
) -> Vec<(i64, String, String, Vec<String>)> {
    let found = try_wait_for(
        &format!("every succeeded {parent} has its {child}"),
        SLACK * 4,
        || {
            let parents = records(parent, config);
            let all = starts(log);
            let children = starts_of(&all, child);
            let settled = parents
                .iter()
                .all(|(ms, status, ..)| match status.as_str() {
                    "succeeded" => children.iter().any(|c| c.scheduled_ms == *ms),
                    "running" | "claimed" => false,
                    _ => true,
                });
            let done = settled.then_some(parents);
            async move { done }
        },
    )
    .await;
    found.unwrap_or_else(|not_reached| {
        panic!(
            "{not_reached}\nparent records {:?}\nstarts {:?}\n{}",
            records(parent, config),
            starts(log),
            logs_of(nodes)
        )
    })
}

#[tokio::test]
async fn every_succeeded_extract_has_exactly_one_load_at_its_instant_across_a_kill_9_mid_chain() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("starts.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("chain"));
    // extract every 2 s, failing every third tick; load after each success, for a second.
    let jobs = format!(
        "[[job]]\nname = \"extract\"\nschedule = \"*/2 * * * * *\"\nshell = '{}; sleep 0.3; \
         test $(( ZKCRON_SCHEDULED_UNIX_MS / 2000 % 3 )) -ne 0'\n\
         [[job]]\nname = \"load\"\nafter = [\"extract\"]\nshell = '{}; sleep 1'\n",
        record_start(&log),
        record_start(&log),
    );
    let text = schedule_text(&connect, "chain", SESSION, DELAY, &jobs);
    let mut first = DaemonNode::start(dir.path(), "c1", &text);
    first.wait_log("lock acquired", SESSION + SLACK).await;
    let second = DaemonNode::start(dir.path(), "c2", &text);
    second
        .wait_log("zookeeper session established", SLACK)
        .await;

    try_wait_for("two loads on c1", Duration::from_secs(20), || {
        let all = starts(&log);
        let loads = starts_of(&all, "load").len();
        async move { (loads >= 2).then_some(()) }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", logs_of(&[&first, &second])));
    // Mid-chain: parents end and their children wait (load is paused), then the owner dies.
    zkcron_ok(&["pause", "load"], &first.config);
    let paused_at = now_ms();
    let config = first.config.clone();
    try_wait_for(
        "two extracts succeeded with their loads waiting",
        Duration::from_secs(20),
        || {
            let waiting = records("extract", &config)
                .iter()
                .filter(|(ms, status, ..)| *ms > paused_at && status == "succeeded")
                .count();
            async move { (waiting >= 2).then_some(()) }
        },
    )
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", logs_of(&[&first, &second])));
    first.kill();
    let all = starts(&log);
    let last_load = starts_of(&all, "load")
        .iter()
        .map(|load| load.scheduled_ms)
        .max()
        .unwrap_or_default();
    assert!(last_load < paused_at, "a paused load waits: {all:?}");
    second
        .wait_log("lock acquired", SESSION + DELAY + SLACK)
        .await;
    zkcron_ok(&["resume", "load"], &second.config);
    let waited = try_wait_for("the waiting loads run on c2", SLACK * 3, || {
        let all = starts(&log);
        let on_c2 = starts_of(&all, "load")
            .iter()
            .filter(|s| s.node == "c2" && s.scheduled_ms > paused_at)
            .count();
        async move { (on_c2 >= 2).then_some(on_c2) }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", logs_of(&[&second])));
    assert!(waited >= 2);
    // No more parents: what is promised drains.
    zkcron_ok(&["pause", "extract"], &second.config);
    let extracts = chain_settled("extract", "load", &log, &second.config, &[&second]).await;

    let all = starts(&log);
    let loads = starts_of(&all, "load");
    let mut per_instant: BTreeMap<i64, usize> = BTreeMap::new();
    for load in &loads {
        *per_instant.entry(load.scheduled_ms).or_default() += 1;
    }
    let succeeded: Vec<&(i64, String, String, Vec<String>)> = extracts
        .iter()
        .filter(|(_, s, ..)| s == "succeeded")
        .collect();
    // Two loads before the pause, two extracts waiting through the kill: at least four.
    assert!(
        succeeded.len() >= 4,
        "enough runs to mean something: {extracts:?}"
    );
    assert!(
        extracts.iter().any(|(_, s, ..)| s == "failed"),
        "some extracts failed: {extracts:?}"
    );
    for (ms, _, run_id, _) in &succeeded {
        assert_eq!(
            per_instant.get(ms),
            Some(&1),
            "extract at {ms} succeeded: exactly one load at its instant; loads {loads:?}"
        );
        let load = loads.iter().find(|l| l.scheduled_ms == *ms);
        assert_eq!(
            load.map(|l| l.parents.as_str()),
            Some(run_id.as_str()),
            "ZKCRON_PARENT_RUN_ID names the extract run"
        );
    }
    for (ms, count) in &per_instant {
        assert!(
            succeeded.iter().any(|(s, ..)| s == ms),
            "a load at {ms} ({count} times) follows no succeeded extract: {extracts:?}"
        );
    }
    // The failed extracts' instants are recorded for load, skipped and naming the parent
    // (each as soon as its mark is read: waited for, not assumed).
    let failed: Vec<i64> = extracts
        .iter()
        .filter(|(_, s, ..)| s == "failed")
        .map(|(ms, ..)| *ms)
        .collect();
    let config = second.config.clone();
    try_wait_for(
        "every failed extract's instant skipped for load",
        SLACK,
        || {
            let load_records = records("load", &config);
            let done = failed.iter().all(|ms| {
                load_records
                    .iter()
                    .any(|(m, s, ..)| m == ms && s == "skipped")
            });
            async move { done.then_some(()) }
        },
    )
    .await
    .unwrap_or_else(|not_reached| {
        panic!(
            "{not_reached}: failed {failed:?}; load {:?}",
            records("load", &config)
        )
    });
    let shown = zkcron_ok(&["history", "load"], &second.config);
    assert!(
        shown.contains("after: extract run extract-"),
        "history shows which parent run a load came from: {shown}"
    );
    assert!(
        shown.contains("extract ended failed (after_status = succeeded)"),
        "{shown}"
    );
}

#[tokio::test]
async fn a_child_in_another_group_is_run_by_that_groups_owner_and_a_diamond_with_a_failing_parent_is_skipped()
 {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("starts.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("chain-groups"));
    // `left` always succeeds, `right` fails on odd ticks; `join` after both, `audit` after
    // `left` in group b. Node g1 alone may own group a, g2 group b (tags).
    let record = record_start(&log);
    let jobs = format!(
        "[[group]]\nname = \"a\"\nrequires = [\"a\"]\n[[group]]\nname = \"b\"\nrequires = [\"b\"]\n\
         [[job]]\nname = \"left\"\ngroup = \"a\"\nschedule = \"*/2 * * * * *\"\nshell = '{record}'\n\
         [[job]]\nname = \"right\"\ngroup = \"a\"\nschedule = \"*/2 * * * * *\"\nshell = '{record}; \
         test $(( ZKCRON_SCHEDULED_UNIX_MS / 2000 % 2 )) -eq 0'\n\
         [[job]]\nname = \"join\"\ngroup = \"a\"\nafter = [\"left\", \"right\"]\nshell = '{record}'\n\
         [[job]]\nname = \"audit\"\ngroup = \"b\"\nafter = [\"left\"]\nshell = '{record}'\n"
    );
    let text = |tag: &str| {
        let node = format!("[node]\ntags = [\"{tag}\"]\n{jobs}");
        schedule_text(&connect, "chain-groups", SESSION, DELAY, &node)
    };
    let g1 = DaemonNode::start(dir.path(), "g1", &text("a"));
    let g2 = DaemonNode::start(dir.path(), "g2", &text("b"));
    let nodes = [&g1, &g2];
    // A submitted run of `left` makes a submission of `audit`, which group b's owner makes and
    // runs; `join`, with two parents, follows no submitted run.
    submit_job(&g1.config, "left", "sub1", "from a submitted left");
    try_wait_for("joins and audits", Duration::from_secs(30), || {
        let all = starts(&log);
        let enough = starts_of(&all, "join").len() >= 2 && starts_of(&all, "audit").len() >= 4;
        async move { enough.then_some(()) }
    })
    .await
    .unwrap_or_else(|not_reached| {
        panic!(
            "{not_reached}\nstarts {:?}\n{}",
            starts(&log),
            logs_of(&nodes)
        )
    });
    zkcron_ok(&["pause", "left"], &g1.config);
    zkcron_ok(&["pause", "right"], &g1.config);
    chain_settled("left", "audit", &log, &g1.config, &nodes).await;

    let all = starts(&log);
    let audits = starts_of(&all, "audit");
    assert!(
        audits.iter().all(|a| a.node == "g2"),
        "group b's owner runs audit: {audits:?}"
    );
    let lefts = records("left", &g1.config);
    let submitted = lefts
        .iter()
        .find(|(.., run_id, _)| run_id.ends_with("-sub1"))
        .unwrap_or_else(|| panic!("the submitted left ran: {lefts:?}"));
    let after_submitted: Vec<&&Start> =
        audits.iter().filter(|a| a.parents == submitted.2).collect();
    assert_eq!(
        after_submitted.len(),
        1,
        "one audit after the submitted left: {audits:?}"
    );
    assert_eq!(after_submitted[0].scheduled_ms, submitted.0);
    assert!(
        starts_of(&all, "join")
            .iter()
            .all(|join| !join.parents.contains("-sub1")),
        "a join follows no submitted run"
    );
    for (ms, status, ..) in lefts.iter().filter(|(_, s, ..)| s == "succeeded") {
        let count = audits.iter().filter(|a| a.scheduled_ms == *ms).count();
        assert_eq!(count, 1, "left at {ms} ({status}): one audit; {audits:?}");
    }
    // A join runs only where both parents succeeded; its other instants are skipped, naming
    // the failed parent.
    let rights = records("right", &g1.config);
    let joins = starts_of(&all, "join");
    for join in &joins {
        let right = rights.iter().find(|(ms, ..)| *ms == join.scheduled_ms);
        assert_eq!(
            right.map(|(_, s, ..)| s.as_str()),
            Some("succeeded"),
            "a join only after both: {join:?}"
        );
        assert_eq!(
            join.parents.split(',').count(),
            2,
            "both parents' runs: {join:?}"
        );
    }
    let settled = try_wait_for("join's failed instants skipped", SLACK * 2, || {
        let joined = records("join", &g1.config);
        let failed: Vec<i64> = rights
            .iter()
            .filter(|(_, s, ..)| s == "failed")
            .map(|(ms, ..)| *ms)
            .collect();
        let done = failed
            .iter()
            .all(|ms| joined.iter().any(|(m, s, ..)| m == ms && s == "skipped"))
            && !failed.is_empty();
        async move { done.then_some(joined) }
    })
    .await
    .unwrap_or_else(|not_reached| {
        panic!(
            "{not_reached}\nright {rights:?}\njoin {:?}",
            records("join", &g1.config)
        )
    });
    let status = zkcron_ok(&["status"], &g1.config);
    let line = status.lines().find(|l| l.starts_with("join "));
    assert!(
        line.is_some_and(|l| l.contains("after left, right")),
        "status shows the chain: {status}"
    );
    let shown = zkcron_ok(&["history", "join"], &g1.config);
    assert!(
        shown.contains("right ended failed (after_status = succeeded)"),
        "{shown}"
    );
    assert!(!settled.is_empty());
}

/// One run of the submitted chain: who ran, at which instant, after which parent run, as which
/// submission, and the payload it read on stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SubmittedStart {
    job: String,
    scheduled_ms: i64,
    parents: String,
    node: String,
    submission: String,
    payload: String,
}

/// Appends the run's facts and its stdin, `[payload]`, to `log`; `then` follows.
fn record_submitted(log: &Path, then: &str) -> String {
    format!(
        "payload=$(cat); echo \"$ZKCRON_JOB $ZKCRON_SCHEDULED_UNIX_MS ${{ZKCRON_PARENT_RUN_ID:--}} \
         $ZKCRON_NODE $ZKCRON_SUBMISSION_ID [$payload]\" >> {}; {then}",
        log.display()
    )
}

fn submitted_starts(log: &Path) -> Vec<SubmittedStart> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(|line| {
            let f: Vec<&str> = line.splitn(6, ' ').collect();
            assert_eq!(f.len(), 6, "start line {line:?}");
            SubmittedStart {
                job: f[0].to_owned(),
                scheduled_ms: f[1].parse().expect("scheduled ms"),
                parents: f[2].to_owned(),
                node: f[3].to_owned(),
                submission: f[4].to_owned(),
                payload: f[5].trim_matches(['[', ']']).to_owned(),
            }
        })
        .collect()
}

/// Submits `job` under `id` with `payload`, due now.
fn submit_job(config: &Path, job: &str, id: &str, payload: &str) {
    let now = chrono::Utc::now().to_rfc3339();
    let args = [
        "submit",
        job,
        "--at",
        &now,
        "--id",
        id,
        "--payload",
        payload,
    ];
    zkcron_ok(&args, config);
}

/// A submitted (and a triggered) parent makes its child's run: every succeeded `order` has
/// exactly one `notify`, with its payload and its instant, across a kill -9 of the owner while
/// the children wait; a failed one has its `page` (after_status = "failed"); `notify`'s own
/// child `archive` runs once per `notify`.
#[tokio::test]
async fn every_succeeded_submitted_order_has_exactly_one_notify_with_its_payload_across_a_kill_9() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("starts.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("chain-submitted"));
    let jobs = format!(
        "[[job]]\nname = \"order\"\nshell = '{}'\n\
         [[job]]\nname = \"notify\"\nafter = [\"order\"]\nshell = '{}'\n\
         [[job]]\nname = \"page\"\nafter = [\"order\"]\nafter_status = \"failed\"\nshell = '{}'\n\
         [[job]]\nname = \"archive\"\nafter = [\"notify\"]\nshell = '{}'\n",
        record_submitted(&log, "sleep 0.3; test \"$payload\" != fail"),
        record_submitted(&log, "sleep 0.5"),
        record_submitted(&log, "true"),
        record_submitted(&log, "true"),
    );
    let text = schedule_text(&connect, "chain-submitted", SESSION, DELAY, &jobs);
    let mut first = DaemonNode::start(dir.path(), "s1", &text);
    first.wait_log("lock acquired", SESSION + SLACK).await;
    let second = DaemonNode::start(dir.path(), "s2", &text);
    second
        .wait_log("zookeeper session established", SLACK)
        .await;
    for (id, payload) in [("o1", "first order"), ("o2", "fail"), ("o3", "third")] {
        submit_job(&first.config, "order", id, payload);
    }
    let nodes = [&first, &second];
    let config = first.config.clone();
    try_wait_for(
        "two notifies and a page ended on s1",
        Duration::from_secs(20),
        || {
            let ended = |job: &str| {
                records(job, &config)
                    .iter()
                    .filter(|(_, status, ..)| status == "succeeded")
                    .count()
            };
            let done = ended("notify") >= 2 && ended("page") >= 1;
            async move { done.then_some(()) }
        },
    )
    .await
    .unwrap_or_else(|not_reached| {
        panic!(
            "{not_reached}\n{:?}\n{}",
            submitted_starts(&log),
            logs_of(&nodes)
        )
    });
    // Mid-chain: the parents end and their children wait (notify is paused), then the owner
    // dies; the next owner finds the marks and makes the children.
    zkcron_ok(&["pause", "notify"], &first.config);
    for (id, payload) in [("o4", "line with  spaces"), ("o5", "fifth")] {
        submit_job(&first.config, "order", id, payload);
    }
    try_wait_for("o4 and o5 succeeded", Duration::from_secs(20), || {
        let done = records("order", &config)
            .iter()
            .filter(|(_, status, run_id, _)| {
                status == "succeeded" && (run_id.ends_with("-o4") || run_id.ends_with("-o5"))
            })
            .count()
            == 2;
        async move { done.then_some(()) }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", logs_of(&nodes)));
    first.kill();
    second
        .wait_log("lock acquired", SESSION + DELAY + SLACK)
        .await;
    zkcron_ok(&["resume", "notify"], &second.config);
    zkcron_ok(&["trigger", "order"], &second.config);
    let config = second.config.clone();
    let orders = try_wait_for("every order's and notify's children ran", SLACK * 4, || {
        let all = submitted_starts(&log);
        let ran_after =
            |job: &str, parent: &str| all.iter().any(|s| s.job == job && s.parents == parent);
        let orders = records("order", &config);
        let notifies = records("notify", &config);
        let settled = orders.len() == 6
            && notifies.len() == 5
            && orders.iter().all(|(_, status, run_id, _)| {
                let child = if status == "succeeded" {
                    "notify"
                } else {
                    "page"
                };
                ran_after(child, run_id)
            })
            && notifies.iter().all(|(_, status, run_id, _)| {
                status == "succeeded" && ran_after("archive", run_id)
            });
        async move { settled.then_some(orders) }
    })
    .await
    .unwrap_or_else(|not_reached| {
        panic!(
            "{not_reached}\norders {:?}\nstarts {:?}\n{}",
            records("order", &config),
            submitted_starts(&log),
            logs_of(&[&first, &second])
        )
    });

    let all = submitted_starts(&log);
    let order_runs: Vec<&SubmittedStart> = all.iter().filter(|s| s.job == "order").collect();
    for (ms, status, run_id, _) in &orders {
        let parent = order_runs
            .iter()
            .find(|o| run_id.ends_with(&format!("-{}", o.submission)) && o.scheduled_ms == *ms)
            .unwrap_or_else(|| panic!("order run {run_id} started: {order_runs:?}"));
        let (child, other) = if status == "succeeded" {
            ("notify", "page")
        } else {
            ("page", "notify")
        };
        let children: Vec<&SubmittedStart> = all.iter().filter(|s| s.parents == *run_id).collect();
        assert_eq!(
            children.iter().map(|c| c.job.as_str()).collect::<Vec<_>>(),
            [child],
            "order {run_id} ({status}): exactly one {child}, no {other}; {all:?}"
        );
        let made = children[0];
        assert_eq!(
            made.payload, parent.payload,
            "the parent's payload on stdin"
        );
        assert_eq!(
            made.scheduled_ms, *ms,
            "ZKCRON_SCHEDULED_AT is the parent's"
        );
        assert_eq!(made.submission, format!("{}.{child}", parent.submission));
    }
    for notify in all.iter().filter(|s| s.job == "notify") {
        let archives: Vec<&SubmittedStart> = all
            .iter()
            .filter(|s| {
                s.job == "archive" && s.submission == format!("{}.archive", notify.submission)
            })
            .collect();
        assert_eq!(archives.len(), 1, "one archive after {notify:?}: {all:?}");
        assert_eq!(archives[0].payload, notify.payload);
    }
    let late = all
        .iter()
        .filter(|s| {
            s.job == "notify" && (s.submission.starts_with("o4") || s.submission.starts_with("o5"))
        })
        .collect::<Vec<_>>();
    assert!(
        late.len() == 2 && late.iter().all(|s| s.node == "s2"),
        "the children that waited through the kill ran on the next owner: {late:?}"
    );
    let shown = zkcron_ok(&["history", "notify"], &second.config);
    assert!(
        shown.contains("after: order run order-"),
        "history shows which parent run a notify came from: {shown}"
    );
    let shown = zkcron_ok(&["delayed", "show", "o4.notify"], &second.config);
    assert!(
        shown.contains("after      order run order-")
            && shown.contains("-o4 (succeeded)")
            && shown.contains("state      succeeded"),
        "delayed show names the parent's run: {shown}"
    );
}
