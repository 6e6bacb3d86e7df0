//! Starting a job's process at once without copying the daemon: `clone(CLONE_VM | CLONE_VFORK)`,
//! the parent-death signal and the process group set in the child, then `execve`.
//!
//! A job must not outlive a daemon killed outside systemd's clean-up (DESIGN.md promise 3), so it
//! gets `PR_SET_PDEATHSIG = SIGKILL` before its program runs. `posix_spawn` cannot set that;
//! `fork` can, but copies the daemon's page tables for every run; the launcher (`launch.rs`)
//! can, but loads the 13 MB zkcron binary for every run (2.9 ms of CPU a start, 339 starts a
//! CPU-second: issue 33). A child made with `CLONE_VM | CLONE_VFORK` borrows the daemon's memory
//! until its exec, as glibc's own `posix_spawn` does, so it costs what `posix_spawn` costs and
//! still runs a few system calls of ours before the exec.
//!
//! The price is discipline in the child. It shares the daemon's memory while the daemon's other
//! threads run, so between the clone and the exec it only makes system calls on values prepared
//! beforehand: no allocation, no lock, no panic, nothing written but the error slot. Signals are
//! blocked around the clone and the child resets every handled signal to its default before it
//! unblocks them, so none of the daemon's handlers can run in the child.
//!
//! A job with a `user` becomes that user in the child (its groups, its group, then its user id)
//! before the death signal is set, since a change of user clears it.
//!
//! Owns: the clone, what the child does before its exec, and the program's lookup on `PATH`.
//! Must not: wait for, signal or read from the process (the group and the runner do).

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::fcntl::OFlag;
use nix::libc;
use nix::sched::CloneFlags;
use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
use nix::unistd::Pid;

/// The child's stack until its exec. It runs a handful of system calls through nix's trampoline;
/// 64 KiB is many times that, and glibc's `posix_spawn` uses less.
const CHILD_STACK_BYTES: usize = 64 * 1024;

thread_local! {
    /// The child's stack, one per thread that starts jobs, made at its first start and kept:
    /// allocated and freed at every start, it was returned to the system at every free (the
    /// heap's trim threshold is low, `heap::give_back_as_freed`), and each return interrupts
    /// every CPU the daemon's threads run on to flush their address translations.
    static CHILD_STACK: std::cell::RefCell<Option<Box<[u8]>>> = const { std::cell::RefCell::new(None) };
}

/// `PATH` when the job's environment has none: what `execvp` uses.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// What to start: the program found, its arguments and its whole environment.
pub(super) struct Exec {
    /// The program as configured: `argv[0]` and the name in errors.
    pub(super) program: String,
    pub(super) args: Vec<String>,
    pub(super) env: BTreeMap<OsString, OsString>,
    pub(super) working_dir: Option<PathBuf>,
    /// Whether the job reads a stdin of ours (a submission's payload) rather than `/dev/null`.
    pub(super) piped_stdin: bool,
    /// The user to become before the exec; `None`: stay the daemon's.
    pub(super) user: Option<Credentials>,
}

/// Who a job's process becomes: its user, its primary group and all its groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Credentials {
    pub(super) uid: libc::uid_t,
    pub(super) gid: libc::gid_t,
    pub(super) groups: Vec<libc::gid_t>,
}

/// A started process: its pid and our ends of its pipes.
pub(super) struct Spawned {
    pub(super) pid: Pid,
    pub(super) stdin: Option<OwnedFd>,
    pub(super) stdout: OwnedFd,
    pub(super) stderr: OwnedFd,
}

/// Which of the child's steps failed, kept beside its errno in the error slot.
#[derive(Clone, Copy)]
#[repr(i32)]
enum Step {
    ProcessGroup = 1,
    DeathSignal = 2,
    ParentGone = 3,
    Descriptors = 4,
    WorkingDir = 5,
    Exec = 6,
    User = 7,
}

impl Step {
    fn from_code(code: i32) -> Option<Step> {
        [
            Step::ProcessGroup,
            Step::DeathSignal,
            Step::ParentGone,
            Step::Descriptors,
            Step::WorkingDir,
            Step::Exec,
            Step::User,
        ]
        .into_iter()
        .find(|step| *step as i32 == code)
    }

    fn describe(self) -> &'static str {
        match self {
            Step::ProcessGroup => "cannot make the job its own process group",
            Step::DeathSignal => "cannot tie the job to the daemon's life",
            Step::ParentGone => "the daemon that started the job is gone",
            Step::Descriptors => "cannot give the job its stdin, stdout and stderr",
            Step::WorkingDir => "cannot enter the working directory",
            Step::Exec => "cannot execute the program",
            Step::User => "cannot become the job's user",
        }
    }
}

/// Starts `exec` as the leader of a new process group, its stdout and stderr piped to us.
/// Returns once the program has been exec'd; an `Err` means it never ran (and nothing is left).
pub(super) fn spawn(exec: &Exec) -> io::Result<Spawned> {
    let path = find_program(&exec.program, exec.env.get(OsStr::new("PATH")))?;
    let path = c_string(path.into_os_string().into_vec())?;
    let argv: Vec<CString> = std::iter::once(exec.program.as_bytes().to_vec())
        .chain(exec.args.iter().map(|arg| arg.as_bytes().to_vec()))
        .map(c_string)
        .collect::<io::Result<_>>()?;
    let envp: Vec<CString> = exec
        .env
        .iter()
        .map(|(key, value)| {
            let mut pair = key.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            c_string(pair)
        })
        .collect::<io::Result<_>>()?;
    let dir = exec
        .working_dir
        .as_ref()
        .map(|dir| c_string(dir.as_os_str().as_bytes().to_vec()))
        .transpose()?;
    let argv_ptrs = null_terminated(&argv);
    let envp_ptrs = null_terminated(&envp);

    let (stdin_read, stdin_write) = if exec.piped_stdin {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        (read, Some(write))
    } else {
        (OwnedFd::from(std::fs::File::open("/dev/null")?), None)
    };
    let (stdout_read, stdout_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let (stderr_read, stderr_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let fds: [(RawFd, RawFd); 3] = [
        (stdin_read.as_raw_fd(), libc::STDIN_FILENO),
        (stdout_write.as_raw_fd(), libc::STDOUT_FILENO),
        (stderr_write.as_raw_fd(), libc::STDERR_FILENO),
    ];
    let failed = AtomicI32::new(0);
    let plan = ChildPlan {
        daemon: nix::unistd::getpid().as_raw(),
        user: exec.user.as_ref(),
        fds: &fds,
        dir: dir.as_ref().map_or(std::ptr::null(), |dir| dir.as_ptr()),
        path: path.as_ptr(),
        argv: argv_ptrs.as_ptr(),
        envp: envp_ptrs.as_ptr(),
    };

    let child = || -> isize {
        // SAFETY: runs in the clone, on the daemon's memory, before its exec: only system calls
        // on what was prepared above, and the one write to `failed` (see the module's docs).
        unsafe { in_child(&failed, &plan) }
    };
    // Blocked across the clone: a signal must not run one of the daemon's handlers in the child
    // before it has reset them (it unblocks them itself, just before the exec).
    let mut blocked_before = SigSet::empty();
    pthread_sigmask(
        SigmaskHow::SIG_SETMASK,
        Some(&SigSet::all()),
        Some(&mut blocked_before),
    )?;
    // SAFETY: CLONE_VFORK suspends this thread until the child has exec'd or exited, so the
    // stack, the strings and `failed` outlive the child's use of them; the child obeys the
    // rules above.
    let cloned = CHILD_STACK.with_borrow_mut(|stack| {
        let stack = stack.get_or_insert_with(|| vec![0_u8; CHILD_STACK_BYTES].into_boxed_slice());
        // SAFETY: see above; the stack is this thread's alone, and no other clone of this thread
        // can use it before this one's child is done with it.
        unsafe {
            nix::sched::clone(
                Box::new(child),
                stack,
                CloneFlags::CLONE_VM | CloneFlags::CLONE_VFORK,
                Some(libc::SIGCHLD),
            )
        }
    });
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&blocked_before), None)?;
    let pid = cloned?;
    let failure = failed.load(Ordering::Acquire);
    if failure != 0 {
        // It exited without running the program: reap it, or it stays a zombie.
        let _ = nix::sys::wait::waitpid(pid, None);
        let (step, errno) = (failure >> 16, failure & 0xffff);
        let cause = io::Error::from_raw_os_error(errno);
        return Err(match Step::from_code(step) {
            Some(Step::Exec) => cause,
            Some(step) => io::Error::new(cause.kind(), format!("{}: {cause}", step.describe())),
            None => io::Error::other(format!("the job's start failed: {cause}")),
        });
    }
    Ok(Spawned {
        pid,
        stdin: stdin_write,
        stdout: stdout_read,
        stderr: stderr_read,
    })
}

/// Everything the child uses, prepared before the clone.
#[derive(Clone, Copy)]
struct ChildPlan<'a> {
    /// The daemon's pid: the child's parent, or the daemon is gone.
    daemon: libc::pid_t,
    user: Option<&'a Credentials>,
    /// (ours, the job's) descriptors: stdin, stdout, stderr.
    fds: &'a [(RawFd, RawFd); 3],
    /// The working directory; null: the daemon's.
    dir: *const libc::c_char,
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
}

/// The child's side, from the clone to the exec. Never returns: it execs the program or exits
/// 127 with what failed in `failed`.
///
/// # Safety
/// Only in a `CLONE_VM | CLONE_VFORK` child made by [`spawn`], with all signals blocked, on
/// pointers that stay valid until it execs.
unsafe fn in_child(failed: &AtomicI32, plan: &ChildPlan<'_>) -> ! {
    let ChildPlan {
        daemon,
        user,
        fds,
        dir,
        path,
        argv,
        envp,
    } = *plan;
    let fail = |step: Step| -> ! {
        // SAFETY: errno is this thread's, and the parent's thread is suspended until we exit.
        let errno = unsafe { *libc::__errno_location() };
        failed.store(((step as i32) << 16) | (errno & 0xffff), Ordering::Release);
        // SAFETY: `_exit` runs no atexit handler and flushes nothing of the daemon's.
        unsafe { libc::_exit(127) }
    };
    // SAFETY (the block): plain system calls on valid arguments.
    unsafe {
        // The child has its own copy of the handler table (no CLONE_SIGHAND): every handled
        // signal back to its default, and SIGPIPE too, which Rust's runtime ignores and an
        // exec would keep ignored (std does the same for its children).
        for signal in 1..=64 {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut current) == 0
                && (current.sa_sigaction != libc::SIG_IGN || signal == libc::SIGPIPE)
                && current.sa_sigaction != libc::SIG_DFL
            {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        if libc::setpgid(0, 0) != 0 {
            fail(Step::ProcessGroup);
        }
        // Before the death signal: a change of user clears it (prctl(2)). Raw system calls, not
        // libc's wrappers: those change every thread of what they take for this process, and
        // this child shares the daemon's memory, thread list included (glibc's posix_spawn does
        // the same).
        if let Some(user) = user {
            if libc::syscall(libc::SYS_setgroups, user.groups.len(), user.groups.as_ptr()) != 0
                || libc::syscall(libc::SYS_setgid, user.gid) != 0
                || libc::syscall(libc::SYS_setuid, user.uid) != 0
            {
                fail(Step::User);
            }
        }
        // A daemon given CAP_SETUID and CAP_SETGID as ambient capabilities (to switch users
        // without being root) must not pass them to its jobs, which could then become anyone.
        // Not there (a kernel before 4.3): nothing to clear.
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            fail(Step::DeathSignal);
        }
        // Killed between the clone and the signal, the daemon would not take the job with it.
        if libc::getppid() != daemon {
            *libc::__errno_location() = libc::ESRCH;
            fail(Step::ParentGone);
        }
        for &(from, to) in fds {
            let done = if from == to {
                // dup2 onto itself keeps close-on-exec: clear it instead.
                libc::fcntl(from, libc::F_SETFD, 0)
            } else {
                libc::dup2(from, to)
            };
            if done < 0 {
                fail(Step::Descriptors);
            }
        }
        if !dir.is_null() && libc::chdir(dir) != 0 {
            fail(Step::WorkingDir);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(path, argv, envp);
        fail(Step::Exec)
    }
}

/// The file `exec` runs for `program`: itself when it holds a `/`, else the first executable
/// file of that name on `path` (the job's `PATH`), as `execvp` looks. Not found: `ENOENT`; found
/// only without the right to execute: `EACCES`.
fn find_program(program: &str, path: Option<&OsString>) -> io::Result<PathBuf> {
    if program.contains('/') {
        return Ok(PathBuf::from(program));
    }
    if program.is_empty() {
        return Err(io::ErrorKind::NotFound.into());
    }
    let path = path.map_or(OsStr::new(DEFAULT_PATH), OsString::as_os_str);
    let mut denied = false;
    for dir in std::env::split_paths(path) {
        let candidate = dir.join(program);
        match std::fs::metadata(&candidate) {
            Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {
                return Ok(candidate);
            }
            Ok(meta) if meta.is_file() => denied = true,
            _ => {}
        }
    }
    Err(if denied {
        io::ErrorKind::PermissionDenied.into()
    } else {
        io::Error::from_raw_os_error(libc::ENOENT)
    })
}

fn c_string(bytes: Vec<u8>) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a NUL byte in the job's program, arguments, environment or directory",
        )
    })
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|string| string.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// `PATH` lookups a test can check without a process.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_found_on_the_jobs_path_and_a_path_is_taken_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = OsString::from(format!("/nonexistent:{}", dir.path().display()));
        assert_eq!(find_program("tool", Some(&path)).unwrap(), tool);
        // Found without the right to execute it: refused as exec would.
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            find_program("tool", Some(&path)).unwrap_err().kind(),
            io::ErrorKind::PermissionDenied
        );
        assert_eq!(
            find_program("no-such-tool", Some(&path))
                .unwrap_err()
                .raw_os_error(),
            Some(libc::ENOENT)
        );
        assert_eq!(
            find_program("./relative", None).unwrap(),
            std::path::Path::new("./relative")
        );
    }
}
