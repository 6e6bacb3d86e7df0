//! Delayed submissions kept in PostgreSQL (`[delayed] store = "postgres"`, issue 55), fired by a
//! real `zkcron run` against a real ZooKeeper and a real PostgreSQL: the same promises as the
//! ZooKeeper store — once, at their time, with the payload on stdin, overdue ones at once — with
//! nothing of the queue in ZooKeeper.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::daemon::{DaemonNode, now_ms, schedule_text, zkcron_ok};
use support::postgres::shared_postgres;
use support::{shared_ensemble, unique_chroot, wait_for};
use zkcron::delayed::submission::SubmissionId;
use zkcron::ledger::postgres::{PgStore, Where};
use zkcron::run::RunStatus;

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(3);
/// Process start, a JVM pause or a busy core on a loaded 2-core machine.
const SLACK: Duration = Duration::from_secs(5);

/// Each run appends a line `RUN <due ms> <attempt> <stdin>` to a file named by its submission
/// id: two lines are two runs.
fn on_demand_job(out: &Path) -> String {
    format!(
        "[[job]]\nname = \"close\"\nstarting_deadline = \"30s\"\nshell = '''\
         echo \"RUN $ZKCRON_SCHEDULED_UNIX_MS $ZKCRON_ATTEMPT $(cat)\" >> {dir}/$ZKCRON_SUBMISSION_ID'''\n",
        dir = out.display()
    )
}

/// A job whose first attempt stays running until its daemon is gone (bounded at 20 s), and whose
/// rerun ends at once (`on_interrupted = "rerun"`); each attempt appends `RUN <attempt> <node>`.
fn cut_short_job(out: &Path) -> String {
    format!(
        "[[job]]\nname = \"close\"\nstarting_deadline = \"60s\"\non_interrupted = \"rerun\"\n\
         shell = '''echo \"RUN $ZKCRON_ATTEMPT $ZKCRON_NODE\" >> {dir}/$ZKCRON_SUBMISSION_ID; \
         if [ \"$ZKCRON_ATTEMPT\" = 1 ]; then \
         for i in $(seq 100); do kill -0 $PPID 2>/dev/null || exit 0; sleep 0.2; done; fi'''\n",
        dir = out.display()
    )
}

/// Submits `id` to [`cut_short_job`] through `owner`, waits for its first attempt there, and
/// kills `owner` with SIGKILL in the middle of it.
async fn first_attempt_then_kill(out: &Path, id: &str, owner: &mut DaemonNode) {
    let due = at(now_ms() + 1_000);
    zkcron_ok(
        &["submit", "close", "--at", &due, "--id", id],
        &owner.config,
    );
    let first = format!("RUN 1 {}", owner.node_id);
    wait_for(
        &format!("the first attempt runs on {}", owner.node_id),
        SLACK,
        || {
            let runs = runs_of(out, id);
            let first = first.clone();
            async move { (runs == [first]).then_some(()) }
        },
    )
    .await;
    owner.kill();
}

fn runs_of(out: &Path, id: &str) -> Vec<String> {
    std::fs::read_to_string(out.join(id))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A test's ground: a temp dir with a `runs` dir for the job's files, a database of its own on
/// the shared server, a file holding its DSN, and a chroot of its own on the shared ensemble.
struct Ground {
    dir: tempfile::TempDir,
    out: PathBuf,
    dsn: String,
    dsn_file: PathBuf,
    connect: String,
}

async fn ground(test: &str) -> Ground {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("runs");
    std::fs::create_dir(&out).expect("runs dir");
    let dsn = shared_postgres()
        .create_database(test)
        .await
        .expect("a database");
    let dsn_file = dir.path().join("dsn");
    std::fs::write(&dsn_file, format!("{dsn}\n")).expect("dsn file");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot(test));
    Ground {
        dir,
        out,
        dsn,
        dsn_file,
        connect,
    }
}

/// A schedule of `jobs` on `ground`'s chroot, with the delayed queue in its database.
fn in_postgres(ground: &Ground, jobs: &str) -> String {
    let jobs = format!(
        "[delayed]\nstore = \"postgres\"\ndsn_file = \"{}\"\n\n{jobs}",
        ground.dsn_file.display()
    );
    schedule_text(&ground.connect, "d", SESSION, DELAY, &jobs)
}

struct Setup {
    _ground: Ground,
    out: PathBuf,
    dsn: String,
    group: String,
    node: DaemonNode,
}

async fn one_node(test: &str) -> Setup {
    let ground = ground(test).await;
    let jobs = format!(
        "{}{}",
        on_demand_job(&ground.out),
        on_demand_job(&ground.out).replace("name = \"close\"", "name = \"tidy\"\nhistory = 1")
    );
    let text = in_postgres(&ground, &jobs);
    let node = DaemonNode::start(ground.dir.path(), "d1", &text);
    node.wait_log("owns the lock", SESSION + SLACK).await;
    Setup {
        out: ground.out.clone(),
        dsn: ground.dsn.clone(),
        _ground: ground,
        // The lock group's path, below the chroot: `[lock] root` defaults to /zkcron.
        group: "/zkcron/d".to_owned(),
        node,
    }
}

fn at(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("in range")
        .to_rfc3339()
}

#[tokio::test]
async fn submissions_kept_in_postgres_fire_once_at_their_time_and_end_there() {
    let setup = one_node("pg-daemon-fire").await;
    let config = &setup.node.config;
    let soon_ms = now_ms() + 2_500;
    let args = |due: &str, id: &'static str, payload: &'static str| {
        [
            "submit",
            "close",
            "--at",
            due,
            "--id",
            id,
            "--payload",
            payload,
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let soon = at(soon_ms);
    let past = at(now_ms() - 5_000);
    let later = at(now_ms() + 3_600_000);
    for (due, id, payload) in [
        (&later, "later", "x"),
        (&soon, "soon", "order 42"),
        (&past, "past", "late"),
    ] {
        let argv = args(due, id, payload);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        zkcron_ok(&argv, config);
    }
    let store = PgStore::open(&setup.dsn, &setup.group)
        .await
        .expect("the store opens");
    let pending = store
        .find(&SubmissionId::parse("soon").expect("an id"))
        .await
        .expect("found");
    assert!(
        matches!(pending, Some(Where::Pending(_)) | Some(Where::Open { .. })),
        "the CLI submitted into the store: {pending:?}"
    );

    for id in ["past", "soon"] {
        wait_for(
            &format!("{id} runs"),
            Duration::from_millis(2_500) + SLACK,
            || {
                let ran = !runs_of(&setup.out, id).is_empty();
                async move { ran.then_some(()) }
            },
        )
        .await;
    }
    let soon_runs = runs_of(&setup.out, "soon");
    assert_eq!(
        soon_runs[0],
        format!("RUN {soon_ms} 1 order 42"),
        "at its due time, first attempt, its payload on stdin"
    );
    assert_eq!(
        runs_of(&setup.out, "past")[0].split_whitespace().nth(3),
        Some("late")
    );

    for id in ["soon", "past"] {
        let id = SubmissionId::parse(id).expect("an id");
        let ended = wait_for("the run's end in the store", SLACK, || {
            let store = &store;
            let id = id.clone();
            async move {
                match store.find(&id).await {
                    Ok(Some(Where::Ended { record, .. })) => Some(record),
                    _ => None,
                }
            }
        })
        .await;
        assert_eq!(ended.status, RunStatus::Succeeded, "{ended:?}");
        assert_eq!(ended.node_id.as_str(), "d1");
    }
    // `status` counts what is pending in the store.
    let status = support::daemon::zkcron_status(&[], config);
    assert!(status.contains("1, next due"), "{status}");
    // The CLI lists and cancels from the store too.
    let listed = zkcron_ok(&["delayed", "list"], config);
    let pending = listed.split("RECENT").next().unwrap_or_default();
    assert!(
        pending.contains("later") && !pending.contains("soon"),
        "{listed}"
    );
    // A reschedule moves it in the store, and the owner fires it at its new time.
    let moved_ms = now_ms() + 1_500;
    zkcron_ok(
        &["submit", "close", "--at", &later, "--id", "moved"],
        config,
    );
    zkcron_ok(
        &["delayed", "reschedule", "moved", "--at", &at(moved_ms)],
        config,
    );
    wait_for("the rescheduled one runs", SLACK, || {
        let ran = runs_of(&setup.out, "moved");
        async move { (!ran.is_empty()).then_some(ran) }
    })
    .await;
    assert_eq!(
        runs_of(&setup.out, "moved"),
        [format!("RUN {moved_ms} 1 ")],
        "once, at its new due time"
    );
    zkcron_ok(&["delayed", "cancel", "later"], config);
    let shown = zkcron_ok(&["delayed", "show", "later"], config);
    assert!(shown.contains("cancelled"), "{shown}");
    let listed = zkcron_ok(&["delayed", "list"], config);
    let pending = listed.split("RECENT").next().unwrap_or_default();
    assert!(!pending.contains("later"), "{listed}");

    // Nothing runs twice: another second of the owner's life, then one line per file.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for id in ["soon", "past"] {
        assert_eq!(runs_of(&setup.out, id).len(), 1, "{id} ran once");
    }
    let shown = zkcron_ok(&["delayed", "show", "soon"], config);
    assert!(
        shown.contains("state      succeeded on d1 (attempt 1)"),
        "{shown}"
    );
    let history = zkcron_ok(&["history", "close", "--json"], config);
    let succeeded = support::daemon::document_items(&history, "runs")
        .iter()
        .filter(|line| line.contains("\"status\":\"succeeded\""))
        .count();
    assert_eq!(
        succeeded, 3,
        "history reads the store's runs (soon, past, moved): {history}"
    );

    // `history = 1`: the owner prunes the store's ended runs down to the newest.
    for id in ["t-1", "t-2", "t-3"] {
        let argv = ["submit", "tidy", "--at", &past, "--id", id];
        zkcron_ok(&argv, config);
    }
    wait_for("tidy's three run", SLACK, || {
        let ran = ["t-1", "t-2", "t-3"]
            .iter()
            .all(|id| !runs_of(&setup.out, id).is_empty());
        async move { ran.then_some(()) }
    })
    .await;
    wait_for("tidy's history pruned to one run", SLACK, || {
        let history = zkcron_ok(&["history", "tidy", "--json"], config);
        let runs = support::daemon::document_items(&history, "runs").len();
        async move { (runs == 1).then_some(()) }
    })
    .await;
    let again = zkcron_ok(&["submit", "tidy", "--at", &past, "--id", "t-1"], config);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        runs_of(&setup.out, "t-1").len(),
        1,
        "a pruned id is remembered for dedup_window: its resubmit is a no-op ({again})"
    );
    let log = setup.node.log();
    assert!(
        log.contains("the delayed queue is kept in PostgreSQL"),
        "{log}"
    );
    let fence = store.fence().await.expect("the fence read");
    assert!(
        fence.is_some_and(|token| token >= 1),
        "the owner raised the store's fence to its token: {fence:?}"
    );
}

/// A run left open in the store by an owner killed with `kill -9` is resolved by the next owner
/// (`on_interrupted = "rerun"`): marked interrupted and run again, attempt 2, by the survivor, and
/// ended there; the old owner's run is never ended twice or lost.
#[tokio::test]
async fn a_run_left_open_in_the_store_by_a_killed_owner_is_rerun_by_the_next_owner() {
    let ground = ground("pg-daemon-failover").await;
    let (dir, out, dsn) = (&ground.dir, &ground.out, &ground.dsn);
    let jobs = cut_short_job(out);
    let text = in_postgres(&ground, &jobs);
    let mut first = DaemonNode::start(dir.path(), "d1", &text);
    first.wait_log("owns the lock", SESSION + SLACK).await;
    let second = DaemonNode::start(dir.path(), "d2", &text);
    second.wait_log("zkcron started", SLACK).await;

    first_attempt_then_kill(out, "job-1", &mut first).await;

    let takeover = SESSION + DELAY + SLACK * 2;
    wait_for("the next owner reruns it", takeover, || {
        let runs = runs_of(out, "job-1");
        async move { (runs.len() == 2).then_some(()) }
    })
    .await;
    assert_eq!(runs_of(out, "job-1"), ["RUN 1 d1", "RUN 2 d2"]);

    let store = PgStore::open(dsn, "/zkcron/d")
        .await
        .expect("the store opens");
    let id = SubmissionId::parse("job-1").expect("an id");
    let ended = wait_for("the rerun's end in the store", SLACK, || {
        let (store, id) = (&store, id.clone());
        async move {
            match store.find(&id).await {
                Ok(Some(Where::Ended { record, .. })) => Some(record),
                _ => None,
            }
        }
    })
    .await;
    assert_eq!(
        (ended.status, ended.attempt, ended.node_id.as_str()),
        (RunStatus::Succeeded, 2, "d2"),
        "{ended:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(runs_of(out, "job-1").len(), 2, "no third run");
}

/// A job whose each run appends `RUN <node> <attempt>` to a file named `<job>-<submission id>`.
fn recording_job(out: &Path, name: &str, rest: &str) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nstarting_deadline = \"30s\"\n{rest}shell = '''\
         echo \"RUN $ZKCRON_NODE $ZKCRON_ATTEMPT\" >> {dir}/{name}-$ZKCRON_SUBMISSION_ID'''\n",
        dir = out.display()
    )
}

/// The runs recorded by [`recording_job`] `job`, by submission id.
fn runs_by_id(out: &Path, job: &str) -> Vec<(String, Vec<String>)> {
    let prefix = format!("{job}-");
    let mut runs: Vec<_> = std::fs::read_dir(out)
        .map(|entries| entries.flatten().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let id = name.strip_prefix(&prefix)?.to_owned();
            Some((id, runs_of(out, &name)))
        })
        .collect();
    runs.sort();
    runs
}

/// Lock groups on the store: every group's owner claims from the fleet's one queue, its own
/// jobs' submissions only, behind its own group's fence; a run of a submitted parent in the
/// default group makes its child's submission, which the other group's owner runs.
#[tokio::test]
async fn each_lock_groups_owner_runs_its_own_jobs_submissions_from_the_one_queue() {
    let ground = ground("pg-daemon-groups").await;
    let (dir, out) = (&ground.dir, &ground.out);
    // d2 alone carries tag b, so it alone may own group `batch`; d1 owns the default group.
    let jobs = format!(
        "[[group]]\nname = \"batch\"\nrequires = [\"b\"]\n\n{}{}{}",
        recording_job(out, "close", ""),
        recording_job(out, "report", "group = \"batch\"\n"),
        recording_job(out, "audit", "group = \"batch\"\nafter = [\"close\"]\n"),
    );
    let text = |tag: &str| in_postgres(&ground, &format!("[node]\ntags = [\"{tag}\"]\n{jobs}"));
    let d1 = DaemonNode::start(dir.path(), "d1", &text("a"));
    d1.wait_log("owns the lock", SESSION + SLACK).await;
    let d2 = DaemonNode::start(dir.path(), "d2", &text("b"));
    d2.wait_log("owns the lock", SESSION + DELAY + SLACK).await;

    let due = at(now_ms() + 1_000);
    for (job, id) in [
        ("close", "c1"),
        ("close", "c2"),
        ("report", "r1"),
        ("report", "r2"),
    ] {
        zkcron_ok(&["submit", job, "--at", &due, "--id", id], &d1.config);
    }
    let all_ran = || {
        [("close", 2), ("report", 2), ("audit", 2)]
            .iter()
            .all(|(job, count)| runs_by_id(out, job).len() == *count)
    };
    support::try_wait_for("every submission and child runs", SLACK * 3, || {
        let done = all_ran();
        async move { done.then_some(()) }
    })
    .await
    .unwrap_or_else(|not_reached| {
        let ran: Vec<_> = ["close", "report", "audit"]
            .map(|job| runs_by_id(out, job))
            .into();
        let logs = support::daemon::logs_of(&[&d1, &d2]);
        panic!("{not_reached}\nran {ran:?}\n{logs}")
    });
    let store = PgStore::open(&ground.dsn, "/zkcron/d")
        .await
        .expect("the store opens");
    // The children too: a submitted parent's child goes into the store, not ZooKeeper's queue.
    for id in ["c1", "c2", "r1", "r2", "c1.audit", "c2.audit"] {
        let id = SubmissionId::parse(id).expect("an id");
        wait_for("the run's end in the store", SLACK, || {
            let (store, id) = (&store, id.clone());
            async move {
                matches!(store.find(&id).await, Ok(Some(Where::Ended { .. }))).then_some(())
            }
        })
        .await;
    }
    let logs = support::daemon::logs_of(&[&d1, &d2]);
    for (job, node) in [
        ("report", Some("d2")),
        ("audit", Some("d2")),
        ("close", None),
    ] {
        for (id, runs) in runs_by_id(out, job) {
            let once = runs.len() == 1 && runs[0].ends_with(" 1");
            let where_ok = node.is_none_or(|node| runs[0].starts_with(&format!("RUN {node} ")));
            assert!(
                once && where_ok,
                "{job} {id} ran once on {node:?}: {runs:?}\n{logs}"
            );
        }
    }
    // Each group's owner raised its own fence; the named group's sits apart from the default's.
    let batch_fence = store.fenced_by("/zkcron/d/groups/batch").fence().await;
    assert!(
        matches!(batch_fence, Ok(Some(token)) if token >= 1),
        "{batch_fence:?}"
    );
    assert!(matches!(store.fence().await, Ok(Some(token)) if token >= 1));
}

/// A job that logs `START <id> <ns>` and `END <id> <ns>` around a sleep of `secs`, to
/// `<name>.log`, with the job keys `rest`.
fn timed_job(out: &Path, name: &str, secs: &str, rest: &str) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nstarting_deadline = \"60s\"\n{rest}shell = '''\
         echo \"START $ZKCRON_SUBMISSION_ID $(date +%s%N)\" >> {dir}/{name}.log; sleep {secs}; \
         echo \"END $ZKCRON_SUBMISSION_ID $(date +%s%N)\" >> {dir}/{name}.log'''\n",
        dir = out.display()
    )
}

/// The lines of `<name>.log` for each of `jobs`, split in words.
fn logged(out: &Path, jobs: &[&str]) -> Vec<Vec<String>> {
    jobs.iter()
        .flat_map(|job| runs_of(out, &format!("{job}.log")))
        .map(|line| line.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// The most runs of `jobs` ever between their `START` and `END` at once. A logged span lies
/// inside its run, so this never counts more than ran at once.
fn most_at_once(out: &Path, jobs: &[&str]) -> usize {
    let mut events: Vec<(u128, i8)> = logged(out, jobs)
        .iter()
        .filter_map(|words| {
            let at = words.get(2)?.parse().ok()?;
            Some((at, if words[0] == "START" { 1 } else { -1 }))
        })
        .collect();
    // An end and a start at the same instant: the end first.
    events.sort();
    let (mut now, mut most) = (0i64, 0i64);
    for (_, step) in events {
        now += i64::from(step);
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// The caps and promises a run of a submission keeps whichever store holds it: a job's
/// `max_running`, `concurrency = "forbid"`, a `[[limit]]` shared by two jobs, and a retry
/// promised by a failed attempt, each run once and ended in the store.
#[tokio::test]
async fn the_stores_submissions_keep_max_running_forbid_limits_and_retries() {
    let ground = ground("pg-daemon-caps").await;
    let (dir, out) = (&ground.dir, &ground.out);
    let jobs = format!(
        "[[limit]]\nname = \"db\"\nmax = 1\n\n{}{}{}{}\
         [[job]]\nname = \"flaky\"\nretries = 1\nretry_backoff = \"1s\"\nshell = '''\
         echo \"RUN $ZKCRON_ATTEMPT\" >> {dir}/flaky.log; [ \"$ZKCRON_ATTEMPT\" = 2 ]'''\n\
         [[job]]\nname = \"doomed\"\nshell = '''echo \"RUN $ZKCRON_SUBMISSION_ID $(cat)\" \
         >> {dir}/doomed.log; [ -e {dir}/doomed.once ] || {{ touch {dir}/doomed.once; exit 1; }}'''\n",
        timed_job(out, "capped", "0.6", "max_running = 2\n"),
        timed_job(out, "single", "0.4", "concurrency = \"forbid\"\n"),
        timed_job(out, "lim_a", "0.4", "limits = [\"db\"]\n"),
        timed_job(out, "lim_b", "0.4", "limits = [\"db\"]\n"),
        dir = out.display(),
    );
    let node = DaemonNode::start(dir.path(), "d1", &in_postgres(&ground, &jobs));
    node.wait_log("owns the lock", SESSION + SLACK).await;

    let due = at(now_ms() + 1_000);
    let submitted: Vec<(&str, String)> = [("capped", 5), ("single", 3), ("lim_a", 2), ("lim_b", 2)]
        .iter()
        .flat_map(|(job, count)| (0..*count).map(move |n| (*job, format!("{job}-{n}"))))
        .chain([("flaky", "flaky-0".to_owned())])
        .chain([("doomed", "doomed-0".to_owned())])
        .collect();
    for (job, id) in &submitted {
        zkcron_ok(
            &["submit", job, "--at", &due, "--id", id, "--payload", "p"],
            &node.config,
        );
    }
    let store = PgStore::open(&ground.dsn, "/zkcron/d")
        .await
        .expect("the store opens");
    // 5 runs of 0.6 s two at a time, or 4 of 0.4 s one at a time, at most.
    let mut ended = std::collections::HashMap::new();
    for (_, id) in &submitted {
        let parsed = SubmissionId::parse(id).expect("an id");
        let record = wait_for("each run's end in the store", SLACK * 3, || {
            let (store, id) = (&store, parsed.clone());
            async move {
                match store.find(&id).await {
                    Ok(Some(Where::Ended { record, .. })) => Some(record),
                    _ => None,
                }
            }
        })
        .await;
        ended.insert(id.clone(), record);
    }
    let logs = node.log();
    for (job, cap) in [("capped", 2), ("single", 1)] {
        let most = most_at_once(out, &[job]);
        assert!(most <= cap, "{job}: {most} ran at once, over {cap}\n{logs}");
    }
    let most = most_at_once(out, &["lim_a", "lim_b"]);
    assert_eq!(most, 1, "limit db holds one at once\n{logs}");
    // Each submission started once; one of the `forbid` job that came while another ran is
    // skipped instead, and recorded so.
    for (job, id) in submitted
        .iter()
        .filter(|(job, _)| !["flaky", "doomed"].contains(job))
    {
        let starts = logged(out, &[job])
            .iter()
            .filter(|words| words[0] == "START" && words[1] == *id)
            .count();
        let status = ended[id].status;
        let skipped = *job == "single" && status == RunStatus::Skipped;
        assert!(
            (starts, status) == (1, RunStatus::Succeeded) || (starts, skipped) == (0, true),
            "{id} started {starts} times, ended {status:?}\n{logs}"
        );
    }
    assert!(
        ended
            .values()
            .filter(|r| r.job.as_str() == "single")
            .any(|r| r.status == RunStatus::Succeeded),
        "the forbid job ran\n{logs}"
    );
    assert_eq!(
        runs_of(out, "flaky.log"),
        ["RUN 1", "RUN 2"],
        "the promised retry, once"
    );
    let flaky = SubmissionId::parse("flaky-0").expect("an id");
    match store.find(&flaky).await {
        Ok(Some(Where::Ended { record, .. })) => assert_eq!(
            (record.status, record.attempt),
            (RunStatus::Succeeded, 2),
            "{record:?}"
        ),
        other => panic!("the retried run's end: {other:?}"),
    }
    // A dead letter in the store: listed, and submitted again with its payload by `retry`.
    assert_eq!(ended["doomed-0"].status, RunStatus::Failed);
    let failed = zkcron_ok(&["delayed", "list", "--failed"], &node.config);
    assert!(failed.contains("doomed-0"), "{failed}");
    let retried = zkcron_ok(
        &[
            "delayed", "retry", "doomed-0", "--in", "0s", "--id", "doomed-1",
        ],
        &node.config,
    );
    assert_eq!(retried.trim(), "doomed-1");
    wait_for("the dead letter's retry runs", SLACK, || {
        let runs = runs_of(out, "doomed.log");
        async move { (runs.len() == 2).then_some(()) }
    })
    .await;
    assert_eq!(
        runs_of(out, "doomed.log"),
        ["RUN doomed-0 p", "RUN doomed-1 p"]
    );
}

/// A fleet moving its queue to PostgreSQL: a node that still keeps it in ZooKeeper cannot read
/// what is submitted to the database, so it hands the lock over to a member that keeps it there
/// and stays out of contention while that member lives.
#[tokio::test]
async fn a_node_that_keeps_the_queue_in_zookeeper_hands_the_lock_to_a_member_that_keeps_it_in_postgres()
 {
    let ground = ground("pg-daemon-mixed").await;
    let dir = &ground.dir;
    let job = "[[job]]\nname = \"close\"\nshell = \"true\"\n";
    let in_zookeeper = schedule_text(&ground.connect, "d", SESSION, DELAY, job);
    let in_postgres = in_postgres(&ground, job);
    let old = DaemonNode::start(dir.path(), "z1", &in_zookeeper);
    old.wait_log("owns the lock", SESSION + SLACK).await;
    let new = DaemonNode::start(dir.path(), "p1", &in_postgres);
    // The old owner's next clock check reads the new member (a check a session timeout).
    old.wait_log(
        "standing aside from the lock while it lives",
        SESSION * 2 + SLACK,
    )
    .await;
    new.wait_log("owns the lock", DELAY + SLACK).await;
    assert!(
        old.log().contains("member p1 keeps it in PostgreSQL"),
        "{}",
        old.log()
    );
    assert!(
        !new.log().contains("standing aside"),
        "the PostgreSQL node is never kept out: {}",
        new.log()
    );
}

/// A fleet's queue moved from ZooKeeper into PostgreSQL while submissions are pending: the
/// command refuses while a node that keeps the queue in ZooKeeper owns the lock; once a node
/// that keeps it in PostgreSQL owns it, what is pending in ZooKeeper moves into the store (the
/// owner's chores, and the command) and fires from there, each once, none lost.
#[tokio::test]
async fn pending_submissions_move_from_zookeeper_into_postgres_and_fire_once() {
    let ground = ground("pg-daemon-migrate").await;
    let (dir, out, dsn) = (&ground.dir, &ground.out, &ground.dsn);
    let in_zookeeper = schedule_text(&ground.connect, "d", SESSION, DELAY, &on_demand_job(out));
    let in_postgres = in_postgres(&ground, &on_demand_job(out));
    let old = DaemonNode::start(dir.path(), "z1", &in_zookeeper);
    old.wait_log("owns the lock", SESSION + SLACK).await;
    // One that runs and ends in ZooKeeper before the switch: its id is remembered there.
    let early_due = at(now_ms());
    let early = [
        "submit",
        "close",
        "--at",
        &early_due,
        "--id",
        "early",
        "--payload",
    ];
    zkcron_ok(&[&early[..], &["p"]].concat(), &old.config);
    wait_for("the early one ends in zookeeper", SLACK * 2, || {
        let records = support::daemon::history_records("close", &[], &old.config);
        let ended = records
            .iter()
            .any(|record| record["submission_id"] == "early" && record["status"] == "succeeded");
        async move { ended.then_some(()) }
    })
    .await;
    // Due once the new owner has taken over (a session timeout, then at once: a handover).
    let due = now_ms() + 8_000;
    let ids: Vec<String> = (0..20).map(|i| format!("m-{i}")).collect();
    for id in &ids {
        zkcron_ok(
            &["submit", "close", "--at", &at(due), "--id", id],
            &old.config,
        );
    }
    zkcron_ok(
        &[
            "submit",
            "close",
            "--at",
            &at(now_ms() + 3_600_000),
            "--id",
            "far",
        ],
        &old.config,
    );
    let new_config = dir.path().join("postgres.toml");
    std::fs::write(&new_config, &in_postgres).expect("schedule");
    let refused =
        support::daemon::zkcron_refused(&["delayed", "migrate", "--to", "postgres"], &new_config);
    assert!(
        refused.contains("owner z1 keeps the delayed queue in ZooKeeper"),
        "{refused}"
    );

    let new = DaemonNode::start(dir.path(), "p1", &in_postgres);
    new.wait_log("owns the lock", SESSION * 2 + DELAY + SLACK)
        .await;
    let moved = zkcron_ok(&["delayed", "migrate", "--to", "postgres"], &new.config);
    assert!(
        moved.contains("and 1 remembered id(s) from ZooKeeper into PostgreSQL"),
        "{moved}"
    );
    assert!(now_ms() < due, "moved before they were due");
    // The store remembers the id that ended in ZooKeeper: the same request again changes
    // nothing, another under its id is refused, as ZooKeeper would have told them.
    let again = support::daemon::assert_exit(
        &support::daemon::zkcron(&[&early[..], &["p"]].concat(), &new.config),
        0,
    );
    assert!(
        again.contains("already exists with this same request"),
        "{again}"
    );
    let other = support::daemon::zkcron_refused(&[&early[..], &["q"]].concat(), &new.config);
    assert!(
        other.contains("different job, due time or payload"),
        "{other}"
    );

    for id in &ids {
        wait_for(
            &format!("{id} runs"),
            Duration::from_millis(8_000) + SLACK,
            || {
                let ran = !runs_of(out, id).is_empty();
                async move { ran.then_some(()) }
            },
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    for id in ids.iter().map(String::as_str).chain(["early"]) {
        let runs = runs_of(out, id);
        assert_eq!(runs.len(), 1, "{id} ran once: {runs:?}");
    }
    let listed = zkcron_ok(&["delayed", "list"], &new.config);
    let pending = listed.split("RECENT").next().unwrap_or_default();
    assert!(
        pending.contains("far"),
        "the far one waits in the store: {listed}"
    );
    let store = PgStore::open(dsn, "/zkcron/d")
        .await
        .expect("the store opens");
    let far = store
        .find(&SubmissionId::parse("far").expect("an id"))
        .await
        .expect("found");
    assert!(matches!(far, Some(Where::Pending(_))), "{far:?}");
    assert!(
        new.log().contains("moved into the delayed store") || moved.contains("moved 21 "),
        "the owner's chore or the command moved them: {moved}\n{}",
        new.log()
    );
}

/// A run open in ZooKeeper when the queue moved (claimed there by a node that kept the queue in
/// ZooKeeper, killed mid-run) is resolved by the next owner, which keeps it in PostgreSQL, where
/// it is: rerun in ZooKeeper (`on_interrupted = "rerun"`), attempt 2, its end recorded there and
/// shown by `history`.
#[tokio::test]
async fn a_run_open_in_zookeeper_when_the_queue_moved_is_resolved_there_by_the_next_owner() {
    let ground = ground("pg-daemon-open-in-zk").await;
    let out = &ground.out;
    let jobs = cut_short_job(out);
    let in_zookeeper = schedule_text(&ground.connect, "d", SESSION, DELAY, &jobs);
    let mut old = DaemonNode::start(ground.dir.path(), "z1", &in_zookeeper);
    old.wait_log("owns the lock", SESSION + SLACK).await;
    first_attempt_then_kill(out, "zk-1", &mut old).await;
    let new = DaemonNode::start(ground.dir.path(), "p1", &in_postgres(&ground, &jobs));
    wait_for(
        "the next owner reruns it",
        SESSION + DELAY + SLACK * 2,
        || {
            let runs = runs_of(out, "zk-1");
            async move { (runs.len() == 2).then_some(()) }
        },
    )
    .await;
    assert_eq!(runs_of(out, "zk-1"), ["RUN 1 z1", "RUN 2 p1"]);
    let ended = wait_for("its end recorded", SLACK, || {
        let history = zkcron_ok(&["history", "close", "--json"], &new.config);
        async move {
            support::daemon::document_items(&history, "runs")
                .into_iter()
                .find(|run| run.contains("\"status\":\"succeeded\""))
        }
    })
    .await;
    assert!(
        ended.contains("\"submission_id\":\"zk-1\"") && ended.contains("\"attempt\":2"),
        "{ended}"
    );
}

/// The frames of an event stream answered whole (`follow=false`): each one's `id:` line and its
/// event, if it has one.
fn frames(body: &str) -> Vec<(String, Option<serde_json::Value>)> {
    body.split("\n\n")
        .filter_map(|frame| {
            let id = frame.lines().find_map(|line| line.strip_prefix("id: "))?;
            let event = frame
                .lines()
                .find_map(|line| line.strip_prefix("data: "))
                .map(|data| serde_json::from_str(data).expect("an event"));
            Some((id.to_owned(), event))
        })
        .collect()
}

/// The console's recent submissions on the node at `port`: each one's id and status, newest
/// first (none while its index is still reading).
async fn recent_submissions(port: u16, token: &str) -> Vec<(String, String)> {
    let reply = support::http::request(
        port,
        "GET",
        "/v1/submissions?state=recent",
        Some(token),
        None,
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    reply
        .json()
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|run| {
            let id = run["submission_id"].as_str()?.to_owned();
            Some((id, run["status"].as_str().unwrap_or_default().to_owned()))
        })
        .collect()
}

/// The event stream tells the store's runs (issue 55): each submission's run ends in the stream,
/// with a cursor that holds the store's mark; a follower resuming after one gets only what came
/// after it; and after the node restarted, a cursor the new hub never gave is answered 410, or,
/// across the gap, with the store's runs after its mark read back from the store — none before.
#[tokio::test]
async fn the_event_stream_tells_the_stores_runs_and_resumes_after_a_store_mark() {
    const TOKEN: &str = "pg-events-token";
    let ground = ground("pg-daemon-events").await;
    let jobs = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\ntoken_env = \"ZKCRON_EVENTS_TOKEN\"\n\n{}",
        on_demand_job(&ground.out)
    );
    let text = in_postgres(&ground, &jobs);
    let env = [("ZKCRON_EVENTS_TOKEN", Path::new(TOKEN))];
    let mut node = DaemonNode::start_with_env(ground.dir.path(), "d1", &text, &env);
    node.wait_log("owns the lock", SESSION + SLACK).await;
    let port = support::http::logged_port(&node.log()).expect("the node's port");
    let listing = |port: u16, query: String| async move {
        let reply = support::http::request(
            port,
            "GET",
            &format!("/v1/events?{query}"),
            Some(TOKEN),
            None,
        )
        .await;
        (reply.status, frames(&reply.body), reply.body)
    };
    // The first follower starts the hub: where it stands is the stream's first id.
    let (status, started, body) = listing(port, "follow=false".to_owned()).await;
    assert_eq!(status, 200, "{body}");
    let start = started
        .first()
        .map(|(id, _)| id.clone())
        .expect("a position");
    assert!(
        start.split('.').count() >= 3,
        "a cursor with the store's mark: {start}"
    );

    // The console's index starts before any run, and follows the store's feed from there.
    recent_submissions(port, TOKEN).await;

    let ended_in_stream = |after: String, id: &'static str| async move {
        let query = format!("follow=false&after={after}");
        wait_for(
            &format!("{id}'s run ended in the stream"),
            SLACK * 2,
            || {
                let query = query.clone();
                async move {
                    let (_, frames, _) = listing(port, query).await;
                    let ended = frames.iter().any(|(_, event)| {
                        event.as_ref().is_some_and(|e| {
                            e["kind"] == "run_ended"
                                && e["run_id"].as_str().is_some_and(|run| run.ends_with(id))
                                && e["status"] == "succeeded"
                        })
                    });
                    ended.then_some(frames)
                }
            },
        )
        .await
    };
    let due = at(now_ms() + 500);
    zkcron_ok(
        &["submit", "close", "--at", &due, "--id", "first"],
        &node.config,
    );
    let told = ended_in_stream(start.clone(), "first").await;
    let (first_end, first_event) = told
        .iter()
        .find(|(_, e)| e.as_ref().is_some_and(|e| e["kind"] == "run_ended"))
        .cloned()
        .expect("the end");
    let first_event = first_event.expect("an event");
    assert_eq!(first_event["job"], "close");
    assert_eq!(first_event["node"], "d1");
    assert!(
        first_end.ends_with(".first"),
        "the store's mark names the run's id: {first_end}"
    );
    assert_eq!(
        first_end,
        format!(
            "{}.{}",
            first_event["id"],
            first_event["store_mark"].as_str().unwrap_or_default()
        ),
        "the id: line is the event's id and store mark"
    );

    zkcron_ok(
        &["submit", "close", "--at", &due, "--id", "second"],
        &node.config,
    );
    let after_first = ended_in_stream(first_end.clone(), "second").await;
    let runs: Vec<String> = after_first
        .iter()
        .filter_map(|(_, e)| e.as_ref()?["run_id"].as_str().map(str::to_owned))
        .collect();
    assert!(
        runs.iter().all(|run| run.ends_with("second")),
        "a follower after the first's end is told only what came after it: {runs:?}"
    );
    assert_eq!(runs_of(&ground.out, "first").len(), 1);
    assert_eq!(runs_of(&ground.out, "second").len(), 1);

    // The console: both submissions among the recent ones, the job's last run, from the feed.
    wait_for(
        "the console's index shows both runs",
        SLACK,
        || async move {
            let recent = recent_submissions(port, TOKEN).await;
            let ended = |id: &str| recent.contains(&(id.to_owned(), "succeeded".to_owned()));
            (recent.len() == 2 && ended("first") && ended("second")).then_some(())
        },
    )
    .await;
    let jobs = support::http::request(port, "GET", "/v1/jobs", Some(TOKEN), None)
        .await
        .json();
    let close = jobs["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|job| job["name"] == "close").cloned())
        .unwrap_or_default();
    assert_eq!(close["last"]["submission_id"], "second", "{jobs}");
    assert_eq!(close["last"]["status"], "succeeded", "{jobs}");

    // Another hub: the cursor is none it gave.
    node.kill();
    let node = DaemonNode::start_with_env(ground.dir.path(), "d2", &text, &env);
    node.wait_log("owns the lock", SESSION + DELAY + SLACK)
        .await;
    let port = support::http::logged_port(&node.log()).expect("the node's port");
    let (status, _, body) = listing(port, format!("follow=false&after={first_end}")).await;
    assert_eq!(status, 410, "{body}");
    let gone: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(gone["after"], first_end.as_str(), "{gone}");
    let (status, crossed, body) = listing(
        port,
        format!("follow=false&after={first_end}&across_gap=true"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let told: Vec<(String, String)> = crossed
        .iter()
        .filter_map(|(_, e)| {
            let e = e.as_ref()?;
            Some((
                e["kind"].as_str()?.to_owned(),
                e["run_id"].as_str().unwrap_or("").to_owned(),
            ))
        })
        .collect();
    assert!(
        told.iter()
            .any(|(kind, run)| kind == "run_ended" && run.ends_with("second")),
        "the second's end read back from the store: {told:?}"
    );
    assert!(
        told.iter().all(|(_, run)| !run.ends_with("first")),
        "nothing at or before the cursor: {told:?}"
    );
    assert_eq!(
        told.iter().filter(|(kind, _)| kind == "gap").count(),
        1,
        "{told:?}"
    );
    // A listing from 0 (`zkcron events`) has the store's kept runs read back, as the ticks'.
    let (status, listed, body) =
        listing(port, "follow=false&after=0&across_gap=true".to_owned()).await;
    assert_eq!(status, 200, "{body}");
    let ended: Vec<String> = listed
        .iter()
        .filter_map(|(_, e)| {
            let e = e.as_ref()?;
            (e["kind"] == "run_ended").then(|| e["run_id"].as_str().unwrap_or("").to_owned())
        })
        .collect();
    assert!(
        ["first", "second"]
            .iter()
            .all(|id| ended.iter().any(|run| run.ends_with(id))),
        "{ended:?}"
    );

    // A new node's index reads the store's runs at its start.
    let listed: Vec<String> = wait_for("the new index lists both", SLACK, || async move {
        let listed: Vec<String> = recent_submissions(port, TOKEN)
            .await
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        (listed.len() == 2).then_some(listed)
    })
    .await;
    assert_eq!(listed, ["second", "first"], "newest first");
}

/// A node that keeps the queue in PostgreSQL but cannot reach the database owns while it is
/// alone (the ticks go on), hands the lock to a member that can reach it, which runs the
/// submissions, and owns again once no member that can is left.
#[tokio::test]
async fn a_node_that_cannot_reach_the_store_hands_the_lock_to_a_member_that_can() {
    let ground = ground("pg-daemon-unreachable").await;
    let dir = &ground.dir;
    let ticks = ground.out.join("ticks");
    let jobs = format!(
        "{}[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nshell = 'echo $ZKCRON_NODE >> {}'\n",
        on_demand_job(&ground.out),
        ticks.display()
    );
    let reaching = in_postgres(&ground, &jobs);
    // A port nothing listens on: every connection is refused at once.
    let nowhere = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let nowhere_file = dir.path().join("dsn-nowhere");
    std::fs::write(
        &nowhere_file,
        format!("host=127.0.0.1 port={nowhere} user=zkcron dbname=zkcron connect_timeout=1\n"),
    )
    .expect("dsn file");
    let cut_off_text = reaching.replace(
        &ground.dsn_file.display().to_string(),
        &nowhere_file.display().to_string(),
    );
    let ticks_of = |node: &str| {
        std::fs::read_to_string(&ticks)
            .unwrap_or_default()
            .lines()
            .filter(|line| *line == node)
            .count()
    };

    let cut_off = DaemonNode::start(dir.path(), "c1", &cut_off_text);
    cut_off.wait_log("owns the lock", SESSION + SLACK).await;
    wait_for("c1 runs the ticks while it is alone", SLACK, || {
        let ran = ticks_of("c1") > 0;
        async move { ran.then_some(()) }
    })
    .await;

    let mut reaching_node = DaemonNode::start(dir.path(), "r1", &reaching);
    // c1's next clock check reads r1's member node, which says it reads the store.
    cut_off
        .wait_log(
            "cannot read the delayed store in PostgreSQL and member r1 can",
            SESSION * 2 + SLACK,
        )
        .await;
    reaching_node.wait_log("owns the lock", DELAY + SLACK).await;
    let due = at(now_ms());
    zkcron_ok(
        &["submit", "close", "--at", &due, "--id", "waiting"],
        &reaching_node.config,
    );
    wait_for("the submission runs on r1", SLACK, || {
        let ran = runs_of(&ground.out, "waiting").len() == 1;
        async move { ran.then_some(()) }
    })
    .await;
    assert!(
        !reaching_node.log().contains("standing aside"),
        "{}",
        reaching_node.log()
    );

    // No member that reads the store is left: c1 owns again, and the ticks go on.
    let before = ticks_of("c1");
    reaching_node.kill();
    cut_off
        .wait_log("contending again", SESSION * 2 + SLACK)
        .await;
    wait_for("c1 runs the ticks again", SESSION + DELAY + SLACK, || {
        let ran = ticks_of("c1") > before;
        async move { ran.then_some(()) }
    })
    .await;
    assert_eq!(runs_of(&ground.out, "waiting").len(), 1, "run once");
}

/// The only node, owner, frozen (SIGSTOP) past its session while the store holds claims it made
/// ahead of their instants: on waking it finds the lock lost, gains it again under a newer
/// token, and runs each submission once. A run alive at the freeze (its stdin not yet closed)
/// is cancelled with the lost lock and recorded so, as the job contract says; none is left
/// claimed or unrecorded.
#[tokio::test]
async fn an_owner_frozen_past_its_session_with_claims_out_runs_each_once_when_it_owns_again() {
    let setup = one_node("pg-daemon-frozen").await;
    let config = setup.node.config.clone();
    const COUNT: usize = 200;
    let base = now_ms() + 3_000;
    support::daemon::submit_spaced(&config, "close", COUNT, base, 10, "f").await;
    // Frozen in the middle of them: the next ones are claimed ahead, not started.
    let freeze_at = base + 1_000;
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(freeze_at - now_ms()).unwrap_or(0),
    ))
    .await;
    setup.node.signal(nix::sys::signal::Signal::SIGSTOP);
    // Past the session (2 s) with room: the servers expire it.
    tokio::time::sleep(SESSION * 2 + Duration::from_millis(500)).await;
    let thawed_ms = now_ms();
    setup.node.signal(nix::sys::signal::Signal::SIGCONT);
    let ids: Vec<String> = (0..COUNT).map(|i| format!("f{i:04}")).collect();
    let ran = |id: &String| runs_of(&setup.out, id).len();
    let settled = support::try_wait_for(
        "every submission ran or ended recorded",
        SESSION + DELAY + SLACK * 3,
        || {
            let records = support::daemon::history_records("close", &["--limit", "500"], &config);
            let ended = |id: &String| {
                records.iter().any(|r| {
                    r["submission_id"] == id.as_str()
                        && matches!(
                            r["status"].as_str(),
                            Some("succeeded" | "cancelled" | "interrupted")
                        )
                })
            };
            let done = ids.iter().all(|id| ran(id) >= 1 || ended(id));
            async move { done.then_some(records) }
        },
    )
    .await;
    let Ok(records) = settled else {
        let not_run: Vec<&String> = ids.iter().filter(|id| ran(id) == 0).collect();
        panic!(
            "not run nor recorded ended: {:?}\n{}",
            &not_run[..not_run.len().min(20)],
            setup.node.log_tail()
        );
    };
    for id in &ids {
        assert!(ran(id) <= 1, "{id} ran {} times", ran(id));
        if ran(id) == 0 {
            let record = records
                .iter()
                .find(|r| r["submission_id"] == id.as_str())
                .unwrap_or_else(|| panic!("{id}: no record"));
            let started = record["started_unix_ms"].as_i64().unwrap_or(i64::MAX);
            assert!(
                matches!(record["status"].as_str(), Some("cancelled" | "interrupted"))
                    && started <= thawed_ms,
                "{id} did not run and its run was not alive at the freeze: {record}"
            );
        }
    }
}
