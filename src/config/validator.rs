//! The validator: walks the raw file section by section, collecting every problem at once.
//!
//! Owns: the [`Validator`] every section checks with, the order the sections are checked in,
//! duplicate job names, and the checks shared by all sections (durations, counts, named files).
//! Must not: know a section's keys (each section's file does: `zookeeper.rs`, `lock.rs`,
//! `http.rs`, `log.rs`, `group.rs`, `limit.rs`, `job.rs`), nor stop at the first problem.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use toml::Spanned;

use super::model::JobDefaults;
use super::schema::RawConfig;
use super::{Config, GroupConfig, LimitConfig, NoticePolicy, Problem, Secret};

/// What a load reads on this host beyond the schedule file itself: the environment variables,
/// files and programs the file names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookups {
    /// All of them: the daemon (`zkcron run`, a reload) and `zkcron check`.
    All,
    /// Only what reaching ZooKeeper takes (its credentials and TLS files): the client commands,
    /// which serve no HTTP, run no job and send no notice, so an operator's shell needs none of
    /// the daemon's secrets.
    ZooKeeper,
    /// None: the file alone, every key and value checked and each named file, variable or
    /// program left unread (`zkcron check --lint`, for CI without this host's secrets).
    Nothing,
}

/// Who needs a value the file names on this host (a variable, a file, a program).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NeededBy {
    /// Reaching ZooKeeper: every command does.
    ZooKeeper,
    /// Only the daemon: its HTTP tokens, its targets' headers and certificates, its notices.
    Daemon,
}

/// Checks a parsed file and builds its [`Config`]; all of its problems, in file order, if any.
pub(super) fn validate<'e>(
    raw: RawConfig,
    text: &'e str,
    env: &'e dyn Fn(&str) -> Option<String>,
    lookups: Lookups,
) -> Result<(Config, Vec<SecretAt>, Option<OpenAclAt>), Vec<Problem>> {
    let mut v = Validator {
        problems: Vec::new(),
        env,
        lookups,
        limits: Vec::new(),
        groups: Vec::new(),
        notice_defaults: NoticePolicy::default(),
        job_defaults: Arc::new(JobDefaults::default()),
        text,
        chains: Vec::new(),
        calendars: Vec::new(),
        inline_secrets: Vec::new(),
        open_acl: None,
    };
    let config = v.config(raw);
    v.problems
        .sort_by_key(|problem| problem.span.as_ref().map(|span| span.start));
    match config {
        Some(config) if v.problems.is_empty() => Ok((config, v.inline_secrets, v.open_acl)),
        _ => Err(v.problems),
    }
}

/// A job's `after` as written, kept until every job is read: its parents are checked against
/// the whole schedule.
pub(super) struct WrittenAfter {
    pub(super) job: String,
    /// The whole `after = […]` value.
    pub(super) span: Range<usize>,
    pub(super) parents: Vec<Spanned<String>>,
    /// `schedule`, when the job has one too.
    pub(super) schedule: Option<Range<usize>>,
}

/// Collects problems while the sections build domain types. A check that finds a problem records
/// it and, where it can, goes on with a default, so every later problem shows too; `None` from a
/// section means its value could not be built.
pub(super) struct Validator<'e> {
    pub(super) problems: Vec<Problem>,
    /// Looks up environment variables (injected, so tests need not touch the process's own).
    pub(super) env: &'e dyn Fn(&str) -> Option<String>,
    /// What this load reads on this host; what it does not is left out of the config.
    lookups: Lookups,
    /// The `[[limit]]`s declared, for the jobs that name them.
    pub(super) limits: Vec<LimitConfig>,
    /// The `[[calendar]]`s declared, for the jobs that name them.
    pub(super) calendars: Vec<Arc<crate::calendar::Calendar>>,
    /// The `[[group]]`s declared, for the jobs that name them.
    pub(super) groups: Vec<GroupConfig>,
    /// `[defaults]`' notice keys, which a job's own override one by one.
    pub(super) notice_defaults: NoticePolicy,
    /// `[defaults]`' job policies over the built-in ones, which a job's own override one by one.
    pub(super) job_defaults: Arc<JobDefaults>,
    /// The file's text: what `zkcron check` shows of `[defaults]` is quoted from it.
    pub(super) text: &'e str,
    /// Each job's `after` as written, checked once every job is read.
    pub(super) chains: Vec<WrittenAfter>,
    /// Each secret written in the file itself: its key and where its value starts.
    pub(super) inline_secrets: Vec<SecretAt>,
    /// Whether the nodes zkcron creates are left open to every client of the ensemble.
    pub(super) open_acl: Option<OpenAclAt>,
}

/// A secret written in the file: its key, and the byte where its value starts.
pub(super) type SecretAt = (&'static str, usize);

/// Open nodes: the byte where `acl = "open"`'s value starts, or `None` where the file sets no
/// credentials and names servers beyond this host.
pub(super) type OpenAclAt = Option<usize>;

impl Validator<'_> {
    /// Whether this load reads, on this host, a value that `needed_by` uses.
    pub(super) fn looks_up(&self, needed_by: NeededBy) -> bool {
        match self.lookups {
            Lookups::All => true,
            Lookups::ZooKeeper => needed_by == NeededBy::ZooKeeper,
            Lookups::Nothing => false,
        }
    }

    /// A secret read from outside the file: the environment variable `var` names, or the file
    /// `file` names, trimmed; `keys` name them (`http.token_env`, `http.token_file`) and `what`
    /// the secret, in a problem.
    pub(super) fn secret_from(
        &mut self,
        var: Option<Spanned<String>>,
        file: Option<Spanned<String>>,
        keys: (&str, &str),
        what: &str,
    ) -> Option<Secret> {
        if let Some(var) = var {
            return match (self.env)(var.get_ref()).filter(|v| !v.trim().is_empty()) {
                Some(value) => Some(Secret::new(value.trim())),
                None => {
                    let message =
                        format!("environment variable {} is not set or empty", var.get_ref());
                    self.problem(var.span(), keys.0, message);
                    None
                }
            };
        }
        let file = file?;
        match std::fs::read_to_string(file.get_ref()) {
            Ok(text) if !text.trim().is_empty() => Some(Secret::new(text.trim())),
            Ok(_) => {
                let message = format!("{what} file {} is empty", file.get_ref());
                self.problem(file.span(), keys.1, message);
                None
            }
            Err(err) => {
                let message = format!("cannot read {what} file {}: {err}", file.get_ref());
                self.problem(file.span(), keys.1, message);
                None
            }
        }
    }

    pub(super) fn problem(
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
        let zookeeper = raw.zookeeper.and_then(|raw| self.zookeeper(raw));
        let lock = raw.lock.and_then(|raw| self.lock(raw));
        let log = self.log(raw.log);
        let audit = self.audit(raw.audit);
        let delayed = self.delayed(raw.delayed);
        let http = raw.http.map(|raw| self.http(raw));
        let telemetry = raw.telemetry.and_then(|raw| self.telemetry(raw));
        let output = self.output(raw.output);
        let node = self.node(raw.node);
        self.groups = self.declared_groups(raw.group);
        if let Some(mut policies) = raw.defaults {
            let notices = policies.take_notices();
            let context = |key: &str| format!("defaults.{key}");
            self.notice_defaults = self.notices(notices, &NoticePolicy::default(), &context);
            self.job_defaults = Arc::new(self.job_defaults(policies));
        }
        self.limits = self.declared_limits(raw.limit);
        self.calendars = self.declared_calendars(raw.calendar);
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
            jobs.extend(self.job(job, span).map(Arc::new));
        }
        self.check_chains(&jobs, &seen);
        Some(Config {
            zookeeper: zookeeper?,
            lock: lock?,
            log: log?,
            audit,
            delayed,
            http: http.flatten(),
            telemetry,
            output,
            node,
            groups: std::mem::take(&mut self.groups),
            limits: std::mem::take(&mut self.limits),
            calendars: std::mem::take(&mut self.calendars),
            defaults_shown: self.job_defaults.shown.clone(),
            drop_ins: Vec::new(),
            per_host_jobs: std::collections::BTreeMap::new(),
            inline_secrets: Vec::new(),
            open_acl: None,
            jobs,
        })
    }

    pub(super) fn duration(
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
    pub(super) fn count(
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

    pub(super) fn positive_duration(
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

    /// Reads a file the schedule names; a problem at `span` when it cannot be read.
    pub(super) fn read_file(&mut self, path: &Spanned<String>, context: &str) -> Option<String> {
        match std::fs::read_to_string(path.get_ref()) {
            Ok(text) => Some(text),
            Err(err) => {
                let message = format!("cannot read {}: {err}", path.get_ref());
                self.problem(path.span(), context, message);
                None
            }
        }
    }
}
