//! Chains (`after`), the part of the fire machine that links a parent's run to its children's:
//! which final records leave marks, and what a child's marks, once read, become — a run at the
//! parents' instant, or a `skipped` record naming the parent that ended otherwise; a submitted
//! parent's mark, a submission of the child.
//!
//! Owns: who follows whom across the whole schedule, which of this group's chained jobs have a
//! listing out, and which instants, and submitted parents' marks, have a claim or a submit out.
//! Must not: claim anything itself (its steps go through the one claim path, `starts`), or do
//! I/O: marks are read by the driver ([`ChainsAction::ListMarks`]) and come back as input.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::protocol::{Action, ChainsAction};
use crate::config::{After, JobConfig};
use crate::delayed::submission::SubmissionId;
use crate::ids::JobName;
use crate::layout::MarkName;
use crate::run::{Claim, FoundMark};
use crate::run::{ParentRun, RunStatus};

/// What a child's marks at one instant become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ChainStep {
    /// Every parent ended as `after_status` says: the child runs at `tick`.
    Run {
        tick: DateTime<Utc>,
        parents: Vec<ParentRun>,
    },
    /// A parent ended otherwise, or never ended at this instant: recorded `skipped`, `why`.
    Skip {
        tick: DateTime<Utc>,
        parents: Vec<ParentRun>,
        why: String,
    },
    /// A submitted parent's run ended as `after_status` says: the child is submitted, with the
    /// parent's payload, taking the mark. `parent`: the parent's submission id.
    Submit {
        parent: SubmissionId,
        found: FoundMark,
    },
    /// A submitted parent's mark that makes no run (`why`): removed.
    Forget { mark: MarkName, why: String },
}

/// The chains this machine keeps. See the module docs.
#[derive(Debug, Default)]
pub(super) struct Chains {
    /// Each parent's children, of any group (a child in another group is that group's owner's
    /// to run, from the mark).
    children: HashMap<JobName, Vec<JobName>>,
    /// Every chained job's parents and `after_status`, of any group: which children a
    /// submitted parent's run leaves marks for.
    afters: HashMap<JobName, Arc<After>>,
    /// This group's chained jobs.
    followers: HashMap<JobName, Arc<After>>,
    /// A listing is out for the job; `true`: another is owed once it is answered.
    listing: HashMap<JobName, bool>,
    /// Instants whose claim is out, by job: a listing meanwhile does not claim them again.
    claiming: HashSet<(JobName, i64)>,
    /// Submitted parents' marks whose child's submit is out.
    submitting: HashSet<(JobName, MarkName)>,
    /// A listing failed: every chained job's marks are read again then.
    relist_at: Option<DateTime<Utc>>,
}

/// A failed listing of marks is tried again this much later.
const RELIST_AFTER: chrono::Duration = chrono::Duration::seconds(2);

impl Chains {
    /// The chains of the whole schedule `all`, for a machine firing `mine`.
    pub fn of(all: &[Arc<JobConfig>], mine: &[Arc<JobConfig>]) -> Self {
        let mut children: HashMap<JobName, Vec<JobName>> = HashMap::new();
        for job in all {
            for parent in job.after.iter().flat_map(|after| &after.parents) {
                children
                    .entry(parent.clone())
                    .or_default()
                    .push(job.spec.name.clone());
            }
        }
        let afters_of = |jobs: &[Arc<JobConfig>]| -> HashMap<JobName, Arc<After>> {
            jobs.iter()
                .filter_map(|job| Some((job.spec.name.clone(), Arc::clone(job.after.as_ref()?))))
                .collect()
        };
        Self {
            children,
            afters: afters_of(all),
            followers: afters_of(mine),
            ..Self::default()
        }
    }

    /// The schedule was reloaded: the chains are read again; listings and claims out stay.
    pub fn reloaded(&mut self, all: &[Arc<JobConfig>], mine: &[Arc<JobConfig>]) {
        let fresh = Self::of(all, mine);
        self.children = fresh.children;
        self.afters = fresh.afters;
        self.followers = fresh.followers;
    }

    /// Gives a final record the marks it leaves, as the claim path builds it: a run of a parent
    /// that ended (succeeded, failed, timed out, cancelled) and promises no retry, so a retried
    /// parent counts once, at its end. A backfill's leaves none unless asked
    /// (`--with-children`). A submission's run leaves marks only for the children it makes a
    /// run of — those that follow it alone, and whose `after_status` admits its end — and they
    /// carry its payload (`payload`).
    pub fn leave_marks(&self, claim: &mut Claim, payload: impl FnOnce() -> Option<Arc<Vec<u8>>>) {
        let record = &claim.record;
        let ended = matches!(
            record.status,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::TimedOut | RunStatus::Cancelled
        );
        if !ended || record.retry_at_unix_ms.is_some() || (record.backfill && !record.with_children)
        {
            return;
        }
        let Some(children) = self.children.get(&record.job) else {
            return;
        };
        if record.submission_id.is_none() {
            claim.children.clone_from(children);
            return;
        }
        claim.children = children
            .iter()
            .filter(|child| {
                self.afters.get(*child).is_some_and(|after| {
                    after.parents.len() == 1 && after.status.admits(record.status)
                })
            })
            .cloned()
            .collect();
        if !claim.children.is_empty() {
            claim.payload = payload();
            if claim.payload.is_none() {
                tracing::warn!(job = %record.job, run_id = record.run_id, "the submission's payload is not known here; its children get none");
            }
        }
    }

    /// Lists the marks of `job` (`None`: of every chained job of this group), unless a listing
    /// of it is out: then one more is owed.
    pub fn list(&mut self, job: Option<&JobName>, out: &mut Vec<Action>) {
        let jobs: Vec<JobName> = match job {
            Some(job) if self.followers.contains_key(job) => vec![job.clone()],
            Some(_) => Vec::new(),
            None => self.followers.keys().cloned().collect(),
        };
        for job in jobs {
            match self.listing.get_mut(&job) {
                Some(owed) => *owed = true,
                None => {
                    self.listing.insert(job.clone(), false);
                    out.push(Action::Chains(ChainsAction::ListMarks(job)));
                }
            }
        }
    }

    /// The marks of `job`, as read: what each instant becomes, oldest first. Instants whose
    /// claim is out, and sets still waiting for a parent, become nothing yet; a set is given
    /// up on (`skipped`) once its instant is more than the job's `starting_deadline` ago.
    pub fn listed(
        &mut self,
        config: &JobConfig,
        marks: Vec<FoundMark>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) -> Vec<ChainStep> {
        let job = &config.spec.name;
        if self.listing.remove(job) == Some(true) {
            self.list(Some(job), out);
        }
        let Some(after) = self.followers.get(job) else {
            return Vec::new();
        };
        let mut steps = Vec::new();
        let mut by_instant: BTreeMap<i64, Vec<FoundMark>> = BTreeMap::new();
        for mark in marks {
            if let Some(parent) = mark.name.submission.clone() {
                if self.submitting.insert((job.clone(), mark.name.clone())) {
                    steps.push(submitted_step(after, parent, mark));
                }
                continue;
            }
            by_instant
                .entry(mark.name.scheduled_unix_ms)
                .or_default()
                .push(mark);
        }
        let deadline = chrono::Duration::from_std(config.starting_deadline).unwrap_or_default();
        for (ms, marks) in by_instant {
            let Some(tick) = DateTime::from_timestamp_millis(ms) else {
                continue;
            };
            if self.claiming.contains(&(job.clone(), ms)) {
                continue;
            }
            let parents: Vec<ParentRun> = marks
                .into_iter()
                .map(|found| ParentRun {
                    job: found.name.parent,
                    run_id: found.mark.run_id,
                    status: found.mark.status,
                    trace: found.mark.trace,
                })
                .collect();
            let overdue = tick + deadline < now;
            let Some(step) = step_of(after, tick, parents, overdue) else {
                continue;
            };
            self.claiming.insert((job.clone(), ms));
            steps.push(step);
        }
        steps
    }

    /// The listing of `job` was not acted on (the job is paused, or this node cannot fire):
    /// nothing is out for it; its resume or the next acquisition reads it again.
    pub fn listing_dropped(&mut self, job: &JobName) {
        self.listing.remove(job);
    }

    /// The listing of `job` failed: read again after [`RELIST_AFTER`], so that a mark is never
    /// left waiting for the next parent's end.
    pub fn listing_failed(&mut self, job: &JobName, now: DateTime<Utc>) {
        self.listing.remove(job);
        self.relist_at.get_or_insert(now + RELIST_AFTER);
    }

    /// When a failed listing is read again.
    pub fn next_deadline(&self) -> Option<DateTime<Utc>> {
        self.relist_at
    }

    /// Reads the marks again once a failed listing's wait is over (while this node may fire).
    pub fn relist_due(&mut self, may_fire: bool, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if self.relist_at.is_some_and(|at| at <= now) {
            self.relist_at = None;
            if may_fire {
                self.list(None, out);
            }
        }
    }

    /// The claim of `job`'s run (or record) at `tick_ms` was answered.
    pub fn settled(&mut self, job: &JobName, tick_ms: i64) -> bool {
        self.claiming.remove(&(job.clone(), tick_ms))
    }

    /// The submit of `job` that takes `mark` (or the mark's removal) was answered.
    pub fn submitted(&mut self, job: &JobName, mark: &MarkName) -> bool {
        self.submitting.remove(&(job.clone(), mark.clone()))
    }
}

/// What a submitted parent's mark becomes: the child's submission when the child follows that
/// parent alone and its `after_status` admits the parent's end; otherwise nothing, the mark
/// removed (a child of several parents joins no submitted run: their runs share no instant).
fn submitted_step(after: &After, id: SubmissionId, found: FoundMark) -> ChainStep {
    let parent = &found.name.parent;
    let status = found.mark.status;
    let why = if !after.parents.contains(parent) {
        Some(format!("{parent} is no longer among the job's parents"))
    } else if after.parents.len() > 1 {
        Some(format!(
            "a submitted run of {parent}: a job with several parents follows no submitted run"
        ))
    } else if !after.status.admits(status) {
        Some(format!(
            "{parent} ended {} (after_status = {})",
            status.as_str(),
            after.status.as_str()
        ))
    } else {
        None
    };
    match why {
        Some(why) => ChainStep::Forget {
            mark: found.name,
            why,
        },
        None => ChainStep::Submit { parent: id, found },
    }
}

/// What the marks at `tick` become once every parent left one (or, `overdue`, never will): a
/// run when each ended as `after_status` says, a skip naming those that did not; `None` while
/// the set waits for a parent.
fn step_of(
    after: &After,
    tick: DateTime<Utc>,
    parents: Vec<ParentRun>,
    overdue: bool,
) -> Option<ChainStep> {
    let of = |name: &JobName| parents.iter().find(|parent| parent.job == *name);
    let missing: Vec<&str> = after
        .parents
        .iter()
        .filter(|name| of(name).is_none())
        .map(JobName::as_str)
        .collect();
    let otherwise: Vec<String> = after
        .parents
        .iter()
        .filter_map(of)
        .filter(|parent| !after.status.admits(parent.status))
        .map(|parent| format!("{} ended {}", parent.job, parent.status.as_str()))
        .collect();
    // A set waits for every parent, so that one skip accounts for the whole instant.
    if !missing.is_empty() && !overdue {
        return None;
    }
    let mut why = otherwise;
    if !missing.is_empty() {
        why.push(format!(
            "no run of {} ended at this instant within the job's starting_deadline",
            missing.join(", ")
        ));
    }
    if why.is_empty() {
        return Some(ChainStep::Run { tick, parents });
    }
    let why = format!(
        "{} (after_status = {})",
        why.join("; "),
        after.status.as_str()
    );
    Some(ChainStep::Skip { tick, parents, why })
}
