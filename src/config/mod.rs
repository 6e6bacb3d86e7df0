//! The TOML schedule file: schema, defaults, validation with file:line:col errors.
//!
//! Owns: turning the text of a schedule file into a validated [`Config`] of domain types, and
//! every message an operator sees about a bad file (all problems at once, compiler style).
//! Must not: do I/O beyond reading the schedule file, the files it names (TLS, SASL password,
//! HTTP token) and the environment variables it names.
//!
//! The text goes through three steps:
//! - `reader.rs` with `schema.rs`: the text into raw structs, one per table, each value
//!   `Spanned`, one table and one key at a time, so every parse-level problem is told;
//! - `validator.rs`: the `Validator` walks the sections and collects every problem;
//!   each section checks its own keys and fills in their defaults in its own file
//!   (`zookeeper.rs`, `lock.rs`, `http.rs`, `log.rs`, `job.rs` with `job_policies.rs`, over
//!   the defaults of `job_defaults.rs`);
//! - `error.rs`: the problems, rendered with file:line:col and a caret.
//!
//! A new key is its raw field in `schema.rs`, its domain field in `model.rs`, and its check in
//! its section's file.

mod audit;
mod broadcast;
mod calendar;
mod chains;
mod delayed;
mod error;
mod files;
mod group;
mod http;
mod http_target;
mod job;
mod job_defaults;
mod job_policies;
mod keys;
mod limit;
mod lock;
mod log;
mod model;
mod notices;
mod origins;
mod output;
mod reader;
mod schema;
mod telemetry;
mod user;
mod validator;
mod zookeeper;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

pub use self::error::{ConfigError, Files, LineStarts, LoadError, Problem, ProblemPlace, line_col};
pub use self::files::DROP_IN_DIR;
pub use self::keys::{JobKey, changed_keys, job_keys};
pub use self::model::{
    After, AfterStatus, AuditConfig, Concurrency, Config, DelayedStore, GroupConfig, HISTORY_LIMIT,
    HttpConfig, InlineSecret, JobConfig, KeepOutput, LimitConfig, LockConfig, LogConfig, LogFormat,
    MAX_RUNNING_LIMIT, Misfire, NamedToken, NodeConfig, NoticePolicy, NotifyWhen, OnInterrupted,
    OnLost, OpenAcl, OutputConfig, TelemetryConfig, TokenKind, ZookeeperConfig,
};
pub use self::origins::{Origin, job_origins};
pub use self::validator::Lookups;
pub use crate::ensemble::AclPolicy;
use crate::ids::NodeId;
use crate::run::{JobSpec, NoticeChannels};
pub use crate::secret::Secret;

/// Reads and validates a schedule file, looking up everything it names ([`Lookups::All`]).
///
/// # Errors
/// The file cannot be read, or it has problems (all of them are reported).
pub fn load(path: &Path) -> Result<Config, LoadError> {
    load_with(path, Lookups::All)
}

/// Reads and validates a schedule file, looking up on this host only what `lookups` says. A
/// value that was not looked up is left out of the [`Config`] (no token, no header, no TLS
/// files): such a config is for reading the schedule and reaching ZooKeeper
/// ([`Lookups::ZooKeeper`]), never for serving HTTP, running jobs or sending notices.
///
/// # Errors
/// As [`load`].
pub fn load_with(path: &Path, lookups: Lookups) -> Result<Config, LoadError> {
    // The parse's temporaries (the text, the TOML document, the raw tables: ~3 KiB a job) are
    // made and freed between the pieces of every job that a daemon keeps for good, so that
    // what it keeps would stay spread over every page the parse touched and none of them could
    // be given back: 10 000 jobs left 7 MB of free 2.4 KiB holes (issue 18). Parsed on a
    // thread of its own, the temporaries live in that thread's allocator arena, and the copy
    // made here is contiguous; the arena is given back whole.
    let parsed = std::thread::scope(|scope| {
        match std::thread::Builder::new()
            .name("config-load".into())
            .spawn_scoped(scope, || load_here(path, lookups))
        {
            Ok(thread) => thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(_) => load_here(path, lookups),
        }
    })?;
    let config = parsed.deep_copy();
    drop(parsed);
    crate::heap::give_back();
    Ok(config)
}

fn load_here(path: &Path, lookups: Lookups) -> Result<Config, LoadError> {
    let texts = files::read_all(path)?;
    let env = |name: &str| std::env::var(name).ok();
    parse_files(texts, &env, lookups).map_err(LoadError::Invalid)
}

impl Config {
    /// A copy that shares nothing with `self`, made on the calling thread.
    fn deep_copy(&self) -> Config {
        // Jobs that name no notice channel of their own share their defaults' (the parse makes
        // one `Arc` for those): each one shared is copied once, and stays shared.
        let mut channels: HashMap<*const NoticeChannels, Arc<NoticeChannels>> = HashMap::new();
        let mut channels_of = |job: &JobConfig| {
            let theirs = &job.notices.channels;
            Arc::clone(
                channels
                    .entry(Arc::as_ptr(theirs))
                    .or_insert_with(|| Arc::new(NoticeChannels::clone(theirs))),
            )
        };
        let jobs = self.jobs.iter().map(|job| {
            Arc::new(JobConfig {
                spec: Arc::new(JobSpec::clone(&job.spec)),
                notices: NoticePolicy {
                    channels: channels_of(job),
                    ..job.notices.clone()
                },
                ..JobConfig::clone(job)
            })
        });
        Config {
            zookeeper: self.zookeeper.clone(),
            lock: self.lock.clone(),
            log: self.log.clone(),
            audit: self.audit.clone(),
            delayed: self.delayed.clone(),
            http: self.http.clone(),
            telemetry: self.telemetry.clone(),
            output: self.output.clone(),
            node: self.node.clone(),
            groups: self.groups.clone(),
            limits: self.limits.clone(),
            calendars: self.calendars.clone(),
            defaults_shown: self.defaults_shown.clone(),
            drop_ins: self.drop_ins.clone(),
            per_host_jobs: self.per_host_jobs.clone(),
            inline_secrets: self.inline_secrets.clone(),
            open_acl: self.open_acl.clone(),
            jobs: jobs.collect(),
        }
    }
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
    parse_with(path, text, env, Lookups::All)
}

/// [`parse`], looking up only what `lookups` says (see [`load_with`]).
///
/// # Errors
/// As [`parse`].
pub fn parse_with(
    path: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    lookups: Lookups,
) -> Result<Config, ConfigError> {
    parse_files(vec![(path.to_owned(), text.to_owned())], env, lookups)
}

/// Validates a schedule made of several files: the main file first, then its drop-ins in the
/// order they merge (see [`load_with`]).
///
/// # Errors
/// As [`parse`], each problem placed in its own file.
pub fn parse_files(
    texts: Vec<(std::path::PathBuf, String)>,
    env: &dyn Fn(&str) -> Option<String>,
    lookups: Lookups,
) -> Result<Config, ConfigError> {
    let (text, files) = files::combine(texts);
    let text = text.as_str();
    let fail = |problems| ConfigError {
        path: files.main().to_owned(),
        text: text.to_owned(),
        files: files.clone(),
        problems,
    };
    let reading = reader::read(files::merge(text, &files));
    let mut problems = reading.problems;
    let validated = validator::validate(reading.raw, text, env, lookups);
    let config = match validated {
        Ok((mut config, inline_secrets, open_acl)) => {
            config.open_acl = open_acl.map(|written| OpenAcl {
                written_at: written.map(|offset| {
                    let (file, line) = files.file_line(text, offset);
                    (file.to_owned(), line)
                }),
            });
            config.inline_secrets = inline_secrets
                .into_iter()
                .map(|(key, offset)| {
                    let (file, line) = files.file_line(text, offset);
                    InlineSecret {
                        key,
                        file: file.to_owned(),
                        line,
                    }
                })
                .collect();
            Some(config)
        }
        Err(found) => {
            // A table that lost a key to a problem above is not also told, as a whole, that it
            // lacks that key.
            let new = |problem: &Problem| {
                problem
                    .span
                    .as_ref()
                    .is_none_or(|span| !reading.refused_tables.contains(span))
            };
            problems.extend(found.into_iter().filter(new));
            None
        }
    };
    match config {
        Some(mut config) if problems.is_empty() => {
            config.drop_ins = reading.drop_ins;
            for (job, drop_in) in reading.job_drop_ins {
                config
                    .per_host_jobs
                    .entry(crate::ids::JobName::new(job))
                    .or_default()
                    .push(drop_in);
            }
            Ok(config)
        }
        _ => {
            problems.sort_by_key(|problem| problem.span.as_ref().map(|span| span.start));
            if problems.is_empty() {
                problems.push(Problem {
                    span: None,
                    context: String::new(),
                    message: "the file could not be read as a schedule".to_owned(),
                    secret: false,
                });
            }
            Err(fail(problems))
        }
    }
}

/// Where each (job, key) of `wanted` is in the schedule text `text`, if it is there: for the
/// problems found after the load (`zkcron check`'s warnings) to name their lines. One parse of
/// `text` for all of them.
pub fn locate(text: &str, wanted: &[(&str, &str)]) -> Vec<Option<std::ops::Range<usize>>> {
    reader::locate(text, wanted)
}

/// The jobs of `tables` (`[[job]]` tables, each with its name and what it runs) in the smallest
/// valid schedule: for the tests of what consumes jobs.
#[cfg(test)]
pub(crate) fn jobs_for_test(tables: &str) -> Vec<Arc<JobConfig>> {
    let text = format!("[zookeeper]\nconnect = \"zk:2181\"\n[lock]\nname = \"g\"\n{tables}");
    let config = parse(Path::new("t.toml"), &text, &|_| None).expect("valid");
    config.jobs
}

#[cfg(test)]
mod tests;
