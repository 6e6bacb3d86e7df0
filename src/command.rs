//! The one door for operator actions: a typed [`Command`] — pause, resume, trigger, backfill,
//! release, submit, cancel, reschedule, retry, the ACL applied to the nodes already there, and
//! the delayed queue moved into PostgreSQL —
//! goes through [`Door::execute`] with the
//! [`Actor`] its entry point established, which checks it, does it through the steering and
//! submission clients, writes its audit entry and returns a typed [`Outcome`]. The CLI, the
//! HTTP API and the console only parse into a `Command` and render what comes back.
//!
//! Owns: the list of operator actions; the one place an audit entry is written (an action's,
//! and an HTTP write refused for its token), with the arguments each action records; which
//! actions the trail keeps (not a submit: programs make thousands a second, and each keeps its
//! own record; not a dry run: it asks nothing of anyone).
//! Must not: parse a command line or a request, render an outcome, or work out who the actor
//! is (each entry point does, once); nor write to ZooKeeper but through the clients and the
//! trail.

use chrono::{DateTime, Utc};

use crate::audit::{Actor, AuditEntry};
use crate::config::Config;
use crate::control::client::{Backfill, BackfillOptions, Released, SteerError};
use crate::control::{Pause, client::Steer};
use crate::delayed::client::{Delayed, DelayedError, Receipt, Rescheduled};
use crate::delayed::{Submission, SubmissionId, SubmitRequest};
use crate::ids::{DEFAULT_GROUP, JobName, NodeId};
use crate::ledger::RequestFailed;
use crate::ledger::acl::AclApplied;
use crate::ledger::audit::Trail;
use crate::ledger::control::Paused;

/// An operator action, as every entry point asks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Run a declared job now, once, through the ledger.
    Trigger {
        job: JobName,
    },
    /// Start nothing new of `job` until resumed.
    Pause {
        job: JobName,
        reason: Option<String>,
    },
    Resume {
        job: JobName,
    },
    /// Run the ticks of `job` in `[from, to]` that have no record.
    Backfill {
        job: JobName,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        options: BackfillOptions,
    },
    /// Ask the owner of `group` (the default group: `None`) to hand its lock over; with
    /// `owner`, only if that node owns it (a node's API hands over only what it owns).
    Release {
        group: Option<String>,
        owner: Option<NodeId>,
    },
    Submit(SubmitRequest),
    Cancel {
        id: SubmissionId,
    },
    Reschedule {
        id: SubmissionId,
        due: DateTime<Utc>,
    },
    /// Submit failed submission `id` again, due at `due`, under `new_id` (generated if `None`).
    Retry {
        id: SubmissionId,
        due: DateTime<Utc>,
        new_id: Option<SubmissionId>,
    },
    /// Give every node of the lock group's directory the ACL the schedule asks for (`acl`,
    /// `read_acl`): a ledger run open, closed in place (docs/UPGRADING.md).
    ApplyAcl,
    /// Move every submission pending in ZooKeeper into the delayed queue's PostgreSQL store.
    MigrateDelayed,
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Triggered(SubmissionId),
    Paused(Paused),
    /// The pause it ended; `None`: it was not paused.
    Resumed(Option<Pause>),
    Backfilled(Backfill),
    Released(Released),
    Submitted(Receipt),
    Cancelled(Submission),
    Rescheduled(Rescheduled),
    Retried(Receipt),
    AclApplied(AclApplied),
    Migrated(crate::ledger::store_move::Moved),
}

/// Why a command was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Steer(#[from] SteerError),
    #[error(transparent)]
    Delayed(#[from] DelayedError),
    #[error(transparent)]
    Acl(#[from] RequestFailed),
    /// The door answered with another command's outcome: a bug in the door, never the caller's.
    #[error("the command's outcome is another command's (a bug in zkcron)")]
    Mismatched,
}

impl CommandError {
    /// A refusal of the command itself (asking again cannot help), as opposed to a failure.
    pub fn is_refusal(&self) -> bool {
        match self {
            CommandError::Steer(err) => err.is_refusal(),
            CommandError::Delayed(err) => err.is_refusal(),
            CommandError::Acl(_) | CommandError::Mismatched => false,
        }
    }
}

/// The door over one session: its steering and submission clients, and the audit trail.
#[derive(Debug)]
pub struct Door {
    steer: Steer,
    delayed: Delayed,
    trail: Trail,
    /// Who the servers know this session as, for the audit trail's `who`.
    zookeeper: Option<String>,
    /// The lock group's directory, which holds every node zkcron makes for it.
    dir: String,
}

impl Door {
    /// Connects to the ZooKeeper and lock group of `config`, within its `connect_timeout`.
    ///
    /// # Errors
    /// `Unreachable` with the address when no session is made in time.
    pub async fn connect(config: &Config) -> Result<Self, CommandError> {
        Ok(Self::over(Steer::connect(config).await?, config))
    }

    /// The door over `steer`'s session (the daemon's own, for its HTTP API).
    pub fn over(steer: Steer, config: &Config) -> Self {
        let session = steer.session().clone();
        Self {
            delayed: Delayed::with_client(session.clone(), config),
            trail: Trail::new(session, config),
            steer,
            zookeeper: config.zookeeper.settings().identity(),
            dir: config.lock.paths().dir,
        }
    }

    /// The submission client of this session, for reads (`show`, `list`) and the schedule.
    pub fn delayed(&self) -> &Delayed {
        &self.delayed
    }

    /// Does `command` as `actor`, and records it in the audit trail when the trail keeps it.
    ///
    /// # Errors
    /// The command was refused (nothing written, the refusal recorded) or failed.
    pub async fn execute(&self, command: Command, actor: &Actor) -> Result<Outcome, CommandError> {
        // A submit is not kept in the trail: its payload (up to 64 KiB) goes on uncopied.
        let command = match command {
            Command::Submit(request) => {
                return Ok(Outcome::Submitted(self.delayed.submit(request).await?));
            }
            other => other,
        };
        let done = self.perform(&command, &actor.by).await;
        let actor = actor.clone().through_session(self.zookeeper.as_deref());
        if let Some(entry) = command.audit_entry(&done, &actor) {
            self.trail.record(&entry).await;
        }
        done
    }

    /// Records a write refused before it became a command (no token, a wrong or a read-only
    /// one), with what was asked: someone tried to act.
    pub async fn refused(&self, request: String, why: String, actor: &Actor) {
        let entry = AuditEntry {
            result: why,
            ..AuditEntry::now(
                "refused",
                None,
                vec![("request", request)],
                &actor.clone().through_session(self.zookeeper.as_deref()),
                Ok(()),
            )
        };
        self.trail.record(&entry).await;
    }

    async fn perform(&self, command: &Command, by: &str) -> Result<Outcome, CommandError> {
        let (steer, delayed) = (&self.steer, &self.delayed);
        // Small: a submit, the one command with a payload, is done apart (`execute`).
        Ok(match command.clone() {
            Command::Trigger { job } => Outcome::Triggered(steer.trigger(&job, by).await?),
            Command::Pause { job, reason } => {
                Outcome::Paused(steer.pause(&job, reason.as_deref(), by).await?)
            }
            Command::Resume { job } => Outcome::Resumed(steer.resume(&job).await?),
            Command::Backfill {
                job,
                from,
                to,
                options,
            } => Outcome::Backfilled(steer.backfill(&job, (from, to), options, by).await?),
            Command::Release { group, owner } => Outcome::Released(
                steer
                    .release_group_checked(group.as_deref(), owner.as_ref(), by)
                    .await?,
            ),
            Command::Submit(request) => Outcome::Submitted(delayed.submit(request).await?),
            Command::Cancel { id } => Outcome::Cancelled(delayed.cancel(&id).await?),
            Command::Reschedule { id, due } => {
                Outcome::Rescheduled(delayed.reschedule(&id, due).await?)
            }
            Command::Retry { id, due, new_id } => {
                Outcome::Retried(delayed.retry(&id, due, new_id).await?)
            }
            Command::ApplyAcl => {
                Outcome::AclApplied(crate::ledger::acl::apply(steer.session(), &self.dir).await?)
            }
            Command::MigrateDelayed => Outcome::Migrated(delayed.migrate().await?),
        })
    }
}

impl Command {
    /// The trail's name for it: `pause`, `resume`, `trigger`, …
    pub fn action(&self) -> &'static str {
        match self {
            Command::Trigger { .. } => "trigger",
            Command::Pause { .. } => "pause",
            Command::Resume { .. } => "resume",
            Command::Backfill { .. } => "backfill",
            Command::Release { .. } => "release",
            Command::Submit(_) => "submit",
            Command::Cancel { .. } => "cancel",
            Command::Reschedule { .. } => "reschedule",
            Command::Retry { .. } => "retry",
            Command::ApplyAcl => "acl",
            Command::MigrateDelayed => "migrate",
        }
    }

    /// The audit entry of this command, done by `actor` and ended as `done`; `None` for what the
    /// trail does not keep (a submit, a dry run).
    pub fn audit_entry(
        &self,
        done: &Result<Outcome, CommandError>,
        actor: &Actor,
    ) -> Option<AuditEntry> {
        let outcome = done.as_ref().ok();
        let (job, args) = match self {
            Command::Submit(_) => return None,
            Command::Backfill { options, .. } if options.dry_run => return None,
            Command::Trigger { job } => {
                let id = match outcome {
                    Some(Outcome::Triggered(id)) => vec![("submission_id", id.to_string())],
                    _ => Vec::new(),
                };
                (Some(job.clone()), id)
            }
            Command::Pause { job, reason } => {
                let mut args: Vec<(&str, String)> =
                    reason.iter().map(|r| ("reason", r.clone())).collect();
                if let Some(Outcome::Paused(Paused::Already(_))) = outcome {
                    args.push(("was", "paused already".to_owned()));
                }
                (Some(job.clone()), args)
            }
            Command::Resume { job } => {
                let args = match outcome {
                    Some(Outcome::Resumed(None)) => vec![("was", "not paused".to_owned())],
                    Some(Outcome::Resumed(Some(pause))) => vec![("paused_by", pause.by.clone())],
                    _ => Vec::new(),
                };
                (Some(job.clone()), args)
            }
            Command::Backfill { job, from, to, .. } => {
                let mut args = vec![("from", from.to_rfc3339()), ("to", to.to_rfc3339())];
                if let Some(Outcome::Backfilled(done)) = outcome {
                    args.push(("ticks", done.requested.len().to_string()));
                }
                (Some(job.clone()), args)
            }
            Command::Release { group, .. } => {
                let mut args = vec![(
                    "group",
                    group.as_deref().unwrap_or(DEFAULT_GROUP).to_owned(),
                )];
                if let Some(Outcome::Released(released)) = outcome {
                    args.push(("from", released.from.to_string()));
                    args.push(("to", released.to.to_string()));
                }
                (None, args)
            }
            Command::Cancel { id } => {
                let job = match outcome {
                    Some(Outcome::Cancelled(submission)) => Some(submission.job.clone()),
                    _ => None,
                };
                (job, vec![("submission_id", id.to_string())])
            }
            Command::Reschedule { id, due } => {
                let job = match outcome {
                    Some(Outcome::Rescheduled(
                        Rescheduled::Moved(moved) | Rescheduled::AlreadyThere(moved),
                    )) => Some(moved.job.clone()),
                    _ => None,
                };
                let args = vec![("due", due.to_rfc3339()), ("submission_id", id.to_string())];
                (job, args)
            }
            Command::Retry { id, due, .. } => {
                let mut args = vec![("due", due.to_rfc3339()), ("submission_id", id.to_string())];
                if let Some(Outcome::Retried(receipt)) = outcome {
                    args.push(("new_id", receipt.id.to_string()));
                }
                (None, args)
            }
            Command::MigrateDelayed => {
                let mut args = vec![("to", "postgres".to_owned())];
                if let Some(Outcome::Migrated(moved)) = outcome {
                    args.push(("moved", moved.moved.len().to_string()));
                    args.push(("refused", moved.refused.len().to_string()));
                    args.push(("remembered", moved.remembered.moved.to_string()));
                }
                (None, args)
            }
            Command::ApplyAcl => {
                let args = match outcome {
                    Some(Outcome::AclApplied(applied)) => vec![
                        ("acl", applied.acl.clone()),
                        ("changed", applied.changed.to_string()),
                        ("refused", applied.refused.len().to_string()),
                    ],
                    _ => Vec::new(),
                };
                (None, args)
            }
        };
        let ended = done
            .as_ref()
            .map(|_| ())
            .map_err(|err| err as &dyn std::error::Error);
        Some(AuditEntry::now(
            self.action(),
            job.as_ref(),
            args,
            actor,
            ended,
        ))
    }
}

#[cfg(test)]
mod tests;
