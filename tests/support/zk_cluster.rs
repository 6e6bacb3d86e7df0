//! Real ZooKeeper servers for integration tests: our equivalent of Curator's `TestingServer` and
//! `TestingCluster` (DESIGN.md "Tests", STYLE.md §8).
//!
//! This module owns every ZooKeeper JVM a test process starts, from spawn to reap:
//! - [`ZkEnsemble::start`] runs 1 (standalone) or 3 (quorum) servers of Debian's ZooKeeper 3.8 on free
//!   loopback ports, each with its data dir, `zoo.cfg` and log file in one [`tempfile::TempDir`], and
//!   returns once every server answers `srvr` with a serving mode.
//! - Faults are applied per server by PID, never by process name: [`ZkEnsemble::kill`] (SIGKILL),
//!   [`ZkEnsemble::pause`] (SIGSTOP), [`ZkEnsemble::resume`] (SIGCONT), [`ZkEnsemble::restart`]
//!   (same ports, same data dir). They take `&mut self`, so the [`shared_ensemble`] (a `&'static`)
//!   cannot be faulted by accident.
//! - Nothing outlives the test process: dropping a [`ZkEnsemble`] (also while a test panics) SIGKILLs
//!   and reaps its servers; every JVM is spawned with `PR_SET_PDEATHSIG = SIGKILL` from one
//!   long-lived spawner thread (the signal fires when the spawning *thread* exits, and libtest runs
//!   each test on its own short-lived thread); the shared ensemble is stopped by an `atexit` hook.
//! - Isolation without faults: [`shared_ensemble`] + [`ZkEnsemble::isolated_connect_string`] (a fresh
//!   chroot per test). Fault tests start their own ensemble and serialise on [`fault_lock`].
//! - Waiting: [`wait_until`] / [`wait_for`] poll an observed condition with a stated bound
//!   ([`within`]) and panic naming what was not reached ([`try_wait_for`] returns that as a
//!   [`NotReached`], for a caller that adds a log to the message); no test sleeps to synchronise.
//! - [`expire_session`] expires a client's session on the server side, the way ZooKeeper would after
//!   a partition, without waiting out the session timeout.
//!
//! ZooKeeper's own log (slf4j-simple, when Debian's `libslf4j-java` provides it; stdout and stderr
//! otherwise) goes to `zookeeper.log` in each server's directory; every error of this module that
//! concerns a server carries the tail of its log, and [`ZkEnsemble::log_tail`] offers it to tests.

use std::ffi::OsStr;
use std::fmt;
use std::fs::{self, OpenOptions};
use std::future::Future;
use std::io::{self, Write as _};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError, mpsc};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{self, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use zookeeper_client::{Acls, Client, CreateMode, SessionInfo};

use super::io_faults;

/// Debian's ZooKeeper server jar (package `zookeeper` → `libzookeeper-java`); its manifest's
/// `Class-Path` names the other jars it needs.
pub const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
/// Debian's config dir, first on the classpath as in Debian's `zkEnv.sh`.
const ZOOKEEPER_CONF_DIR: &str = "/etc/zookeeper/conf";
/// An slf4j binding that prints to stderr. Without a binding ZooKeeper 3.8 logs nothing at all
/// (slf4j falls back to NOP), and a failed start would leave an empty log.
const SLF4J_SIMPLE_JAR: &str = "/usr/share/java/slf4j-simple.jar";
/// From Debian's `libnetty-java`, which the `zookeeper` package depends on.
const NETTY_CODEC_JAR: &str = "/usr/share/java/netty-codec.jar";
const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";

/// ZooKeeper's `tickTime`. Session timeouts are negotiated into
/// [`MIN_SESSION_TIMEOUT`]..=[`MAX_SESSION_TIMEOUT`], so tests can use sessions of 1–4 s.
pub const TICK: Duration = Duration::from_millis(200);
/// `minSessionTimeout` (2 ticks): the shortest session a client can get.
pub const MIN_SESSION_TIMEOUT: Duration = Duration::from_millis(400);
/// `maxSessionTimeout`: the longest session a client can get.
pub const MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on [`ZkEnsemble::start`] and [`ZkEnsemble::restart`] reaching a serving quorum: three JVMs
/// starting at once on two cores take 2–5 s; the rest is headroom for a loaded CI machine.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on one `srvr` exchange. A paused (SIGSTOPped) server still completes the TCP handshake in
/// the kernel, so only this timeout tells it apart from a live one.
pub const SRVR_TIMEOUT: Duration = Duration::from_secs(1);
/// Bound on [`expire_session`] seeing the server refuse the session.
pub const EXPIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Interval between two observations of a polled condition.
const POLL: Duration = Duration::from_millis(20);
const LOG_TAIL_LINES: usize = 40;
/// A port picked by binding `127.0.0.1:0` can be taken by someone else before the JVM binds it;
/// a start that fails with "Address already in use" is retried with fresh ports.
const START_ATTEMPTS: usize = 3;
const JVM_FLAGS: &[&str] = &[
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xshare:auto",
    // No /tmp/hsperfdata_<user>/<pid> file left behind by a SIGKILLed JVM.
    "-XX:-UsePerfData",
    "-Djava.net.preferIPv4Stack=true",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
];

/// Everything that can go wrong while running ZooKeeper for a test. Messages say what failed and,
/// where a server is concerned, end with the tail of its log.
///
/// `Debug` prints the same text as `Display`, so `.unwrap()` and `?` in tests show readable logs.
#[derive(thiserror::Error)]
pub enum HarnessError {
    /// `java` or ZooKeeper is not installed; the message says how to install them.
    #[error("{0}")]
    NotInstalled(String),
    /// Preparing the ensemble on the local machine (temp dir, ports, config, runtime) failed.
    #[error("cannot {what}: {source}")]
    Setup {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A server's JVM could not be spawned.
    #[error("cannot spawn ZooKeeper server {server}: {source}")]
    Spawn {
        /// Index of the server.
        server: usize,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A server's JVM exited on its own while it should have been serving.
    #[error("ZooKeeper server {server} exited ({status}) while it should be serving\n{log}")]
    Exited {
        /// Index of the server.
        server: usize,
        /// How it exited.
        status: ExitStatus,
        /// Tail of its log.
        log: String,
    },
    /// The running servers did not form a serving quorum with one leader in time.
    #[error(
        "ZooKeeper servers did not reach a serving quorum within {within:?} (last seen: {observed})\n{logs}"
    )]
    NotServing {
        /// The bound that was exceeded.
        within: Duration,
        /// What each server reported at the last observation.
        observed: String,
        /// Tails of every server's log.
        logs: String,
    },
    /// A server's JVM ended while [`ZkEnsemble::pause`] waited for it to stop.
    #[error("ZooKeeper server {server} ended ({how}) instead of stopping\n{log}")]
    Vanished {
        /// Index of the server.
        server: usize,
        /// How it ended, as `waitpid` reported it.
        how: String,
        /// Tail of its log.
        log: String,
    },
    /// The server has been killed (or exited) and not restarted.
    #[error("ZooKeeper server {server} is not running")]
    NotRunning {
        /// Index of the server.
        server: usize,
    },
    /// A four-letter-word exchange failed: refused, reset, or timed out (a paused server).
    #[error("`srvr` to ZooKeeper server {server} on 127.0.0.1:{port} failed: {source}")]
    FourLetterWord {
        /// Index of the server.
        server: usize,
        /// Its client port.
        port: u16,
        /// The I/O error; [`io::ErrorKind::TimedOut`] when no reply came within [`SRVR_TIMEOUT`].
        #[source]
        source: io::Error,
    },
    /// The server answered `srvr` without a serving mode (e.g. "not currently serving requests").
    #[error("ZooKeeper server {server} is not serving: `srvr` replied {reply:?}")]
    NoMode {
        /// Index of the server.
        server: usize,
        /// The whole reply.
        reply: String,
    },
    /// Sending a signal to a server's JVM failed.
    #[error("cannot send {signal} to ZooKeeper server {server} (pid {pid}): {source}")]
    Signal {
        /// Index of the server.
        server: usize,
        /// The JVM's pid.
        pid: u32,
        /// The signal.
        signal: Signal,
        /// The OS error.
        #[source]
        source: Errno,
    },
    /// A ZooKeeper request made by the harness itself failed.
    #[error("{what}: {source}")]
    ZooKeeper {
        /// The request, with its path.
        what: String,
        /// The client's error.
        #[source]
        source: zookeeper_client::Error,
    },
    /// [`expire_session`]: the server kept accepting the session.
    #[error("session {session} was still accepted by ZooKeeper {within:?} after closing it")]
    SessionNotExpired {
        /// The session id.
        session: String,
        /// The bound that was exceeded.
        within: Duration,
    },
}

impl fmt::Debug for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl HarnessError {
    /// True if a four-letter word got no reply within [`SRVR_TIMEOUT`]: the server accepts
    /// connections but does not answer, as a paused (SIGSTOPped) server does.
    pub fn is_timeout(&self) -> bool {
        matches!(self, HarnessError::FourLetterWord { source, .. }
            if matches!(source.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock))
    }

    fn is_port_conflict(&self) -> bool {
        let log = match self {
            HarnessError::Exited { log, .. } => log,
            HarnessError::NotServing { logs, .. } => logs,
            _ => return false,
        };
        log.contains("Address already in use")
    }

    fn setup(what: impl Into<String>) -> impl FnOnce(io::Error) -> HarnessError {
        let what = what.into();
        move |source| HarnessError::Setup { what, source }
    }
}

/// What a server reports in the `Mode:` line of `srvr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A single server without a quorum (ensembles of 1).
    Standalone,
    /// The quorum's leader.
    Leader,
    /// A follower synced with the leader.
    Follower,
    /// An observer (never configured by this harness).
    Observer,
}

impl Mode {
    /// True for the server that orders writes: the leader, or a standalone server.
    pub fn leads(self) -> bool {
        matches!(self, Mode::Standalone | Mode::Leader)
    }

    fn parse(srvr_reply: &str) -> Option<Mode> {
        let mode = srvr_reply
            .lines()
            .find_map(|line| line.strip_prefix("Mode:"))?
            .trim();
        match mode {
            "standalone" => Some(Mode::Standalone),
            "leader" => Some(Mode::Leader),
            "follower" => Some(Mode::Follower),
            "observer" => Some(Mode::Observer),
            _ => None,
        }
    }
}

/// A deadline with the bound it was made from, so a failed wait can say how long it waited.
/// Made by [`within`]; a `Duration` converts into one starting now.
#[derive(Clone, Copy, Debug)]
pub struct Within {
    bound: Duration,
    deadline: Instant,
}

/// A deadline `bound` from now: `wait_until("owner elected", within(SESSION + DELAY), …)`.
pub fn within(bound: Duration) -> Within {
    Within {
        bound,
        deadline: Instant::now() + bound,
    }
}

impl From<Duration> for Within {
    fn from(bound: Duration) -> Self {
        within(bound)
    }
}

impl Within {
    /// The bound this deadline was made from.
    pub fn bound(&self) -> Duration {
        self.bound
    }

    /// Time left until the deadline (zero once passed).
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// True once the deadline has passed.
    pub fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

/// Polls `condition` every 20 ms until it is true.
///
/// # Panics
/// If `condition` is not true within `within` (also if one evaluation of it does not finish in
/// time), with a message naming `what` was not reached and the bound.
pub async fn wait_until<F, Fut>(what: &str, within: impl Into<Within>, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(what, within, || {
        let observed = condition();
        async move { observed.await.then_some(()) }
    })
    .await
}

/// Polls `probe` every 20 ms until it returns `Some`, and returns that value.
///
/// # Panics
/// If `probe` returns `None` until `within` has passed (also if one evaluation of it does not
/// finish in time), with a message naming `what` was not reached and the bound. To add to that
/// message (a process's log, say), use [`try_wait_for`].
pub async fn wait_for<T, F, Fut>(what: &str, within: impl Into<Within>, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match try_wait_for(what, within, probe).await {
        Ok(value) => value,
        Err(not_reached) => panic!("{not_reached}"),
    }
}

/// A condition a [`try_wait_for`] waited for in vain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not reached within {bound:?}: {what}")]
pub struct NotReached {
    /// What was waited for.
    pub what: String,
    /// The bound that passed.
    pub bound: Duration,
}

/// [`wait_for`], returning [`NotReached`] instead of panicking, so the caller can say more.
///
/// # Errors
/// [`NotReached`] if `probe` returns `None` until `within` has passed (also if one evaluation of
/// it does not finish in time).
pub async fn try_wait_for<T, F, Fut>(
    what: &str,
    within: impl Into<Within>,
    mut probe: F,
) -> Result<T, NotReached>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let within = within.into();
    loop {
        // `timeout` polls the probe once before looking at the clock, so a zero remainder still
        // gives the probe its last chance.
        match tokio::time::timeout(within.remaining(), probe()).await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) if !within.expired() => tokio::time::sleep(POLL.min(within.remaining())).await,
            Ok(None) | Err(_) => {
                return Err(NotReached {
                    what: what.to_owned(),
                    bound: within.bound,
                });
            }
        }
    }
}

/// Bounds how many fault tests (kill / pause / restart) run at once in this test process, so
/// that elections and timeouts they measure are not skewed by too many of them loading the two
/// cores: [`FAULT_SLOTS`] at a time, or `ZKCRON_TEST_FAULT_SLOTS` (1 serialises them, as
/// scripts/chaos does with one test thread).
///
/// Poison-tolerant: a fault test that panicked gives its slot back like any other. Hold the slot
/// for the whole test. In async tests that trips `clippy::await_holding_lock`; allow it for the
/// test file (`#![allow(clippy::await_holding_lock, reason = "…")]`): it is harmless here, since
/// every `#[tokio::test]` has its own runtime on its own thread.
pub fn fault_lock() -> FaultSlot {
    take_fault_slots(1)
}

/// Every fault slot: for a fault test that loads the machine itself (a hundred deliveries a
/// second, a delayed backlog), whose bounds assume no other fault test beside it.
pub fn heavy_fault_lock() -> FaultSlot {
    take_fault_slots(fault_slots())
}

/// Whether fault tests run one at a time (`ZKCRON_TEST_FAULT_SLOTS=1`, as scripts/chaos runs
/// them): a scenario's timing targets are measured then, and only bounded beside others.
pub fn fault_tests_alone() -> bool {
    fault_slots() == 1
}

fn fault_slots() -> usize {
    static SLOTS: OnceLock<usize> = OnceLock::new();
    *SLOTS.get_or_init(|| {
        std::env::var("ZKCRON_TEST_FAULT_SLOTS")
            .ok()
            .and_then(|slots| slots.parse().ok())
            .filter(|&slots| slots > 0)
            .unwrap_or(FAULT_SLOTS)
    })
}

/// How many fault slots are taken, and the signal that some were given back.
static FAULT_SLOTS_TAKEN: Mutex<usize> = Mutex::new(0);
static FAULT_SLOTS_FREED: Condvar = Condvar::new();

fn take_fault_slots(wanted: usize) -> FaultSlot {
    let slots = fault_slots();
    let mut taken = FAULT_SLOTS_TAKEN
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    while *taken + wanted > slots {
        taken = FAULT_SLOTS_FREED
            .wait(taken)
            .unwrap_or_else(PoisonError::into_inner);
    }
    *taken += wanted;
    FaultSlot { wanted }
}

/// How many fault tests run at once by default (see [`fault_lock`]).
pub const FAULT_SLOTS: usize = 3;

/// One fault test's slot, given back when dropped.
pub struct FaultSlot {
    wanted: usize,
}

impl Drop for FaultSlot {
    fn drop(&mut self) {
        let mut taken = FAULT_SLOTS_TAKEN
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *taken -= self.wanted;
        FAULT_SLOTS_FREED.notify_all();
    }
}

/// A chroot path unique in this test process and across processes: `/t-<name>-<pid>-<counter>`.
/// Characters of `name` that are not `[A-Za-z0-9_-]` become `-`. The node does not exist yet:
/// create it with [`ZkEnsemble::create_chroot`], or use [`ZkEnsemble::isolated_connect_string`].
pub fn unique_chroot(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("/t-{name}-{}-{n}", std::process::id())
}

/// The 3-server ensemble shared by every non-fault test of this test process, started by the first
/// caller and stopped when the process exits. Give each test its own chroot
/// ([`ZkEnsemble::isolated_connect_string`]). It cannot be faulted: the fault methods take
/// `&mut ZkEnsemble`.
///
/// # Panics
/// If the ensemble cannot be started (every later caller panics with the same message).
pub fn shared_ensemble() -> &'static ZkEnsemble {
    let shared = SHARED.get_or_init(|| {
        let started = ZkEnsemble::start(3).map_err(|e| e.to_string());
        if started.is_ok() {
            // Statics are never dropped; without this hook the JVMs would still die with the
            // spawner thread (PR_SET_PDEATHSIG), but the temp dir would be left behind.
            // SAFETY: `stop_shared_ensemble` is an `extern "C" fn()` that does not unwind.
            unsafe { nix::libc::atexit(stop_shared_ensemble) };
        }
        started
    });
    match shared {
        Ok(ensemble) => ensemble,
        Err(message) => panic!("the shared ZooKeeper ensemble did not start: {message}"),
    }
}

static SHARED: OnceLock<Result<ZkEnsemble, String>> = OnceLock::new();

extern "C" fn stop_shared_ensemble() {
    if let Some(Ok(ensemble)) = SHARED.get() {
        ensemble.stop_all();
        // Best effort at process exit: nobody is left to report a failure to.
        let _ = fs::remove_dir_all(ensemble.dir.path());
    }
}

/// Expires `session` on the server side, as ZooKeeper would after a partition longer than the
/// session timeout: connects a second client to the same session and closes it, until the server
/// refuses the session as expired. The victim's ephemeral nodes go with the close transaction; the
/// victim's client sees `SessionState::Expired` when it next reconnects.
///
/// `connect` is any connect string of the ensemble (a chroot does not matter).
///
/// # Errors
/// [`HarnessError::SessionNotExpired`] if the server still accepts the session after
/// [`EXPIRE_TIMEOUT`]; [`HarnessError::ZooKeeper`] if connecting fails otherwise.
///
/// # Cancellation safety
/// Cancelling may leave the session open or closed; it never leaves a client behind.
pub async fn expire_session(connect: &str, session: &SessionInfo) -> Result<(), HarnessError> {
    let bound = within(EXPIRE_TIMEOUT);
    loop {
        let reopened = Client::connector()
            .with_session(session.clone())
            .connect(connect)
            .await;
        match reopened {
            Err(zookeeper_client::Error::SessionExpired) => return Ok(()),
            // Dropping the last handle of a non-detached client sends CloseSession; it is sent by
            // the client's background task, so the loop observes the result instead of assuming it.
            Ok(client) => drop(client),
            Err(source) => {
                return Err(HarnessError::ZooKeeper {
                    what: format!("reconnect to session {} at {connect}", session.id()),
                    source,
                });
            }
        }
        if bound.expired() {
            return Err(HarnessError::SessionNotExpired {
                session: session.id().to_string(),
                within: EXPIRE_TIMEOUT,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Finds `java` on `path_var` (a `PATH` value) and checks that `zookeeper_jar` exists.
///
/// # Errors
/// [`HarnessError::NotInstalled`], saying exactly how to install what is missing.
pub fn preflight_in(path_var: &OsStr, zookeeper_jar: &Path) -> Result<PathBuf, HarnessError> {
    let java = std::env::split_paths(path_var)
        .map(|dir| dir.join("java"))
        .find(|candidate| candidate.is_file());
    let Some(java) = java else {
        return Err(HarnessError::NotInstalled(
            "cannot start ZooKeeper for tests: `java` is not on PATH. Install Java 17 with \
             `apt-get install -y default-jre-headless` and ZooKeeper with `apt-get install -y zookeeper`"
                .to_owned(),
        ));
    };
    if !zookeeper_jar.is_file() {
        return Err(HarnessError::NotInstalled(format!(
            "cannot start ZooKeeper for tests: {} is missing. Install ZooKeeper with \
             `apt-get install -y zookeeper` (and Java 17 with `apt-get install -y default-jre-headless`)",
            zookeeper_jar.display()
        )));
    }
    Ok(java)
}

/// A ZooKeeper ensemble of real server JVMs on loopback. Servers are indexed from 0 (`myid` is
/// index + 1). Dropping it SIGKILLs and reaps every server and deletes its directory.
pub struct ZkEnsemble {
    servers: Vec<ZkServer>,
    java: PathBuf,
    /// JVM flags beyond [`JVM_FLAGS`] (the JAAS file of an ensemble that requires SASL).
    jvm_flags: Vec<String>,
    // Declared last: removed only after `Drop::drop` has reaped the JVMs that write into it.
    dir: TempDir,
}

struct ZkServer {
    client_port: u16,
    /// The TLS client port (Netty), for an ensemble started with [`ZkEnsemble::start_tls`].
    secure_port: Option<u16>,
    dir: PathBuf,
    cfg: PathBuf,
    log: PathBuf,
    /// Its disk's faults, for an ensemble started with [`ServerOptions::disk_faults`].
    disk: Option<io_faults::Control>,
    process: Mutex<Process>,
}

/// How the servers of an ensemble run, beyond the defaults (issue 53's chaos scenarios).
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerOptions {
    /// Each server's disk can be slowed or filled ([`ZkEnsemble::fault_disk`]); the servers
    /// fsync their transaction logs (`forceSync=yes`), as in production.
    pub disk_faults: bool,
    /// `jute.maxbuffer`, lowered so that a test crosses the bounds it sets.
    pub jute_maxbuffer: Option<u32>,
    /// `zookeeper.enforceQuota`: writes past a quota are refused.
    pub enforce_quota: bool,
}

#[derive(Default)]
struct Process {
    child: Option<Child>,
    paused: bool,
    runs: u32,
}

/// What one observation found a server doing.
enum Observed {
    Killed,
    Paused,
    Serving(Mode),
    NotServing(String),
}

impl ZkEnsemble {
    /// Starts `n` servers (1: standalone; 3: a quorum) and returns once every one answers `srvr`
    /// with a serving mode, within [`START_TIMEOUT`]. Blocks the calling thread (it is fine to call
    /// from inside an async test: the wait runs on a thread of its own).
    ///
    /// # Errors
    /// [`HarnessError::NotInstalled`] if `java` or [`ZOOKEEPER_JAR`] is missing; otherwise what
    /// failed, with the servers' log tails.
    ///
    /// # Panics
    /// If `n` is 0.
    pub fn start(n: usize) -> Result<ZkEnsemble, HarnessError> {
        Self::start_with(n, None, None)
    }

    /// Like [`Self::start`], each server also serving TLS on a second client port (Netty),
    /// with `server_pem` (certificate and key) as its identity, trusting clients signed by
    /// `ca_pem` (ZooKeeper's default `ssl.clientAuth=need`).
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_tls(
        n: usize,
        server_pem: &Path,
        ca_pem: &Path,
    ) -> Result<ZkEnsemble, HarnessError> {
        Self::start_with(n, Some((server_pem, ca_pem)), None)
    }

    /// Like [`Self::start`], the servers requiring SASL DIGEST-MD5 of every client
    /// (`enforce.auth.schemes=sasl`), with `user` and `password` its one account.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_sasl(n: usize, user: &str, password: &str) -> Result<ZkEnsemble, HarnessError> {
        Self::start_with(n, None, Some((user, password)))
    }

    /// Like [`Self::start`], the servers run as `options` says: their disks faultable, their
    /// `jute.maxbuffer` lowered, quotas enforced (issue 53's chaos scenarios).
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_options(n: usize, options: ServerOptions) -> Result<ZkEnsemble, HarnessError> {
        Self::start_configured(n, None, None, options)
    }

    fn start_with(
        n: usize,
        tls: Option<(&Path, &Path)>,
        sasl: Option<(&str, &str)>,
    ) -> Result<ZkEnsemble, HarnessError> {
        Self::start_configured(n, tls, sasl, ServerOptions::default())
    }

    fn start_configured(
        n: usize,
        tls: Option<(&Path, &Path)>,
        sasl: Option<(&str, &str)>,
        options: ServerOptions,
    ) -> Result<ZkEnsemble, HarnessError> {
        assert!(n > 0, "an ensemble needs at least one server");
        let path_var = std::env::var_os("PATH").unwrap_or_default();
        let java = preflight_in(&path_var, Path::new(ZOOKEEPER_JAR))?;
        let mut attempt = 1;
        loop {
            let ensemble = ZkEnsemble::configure(n, java.clone(), tls, sasl, options)?;
            // One ensemble starts at a time in this process: a crowd of JVMs starting together
            // on 2 cores would eat the bounds of the fault tests running beside them.
            let launched = {
                static STARTING: Mutex<()> = Mutex::new(());
                let _one_at_a_time = STARTING.lock().unwrap_or_else(PoisonError::into_inner);
                ensemble.launch()
            };
            match launched {
                Ok(()) => return Ok(ensemble),
                // `ensemble` is dropped here, which kills what it started.
                Err(e) if e.is_port_conflict() && attempt < START_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    fn configure(
        n: usize,
        java: PathBuf,
        tls: Option<(&Path, &Path)>,
        sasl: Option<(&str, &str)>,
        options: ServerOptions,
    ) -> Result<ZkEnsemble, HarnessError> {
        let dir = tempfile::Builder::new()
            .prefix("zkcron-zk-")
            .tempdir()
            .map_err(HarnessError::setup("create a temp dir for ZooKeeper"))?;
        let ports = free_ports(4 * n).map_err(HarnessError::setup("pick free loopback ports"))?;
        let (client_ports, rest) = ports.split_at(n);
        let (secure_ports, peer_ports) = rest.split_at(n);
        let mut servers = Vec::with_capacity(n);
        for (i, &client_port) in client_ports.iter().enumerate() {
            let server_dir = dir.path().join(format!("server-{i}"));
            let data_dir = server_dir.join("data");
            fs::create_dir_all(&data_dir).map_err(HarnessError::setup(format!(
                "create {}",
                data_dir.display()
            )))?;
            let mut cfg = format!(
                "tickTime={tick}\n\
                 initLimit=10\n\
                 syncLimit=5\n\
                 dataDir={data}\n\
                 clientPort={client_port}\n\
                 clientPortAddress=127.0.0.1\n\
                 minSessionTimeout={min}\n\
                 maxSessionTimeout={max}\n\
                 4lw.commands.whitelist=*\n\
                 admin.enableServer=false\n\
                 reconfigEnabled=false\n\
                 # Every test client connects from 127.0.0.1; the default limit is 60 per address.\n\
                 maxClientCnxns=0\n\
                 # Test data need not survive a machine crash; fsync per write would slow every test\n\
                 # (but for a scenario of a slow disk).\n\
                 forceSync={force_sync}\n",
                force_sync = if options.disk_faults { "yes" } else { "no" },
                tick = TICK.as_millis(),
                data = data_dir.display(),
                min = MIN_SESSION_TIMEOUT.as_millis(),
                max = MAX_SESSION_TIMEOUT.as_millis(),
            );
            let secure_port = tls.map(|(server_pem, ca_pem)| {
                let port = secure_ports[i];
                cfg.push_str(&format!(
                    "secureClientPort={port}\n\
                     secureClientPortAddress=127.0.0.1\n\
                     serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                     ssl.keyStore.location={}\n\
                     ssl.keyStore.type=PEM\n\
                     ssl.trustStore.location={}\n\
                     ssl.trustStore.type=PEM\n",
                    server_pem.display(),
                    ca_pem.display()
                ));
                port
            });
            if sasl.is_some() {
                cfg.push_str(
                    "authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n\
                     enforce.auth.enabled=true\n\
                     enforce.auth.schemes=sasl\n",
                );
            }
            if n > 1 {
                for (peer, pair) in peer_ports.chunks(2).enumerate() {
                    cfg.push_str(&format!(
                        "server.{}=127.0.0.1:{}:{}\n",
                        peer + 1,
                        pair[0],
                        pair[1]
                    ));
                }
                let myid = data_dir.join("myid");
                fs::write(&myid, format!("{}\n", i + 1))
                    .map_err(HarnessError::setup(format!("write {}", myid.display())))?;
            }
            let disk = if options.disk_faults {
                let path = server_dir.join("disk-faults");
                let control = io_faults::Control::new(path.clone())
                    .map_err(HarnessError::setup(format!("write {}", path.display())))?;
                Some(control)
            } else {
                None
            };
            let cfg_path = server_dir.join("zoo.cfg");
            fs::write(&cfg_path, cfg)
                .map_err(HarnessError::setup(format!("write {}", cfg_path.display())))?;
            servers.push(ZkServer {
                client_port,
                secure_port,
                log: server_dir.join("zookeeper.log"),
                cfg: cfg_path,
                dir: server_dir,
                disk,
                process: Mutex::new(Process::default()),
            });
        }
        let mut jvm_flags = Vec::new();
        if let Some(bytes) = options.jute_maxbuffer {
            jvm_flags.push(format!("-Djute.maxbuffer={bytes}"));
        }
        if options.enforce_quota {
            jvm_flags.push("-Dzookeeper.enforceQuota=true".to_owned());
        }
        if let Some((user, password)) = sasl {
            let jaas = dir.path().join("jaas.conf");
            let text = format!(
                "Server {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  \
                 user_{user}=\"{password}\";\n}};\n"
            );
            fs::write(&jaas, text)
                .map_err(HarnessError::setup(format!("write {}", jaas.display())))?;
            jvm_flags.push(format!(
                "-Djava.security.auth.login.config={}",
                jaas.display()
            ));
        }
        Ok(ZkEnsemble {
            servers,
            java,
            jvm_flags,
            dir,
        })
    }

    fn launch(&self) -> Result<(), HarnessError> {
        for i in 0..self.servers.len() {
            self.spawn(i)?;
        }
        block_on_own_thread(self.wait_quorum(within(START_TIMEOUT)))?
    }

    /// Faults server `i`'s disk as `faults` says, from at most 100 ms on. The ensemble must
    /// have been started with [`ServerOptions::disk_faults`].
    ///
    /// # Errors
    /// The control file could not be written.
    pub fn fault_disk(&self, i: usize, faults: io_faults::DiskFaults) -> Result<(), HarnessError> {
        let Some(control) = &self.servers[i].disk else {
            panic!("server {i}'s disk is not faultable: start with ServerOptions::disk_faults");
        };
        control
            .set(faults)
            .map_err(HarnessError::setup(format!("fault server {i}'s disk")))
    }

    /// Number of servers.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Always false: an ensemble has at least one server.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The TLS connect string of all servers (an ensemble from [`Self::start_tls`]).
    ///
    /// # Panics
    /// If the ensemble does not serve TLS.
    pub fn secure_connect_string(&self) -> String {
        self.servers
            .iter()
            .map(|s| {
                format!(
                    "127.0.0.1:{}",
                    s.secure_port.expect("started with start_tls")
                )
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Client connect string of all servers: `127.0.0.1:p1,127.0.0.1:p2,…`.
    pub fn connect_string(&self) -> String {
        self.servers
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// [`Self::connect_string`] with `chroot` (e.g. from [`unique_chroot`]) appended. The chroot
    /// node must exist before a client uses it: see [`Self::create_chroot`].
    pub fn connect_string_with_chroot(&self, chroot: &str) -> String {
        format!("{}{chroot}", self.connect_string())
    }

    /// Connect string of server `i` alone: `127.0.0.1:<client port>`.
    pub fn server_address(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.servers[i].client_port)
    }

    /// Client port of server `i`; stays the same across [`Self::restart`].
    pub fn client_port(&self, i: usize) -> u16 {
        self.servers[i].client_port
    }

    /// Creates the persistent node `chroot` (and its parents; an existing node is fine) with
    /// open ACLs, so clients can connect with [`Self::connect_string_with_chroot`].
    ///
    /// # Errors
    /// [`HarnessError::ZooKeeper`] if connecting or creating fails.
    ///
    /// # Cancellation safety
    /// Cancelling may or may not leave the node created.
    pub async fn create_chroot(&self, chroot: &str) -> Result<(), HarnessError> {
        let connect = self.connect_string();
        let client = Client::connect(&connect)
            .await
            .map_err(|source| HarnessError::ZooKeeper {
                what: format!("connect to {connect}"),
                source,
            })?;
        client
            .mkdir(
                chroot,
                &CreateMode::Persistent.with_acls(Acls::anyone_all()),
            )
            .await
            .map_err(|source| HarnessError::ZooKeeper {
                what: format!("create chroot {chroot}"),
                source,
            })
    }

    /// A fresh chroot for one test ([`unique_chroot`] of `name`), created, as a connect string:
    /// the usual way for a test to use the [`shared_ensemble`] in isolation.
    ///
    /// # Errors
    /// As [`Self::create_chroot`].
    ///
    /// # Cancellation safety
    /// As [`Self::create_chroot`].
    pub async fn isolated_connect_string(&self, name: &str) -> Result<String, HarnessError> {
        let chroot = unique_chroot(name);
        self.create_chroot(&chroot).await?;
        Ok(self.connect_string_with_chroot(&chroot))
    }

    /// Pid of server `i`'s JVM, if it is running (paused counts as running).
    pub fn pid(&self, i: usize) -> Option<u32> {
        let mut process = lock(&self.servers[i].process);
        live_child(&mut process).map(|child| child.id())
    }

    /// True if server `i`'s JVM exists and has not exited (a paused one is running).
    pub fn is_running(&self, i: usize) -> bool {
        self.pid(i).is_some()
    }

    /// Path of server `i`'s log file (ZooKeeper's log plus the JVM's stdout and stderr, across
    /// restarts).
    pub fn log_path(&self, i: usize) -> &Path {
        &self.servers[i].log
    }

    /// The last 40 lines of server `i`'s log, for failure messages.
    pub fn log_tail(&self, i: usize) -> String {
        tail(&self.servers[i].log, LOG_TAIL_LINES)
    }

    fn log_tails(&self) -> String {
        (0..self.servers.len())
            .map(|i| {
                format!(
                    "--- server {i} ({}), last {LOG_TAIL_LINES} lines of {} ---\n{}",
                    self.server_address(i),
                    self.servers[i].log.display(),
                    self.log_tail(i)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Asks server `i` for its mode with `srvr`, waiting at most [`SRVR_TIMEOUT`].
    ///
    /// # Errors
    /// [`HarnessError::NotRunning`] if it was killed; [`HarnessError::FourLetterWord`] if it does
    /// not answer ([`HarnessError::is_timeout`] for a paused server); [`HarnessError::NoMode`] if it
    /// answers but does not serve (e.g. during an election).
    ///
    /// # Cancellation safety
    /// Cancel-safe: it only reads.
    pub async fn mode(&self, i: usize) -> Result<Mode, HarnessError> {
        if !self.is_running(i) {
            return Err(HarnessError::NotRunning { server: i });
        }
        let port = self.servers[i].client_port;
        let reply = four_letter_word(port, "srvr").await.map_err(|source| {
            HarnessError::FourLetterWord {
                server: i,
                port,
                source,
            }
        })?;
        Mode::parse(&reply).ok_or(HarnessError::NoMode { server: i, reply })
    }

    /// The index of the one running, unpaused server that reports `leader` or `standalone`;
    /// `None` if there is none, or more than one (e.g. a deposed leader that has not noticed yet).
    ///
    /// # Cancellation safety
    /// Cancel-safe: it only reads.
    pub async fn leader(&self) -> Option<usize> {
        let mut leaders = Vec::new();
        for (i, observed) in self.observe().await.into_iter().enumerate() {
            if matches!(observed, Ok(Observed::Serving(mode)) if mode.leads()) {
                leaders.push(i);
            }
        }
        match leaders[..] {
            [leader] => Some(leader),
            _ => None,
        }
    }

    /// Waits until the servers serve again after faults: every running, unpaused server answers
    /// `srvr` with a serving mode, they are a majority of the ensemble, and exactly one leads.
    ///
    /// # Errors
    /// [`HarnessError::NotServing`] with every server's log tail if that is not reached in
    /// `within`; [`HarnessError::Exited`] at once if a server that should run has exited.
    ///
    /// # Cancellation safety
    /// Cancel-safe: it only reads.
    pub async fn wait_serving(&self, within: impl Into<Within>) -> Result<(), HarnessError> {
        self.wait_quorum(within.into()).await
    }

    async fn wait_quorum(&self, within: Within) -> Result<(), HarnessError> {
        loop {
            let observed = self
                .observe()
                .await
                .into_iter()
                .collect::<Result<Vec<_>, _>>()?;
            let serving: Vec<Mode> = observed
                .iter()
                .filter_map(|o| match o {
                    Observed::Serving(mode) => Some(*mode),
                    _ => None,
                })
                .collect();
            let all_running_serve = !observed
                .iter()
                .any(|o| matches!(o, Observed::NotServing(_)));
            let majority = serving.len() > self.servers.len() / 2;
            let one_leader = serving.iter().filter(|m| m.leads()).count() == 1;
            if all_running_serve && majority && one_leader {
                return Ok(());
            }
            if within.expired() {
                return Err(HarnessError::NotServing {
                    within: within.bound,
                    observed: describe(&observed),
                    logs: self.log_tails(),
                });
            }
            tokio::time::sleep(POLL.min(within.remaining())).await;
        }
    }

    /// One observation per server; `Err` for a server that should run but has exited.
    async fn observe(&self) -> Vec<Result<Observed, HarnessError>> {
        let mut observed = Vec::with_capacity(self.servers.len());
        for (i, server) in self.servers.iter().enumerate() {
            let state = {
                let mut process = lock(&server.process);
                match process.child.as_mut().map(Child::try_wait) {
                    None => Ok(Some(Observed::Killed)),
                    Some(Ok(None)) if process.paused => Ok(Some(Observed::Paused)),
                    Some(Ok(None)) => Ok(None),
                    Some(Ok(Some(status))) => Err(HarnessError::Exited {
                        server: i,
                        status,
                        log: self.log_tail(i),
                    }),
                    Some(Err(source)) => Err(HarnessError::Setup {
                        what: format!("check whether ZooKeeper server {i} is alive"),
                        source,
                    }),
                }
            };
            observed.push(match state {
                Ok(Some(known)) => Ok(known),
                Ok(None) => Ok(match self.mode(i).await {
                    Ok(mode) => Observed::Serving(mode),
                    Err(e) => Observed::NotServing(e.to_string()),
                }),
                Err(e) => Err(e),
            });
        }
        observed
    }

    /// SIGKILLs server `i` by pid and reaps it. Killing a killed server does nothing.
    ///
    /// # Errors
    /// [`HarnessError::Signal`] or [`HarnessError::Setup`] if the OS refuses.
    pub fn kill(&mut self, i: usize) -> Result<(), HarnessError> {
        let process = self.servers[i]
            .process
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        kill_and_reap(i, process)
    }

    /// SIGSTOPs server `i`: it keeps its sockets but answers nothing, like a long GC pause or a
    /// hung machine. Returns once every thread of the JVM has stopped; pausing a paused server
    /// does nothing.
    ///
    /// # Errors
    /// [`HarnessError::NotRunning`] if it is not running; [`HarnessError::Signal`] if the OS refuses;
    /// [`HarnessError::Vanished`] if it died instead of stopping.
    pub fn pause(&mut self, i: usize) -> Result<(), HarnessError> {
        if self.process_mut(i).paused && self.is_running(i) {
            // A second SIGSTOP would bring no new stop notification for waitpid to wait for.
            return Ok(());
        }
        let pid = self.signal(i, Signal::SIGSTOP)?;
        // kill(2) only queues SIGSTOP: a JVM thread already on a CPU can still answer a request
        // after it returns. waitpid(WUNTRACED) returns once the whole thread group has stopped.
        let stopped = loop {
            match waitpid(to_pid(pid), Some(WaitPidFlag::WUNTRACED)) {
                Err(Errno::EINTR) => continue,
                other => break other,
            }
        };
        match stopped {
            Ok(WaitStatus::Stopped(..)) => {
                self.process_mut(i).paused = true;
                Ok(())
            }
            Ok(ended) => {
                // waitpid has reaped it: the `Child` must be neither waited for nor signalled.
                self.process_mut(i).child = None;
                Err(HarnessError::Vanished {
                    server: i,
                    how: format!("{ended:?}"),
                    log: self.log_tail(i),
                })
            }
            Err(source) => Err(HarnessError::Signal {
                server: i,
                pid,
                signal: Signal::SIGSTOP,
                source,
            }),
        }
    }

    /// SIGCONTs server `i` after [`Self::pause`]. Use [`Self::wait_serving`] to wait until it
    /// serves again.
    ///
    /// # Errors
    /// [`HarnessError::NotRunning`] if it is not running; [`HarnessError::Signal`] if the OS refuses.
    pub fn resume(&mut self, i: usize) -> Result<(), HarnessError> {
        self.signal(i, Signal::SIGCONT)?;
        self.process_mut(i).paused = false;
        Ok(())
    }

    /// Starts server `i` again on the same ports and data dir (SIGKILLing it first if it runs) and
    /// waits until the running servers serve with one leader, within [`START_TIMEOUT`].
    ///
    /// # Errors
    /// What failed, with the servers' log tails.
    ///
    /// # Cancellation safety
    /// Cancelling after the spawn leaves the server starting; the ensemble still owns it.
    pub async fn restart(&mut self, i: usize) -> Result<(), HarnessError> {
        self.kill(i)?;
        self.spawn(i)?;
        self.wait_quorum(within(START_TIMEOUT)).await
    }

    /// SIGKILLs every server, then starts them all again on the same ports and data dirs (the
    /// whole ensemble down at once, as after a power cut) and waits until they serve with one
    /// leader, within [`START_TIMEOUT`].
    ///
    /// # Errors
    /// What failed, with the servers' log tails.
    pub async fn restart_all(&mut self) -> Result<(), HarnessError> {
        for i in 0..self.servers.len() {
            self.kill(i)?;
        }
        for i in 0..self.servers.len() {
            self.spawn(i)?;
        }
        self.wait_quorum(within(START_TIMEOUT)).await
    }

    fn process_mut(&mut self, i: usize) -> &mut Process {
        self.servers[i]
            .process
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends `signal` to server `i`'s live JVM and returns its pid.
    fn signal(&mut self, i: usize, signal: Signal) -> Result<u32, HarnessError> {
        let Some(child) = live_child(self.process_mut(i)) else {
            return Err(HarnessError::NotRunning { server: i });
        };
        let pid = child.id();
        signal::kill(to_pid(pid), signal).map_err(|source| HarnessError::Signal {
            server: i,
            pid,
            signal,
            source,
        })?;
        Ok(pid)
    }

    fn spawn(&self, i: usize) -> Result<(), HarnessError> {
        let server = &self.servers[i];
        let disk_env = match &server.disk {
            Some(control) => control.env().map_err(HarnessError::NotInstalled)?,
            None => Vec::new(),
        };
        let mut process = lock(&server.process);
        process.runs += 1;
        // Appended to across restarts, each run headed by a marker line, so a failure message
        // shows what the previous run of the server logged too.
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&server.log)
            .map_err(HarnessError::setup(format!(
                "open {}",
                server.log.display()
            )))?;
        let marker = format!(
            "----- zk_cluster harness: run {} of server {i} (myid {}) on {} -----",
            process.runs,
            i + 1,
            self.server_address(i)
        );
        let spawned = writeln!(log, "{marker}")
            .and_then(|()| log.try_clone())
            .and_then(|stdout| {
                let mut command = Command::new(&self.java);
                command
                    .args(JVM_FLAGS)
                    .args(&self.jvm_flags)
                    .arg(format!("-Dzookeeper.log.dir={}", server.dir.display()))
                    .arg("-cp")
                    .arg(classpath())
                    .arg(MAIN_CLASS)
                    .arg(&server.cfg)
                    .current_dir(&server.dir)
                    .envs(disk_env.iter().map(|(key, value)| (key, value)))
                    .stdin(Stdio::null())
                    .stdout(stdout)
                    .stderr(log);
                spawn_with_pdeathsig(command)
            });
        process.child = Some(spawned.map_err(|source| HarnessError::Spawn { server: i, source })?);
        process.paused = false;
        Ok(())
    }

    /// SIGKILLs and reaps every server; errors are ignored (used on drop and at exit).
    fn stop_all(&self) {
        for (i, server) in self.servers.iter().enumerate() {
            let _ = kill_and_reap(i, &mut lock(&server.process));
        }
    }
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        self.stop_all();
    }
}

impl fmt::Debug for ZkEnsemble {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkEnsemble")
            .field("connect_string", &self.connect_string())
            .field("dir", &self.dir.path())
            .finish()
    }
}

fn describe(observed: &[Observed]) -> String {
    observed
        .iter()
        .enumerate()
        .map(|(i, o)| match o {
            Observed::Killed => format!("server {i}: killed"),
            Observed::Paused => format!("server {i}: paused"),
            Observed::Serving(mode) => format!("server {i}: {mode:?}"),
            Observed::NotServing(why) => format!("server {i}: {why}"),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn lock(process: &Mutex<Process>) -> MutexGuard<'_, Process> {
    process.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The child if it has not exited. Signalling by pid is only safe while the child is unreaped:
/// once `try_wait` has reaped it, the pid may belong to someone else.
fn live_child(process: &mut Process) -> Option<&mut Child> {
    let child = process.child.as_mut()?;
    matches!(child.try_wait(), Ok(None)).then_some(child)
}

fn kill_and_reap(i: usize, process: &mut Process) -> Result<(), HarnessError> {
    process.paused = false;
    let Some(mut child) = process.child.take() else {
        return Ok(());
    };
    let pid = child.id();
    if matches!(child.try_wait(), Ok(None)) {
        // SIGKILL also ends a SIGSTOPped process.
        if let Err(source) = signal::kill(to_pid(pid), Signal::SIGKILL) {
            process.child = Some(child);
            return Err(HarnessError::Signal {
                server: i,
                pid,
                signal: Signal::SIGKILL,
                source,
            });
        }
    }
    child.wait().map_err(|source| HarnessError::Setup {
        what: format!("reap ZooKeeper server {i} (pid {pid})"),
        source,
    })?;
    Ok(())
}

fn to_pid(pid: u32) -> Pid {
    Pid::from_raw(i32::try_from(pid).expect("Linux pids are at most 2^22"))
}

fn classpath() -> String {
    let mut classpath = format!("{ZOOKEEPER_CONF_DIR}:{ZOOKEEPER_JAR}");
    // Netty's codec is not on zookeeper.jar's manifest class path, and the TLS port needs it.
    for jar in [SLF4J_SIMPLE_JAR, NETTY_CODEC_JAR] {
        if Path::new(jar).is_file() {
            classpath.push(':');
            classpath.push_str(jar);
        }
    }
    classpath
}

/// A loopback port nobody listens on: bound and released at once (for "ZooKeeper unreachable").
pub fn closed_port() -> u16 {
    free_ports(1)
        .ok()
        .and_then(|ports| ports.first().copied())
        .expect("a free loopback port")
}

/// `count` distinct free loopback ports: all are bound at once (so none repeats), then released.
pub(super) fn free_ports(count: usize) -> io::Result<Vec<u16>> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

pub(super) fn tail(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Sends a four-letter word to the server on `port` and reads the whole reply, within
/// [`SRVR_TIMEOUT`].
async fn four_letter_word(port: u16, word: &str) -> io::Result<String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?;
        stream.write_all(word.as_bytes()).await?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await?;
        Ok(reply)
    };
    tokio::time::timeout(SRVR_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no reply to `{word}` within {SRVR_TIMEOUT:?}"),
            ))
        })
}

/// Runs `future` to completion on a fresh current-thread runtime on a scoped thread, so that
/// blocking [`ZkEnsemble::start`] works both from plain and from async tests (a runtime cannot be
/// started inside another one's thread).
fn block_on_own_thread<F>(future: F) -> Result<F::Output, HarnessError>
where
    F: Future + Send,
    F::Output: Send,
{
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|runtime| runtime.block_on(future))
        });
        match waiter.join() {
            Ok(result) => result.map_err(HarnessError::setup("build a tokio runtime")),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// A request to the spawner thread: spawn this command, reply with the child.
struct SpawnRequest {
    command: Command,
    reply: mpsc::Sender<io::Result<Child>>,
}

/// Spawns `command` with `PR_SET_PDEATHSIG = SIGKILL` from the one spawner thread of this process.
///
/// The kernel sends the death signal when the *thread* that forked the child exits, not the
/// process. libtest runs each test on its own thread, so a JVM forked by a test would die with
/// that test even if its ensemble is shared; the spawner thread lives as long as the process.
pub(super) fn spawn_with_pdeathsig(mut command: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Result<mpsc::Sender<SpawnRequest>, String>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (requests, incoming) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("zk-spawner".to_owned())
            .spawn(move || {
                // Ends only with the process: `SPAWNER` keeps the sender alive forever.
                for SpawnRequest { mut command, reply } in incoming {
                    // The requester waits for the reply; should it be gone all the same, no one
                    // would own the JVM, so end it here rather than leave it to process exit.
                    if let Err(mpsc::SendError(Ok(mut orphan))) = reply.send(command.spawn()) {
                        let _ = orphan.kill();
                        let _ = orphan.wait();
                    }
                }
            })
            .map(|_| requests)
            .map_err(|e| format!("cannot start the ZooKeeper spawner thread: {e}"))
    });
    let spawner = spawner.as_ref().map_err(|e| io::Error::other(e.clone()))?;
    // SAFETY: the closure runs between fork and exec and only makes the prctl(2) syscall, which
    // is async-signal-safe; it allocates nothing.
    unsafe {
        command
            .pre_exec(|| nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from));
    }
    let (reply, replied) = mpsc::channel();
    spawner
        .send(SpawnRequest { command, reply })
        .map_err(|_| io::Error::other("the ZooKeeper spawner thread has stopped"))?;
    replied
        .recv()
        .map_err(|_| io::Error::other("the ZooKeeper spawner thread dropped a spawn request"))?
}
