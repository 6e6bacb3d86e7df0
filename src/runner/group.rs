//! A running job's process group: spawned as its leader (with the contract's environment, in its
//! working directory, through the launcher when prepared), supervised to its exit or timeout,
//! terminated with TERM → grace → KILL, its orphans reaped, and killed whole if abandoned.
//!
//! Owns: the group's pid and id and their signals.
//! Must not: decide when to start or stop a job (the runner's callers do), or read output.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::future::pending;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use nix::errno::Errno;
use nix::libc;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;
use tokio::time::{Instant, sleep_until, timeout, timeout_at};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::ids::JobName;
use crate::run::{JobSpec, Program, RunAs, RunContext, RunOutcome};

use super::error::StartError;
use super::launch::{self, Start};
use super::spawn;
use crate::ensemble_clock::Deadline;

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

/// The running job: its leader process and the group it leads, and our ends of its pipes (each
/// taken by whoever reads or writes it). Dropped while `kill_group_on_drop` is set (the job has
/// not been seen to end), it SIGKILLs the whole group.
pub(super) struct Group {
    pub(super) job: JobName,
    leader: ClonedChild,
    pub(super) stdin: Option<pipe::Sender>,
    pub(super) stdout: Option<pipe::Receiver>,
    pub(super) stderr: Option<pipe::Receiver>,
    pub(super) pid: u32,
    pub(super) pgid: Pid,
    /// When its launcher execs the job.
    pub(super) start: Start,
    pub(super) kill_group_on_drop: bool,
}

/// A child made by `spawn.rs`: waited for through its pidfd, which becomes readable when it
/// exits. Dropped before it was reaped, it is reaped in the background once it exits, so it is
/// never left a zombie.
struct ClonedChild {
    pid: Pid,
    exit: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
}

impl ClonedChild {
    fn new(pid: Pid) -> io::Result<Self> {
        // SAFETY: pidfd_open(2) with a pid of our own unreaped child, which it cannot outlive.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
        let fd = RawFd::try_from(fd)
            .ok()
            .filter(|fd| *fd >= 0)
            .ok_or_else(io::Error::last_os_error)?;
        // SAFETY: a new descriptor, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: the `OwnedFd` keeps it open, and it is not replaced, until the `AsyncFd` drops.
        let exit = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(|err| err.into_parts().1)?;
        Ok(ClonedChild {
            pid,
            exit: Some(exit),
            status: None,
        })
    }

    /// Cancellation safe: nothing is consumed until the status is read, and it is kept.
    async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.status {
                return Ok(status);
            }
            match waitpid(self.pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(_, code)) => {
                    self.status = Some(ExitStatus::from_raw((code & 0xff) << 8));
                }
                Ok(WaitStatus::Signaled(_, signal, core_dumped)) => {
                    let core = if core_dumped { 0x80 } else { 0 };
                    self.status = Some(ExitStatus::from_raw(signal as i32 | core));
                }
                Ok(_still_running) => {
                    let Some(exit) = &self.exit else {
                        return Err(io::Error::other("the job's pidfd is gone"));
                    };
                    exit.readable().await?.clear_ready();
                }
                Err(err) => return Err(err.into()),
            }
        }
    }
}

impl Drop for ClonedChild {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        let (pid, exit) = (self.pid, self.exit.take());
        let reap = async move {
            if let Some(exit) = exit {
                let _ = exit.readable().await;
            }
            let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(reap)),
            Err(_) => {
                let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
            }
        }
    }
}

/// The job's whole environment: the daemon's, the user's login variables, the job's `env`,
/// without systemd's own, and the contract's variables.
fn job_env(spec: &JobSpec, ctx: &RunContext) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    env.extend(
        user_env(spec)
            .into_iter()
            .map(|(key, value)| (OsString::from(key), value)),
    );
    env.extend(
        spec.env
            .iter()
            .map(|(key, value)| (OsString::from(key), OsString::from(value))),
    );
    for key in SYSTEMD_VARS {
        env.remove(OsStr::new(key));
    }
    env.extend(
        contract_env(spec, ctx)
            .into_iter()
            .map(|(key, value)| (OsString::from(key), OsString::from(value))),
    );
    env
}

/// Who the job's process becomes, when it has a `user`.
fn credentials(user: &RunAs) -> spawn::Credentials {
    spawn::Credentials {
        uid: user.uid,
        gid: user.gid,
        groups: user.groups.clone(),
    }
}

/// `HOME`, `USER` and `LOGNAME` of a job with a `user`, as a login would set them; the job's own
/// `env` may still say otherwise.
fn user_env(spec: &JobSpec) -> Vec<(&'static str, OsString)> {
    spec.user.as_deref().map_or_else(Vec::new, |user| {
        vec![
            ("HOME", user.home.clone().into_os_string()),
            ("USER", OsString::from(&user.name)),
            ("LOGNAME", OsString::from(&user.name)),
        ]
    })
}

/// The job's program and arguments, or why it has none.
fn program_of(spec: &JobSpec) -> Result<(&str, Vec<&str>), StartError> {
    let job = &spec.name;
    if matches!(spec.program, Program::Http(_)) {
        return Err(StartError::NotAProcess { job: job.clone() });
    }
    spec.program
        .argv()
        .ok_or_else(|| StartError::EmptyCommand { job: job.clone() })
}

/// Checked before the start: exec reports a bad directory as ENOENT, indistinguishable from a
/// missing binary.
fn check_working_dir(spec: &JobSpec) -> Result<(), StartError> {
    let Some(dir) = &spec.working_dir else {
        return Ok(());
    };
    let unusable = |source| StartError::WorkingDir {
        job: spec.name.clone(),
        dir: dir.clone(),
        source,
    };
    // One stat, no slower than the start itself (tokio's `fs` feature is not enabled).
    let meta = std::fs::metadata(dir).map_err(unusable)?;
    if !meta.is_dir() {
        return Err(unusable(io::ErrorKind::NotADirectory.into()));
    }
    Ok(())
}

impl Group {
    /// Starts the job's program at once, as the leader of its own group (see `spawn.rs`).
    pub(super) fn spawn_now(spec: &JobSpec, ctx: &RunContext) -> Result<Group, StartError> {
        let (program, args) = program_of(spec)?;
        check_working_dir(spec)?;
        let exec = spawn::Exec {
            program: program.to_owned(),
            args: args.into_iter().map(str::to_owned).collect(),
            env: job_env(spec, ctx),
            working_dir: spec.working_dir.clone(),
            piped_stdin: ctx.submission.is_some(),
            user: spec.user.as_deref().map(credentials),
        };
        Self::spawned(spec, program, &exec, Start::Now)
    }

    /// Starts `launcher` (the zkcron binary) to exec the job on `start` and not before
    /// `not_before`: a run prepared ahead of its instant (see `launch.rs`). Started as a job
    /// started at once is (`spawn.rs`): glibc's `posix_spawn` maps and unmaps a stack for every
    /// start, and each unmapping interrupts every CPU the daemon's threads run on.
    pub(super) fn launch(
        spec: &JobSpec,
        ctx: &RunContext,
        launcher: &Path,
        start: Start,
        not_before: Option<Deadline>,
    ) -> Result<Group, StartError> {
        let (program, args) = program_of(spec)?;
        check_working_dir(spec)?;
        let launcher = launcher.to_str().ok_or_else(|| StartError::Spawn {
            job: spec.name.clone(),
            program: program.to_owned(),
            source: io::Error::other(format!(
                "the launcher's path {} is not UTF-8",
                launcher.display()
            )),
        })?;
        // The launcher becomes the job's user itself, then execs the program in its place.
        let user = spec.user.as_deref().map(credentials);
        let exec = spawn::Exec {
            program: launcher.to_owned(),
            args: launch::launcher_args(start, not_before, user.as_ref())
                .into_iter()
                .chain(std::iter::once(program.to_owned()))
                .chain(args.into_iter().map(str::to_owned))
                .collect(),
            env: job_env(spec, ctx),
            working_dir: spec.working_dir.clone(),
            piped_stdin: ctx.submission.is_some() || start != Start::Now,
            user: None,
        };
        Self::spawned(spec, program, &exec, start)
    }

    /// Starts `exec` for `spec` (whose program is `program`, as errors name it) and follows it.
    fn spawned(
        spec: &JobSpec,
        program: &str,
        exec: &spawn::Exec,
        start: Start,
    ) -> Result<Group, StartError> {
        let job = &spec.name;
        let spawn_error = |source| StartError::Spawn {
            job: job.clone(),
            program: program.to_owned(),
            source,
        };
        let spawned = spawn::spawn(exec).map_err(spawn_error)?;
        let pid = spawned.pid;
        let leader = ClonedChild::new(pid).map_err(|err| {
            // Nothing could follow it: it must not run unwatched.
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
            let _ = waitpid(pid, None);
            spawn_error(err)
        })?;
        let pipes = (|| -> io::Result<_> {
            Ok((
                spawned.stdin.map(pipe::Sender::from_owned_fd).transpose()?,
                pipe::Receiver::from_owned_fd(spawned.stdout)?,
                pipe::Receiver::from_owned_fd(spawned.stderr)?,
            ))
        })();
        let mut group = Group {
            job: job.clone(),
            leader,
            stdin: None,
            stdout: None,
            stderr: None,
            pid: pid.as_raw().unsigned_abs(),
            pgid: pid,
            start,
            kill_group_on_drop: true,
        };
        let (stdin, stdout, stderr) = pipes.map_err(spawn_error)?;
        group.stdin = stdin;
        group.stdout = Some(stdout);
        group.stderr = Some(stderr);
        Ok(group)
    }

    /// Waits for the job's end, stopping its group on timeout or cancellation. Returns the outcome
    /// and the leader's exit status when it was observed.
    pub(super) async fn supervise(
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
    pub(super) fn exited(
        &mut self,
        status: io::Result<ExitStatus>,
    ) -> (RunOutcome, Option<ExitStatus>) {
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
    pub(super) async fn terminate(&mut self, grace: Duration, job: &JobName) -> Option<ExitStatus> {
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

    /// Waits for the leader only, not for the rest of its group: when zkcron is a child
    /// subreaper (PID 1 in a container), orphaned grandchildren are our children, and a leftover
    /// `daemon &` must not keep `run` from returning.
    ///
    /// Cancellation safe ([`ClonedChild::wait`]).
    pub(super) async fn wait_leader(&mut self) -> io::Result<ExitStatus> {
        self.leader.wait().await
    }

    /// Sends `signal` to every process in the group. Only called while the group id cannot have
    /// been reused: before the leader is reaped, or while other members keep the group alive.
    pub(super) fn signal(&self, signal: Signal) {
        match killpg(self.pgid, signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(err) => {
                warn!(pgid = self.pgid.as_raw(), ?signal, error = %err,
                      "cannot signal the job's process group");
            }
        }
    }

    pub(super) fn group_exists(&self) -> bool {
        // Signal 0 checks existence; EPERM means a member exists that we may not signal.
        !matches!(killpg(self.pgid, None), Err(Errno::ESRCH))
    }

    /// Reaps group members that were reparented to us and have exited, without blocking. That
    /// happens only when zkcron is a child subreaper (e.g. PID 1 in a container); nothing else in
    /// the process would reap them.
    pub(super) fn reap_orphans(&self) {
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
pub(super) fn contract_env(spec: &JobSpec, ctx: &RunContext) -> Vec<(&'static str, String)> {
    ctx.contract(&spec.name)
        .into_iter()
        .map(|(key, value)| (key.env, value))
        .collect()
}
