//! Real PostgreSQL servers for the tests, as [`super::zk_cluster`] starts ZooKeeper: the
//! distribution's `initdb` and `postgres` (Debian's `postgresql` package) in a temporary
//! directory, listening on a free loopback port, stopped, killed, paused and restarted by PID.
//!
//! The server is `postgres` itself, a child of this process; its faults reach its backends too,
//! found as its children (a postmaster killed alone leaves them holding its shared memory, and a
//! restart would refuse to start; a postmaster paused alone leaves them answering). PostgreSQL refuses to run as root: as root the
//! harness runs it as the package's `postgres` user, its directory handed to that user.
//!
//! Each test takes a database of its own on the one server of the test process
//! ([`shared_postgres`]); a test that faults the server starts its own ([`PgServer::start`]).

use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use nix::sys::signal::{self, Signal};
use nix::unistd::{Pid, User};
use tempfile::TempDir;

use super::zk_cluster::{free_ports, spawn_with_pdeathsig, tail};
use super::{Within, within};

/// How long a fresh server may take to accept connections: `initdb` is done by then, so this
/// is the postmaster's start and its recovery after a kill (a second or two here; ten times
/// that for a crowded test pool).
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Ports a server is started on before its failure to bind one is given up on.
const BIND_ATTEMPTS: u32 = 3;

/// The role the tests connect as (`initdb -U`), trusted on loopback.
pub const ROLE: &str = "zkcron";

/// Why a server could not be started or driven.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error(
        "PostgreSQL's server programs are missing (looked for initdb in /usr/lib/postgresql/*/bin): \
         install Debian's `postgresql` package, or run scripts/test, which does"
    )]
    NotInstalled,
    #[error("{what}: {source}")]
    Setup {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("initdb failed ({status}):\n{output}")]
    Initdb { status: String, output: String },
    #[error("PostgreSQL on port {port} was not ready within {within:?}; its log ends:\n{log}")]
    NotReady {
        port: u16,
        within: Duration,
        log: String,
    },
    #[error("PostgreSQL on port {port} exited ({status}); its log ends:\n{log}")]
    Exited {
        port: u16,
        status: String,
        log: String,
    },
    #[error("cannot send {signal} to PostgreSQL (pid {pid}): {source}")]
    Signal {
        pid: u32,
        signal: Signal,
        #[source]
        source: nix::errno::Errno,
    },
    #[error("{what}: {source}")]
    Sql {
        what: String,
        #[source]
        source: tokio_postgres::Error,
    },
}

/// One PostgreSQL server: its directory, port and process.
pub struct PgServer {
    dir: TempDir,
    bin: PathBuf,
    port: u16,
    /// Set when this process is root: the server runs as this uid and gid.
    run_as: Option<(u32, u32)>,
    process: Mutex<Option<Child>>,
}

impl PgServer {
    /// A new server: `initdb` into a temporary directory, then `postgres` on a free loopback
    /// port, waited for until it accepts connections.
    ///
    /// `fsync` and `full_page_writes` are off: the tests check what the store promises across
    /// a killed *server process*, which the operating system's page cache survives, so a
    /// commit need not reach the disk. `synchronous_commit` stays on: off, a commit returns
    /// before its WAL leaves the server's memory, and a killed server loses it. A benchmark that
    /// measures commits starts its own server with durability on.
    ///
    /// # Errors
    /// The programs are missing, `initdb` failed, or the server did not come up in time.
    pub fn start() -> Result<PgServer, PgError> {
        Self::start_serving(None)
    }

    /// [`PgServer::start`], serving TLS with `cert` and `key` (PEM) beside plain connections:
    /// `ssl = on`, the files in the data directory, readable by the server alone.
    ///
    /// # Errors
    /// As [`PgServer::start`], or the files could not be written.
    pub fn start_with_tls(cert: &str, key: &str) -> Result<PgServer, PgError> {
        Self::start_serving(Some((cert, key)))
    }

    fn start_serving(tls: Option<(&str, &str)>) -> Result<PgServer, PgError> {
        let bin = server_programs()?;
        let run_as = run_as()?;
        let dir = tempfile::Builder::new()
            .prefix("zkcron-postgres.")
            .tempdir()
            .map_err(setup("create a temporary directory"))?;
        if let Some((uid, gid)) = run_as {
            // initdb writes the data directory; the server writes its socket lock beside it.
            nix::unistd::chown(dir.path(), Some(uid.into()), Some(gid.into()))
                .map_err(|errno| setup("hand the directory to postgres")(errno.into()))?;
            fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700))
                .map_err(setup("restrict the directory"))?;
        }
        let mut server = PgServer {
            dir,
            bin,
            port: 0,
            run_as,
            process: Mutex::new(None),
        };
        server.initdb()?;
        if let Some((cert, key)) = tls {
            server.serve_tls(cert, key)?;
        }
        // A port found free can be taken before the server binds it (any connection's local
        // port comes from the same range): the server says so and exits, and another port is
        // tried.
        let mut attempts = 0;
        loop {
            attempts += 1;
            server.port = free_ports(1)
                .map_err(setup("pick a free loopback port"))?
                .first()
                .copied()
                .ok_or_else(|| setup("pick a free loopback port")(io::Error::other("none")))?;
            server.spawn()?;
            match server.wait_ready(within(READY_TIMEOUT)) {
                Ok(()) => return Ok(server),
                Err(PgError::Exited { log, .. })
                    if attempts < BIND_ATTEMPTS && log.contains("could not bind") => {}
                Err(err) => return Err(err),
            }
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A libpq connection string for `database` as [`ROLE`].
    pub fn dsn(&self, database: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user={ROLE} dbname={database} connect_timeout=5",
            self.port
        )
    }

    /// A new, empty database named after `name` (made unique), for one test: its DSN.
    ///
    /// # Errors
    /// The server refused the connection or the `CREATE DATABASE`.
    pub async fn create_database(&self, name: &str) -> Result<String, PgError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let database = format!(
            "{}_{}",
            name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
                .to_ascii_lowercase(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let (client, connection) =
            tokio_postgres::connect(&self.dsn("postgres"), tokio_postgres::NoTls)
                .await
                .map_err(sql("connect to create a database"))?;
        let connection = tokio::spawn(connection);
        let created = client
            .batch_execute(&format!("CREATE DATABASE {database}"))
            .await
            .map_err(sql(format!("create database {database}")));
        drop(client);
        let _ = connection.await;
        created?;
        Ok(self.dsn(&database))
    }

    /// The postmaster's PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.lock().as_ref().map(Child::id)
    }

    /// The last lines of the server's log, for a failure message.
    pub fn log_tail(&self) -> String {
        tail(&self.log_path(), 30)
    }

    /// SIGKILLs the server and all of its backends, and reaps it: a crash, with recovery from
    /// the write-ahead log at the next start.
    ///
    /// # Errors
    /// The signal could not be sent.
    pub fn kill(&self) -> Result<(), PgError> {
        let mut process = self.lock();
        if let Some(mut child) = process.take() {
            let pid = child.id();
            // Frozen first, so that it forks no backend between the listing and the kill.
            signal_one(pid, Signal::SIGSTOP)?;
            let backends = children_of(pid);
            signal_one(pid, Signal::SIGKILL)?;
            for backend in &backends {
                let _ = signal_one(*backend, Signal::SIGKILL);
            }
            child
                .wait()
                .map_err(setup(format!("reap PostgreSQL (pid {pid})")))?;
            // The next postmaster refuses to start while a backend still holds the shared
            // memory; SIGKILLed, they are gone in milliseconds.
            let bound = within(READY_TIMEOUT);
            while !backends
                .iter()
                .all(|backend| super::is_dead(to_pid(*backend)))
            {
                if bound.expired() {
                    return Err(PgError::NotReady {
                        port: self.port,
                        within: bound.bound(),
                        log: format!("backends {backends:?} outlived a SIGKILL"),
                    });
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            // Its status line says "ready" until a new postmaster rewrites it: gone, the next
            // start is waited for rather than taken as done (PostgreSQL takes a lock file whose
            // owner is dead as stale anyway).
            let _ = fs::remove_file(self.data_dir().join("postmaster.pid"));
        }
        Ok(())
    }

    /// SIGSTOPs the server and its backends: connections stay open and nothing answers.
    ///
    /// # Errors
    /// The server is not running, or the signal could not be sent.
    pub fn pause(&self) -> Result<(), PgError> {
        self.signal_running(Signal::SIGSTOP)
    }

    /// SIGCONTs a paused server.
    ///
    /// # Errors
    /// The server is not running, or the signal could not be sent.
    pub fn resume(&self) -> Result<(), PgError> {
        self.signal_running(Signal::SIGCONT)
    }

    /// Kills the server (as [`PgServer::kill`]) and starts it again on the same port and data,
    /// waiting until it accepts connections.
    ///
    /// # Errors
    /// As [`PgServer::kill`] and [`PgServer::start`].
    pub fn restart(&self) -> Result<(), PgError> {
        self.kill()?;
        self.spawn()?;
        self.wait_ready(within(READY_TIMEOUT))
    }

    /// `signal` to the postmaster and each of its backends (each is a process group of its
    /// own: PostgreSQL makes them so, to signal a backend's children with it).
    fn signal_running(&self, signal: Signal) -> Result<(), PgError> {
        let pid = self.pid().ok_or(PgError::Exited {
            port: self.port,
            status: "not running".to_owned(),
            log: self.log_tail(),
        })?;
        signal_one(pid, signal)?;
        for backend in children_of(pid) {
            // One that exited meanwhile needs no signal.
            let _ = signal_one(backend, signal);
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.process.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid).gid(gid);
        }
        // The server's locale and messages do not depend on the machine's.
        command.env("LC_ALL", "C").env("LANG", "C");
        command
    }

    fn initdb(&self) -> Result<(), PgError> {
        let output = self
            .command("initdb")
            .arg("--pgdata")
            .arg(self.data_dir())
            .args(["--username", ROLE, "--auth", "trust", "--encoding", "UTF8"])
            .arg("--no-sync")
            .stdin(Stdio::null())
            .output()
            .map_err(setup("run initdb"))?;
        if output.status.success() {
            return Ok(());
        }
        Err(PgError::Initdb {
            status: output.status.to_string(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        })
    }

    /// Writes `server.crt` and `server.key` (the server's default file names) into the data
    /// directory, owned by the server's user, the key readable by it alone, and turns TLS on.
    fn serve_tls(&self, cert: &str, key: &str) -> Result<(), PgError> {
        let data = self.data_dir();
        for (name, text) in [("server.crt", cert), ("server.key", key)] {
            let path = data.join(name);
            fs::write(&path, text).map_err(setup(format!("write {name}")))?;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600))
                .map_err(setup(format!("restrict {name}")))?;
            if let Some((uid, gid)) = self.run_as {
                nix::unistd::chown(&path, Some(uid.into()), Some(gid.into()))
                    .map_err(|errno| setup(format!("hand {name} to postgres"))(errno.into()))?;
            }
        }
        let mut conf = fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .map_err(setup("open postgresql.conf"))?;
        writeln!(conf, "ssl = on").map_err(setup("turn ssl on"))
    }

    fn spawn(&self) -> Result<(), PgError> {
        let log_path = self.log_path();
        let mut log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(setup(format!("open {}", log_path.display())))?;
        if let Some((uid, gid)) = self.run_as {
            let _ = nix::unistd::chown(&log_path, Some(uid.into()), Some(gid.into()));
        }
        writeln!(
            log,
            "----- postgres harness: start on port {} -----",
            self.port
        )
        .map_err(setup("write the log's marker"))?;
        let stderr = log.try_clone().map_err(setup("share the log"))?;
        let mut command = self.command("postgres");
        command
            .arg("-D")
            .arg(self.data_dir())
            .arg("-p")
            .arg(self.port.to_string())
            // The socket beside the data, not /var/run/postgresql (root's, and shared).
            .arg("-k")
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .args(["-c", "max_connections=200"])
            .args(["-c", "shared_buffers=32MB"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr);
        let child = spawn_with_pdeathsig(command).map_err(setup("start postgres"))?;
        *self.lock() = Some(child);
        Ok(())
    }

    /// Waits until the postmaster says it is ready (`postmaster.pid`'s status line, which it
    /// writes once it accepts connections), or exits.
    fn wait_ready(&self, bound: Within) -> Result<(), PgError> {
        let pid_file = self.data_dir().join("postmaster.pid");
        loop {
            if let Some(child) = self.lock().as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(PgError::Exited {
                    port: self.port,
                    status: status.to_string(),
                    log: self.log_tail(),
                });
            }
            let ready = fs::read_to_string(&pid_file)
                .is_ok_and(|text| text.lines().nth(7).is_some_and(|l| l.trim() == "ready"));
            if ready {
                return Ok(());
            }
            if bound.expired() {
                return Err(PgError::NotReady {
                    port: self.port,
                    within: bound.bound(),
                    log: self.log_tail(),
                });
            }
            // No event to await here: the postmaster only writes a file.
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self.resume();
        let _ = self.kill();
    }
}

impl std::fmt::Debug for PgServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgServer")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .finish_non_exhaustive()
    }
}

/// The server shared by every test of this process that does not fault it, started by the first
/// caller and stopped at exit. Each test takes its own database
/// ([`PgServer::create_database`]).
///
/// # Panics
/// If the server cannot be started (every later caller panics with the same message).
pub fn shared_postgres() -> &'static PgServer {
    let shared = SHARED.get_or_init(|| {
        let started = PgServer::start().map_err(|e| e.to_string());
        if started.is_ok() {
            // SAFETY: `stop_shared_postgres` is an `extern "C" fn()` that does not unwind.
            unsafe { nix::libc::atexit(stop_shared_postgres) };
        }
        started
    });
    match shared {
        Ok(server) => server,
        Err(message) => panic!("the shared PostgreSQL server did not start: {message}"),
    }
}

static SHARED: OnceLock<Result<PgServer, String>> = OnceLock::new();

extern "C" fn stop_shared_postgres() {
    if let Some(Ok(server)) = SHARED.get() {
        let _ = server.kill();
        // Best effort at process exit: nobody is left to report a failure to.
        let _ = fs::remove_dir_all(server.dir.path());
    }
}

/// The newest installed PostgreSQL's server programs (Debian keeps them per major version).
fn server_programs() -> Result<PathBuf, PgError> {
    let versions = fs::read_dir("/usr/lib/postgresql").map_err(|_| PgError::NotInstalled)?;
    versions
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let major: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((major, bin))
        })
        .max_by_key(|(major, _)| *major)
        .map(|(_, bin)| bin)
        .ok_or(PgError::NotInstalled)
}

/// As root, the `postgres` user's uid and gid; otherwise none (the server runs as we do).
fn run_as() -> Result<Option<(u32, u32)>, PgError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    match User::from_name("postgres") {
        Ok(Some(user)) => Ok(Some((user.uid.as_raw(), user.gid.as_raw()))),
        _ => Err(PgError::NotInstalled),
    }
}

fn signal_one(pid: u32, signal: Signal) -> Result<(), PgError> {
    signal::kill(to_pid(pid), signal).map_err(|source| PgError::Signal {
        pid,
        signal,
        source,
    })
}

fn to_pid(pid: u32) -> Pid {
    Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX))
}

/// The processes whose parent is `pid`, from `/proc`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|candidate| {
            let stat = fs::read_to_string(format!("/proc/{candidate}/stat")).unwrap_or_default();
            // After the command name in parentheses: state, then the parent's pid.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                == Some(pid)
        })
        .collect()
}

fn setup(what: impl Into<String>) -> impl FnOnce(io::Error) -> PgError {
    let what = what.into();
    move |source| PgError::Setup { what, source }
}

fn sql(what: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> PgError {
    let what = what.into();
    move |source| PgError::Sql { what, source }
}

/// Where a daemon test keeps the delayed queue: the two stores behind the same promises, for a
/// scenario that runs on each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueIn {
    ZooKeeper,
    Postgres,
}

impl QueueIn {
    /// The `[delayed]` table of a schedule in `dir`: none for ZooKeeper; for PostgreSQL, a
    /// database of its own on the shared server, named after `test`, its DSN in a file in
    /// `dir`.
    pub async fn table(self, dir: &std::path::Path, test: &str) -> String {
        if self == Self::ZooKeeper {
            return String::new();
        }
        let dsn = shared_postgres()
            .create_database(test)
            .await
            .expect("a database");
        let dsn_file = dir.join("dsn");
        std::fs::write(&dsn_file, format!("{dsn}\n")).expect("dsn file");
        format!(
            "[delayed]\nstore = \"postgres\"\ndsn_file = \"{}\"\n\n",
            dsn_file.display()
        )
    }
}
