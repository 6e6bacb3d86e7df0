//! How a job's process is made, and the launcher mode of the zkcron binary.
//!
//! A job must not outlive a daemon that is killed outside systemd's clean-up (DESIGN.md promise
//! 3): it gets `PR_SET_PDEATHSIG = SIGKILL` before it runs. Setting that between fork and exec
//! makes every start a full `fork` of the daemon — its page tables copied, then torn down again
//! by the exec — a few milliseconds of the daemon's CPU per run that grow with its memory. The
//! daemon instead starts its own binary with `posix_spawn` (no copy) as a launcher that sets the
//! signal and execs the job in the same process: same pid, same process group, same pipes.
//!
//! Owns: the launcher's arguments and what it does before the exec.
//! Must not: decide anything about the run; the runner spawns, supervises and reports.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::ExitCode;

/// The first argument that makes the zkcron binary the launcher of one job:
/// `zkcron __launch-job <daemon pid> <program> [args...]`. Not a command for people.
pub const LAUNCHER_ARG: &str = "__launch-job";

/// How the runner makes a job's process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Launcher {
    /// `fork` + exec, the signal set in between: what a library caller gets, with no zkcron
    /// binary at hand.
    #[default]
    Fork,
    /// `posix_spawn` of this zkcron binary in launcher mode (the daemon passes
    /// `/proc/self/exe`, which names its own binary even after a package upgrade replaced it).
    Binary(PathBuf),
}

impl Launcher {
    /// The daemon's own binary as the launcher.
    pub fn this_binary() -> Self {
        Launcher::Binary(PathBuf::from("/proc/self/exe"))
    }
}

/// The launcher's part of a job's command line, before the job's own program and arguments.
pub(super) fn launcher_args() -> [OsString; 2] {
    [
        OsString::from(LAUNCHER_ARG),
        OsString::from(std::process::id().to_string()),
    ]
}

/// The launcher mode: `args` are what follows [`LAUNCHER_ARG`]. Sets the parent-death signal,
/// makes sure the daemon that started us is still our parent (else it died before the signal
/// was set, and the job must not run), then execs the job. Returns only when it cannot run it:
/// 126 (found, not executable) or 127 (not found), the codes a shell uses, with the reason on
/// stderr, which the runner logs.
pub fn launch_job(args: &[OsString]) -> ExitCode {
    let (Some(daemon), Some(program)) = (args.first(), args.get(1)) else {
        eprintln!(
            "zkcron: {LAUNCHER_ARG} is zkcron's own way to start a job; it needs the daemon's pid and a program"
        );
        return ExitCode::from(2);
    };
    let daemon = daemon.to_str().and_then(|pid| pid.parse::<i32>().ok());
    if let Err(err) = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL) {
        eprintln!("zkcron: cannot tie the job to the daemon's life: {err}");
        return ExitCode::from(126);
    }
    if daemon != Some(nix::unistd::getppid().as_raw()) {
        eprintln!("zkcron: the daemon that started this job is gone; not running it");
        return ExitCode::from(126);
    }
    let err = std::process::Command::new(program).args(&args[2..]).exec();
    eprintln!("zkcron: cannot run {}: {err}", display(program));
    let not_found = err.kind() == std::io::ErrorKind::NotFound;
    ExitCode::from(if not_found { 127 } else { 126 })
}

fn display(program: &OsStr) -> String {
    program.to_string_lossy().into_owned()
}
