//! The TOML schedule file: schema, defaults, validation with file:line:col errors.
//!
//! Owns: turning the text of a schedule file into a validated [`Config`] of domain types, and
//! every message an operator sees about a bad file (all problems at once, compiler style).
//! Must not: do I/O beyond reading the file and the environment variable named by `auth_env`.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::Deserialize;
use toml::Spanned;

use crate::ids::{JobName, NodeId};
use crate::runner::{JobSpec, Launcher, Program};
use crate::schedule::{self, Schedule};
pub use crate::zk::{AclPolicy, Secret};

/// A validated schedule file.
#[derive(Debug, Clone)]
pub struct Config {
    pub zookeeper: ZookeeperConfig,
    pub lock: LockConfig,
    pub log: LogConfig,
    /// `None`: no HTTP listener (the default).
    pub http: Option<HttpConfig>,
    pub jobs: Vec<JobConfig>,
}

/// `[http]`: one small listener per node for metrics, status and steering (docs/API.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    pub listen: std::net::SocketAddr,
    /// The bearer token write requests must carry, read from the variable `token_env` names or
    /// the file `token_file` names (never from the schedule file itself). `None`: writes are
    /// refused, and only a loopback address may listen.
    pub token: Option<Secret>,
}

/// `[zookeeper]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZookeeperConfig {
    /// `host:port[,host:port…][/chroot]`.
    pub connect: String,
    pub session_timeout: Duration,
    pub connect_timeout: Duration,
    /// Digest credentials `user:password`, from the file or from the variable `auth_env` names.
    pub auth: Option<Secret>,
    pub acl: AclPolicy,
    /// `tls = { ca, cert, key }`: the files' PEM texts, read at load.
    pub tls: Option<crate::zk::TlsFiles>,
    /// `sasl = { mechanism = "digest-md5", username, password_env | password_file }`.
    pub sasl: Option<crate::zk::SaslCredentials>,
}

impl ZookeeperConfig {
    /// What the ZooKeeper session needs from this section.
    pub fn settings(&self) -> crate::zk::ZkSettings {
        crate::zk::ZkSettings {
            connect: self.connect.clone(),
            session_timeout: self.session_timeout,
            auth: self.auth.clone(),
            acl: self.acl,
            tls: self.tls.clone(),
            sasl: self.sasl.clone(),
        }
    }
}

/// `[lock]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockConfig {
    pub name: String,
    /// How long before its tick a claim is sent, so the claim's round trip never delays a fire.
    pub claim_ahead: Duration,
    pub root: String,
    pub takeover_delay: Duration,
    /// `None`: this host's IP, found at start.
    pub node_id: Option<NodeId>,
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    pub format: LogFormat,
    /// A tracing filter, e.g. `info` or `zkcron=debug`.
    pub level: String,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// What happens to a running job when this node loses the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnLost {
    /// Stop it (SIGTERM to its process group, SIGKILL after `kill_grace`).
    Cancel,
    /// Let it run to its end.
    Finish,
}

/// Whether runs of one job may overlap across the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Concurrency {
    /// Skip a tick (recorded as `skipped`) while a run of the job is alive anywhere.
    Forbid,
    /// Let runs overlap.
    Allow,
    /// Cancel this node's running run of the job (its process group) and start the new one.
    Replace,
}

/// What a new owner (or an owner back from an outage) does with ticks missed meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Misfire {
    /// Fire none of them.
    Skip,
    /// Fire the latest one (within `starting_deadline`).
    RunOnce,
    /// Fire every one within `starting_deadline`, oldest first, one after another.
    RunAll,
}

/// What a new owner does with a run its previous owner left `claimed` or `running`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnInterrupted {
    /// Mark it interrupted and leave it (at most once: it may have run partly).
    Skip,
    /// Mark it interrupted and start it again: same run id, next attempt.
    Rerun,
}

/// One `[[job]]`.
#[derive(Debug, Clone)]
pub struct JobConfig {
    /// Shared with every run and action of the job: one copy however many refer to it.
    pub spec: Arc<JobSpec>,
    /// `None`: an on-demand job, fired only when submitted (issue "Delayed one-off jobs").
    pub schedule: Option<Schedule>,
    /// The job's zone: its schedule's, and the one its due times are shown in.
    pub timezone: Tz,
    pub on_lost: OnLost,
    pub enabled: bool,
    /// How many run records of this job are kept in ZooKeeper.
    pub history: usize,
    /// How many of its runs may be claimed or running on the owner at once before further due
    /// submissions wait their turn (ticks are never held back by it).
    pub max_running: usize,
    pub concurrency: Concurrency,
    pub misfire: Misfire,
    /// How far back catch-up looks for missed ticks.
    pub starting_deadline: Duration,
    pub on_interrupted: OnInterrupted,
    /// How many times a failed or timed-out run is tried again.
    pub retries: u32,
    /// Pause before the first retry; doubles for each further one.
    pub retry_backoff: Duration,
}

impl JobConfig {
    /// The job's first tick strictly after `after`; `None` for an on-demand job or a schedule
    /// that fires no more.
    pub fn next_tick_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.schedule.as_ref()?.next_after(after)
    }
}

const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_TAKEOVER_DELAY: Duration = Duration::from_secs(10);
const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(10);
const DEFAULT_ROOT: &str = "/zkcron";
const DEFAULT_HISTORY: usize = 100;
/// At most this many records per job: with [`MAX_RUNNING_LIMIT`] open runs beside them, one
/// listing of a job's records stays far below ZooKeeper's default `jute.maxbuffer` (DESIGN.md
/// "Delayed one-off jobs": the arithmetic).
pub const HISTORY_LIMIT: usize = 5_000;
const DEFAULT_MAX_RUNNING: usize = 256;
/// The most runs of one job a node holds open at once (`max_running`).
pub const MAX_RUNNING_LIMIT: usize = 1_000;
const DEFAULT_CLAIM_AHEAD: Duration = Duration::from_millis(250);
const DEFAULT_STARTING_DEADLINE: Duration = Duration::from_secs(300);
const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_secs(30);

/// A schedule file that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(ConfigError),
}

/// Every problem found in one file, each with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: PathBuf,
    text: String,
    pub problems: Vec<Problem>,
}

/// One problem: where, in which key, and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Byte range in the file; `None` when the problem is the file as a whole.
    pub span: Option<Range<usize>>,
    /// What the problem is in, e.g. `zookeeper.connect` or `job "nightly": schedule`.
    pub context: String,
    pub message: String,
    /// The value is a secret: the rendering shows where, never the line itself.
    pub secret: bool,
}

impl ConfigError {
    /// Line and column (1-based) of a byte offset; never panics on a bad offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let before = self.text.get(..offset).unwrap_or(&self.text);
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, col)
    }

    /// `file:line:col: context: message` lines, each with the offending line and a caret.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&self.render_problem(problem));
        }
        out
    }

    fn render_problem(&self, problem: &Problem) -> String {
        let path = self.path.display();
        let context = if problem.context.is_empty() {
            String::new()
        } else {
            format!("{}: ", problem.context)
        };
        let Some(span) = &problem.span else {
            return format!("{path}: {context}{}", problem.message);
        };
        let (line, col) = self.line_col(span.start);
        let mut out = format!("{path}:{line}:{col}: {context}{}", problem.message);
        if let Some(source_line) = self.text.lines().nth(line - 1).filter(|_| !problem.secret) {
            let width = self
                .text
                .get(span.clone())
                .map_or(1, |s| s.lines().next().map_or(1, |l| l.chars().count()));
            let gutter = " ".repeat(line.to_string().len());
            out.push_str(&format!(
                "\n {gutter} |\n {line} | {source_line}\n {gutter} | {}{}",
                " ".repeat(col - 1),
                "^".repeat(width.max(1))
            ));
        }
        out
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

impl std::error::Error for ConfigError {}

/// Reads and validates a schedule file.
///
/// # Errors
/// The file cannot be read, or it has problems (all of them are reported).
pub fn load(path: &Path) -> Result<Config, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(path, &text, &|name| std::env::var(name).ok()).map_err(LoadError::Invalid)
}

/// Validates schedule text; `env` looks up environment variables (injected for tests).
///
/// # Errors
/// Every problem in the text, with spans.
pub fn parse(
    path: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let fail = |problems| ConfigError {
        path: path.to_owned(),
        text: text.to_owned(),
        problems,
    };
    let raw: RawConfig = toml::from_str(text).map_err(|err| {
        fail(vec![Problem {
            span: err.span(),
            context: String::new(),
            message: err.message().to_owned(),
            secret: false,
        }])
    })?;
    let mut v = Validator {
        problems: Vec::new(),
        env,
    };
    let config = v.config(raw);
    v.problems
        .sort_by_key(|problem| problem.span.as_ref().map(|span| span.start));
    match config {
        Some(config) if v.problems.is_empty() => Ok(config),
        _ => Err(fail(v.problems)),
    }
}

// ---- the raw file, as serde sees it ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    zookeeper: RawZookeeper,
    lock: RawLock,
    #[serde(default)]
    log: Option<RawLog>,
    #[serde(default)]
    http: Option<RawHttp>,
    #[serde(default)]
    job: Vec<Spanned<RawJob>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    listen: Spanned<String>,
    token_env: Option<Spanned<String>>,
    token_file: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawZookeeper {
    connect: Spanned<String>,
    session_timeout: Option<Spanned<String>>,
    connect_timeout: Option<Spanned<String>>,
    auth: Option<Spanned<String>>,
    auth_env: Option<Spanned<String>>,
    acl: Option<Spanned<AclPolicy>>,
    tls: Option<Spanned<RawTls>>,
    sasl: Option<Spanned<RawSasl>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    ca: Spanned<String>,
    cert: Option<Spanned<String>>,
    key: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSasl {
    mechanism: Spanned<String>,
    username: Spanned<String>,
    password_env: Option<Spanned<String>>,
    password_file: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLock {
    name: Spanned<String>,
    root: Option<Spanned<String>>,
    takeover_delay: Option<Spanned<String>>,
    node_id: Option<Spanned<String>>,
    claim_ahead: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLog {
    format: Option<LogFormat>,
    level: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    name: Spanned<String>,
    schedule: Option<Spanned<String>>,
    timezone: Option<Spanned<String>>,
    command: Option<Spanned<Vec<String>>>,
    shell: Option<Spanned<String>>,
    working_dir: Option<Spanned<String>>,
    env: Option<Spanned<BTreeMap<String, String>>>,
    timeout: Option<Spanned<String>>,
    kill_grace: Option<Spanned<String>>,
    on_lost: Option<OnLost>,
    enabled: Option<bool>,
    history: Option<Spanned<i64>>,
    max_running: Option<Spanned<i64>>,
    concurrency: Option<Concurrency>,
    misfire: Option<Misfire>,
    starting_deadline: Option<Spanned<String>>,
    on_interrupted: Option<OnInterrupted>,
    retries: Option<Spanned<i64>>,
    retry_backoff: Option<Spanned<String>>,
}

// ---- validation: collect every problem, build domain types ----

struct Validator<'e> {
    problems: Vec<Problem>,
    env: &'e dyn Fn(&str) -> Option<String>,
}

impl Validator<'_> {
    fn problem(
        &mut self,
        span: Range<usize>,
        context: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.problems.push(Problem {
            span: Some(span),
            context: context.into(),
            message: message.into(),
            secret: false,
        });
    }

    fn config(&mut self, raw: RawConfig) -> Option<Config> {
        let zookeeper = self.zookeeper(raw.zookeeper);
        let lock = self.lock(raw.lock);
        let log = self.log(raw.log);
        let http = raw.http.map(|raw| self.http(raw));
        let mut seen = HashSet::new();
        // Sized once: a running daemon keeps this Vec for good, and growing it by doubling left
        // up to half of it unused (6384 of 16 384 slots, 1.8 MB, at 10 000 jobs: issue 10).
        let mut jobs = Vec::with_capacity(raw.job.len());
        for job in raw.job {
            let span = job.span();
            let job = job.into_inner();
            let name = job.name.get_ref().clone();
            if !seen.insert(name.clone()) {
                self.problem(
                    job.name.span(),
                    format!("job {name:?}"),
                    "duplicate job name",
                );
            }
            jobs.extend(self.job(job, span));
        }
        Some(Config {
            zookeeper: zookeeper?,
            lock: lock?,
            log: log?,
            http: http.flatten(),
            jobs,
        })
    }

    fn http(&mut self, raw: RawHttp) -> Option<HttpConfig> {
        let listen = match raw.listen.get_ref().trim().parse::<std::net::SocketAddr>() {
            Ok(listen) => Some(listen),
            Err(_) => {
                let message =
                    "expected an address and port like \"127.0.0.1:9464\" or \"[::1]:9464\"";
                self.problem(raw.listen.span(), "http.listen", message);
                None
            }
        };
        let token = match (raw.token_env, raw.token_file) {
            (Some(env), Some(_)) => {
                let message = "set either token_env or token_file, not both";
                self.problem(env.span(), "http.token_env", message);
                None
            }
            (Some(var), None) => match (self.env)(var.get_ref()).filter(|t| !t.trim().is_empty()) {
                Some(value) => Some(Secret::new(value.trim())),
                None => {
                    let message =
                        format!("environment variable {} is not set or empty", var.get_ref());
                    self.problem(var.span(), "http.token_env", message);
                    None
                }
            },
            (None, Some(file)) => match std::fs::read_to_string(file.get_ref()) {
                Ok(text) if !text.trim().is_empty() => Some(Secret::new(text.trim())),
                Ok(_) => {
                    let message = format!("token file {} is empty", file.get_ref());
                    self.problem(file.span(), "http.token_file", message);
                    None
                }
                Err(err) => {
                    let message = format!("cannot read token file {}: {err}", file.get_ref());
                    self.problem(file.span(), "http.token_file", message);
                    None
                }
            },
            (None, None) => None,
        };
        let listen = listen?;
        if token.is_none() && !listen.ip().is_loopback() {
            let message = format!(
                "listening on {listen}, beyond loopback, needs a token for its write endpoints: set token_env or token_file"
            );
            self.problem(raw.listen.span(), "http.listen", message);
        }
        Some(HttpConfig { listen, token })
    }

    fn duration(
        &mut self,
        raw: Option<Spanned<String>>,
        context: &str,
        default: Duration,
    ) -> Duration {
        let Some(raw) = raw else { return default };
        match humantime::parse_duration(raw.get_ref().trim()) {
            Ok(duration) => duration,
            Err(err) => {
                let message =
                    format!("expected a duration like \"90s\", \"2h\" or \"1h30m\" ({err})");
                self.problem(raw.span(), context, message);
                default
            }
        }
    }

    /// A count from 1 to `limit`; `what` says what it counts, for the message.
    fn count(
        &mut self,
        raw: Option<Spanned<i64>>,
        context: &str,
        (limit, what): (usize, &str),
        default: usize,
    ) -> usize {
        let Some(raw) = raw else { return default };
        match usize::try_from(*raw.get_ref()) {
            Ok(n) if (1..=limit).contains(&n) => n,
            _ => {
                let message = format!("expected {what}, from 1 to {limit}");
                self.problem(raw.span(), context, message);
                default
            }
        }
    }

    fn positive_duration(
        &mut self,
        raw: Option<Spanned<String>>,
        context: &str,
        default: Duration,
    ) -> Duration {
        let span = raw.as_ref().map(Spanned::span);
        let duration = self.duration(raw, context, default);
        if let (Some(span), true) = (span, duration.is_zero()) {
            self.problem(span, context, "must be longer than zero");
        }
        duration
    }

    fn zookeeper(&mut self, raw: RawZookeeper) -> Option<ZookeeperConfig> {
        let connect = raw.connect.get_ref().trim().to_owned();
        if let Err(err) = crate::zk::split_connect(&connect) {
            self.problem(raw.connect.span(), "zookeeper.connect", err.to_string());
        }
        let session_timeout = self.positive_duration(
            raw.session_timeout,
            "zookeeper.session_timeout",
            DEFAULT_SESSION_TIMEOUT,
        );
        let connect_timeout = self.positive_duration(
            raw.connect_timeout,
            "zookeeper.connect_timeout",
            DEFAULT_CONNECT_TIMEOUT,
        );
        let auth = match (raw.auth, raw.auth_env) {
            (Some(_), Some(env)) => {
                self.problem(
                    env.span(),
                    "zookeeper.auth_env",
                    "set either auth or auth_env, not both",
                );
                None
            }
            (Some(auth), None) => self.credentials(auth.get_ref(), auth.span(), "zookeeper.auth"),
            (None, Some(var)) => match (self.env)(var.get_ref()) {
                Some(value) => self.credentials(&value, var.span(), "zookeeper.auth_env"),
                None => {
                    let message = format!("environment variable {} is not set", var.get_ref());
                    self.problem(var.span(), "zookeeper.auth_env", message);
                    None
                }
            },
            (None, None) => None,
        };
        let acl = raw
            .acl
            .as_ref()
            .map_or(AclPolicy::Open, |acl| *acl.get_ref());
        if let (Some(acl), None, AclPolicy::Creator) = (&raw.acl, &auth, acl) {
            self.problem(
                acl.span(),
                "zookeeper.acl",
                "\"creator\" needs credentials: set auth or auth_env",
            );
        }
        let tls = raw.tls.and_then(|tls| self.tls(tls));
        let sasl = raw.sasl.and_then(|sasl| self.sasl(sasl));
        Some(ZookeeperConfig {
            connect,
            session_timeout,
            connect_timeout,
            auth,
            acl,
            tls,
            sasl,
        })
    }

    /// Reads a file the schedule names; a problem at `span` when it cannot be read.
    fn read_file(&mut self, path: &Spanned<String>, context: &str) -> Option<String> {
        match std::fs::read_to_string(path.get_ref()) {
            Ok(text) => Some(text),
            Err(err) => {
                let message = format!("cannot read {}: {err}", path.get_ref());
                self.problem(path.span(), context, message);
                None
            }
        }
    }

    fn tls(&mut self, raw: Spanned<RawTls>) -> Option<crate::zk::TlsFiles> {
        let span = raw.span();
        let raw = raw.into_inner();
        let ca = self.read_file(&raw.ca, "zookeeper.tls.ca");
        let identity = match (&raw.cert, &raw.key) {
            (Some(cert), Some(key)) => {
                let cert = self.read_file(cert, "zookeeper.tls.cert");
                let key = self.read_file(key, "zookeeper.tls.key");
                Some(cert.zip(key).map(|(cert, key)| (cert, Secret::new(key))))
            }
            (None, None) => None,
            (Some(_), None) | (None, Some(_)) => {
                self.problem(
                    span.clone(),
                    "zookeeper.tls",
                    "set both cert and key, or neither",
                );
                Some(None)
            }
        };
        let files = crate::zk::TlsFiles {
            ca: ca?,
            identity: match identity {
                Some(pair) => Some(pair?),
                None => None,
            },
        };
        if let Err(reason) = files.options() {
            self.problem(span, "zookeeper.tls", reason);
            return None;
        }
        Some(files)
    }

    fn sasl(&mut self, raw: Spanned<RawSasl>) -> Option<crate::zk::SaslCredentials> {
        let span = raw.span();
        let raw = raw.into_inner();
        if !raw.mechanism.get_ref().eq_ignore_ascii_case("digest-md5") {
            let message = "expected \"digest-md5\" (the mechanism ZooKeeper's SASL provider offers without Kerberos)";
            self.problem(raw.mechanism.span(), "zookeeper.sasl.mechanism", message);
        }
        let password = match (&raw.password_env, &raw.password_file) {
            (Some(var), None) => match (self.env)(var.get_ref()).filter(|p| !p.is_empty()) {
                Some(password) => Some(password),
                None => {
                    let message =
                        format!("environment variable {} is not set or empty", var.get_ref());
                    self.problem(var.span(), "zookeeper.sasl.password_env", message);
                    None
                }
            },
            (None, Some(file)) => self
                .read_file(file, "zookeeper.sasl.password_file")
                .map(|text| text.trim_end_matches(['\n', '\r']).to_owned()),
            _ => {
                let message = "set exactly one of password_env and password_file";
                self.problem(span, "zookeeper.sasl", message);
                None
            }
        }?;
        Some(crate::zk::SaslCredentials {
            username: raw.username.into_inner(),
            password: Secret::new(password),
        })
    }

    fn credentials(&mut self, value: &str, span: Range<usize>, context: &str) -> Option<Secret> {
        match value.split_once(':') {
            Some((user, password)) if !user.is_empty() && !password.is_empty() => {
                Some(Secret::new(value))
            }
            // Never echo the value: it is a secret.
            _ => {
                self.problem(
                    span,
                    context,
                    "expected digest credentials as \"user:password\"",
                );
                if let Some(problem) = self.problems.last_mut() {
                    problem.secret = true;
                }
                None
            }
        }
    }

    fn lock(&mut self, raw: RawLock) -> Option<LockConfig> {
        let name = raw.name.get_ref().clone();
        if let Err(reason) = crate::identity::validate_znode_name(&name) {
            self.problem(raw.name.span(), "lock.name", reason);
        }
        let root = match raw.root {
            Some(root) => {
                let value = root.get_ref().clone();
                let valid = value.starts_with('/')
                    && value.len() > 1
                    && !value.ends_with('/')
                    && value
                        .split('/')
                        .skip(1)
                        .all(|part| crate::identity::validate_znode_name(part).is_ok());
                if !valid {
                    self.problem(
                        root.span(),
                        "lock.root",
                        "expected an absolute znode path like \"/zkcron\"",
                    );
                }
                value
            }
            None => DEFAULT_ROOT.to_owned(),
        };
        let takeover_delay = self.duration(
            raw.takeover_delay,
            "lock.takeover_delay",
            DEFAULT_TAKEOVER_DELAY,
        );
        let node_id = raw.node_id.map(|id| {
            if let Err(reason) = crate::identity::validate_znode_name(id.get_ref()) {
                self.problem(id.span(), "lock.node_id", reason);
            }
            NodeId::new(id.into_inner())
        });
        let claim_ahead = self.duration(raw.claim_ahead, "lock.claim_ahead", DEFAULT_CLAIM_AHEAD);
        Some(LockConfig {
            name,
            claim_ahead,
            root,
            takeover_delay,
            node_id,
        })
    }

    fn log(&mut self, raw: Option<RawLog>) -> Option<LogConfig> {
        let Some(raw) = raw else {
            return Some(LogConfig {
                format: LogFormat::Text,
                level: "info".into(),
            });
        };
        let level = match raw.level {
            Some(level) => {
                if tracing_subscriber::EnvFilter::try_new(level.get_ref()).is_err() {
                    let message =
                        "expected a log filter like \"info\", \"debug\" or \"zkcron=debug,info\"";
                    self.problem(level.span(), "log.level", message);
                }
                level.into_inner()
            }
            None => "info".into(),
        };
        Some(LogConfig {
            format: raw.format.unwrap_or(LogFormat::Text),
            level,
        })
    }

    fn job(&mut self, raw: RawJob, span: Range<usize>) -> Option<JobConfig> {
        let name = raw.name.get_ref().clone();
        let context = |key: &str| format!("job {name:?}: {key}");
        if !is_job_name(&name) {
            self.problem(
                raw.name.span(),
                context("name"),
                "expected letters, digits, '_', '.' or '-' only",
            );
        }
        let tz = match &raw.timezone {
            Some(tz) => match schedule::parse_timezone(tz.get_ref()) {
                Ok(tz) => Some(tz),
                Err(err) => {
                    self.problem(tz.span(), context("timezone"), err.to_string());
                    None
                }
            },
            None => Some(chrono_tz::UTC),
        };
        // With a bad zone, still check the expression (in UTC) so every problem shows at once.
        let schedule = match &raw.schedule {
            None => Some(None),
            Some(expression) => {
                match Schedule::parse(expression.get_ref(), tz.unwrap_or(chrono_tz::UTC)) {
                    Ok(schedule) => tz.map(|_| Some(schedule)),
                    Err(err) => {
                        // Point at the bad field inside the quoted expression when we know it.
                        let whole = expression.span();
                        let span = err
                            .span()
                            .filter(|_| !expression.get_ref().contains('\\'))
                            .map_or(whole.clone(), |inner| {
                                whole.start + 1 + inner.start..whole.start + 1 + inner.end
                            });
                        self.problem(span, context("schedule"), err.to_string());
                        None
                    }
                }
            }
        };
        let program = match (raw.command, raw.shell) {
            (Some(command), None) => {
                let argv = command.get_ref().clone();
                if argv.first().is_none_or(|program| program.trim().is_empty()) {
                    let message = "expected a non-empty argv array like [\"/usr/local/bin/report\", \"--daily\"]";
                    self.problem(command.span(), context("command"), message);
                }
                Some(Program::Argv(argv))
            }
            (None, Some(shell)) => {
                if shell.get_ref().trim().is_empty() {
                    self.problem(
                        shell.span(),
                        context("shell"),
                        "expected a non-empty shell command",
                    );
                }
                Some(Program::Shell(shell.into_inner()))
            }
            (Some(_), Some(shell)) => {
                self.problem(
                    shell.span(),
                    context("shell"),
                    "set either command or shell, not both",
                );
                None
            }
            (None, None) => {
                self.problem(
                    span.clone(),
                    format!("job {name:?}"),
                    "expected command (an argv array) or shell",
                );
                None
            }
        };
        let working_dir = raw.working_dir.map(|dir| {
            if !Path::new(dir.get_ref()).is_absolute() {
                self.problem(
                    dir.span(),
                    context("working_dir"),
                    "expected an absolute path",
                );
            }
            PathBuf::from(dir.into_inner())
        });
        let env = raw.env.map_or_else(BTreeMap::new, |env| {
            let bad = env
                .get_ref()
                .keys()
                .find(|key| key.is_empty() || key.contains(['=', '\0']));
            if let Some(key) = bad {
                let message = format!("invalid variable name {key:?}");
                self.problem(env.span(), context("env"), message);
            }
            env.into_inner()
        });
        let timeout = raw.timeout.map(|t| {
            let key = context("timeout");
            self.positive_duration(Some(t), &key, Duration::ZERO)
        });
        let kill_grace = self.duration(raw.kill_grace, &context("kill_grace"), DEFAULT_KILL_GRACE);
        let retries = match raw.retries {
            Some(retries) => u32::try_from(*retries.get_ref()).unwrap_or_else(|_| {
                self.problem(
                    retries.span(),
                    context("retries"),
                    "expected a number of retries, 0 or more",
                );
                0
            }),
            None => 0,
        };
        let retry_backoff = self.duration(
            raw.retry_backoff,
            &context("retry_backoff"),
            DEFAULT_RETRY_BACKOFF,
        );
        let starting_deadline = self.duration(
            raw.starting_deadline,
            &context("starting_deadline"),
            DEFAULT_STARTING_DEADLINE,
        );
        let spec = JobSpec {
            name: JobName::new(name.clone()),
            program: program?,
            working_dir,
            env,
            timeout,
            kill_grace,
            launcher: Launcher::Fork,
        };
        let history = self.count(
            raw.history,
            &context("history"),
            (HISTORY_LIMIT, "a number of runs to keep"),
            DEFAULT_HISTORY,
        );
        let max_running = self.count(
            raw.max_running,
            &context("max_running"),
            (MAX_RUNNING_LIMIT, "how many runs may be open at once"),
            DEFAULT_MAX_RUNNING,
        );
        Some(JobConfig {
            spec: Arc::new(spec),
            schedule: schedule?,
            timezone: tz?,
            on_lost: raw.on_lost.unwrap_or(OnLost::Cancel),
            enabled: raw.enabled.unwrap_or(true),
            history,
            max_running,
            // Submissions of an on-demand job are independent requests: one must not skip
            // another that happens to be running (DESIGN.md "Delayed one-off jobs").
            concurrency: raw.concurrency.unwrap_or(if raw.schedule.is_none() {
                Concurrency::Allow
            } else {
                Concurrency::Forbid
            }),
            misfire: raw.misfire.unwrap_or(Misfire::RunOnce),
            starting_deadline,
            on_interrupted: raw.on_interrupted.unwrap_or(OnInterrupted::Skip),
            retries,
            retry_backoff,
        })
    }
}

fn is_job_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

#[cfg(test)]
mod tests;
