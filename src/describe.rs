//! `zkcron describe JOB`, like `kubectl describe`: one job as it will run — every key with the
//! defaults applied and where its value comes from, its next fires as the fire machine will
//! decide them — and as it runs now: its group's owner, its pause, its last runs and the
//! operator actions on it.
//!
//! Owns: gathering that one document (`format` 1), the part from the file alone when ZooKeeper
//! cannot be reached.
//! Must not: print (the CLI renders it), or compute a key, a next fire or a health of its own:
//! `config::job_keys`, `config::job_origins`, `fire::next` and `status` answer those.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::audit::AuditEntry;
use crate::config::{Config, JobConfig, LoadError, Origin, job_keys, job_origins};
use crate::control::Pause;
use crate::fire::next::{self, NoRun};
use crate::ids::{DEFAULT_GROUP, JobName, NodeId};
use crate::layout::AuditPaths;
use crate::ledger::{self, Ledger};
use crate::run::RunRecord;

/// The version of the document `describe --json` prints.
pub const DESCRIBE_FORMAT: u32 = 1;
/// How many fires ahead are shown.
pub const NEXT_FIRES: usize = 5;
/// How many of its newest runs are shown.
pub const LAST_RUNS: usize = 5;

/// One job, described.
#[derive(Debug, Clone, Serialize)]
pub struct JobDescription {
    pub format: u32,
    pub job: JobName,
    /// The schedule file (its drop-ins beside it).
    pub file: PathBuf,
    /// [`DEFAULT_GROUP`] or its `[[group]]`.
    pub group: String,
    /// Every key, in docs/CONFIG.md's order, with its effective value and its origin.
    pub keys: Vec<DescribedKey>,
    /// Its next fires; while ZooKeeper cannot be reached, the schedule's, pause unknown.
    pub next: Vec<NextFire>,
    /// Why `next` is shorter than [`NEXT_FIRES`], when it is.
    pub next_stops: Option<String>,
    /// What the ensemble says of it now; `None` when it cannot be reached (`unreachable` says
    /// why).
    pub now: Option<JobNow>,
    pub unreachable: Option<String>,
}

/// A key, its value (`null`: unset), and where the value comes from.
#[derive(Debug, Clone, Serialize)]
pub struct DescribedKey {
    pub key: &'static str,
    pub value: Option<toml::Value>,
    pub origin: Origin,
}

/// A fire ahead.
#[derive(Debug, Clone, Serialize)]
pub struct NextFire {
    /// The tick (`ZKCRON_SCHEDULED_AT`).
    pub unix_ms: i64,
    /// When it starts: later than the tick with a `jitter`.
    pub starts_unix_ms: i64,
}

/// The job as the ensemble holds it now.
#[derive(Debug, Clone, Serialize)]
pub struct JobNow {
    /// The node that owns its group's lock and fires it; `None`: no owner.
    pub owner: Option<NodeId>,
    /// The owner's fencing token.
    pub fencing_token: Option<i32>,
    pub paused: Option<Pause>,
    /// Its newest runs, newest first.
    pub runs: Vec<RunRecord>,
    /// The operator actions on it that the trail keeps, oldest first.
    pub audit: Vec<AuditEntry>,
}

/// Why a job cannot be described.
#[derive(Debug, thiserror::Error)]
pub enum DescribeError {
    #[error("no job named {job:?} in {}", file.display())]
    NoSuchJob { job: String, file: PathBuf },
    #[error(transparent)]
    Origins(#[from] LoadError),
}

/// Describes `job` of `config` (read from `file`); `client`: a session to the ensemble, or why
/// there is none.
///
/// # Errors
/// The job is not in the schedule, or the files cannot be read again for the keys' origins.
pub async fn describe(
    config: &Config,
    file: &Path,
    job: &str,
    client: Result<&Ledger, String>,
    now: DateTime<Utc>,
) -> Result<JobDescription, DescribeError> {
    let declared = config
        .jobs
        .iter()
        .find(|declared| declared.spec.name.as_str() == job)
        .ok_or_else(|| DescribeError::NoSuchJob {
            job: job.to_owned(),
            file: file.to_owned(),
        })?;
    let origins = job_origins(file, job)?;
    let keys = job_keys(declared)
        .into_iter()
        .map(|key| DescribedKey {
            origin: origins.get(key.key).cloned().unwrap_or(Origin::Default),
            key: key.key,
            value: key.value,
        })
        .collect();
    let group = declared
        .group
        .clone()
        .unwrap_or_else(|| DEFAULT_GROUP.to_owned());
    let (job_now, unreachable) = match client {
        Ok(client) => match job_now(client, config, (declared, &group), now).await {
            Ok(job_now) => (Some(job_now), None),
            Err(why) => (None, Some(why)),
        },
        Err(why) => (None, Some(why)),
    };
    let paused = job_now.as_ref().is_some_and(|now| now.paused.is_some());
    let (runs, stops) = next::runs_ahead(declared, paused, now, NEXT_FIRES);
    Ok(JobDescription {
        format: DESCRIBE_FORMAT,
        job: declared.spec.name.clone(),
        file: file.to_owned(),
        group,
        keys,
        next: runs
            .into_iter()
            .map(|run| NextFire {
                unix_ms: run.tick.timestamp_millis(),
                starts_unix_ms: run.starts.timestamp_millis(),
            })
            .collect(),
        next_stops: stops.map(|why| no_run(why, declared)),
        now: job_now,
        unreachable,
    })
}

/// What the ensemble says of `job` at `now` (the instant the description is of).
async fn job_now(
    client: &Ledger,
    config: &Config,
    (job, group): (&JobConfig, &str),
    now: DateTime<Utc>,
) -> Result<JobNow, String> {
    let why = |err: &dyn std::error::Error| crate::report::error_chain(err);
    let cluster = crate::status::cluster(client, config)
        .await
        .map_err(|err| why(&err))?;
    let lock = cluster
        .groups
        .iter()
        .find(|report| report.name == group)
        .map_or(&cluster.lock, |report| &report.lock);
    let paths = config.lock.group_paths();
    let paused = ledger::control::pauses(client, &paths.control)
        .await
        .map_err(|err| why(&err))?
        .remove(&job.spec.name);
    let runs = ledger::history(client, &paths.ledger, &job.spec.name, LAST_RUNS)
        .await
        .map_err(|err| why(&err))?;
    let keep = chrono::Duration::from_std(config.audit.keep).unwrap_or(chrono::Duration::MAX);
    let since = now.checked_sub_signed(keep).unwrap_or(DateTime::UNIX_EPOCH);
    let audit = ledger::audit::read(
        client,
        &AuditPaths::new(&config.lock.paths()),
        since.timestamp_millis(),
    )
    .await
    .map_err(|err| why(&err))?
    .into_iter()
    .filter(|entry| entry.job.as_deref() == Some(job.spec.name.as_str()))
    .collect();
    Ok(JobNow {
        owner: lock.owner.as_ref().map(|owner| owner.node_id.clone()),
        fencing_token: lock.fencing_token,
        paused,
        runs,
        audit,
    })
}

/// Why a job has no more fires to show, in words.
fn no_run(why: NoRun, job: &JobConfig) -> String {
    match why {
        NoRun::OnDemand if job.after.is_some() => "it runs after its parents".to_owned(),
        NoRun::OnDemand => "on demand: it runs when submitted or triggered".to_owned(),
        NoRun::Disabled => "disabled (enabled = false)".to_owned(),
        NoRun::Paused => "paused".to_owned(),
        NoRun::Ended => "its schedule fires no more".to_owned(),
        NoRun::SkippedUntil(until) => {
            format!("its calendars skip every tick until {}", until.to_rfc3339())
        }
    }
}
