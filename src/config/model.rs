//! The schedule file's domain types: what the daemon, the machines and the clients read once
//! a file is validated.
//!
//! Owns: `Config` and its sections, a job's settings and policies, and the limits on them.
//! Must not: parse or check anything (the sections' files do).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::Deserialize;

use crate::ensemble::AclPolicy;
use crate::ids::{JobName, NodeId};
use crate::run::{JobSpec, NoticeChannels};
use crate::schedule::Schedule;
use crate::secret::Secret;

/// A validated schedule file.
#[derive(Debug, Clone)]
pub struct Config {
    pub zookeeper: ZookeeperConfig,
    pub lock: LockConfig,
    pub log: LogConfig,
    /// `[audit]`: how long the trail of operator actions is kept.
    pub audit: AuditConfig,
    /// `[delayed]`: where the delayed queue is kept.
    pub delayed: DelayedStore,
    /// `None`: no HTTP listener (the default).
    pub http: Option<HttpConfig>,
    /// `None`: no spans are made or sent (the default).
    pub telemetry: Option<TelemetryConfig>,
    /// `[output]`: where and how much of its runs' output this node keeps.
    pub output: OutputConfig,
    /// `[node]`: what this node carries for placement.
    pub node: NodeConfig,
    /// `[[group]]`: the named lock groups, in file order; jobs without `group` are in the
    /// default group (the `[lock]` itself).
    pub groups: Vec<GroupConfig>,
    /// `[[limit]]`: cluster-wide caps on runs, in file order.
    pub limits: Vec<LimitConfig>,
    /// `[[calendar]]`: days and hours that jobs skip or keep, in file order.
    pub calendars: Vec<Arc<crate::calendar::Calendar>>,
    /// The job policies `[defaults]` sets, each `key = value` as written: what `zkcron check`
    /// shows.
    pub defaults_shown: Vec<String>,
    /// The drop-ins read (`zkcron.d/*.toml`), each with what it set (`lock.node_id`,
    /// `[[job]] "extra"`): where a value came from, for `check` and `status`.
    pub drop_ins: Vec<(std::path::PathBuf, Vec<String>)>,
    /// The jobs a drop-in declares or changes, each with those drop-ins in the order they
    /// apply: this host's own, which its schedule fingerprint names (`drift`).
    pub per_host_jobs: std::collections::BTreeMap<crate::ids::JobName, Vec<std::path::PathBuf>>,
    /// Secrets written in a file itself (`zookeeper.auth`): `zkcron check` refuses one in a file
    /// that group or others may read, and `run` warns of one.
    pub inline_secrets: Vec<InlineSecret>,
    /// The nodes zkcron creates are left open to every client of the ensemble: `zkcron check`
    /// warns, and `run` logs it.
    pub open_acl: Option<OpenAcl>,
    /// Shared as they are by the fire machine, the reloader, steering and the HTTP API: one
    /// copy of each job lives on.
    pub jobs: Vec<Arc<JobConfig>>,
}

/// Nodes open to every client of the ensemble: written `acl = "open"`, or no credentials with
/// servers beyond this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAcl {
    /// The file and line of `acl = "open"`; `None` when open by default.
    pub written_at: Option<(std::path::PathBuf, usize)>,
}

impl OpenAcl {
    /// What it allows, and the fix, as `check` and the log say it.
    pub fn why(&self) -> String {
        let how = match self.written_at {
            Some(_) => "acl = \"open\"",
            None => "without credentials",
        };
        format!(
            "{how}, any client of the ensemble may take the lock, delete the epoch or forge run \
             records; set credentials (auth_file, auth_env or sasl) and the nodes zkcron creates \
             are closed to all but them (acl = \"creator\", the default with credentials)"
        )
    }
}

/// A secret written in a schedule file rather than named by `…_env` or `…_file`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineSecret {
    /// `zookeeper.auth`.
    pub key: &'static str,
    pub file: std::path::PathBuf,
    pub line: usize,
}

impl InlineSecret {
    /// The permission bits of its file, as the file is now; `None` when it cannot be read.
    pub fn file_mode(&self) -> Option<u32> {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(&self.file)
            .ok()
            .map(|meta| meta.permissions().mode() & 0o7777)
    }

    /// What is wrong with it, as `check` and the log say it: refused (`true`) when its file's
    /// `mode` lets group or others read it, as ssh refuses a private key they can read.
    pub fn verdict(&self, mode: u32) -> (bool, String) {
        let key = self.key.rsplit('.').next().unwrap_or(self.key);
        let fix = format!(
            "name a file of mode 0600 with {key}_file, or a variable with {key}_env (in the \
             unit's EnvironmentFile)"
        );
        if mode & 0o077 == 0 {
            (
                false,
                format!(
                    "a secret written in the schedule (its file is private, mode {mode:04o}); {fix}"
                ),
            )
        } else {
            (
                true,
                format!(
                    "a secret in a file that group or others may read (mode {mode:04o}): {fix}"
                ),
            )
        }
    }
}

/// `[node]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeConfig {
    /// Tags a `[[group]]` may require of the nodes that own it.
    pub tags: std::collections::BTreeSet<String>,
}

/// One `[[group]]`: a lock of its own, with its own owner, epoch and fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    pub name: String,
    /// Only nodes carrying every one of these tags contend for it.
    pub requires: std::collections::BTreeSet<String>,
}

impl Broadcast {
    /// Whether a node carrying `tags` runs its ticks.
    pub fn runs_on(&self, tags: &std::collections::BTreeSet<String>) -> bool {
        self.requires.is_subset(tags)
    }
}

impl Config {
    /// Whether `[[group]]`s are declared: then the default group is balanced over the nodes
    /// with them; a file without groups runs one lock, as before groups existed.
    pub fn grouped(&self) -> bool {
        !self.groups.is_empty()
    }
}

/// One `[[limit]]`: at most `max` runs of the jobs that name it at once, across the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitConfig {
    pub name: String,
    pub max: usize,
}

/// `[http]`: one small listener per node for metrics, status and steering (docs/API.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    pub listen: std::net::SocketAddr,
    /// The bearer token write requests must carry, read from the variable `token_env` names or
    /// the file `token_file` names (never from the schedule file itself). `None`: writes are
    /// refused, and only a loopback address may listen.
    pub token: Option<Secret>,
    /// Named tokens from `tokens_file`, stored hashed: with them, who asked is the token's name,
    /// and reading `/v1/` needs a token too (a `read` one will do).
    pub tokens: Vec<NamedToken>,
}

/// One line of `[http] tokens_file`: `NAME KIND SHA256-HEX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedToken {
    /// Recorded as who asked (`token:NAME`).
    pub name: String,
    pub kind: TokenKind,
    /// SHA-256 of the token: the file never holds the token itself.
    pub sha256: [u8; 32],
}

/// What a named token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// Read `/v1/` (dashboards, the console).
    Read,
    /// Read, and steer: trigger, submit, cancel, pause, resume, release.
    Write,
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
    /// `"creator"` by default with credentials (`auth…` or `sasl`), else `"open"`.
    pub acl: AclPolicy,
    /// Identities that may read a closed ledger (`read_acl`).
    pub read_acl: Vec<crate::ensemble::AclId>,
    /// `tls = { ca, cert, key }`: the files' PEM texts, read at load.
    pub tls: Option<crate::ensemble::TlsFiles>,
    /// `sasl = { mechanism = "digest-md5", username, password_env | password_file }`.
    pub sasl: Option<crate::ensemble::SaslCredentials>,
}

impl ZookeeperConfig {
    /// What the ZooKeeper session needs from this section.
    pub fn settings(&self) -> crate::ensemble::ZkSettings {
        crate::ensemble::ZkSettings {
            connect: self.connect.clone(),
            session_timeout: self.session_timeout,
            auth: self.auth.clone(),
            acl: self.acl,
            read_acl: self.read_acl.clone(),
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
    /// How far this node's clock may be off the fleet's before it stops contending for the lock
    /// (and hands it over if it owns it).
    pub max_clock_offset: Duration,
    /// Membership unchanged this long counts as settled: only then are groups moved to balance
    /// them (issue 19).
    pub rebalance_after: Duration,
}

impl LockConfig {
    /// The default lock group's paths: the one place they are built from the schedule.
    pub fn paths(&self) -> crate::layout::LockPaths {
        crate::layout::LockPaths::new(&self.root, &self.name)
    }

    /// Every path of this lock group, built once.
    pub fn group_paths(&self) -> crate::layout::GroupPaths {
        crate::layout::GroupPaths::new(self.paths())
    }
}

/// `[audit]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// How long an entry is kept at least; a day's entries go together once its last is older.
    pub keep: std::time::Duration,
}

/// `[delayed]`: where the delayed queue — pending submissions, their payloads, the ids
/// remembered and their runs' records — is kept. ZooKeeper keeps the lock, the members, the
/// fencing token and the ticks' ledger either way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DelayedStore {
    /// In ZooKeeper, beside the ticks' ledger (the default).
    #[default]
    ZooKeeper,
    /// In a PostgreSQL database; `dsn` is `None` where this load did not read it (`check`
    /// without lookups); `tls`, when the database is reached over TLS (the files read likewise).
    Postgres {
        dsn: Option<Secret>,
        tls: Option<crate::ensemble::TlsFiles>,
    },
}

/// `[output]`: the whole output of the runs this node runs, kept on this host (issue 52).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputConfig {
    /// Where; `None`: `$STATE_DIRECTORY/output` when systemd gives the daemon a state
    /// directory (the packaged unit does), else nothing is kept.
    pub dir: Option<PathBuf>,
    /// All runs' output together at most; the oldest runs go first.
    pub keep_size: u64,
    /// A run's output is removed this long after it ended.
    pub keep_for: Duration,
    /// One run's output at most: past it, its first and last halves are kept with a line
    /// saying how much was dropped between.
    pub per_run: u64,
}

/// `[telemetry]`: where this node sends the spans of its runs and of its lock (issue 52).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` is: spans go to
    /// `<endpoint>/v1/traces`, protobuf-encoded.
    pub endpoint: String,
    /// `service.name` (`zkcron` unless set).
    pub service_name: String,
    /// More resource attributes, as written (`deployment.environment.name = "prod"`).
    pub resource: Vec<(String, String)>,
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

/// Which runs keep the end of their output (the last 4 KiB of stdout and stderr, or a failed
/// delivery's answer) in their record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeepOutput {
    /// Runs that did not succeed: what an operator reads when one fails.
    Failed,
    /// Every run.
    Always,
    /// None: output only goes to the daemon's log.
    Never,
}

impl KeepOutput {
    /// Whether a run that ended `succeeded` (or not) keeps its output.
    pub fn keeps(self, succeeded: bool) -> bool {
        match self {
            KeepOutput::Failed => !succeeded,
            KeepOutput::Always => true,
            KeepOutput::Never => false,
        }
    }
}

/// Which failures a job's notices tell of (`notify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifyWhen {
    /// A run's final outcome only: a failure that will be retried is not told.
    Final,
    /// Every failed attempt too.
    EveryAttempt,
}

/// A job's failure notices and auto-pause (issue 20); `[defaults]` gives every job's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoticePolicy {
    /// `on_failure` and `on_failure_webhook`.
    pub channels: Arc<NoticeChannels>,
    pub when: NotifyWhen,
    /// Tell of the first success after failures.
    pub on_recovery: bool,
    /// Pause the job after this many failed runs in a row.
    pub pause_after_failures: Option<u32>,
}

impl Default for NoticePolicy {
    fn default() -> Self {
        Self {
            channels: Arc::default(),
            when: NotifyWhen::Final,
            on_recovery: false,
            pause_after_failures: None,
        }
    }
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
    /// Which runs keep their last output in their record.
    pub keep_output: KeepOutput,
    /// Each tick starts this much later at most: by [`JobConfig::start_of`].
    pub jitter: Duration,
    /// Who hears of its failures, and when it pauses itself.
    pub notices: NoticePolicy,
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
    /// The longest pause before a retry (the doubling's ceiling, and a `Retry-After`'s).
    pub retry_backoff_max: Duration,
    /// How long a submission's id is remembered after its run ended, whatever `history` keeps:
    /// a resubmit of it within this window is a no-op.
    pub dedup_window: Duration,
    /// The limits a run of this job holds a lease of, in name order.
    pub limits: Vec<LimitConfig>,
    /// Its `[[group]]`; `None`: the default group.
    pub group: Option<String>,
    /// `after`: the jobs whose runs this one follows, and how they must have ended.
    pub after: Option<Arc<After>>,
    /// `except` and `only`: the calendars that skip some of its ticks.
    pub calendars: crate::calendar::CalendarRule,
    /// `broadcast`: every live member that carries its `requires` runs each tick.
    pub broadcast: Option<Arc<Broadcast>>,
}

/// A job every live member runs (`broadcast = true`), each tick once per node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Broadcast {
    /// `requires`: the tags a node must carry to run it.
    pub requires: std::collections::BTreeSet<String>,
}

/// A job that runs after others (`after`, `after_status`): once for each instant at which every
/// one of its parents ended as `status` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct After {
    /// In the order the schedule names them.
    pub parents: Vec<JobName>,
    pub status: AfterStatus,
}

/// How a parent's run must have ended for its children to run (`after_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AfterStatus {
    /// It succeeded.
    Succeeded,
    /// It failed or timed out (a clean-up, an alert).
    Failed,
    /// It ended, however.
    Finished,
}

impl AfterStatus {
    /// As the schedule spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            AfterStatus::Succeeded => "succeeded",
            AfterStatus::Failed => "failed",
            AfterStatus::Finished => "finished",
        }
    }

    /// Whether a parent that ended as `status` lets its child run.
    pub fn admits(self, status: crate::run::RunStatus) -> bool {
        use crate::run::RunStatus;
        let failed = matches!(status, RunStatus::Failed | RunStatus::TimedOut);
        match self {
            AfterStatus::Succeeded => status == RunStatus::Succeeded,
            AfterStatus::Failed => failed,
            AfterStatus::Finished => failed || status == RunStatus::Succeeded,
        }
    }
}

impl JobConfig {
    /// The job's first tick strictly after `after`; `None` for an on-demand job or a schedule
    /// that fires no more.
    pub fn next_tick_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.schedule.as_ref()?.next_after(after)
    }

    /// Whether `other` has the same ticks: the same expression in the same zone with the same
    /// daylight-saving rule, and the same calendars.
    pub fn same_ticks(&self, other: &JobConfig) -> bool {
        let ticks = |job: &JobConfig| {
            job.schedule
                .as_ref()
                .map(|s| (s.expression().to_owned(), s.timezone(), s.dst_rule()))
        };
        ticks(self) == ticks(other) && self.calendars == other.calendars
    }

    /// When `tick` starts: the tick itself, or with `jitter` a little after it — the same
    /// instant on every node ([`crate::schedule::jitter_offset`]).
    pub fn start_of(&self, tick: DateTime<Utc>) -> DateTime<Utc> {
        let offset = crate::schedule::jitter_offset(self.spec.name.as_str(), tick, self.jitter);
        tick.checked_add_signed(offset).unwrap_or(tick)
    }

    /// The jitter as a time span, for instants.
    pub fn jitter_span(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.jitter).unwrap_or_default()
    }
}

/// At most this many records per job: with [`MAX_RUNNING_LIMIT`] open runs beside them, one
/// listing of a job's records stays far below ZooKeeper's default `jute.maxbuffer` (DESIGN.md
/// "Delayed one-off jobs": the arithmetic).
pub const HISTORY_LIMIT: usize = 5_000;
/// The most runs of one job a node holds open at once (`max_running`).
pub const MAX_RUNNING_LIMIT: usize = 1_000;

/// What a job has for each policy key it does not set.
#[derive(Debug, Clone)]
pub(super) struct JobDefaults {
    pub(super) timezone: Tz,
    pub(super) working_dir: Option<PathBuf>,
    /// Under the job's own `env`, which wins key by key.
    pub(super) env: BTreeMap<String, String>,
    pub(super) user: Option<Arc<crate::run::RunAs>>,
    pub(super) timeout: Option<Duration>,
    pub(super) kill_grace: Duration,
    pub(super) on_lost: OnLost,
    pub(super) keep_output: KeepOutput,
    pub(super) history: usize,
    pub(super) max_running: usize,
    /// `None`: by the job's kind (`forbid` with a schedule, `allow` without).
    pub(super) concurrency: Option<Concurrency>,
    pub(super) misfire: Misfire,
    pub(super) starting_deadline: Duration,
    pub(super) on_interrupted: OnInterrupted,
    pub(super) retries: u32,
    pub(super) retry_backoff: Duration,
    /// `None`: an hour, or the job's `retry_backoff` if that is longer.
    pub(super) retry_backoff_max: Option<Duration>,
    pub(super) dedup_window: Duration,
    /// The keys `[defaults]` set, each as `key = value` as written, in the file's order: what
    /// `zkcron check` shows.
    pub(super) shown: Vec<String>,
}

impl Default for JobDefaults {
    /// The built-in defaults (docs/CONFIG.md's `[[job]]` table).
    fn default() -> Self {
        Self {
            timezone: chrono_tz::UTC,
            working_dir: None,
            env: BTreeMap::new(),
            user: None,
            timeout: None,
            kill_grace: Duration::from_secs(10),
            on_lost: OnLost::Cancel,
            keep_output: KeepOutput::Failed,
            history: 100,
            max_running: 256,
            concurrency: None,
            misfire: Misfire::RunOnce,
            starting_deadline: Duration::from_secs(300),
            on_interrupted: OnInterrupted::Skip,
            retries: 0,
            retry_backoff: Duration::from_secs(30),
            retry_backoff_max: None,
            // An hour: far longer than a client's retry of a submit that timed out (seconds to
            // minutes), and a remembered id costs ZooKeeper about 1 KB of heap on every server
            // (docs/DELAYED.md "Idempotent ids"): a day at 100 submissions a second would be
            // 8 GB.
            dedup_window: Duration::from_secs(3600),
            shown: Vec::new(),
        }
    }
}
