//! The runner against real processes (`/bin/sh`, `sleep`, `env`): the job env contract, process
//! groups, timeout/cancel/drop stopping every process of a run, start failures and output logging.
//!
//! Jobs write what they see to files in a temp dir (their stdout goes to the log). Where a test must
//! act while a job runs, the job announces itself through a FIFO the test reads; nothing sleeps to
//! synchronise. Time bounds are stated next to each assertion that has one. Where a job must set
//! itself up (install a trap, start its processes) before its timeout strikes, it says so with a
//! ready file, and an attempt it did not get to is run again rather than passed.

use crate::support;

use support::is_dead;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;
use tracing::instrument::WithSubscriber;
use zkcron::ensemble_clock::Deadline;
use zkcron::run::{JobSpec, Launcher, Program, RunContext, RunOutcome, RunReport, SubmissionInput};
use zkcron::runner::{MAX_LINE_BYTES, OUTPUT_DRAIN_AFTER_EXIT, prepare, run, run_prepared};
use zkcron::{FencingToken, JobName, NodeId};

const TIMEOUT: Duration = Duration::from_millis(300);
const GRACE: Duration = Duration::from_millis(300);
/// Added to bounds that are otherwise exact: process start-up and a busy 2-core machine.
const SLACK: Duration = Duration::from_millis(1500);
/// Longest a test waits for a job to announce itself through its FIFO; a job starts in milliseconds.
const ANNOUNCE: Duration = Duration::from_secs(10);
/// Attempts at a run whose job must be set up within its [`TIMEOUT`]: a shell sets itself up in a
/// few ms, but a loaded 2-core machine can keep a new process off a core for longer than 300 ms.
/// Such an attempt is seen (no ready file) and run again; all of them missing fails the test.
const SETUP_ATTEMPTS: u32 = 5;

/// Set when [`as_a_child_subreaper_too`] re-runs tests of this binary in a child process.
const SUBREAPER: &str = "ZKCRON_TEST_SUBREAPER";

/// Host environment the daemon would inherit. Set once, before any test spawns a process: every test
/// calls this first, and `Once` makes the others wait until it is done.
fn host_env() {
    static SET: Once = Once::new();
    SET.call_once(|| {
        if std::env::var_os(SUBREAPER).is_some() {
            // As zkcron is when it runs as PID 1 of a container: orphaned grandchildren become ours.
            nix::sys::prctl::set_child_subreaper(true).expect("prctl(PR_SET_CHILD_SUBREAPER)");
        }
        for (key, value) in [
            ("ZKCRON_TEST_HOST", "from-host"),
            ("ZKCRON_TEST_OVERRIDE", "from-host"),
            ("NOTIFY_SOCKET", "/run/systemd/notify"),
            ("WATCHDOG_PID", "1"),
            ("WATCHDOG_USEC", "30000000"),
            ("LISTEN_PID", "1"),
            ("LISTEN_FDS", "2"),
            ("LISTEN_FDNAMES", "a:b"),
        ] {
            // SAFETY: runs before any test of this binary spawns a process or reads the
            // environment (see above); no other thread touches the environment meanwhile.
            unsafe { std::env::set_var(key, value) };
        }
    });
}

fn spec(name: &str, program: Program) -> JobSpec {
    JobSpec {
        name: JobName::new(name),
        program,
        working_dir: None,
        env: BTreeMap::new(),
        timeout: None,
        kill_grace: GRACE,
        launcher: Launcher::Direct,
        user: None,
    }
}

fn shell(name: &str, line: &str) -> JobSpec {
    spec(name, Program::Shell(line.to_owned()))
}

/// A shell job with `OUT` pointing at `dir/out`.
fn shell_out(name: &str, line: &str, dir: &TempDir) -> (JobSpec, PathBuf) {
    let out = dir.path().join("out");
    let mut job = shell(name, line);
    job.env.insert("OUT".into(), out.display().to_string());
    (job, out)
}

fn ctx(run_id: &str) -> RunContext {
    RunContext {
        run_id: run_id.to_owned(),
        scheduled_at: DateTime::<Utc>::from_timestamp_millis(1_795_314_600_007).expect("in range"),
        node: NodeId::new("10.0.0.5"),
        fencing_token: FencingToken(42),
        attempt: 2,
        resumed: true,
        backfill: false,
        submission: None,
        parent_runs: Vec::new(),
        trace: None,
    }
}

async fn run_to_end(job: &JobSpec, run_id: &str) -> RunReport {
    run(job, &ctx(run_id), CancellationToken::new()).await
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("job output {}: {e}", path.display()))
}

fn env_file(path: &Path) -> BTreeMap<String, String> {
    read(path)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn pids(text: &str) -> Vec<Pid> {
    text.split_whitespace()
        .map(|p| Pid::from_raw(p.parse().unwrap_or_else(|_| panic!("pid {p:?}"))))
        .collect()
}

/// Polls `is_dead` for each pid, for at most [`SLACK`] in all: the kernel notifies nobody but the
/// parent when a process exits, and grandchildren are not ours. The bound is generous; a dead
/// process is seen at once.
async fn assert_all_dead(pids: &[Pid], what: &str) {
    let within = support::within(SLACK);
    for &pid in pids {
        support::wait_until(
            &format!("{what}: pid {pid} dead after the run ended"),
            within,
            || {
                let dead = is_dead(pid);
                async move { dead }
            },
        )
        .await;
    }
}

/// Runs `job`, whose shell line ends its set-up with `: > "$READY"`, until an attempt in which the
/// job got that far before its timeout struck, and returns that attempt's report. Before each
/// attempt the ready file and `outputs` are removed, so nothing of a previous attempt is read.
///
/// A job stopped before it was set up (SIGTERM before its `trap`, say) proves nothing about the
/// runner; such an attempt is logged and run again, never passed.
async fn run_set_up_in_time(job: &JobSpec, dir: &TempDir, outputs: &[&Path]) -> RunReport {
    let ready = dir.path().join("ready");
    let mut job = job.clone();
    job.env.insert("READY".into(), ready.display().to_string());
    let mut missed = Vec::new();
    for attempt in 1..=SETUP_ATTEMPTS {
        for file in outputs.iter().copied().chain([ready.as_path()]) {
            match std::fs::remove_file(file) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    panic!("remove {}: {e}", file.display())
                }
                _ => {}
            }
        }
        let report = run_to_end(&job, &format!("r{attempt}")).await;
        if ready.exists() {
            return report;
        }
        eprintln!("attempt {attempt}: the job was stopped before it was set up; again: {report:?}");
        missed.push(report);
    }
    panic!(
        "in {SETUP_ATTEMPTS} attempts the job was never set up before its {TIMEOUT:?} timeout: \
         the case was not exercised: {missed:?}"
    );
}

/// A FIFO in `dir` and a thread that returns everything written to it by the first writer.
fn fifo(dir: &TempDir) -> (PathBuf, tokio::sync::oneshot::Receiver<String>) {
    let path = dir.path().join("announce");
    let status = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .expect("mkfifo(1) on PATH");
    assert!(status.success(), "mkfifo {}", path.display());
    let rx = read_fifo(&path);
    (path, rx)
}

/// What the writers of the FIFO at `path` write until the last of them closes it.
fn read_fifo(path: &Path) -> tokio::sync::oneshot::Receiver<String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let reader = path.to_path_buf();
    // A plain thread: opening a FIFO blocks until the job opens it, and a runtime waits for its
    // blocking tasks on shutdown, which a failing test must not.
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&reader) {
            let _ = f.read_to_string(&mut text);
        }
        let _ = tx.send(text);
    });
    rx
}

async fn announced(rx: tokio::sync::oneshot::Receiver<String>) -> Vec<Pid> {
    let text = tokio::time::timeout(ANNOUNCE, rx)
        .await
        .expect("the job announces its pids through the FIFO")
        .expect("FIFO reader thread");
    pids(&text)
}

/// SIGKILLs a process left running on purpose when the test ends, also on failure.
struct KillOnDrop(Vec<Pid>);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for &pid in &self.0 {
            let _ = kill(pid, Signal::SIGKILL);
        }
    }
}

#[test]
fn run_future_is_send() {
    // The daemon spawns runs onto the multi-threaded runtime.
    fn assert_send<T: Send>(_: &T) {}
    let job = shell("send", "true");
    let ctx = ctx("send");
    let fut = run(&job, &ctx, CancellationToken::new());
    assert_send(&fut);
}

#[tokio::test]
async fn env_contract_is_exact_and_job_leads_its_own_process_group() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    let (job, out) = shell_out(
        "nightly-report",
        // Field 5 of /proc/PID/stat is the process group ("(sh)" has no spaces).
        r#"
        env > "$OUT"
        echo "$$ $(cut -d' ' -f5 /proc/$$/stat) $(readlink /proc/$$/fd/0)" > "$OUT.proc"
        "#,
        &dir,
    );
    let report = run_to_end(&job, "run-0001").await;
    assert_eq!(report.outcome, RunOutcome::Exited { code: 0 });

    let env = env_file(&out);
    let want = [
        ("ZKCRON_JOB", "nightly-report"),
        ("ZKCRON_RUN_ID", "run-0001"),
        ("ZKCRON_SCHEDULED_AT", "2026-11-22T02:30:00.007Z"),
        ("ZKCRON_SCHEDULED_UNIX_MS", "1795314600007"),
        ("ZKCRON_NODE", "10.0.0.5"),
        ("ZKCRON_FENCING_TOKEN", "42"),
        ("ZKCRON_ATTEMPT", "2"),
        ("ZKCRON_RESUMED", "1"),
    ];
    for (key, value) in want {
        assert_eq!(env.get(key).map(String::as_str), Some(value), "{key}");
    }

    let mut resumed = job.clone();
    resumed.name = JobName::new("on-time");
    let mut on_time = ctx("run-0002");
    on_time.resumed = false;
    on_time.attempt = 1;
    let report = run(&resumed, &on_time, CancellationToken::new()).await;
    assert!(report.outcome.succeeded(), "{:?}", report.outcome);
    let env = env_file(&out);
    assert_eq!(env["ZKCRON_RESUMED"], "0", "on-time run");
    assert_eq!(env["ZKCRON_ATTEMPT"], "1", "first attempt is 1");

    let proc = read(&dir.path().join("out.proc"));
    let fields: Vec<&str> = proc.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "pid, pgid, stdin: {proc:?}");
    assert_eq!(fields[0], fields[1], "the job leads its own process group");
    assert_ne!(
        fields[1],
        nix::unistd::getpgrp().to_string(),
        "not in the test's process group"
    );
    assert_eq!(fields[2], "/dev/null", "stdin is /dev/null");
}

#[tokio::test]
async fn job_env_overrides_host_env_and_contract_overrides_job_env() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    let (mut job, out) = shell_out("env-layers", r#"env > "$OUT""#, &dir);
    job.env
        .insert("ZKCRON_TEST_OVERRIDE".into(), "from-job".into());
    job.env.insert("ZKCRON_TEST_JOB_ONLY".into(), "job".into());
    job.env.insert("ZKCRON_JOB".into(), "impostor".into());
    let report = run_to_end(&job, "r").await;
    assert_eq!(report.outcome, RunOutcome::Exited { code: 0 });

    let env = env_file(&out);
    assert_eq!(
        env["ZKCRON_TEST_HOST"], "from-host",
        "host env passes through"
    );
    assert_eq!(env["ZKCRON_TEST_OVERRIDE"], "from-job", "job env wins");
    assert_eq!(env["ZKCRON_TEST_JOB_ONLY"], "job");
    assert_eq!(env["ZKCRON_JOB"], "env-layers", "the contract wins");
    assert!(env.contains_key("PATH"), "host PATH passes through");
}

#[tokio::test]
async fn systemd_variables_never_reach_a_job() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    let (mut job, out) = shell_out("no-systemd", r#"env > "$OUT""#, &dir);
    // Even a job that asks for it does not get the daemon's notify socket.
    job.env
        .insert("NOTIFY_SOCKET".into(), "/run/systemd/notify".into());
    let report = run_to_end(&job, "r").await;
    assert_eq!(report.outcome, RunOutcome::Exited { code: 0 });

    let env = env_file(&out);
    assert_eq!(env["ZKCRON_TEST_HOST"], "from-host", "the host env was set");
    for key in [
        "NOTIFY_SOCKET",
        "WATCHDOG_PID",
        "WATCHDOG_USEC",
        "LISTEN_PID",
        "LISTEN_FDS",
        "LISTEN_FDNAMES",
    ] {
        assert!(!env.contains_key(key), "{key} reached the job");
    }
}

#[tokio::test]
async fn argv_is_passed_verbatim_and_shell_runs_under_bin_sh() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("argv");
    let mut job = spec(
        "argv",
        Program::Argv(
            [
                "sh",
                "-c",
                r#"printf '%s\n' "$@" > "$OUT""#,
                "sh",
                "a b",
                "$HOME",
                "*",
            ]
            .map(String::from)
            .to_vec(),
        ),
    );
    job.env.insert("OUT".into(), out.display().to_string());
    assert!(run_to_end(&job, "r").await.outcome.succeeded());
    assert_eq!(
        read(&out),
        "a b\n$HOME\n*\n",
        "no splitting, expansion or globbing"
    );

    let (job, out) = shell_out(
        "shell",
        r#"printf '%s\n' "$0" $ZKCRON_JOB "a  b" > "$OUT""#,
        &dir,
    );
    assert!(run_to_end(&job, "r").await.outcome.succeeded());
    assert_eq!(
        read(&out),
        "/bin/sh\nshell\na  b\n",
        "a shell line is shell"
    );
}

#[tokio::test]
async fn working_dir_is_honoured() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let (mut job, out) = shell_out("cwd", r#"pwd -P > "$OUT""#, &dir);
    job.working_dir = Some(work.path().to_owned());
    assert!(run_to_end(&job, "r").await.outcome.succeeded());
    assert_eq!(
        read(&out).trim_end(),
        work.path().canonicalize().unwrap().to_str().unwrap()
    );
}

#[tokio::test]
async fn exit_code_and_signal_are_reported() {
    host_env();
    let ok = run_to_end(&spec("ok", Program::Argv(vec!["true".into()])), "r").await;
    assert_eq!(ok.outcome, RunOutcome::Exited { code: 0 });
    assert!(ok.outcome.succeeded());

    let failed = run_to_end(&shell("fail", "exit 3"), "r").await;
    assert_eq!(failed.outcome, RunOutcome::Exited { code: 3 });
    assert!(!failed.outcome.succeeded());

    let crashed = run_to_end(&shell("crash", "kill -USR1 $$"), "r").await;
    assert_eq!(
        crashed.outcome,
        RunOutcome::Signaled {
            signal: Signal::SIGUSR1 as i32
        }
    );
    assert!(!crashed.outcome.succeeded());
}

#[tokio::test]
async fn timeout_stops_the_whole_group_including_grandchildren() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    // Writing the pids takes a few ms of the 300 ms timeout; `wait` keeps the leader running.
    let (mut job, out) = shell_out(
        "timeout-group",
        r#"sleep 300 & echo $! >> "$OUT"; sleep 300 & echo $! >> "$OUT"; echo $$ >> "$OUT"; : > "$READY"; wait"#,
        &dir,
    );
    job.timeout = Some(TIMEOUT);
    let report = run_set_up_in_time(&job, &dir, &[&out]).await;

    assert_eq!(report.outcome, RunOutcome::TimedOut);
    assert!(report.duration >= TIMEOUT, "stopped early: {report:?}");
    // SIGTERM kills all three; the runner may wait out the grace for the group to disappear.
    assert!(
        report.duration < TIMEOUT + GRACE + SLACK,
        "took too long: {report:?}"
    );
    let pids = pids(&read(&out));
    assert_eq!(
        pids.len(),
        3,
        "two grandchildren and the leader were started"
    );
    assert_all_dead(&pids, "timeout").await;
}

#[tokio::test]
async fn a_job_that_obeys_sigterm_ends_the_run_before_the_grace_is_over() {
    host_env();
    let mut job = spec(
        "obeys-term",
        Program::Argv(vec!["sleep".into(), "300".into()]),
    );
    job.timeout = Some(TIMEOUT);
    job.kill_grace = Duration::from_secs(5);
    let report = run_to_end(&job, "r").await;
    assert_eq!(report.outcome, RunOutcome::TimedOut);
    // Not a fixed wait for the grace: an emptied group ends the run at once.
    assert!(
        report.duration < TIMEOUT + SLACK,
        "waited for the 5 s grace: {report:?}"
    );
}

#[tokio::test]
async fn sigterm_comes_first_and_a_clean_exit_after_it_is_still_a_timeout() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    // The trap must be in place before the timeout's SIGTERM: the ready file says it was.
    let (mut job, out) = shell_out(
        "term-trap",
        r#"trap 'echo got-term > "$OUT"; exit 0' TERM; : > "$READY"; sleep 300 & wait"#,
        &dir,
    );
    job.timeout = Some(TIMEOUT);
    let report = run_set_up_in_time(&job, &dir, &[&out]).await;
    assert_eq!(
        report.outcome,
        RunOutcome::TimedOut,
        "exit 0 in the TERM trap"
    );
    assert_eq!(read(&out), "got-term\n", "the job got SIGTERM, not SIGKILL");
}

#[tokio::test]
async fn a_job_ignoring_sigterm_is_killed_with_its_group_after_the_grace() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    // The ignored disposition is inherited by the background sleep too.
    // SIGTERM must come after `trap ''`: the ready file says it did.
    let (mut job, out) = shell_out(
        "ignores-term",
        r#"trap '' TERM; sleep 300 & echo "$! $$" > "$OUT"; : > "$READY"; wait"#,
        &dir,
    );
    job.timeout = Some(TIMEOUT);
    let report = run_set_up_in_time(&job, &dir, &[&out]).await;

    assert_eq!(report.outcome, RunOutcome::TimedOut);
    assert!(
        report.duration >= TIMEOUT + GRACE,
        "SIGKILL before the grace was over: {report:?}"
    );
    assert!(
        report.duration < TIMEOUT + GRACE + SLACK,
        "SIGKILL late: {report:?}"
    );
    let pids = pids(&read(&out));
    assert_eq!(pids.len(), 2);
    assert_all_dead(&pids, "after SIGKILL").await;
}

/// Runs `line` (which writes "$! $$" to `$ANNOUNCE`), cancels it once it has announced its pids;
/// the report, the pids and how long the run took to return after the cancel.
async fn cancelled_once_announced(
    name: &str,
    line: &str,
    grace: Duration,
) -> (RunReport, Vec<Pid>, Duration) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (announce, rx) = fifo(&dir);
    let mut job = shell(name, line);
    job.kill_grace = grace;
    job.env
        .insert("ANNOUNCE".into(), announce.display().to_string());
    let cancel = CancellationToken::new();
    let ctx = ctx(name);
    let (report, (pids, cancelled_at)) = tokio::join!(run(&job, &ctx, cancel.clone()), async {
        let pids = announced(rx).await;
        cancel.cancel();
        (pids, Instant::now())
    });
    (report, pids, cancelled_at.elapsed())
}

#[tokio::test]
async fn cancel_stops_the_group_and_reports_cancelled() {
    host_env();
    let (report, pids, stopped_within) = cancelled_once_announced(
        "cancelled",
        r#"sleep 300 & echo "$! $$" > "$ANNOUNCE"; wait"#,
        GRACE,
    )
    .await;

    assert_eq!(report.outcome, RunOutcome::Cancelled);
    // SIGTERM kills both; at most the grace passes before the group is gone, plus the drain.
    assert!(
        stopped_within < GRACE + SLACK,
        "run returned {stopped_within:?} after cancel"
    );
    assert_eq!(pids.len(), 2);
    assert_all_dead(&pids, "cancel").await;
}

/// A stopped job whose leader traps SIGTERM and exits while its background child dies of the
/// same signal: the run ends as soon as the group is gone, not at the end of a long grace (a
/// stopping owner holds the job's forbid guard until then; the chaos suite's graceful stop saw
/// the next owner skip a tick for it).
#[tokio::test]
async fn a_cancelled_group_that_dies_at_once_is_not_waited_for_to_the_end_of_its_grace() {
    host_env();
    let (report, pids, stopped_within) = cancelled_once_announced(
        "trapping",
        // Announced once the background child is `sleep`: until its exec it still has the
        // shell's handler for TERM (inherited through fork), and a SIGTERM caught there is lost —
        // `sleep` would then live out the grace, as a job ignoring SIGTERM does.
        r#"trap 'exit 143' TERM; sleep 300 &
           until read -r c < /proc/$!/comm && [ "$c" = sleep ]; do :; done
           echo "$! $$" > "$ANNOUNCE"; wait $!"#,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(report.outcome, RunOutcome::Cancelled);
    assert_all_dead(&pids, "cancel").await;
    // The group is gone within moments of SIGTERM; the bound only has to be far below the 30 s
    // grace, with room for a loaded machine and the output drain.
    assert!(
        stopped_within < Duration::from_secs(5),
        "run returned {stopped_within:?} after cancel, its group long gone"
    );
}

#[tokio::test]
async fn an_already_cancelled_run_starts_nothing() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    let (job, out) = shell_out("never", r#"echo started > "$OUT""#, &dir);
    let cancel = CancellationToken::new();
    cancel.cancel();
    let report = run(&job, &ctx("r"), cancel).await;
    assert_eq!(
        report.outcome,
        RunOutcome::CancelledBeforeStart,
        "nothing started"
    );
    assert!(!out.exists(), "the job was started");
}

#[tokio::test]
async fn dropping_the_run_future_kills_the_group() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    let (announce, rx) = fifo(&dir);
    let mut job = shell("dropped", r#"sleep 300 & echo "$! $$" > "$ANNOUNCE"; wait"#);
    job.env
        .insert("ANNOUNCE".into(), announce.display().to_string());
    let ctx = ctx("r");

    let pids = tokio::select! {
        report = run(&job, &ctx, CancellationToken::new()) => panic!("job ended by itself: {report:?}"),
        pids = announced(rx) => pids,
    };
    // `run`'s future is dropped here, mid-run.
    assert_eq!(pids.len(), 2);
    assert_all_dead(&pids, "drop").await;
}

fn failed_to_start(report: &RunReport) -> &str {
    match &report.outcome {
        RunOutcome::FailedToStart { error } => error,
        other => panic!("expected FailedToStart, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_or_unexecutable_program_fails_to_start_naming_it() {
    host_env();
    let missing = "/nonexistent/zkcron-no-such-binary";
    let report = run_to_end(&spec("missing", Program::Argv(vec![missing.into()])), "r").await;
    let error = failed_to_start(&report);
    assert!(error.contains(missing), "{error}");
    assert!(error.contains("No such file"), "{error}");

    let not_in_path = "zkcron-no-such-command";
    let report = run_to_end(
        &spec("missing", Program::Argv(vec![not_in_path.into()])),
        "r",
    )
    .await;
    assert!(failed_to_start(&report).contains(not_in_path));

    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("not-executable.sh");
    std::fs::File::create(&script)
        .unwrap()
        .write_all(b"#!/bin/sh\ntrue\n")
        .unwrap();
    let report = run_to_end(
        &spec("noexec", Program::Argv(vec![script.display().to_string()])),
        "r",
    )
    .await;
    let error = failed_to_start(&report);
    assert!(error.contains(&script.display().to_string()), "{error}");
    assert!(error.contains("Permission denied"), "{error}");

    let report = run_to_end(&spec("empty", Program::Argv(vec![])), "r").await;
    assert!(
        failed_to_start(&report).contains("empty command"),
        "{report:?}"
    );
}

#[tokio::test]
async fn a_bad_working_dir_fails_to_start_naming_it() {
    host_env();
    let mut job = shell("bad-dir", "true");
    let missing = "/nonexistent/zkcron-dir";
    job.working_dir = Some(missing.into());
    let report = run_to_end(&job, "r").await;
    let error = failed_to_start(&report);
    assert!(error.contains(missing), "{error}");
    assert!(error.contains("No such file"), "{error}");

    let file = tempfile::NamedTempFile::new().unwrap();
    job.working_dir = Some(file.path().to_owned());
    let report = run_to_end(&job, "r").await;
    let error = failed_to_start(&report);
    assert!(
        error.contains(&file.path().display().to_string()),
        "{error}"
    );
    assert!(error.contains("not a directory"), "{error}");
}

/// Collects JSON log lines of the events emitted while a future runs.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogBuffer {
    fn events(&self) -> Vec<serde_json::Value> {
        let bytes = self.0.lock().expect("log buffer").clone();
        String::from_utf8(bytes)
            .expect("the JSON log is UTF-8")
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON event per line"))
            .collect()
    }
}

#[tokio::test]
async fn output_lines_are_logged_with_job_and_run_id() {
    host_env();
    let job = shell(
        "chatty",
        r#"
        echo "to stdout"
        echo "to stderr" >&2
        printf '\377bad\n'
        head -c 100000 /dev/zero | tr '\0' a; echo
        echo after
        printf 'no newline'
        "#,
    );
    let logs = LogBuffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    // tracing caches a call site's interest for the whole process, computed on the thread that
    // reaches it first, against that thread's subscriber alone while only one is registered: a
    // sibling test (none) reaching "job started" first would cache "never" and blind this one.
    // A second registered dispatcher, kept for the test, makes every thread ask them all.
    let _every_thread_asks_all = tracing::Dispatch::new(tracing_subscriber::registry());
    let report = run_to_end(&job, "run-77").with_subscriber(subscriber).await;
    assert_eq!(report.outcome, RunOutcome::Exited { code: 0 });

    let events = logs.events();
    let output: Vec<&serde_json::Value> = events
        .iter()
        .map(|e| &e["fields"])
        .filter(|f| f["message"] == "job output")
        .collect();
    for f in &output {
        assert_eq!(f["job"], "chatty", "{f}");
        assert_eq!(f["run_id"], "run-77", "{f}");
    }
    let line = |stream: &str, text: &str| {
        output
            .iter()
            .any(|f| f["stream"] == stream && f["line"] == text)
    };
    assert!(line("stdout", "to stdout"), "{output:?}");
    assert!(line("stderr", "to stderr"), "{output:?}");
    assert!(
        line("stdout", "\u{FFFD}bad"),
        "invalid UTF-8 logged lossily"
    );
    assert!(line("stdout", "after"), "the line after a long one");
    assert!(line("stdout", "no newline"), "an unterminated last line");
    let long = output
        .iter()
        .find(|f| f["line"].as_str().is_some_and(|l| l.starts_with("aaaa")))
        .expect("the long line is logged");
    assert_eq!(long["line"].as_str().unwrap().len(), MAX_LINE_BYTES);
    assert_eq!(long["truncated"], true);
    assert_eq!(output.len(), 6, "one event per line: {output:?}");

    let started = events
        .iter()
        .map(|e| &e["fields"])
        .find(|f| f["message"] == "job started")
        .expect("start logged");
    assert_eq!(started["job"], "chatty");
    assert_eq!(started["run_id"], "run-77");
    assert!(started["pid"].as_u64().is_some_and(|p| p > 1), "{started}");
    let finished = events
        .iter()
        .map(|e| &e["fields"])
        .find(|f| f["message"] == "job finished")
        .expect("end logged");
    assert_eq!(finished["job"], "chatty");
    assert_eq!(finished["run_id"], "run-77");
    assert_eq!(finished["exit_code"], 0);
    assert!(finished["duration_ms"].is_u64(), "{finished}");
}

#[tokio::test]
async fn a_grandchild_holding_stdout_does_not_keep_run_from_returning() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    let (job, out) = shell_out(
        "leaves-child",
        r#"sleep 30 & echo $! > "$OUT"; echo done"#,
        &dir,
    );
    let began = Instant::now();
    let report = run_to_end(&job, "r").await;
    let took = began.elapsed();
    let pids = pids(&read(&out));
    let _cleanup = KillOnDrop(pids.clone());

    assert_eq!(report.outcome, RunOutcome::Exited { code: 0 });
    // The leader exits at once; only the bounded drain may hold `run` back.
    assert!(
        took < OUTPUT_DRAIN_AFTER_EXIT + SLACK,
        "run waited {took:?} for output EOF"
    );
    assert_eq!(pids.len(), 1);
    assert!(
        !is_dead(pids[0]),
        "a normal exit must not kill what the job left behind (cronie does not)"
    );
}

/// The tests where orphaned grandchildren matter, again with this process as a child subreaper (as
/// zkcron is as PID 1 of a container): leftover and killed grandchildren then become *our* children,
/// and waiting for the whole group (process-wrap's `ProcessGroupChild::wait`) would block on them.
#[test]
fn as_a_child_subreaper_too() {
    if std::env::var_os(SUBREAPER).is_some() {
        return; // already the re-run
    }
    let tests = [
        "a_grandchild_holding_stdout_does_not_keep_run_from_returning",
        "timeout_stops_the_whole_group_including_grandchildren",
        "a_job_ignoring_sigterm_is_killed_with_its_group_after_the_grace",
        "dropping_the_run_future_kills_the_group",
        "a_cancelled_group_that_dies_at_once_is_not_waited_for_to_the_end_of_its_grace",
    ];
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .arg("--exact")
        .args(tests.map(|test| support::test_name(module_path!(), test)))
        .env(SUBREAPER, "1")
        .output()
        .expect("re-run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "as a subreaper:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("{} passed", tests.len())),
        "all of them ran: {stdout}"
    );
}

/// `job` started through the zkcron binary's launcher, as the daemon starts every job.
fn launched(mut job: JobSpec) -> JobSpec {
    job.launcher = Launcher::Binary(PathBuf::from(env!("CARGO_BIN_EXE_zkcron")));
    job
}

/// `job` run to its end from a run prepared ahead: its launcher started first, then given the go.
async fn run_prepared_to_end(job: &JobSpec, run_id: &str) -> RunReport {
    let ctx = ctx(run_id);
    let prepared = prepare(job, &ctx, None);
    assert!(prepared.pid().is_some(), "a launcher waits");
    run_prepared(job, &ctx, CancellationToken::new(), prepared, None).await
}

#[tokio::test]
async fn a_job_started_either_way_is_the_daemons_own_child_leading_its_own_group() {
    host_env();
    // Its pid, process group (field 5 of stat) and parent (`PPid`). The death signal is not in
    // /proc: the next test shows the launcher's check, and tests/daemon.rs's kill -9 under
    // `forbid` shows a launched job dying with its daemon.
    for prepared in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (job, out) = shell_out(
            "launched",
            r#"
            env > "$OUT"
            echo "$$ $(cut -d' ' -f5 /proc/$$/stat) $(awk '/^PPid/ {print $2}' /proc/$$/status)" > "$OUT.proc"
            "#,
            &dir,
        );
        let job = launched(job);
        let report = if prepared {
            run_prepared_to_end(&job, "run-launched").await
        } else {
            run_to_end(&job, "run-launched").await
        };
        assert_eq!(
            report.outcome,
            RunOutcome::Exited { code: 0 },
            "prepared: {prepared}"
        );
        let env = env_file(&out);
        assert_eq!(
            env.get("ZKCRON_RUN_ID").map(String::as_str),
            Some("run-launched")
        );
        assert!(
            !env.contains_key("NOTIFY_SOCKET"),
            "systemd's variables are the daemon's: {env:?}"
        );
        let proc = read(&dir.path().join("out.proc"));
        let fields: Vec<&str> = proc.split_whitespace().collect();
        assert_eq!(fields.len(), 3, "pid, pgid, ppid: {proc:?}");
        assert_eq!(fields[0], fields[1], "the job leads its own process group");
        assert_eq!(
            fields[2],
            std::process::id().to_string(),
            "the job runs in the process the daemon started: the daemon is its parent"
        );
    }
}

#[tokio::test]
async fn the_launcher_refuses_to_run_a_job_whose_daemon_is_not_its_parent() {
    // As if the daemon died between the spawn and the death signal: the job must not run.
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .arg(zkcron::runner::LAUNCHER_ARG)
        .arg("1") // not our parent
        .args(["now", "0", "-"])
        .args(["/bin/sh", "-c", "touch \"$0\""])
        .arg(&marker)
        .output()
        .expect("launcher");
    assert_eq!(output.status.code(), Some(126));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("the daemon that started this job is gone"),
        "{stderr}"
    );
    assert!(!marker.exists(), "the job did not run");

    // With the right parent it runs.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .arg(zkcron::runner::LAUNCHER_ARG)
        .arg(std::process::id().to_string())
        .args(["now", "0", "-"])
        .args(["/bin/sh", "-c", "touch \"$0\""])
        .arg(&marker)
        .output()
        .expect("launcher");
    assert!(output.status.success(), "{output:?}");
    assert!(marker.exists(), "the job ran");
}

#[tokio::test]
async fn a_missing_program_fails_to_start_at_once_and_ends_127_through_a_prepared_launcher() {
    host_env();
    let missing = "/nonexistent/zkcron-no-such-binary";
    let job = launched(spec("missing", Program::Argv(vec![missing.into()])));
    // Started at its go: the exec fails in the start itself, which says so.
    let report = run_to_end(&job, "r").await;
    assert!(
        failed_to_start(&report).contains("No such file"),
        "{report:?}"
    );
    // A launcher already waiting can only exit, as a shell reports it.
    let report = run_prepared_to_end(&job, "r").await;
    assert_eq!(report.outcome, RunOutcome::Exited { code: 127 });
}

/// The launcher of `zkcron` in `start` mode running `sh -c line`, its stdin fed `input`.
fn launcher_output(start: &str, line: &str, input: &[u8]) -> std::process::Output {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .arg(zkcron::runner::LAUNCHER_ARG)
        .arg(std::process::id().to_string())
        .args([start, "0", "-", "/bin/sh", "-c", line])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("launcher");
    let mut stdin = child.stdin.take().expect("piped");
    // A launcher that refuses its arguments exits before it reads: its stdin is closed by then.
    match stdin.write_all(input) {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {}
        written => written.expect("launcher's stdin"),
    }
    drop(stdin);
    child.wait_with_output().expect("launcher")
}

#[test]
fn a_waiting_launcher_runs_its_job_only_on_the_go_byte_and_hands_on_the_rest_of_stdin() {
    // Closed before the go: the run was given up; nothing runs, and that is no failure.
    let out = launcher_output("on-go", "echo ran", b"");
    assert_eq!(
        (out.status.code(), out.stdout.as_slice()),
        (Some(0), &b""[..])
    );
    let out = launcher_output("on-go", "echo ran", b"x");
    assert_eq!(
        (out.status.code(), out.stdout.as_slice()),
        (Some(0), &b""[..]),
        "only the go byte starts it"
    );

    let out = launcher_output("on-go", "echo ran; cat", b"gpayload");
    assert_eq!(out.stdout, b"ran\n", "on-go: the job's stdin is /dev/null");
    let out = launcher_output("on-go-keep-stdin", "cat", b"gpayload");
    assert_eq!(
        out.stdout, b"payload",
        "the byte after the go is the job's first"
    );

    let out = launcher_output("whenever", "echo ran", b"g");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown start"),
        "{out:?}"
    );
}

#[tokio::test]
async fn a_prepared_run_is_the_waiting_process_itself_and_runs_only_when_started() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    let (job, out) = shell_out("prepared", r#"env > "$OUT"; echo $$ > "$OUT.pid""#, &dir);
    let job = launched(job);
    let prepared = prepare(&job, &ctx("run-prepared"), None);
    let pid = prepared.pid().expect("a launcher waits");
    // The executable, not the command line: the spawn returns once the exec has replaced the
    // child's memory, which is before the kernel has written the new argv into it (an empty
    // cmdline for that moment), but after it has set the new exe.
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("the launcher is alive");
    let launcher = std::fs::canonicalize(env!("CARGO_BIN_EXE_zkcron")).unwrap();
    assert_eq!(
        exe, launcher,
        "still the launcher, not the job, before the go"
    );
    assert!(!out.exists(), "the job has not run");

    let report = run_prepared(
        &job,
        &ctx("run-prepared"),
        CancellationToken::new(),
        prepared,
        None,
    )
    .await;
    assert_eq!(report.outcome, RunOutcome::Exited { code: 0 });
    assert_eq!(
        read(&dir.path().join("out.pid")).trim(),
        pid.to_string(),
        "the job is the prepared process"
    );
    let env = env_file(&out);
    assert_eq!(
        env.get("ZKCRON_RUN_ID").map(String::as_str),
        Some("run-prepared")
    );
    assert_eq!(
        env.get("ZKCRON_FENCING_TOKEN").map(String::as_str),
        Some("42")
    );
}

#[tokio::test]
async fn a_prepared_run_given_up_never_runs_and_leaves_no_process() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    let (job, out) = shell_out("given-up", r#"touch "$OUT""#, &dir);
    let prepared = prepare(&launched(job), &ctx("run-given-up"), None);
    let pid = prepared.pid().expect("a launcher waits");
    drop(prepared);
    assert_all_dead(&[Pid::from_raw(pid as i32)], "the given-up launcher").await;
    assert!(!out.exists(), "the job never ran");
}

#[tokio::test]
async fn a_prepared_submission_run_reads_exactly_its_payload() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    let (job, out) = shell_out("payload", r#"cat > "$OUT""#, &dir);
    let job = launched(job);
    let mut context = ctx("run-payload");
    let payload = b"{\"order\": 17}\n".to_vec();
    context.submission = Some(SubmissionInput {
        traceparent: None,
        id: "s-1".into(),
        payload: Arc::new(payload.clone()),
        requested_by: None,
        marker_names_job: false,
    });
    let prepared = prepare(&job, &context, None);
    assert!(prepared.pid().is_some(), "a launcher waits");
    let report = run_prepared(&job, &context, CancellationToken::new(), prepared, None).await;
    assert_eq!(report.outcome, RunOutcome::Exited { code: 0 });
    assert_eq!(std::fs::read(&out).expect("the job's copy"), payload);
}

#[tokio::test]
async fn a_prepared_run_whose_process_was_killed_is_started_afresh() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    let (job, out) = shell_out("killed", r#"echo $$ > "$OUT""#, &dir);
    let job = launched(job);
    let prepared = prepare(&job, &ctx("run-killed"), None);
    let pid = Pid::from_raw(prepared.pid().expect("a launcher waits") as i32);
    kill(pid, Signal::SIGKILL).expect("kill the waiting launcher");
    assert_all_dead(&[pid], "the killed launcher").await;
    let report = run_prepared(
        &job,
        &ctx("run-killed"),
        CancellationToken::new(),
        prepared,
        None,
    )
    .await;
    assert_eq!(report.outcome, RunOutcome::Exited { code: 0 });
    assert_ne!(read(&out).trim(), pid.to_string(), "a new process ran it");
}

#[tokio::test]
async fn a_prepared_run_given_its_go_early_is_supervised_by_its_run() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    let (job, out) = shell_out("early", r#"echo $$ > "$OUT""#, &dir);
    let job = launched(job);
    let mut prepared = prepare(&job, &ctx("run-early"), None);
    let pid = prepared.pid().expect("a launcher waits");
    prepared.go();
    prepared.go(); // a second go is no second byte: the job's stdin is /dev/null anyway
    let report = run_prepared(
        &job,
        &ctx("run-early"),
        CancellationToken::new(),
        prepared,
        None,
    )
    .await;
    assert_eq!(report.outcome, RunOutcome::Exited { code: 0 });
    assert_eq!(read(&out).trim(), pid.to_string());
}

#[tokio::test]
async fn a_run_cancelled_after_its_go_is_stopped_not_skipped() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    let (job, _) = shell_out("cancelled-after-go", "exec sleep 30", &dir);
    let job = launched(job);
    let mut prepared = prepare(&job, &ctx("run-cancelled"), None);
    let pid = Pid::from_raw(prepared.pid().expect("a launcher waits") as i32);
    prepared.go();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let began = Instant::now();
    let report = run_prepared(&job, &ctx("run-cancelled"), cancel, prepared, None).await;
    assert_eq!(report.outcome, RunOutcome::Cancelled);
    assert!(
        began.elapsed() < GRACE + SLACK,
        "stopped within its grace: {:?}",
        began.elapsed()
    );
    assert_all_dead(&[pid], "the started job").await;
}

/// The wall clock in ms as `date +%s.%N` printed it (`1795…123.456789012`).
fn epoch_ms(text: &str) -> f64 {
    let seconds: f64 = text.trim().replace(',', ".").parse().expect("date +%s.%N");
    seconds * 1000.0
}

/// Runs `job` not before 300 ms from now — prepared and given its go at once, or spawned at its
/// start; the instant on the wall clock, or on the monotonic one (a node corrected to the
/// servers' clock) — and checks that its program (`date +%s.%N > $OUT`) did not start any
/// earlier. 300 ms: a job started at once would be seen starting before it.
async fn assert_held(job: &JobSpec, out: &Path, prepared_early: bool, monotonic: bool) {
    let not_before = Utc::now() + chrono::Duration::milliseconds(300);
    let instant = std::time::Instant::now() + Duration::from_millis(300);
    let deadline = if monotonic {
        Deadline::Monotonic(instant)
    } else {
        Deadline::Wall(not_before)
    };
    let prepared = if prepared_early {
        let mut prepared = prepare(job, &ctx("run-held"), Some(deadline));
        prepared.go();
        prepared
    } else {
        zkcron::runner::Prepared::none()
    };
    let report = run_prepared(
        job,
        &ctx("run-held"),
        CancellationToken::new(),
        prepared,
        Some(deadline),
    )
    .await;
    let since_instant = instant.elapsed();
    assert_eq!(report.outcome, RunOutcome::Exited { code: 0 });
    let started = epoch_ms(&read(out));
    let instant_ms = not_before.timestamp_millis() as f64;
    assert!(
        started >= instant_ms,
        "{:?}, prepared early: {prepared_early}, monotonic: {monotonic}: started {started} before {instant_ms}",
        job.launcher
    );
    assert!(
        report.started_at >= not_before,
        "the report says when the job started"
    );
    // Its duration is its own, not its wait for its instant too (300 ms, issue 50): it fits
    // between the instant and the run's return, however slow a busy machine makes the fork and
    // exec. 50 ms for the two clocks the instant is told on; counting the wait adds 300.
    assert!(
        report.duration <= since_instant + Duration::from_millis(50),
        "{:?}, prepared early: {prepared_early}, monotonic: {monotonic}: the duration counts the wait: {:?}, {since_instant:?} from the instant to the run's end",
        job.launcher,
        report.duration
    );
}

#[tokio::test]
async fn a_job_never_starts_before_its_instant_however_early_its_go_or_spawn() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    let (job, out) = shell_out("held", r#"date +%s.%N > "$OUT""#, &dir);
    for monotonic in [false, true] {
        // Prepared and given its go at once: the launcher holds the exec.
        assert_held(&launched(job.clone()), &out, true, monotonic).await;
        // Spawned afresh through the launcher, and forked with no launcher: held all the same.
        assert_held(&launched(job.clone()), &out, false, monotonic).await;
        assert_held(&job, &out, false, monotonic).await;
    }
}

/// Issue 31, defect 2: a run given its go ahead of its instant, cancelled before the instant
/// came (the lock handed over; a wall clock stepped back so that the instant lay 20 s ahead),
/// ends at once — the instant is the schedule, never how long a cancel takes — and its job
/// never runs. For a prepared launcher and for a fork without one.
#[tokio::test]
async fn a_run_cancelled_before_its_instant_ends_at_once_and_its_job_never_runs() {
    host_env();
    let dir = tempfile::tempdir().unwrap();
    // Far enough that waiting for it could not pass the bound below.
    let instant = chrono::Utc::now() + chrono::Duration::hours(1);
    for (name, job) in [
        (
            "launched",
            launched(shell_out("held", r#"echo ran > "$OUT""#, &dir).0),
        ),
        ("forked", shell_out("held", r#"echo ran > "$OUT""#, &dir).0),
    ] {
        let context = ctx("run-held");
        let prepared = prepare(&job, &context, Some(instant.into()));
        let cancel = CancellationToken::new();
        let run = run_prepared(
            &job,
            &context,
            cancel.clone(),
            prepared,
            Some(instant.into()),
        );
        tokio::pin!(run);
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut run)
                .await
                .is_err(),
            "{name}: held until its instant"
        );
        cancel.cancel();
        // Bounded by the launcher's exit on SIGTERM, far below the job's 30 s grace.
        let report = tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .unwrap_or_else(|_| panic!("{name}: a cancel during the hold waited for the instant"));
        assert_eq!(report.outcome, RunOutcome::CancelledBeforeStart, "{name}");
        assert!(
            !dir.path().join("out").exists(),
            "{name}: the job never ran"
        );
    }
}

/// Set in the re-run of [`a_job_started_either_way_dies_with_its_killed_daemon`] that plays the
/// daemon: the FIFO its jobs announce their pids through.
const PLAY_THE_DAEMON: &str = "ZKCRON_TEST_PLAY_THE_DAEMON";

/// DESIGN.md promise 3 for both ways a job starts: killed outside systemd's clean-up (SIGKILL,
/// OOM), the daemon takes its jobs with it. This test binary, re-run, plays the daemon: on its
/// multi-threaded runtime it starts one job at once and one through a prepared launcher, and is
/// then killed with SIGKILL.
#[test]
fn a_job_started_either_way_dies_with_its_killed_daemon() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    if let Some(announce) = std::env::var_os(PLAY_THE_DAEMON) {
        runtime.block_on(async move {
            host_env();
            let mut job = launched(shell("doomed", r#"echo $$ >> "$ANNOUNCE"; exec sleep 60"#));
            job.env
                .insert("ANNOUNCE".into(), announce.to_string_lossy().into_owned());
            let at_once = {
                let job = job.clone();
                tokio::spawn(async move { run_to_end(&job, "at-once").await })
            };
            let prepared = tokio::spawn(async move { run_prepared_to_end(&job, "prepared").await });
            let _ = tokio::join!(at_once, prepared);
        });
        return;
    }
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (announce, rx) = fifo(&dir);
        let mut daemon = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .arg("--exact")
            .arg(support::test_name(
                module_path!(),
                "a_job_started_either_way_dies_with_its_killed_daemon",
            ))
            .env(PLAY_THE_DAEMON, &announce)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("re-run the test binary");
        let daemon_pid = Pid::from_raw(daemon.id() as i32);
        let _cleanup = KillOnDrop(vec![daemon_pid]);
        // Both jobs append to the FIFO; the reader sees EOF once both have written and closed it.
        let mut jobs = announced(rx).await;
        if jobs.len() < 2 {
            // The first closed the FIFO before the second opened it: read again for the second.
            jobs.extend(announced(read_fifo(&announce)).await);
        }
        assert_eq!(jobs.len(), 2, "both jobs started: {jobs:?}");
        let _jobs_cleanup = KillOnDrop(jobs.clone());
        for &pid in &jobs {
            assert!(!is_dead(pid), "job {pid} runs before the daemon is killed");
        }
        kill(daemon_pid, Signal::SIGKILL).expect("kill -9 the daemon");
        daemon.wait().expect("reap the daemon");
        assert_all_dead(&jobs, "a job of the killed daemon").await;
    });
}
