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

use std::error::Error as _;
use std::fmt;
use std::future::pending;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use process_wrap::tokio::{ChildWrapper, CommandWrap, KillOnDrop, ProcessGroup};
use tokio::time::{Instant, sleep_until, timeout, timeout_at};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::ids::JobName;
use crate::run::{JobSpec, Launcher, OutputTail, Program, RunContext, RunOutcome, RunReport};

mod hold;
mod launch;
mod output;

pub use hold::{hold_unless_cancelled, hold_until};
use launch::Start;
pub use launch::{LAUNCHER_ARG, launch_job};

pub use output::MAX_LINE_BYTES;
use output::log_output;

/// How long output is still read after the job's leader process has exited (or been stopped).
///
/// A process the job left behind may hold stdout/stderr open for hours; the run is over anyway.
pub const OUTPUT_DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

/// How long to wait for the leader to disappear after SIGKILL. Only a process stuck in the kernel
/// (uninterruptible sleep) takes longer; the run is reported anyway and tokio reaps it later.
const EXIT_AFTER_KILL: Duration = Duration::from_secs(5);
/// How often a stopped job's group is looked at once its leader has exited: nothing signals that
/// a process group has become empty.
const GROUP_GONE_POLL: Duration = Duration::from_millis(50);

/// Variables by which systemd talks to *the daemon*: a job that inherited them could send
/// `READY=1`/`WATCHDOG=1` for it or grab its sockets (STYLE.md §7 "Runner").
const SYSTEMD_VARS: [&str; 6] = [
    "NOTIFY_SOCKET",
    "WATCHDOG_PID",
    "WATCHDOG_USEC",
    "LISTEN_PID",
    "LISTEN_FDS",
    "LISTEN_FDNAMES",
];

/// Why a job could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// `Program::Argv` with no elements.
    #[error("job {job} has an empty command")]
    EmptyCommand {
        /// The job.
        job: JobName,
    },
    /// An HTTP target is a request, sent by `delivery`, never a process.
    #[error("job {job} has an http target: it is delivered, not run as a process")]
    NotAProcess {
        /// The job.
        job: JobName,
    },
    /// The working directory is missing, not a directory or not accessible.
    #[error("working directory {} of job {job} is unusable", dir.display())]
    WorkingDir {
        /// The job.
        job: JobName,
        /// The configured directory.
        dir: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `fork`/`exec` failed: missing binary, not executable, bad environment, ….
    #[error("cannot start {program} for job {job}")]
    Spawn {
        /// The job.
        job: JobName,
        /// The executable as configured.
        program: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// What would keep `spec` from starting on this host, found without starting it: a command
/// that is not an executable file here (looked up on this process's `PATH` when it has no `/`),
/// a working directory that is not a directory. For `zkcron check`: warnings, since a schedule
/// file may be checked on another host than the ones that run it.
pub fn preflight(spec: &JobSpec) -> Vec<String> {
    let mut problems = Vec::new();
    if let Program::Argv(argv) = &spec.program {
        if let Some(Err(why)) = argv.first().map(|program| executable(program)) {
            problems.push(format!("command {:?}: {why}", argv[0]));
        }
    }
    if let Some(dir) = &spec.working_dir {
        match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => problems.push(format!("working_dir {}: not a directory", dir.display())),
            Err(err) => problems.push(format!("working_dir {}: {err}", dir.display())),
        }
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
/// A token that is already cancelled returns [`RunOutcome::Cancelled`] without starting anything.
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
pub struct Prepared(Option<Waiting>);

/// A launcher waiting for its go on its stdin.
struct Waiting {
    group: Group,
    go: tokio::process::ChildStdin,
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
pub fn prepare(spec: &JobSpec, ctx: &RunContext, not_before: Option<DateTime<Utc>>) -> Prepared {
    if spec.launcher == Launcher::Fork || matches!(spec.program, Program::Http(_)) {
        return Prepared::none();
    }
    let start = if ctx.submission.is_some() {
        Start::OnGoKeepStdin
    } else {
        Start::OnGo
    };
    let waiting = Group::spawn(spec, ctx, start, not_before)
        .ok()
        .and_then(|mut group| {
            let go = group.child.stdin().take()?;
            Some(Waiting {
                group,
                go,
                given: None,
            })
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
    not_before: Option<DateTime<Utc>>,
) -> RunReport {
    let job = &spec.name;
    let run_id = ctx.run_id.as_str();
    let (mut group, stdin, (started_at, spawned)) =
        match start_job(spec, ctx, &cancel, prepared, not_before).await {
            Ok(started) => started,
            Err(never_started) => return never_started,
        };
    // Given early, a prepared job still starts at `not_before`: its launcher holds it. What the
    // daemon does about the start (its log line, reading output) waits until then too, so that
    // none of it competes with the job's exec for a CPU.
    let started_at = not_before.map_or(started_at, |at| started_at.max(at));
    let pid = group.pid;
    if hold_unless_cancelled(not_before, &cancel).await {
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
    } = supervise_reading_output(&mut group, spec, ctx, &cancel, stdin, spawned).await;
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
    Option<tokio::process::ChildStdin>,
    (DateTime<Utc>, Instant),
);

/// Gives `prepared`'s process its go, or spawns the job afresh where none waits (or it is gone);
/// a run that never starts (cancelled first, or failed to start) is `Err` with its report.
async fn start_job(
    spec: &JobSpec,
    ctx: &RunContext,
    cancel: &CancellationToken,
    mut prepared: Prepared,
    not_before: Option<DateTime<Utc>>,
) -> Result<Started, RunReport> {
    let job = &spec.name;
    let run_id = ctx.run_id.as_str();
    let given = prepared.0.as_ref().and_then(|waiting| waiting.given);
    if given.is_none() && cancel.is_cancelled() {
        info!(job = %job, run_id, "run cancelled before it started");
        return Err(RunReport {
            outcome: RunOutcome::Cancelled,
            started_at: Utc::now(),
            duration: Duration::ZERO,
            retry_after: None,
            output: String::new(),
        });
    }

    prepared.go();
    if let Some(Waiting { group, go, given }) = prepared.0.take() {
        let keeps_stdin = group.start == Start::OnGoKeepStdin;
        let given = given.unwrap_or_else(|| (Utc::now(), Instant::now()));
        return Ok((group, keeps_stdin.then_some(go), given));
    }
    let (started_at, spawned) = (Utc::now(), Instant::now());
    // No launcher to hold the exec: the spawn waits, but not past a cancel.
    if spec.launcher == Launcher::Fork && !hold_unless_cancelled(not_before, cancel).await {
        info!(job = %job, run_id, "run cancelled before its instant; nothing was started");
        return Err(RunReport {
            outcome: RunOutcome::Cancelled,
            started_at,
            duration: Duration::ZERO,
            retry_after: None,
            output: String::new(),
        });
    }
    match Group::spawn(spec, ctx, Start::Now, not_before) {
        Ok(mut group) => {
            let stdin = group.child.stdin().take();
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
}

/// Supervises the started job to its end while reading its output, then reaps what it left
/// behind and reads the output a little longer.
async fn supervise_reading_output(
    group: &mut Group,
    spec: &JobSpec,
    ctx: &RunContext,
    cancel: &CancellationToken,
    stdin: Option<tokio::process::ChildStdin>,
    spawned: Instant,
) -> Ended {
    let job = &spec.name;
    let run_id = ctx.run_id.as_str();
    let stdout = group.child.stdout().take();
    let stderr = group.child.stderr().take();
    let payload = ctx.submission.as_ref().map(|s| Arc::clone(&s.payload));
    let tail = Mutex::new(OutputTail::default());
    let output = async {
        tokio::join!(
            feed_stdin(stdin, payload, job, run_id),
            log_output(stdout, "stdout", job, run_id, &tail),
            log_output(stderr, "stderr", job, run_id, &tail),
        );
    };
    tokio::pin!(output);
    let mut output_done = false;

    // Output is read while the job runs (a full pipe would block it), in this same future: no
    // task to leak when the caller drops `run`.
    let (outcome, status) = {
        let supervision = group.supervise(spec, cancel, spawned);
        tokio::pin!(supervision);
        loop {
            tokio::select! {
                end = &mut supervision => break end,
                () = &mut output, if !output_done => output_done = true,
            }
        }
    };
    let duration = spawned.elapsed();
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
    let output = tail
        .lock()
        .map(|mut kept| std::mem::take(&mut *kept).into_text())
        .unwrap_or_default();
    Ended {
        outcome,
        status,
        duration,
        output,
    }
}

/// The running job: its leader process and the group it leads. Dropped while `kill_group_on_drop`
/// is set (the job has not been seen to end), it SIGKILLs the whole group.
struct Group {
    job: JobName,
    child: Box<dyn ChildWrapper>,
    pid: u32,
    pgid: Pid,
    /// When its launcher execs the job.
    start: Start,
    kill_group_on_drop: bool,
}

impl Group {
    fn spawn(
        spec: &JobSpec,
        ctx: &RunContext,
        start: Start,
        not_before: Option<DateTime<Utc>>,
    ) -> Result<Group, StartError> {
        let job = &spec.name;
        if matches!(spec.program, Program::Http(_)) {
            return Err(StartError::NotAProcess { job: job.clone() });
        }
        let (program, args) = spec
            .program
            .argv()
            .ok_or_else(|| StartError::EmptyCommand { job: job.clone() })?;
        if let Some(dir) = &spec.working_dir {
            // Checked first: exec reports a bad directory as ENOENT, indistinguishable from a
            // missing binary.
            let unusable = |source| StartError::WorkingDir {
                job: job.clone(),
                dir: dir.clone(),
                source,
            };
            // One stat, no slower than the fork/exec below (tokio's `fs` feature is not enabled).
            let meta = std::fs::metadata(dir).map_err(unusable)?;
            if !meta.is_dir() {
                return Err(unusable(io::ErrorKind::NotADirectory.into()));
            }
        }

        let mut command = match &spec.launcher {
            Launcher::Fork => CommandWrap::with_new(program, |command| {
                command.args(args);
                // If zkcron itself is killed (SIGKILL, OOM) outside systemd's cgroup clean-up,
                // its job must not outlive it and overlap the next owner's run (DESIGN.md
                // promise 3).
                // SAFETY: between fork and exec this runs only prctl(2), which is
                // async-signal-safe.
                unsafe {
                    command.pre_exec(|| {
                        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                            .map_err(io::Error::from)
                    });
                }
            }),
            // The launcher sets the same signal, then execs the program in its place.
            Launcher::Binary(launcher) => CommandWrap::with_new(launcher, |command| {
                command
                    .args(launch::launcher_args(start, not_before))
                    .arg(program)
                    .args(args);
            }),
        };
        {
            let command = command.command_mut();
            command
                .stdin(if ctx.submission.is_some() || start != Start::Now {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .envs(&spec.env);
            for key in SYSTEMD_VARS {
                command.env_remove(key);
            }
            command.envs(contract_env(spec, ctx));
            if let Some(dir) = &spec.working_dir {
                command.current_dir(dir);
            }
        }
        // KillOnDrop only kills the leader (tokio's `kill_on_drop`); `Group::drop` kills the group.
        command.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
        let spawn_error = |source| StartError::Spawn {
            job: job.clone(),
            program: program.to_owned(),
            source,
        };
        let child = command.spawn().map_err(spawn_error)?;
        let pid = child.id().ok_or_else(|| {
            spawn_error(io::Error::other(
                "the process has no pid right after spawning",
            ))
        })?;
        // `ProcessGroup::leader()` makes the leader's pid the group id.
        let pgid = i32::try_from(pid)
            .map(Pid::from_raw)
            .map_err(|_| spawn_error(io::Error::other(format!("pid {pid} out of range"))))?;
        Ok(Group {
            job: job.clone(),
            child,
            pid,
            pgid,
            start,
            kill_group_on_drop: true,
        })
    }

    /// Waits for the job's end, stopping its group on timeout or cancellation. Returns the outcome
    /// and the leader's exit status when it was observed.
    async fn supervise(
        &mut self,
        spec: &JobSpec,
        cancel: &CancellationToken,
        spawned: Instant,
    ) -> (RunOutcome, Option<ExitStatus>) {
        let job = &spec.name;
        let deadline = spec.timeout.map(|t| spawned + t);
        let timed_out = async {
            match deadline {
                Some(at) => sleep_until(at).await,
                None => pending().await,
            }
        };
        let stop = tokio::select! {
            // A job that has exited is reported as such even when its deadline passed meanwhile.
            biased;
            status = self.wait_leader() => return self.exited(status),
            () = cancel.cancelled() => {
                info!(job = %job, pid = self.pid, "run cancelled; stopping its process group");
                RunOutcome::Cancelled
            }
            () = timed_out => {
                warn!(job = %job, pid = self.pid, timeout = ?spec.timeout,
                      "job timed out; stopping its process group");
                RunOutcome::TimedOut
            }
        };
        let status = self.terminate(spec.kill_grace, job).await;
        (stop, status)
    }

    /// The leader exited by itself. Its leftover group members are left alone, as cronie does.
    fn exited(&mut self, status: io::Result<ExitStatus>) -> (RunOutcome, Option<ExitStatus>) {
        match status {
            Ok(status) => {
                self.kill_group_on_drop = false;
                let outcome = match (status.code(), status.signal()) {
                    (Some(code), _) => RunOutcome::Exited { code },
                    (None, Some(signal)) => RunOutcome::Signaled { signal },
                    // Neither exited nor signalled: not produced by wait(2) for a terminated child.
                    (None, None) => RunOutcome::WaitFailed {
                        error: format!("unrecognised wait status {status:?}"),
                    },
                };
                (outcome, Some(status))
            }
            // We cannot follow the job any more: kill the group rather than leave it unwatched.
            Err(err) => {
                self.signal(Signal::SIGKILL);
                self.kill_group_on_drop = false;
                (
                    RunOutcome::WaitFailed {
                        error: err.to_string(),
                    },
                    None,
                )
            }
        }
    }

    /// SIGTERM to the group; SIGKILL to whatever is left of it once `grace` has passed. Returns as
    /// soon as the group is gone, or when the leader has exited after SIGKILL.
    async fn terminate(&mut self, grace: Duration, job: &JobName) -> Option<ExitStatus> {
        self.signal(Signal::SIGTERM);
        let grace_ends = Instant::now() + grace;
        let status = match timeout_at(grace_ends, self.wait_leader()).await {
            Ok(Ok(status)) => {
                // The leader is gone; its group lives on while any member does (a zombie counts
                // until its new parent reaps it: us, when zkcron is a child subreaper). Members
                // get the rest of the grace, then SIGKILL — but no longer than they live: a
                // stopping owner holds its forbid guard until this returns.
                loop {
                    self.reap_orphans();
                    if !self.group_exists() {
                        break;
                    }
                    let now = Instant::now();
                    if now >= grace_ends {
                        self.signal(Signal::SIGKILL);
                        break;
                    }
                    sleep_until(grace_ends.min(now + GROUP_GONE_POLL)).await;
                }
                Some(status)
            }
            Ok(Err(err)) => {
                error!(job = %job, pid = self.pid, error = %err,
                       "cannot wait for the job; killing its group");
                self.signal(Signal::SIGKILL);
                None
            }
            Err(_grace_over) => {
                warn!(job = %job, pid = self.pid, ?grace,
                      "job outlived its grace; sending SIGKILL to its group");
                self.signal(Signal::SIGKILL);
                match timeout(EXIT_AFTER_KILL, self.wait_leader()).await {
                    Ok(Ok(status)) => Some(status),
                    Ok(Err(err)) => {
                        error!(job = %job, pid = self.pid, error = %err,
                               "cannot wait for the killed job");
                        None
                    }
                    Err(_) => {
                        error!(job = %job, pid = self.pid, bound = ?EXIT_AFTER_KILL,
                               "job did not exit after SIGKILL; giving up on it");
                        None
                    }
                }
            }
        };
        self.kill_group_on_drop = false;
        status
    }

    /// Waits for the leader only. process-wrap's `ProcessGroupChild::wait` would then also block
    /// until every group member that is *our* child has exited: when zkcron is a child subreaper
    /// (PID 1 in a container), orphaned grandchildren are, and a leftover `daemon &` would keep
    /// `run` from returning.
    ///
    /// Cancellation safe (tokio's `Child::wait`).
    fn wait_leader(
        &mut self,
    ) -> std::pin::Pin<Box<dyn Future<Output = io::Result<ExitStatus>> + Send + '_>> {
        // The wrapper chain is ProcessGroupChild → tokio Child (KillOnDrop wraps no child).
        self.child.inner_mut().wait()
    }

    /// Sends `signal` to every process in the group. Only called while the group id cannot have
    /// been reused: before the leader is reaped, or while other members keep the group alive.
    fn signal(&self, signal: Signal) {
        match killpg(self.pgid, signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(err) => {
                warn!(pgid = self.pgid.as_raw(), ?signal, error = %err,
                      "cannot signal the job's process group");
            }
        }
    }

    fn group_exists(&self) -> bool {
        // Signal 0 checks existence; EPERM means a member exists that we may not signal.
        !matches!(killpg(self.pgid, None), Err(Errno::ESRCH))
    }

    /// Reaps group members that were reparented to us and have exited, without blocking. That
    /// happens only when zkcron is a child subreaper (e.g. PID 1 in a container); nothing else in
    /// the process would reap them.
    fn reap_orphans(&self) {
        let group = Pid::from_raw(-self.pgid.as_raw());
        loop {
            match waitpid(group, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(status) => debug!(?status, "reaped a process left behind by a job"),
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.kill_group_on_drop {
            // `run` was dropped before the job ended. Runs before `child` is dropped, so the
            // leader is not reaped yet and the group id is still ours.
            warn!(
                job = %self.job,
                pid = self.pid,
                "run abandoned; killing the job's process group"
            );
            self.signal(Signal::SIGKILL);
        }
    }
}

/// The contract variables of DESIGN.md "Job contract".
fn contract_env(spec: &JobSpec, ctx: &RunContext) -> Vec<(&'static str, String)> {
    ctx.contract(&spec.name)
        .into_iter()
        .map(|(key, value)| (key.env, value))
        .collect()
}

/// Writes a submission's payload to the job's stdin and closes it. A job that exits without
/// reading it all is its own business: that is logged, not an error.
async fn feed_stdin(
    stdin: Option<tokio::process::ChildStdin>,
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

/// An error and its causes as one line, for [`RunOutcome::FailedToStart`].
fn error_chain(err: &StartError) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
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
        };
        let spec = JobSpec {
            name: JobName::new("j"),
            program: Program::Shell("true".into()),
            working_dir: None,
            env: BTreeMap::new(),
            timeout: None,
            kill_grace: Duration::ZERO,
            launcher: Launcher::Fork,
        };
        let env = contract_env(&spec, &ctx);
        assert_eq!(env[2].1, "2026-11-22T02:30:00.007Z");
        assert_eq!(env[3].1, "1795314600007");
    }
}
