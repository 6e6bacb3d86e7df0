//! Runs one job as a child process in its own process group.
//!
//! Owns: spawning with the job env contract (DESIGN.md "Job contract"), the timeout, the
//! SIGTERM → grace → SIGKILL sequence, job output into tracing, the exit status.
//! Must not: talk to ZooKeeper or decide *whether* to run (the daemon decides, the ledger records).
//!
//! What happens to a run's processes:
//! - The job is the leader of a new process group, so every process it starts (unless it leaves the
//!   group with `setsid`/`setpgid`) can be signalled at once.
//! - On `timeout` or `cancel` the whole group gets SIGTERM, and whatever is left of the group when
//!   `kill_grace` has passed gets SIGKILL. No grandchild outlives a stopped run.
//! - On a normal exit of the job nothing is killed: processes the job left behind (`daemon &`)
//!   keep running, as under cronie. Their inherited stdout/stderr is read for at most
//!   [`OUTPUT_DRAIN_AFTER_EXIT`] more, so they cannot keep [`run`] from returning.
//! - Dropping the [`run`] future while the job runs SIGKILLs the group: an abandoned run leaks no
//!   process.

use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::ids::JobName;
use crate::run::{
    JobSpec, Launcher, OutputTail, Program, RunAs, RunContext, RunOutcome, RunReport,
};

mod error;
mod group;
mod hold;
mod launch;
mod output;
mod spawn;

pub use error::StartError;
use error::error_chain;
use group::Group;
#[cfg(test)]
use group::contract_env;
pub use hold::{hold_unless_cancelled, hold_until};
use launch::Start;
pub use launch::{LAUNCHER_ARG, launch_job};

use crate::ensemble_clock::Deadline;
use crate::output_store::{RunOutput, Stream};
pub use output::MAX_LINE_BYTES;
use output::{Lines, log_output};

/// How long output is still read after the job's leader process has exited (or been stopped).
///
/// A process the job left behind may hold stdout/stderr open for hours; the run is over anyway.
pub const OUTPUT_DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

/// Why this process cannot start jobs as `user`, if it cannot: it is another user and lacks
/// `CAP_SETUID` or `CAP_SETGID` (it is not root, or its unit took them away).
pub fn cannot_run_as(user: &RunAs) -> Option<String> {
    let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
    if uid.as_raw() == user.uid && gid.as_raw() == user.gid {
        return None;
    }
    // CAP_SETGID is bit 6, CAP_SETUID bit 7 of the effective set (capabilities(7)).
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    let needed = (1 << 6) | (1 << 7);
    (effective & needed != needed).then(|| {
        format!(
            "this daemon runs as uid {uid} without CAP_SETUID and CAP_SETGID, so it cannot start \
             a job as user {:?} (uid {}): run it as root (the unit's default) or give it both \
             capabilities (AmbientCapabilities=CAP_SETUID CAP_SETGID)",
            user.name, user.uid
        )
    })
}

/// One thing that would keep a job from starting on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unstartable {
    /// The job's key it is about: `command` or `working_dir`.
    pub key: &'static str,
    pub why: String,
}

/// What would keep `spec` from starting on this host, found without starting it: a command
/// that is not an executable file here (looked up on this process's `PATH` when it has no `/`),
/// a working directory that is not a directory. For `zkcron check`: warnings, since a schedule
/// file may be checked on another host than the ones that run it.
pub fn preflight(spec: &JobSpec) -> Vec<Unstartable> {
    let mut problems = Vec::new();
    if let Program::Argv(argv) = &spec.program {
        if let Some((program, Err(why))) =
            argv.first().map(|program| (program, executable(program)))
        {
            problems.push(Unstartable {
                key: "command",
                why: format!("{program:?}: {why}"),
            });
        }
    }
    if let Some(dir) = &spec.working_dir {
        let why = match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => None,
            Ok(_) => Some(format!("{}: not a directory", dir.display())),
            Err(err) => Some(format!("{}: {err}", dir.display())),
        };
        problems.extend(why.map(|why| Unstartable {
            key: "working_dir",
            why,
        }));
    }
    problems
}

/// Whether `program` is what `exec` would run: an executable file, by its path or on `PATH`.
fn executable(program: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let check = |path: &std::path::Path| match std::fs::metadata(path) {
        Err(err) => Err(err.to_string()),
        Ok(meta) if !meta.is_file() => Err("not a file".to_owned()),
        Ok(meta) if meta.permissions().mode() & 0o111 == 0 => Err("not executable".to_owned()),
        Ok(_) => Ok(()),
    };
    if program.contains('/') {
        return check(std::path::Path::new(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|dir| check(&dir.join(program)).is_ok()) {
        Ok(())
    } else {
        Err("not found on this host's PATH".to_owned())
    }
}

/// Runs the job to its end. `cancel` (e.g. on_lost = cancel, or daemon shutdown) stops it: SIGTERM to
/// the whole process group, SIGKILL to the group after `kill_grace`. `spec.timeout` does the same.
///
/// Never fails: a job that cannot be started is [`RunOutcome::FailedToStart`], logged as a warning.
/// A token that is already cancelled returns [`RunOutcome::CancelledBeforeStart`] without
/// starting anything.
///
/// A stopped run returns within `kill_grace` plus [`OUTPUT_DRAIN_AFTER_EXIT`] of the stop (5 s more
/// only if the leader hangs in the kernel after SIGKILL): the daemon can plan its shutdown on that.
///
/// # Cancellation safety
/// Dropping the future before the job has exited SIGKILLs its process group. After a normal exit
/// (while leftover output is drained) dropping it kills nothing.
pub async fn run(spec: &JobSpec, ctx: &RunContext, cancel: CancellationToken) -> RunReport {
    run_prepared(spec, ctx, cancel, Prepared::none(), None).await
}

/// A run whose process was started ahead of its instant by [`prepare`]: the launcher waits for
/// its go ([`Prepared::go`], or [`run_prepared`]'s). Dropped before it, the process ends without
/// running the job.
pub struct Prepared(Option<Box<Waiting>>);

/// A launcher waiting for its go on its stdin.
struct Waiting {
    group: Group,
    go: tokio::net::unix::pipe::Sender,
    /// When the go was given: the job's start.
    given: Option<(DateTime<Utc>, Instant)>,
}

impl Prepared {
    /// Nothing started ahead: [`run_prepared`] spawns the job at its start.
    pub fn none() -> Self {
        Prepared(None)
    }

    /// The waiting process's pid (the job's, once it has its go), if one waits.
    pub fn pid(&self) -> Option<u32> {
        self.0.as_ref().map(|waiting| waiting.group.pid)
    }

    /// Gives the go now, with one write(2) and no await: the job starts before its
    /// [`run_prepared`] is even polled (which then supervises it). A launcher found gone never ran
    /// the job and is dropped; `run_prepared` spawns the job afresh. Once given, again is a no-op.
    pub fn go(&mut self) {
        let Some(waiting) = &mut self.0 else {
            return;
        };
        if waiting.given.is_some() {
            return;
        }
        // The pipe is new and empty: one byte never finds it full.
        match nix::unistd::write(&waiting.go, &[launch::GO]) {
            Ok(1) => waiting.given = Some((Utc::now(), Instant::now())),
            written => {
                let error =
                    written.map_or_else(|e| e.to_string(), |n| format!("{n} bytes written"));
                warn!(job = %waiting.group.job, pid = waiting.group.pid, error,
                      "the job's prepared process is gone; starting it afresh");
                // It never had the go: not a run abandoned.
                waiting.group.kill_group_on_drop = false;
                self.0 = None;
            }
        }
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if let Some(waiting) = &mut self.0
            && waiting.given.is_none()
        {
            // Not a run abandoned: the job never ran. Its stdin closes with `go`, on which the
            // launcher exits by itself; KillOnDrop ends it anyway.
            waiting.group.kill_group_on_drop = false;
        }
    }
}

impl fmt::Debug for Prepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pid = self.0.as_ref().map(|waiting| waiting.group.pid);
        let given = self
            .0
            .as_ref()
            .is_some_and(|waiting| waiting.given.is_some());
        f.debug_struct("Prepared")
            .field("pid", &pid)
            .field("given", &given)
            .finish()
    }
}

/// Starts the run's process ahead of its instant, waiting for [`run_prepared`]'s go: the
/// launcher's load is then off the path from the instant to the job's first instruction. Only
/// with [`Launcher::Binary`]; otherwise, or when the spawn fails (the start will say why), nothing
/// waits and the job is spawned at its start.
///
/// The job starts at its go, and not before `not_before` (its launcher holds it until then).
pub fn prepare(spec: &JobSpec, ctx: &RunContext, not_before: Option<Deadline>) -> Prepared {
    if matches!(spec.program, Program::Http(_)) {
        return Prepared::none();
    }
    let start = if ctx.submission.is_some() {
        Start::OnGoKeepStdin
    } else {
        Start::OnGo
    };
    let Launcher::Binary(launcher) = &spec.launcher else {
        return Prepared::none();
    };
    let waiting = Group::launch(spec, ctx, launcher, start, not_before)
        .ok()
        .and_then(|mut group| {
            let go = group.stdin.take()?;
            Some(Box::new(Waiting {
                group,
                go,
                given: None,
            }))
        });
    if let Some(waiting) = &waiting {
        debug!(job = %spec.name, run_id = ctx.run_id, pid = waiting.group.pid, "job prepared");
    }
    Prepared(waiting)
}

/// [`run`], giving the go to `prepared`'s process if one waits and has not had it (and spawning
/// the job afresh if that process is gone: without its go it never ran the job). The job's
/// program starts not before `not_before`, whichever way it is started; until then the run may
/// already be cancelled, timed and waited for.
pub async fn run_prepared(
    spec: &JobSpec,
    ctx: &RunContext,
    cancel: CancellationToken,
    prepared: Prepared,
    not_before: Option<Deadline>,
) -> RunReport {
    let output = RunOutput::not_kept();
    run_keeping(spec, ctx, cancel, (prepared, not_before), output).await
}

/// [`run_prepared`], its output kept whole in `output` too (`crate::output_store`), which ends
/// with the run's outcome.
pub async fn run_keeping(
    spec: &JobSpec,
    ctx: &RunContext,
    cancel: CancellationToken,
    (prepared, not_before): (Prepared, Option<Deadline>),
    output: RunOutput,
) -> RunReport {
    let job = &spec.name;
    let run_id = ctx.run_id.as_str();
    let (mut group, stdin, (started_at, spawned)) =
        match start_job(spec, ctx, &cancel, prepared, not_before).await {
            Ok(started) => started,
            Err(never_started) => {
                output.end_with(&never_started.outcome).await;
                return never_started;
            }
        };
    // Given early, a prepared job still starts at `not_before`: its launcher holds it. What the
    // daemon does about the start (its log line, reading output) waits until then too, so that
    // none of it competes with the job's exec for a CPU.
    // The job's own time starts when it is let go, not when it was spawned to wait for its
    // instant: its duration and its timeout count from there (issue 50). Its launcher lets it
    // go when the wall clock reaches `not_before`: the instant that is, on the spawn's clock
    // (this task's own wake-up comes a little later).
    let on_wall = not_before.map(|deadline| deadline.on_wall());
    let hold = on_wall
        .and_then(|at| (at - started_at).to_std().ok())
        .unwrap_or_default();
    let started_at = on_wall.map_or(started_at, |at| started_at.max(at));
    let pid = group.pid;
    let released = hold_unless_cancelled(not_before, &cancel).await;
    let since = if released {
        spawned.checked_add(hold).unwrap_or(spawned)
    } else {
        spawned
    };
    if released {
        info!(
            job = %job,
            run_id,
            pid,
            token = ctx.fencing_token.0,
            attempt = ctx.attempt,
            resumed = ctx.resumed,
            "job started"
        );
    } else {
        // Its launcher has not exec'd the job: the supervision below stops it at once.
        info!(job = %job, run_id, pid, "run cancelled before its instant; stopping its launcher");
    }
    let Ended {
        outcome,
        status,
        duration,
        output,
        whole,
    } = supervise_reading_output(&mut group, spec, ctx, &cancel, (stdin, output), since).await;
    // A launcher stopped before its instant never exec'd the job.
    let outcome = if released {
        outcome
    } else {
        RunOutcome::CancelledBeforeStart
    };
    whole.end_with(&outcome).await;
    let exit_code = status.and_then(|s| s.code());
    let signal = status.and_then(|s| s.signal());
    info!(
        job = %job,
        run_id,
        pid,
        outcome = %outcome,
        exit_code,
        signal,
        duration_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        "job finished"
    );
    RunReport {
        outcome,
        started_at,
        duration,
        retry_after: None,
        output,
    }
}

/// A started job: its process group, its stdin when it takes a submission's payload, and when
/// it started (the record's clock, and the run's own for its duration).
type Started = (
    Group,
    Option<tokio::net::unix::pipe::Sender>,
    (DateTime<Utc>, Instant),
);

/// Gives `prepared`'s process its go, or spawns the job afresh where none waits (or it is gone);
/// a run that never starts (cancelled first, or failed to start) is `Err` with its report.
async fn start_job(
    spec: &JobSpec,
    ctx: &RunContext,
    cancel: &CancellationToken,
    mut prepared: Prepared,
    not_before: Option<Deadline>,
) -> Result<Started, RunReport> {
    let job = &spec.name;
    let run_id = ctx.run_id.as_str();
    let given = prepared.0.as_ref().and_then(|waiting| waiting.given);
    if given.is_none() && cancel.is_cancelled() {
        info!(job = %job, run_id, "run cancelled before it started");
        return Err(RunReport {
            outcome: RunOutcome::CancelledBeforeStart,
            started_at: Utc::now(),
            duration: Duration::ZERO,
            retry_after: None,
            output: String::new(),
        });
    }

    prepared.go();
    if let Some(waiting) = prepared.0.take() {
        let Waiting { group, go, given } = *waiting;
        let keeps_stdin = group.start == Start::OnGoKeepStdin;
        let given = given.unwrap_or_else(|| (Utc::now(), Instant::now()));
        return Ok((group, keeps_stdin.then_some(go), given));
    }
    // No launcher to hold the exec: the spawn waits, but not past a cancel.
    if !hold_unless_cancelled(not_before, cancel).await {
        info!(job = %job, run_id, "run cancelled before its instant; nothing was started");
        return Err(RunReport {
            outcome: RunOutcome::CancelledBeforeStart,
            started_at: Utc::now(),
            duration: Duration::ZERO,
            retry_after: None,
            output: String::new(),
        });
    }
    // The job starts now, however late this task woke from its hold: a busy machine's late
    // wake-up is not the job's own time.
    let (started_at, spawned) = (Utc::now(), Instant::now());
    match Group::spawn_now(spec, ctx) {
        Ok(mut group) => {
            let stdin = group.stdin.take();
            Ok((group, stdin, (started_at, spawned)))
        }
        Err(err) => {
            let error = error_chain(&err);
            warn!(job = %job, run_id, error, "job failed to start");
            Err(RunReport {
                outcome: RunOutcome::FailedToStart { error },
                started_at,
                duration: spawned.elapsed(),
                retry_after: None,
                output: String::new(),
            })
        }
    }
}

/// How a supervised job ended: its outcome, its leader's exit status (none when it was not
/// reaped), how long it ran, and the tail of its output.
struct Ended {
    outcome: RunOutcome,
    status: Option<ExitStatus>,
    duration: Duration,
    output: String,
    whole: RunOutput,
}

/// Supervises the started job to its end while reading its output, then reaps what it left
/// behind and reads the output a little longer. `since`: when the job was let go (its timeout
/// and its duration count from there).
async fn supervise_reading_output(
    group: &mut Group,
    spec: &JobSpec,
    ctx: &RunContext,
    cancel: &CancellationToken,
    (stdin, whole): (Option<tokio::net::unix::pipe::Sender>, RunOutput),
    since: Instant,
) -> Ended {
    let job = &spec.name;
    let run_id = ctx.run_id.as_str();
    let stdout = group.stdout.take();
    let stderr = group.stderr.take();
    let payload = ctx.submission.as_ref().map(|s| Arc::clone(&s.payload));
    let lines = Mutex::new(Lines {
        tail: OutputTail::default(),
        whole,
    });
    let output = async {
        // Biased: stdout is read before stderr whenever both have lines waiting, as they do
        // when a job writes one then the other and exits. join!'s default rotates which it
        // polls first, and the tail then told them in either order.
        tokio::join!(
            biased;
            feed_stdin(stdin, payload, job, run_id),
            log_output(stdout, Stream::Stdout, job, run_id, &lines),
            log_output(stderr, Stream::Stderr, job, run_id, &lines),
        );
    };
    tokio::pin!(output);
    let mut output_done = false;

    // Output is read while the job runs (a full pipe would block it), in this same future: no
    // task to leak when the caller drops `run`.
    let (outcome, status) = {
        let supervision = group.supervise(spec, cancel, since);
        tokio::pin!(supervision);
        loop {
            tokio::select! {
                end = &mut supervision => break end,
                () = &mut output, if !output_done => output_done = true,
            }
        }
    };
    let duration = since.elapsed();
    if status.is_some() {
        // Only once the leader is reaped: reaping it here would rob tokio of its exit status.
        group.reap_orphans();
    }

    if !output_done && timeout(OUTPUT_DRAIN_AFTER_EXIT, &mut output).await.is_err() {
        warn!(
            job = %job,
            run_id,
            pid = group.pid,
            "processes left behind by the job still hold its output open; no longer reading it"
        );
    }
    // Whatever is still unread stays unread: `output` is dropped with this function.
    let (tail, whole) = lines
        .lock()
        .map(|mut lines| {
            let whole = std::mem::take(&mut lines.whole);
            (std::mem::take(&mut lines.tail), whole)
        })
        .unwrap_or_default();
    Ended {
        outcome,
        status,
        duration,
        output: tail.into_text(),
        whole,
    }
}

/// Writes a submission's payload to the job's stdin and closes it. A job that exits without
/// reading it all is its own business: that is logged, not an error.
async fn feed_stdin(
    stdin: Option<tokio::net::unix::pipe::Sender>,
    payload: Option<Arc<Vec<u8>>>,
    job: &JobName,
    run_id: &str,
) {
    let (Some(mut stdin), Some(payload)) = (stdin, payload) else {
        return;
    };
    if let Err(err) = tokio::io::AsyncWriteExt::write_all(&mut stdin, &payload).await {
        tracing::debug!(job = %job, run_id, error = %err, "job did not read all of its payload");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::ids::{FencingToken, NodeId};
    use crate::run::Program;

    #[test]
    fn scheduled_at_is_utc_millis_with_z() {
        let ctx = RunContext {
            run_id: "r".into(),
            scheduled_at: DateTime::from_timestamp_millis(1_795_314_600_007).unwrap(),
            node: NodeId::new("n"),
            fencing_token: FencingToken(3),
            attempt: 1,
            resumed: false,
            backfill: false,
            submission: None,
            parent_runs: Vec::new(),
            trace: None,
        };
        let spec = JobSpec {
            name: JobName::new("j"),
            program: Program::Shell("true".into()),
            working_dir: None,
            env: BTreeMap::new(),
            timeout: None,
            kill_grace: Duration::ZERO,
            launcher: Launcher::Direct,
            user: None,
        };
        let env = contract_env(&spec, &ctx);
        assert_eq!(env[2].1, "2026-11-22T02:30:00.007Z");
        assert_eq!(env[3].1, "1795314600007");
    }
}
