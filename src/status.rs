//! The state of a lock group as an operator sees it: owner, fencing token, members, and per job
//! its next fire, last run, missed ticks, live run, pause and pending submissions. One report
//! for `zkcron status` (as text, or `--json`) and the HTTP API's `/v1/status`.
//!
//! Owns: gathering the report from ZooKeeper and its JSON format, which is stable: fields are
//! only ever added (`format` says which version wrote it; docs/API.md describes it).
//! Must not: write anything or decide anything.

pub mod health;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::Config;
use crate::control::Pause;
use crate::delayed::client::DelayedError;
use crate::delayed::client::pending_summary;
use crate::drift::{self, Drift};
use crate::ids::{JobName, NodeId};
use crate::layout::LockPaths;
use crate::ledger::Ledger;
use crate::ledger::RequestFailed;
use crate::ledger::control as control_store;
use crate::ledger::inspect::{self, Owner};
use crate::ledger::{self, ClaimError};
use crate::lock::clock::{self, ClockVerdict};
use crate::lock::node::OwnerInfo;
use crate::run::{RunRecord, RunStatus};

/// The version of the JSON format; bumped only by a change that is not an addition. 2: lock
/// groups (issue 19) — `lock` is the default group's, and no longer fires every job.
pub const FORMAT: u32 = 2;
/// Pending submissions are counted in due order up to this many; beyond, `pending_complete`
/// is false.
pub const PENDING_LIMIT: usize = 10_000;

/// Why the report could not be gathered.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error(transparent)]
    Zk(#[from] RequestFailed),
    #[error(transparent)]
    Records(#[from] ClaimError),
    #[error(transparent)]
    Delayed(#[from] DelayedError),
    #[error(transparent)]
    Control(#[from] control_store::ControlError),
    #[error(transparent)]
    Limits(#[from] crate::ledger::limits::LimitError),
}

/// `zkcron status --json`.
#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    /// Every group's lock, the members, their drift and balance: the fields of
    /// [`ClusterReport`], at the top level of the JSON.
    #[serde(flatten)]
    pub cluster: ClusterReport,
    pub jobs: Vec<JobReport>,
    /// Jobs with pending submissions that the schedule file does not declare.
    pub undeclared_pending: Vec<UndeclaredPending>,
    /// Whether every pending submission was counted (at most [`PENDING_LIMIT`]).
    pub pending_complete: bool,
    /// Each `[[limit]]`: the runs holding a lease and those waiting in its queue.
    pub limits: Vec<LimitReport>,
    /// Whether every group has an owner that fires (`zkcron status` exits with its code).
    pub health: health::Health,
}

/// One lock group now: its lock as `lock` shows the default group's, and its jobs.
#[derive(Debug, Clone, Serialize)]
pub struct GroupReport {
    /// [`DEFAULT_GROUP`](crate::ids::DEFAULT_GROUP) or the `[[group]]` name.
    pub name: String,
    /// The tags a node must carry to own it.
    pub requires: Vec<String>,
    pub lock: LockReport,
    /// The jobs the schedule puts in it.
    pub jobs: Vec<JobName>,
    /// Live members that may own it.
    pub eligible_members: usize,
}

/// The groups one live member owns.
#[derive(Debug, Clone, Serialize)]
pub struct MemberBalance {
    pub node_id: NodeId,
    pub groups: Vec<String>,
}

/// One `[[limit]]` now.
#[derive(Debug, Clone, Serialize)]
pub struct LimitReport {
    pub name: String,
    pub max: usize,
    /// The first `max` in its queue: holding a lease (or taking it this instant).
    pub holders: Vec<crate::ledger::limits::LeaseHolder>,
    /// The rest: waiting for their turn, first come first served.
    pub waiting: Vec<crate::ledger::limits::LeaseHolder>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LockReport {
    pub name: String,
    pub path: String,
    /// `held`, `none`, or `squatter` (a persistent node blocks the lock path).
    pub state: &'static str,
    /// The holder, when its data is zkcron's.
    pub owner: Option<OwnerInfo>,
    /// The holding session, hex.
    pub session: Option<String>,
    /// The epoch's version: the owner's fencing token (`None`: never acquired).
    pub fencing_token: Option<i32>,
    pub last_acquired_by: Option<NodeId>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MemberReport {
    pub node_id: NodeId,
    /// `None`: unreadable, or gone meanwhile.
    pub info: Option<OwnerInfo>,
    /// The member's clock against the servers' and the fleet's, as it last published it; `None`
    /// before its first measurement (or from an older zkcron).
    pub clock: Option<ClockVerdict>,
}

#[derive(Debug, Clone, Serialize)]
pub struct JobReport {
    pub name: JobName,
    /// Its lock group ([`DEFAULT_GROUP`](crate::ids::DEFAULT_GROUP) for jobs without `group`).
    pub group: String,
    /// The cron expression; `None` for a job that fires only when submitted (or after others).
    pub schedule: Option<String>,
    /// The jobs whose runs it follows (`after`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<JobName>,
    /// A broadcast job (`broadcast`): the tags a node needs to run it (none: every node).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broadcast: Option<std::collections::BTreeSet<String>>,
    pub timezone: String,
    pub enabled: bool,
    pub paused: Option<Pause>,
    /// The next tick (`None`: on demand, disabled or paused).
    pub next_unix_ms: Option<i64>,
    /// The newest record.
    pub last: Option<RunSummary>,
    /// Ticks recorded `missed` among the kept records.
    pub missed_ticks: u64,
    /// A run of the job alive now: the one holding the job's `running` guard (a `forbid` run
    /// that outlived its owner's hold of the lock, or the first of an owner's), else the newest
    /// record that says `running`.
    pub alive_run: Option<String>,
    pub pending_submissions: usize,
    pub next_due_unix_ms: Option<i64>,
    /// Failed runs among the kept records whose next attempt is promised, soonest first.
    pub pending_retries: Vec<PendingRetry>,
    /// A job whose target is a URL: its kept records' answers and latency (issue 23).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deliveries: Option<DeliverySummary>,
}

/// The ended deliveries among a job's kept records: how they were answered, and how long the
/// calls took.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct DeliverySummary {
    /// By the answer's class (`2xx`, `4xx`, …), or `error` (no answer), `timeout`,
    /// `cancelled`, `interrupted`.
    pub by_class: std::collections::BTreeMap<String, u64>,
    /// From sending to the end of the answer, over the answered ones, in ms.
    pub latency_p50_ms: Option<i64>,
    pub latency_p99_ms: Option<i64>,
    pub latency_max_ms: Option<i64>,
}

/// `records`' ended deliveries, summed up.
fn delivery_summary(records: &[RunRecord]) -> DeliverySummary {
    let mut summary = DeliverySummary::default();
    let mut latencies = Vec::new();
    for record in records.iter().filter(|r| r.status.is_final()) {
        let class = match (record.http_status, record.status) {
            (Some(status), _) => format!("{}xx", status / 100),
            (None, RunStatus::TimedOut) => "timeout".to_owned(),
            (None, RunStatus::Cancelled) => "cancelled".to_owned(),
            (None, RunStatus::Interrupted) => "interrupted".to_owned(),
            (None, RunStatus::Failed) => "error".to_owned(),
            // Skipped, missed: never called.
            (None, _) => continue,
        };
        *summary.by_class.entry(class).or_default() += 1;
        if let (Some(_), Some(start), Some(end)) = (
            record.http_status,
            record.started_unix_ms,
            record.finished_unix_ms,
        ) {
            latencies.push(end - start);
        }
    }
    latencies.sort_unstable();
    let at = |fraction: f64| -> Option<i64> {
        // Nearest rank: a count far below 2^52, exact as f64.
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let rank = ((fraction * latencies.len() as f64).ceil() as usize).max(1);
        latencies.get(rank - 1).copied()
    };
    summary.latency_p50_ms = at(0.5);
    summary.latency_p99_ms = at(0.99);
    summary.latency_max_ms = latencies.last().copied();
    summary
}

/// A retry a failed run's record promises (issue 24): whoever owns the lock then starts it.
#[derive(Debug, Clone, Serialize)]
pub struct PendingRetry {
    pub run_id: String,
    pub scheduled_unix_ms: i64,
    pub submission_id: Option<crate::delayed::submission::SubmissionId>,
    /// The attempt that will run, and how many there are at most.
    pub attempt: u32,
    pub attempts: u32,
    pub at_unix_ms: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub run_id: String,
    pub scheduled_unix_ms: i64,
    pub status: RunStatus,
    pub node_id: NodeId,
}

#[derive(Debug, Clone, Serialize)]
pub struct UndeclaredPending {
    pub job: JobName,
    pub pending_submissions: usize,
}

/// The cluster without its jobs: every group's lock, the members, their drift and balance. What
/// the console's overview shows on every refresh, at a cost that does not grow with the jobs.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterReport {
    pub format: u32,
    pub lock: LockReport,
    pub members: Vec<MemberReport>,
    /// Members whose published schedule differs from the owner's (`drift`).
    pub schedule_drift: Vec<Drift>,
    /// Every lock group, the default one first (issue 19); one entry without `[[group]]`s.
    pub groups: Vec<GroupReport>,
    /// How many groups each live member owns now, by node.
    pub balance: Vec<MemberBalance>,
    /// Groups that no live member may own: none carries every tag they require.
    pub unplaceable: Vec<String>,
}

impl ClusterReport {
    /// The fleet's health: every group owned by a node that fires; and `member`, when given,
    /// a live member.
    pub fn health(&self, member: Option<&NodeId>) -> health::Health {
        let groups = self.groups.iter().map(|group| health::GroupLock {
            name: &group.name,
            path: &group.lock.path,
            state: group.lock.state,
            owner: group
                .lock
                .owner
                .as_ref()
                .map(|owner| (&owner.node_id, owner.releasing)),
            eligible_members: group.eligible_members,
        });
        let live: Vec<&NodeId> = self
            .members
            .iter()
            .filter(|found| found.info.is_some())
            .map(|found| &found.node_id)
            .collect();
        health::judge(groups, &live, member)
    }
}

/// Reads the cluster part of the report.
///
/// # Errors
/// A read failed.
pub async fn cluster(client: &Ledger, config: &Config) -> Result<ClusterReport, StatusError> {
    let paths = config.lock.paths();
    let lock = lock_report(client, &config.lock.name, &paths).await?;
    let mut members: Vec<MemberReport> = inspect::members(client, &paths)
        .await?
        .into_iter()
        .map(|m| MemberReport {
            node_id: m.node_id,
            info: m.info,
            clock: None,
        })
        .collect();
    judge_clocks(&mut members, config.lock.max_clock_offset);
    let schedule_drift = drift_from_owner(&lock, &members);
    let groups = group_reports(client, config, &paths, &lock, &members).await?;
    let (balance, unplaceable) = balance(&groups, &members);
    Ok(ClusterReport {
        format: FORMAT,
        lock,
        members,
        schedule_drift,
        groups,
        balance,
        unplaceable,
    })
}

/// Reads the report of `config`'s lock group.
///
/// # Errors
/// A read failed.
pub async fn gather(
    client: &Ledger,
    config: &Config,
    now: DateTime<Utc>,
) -> Result<StatusReport, StatusError> {
    let cluster = cluster(client, config).await?;
    let paths = config.lock.group_paths();
    let ledger_paths = &paths.ledger;
    let pending = pending_summary(client, &ledger_paths.delayed, PENDING_LIMIT).await?;
    let pauses = control_store::pauses(client, &paths.control).await?;
    let mut jobs = Vec::with_capacity(config.jobs.len());
    for job in &config.jobs {
        let name = &job.spec.name;
        let records = ledger::history(client, ledger_paths, name, job.history).await?;
        let paused = pauses.get(name).cloned();
        let next = crate::fire::next::next_run(job, paused.is_some(), now)
            .ok()
            .map(|run| run.tick.timestamp_millis());
        let (count, due) = pending.per_job.get(name).copied().unwrap_or((0, 0));
        let alive_run = match ledger::guard_holder(client, ledger_paths, name).await {
            Some(holder) => Some(holder),
            None => records
                .iter()
                .find(|record| record.status == crate::run::RunStatus::Running)
                .map(|record| record.run_id.clone()),
        };
        jobs.push(JobReport {
            name: name.clone(),
            group: job
                .group
                .clone()
                .unwrap_or_else(|| crate::ids::DEFAULT_GROUP.to_owned()),
            schedule: job.schedule.as_ref().map(|s| s.expression().to_owned()),
            after: job.after.iter().flat_map(|a| a.parents.clone()).collect(),
            broadcast: job.broadcast.as_ref().map(|b| b.requires.clone()),
            timezone: job.timezone.name().to_owned(),
            enabled: job.enabled,
            paused,
            next_unix_ms: next,
            missed_ticks: missed_ticks(&records),
            pending_retries: pending_retries(&records, job.retries),
            deliveries: matches!(job.spec.program, crate::run::Program::Http(_))
                .then(|| delivery_summary(&records)),
            // A submission cancelled before it was due is recorded at its due instant, ahead
            // of now: not a last run.
            last: records
                .into_iter()
                .find(|r| r.scheduled_unix_ms <= now.timestamp_millis())
                .map(|r| RunSummary {
                    run_id: r.run_id,
                    scheduled_unix_ms: r.scheduled_unix_ms,
                    status: r.status,
                    node_id: r.node_id,
                }),
            alive_run,
            pending_submissions: count,
            next_due_unix_ms: (count > 0).then_some(due),
        });
    }
    let mut undeclared_pending: Vec<UndeclaredPending> = pending
        .per_job
        .iter()
        .filter(|(name, _)| !config.jobs.iter().any(|job| &job.spec.name == *name))
        .map(|(job, (count, _))| UndeclaredPending {
            job: job.clone(),
            pending_submissions: *count,
        })
        .collect();
    undeclared_pending.sort_by(|a, b| a.job.cmp(&b.job));
    let mut limits = Vec::new();
    for limit in &config.limits {
        let mut holders =
            crate::ledger::limits::holders(client, &ledger_paths.limit(&limit.name)).await?;
        let waiting = holders.split_off(limit.max.min(holders.len()));
        limits.push(LimitReport {
            name: limit.name.clone(),
            max: limit.max,
            holders,
            waiting,
        });
    }
    Ok(StatusReport {
        health: cluster.health(None),
        cluster,
        jobs,
        undeclared_pending,
        pending_complete: pending.complete,
        limits,
    })
}

/// The lock at `paths`, named `name`.
async fn lock_report(
    client: &Ledger,
    name: &str,
    paths: &LockPaths,
) -> Result<LockReport, StatusError> {
    let (state, owner, session) = match inspect::owner(client, paths).await? {
        Owner::None => ("none", None, None),
        Owner::Squatter => ("squatter", None, None),
        Owner::Held { session, info } => ("held", info, Some(session.to_string())),
    };
    let epoch = inspect::epoch(client, paths).await?;
    Ok(LockReport {
        name: name.to_owned(),
        path: paths.dir.clone(),
        state,
        owner,
        session,
        fencing_token: epoch.as_ref().map(|e| e.token),
        last_acquired_by: epoch.and_then(|e| e.by),
    })
}

/// Every lock group with its lock and jobs, the default group (whose lock is `default`) first.
async fn group_reports(
    client: &Ledger,
    config: &Config,
    base: &LockPaths,
    default: &LockReport,
    members: &[MemberReport],
) -> Result<Vec<GroupReport>, StatusError> {
    let jobs_of = |group: Option<&str>| -> Vec<JobName> {
        config
            .jobs
            .iter()
            .filter(|job| job.group.as_deref() == group)
            .map(|job| job.spec.name.clone())
            .collect()
    };
    let eligible = |requires: &std::collections::BTreeSet<String>| {
        members
            .iter()
            .filter(|m| {
                let tags = m.info.as_ref().map(|info| &info.tags);
                tags.is_some_and(|tags| requires.is_subset(tags)) || requires.is_empty()
            })
            .count()
    };
    let mut groups = vec![GroupReport {
        name: crate::ids::DEFAULT_GROUP.to_owned(),
        requires: Vec::new(),
        lock: default.clone(),
        jobs: jobs_of(None),
        eligible_members: eligible(&Default::default()),
    }];
    for group in &config.groups {
        groups.push(GroupReport {
            name: group.name.clone(),
            requires: group.requires.iter().cloned().collect(),
            lock: lock_report(client, &group.name, &base.group(&group.name)).await?,
            jobs: jobs_of(Some(&group.name)),
            eligible_members: eligible(&group.requires),
        });
    }
    Ok(groups)
}

/// The groups each live member owns, and the groups no live member may own.
fn balance(groups: &[GroupReport], members: &[MemberReport]) -> (Vec<MemberBalance>, Vec<String>) {
    let balance = members
        .iter()
        .map(|member| MemberBalance {
            node_id: member.node_id.clone(),
            groups: groups
                .iter()
                .filter(|g| g.lock.owner.as_ref().map(|o| &o.node_id) == Some(&member.node_id))
                .map(|g| g.name.clone())
                .collect(),
        })
        .collect();
    let unplaceable = groups
        .iter()
        .filter(|g| g.eligible_members == 0 && !members.is_empty())
        .map(|g| g.name.clone())
        .collect();
    (balance, unplaceable)
}

/// Each member's clock judged as its own node judges it: against the other members' published
/// offsets and the servers'.
fn judge_clocks(members: &mut [MemberReport], max_offset: std::time::Duration) {
    let max_ms = i64::try_from(max_offset.as_millis()).unwrap_or(i64::MAX);
    let offsets: Vec<Option<i64>> = members
        .iter()
        .map(|m| m.info.as_ref().and_then(|info| info.clock_offset_ms))
        .collect();
    for (i, member) in members.iter_mut().enumerate() {
        let Some(mine) = offsets[i] else { continue };
        let others: Vec<i64> = offsets
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .filter_map(|(_, offset)| *offset)
            .collect();
        member.clock = Some(clock::judge(mine, &others, max_ms));
    }
}

/// The members whose schedule differs from the owner's, as its member node publishes it.
fn drift_from_owner(lock: &LockReport, members: &[MemberReport]) -> Vec<Drift> {
    let Some(owner) = lock.owner.as_ref().map(|o| &o.node_id) else {
        return Vec::new();
    };
    let own = members
        .iter()
        .find(|m| &m.node_id == owner)
        .and_then(|m| m.info.as_ref()?.schedule.as_deref());
    let Some(own) = own else {
        return Vec::new();
    };
    members
        .iter()
        .filter(|m| &m.node_id != owner)
        .filter_map(|m| drift::compare(own, &m.node_id, m.info.as_ref()?.schedule.as_deref()))
        .collect()
}

/// Ticks the kept records say nobody fired.
fn pending_retries(records: &[RunRecord], retries: u32) -> Vec<PendingRetry> {
    let mut pending: Vec<PendingRetry> = records
        .iter()
        .filter(|r| r.status.is_final())
        .filter_map(|r| {
            Some(PendingRetry {
                run_id: r.run_id.clone(),
                scheduled_unix_ms: r.scheduled_unix_ms,
                submission_id: r.submission_id.clone(),
                attempt: r.attempt + 1,
                attempts: retries + 1,
                at_unix_ms: r.retry_at_unix_ms?,
            })
        })
        .collect();
    pending.sort_by_key(|retry| retry.at_unix_ms);
    pending
}

fn missed_ticks(records: &[RunRecord]) -> u64 {
    records
        .iter()
        .filter(|r| r.status == RunStatus::Missed)
        .map(|r| r.missed_ticks.unwrap_or(1))
        .sum()
}
