//! The launcher mode of the zkcron binary: how a run prepared ahead of its instant is started.
//!
//! A job must not outlive a daemon that is killed outside systemd's clean-up (DESIGN.md promise
//! 3): it gets `PR_SET_PDEATHSIG = SIGKILL` before it runs. A run started at once gets it from
//! its `CLONE_VFORK` child (`spawn.rs`). A run known ahead of its instant is *prepared*: the
//! daemon starts its own binary, the same way, as a launcher that sets the signal and waits
//! on its stdin for one byte, the go, then execs the job in the same process: same pid, same
//! process group, same pipes. No byte (stdin closed: the run was given up) and the job never
//! runs. Loading the launcher costs milliseconds (the dynamic loader, the binary's relocations:
//! 2.9 ms of CPU, issue 33), all of it before the instant. The launcher also holds the exec until
//! the run's instant (`clock_nanosleep` to the absolute time, 1 ns timer slack): the daemon may
//! give the go a little early, and the job still starts at its instant, never before, without
//! the daemon's own wake-up in between. The instant is on the wall clock, or on the monotonic
//! clock for a node corrected to the servers' time (`ensemble_clock::Deadline`; issue 53: a
//! step of the wall clock must not move it).
//!
//! Owns: the launcher's arguments and what it does before the exec.
//! Must not: decide anything about the run; the runner spawns, supervises and reports.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::process::{ExitCode, Stdio};

use nix::sys::time::TimeSpec;
use nix::time::{ClockId, ClockNanosleepFlags};
use nix::unistd::{Gid, Uid};

use super::spawn::Credentials;
use crate::ensemble_clock::Deadline;

/// The first argument that makes the zkcron binary the launcher of one job:
/// `zkcron __launch-job <daemon pid> <when> <not before> <user> <program> [args...]`, where
/// `<not before>` is Unix ns of the wall clock, or `m` and ns of the monotonic clock.
/// Not a command for people.
pub const LAUNCHER_ARG: &str = "__launch-job";

/// The byte the daemon writes to a waiting launcher's stdin to start its job.
pub(super) const GO: u8 = b'g';

/// When the launcher execs the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Start {
    /// At once.
    Now,
    /// On the go byte; then the job's stdin is `/dev/null`.
    OnGo,
    /// On the go byte; the job reads the rest of the same stdin (a submission's payload).
    OnGoKeepStdin,
}

impl Start {
    fn arg(self) -> &'static str {
        match self {
            Start::Now => "now",
            Start::OnGo => "on-go",
            Start::OnGoKeepStdin => "on-go-keep-stdin",
        }
    }

    fn parse(arg: &OsStr) -> Option<Self> {
        [Start::Now, Start::OnGo, Start::OnGoKeepStdin]
            .into_iter()
            .find(|start| arg == start.arg())
    }
}

/// The launcher's part of a job's command line, before the job's own program and arguments:
/// the job execs on `start`, not before `not_before`, as `user` (`-`: as the daemon's user).
pub(super) fn launcher_args(
    start: Start,
    not_before: Option<Deadline>,
    user: Option<&Credentials>,
) -> [String; 5] {
    let not_before = not_before.map_or_else(|| "0".to_owned(), not_before_arg);
    let user = user.map_or_else(
        || "-".to_owned(),
        |user| {
            let groups: Vec<String> = user.groups.iter().map(u32::to_string).collect();
            format!("{}:{}:{}", user.uid, user.gid, groups.join(","))
        },
    );
    [
        LAUNCHER_ARG.to_owned(),
        std::process::id().to_string(),
        start.arg().to_owned(),
        not_before,
        user,
    ]
}

/// `deadline` as the launcher reads it: wall-clock ns, or `m` and monotonic ns.
fn not_before_arg(deadline: Deadline) -> String {
    let wall = |deadline: Deadline| {
        // Past 2262 no i64 of nanoseconds reaches: held as long as can be said.
        let at = deadline.on_wall();
        at.timestamp_nanos_opt().unwrap_or(i64::MAX).to_string()
    };
    if let Deadline::Monotonic(_) = deadline {
        // The launcher's CLOCK_MONOTONIC is ours: one clock for the whole system.
        if let Ok(now) = nix::time::clock_gettime(ClockId::CLOCK_MONOTONIC) {
            let left = i64::try_from(deadline.left().as_nanos()).unwrap_or(i64::MAX);
            let now = now.tv_sec() * 1_000_000_000 + now.tv_nsec();
            return format!("m{}", now.saturating_add(left));
        }
    }
    wall(deadline)
}

/// The clock and instant of a `<not before>` argument.
fn parse_not_before(arg: &OsStr) -> Option<(ClockId, i64)> {
    let arg = arg.to_str()?;
    match arg.strip_prefix('m') {
        Some(nanos) => Some((ClockId::CLOCK_MONOTONIC, nanos.parse().ok()?)),
        None => Some((ClockId::CLOCK_REALTIME, arg.parse().ok()?)),
    }
}

/// `uid:gid:group,group…` as [`launcher_args`] writes it; `-`: none.
fn parse_user(arg: &OsStr) -> Option<Option<Credentials>> {
    let arg = arg.to_str()?;
    if arg == "-" {
        return Some(None);
    }
    let mut parts = arg.splitn(3, ':');
    let uid = parts.next()?.parse().ok()?;
    let gid = parts.next()?.parse().ok()?;
    let groups = parts
        .next()?
        .split(',')
        .filter(|group| !group.is_empty())
        .map(|group| group.parse().ok())
        .collect::<Option<Vec<u32>>>()?;
    Some(Some(Credentials { uid, gid, groups }))
}

/// Becomes `user`: its groups, its group, then its user id, the order in which each step is
/// still allowed.
fn become_user(user: &Credentials) -> nix::Result<()> {
    let groups: Vec<Gid> = user.groups.iter().copied().map(Gid::from_raw).collect();
    nix::unistd::setgroups(&groups)?;
    nix::unistd::setgid(Gid::from_raw(user.gid))?;
    nix::unistd::setuid(Uid::from_raw(user.uid))
}

/// The launcher mode: `args` are what follows [`LAUNCHER_ARG`]. Sets the parent-death signal,
/// makes sure the daemon that started us is still our parent (else it died before the signal
/// was set, and the job must not run), waits for the go if told to and for the instant not
/// before which the job may start, then execs the job.
/// Returns only when it does not run it: 126 (found, not executable) or 127 (not found), the
/// codes a shell uses, with the reason on stderr, which the runner logs; 0 when the daemon gave
/// the run up before its go.
pub fn launch_job(args: &[OsString]) -> ExitCode {
    let (Some(daemon), Some(start), Some(not_before), Some(user), Some(program)) = (
        args.first(),
        args.get(1),
        args.get(2),
        args.get(3),
        args.get(4),
    ) else {
        eprintln!(
            "zkcron: {LAUNCHER_ARG} is zkcron's own way to start a job; it needs the daemon's pid, when to start, the instant not before which it starts, the user and a program"
        );
        return ExitCode::from(2);
    };
    let Some(user) = parse_user(user) else {
        eprintln!("zkcron: {LAUNCHER_ARG}: not a user: {}", display(user));
        return ExitCode::from(2);
    };
    let Some(start) = Start::parse(start) else {
        eprintln!("zkcron: {LAUNCHER_ARG}: unknown start {}", display(start));
        return ExitCode::from(2);
    };
    let Some((clock, not_before)) = parse_not_before(not_before) else {
        eprintln!(
            "zkcron: {LAUNCHER_ARG}: not an instant in nanoseconds (unix, or m and monotonic): {}",
            display(not_before)
        );
        return ExitCode::from(2);
    };
    let daemon = daemon.to_str().and_then(|pid| pid.parse::<i32>().ok());
    // Before the death signal: a change of user clears it (prctl(2)).
    if let Some(user) = &user {
        if let Err(err) = become_user(user) {
            eprintln!(
                "zkcron: cannot become the job's user (uid {}): {err}",
                user.uid
            );
            return ExitCode::from(126);
        }
    }
    // The daemon's ambient capabilities are not the job's (see spawn.rs).
    // SAFETY: a plain system call; an old kernel's EINVAL leaves nothing to clear.
    unsafe {
        nix::libc::prctl(
            nix::libc::PR_CAP_AMBIENT,
            nix::libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
    }
    if let Err(err) = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL) {
        eprintln!("zkcron: cannot tie the job to the daemon's life: {err}");
        return ExitCode::from(126);
    }
    if daemon != Some(nix::unistd::getppid().as_raw()) {
        eprintln!("zkcron: the daemon that started this job is gone; not running it");
        return ExitCode::from(126);
    }
    let mut command = std::process::Command::new(program);
    command.args(&args[5..]);
    if start != Start::Now {
        let mut go = [0_u8];
        // Exactly one byte, unbuffered (not `std::io::stdin`): what follows is the job's.
        let read = loop {
            match nix::unistd::read(std::io::stdin(), &mut go) {
                Err(nix::errno::Errno::EINTR) => continue,
                read => break read,
            }
        };
        match read {
            Ok(1) if go[0] == GO => {}
            // Closed or anything else: the daemon gave the run up.
            _ => return ExitCode::SUCCESS,
        }
        if start == Start::OnGo {
            command.stdin(Stdio::null());
        }
    }
    wait_until(clock, not_before);
    let err = command.exec();
    eprintln!("zkcron: cannot run {}: {err}", display(program));
    let not_found = err.kind() == std::io::ErrorKind::NotFound;
    ExitCode::from(if not_found { 127 } else { 126 })
}

/// Sleeps until `clock` reads `nanos` (at once if it has passed). The default timer slack
/// (50 µs) would be most of what is left of a prepared start's delay: 1 ns instead. A failed
/// sleep is retried until the instant has passed: the job never starts early.
fn wait_until(clock: ClockId, nanos: i64) {
    let _ = nix::sys::prctl::set_timerslack(1);
    let instant = TimeSpec::new(
        nanos.div_euclid(1_000_000_000),
        nanos.rem_euclid(1_000_000_000),
    );
    loop {
        let now = nix::time::clock_gettime(clock);
        if now.is_ok_and(|now| now >= instant) {
            return;
        }
        let _ = nix::time::clock_nanosleep(clock, ClockNanosleepFlags::TIMER_ABSTIME, &instant);
    }
}

fn display(program: &OsStr) -> String {
    program.to_string_lossy().into_owned()
}
