//! Steering a lock group (`zkcron trigger`, `pause`, `resume`, `release`, `backfill`, and the
//! HTTP API): connect with a schedule file, check a request against it, write it. Operators'
//! actions come here through `command`'s door, which records them in the audit trail; the
//! reads (`pauses`) are open to anyone.
//!
//! Owns: what is refused before anything is written (an unknown job, a trigger of a paused or
//! disabled job, a release with no owner or no peer to take over), and waiting for a release to
//! show in the lock.
//! Must not: make raw ZooKeeper calls (that is `store`, `ledger::submissions`, `ledger::inspect`)
//! or fire anything.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;

use super::{Pause, Pauses, ReleaseRequest};
use crate::config::{Config, JobConfig};
use crate::delayed::client::SubmitRequest;
use crate::delayed::client::check_request;
use crate::delayed::submission::{Submission, SubmissionId};
use crate::ids::{JobName, NodeId};
use crate::layout::{ControlPaths, GroupPaths};
use crate::ledger::Ledger;
use crate::ledger::RequestFailed;
use crate::ledger::control::{self as store, ControlError, Paused};
use crate::ledger::inspect::{self, Owner};
use crate::ledger::submissions::{self, SubmissionError};

/// How often a release is looked for in the lock while waiting.
const RELEASE_POLL: Duration = Duration::from_millis(20);

/// Why a steering request was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum SteerError {
    #[error("job \"{job}\" is not declared in the schedule file; declared: {declared}")]
    UnknownJob { job: JobName, declared: String },
    #[error("job \"{job}\" is paused (by {by}); resume it first: zkcron resume {job}")]
    Paused { job: JobName, by: String },
    #[error("job \"{job}\" is disabled (enabled = false) in the schedule file")]
    Disabled { job: JobName },
    #[error(
        "job \"{job}\" is a broadcast job: each node runs its ticks on time only, and none is backfilled"
    )]
    Broadcast { job: JobName },
    #[error("nobody owns the lock: there is nothing to release")]
    NoOwner,
    #[error("no lock group \"{group}\" is declared in the schedule file; declared: {declared}")]
    UnknownGroup { group: String, declared: String },
    #[error(
        "no other node is alive to take the lock over from {owner}; stop it instead if it must go"
    )]
    NoPeer { owner: NodeId },
    #[error(
        "lock group \"{group}\" is owned by {owner}, not {asked}: ask the owner's API, or use zkcron release --group {group}"
    )]
    NotTheOwner {
        group: String,
        owner: NodeId,
        asked: NodeId,
    },
    #[error("the lock did not move from {owner} within {waited:?}: {why}")]
    NotHandedOver {
        owner: NodeId,
        waited: Duration,
        why: &'static str,
    },
    #[error(transparent)]
    Unreachable(#[from] crate::ledger::Unreachable),
    #[error(transparent)]
    Zk(#[from] RequestFailed),
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error(transparent)]
    Submission(#[from] SubmissionError),
    #[error(transparent)]
    Request(#[from] crate::delayed::client::DelayedError),
    #[error(transparent)]
    Range(#[from] super::backfill::RangeError),
    #[error(transparent)]
    Ledger(#[from] crate::ledger::ClaimError),
}

impl SteerError {
    /// A refusal of the request itself (retrying it cannot help), as opposed to a failure.
    pub fn is_refusal(&self) -> bool {
        match self {
            SteerError::UnknownJob { .. }
            | SteerError::Paused { .. }
            | SteerError::Disabled { .. }
            | SteerError::Broadcast { .. }
            | SteerError::NoOwner
            | SteerError::UnknownGroup { .. }
            | SteerError::NotTheOwner { .. }
            | SteerError::NoPeer { .. }
            | SteerError::Range(_) => true,
            SteerError::Request(err) => err.is_refusal(),
            _ => false,
        }
    }
}

/// What a backfill found, and what it asked the owner to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backfill {
    pub plan: super::backfill::Plan,
    /// The ticks requested (Unix ms, ascending); none for a dry run.
    pub requested: Vec<i64>,
}

/// A release that went through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    pub from: NodeId,
    pub to: NodeId,
    pub after: Duration,
}

/// A session for steering one lock group.
#[derive(Debug)]
pub struct Steer {
    client: Ledger,
    paths: GroupPaths,
    jobs: HashMap<JobName, Arc<JobConfig>>,
    takeover_delay: Duration,
    /// The declared `[[group]]` names.
    groups: Vec<String>,
}

impl Steer {
    /// Connects to the ZooKeeper and lock group of `config`, within its `connect_timeout`.
    ///
    /// # Errors
    /// `Unreachable` with the address when no session is made in time.
    pub async fn connect(config: &Config) -> Result<Self, SteerError> {
        let client = crate::delayed::client::session_for(config).await?;
        Ok(Self::with_client(client, config))
    }

    /// Steers over an existing session (the daemon's own, for its HTTP API).
    pub fn with_client(client: Ledger, config: &Config) -> Self {
        Self {
            client,
            paths: config.lock.group_paths(),
            jobs: config
                .jobs
                .iter()
                .map(|job| (job.spec.name.clone(), Arc::clone(job)))
                .collect(),
            takeover_delay: config.lock.takeover_delay,
            groups: config.groups.iter().map(|g| g.name.clone()).collect(),
        }
    }

    fn declared(&self, job: &JobName) -> Result<&Arc<JobConfig>, SteerError> {
        self.jobs.get(job).ok_or_else(|| {
            let mut declared: Vec<&str> = self.jobs.keys().map(JobName::as_str).collect();
            declared.sort_unstable();
            SteerError::UnknownJob {
                job: job.clone(),
                declared: declared.join(", "),
            }
        })
    }

    /// Refuses a run asked of a disabled or paused job.
    async fn refuse_unless_running(
        &self,
        job: &JobName,
        config: &JobConfig,
    ) -> Result<(), SteerError> {
        if !config.enabled {
            return Err(SteerError::Disabled { job: job.clone() });
        }
        if let Some(pause) = store::pauses(&self.client, &self.paths.control)
            .await?
            .get(job)
        {
            return Err(SteerError::Paused {
                job: job.clone(),
                by: pause.by.clone(),
            });
        }
        Ok(())
    }

    /// The ZooKeeper session it steers over.
    pub fn session(&self) -> &Ledger {
        &self.client
    }

    /// Runs `job` now, once, through the ledger: a submission due now that records who asked.
    /// Returns its submission id (its run id is `<job>-<due ms>-<id>`).
    ///
    /// # Errors
    /// Refused for an unknown, disabled or paused job; nothing is written then.
    pub(crate) async fn trigger(
        &self,
        job: &JobName,
        by: &str,
    ) -> Result<SubmissionId, SteerError> {
        let config = self.declared(job)?;
        self.refuse_unless_running(job, config).await?;
        let request = SubmitRequest {
            traceparent: None,
            job: job.clone(),
            due: Utc::now(),
            id: None,
            payload: Vec::new(),
        };
        let submission = Submission {
            requested_by: Some(by.to_owned()),
            marker_names_job: !self.groups.is_empty(),
            ..check_request(&self.jobs, &request, Utc::now())?
        };
        let id = SubmissionId::generate();
        submissions::submit(&self.client, &self.paths.ledger.delayed, &id, &submission).await?;
        Ok(id)
    }

    /// The ticks of `job` in `[from, to]` without a record of their own (and, with
    /// `include_pruned`, those older than every record kept), asked of the owner to run in
    /// order through the one claim path; with `dry_run`, only the plan.
    ///
    /// # Errors
    /// An unknown job, a range refused (backwards, past now, too many ticks, no schedule), a
    /// failed request.
    pub(crate) async fn backfill(
        &self,
        job: &JobName,
        (from, to): (chrono::DateTime<Utc>, chrono::DateTime<Utc>),
        options: BackfillOptions,
        by: &str,
    ) -> Result<Backfill, SteerError> {
        let BackfillOptions {
            include_pruned,
            dry_run,
            with_children,
        } = options;
        let config = self.declared(job)?;
        if config.broadcast.is_some() {
            return Err(SteerError::Broadcast { job: job.clone() });
        }
        let now = Utc::now();
        let ticks = super::backfill::ticks_in(config, from, to, now)?;
        // A paused job's backlog is recorded skipped: resume first, then backfill.
        self.refuse_unless_running(job, config).await?;
        let records = crate::ledger::history(
            &self.client,
            &self.paths.ledger,
            job,
            crate::config::HISTORY_LIMIT,
        )
        .await?;
        let plan = super::backfill::plan(job, &ticks, &records, config.history);
        let requested = plan.to_run(include_pruned);
        if !dry_run && !requested.is_empty() {
            let request = super::BackfillRequest {
                job: job.clone(),
                ticks: requested.clone(),
                by: by.to_owned(),
                at_unix_ms: now.timestamp_millis(),
                with_children,
            };
            store::request_backfill(&self.client, &self.paths.control, &request).await?;
        }
        Ok(Backfill {
            plan,
            requested: if dry_run { Vec::new() } else { requested },
        })
    }

    /// Pauses `job` with an optional reason.
    ///
    /// # Errors
    /// An unknown job; a failed request.
    pub(crate) async fn pause(
        &self,
        job: &JobName,
        reason: Option<&str>,
        by: &str,
    ) -> Result<Paused, SteerError> {
        self.declared(job)?;
        let pause = Pause::new(reason, by, Utc::now().timestamp_millis());
        Ok(store::pause(&self.client, &self.paths.control, job, &pause).await?)
    }

    /// Resumes `job`; `None` when it was not paused. A job no longer declared can be resumed
    /// too (its pause would otherwise outlive it).
    ///
    /// # Errors
    /// A failed request.
    pub(crate) async fn resume(&self, job: &JobName) -> Result<Option<Pause>, SteerError> {
        Ok(store::resume(&self.client, &self.paths.control, job).await?)
    }

    /// The paused jobs.
    ///
    /// # Errors
    /// A failed request.
    pub async fn pauses(&self) -> Result<Pauses, SteerError> {
        Ok(store::pauses(&self.client, &self.paths.control).await?)
    }

    /// Asks the owner of lock group `group` (`None` or `"default"`: the default group) to
    /// hand the lock over, and waits until another node owns it (within the takeover delay
    /// and a few seconds more); the balancer prefers another node for it while its owner hands
    /// it over (issue 19). With `expected_owner`, refused unless that node owns the group: a
    /// node's API hands over only what that node owns.
    ///
    /// # Errors
    /// Refused without an owner or another live member, for a group the schedule does not
    /// declare (`UnknownGroup`), or another owner than expected (`NotTheOwner`);
    /// `NotHandedOver` when the lock did not move in time.
    pub(crate) async fn release_group_checked(
        &self,
        group: Option<&str>,
        expected_owner: Option<&NodeId>,
        by: &str,
    ) -> Result<Released, SteerError> {
        let (lock, control) = match group.filter(|g| *g != crate::ids::DEFAULT_GROUP) {
            None => (self.paths.lock.clone(), self.paths.control.clone()),
            Some(name) if self.groups.iter().any(|g| g == name) => (
                self.paths.lock.group(name),
                ControlPaths::of_group(&self.paths.lock, name),
            ),
            Some(name) => {
                let mut declared = vec![crate::ids::DEFAULT_GROUP.to_owned()];
                declared.extend(self.groups.iter().cloned());
                return Err(SteerError::UnknownGroup {
                    group: name.to_owned(),
                    declared: declared.join(", "),
                });
            }
        };
        let owner = match inspect::owner(&self.client, &lock).await? {
            Owner::Held {
                info: Some(info), ..
            } => info.node_id,
            Owner::Held { info: None, .. } | Owner::Squatter | Owner::None => {
                return Err(SteerError::NoOwner);
            }
        };
        if let Some(asked) = expected_owner.filter(|asked| **asked != owner) {
            return Err(SteerError::NotTheOwner {
                group: group.unwrap_or(crate::ids::DEFAULT_GROUP).to_owned(),
                owner,
                asked: asked.clone(),
            });
        }
        let members = inspect::member_ids(&self.client, &self.paths.lock).await?;
        if !members.iter().any(|member| member != &owner) {
            return Err(SteerError::NoPeer { owner });
        }
        let request = ReleaseRequest {
            owner: owner.clone(),
            by: by.to_owned(),
            at_unix_ms: Utc::now().timestamp_millis(),
        };
        store::request_release(&self.client, &control, &request).await?;
        let started = Instant::now();
        // The owner withdraws its claims (≤ 2 s), then yields; a lone owner takes it back after
        // the takeover delay, so waiting longer than that tells nothing more.
        let limit = self.takeover_delay + Duration::from_secs(5);
        loop {
            match inspect::owner(&self.client, &lock).await? {
                Owner::Held {
                    info: Some(info), ..
                } if info.node_id != owner => {
                    return Ok(Released {
                        from: owner,
                        to: info.node_id,
                        after: started.elapsed(),
                    });
                }
                _ if started.elapsed() > limit => {
                    return Err(SteerError::NotHandedOver {
                        owner,
                        waited: started.elapsed(),
                        why: "the owner did not act on the request, or no peer took the lock",
                    });
                }
                _ => tokio::time::sleep(RELEASE_POLL).await,
            }
        }
    }
}

/// What a backfill asks for besides its range.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackfillOptions {
    /// Also run the ticks older than every record kept (they may have run; their records may
    /// have been pruned).
    pub include_pruned: bool,
    /// Only the plan: nothing is asked of the owner.
    pub dry_run: bool,
    /// The backfilled runs make their children's runs (`after`), as on time; without it they
    /// make none.
    pub with_children: bool,
}
