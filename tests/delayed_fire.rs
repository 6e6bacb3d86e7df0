//! Delayed submissions fired by real `zkcron run` processes against a real ZooKeeper (issue
//! "Delayed one-off jobs"): once, at their time, with the payload on stdin; overdue ones resumed;
//! a submission written with the raw client fires like one from the CLI; history and
//! `delayed show` tell what happened.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::daemon::{DaemonNode, now_ms, schedule_text, submit_spaced, zkcron_ok};
use support::postgres::QueueIn;
use support::{heavy_fault_lock, shared_ensemble, try_wait_for, unique_chroot, wait_for};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(3);
/// Process start, a JVM pause or a busy core on a loaded 2-core machine.
const SLACK: Duration = Duration::from_secs(3);

/// Each run writes one file named by its submission id: the contract variables it saw, the
/// instant it started (ms), its stdin, then an `END` line. A second run of the same submission
/// appends a second header line to the same file, so "ran once" is checked by counting header
/// lines. The reader waits for `END`: the header is on disk before `cat` has copied the payload.
fn on_demand_job(out: &Path) -> String {
    format!(
        "[[job]]\nname = \"close\"\nstarting_deadline = \"30s\"\nshell = '''\
         f={dir}/$ZKCRON_SUBMISSION_ID; \
         echo \"RUN $ZKCRON_SCHEDULED_UNIX_MS $ZKCRON_RESUMED $ZKCRON_ATTEMPT $(date +%s%3N)\" >> $f; \
         cat >> $f; printf '\\nEND\\n' >> $f'''\n",
        dir = out.display()
    )
}

/// One run as the job recorded it.
#[derive(Debug)]
struct Ran {
    headers: Vec<Vec<String>>,
    payload: String,
}

impl Ran {
    /// The runs recorded under `id`, once the last one has written all of its stdin.
    fn read(out: &Path, id: &str) -> Option<Self> {
        let text = std::fs::read_to_string(out.join(id)).ok()?;
        if !text.ends_with("\nEND\n") {
            return None;
        }
        let mut headers = Vec::new();
        let mut payload = String::new();
        for line in text.split_inclusive('\n') {
            if let Some(header) = line.strip_prefix("RUN ") {
                headers.push(header.split_whitespace().map(str::to_owned).collect());
            } else if line != "END\n" {
                payload.push_str(line);
            }
        }
        // The job's `printf` puts a newline between the payload and `END`.
        payload.truncate(payload.trim_end_matches('\n').len());
        Some(Self { headers, payload })
    }

    fn started_ms(&self) -> i64 {
        self.headers[0][3].parse().expect("start ms")
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    out: PathBuf,
    node: DaemonNode,
}

async fn one_node(test: &str) -> Setup {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("runs");
    std::fs::create_dir(&out).expect("runs dir");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot(test));
    let text = schedule_text(&connect, "d", SESSION, DELAY, &on_demand_job(&out));
    let node = DaemonNode::start(dir.path(), "d1", &text);
    node.wait_log("owns the lock", SESSION + SLACK).await;
    Setup {
        _dir: dir,
        out,
        node,
    }
}

#[tokio::test]
async fn a_submission_fires_once_at_its_time_with_its_payload_and_overdue_ones_at_once() {
    let setup = one_node("delayed-fire").await;
    let config = &setup.node.config;
    let soon_ms = now_ms() + 2_500;
    let soon = chrono::DateTime::from_timestamp_millis(soon_ms)
        .expect("in range")
        .to_rfc3339();
    zkcron_ok(
        &[
            "submit",
            "close",
            "--at",
            &soon,
            "--id",
            "soon",
            "--payload",
            "order 42",
        ],
        config,
    );
    let past = chrono::DateTime::from_timestamp_millis(now_ms() - 5_000)
        .expect("in range")
        .to_rfc3339();
    zkcron_ok(
        &[
            "submit",
            "close",
            "--at",
            &past,
            "--id",
            "past",
            "--payload",
            "late",
        ],
        config,
    );

    let past_ran = wait_for("the overdue submission runs", SLACK, || {
        let ran = Ran::read(&setup.out, "past");
        async move { ran }
    })
    .await;
    assert_eq!(past_ran.payload, "late");
    assert_eq!(
        past_ran.headers[0][1], "0",
        "submitted late while the owner fires: not a resume"
    );
    let soon_ran = wait_for(
        "the submission due soon runs",
        Duration::from_millis(2_500) + SLACK,
        || {
            let ran = Ran::read(&setup.out, "soon");
            async move { ran }
        },
    )
    .await;
    assert_eq!(soon_ran.payload, "order 42", "the payload on stdin");
    assert_eq!(
        soon_ran.headers[0][0],
        soon_ms.to_string(),
        "ZKCRON_SCHEDULED_UNIX_MS is the due time"
    );
    assert_eq!(
        &soon_ran.headers[0][1..3],
        ["0", "1"],
        "on time, first attempt"
    );
    assert!(
        soon_ran.started_ms() >= soon_ms,
        "never before its time: {soon_ran:?}"
    );

    // Nothing runs twice: another second of the owner's life, then one header per file.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for id in ["soon", "past"] {
        let ran = Ran::read(&setup.out, id).expect("ran");
        assert_eq!(ran.headers.len(), 1, "{id} ran once: {ran:?}");
    }
    let history = zkcron_ok(&["history", "close", "--json"], config);
    let succeeded = support::daemon::document_items(&history, "runs")
        .iter()
        .filter(|line| line.contains("\"status\":\"succeeded\""))
        .filter(|line| {
            line.contains("\"submission_id\":\"soon\"")
                || line.contains("\"submission_id\":\"past\"")
        })
        .count();
    assert_eq!(succeeded, 2, "{history}");
    let shown = zkcron_ok(&["delayed", "show", "soon"], config);
    assert!(
        shown.contains("state      succeeded on d1 (attempt 1)"),
        "{shown}"
    );
    let listed = zkcron_ok(&["delayed", "list"], config);
    let pending = listed.split("RECENT").next().unwrap_or_default();
    assert!(
        !pending.contains("soon") && !pending.contains("past"),
        "{listed}"
    );
    // Once it has run, a cancel is refused with the reason, and the record stays as it was.
    let cancel = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["delayed", "cancel", "soon", "--config"])
        .arg(config)
        .output()
        .expect("run zkcron");
    assert_eq!(cancel.status.code(), Some(2), "{cancel:?}");
    let said = String::from_utf8_lossy(&cancel.stderr);
    assert!(
        said.contains("soon can no longer be cancelled: it is succeeded"),
        "{said}"
    );
    let shown = zkcron_ok(&["delayed", "show", "soon"], config);
    assert!(shown.contains("state      succeeded"), "{shown}");
}

/// A session of our own on the node's ensemble and chroot, as its schedule file names them.
async fn raw_session(config: &Path) -> zookeeper_client::Client {
    let connect = std::fs::read_to_string(config)
        .expect("config")
        .lines()
        .find_map(|line| {
            line.strip_prefix("connect = \"")
                .map(|rest| rest.trim_end_matches('"').to_owned())
        })
        .expect("connect line");
    zookeeper_client::Client::connect(&connect)
        .await
        .expect("raw session")
}

#[tokio::test]
async fn a_submission_written_with_the_raw_client_fires_like_one_from_the_cli() {
    let setup = one_node("delayed-raw-fire").await;
    let raw = raw_session(&setup.node.config).await;
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    // docs/DELAYED.md, as a Java or Python service would do it.
    let due = now_ms() + 1_500;
    let (day, second) = (due / 86_400_000, due % 86_400_000 / 1000);
    let shard = format!("{:02x}", crc32fast::hash(b"from-python") % 256);
    let node = format!("/zkcron/d/delayed/ids/{shard}/from-python");
    let marker = format!("/zkcron/d/delayed/due/{day}/{second}/{shard}/from-python");
    for parent in [
        format!("/zkcron/d/delayed/ids/{shard}"),
        format!("/zkcron/d/delayed/due/{day}/{second}/{shard}"),
    ] {
        raw.mkdir(&parent, &open).await.expect("parent");
    }
    let data = format!(
        "{{\"v\":1,\"job\":\"close\",\"due_unix_ms\":{due},\"submitted_unix_ms\":{due}}}\nhello"
    );
    let mut multi = raw.new_multi_writer();
    multi.add_create(&node, data.as_bytes(), &open).expect("op");
    multi.add_create(&marker, b"", &open).expect("op");
    multi.commit().await.expect("submitted by hand");

    let ran = wait_for(
        "the raw submission runs",
        Duration::from_millis(1_500) + SLACK,
        || {
            let ran = Ran::read(&setup.out, "from-python");
            async move { ran }
        },
    )
    .await;
    assert_eq!(ran.payload, "hello");
    assert!(ran.started_ms() >= due, "{ran:?}");
    // The owner's claim deleted the marker through a server of its own.
    raw.sync("/").await.expect("sync");
    assert_eq!(
        raw.check_stat(&marker).await.expect("stat"),
        None,
        "no longer pending"
    );
}

/// Issue 33: a submission's run is kept open by its record alone (ledger format 2) only while
/// every live member reads that format. A member of an older zkcron (its member node publishes
/// no `ledger_format`) would look for open runs in `open/` after a takeover: while it is there,
/// the owner marks them there again, and its leaving brings format 2 back.
#[tokio::test]
async fn the_owner_keeps_runs_open_as_its_oldest_member_reads_them() {
    let setup = one_node("delayed-formats").await;
    let config = &setup.node.config;
    let raw = raw_session(config).await;
    let lock = zkcron::layout::LockPaths::new("/zkcron", "d");
    let ledger = zkcron::layout::LedgerPaths::new(&lock);
    let job = zkcron::ids::JobName::new("close");
    let newest = "every member reads the ledger's newest format";
    said(&setup.node, newest, 1).await;
    let due = now_ms() + 300;
    submit_at(config, "close", "f-1", due, "one");
    ran(&setup.out, "f-1").await;
    let record = |id, due| final_record(&raw, &ledger, &job, id, due);
    assert!(record("f-1", due).await.open_by_record, "format 2");

    let old_member = lock.member(&zkcron::ids::NodeId::new("old-node"));
    let older = br#"{"node_id":"old-node","ip":"127.0.0.9","host":"old","pid":1,"version":"0.1.0","since_unix_ms":0}"#;
    let ephemeral =
        zookeeper_client::CreateMode::Ephemeral.with_acls(zookeeper_client::Acls::anyone_all());
    raw.create(&old_member, older, &ephemeral)
        .await
        .expect("an older zkcron's member node");
    said(&setup.node, "members of an older zkcron", 1).await;
    let due = now_ms() + 300;
    submit_at(config, "close", "f-2", due, "two");
    ran(&setup.out, "f-2").await;
    assert!(!record("f-2", due).await.open_by_record, "format 1");
    let session = zkcron::ledger::Ledger::new(zkcron::zk::Zk::new(
        raw.clone(),
        &zookeeper_client::Acls::anyone_all(),
        zkcron::zk::REQUEST_BOUND,
    ));
    let marked = zkcron::ledger::due::open_runs(&session, &ledger.delayed, &job).await;
    assert_eq!(
        marked.expect("open/ listed"),
        [],
        "its open marker went with its final record"
    );

    raw.delete(&old_member, None)
        .await
        .expect("the older member leaves");
    said(&setup.node, newest, 2).await;
    let due = now_ms() + 300;
    submit_at(config, "close", "f-3", due, "three");
    ran(&setup.out, "f-3").await;
    assert!(record("f-3", due).await.open_by_record, "format 2 again");
}

/// Waits until `node` has logged `text` `times` times.
async fn said(node: &DaemonNode, text: &str, times: usize) {
    wait_for(&format!("{text:?} logged {times} times"), SLACK, || {
        let count = node.log().matches(text).count();
        async move { (count >= times).then_some(()) }
    })
    .await;
}

/// The record submission `id` of `job` ended with (the end of the run's file comes just
/// before it).
async fn final_record(
    raw: &zookeeper_client::Client,
    ledger: &zkcron::layout::LedgerPaths,
    job: &zkcron::ids::JobName,
    id: &str,
    due: i64,
) -> zkcron::run::RunRecord {
    let id = zkcron::delayed::SubmissionId::parse(id).expect("id");
    let path = ledger.submission_record(job, due, &id);
    wait_for(&format!("{id}'s final record"), SLACK, || async {
        let (data, _) = raw.get_data(&path).await.ok()?;
        let record = zkcron::run::RunRecord::parse(&data).ok()?;
        record.status.is_final().then_some(record)
    })
    .await
}

/// How many submissions, and how far apart their due times are (1000 over 10 s).
const SUBMISSIONS: usize = 1000;
const SPACING_MS: i64 = 10;

#[tokio::test]
async fn a_thousand_submissions_survive_a_kill_9_of_the_owner_each_run_at_most_once_none_lost() {
    thousand_across_a_kill(QueueIn::ZooKeeper).await;
}

#[tokio::test]
async fn a_thousand_submissions_kept_in_postgres_survive_a_kill_9_of_the_owner_too() {
    thousand_across_a_kill(QueueIn::Postgres).await;
}

async fn thousand_across_a_kill(queue: QueueIn) {
    let _serial = heavy_fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("runs.log");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("delayed-failover"));
    let job = format!(
        "{}[[job]]\nname = \"close\"\nstarting_deadline = \"60s\"\nhistory = {}\n\
         shell = 'echo \"$ZKCRON_SUBMISSION_ID $ZKCRON_RESUMED $ZKCRON_NODE\" >> {}'\n",
        queue.table(dir.path(), "delayed_failover").await,
        SUBMISSIONS * 2,
        log.display()
    );
    let text = schedule_text(&connect, "d", SESSION, DELAY, &job);
    let mut nodes = [
        DaemonNode::start(dir.path(), "f1", &text),
        DaemonNode::start(dir.path(), "f2", &text),
        DaemonNode::start(dir.path(), "f3", &text),
    ];
    let owner = wait_for("one node owns the lock", SESSION + SLACK, || {
        let owner = nodes.iter().position(|n| n.log().contains("owns the lock"));
        async move { owner }
    })
    .await;

    // Submitted through the library, many requests out at once on one session.
    // Room to submit them all before the first is due: about a second alone, but over 4 s once
    // in CI beside this binary's other tests and their daemons on 2 cores (debug build).
    let base = now_ms() + 8_000;
    let spacing = SPACING_MS;
    submit_spaced(
        &nodes[owner].config,
        "close",
        SUBMISSIONS,
        base,
        spacing,
        "s",
    )
    .await;
    assert!(now_ms() < base, "all submitted before the first is due");

    // kill -9 the owner halfway through.
    let kill_at = base + 5_000;
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(kill_at - now_ms()).unwrap_or(0),
    ))
    .await;
    nodes[owner].kill();
    let killed_ms = now_ms();
    let old = nodes[owner].node_id.clone();

    let last_due = base + i64::try_from(SUBMISSIONS).expect("small") * SPACING_MS;
    let takeover = SESSION + DELAY + SLACK * 2;
    // The new owner starts ~450 overdue runs at once; a debug build on a loaded 2-core machine
    // gets through them slowly. This is a correctness test: the bound only has to end it.
    let backlog = Duration::from_millis(20) * u32::try_from(SUBMISSIONS).expect("small");
    let bound =
        Duration::from_millis(u64::try_from(last_due - now_ms()).unwrap_or(0)) + takeover + backlog;
    let survivor = &nodes[(owner + 1) % 3];
    let runs = try_wait_for("every submission ran or is recorded", bound, || {
        // History first, the log after it: a run recorded `succeeded` wrote its line before it
        // exited, so the log read second has it (read the other way round, a run that ended
        // between the two reads counted as done without its line, and looked lost).
        let history = zkcron_ok(
            &["history", "close", "--json", "--limit", "5000"],
            &survivor.config,
        );
        let runs = std::fs::read_to_string(&log).unwrap_or_default();
        let recorded = support::daemon::document_items(&history, "runs")
            .iter()
            .filter(|l| {
                l.contains("\"status\":\"succeeded\"") || l.contains("\"status\":\"interrupted\"")
            })
            .count();
        let done = (recorded >= SUBMISSIONS).then_some((runs, history));
        async move { done }
    })
    .await;
    let (runs, history) = match runs {
        Ok(runs) => runs,
        Err(not_reached) => {
            let ran = std::fs::read_to_string(&log).unwrap_or_default();
            let history = zkcron_ok(
                &["history", "close", "--json", "--limit", "5000"],
                &survivor.config,
            );
            let missing: Vec<String> = (0..SUBMISSIONS)
                .map(|i| format!("s{i:04}"))
                .filter(|id| !ran.lines().any(|l| l.starts_with(&format!("{id} "))))
                .collect();
            let pending = zkcron_ok(&["delayed", "list", "--limit", "20"], &survivor.config);
            let tails: Vec<String> = nodes
                .iter()
                .map(|n| {
                    let log = n.log();
                    let warnings: Vec<&str> = log
                        .lines()
                        .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
                        .take(40)
                        .collect();
                    format!(
                        "--- {} warnings ---\n{}\n--- {} ---\n{}",
                        n.node_id,
                        warnings.join("\n"),
                        n.node_id,
                        n.log_tail()
                    )
                })
                .collect();
            panic!(
                "{not_reached}\n{} lines in the run log, {} records; not run: {:?}\n\
                 pending:\n{pending}\n{}",
                ran.lines().count(),
                support::daemon::document_items(&history, "runs").len(),
                &missing[..missing.len().min(20)],
                tails.join("\n")
            );
        }
    };

    let mut seen = std::collections::HashMap::<String, Vec<(String, String)>>::new();
    for line in runs.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 3, "run log line {line:?}");
        seen.entry(f[0].to_owned())
            .or_default()
            .push((f[1].to_owned(), f[2].to_owned()));
    }
    let interrupted: Vec<String> = support::daemon::document_items(&history, "runs")
        .into_iter()
        .filter(|l| l.contains("\"status\":\"interrupted\""))
        .collect();
    for i in 0..SUBMISSIONS {
        let id = format!("s{i:04}");
        let ran = seen.get(&id).map_or(0, Vec::len);
        let was_interrupted = interrupted
            .iter()
            .any(|l| l.contains(&format!("\"submission_id\":\"{id}\"")));
        assert!(ran <= 1, "{id} ran {ran} times");
        assert!(
            ran == 1 || was_interrupted,
            "{id} never ran and is not recorded interrupted (lost)"
        );
    }
    // Only runs alive at the kill are interrupted: started on the old owner shortly before it
    // (an `echo` ends in milliseconds; its final record follows within the group commit's
    // round trip, slower on a loaded CI machine: 1 s covers both), never one that ended and was
    // recorded long before. How many that is depends on the machine's speed, not on zkcron.
    for line in &interrupted {
        let record: serde_json::Value = serde_json::from_str(line).expect("a JSON record");
        let started = record["started_unix_ms"].as_i64().unwrap_or(0);
        assert!(
            record["node_id"] == old.as_str() && started <= killed_ms && started > killed_ms - 1000,
            "only runs alive at the kill are interrupted (killed at {killed_ms}): {line}"
        );
    }
    // Those due while no node could fire ran late, resumed, on the new owner.
    let resumed: Vec<_> = seen
        .iter()
        .filter(|(_, r)| r.iter().any(|(resumed, _)| resumed == "1"))
        .collect();
    assert!(resumed.len() >= 100, "{} resumed", resumed.len());
    // Due while no node could fire, and late by more than a second when the new owner began
    // (what makes a run resumed): the old session expires SESSION after its last ping, which
    // can be a third of SESSION before the kill, and peers then wait DELAY, so the new owner
    // begins 4.3 s after the kill at the earliest; what was due by 3.3 s after it ran resumed.
    // (4 s here was past that edge: a run due 3.99 s after the kill was once not resumed.)
    let no_owner = (killed_ms + 500 - base)..(killed_ms + 3_300 - base);
    for i in (no_owner.start / SPACING_MS)..(no_owner.end / SPACING_MS) {
        let id = format!("s{i:04}");
        if let Some(r) = seen.get(&id) {
            assert!(
                r[0].0 == "1" && r[0].1 != old,
                "{id}, due during the failover, resumed by the new owner: {r:?} (old owner {old})"
            );
        }
    }
    // Due well before the kill: run by the first owner, which held the lock until then.
    for i in 0..usize::try_from((killed_ms - 1_000 - base) / SPACING_MS).unwrap_or(0) {
        let id = format!("s{i:04}");
        if let Some(r) = seen.get(&id) {
            assert_eq!(r[0].1, old, "{id} ran on the first owner: {r:?}");
        }
    }
}

#[tokio::test]
async fn a_job_away_from_the_schedule_keeps_its_submissions_in_status_and_fires_them_when_back() {
    job_away(QueueIn::ZooKeeper).await;
}

#[tokio::test]
async fn a_job_away_from_the_schedule_keeps_its_submissions_in_postgres_too() {
    job_away(QueueIn::Postgres).await;
}

async fn job_away(queue: QueueIn) {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("runs");
    std::fs::create_dir(&out).expect("runs dir");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("delayed-away"));
    let delayed = queue.table(dir.path(), "delayed-away").await;
    let with =
        |jobs: &str| schedule_text(&connect, "d", SESSION, DELAY, &format!("{delayed}{jobs}"));
    let both = format!(
        "{}{}",
        on_demand_job(&out),
        on_demand_job(&out).replace("name = \"close\"", "name = \"refund\"")
    );
    let node = DaemonNode::start(dir.path(), "a1", &with(&both));
    node.wait_log("owns the lock", SESSION + SLACK).await;
    let due = chrono::DateTime::from_timestamp_millis(now_ms() + 2_000)
        .expect("in range")
        .to_rfc3339();
    zkcron_ok(
        &[
            "submit",
            "refund",
            "--at",
            &due,
            "--id",
            "r-1",
            "--payload",
            "10 EUR",
        ],
        &node.config,
    );

    // The job leaves the schedule before its submission is due.
    node.rewrite(&with(&on_demand_job(&out)));
    node.signal(nix::sys::signal::Signal::SIGHUP);
    node.wait_log("are kept; they fire once it is back", SLACK)
        .await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(!out.join("r-1").exists(), "not fired while its job is away");
    let status = zkcron_ok(&["status"], &node.config);
    assert!(
        status.contains("refund")
            && status.contains("not in the schedule: 1 pending submission(s) kept"),
        "{status}"
    );

    node.rewrite(&with(&both));
    node.signal(nix::sys::signal::Signal::SIGHUP);
    let ran = wait_for(
        "the kept submission runs once its job is back",
        SLACK,
        || {
            let ran = Ran::read(&out, "r-1");
            async move { ran }
        },
    )
    .await;
    assert_eq!((ran.headers.len(), ran.payload.as_str()), (1, "10 EUR"));
    let status = zkcron_ok(&["status"], &node.config);
    let refund = status
        .lines()
        .find(|l| l.starts_with("refund "))
        .expect("refund row");
    assert!(
        refund.ends_with("  0"),
        "nothing pending any more: {status}"
    );
}

#[tokio::test]
async fn garbage_under_the_delayed_tree_is_logged_with_its_path_and_skipped() {
    // What another writer may leave: a day, a second and a shard that are not names of ours, an
    // id that is not one, an id in the wrong shard, a submission whose data is not ours. The
    // owner's first read (from the oldest day) logs each with its path, and fires the one good
    // submission beside them.
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("runs");
    std::fs::create_dir(&out).expect("runs dir");
    let connect = shared_ensemble()
        .isolated_connect_string("delayed-garbage")
        .await
        .expect("chroot");
    let raw = zookeeper_client::Client::connect(&connect)
        .await
        .expect("raw session");
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let paths =
        zkcron::layout::LedgerPaths::new(&zkcron::layout::LockPaths::new("/zkcron", "d")).delayed;
    let due = now_ms() + 6_000;
    let bucket = paths.due_bucket(zkcron::delayed::DueBucket::of(due));
    let id = |text: &str| zkcron::delayed::SubmissionId::parse(text).expect("id");
    let header = |job: &str| {
        format!("{{\"v\":1,\"job\":\"{job}\",\"due_unix_ms\":{due},\"submitted_unix_ms\":{due}}}\n")
    };
    let mut nodes: Vec<(String, Vec<u8>)> = vec![
        (format!("{}/notaday", paths.due), Vec::new()),
        (
            format!(
                "{}/x",
                paths.due_day(zkcron::delayed::DueBucket::of(due).day)
            ),
            Vec::new(),
        ),
        (format!("{bucket}/zz"), Vec::new()),
        (format!("{bucket}/00/bad*id"), Vec::new()),
    ];
    let wrong_shard = id("wrong-shard");
    let other_shard = if wrong_shard.shard().name() == "00" {
        "01"
    } else {
        "00"
    };
    nodes.push((format!("{bucket}/{other_shard}/wrong-shard"), Vec::new()));
    nodes.push((paths.submission(&wrong_shard), header("close").into_bytes()));
    let corrupt = id("corrupt");
    nodes.push((paths.pending(due, &corrupt, None), Vec::new()));
    nodes.push((paths.submission(&corrupt), b"not a submission".to_vec()));
    let good = id("good");
    nodes.push((paths.pending(due, &good, None), Vec::new()));
    nodes.push((
        paths.submission(&good),
        format!("{}fine", header("close")).into_bytes(),
    ));
    for (path, data) in &nodes {
        let parent = &path[..path.rfind('/').expect("a parent")];
        raw.mkdir(parent, &open)
            .await
            .or_else(|err| match err {
                zookeeper_client::Error::NodeExists => Ok(()),
                err => Err(err),
            })
            .expect("parent");
        raw.create(path, data, &open)
            .await
            .expect("garbage or good");
    }

    let text = schedule_text(&connect, "d", SESSION, DELAY, &on_demand_job(&out));
    let node = DaemonNode::start(dir.path(), "g1", &text);
    let ran = wait_for(
        "the good submission runs",
        Duration::from_millis(6_000) + SLACK * 2,
        || {
            let ran = Ran::read(&out, "good");
            async move { ran }
        },
    )
    .await;
    assert_eq!(ran.payload, "fine");
    let log = node.log();
    for (what, path) in [
        (
            "not a day bucket; skipped",
            format!("{}/notaday", paths.due),
        ),
        (
            "not a due bucket; skipped",
            format!(
                "{}/x",
                paths.due_day(zkcron::delayed::DueBucket::of(due).day)
            ),
        ),
        ("not a shard; skipped", format!("{bucket}/zz")),
        (
            "not a pending marker (<id> or <id>~<job>); skipped",
            format!("{bucket}/00/bad*id"),
        ),
        (
            "submission in the wrong shard; skipped",
            format!("{bucket}/{other_shard}/wrong-shard"),
        ),
        (
            "pending submission unreadable; skipped",
            paths.submission(&corrupt),
        ),
    ] {
        assert!(
            log.lines()
                .any(|line| line.contains(what) && line.contains(&path)),
            "{what} {path}\n{log}"
        );
    }
    assert!(
        node.log().contains("owns the lock") && !log.contains("panicked"),
        "{log}"
    );
    assert!(!out.join("corrupt").exists() && !out.join("wrong-shard").exists());
}

/// Submits `id` to `job`, due at `due_ms`, with `payload`; the CLI's stderr (it says when the
/// submit was a no-op).
fn submit_at(config: &Path, job: &str, id: &str, due_ms: i64, payload: &str) -> String {
    let due = chrono::DateTime::from_timestamp_millis(due_ms)
        .expect("in range")
        .to_rfc3339();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args([
            "submit",
            job,
            "--at",
            &due,
            "--id",
            id,
            "--payload",
            payload,
        ])
        .arg("--config")
        .arg(config)
        .output()
        .expect("run zkcron");
    assert!(output.status.success(), "submit {id}: {output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

async fn ran(out: &Path, id: &str) -> Ran {
    wait_for(&format!("{id} runs"), SLACK, || {
        let ran = Ran::read(out, id);
        async move { ran }
    })
    .await
}

/// Issue 24 §2, on a real daemon: with `history = 3`, an id's record is pruned after three more
/// runs. A client retrying its submit after that is still a no-op within the job's
/// `dedup_window` (the id's tombstone answers it), and nothing runs twice. Once the window has
/// passed, the id is free: a new submit under it is accepted and fires at its time — never
/// accepted and then left `pending` by the owner, as the id's old claim made it before.
#[tokio::test]
async fn a_resubmit_after_history_runs_is_a_no_op_and_a_freed_id_fires_again() {
    resubmit_after_history(QueueIn::ZooKeeper).await;
}

#[tokio::test]
async fn a_resubmit_after_history_runs_is_a_no_op_in_postgres_too() {
    resubmit_after_history(QueueIn::Postgres).await;
}

async fn resubmit_after_history(queue: QueueIn) {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("runs");
    std::fs::create_dir(&out).expect("runs dir");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("delayed-dedup"));
    let jobs = format!(
        "{}{}{}",
        queue.table(dir.path(), "delayed-dedup").await,
        on_demand_job(&out).replace("starting_deadline", "history = 3\nstarting_deadline"),
        on_demand_job(&out).replace(
            "name = \"close\"",
            "name = \"reuse\"\nhistory = 3\ndedup_window = \"1s\""
        )
    );
    let node = DaemonNode::start(
        dir.path(),
        "d1",
        &schedule_text(&connect, "d", SESSION, DELAY, &jobs),
    );
    node.wait_log("owns the lock", SESSION + SLACK).await;
    let config = &node.config;

    let due = now_ms();
    submit_at(config, "close", "order-42", due, "a");
    ran(&out, "order-42").await;
    submit_at(config, "reuse", "order-7", due, "b");
    // The window of order-7 starts when its run ends: it must have passed before the prune.
    let first = ran(&out, "order-7").await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    for n in 1..=5 {
        for job in ["close", "reuse"] {
            submit_at(config, job, &format!("{job}-{n}"), now_ms(), "x");
        }
    }
    for n in 1..=5 {
        for job in ["close", "reuse"] {
            ran(&out, &format!("{job}-{n}")).await;
        }
    }
    let shown = wait_for("order-42's record is pruned", SLACK, || {
        let shown = zkcron_ok(&["delayed", "show", "order-42"], config);
        async move { shown.contains("remembered until").then_some(shown) }
    })
    .await;
    assert!(
        shown.contains("payload    1 bytes (no longer kept)"),
        "{shown}"
    );

    // The client retries: a no-op, said so.
    let said = submit_at(config, "close", "order-42", due, "a");
    assert!(
        said.contains("already exists with this same request"),
        "{said}"
    );
    // order-7's window has passed: its id was freed with its record, and takes a new request.
    wait_for("order-7 is forgotten", SLACK, || {
        let gone = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
            .args(["delayed", "show", "order-7", "--config"])
            .arg(config)
            .output()
            .expect("run zkcron");
        async move { (gone.status.code() == Some(2)).then_some(()) }
    })
    .await;
    let again_due = now_ms() + 500;
    let said = submit_at(config, "reuse", "order-7", again_due, "c");
    assert!(!said.contains("already exists"), "a new request: {said}");
    let again = wait_for(
        "order-7 runs again",
        SLACK + Duration::from_millis(500),
        || {
            let ran = Ran::read(&out, "order-7").filter(|ran| ran.headers.len() == 2);
            async move { ran }
        },
    )
    .await;
    assert_eq!(again.headers[1][0], again_due.to_string(), "{again:?}");
    assert!(
        again.headers[0][0] != again.headers[1][0],
        "{first:?} {again:?}"
    );

    // Nothing twice, nothing left pending.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let ran42 = Ran::read(&out, "order-42").expect("ran");
    assert_eq!(ran42.headers.len(), 1, "order-42 ran once: {ran42:?}");
    let listed = zkcron_ok(&["delayed", "list"], config);
    let pending = listed.split("RECENT").next().unwrap_or_default();
    assert!(!pending.contains("order-"), "nothing pending: {listed}");
}
