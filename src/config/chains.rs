//! `after` and `after_status`: which jobs a job follows, and the checks that need the whole
//! schedule — every parent declared, no cycle, no job both scheduled and chained, and several
//! parents sharing one schedule (their runs are joined by instant).
//!
//! Owns: reading the two keys of a `[[job]]` and the graph checks over all jobs.
//! Must not: decide when a child runs (the fire machine does, from the parents' records).

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

use toml::Spanned;

use super::error::JobContext;
use super::model::{After, AfterStatus, JobConfig};
use super::validator::{Validator, WrittenAfter};
use crate::ids::JobName;

impl Validator<'_> {
    /// A job's `after` and `after_status`; the parents are checked later, by
    /// [`Validator::check_chains`].
    pub(super) fn job_after(
        &mut self,
        after: Option<Spanned<Vec<Spanned<String>>>>,
        status: Option<Spanned<AfterStatus>>,
        schedule: Option<Range<usize>>,
        job: JobContext<'_>,
        name: &str,
    ) -> Option<Arc<After>> {
        let Some(after) = after else {
            if let Some(status) = status {
                self.problem(
                    status.span(),
                    job.key("after_status"),
                    "only a job with `after` has an after_status",
                );
            }
            return None;
        };
        let span = after.span();
        let parents = after.into_inner();
        if parents.is_empty() {
            self.problem(
                span,
                job.key("after"),
                "expected the names of the jobs this one runs after, like [\"extract\"]",
            );
            return None;
        }
        let mut named = HashSet::new();
        let mut names = Vec::with_capacity(parents.len());
        for parent in &parents {
            if !named.insert(parent.get_ref().as_str()) {
                self.problem(parent.span(), job.key("after"), "named twice");
            } else {
                names.push(JobName::new(parent.get_ref().clone()));
            }
        }
        self.chains.push(WrittenAfter {
            job: name.to_owned(),
            span,
            parents,
            schedule,
        });
        Some(Arc::new(After {
            parents: names,
            status: status.map_or(AfterStatus::Succeeded, Spanned::into_inner),
        }))
    }

    /// The checks of `after` over the whole schedule: each parent is a declared job, no job
    /// follows itself through any path (the cycle is named), a chained job has no schedule of
    /// its own, and several parents share one schedule.
    pub(super) fn check_chains(&mut self, jobs: &[Arc<JobConfig>], declared: &HashSet<String>) {
        let written = std::mem::take(&mut self.chains);
        let by_name: HashMap<&str, &JobConfig> = jobs
            .iter()
            .map(|job| (job.spec.name.as_str(), job.as_ref()))
            .collect();
        let mut known: Vec<&str> = declared.iter().map(String::as_str).collect();
        known.sort_unstable();
        let mut in_a_cycle = HashSet::new();
        for chain in &written {
            let job = JobContext::Job(&chain.job);
            if let Some(schedule) = &chain.schedule {
                self.problem(
                    schedule.clone(),
                    job.key("schedule"),
                    "a job with `after` runs after its parents, not on a schedule of its own: \
                     remove one of the two",
                );
            }
            for parent in &chain.parents {
                if !declared.contains(parent.get_ref()) {
                    let message = match super::reader::nearest(parent.get_ref(), &known) {
                        Some(near) => format!(
                            "no job is named {:?} (did you mean {near:?}?)",
                            parent.get_ref()
                        ),
                        None => format!("no job is named {:?}", parent.get_ref()),
                    };
                    self.problem(parent.span(), job.key("after"), message);
                } else if by_name
                    .get(parent.get_ref().as_str())
                    .is_some_and(|parent| parent.broadcast.is_some())
                {
                    let message = format!(
                        "{:?} is a broadcast job, run once per node: no job runs after it",
                        parent.get_ref()
                    );
                    self.problem(parent.span(), job.key("after"), message);
                }
            }
            if in_a_cycle.contains(chain.job.as_str()) {
                continue;
            }
            if let Some(cycle) = cycle_from(&chain.job, &by_name) {
                let message = format!("`after` goes round in a cycle: {}", cycle.join(" → "));
                in_a_cycle.extend(cycle.into_iter().map(str::to_owned));
                self.problem(chain.span.clone(), job.key("after"), message);
                continue;
            }
            if chain.parents.len() > 1 {
                self.parents_share_a_schedule(chain, &by_name);
            }
        }
    }

    /// Several parents are joined by instant: they must fire at the same instants.
    fn parents_share_a_schedule(
        &mut self,
        chain: &WrittenAfter,
        by_name: &HashMap<&str, &JobConfig>,
    ) {
        let mut shown = Vec::new();
        let mut keys = HashSet::new();
        for parent in &chain.parents {
            let name = parent.get_ref().as_str();
            let key = root_schedule(name, by_name, &mut HashSet::new());
            shown.push(match &key {
                Some((expression, zone)) => format!("{name} on \"{expression}\" ({zone})"),
                None => format!("{name} on no schedule"),
            });
            keys.insert(key);
        }
        if keys.len() > 1 || keys.contains(&None) {
            let message = format!(
                "the parents of a job with several must run on one schedule, so that their runs \
                 meet at the same instants: {}",
                shown.join(", ")
            );
            self.problem(
                chain.span.clone(),
                JobContext::Job(&chain.job).key("after"),
                message,
            );
        }
    }
}

/// The schedule (expression, zone) whose instants a job's runs carry: its own, or for a chained
/// job its first parent's; `None` for an on-demand job (or a chain that reaches none).
fn root_schedule(
    name: &str,
    by_name: &HashMap<&str, &JobConfig>,
    seen: &mut HashSet<String>,
) -> Option<(String, String)> {
    let job = by_name.get(name)?;
    if let Some(schedule) = &job.schedule {
        return Some((
            schedule.expression().to_owned(),
            schedule.timezone().name().to_owned(),
        ));
    }
    let parent = job.after.as_ref()?.parents.first()?;
    if !seen.insert(name.to_owned()) {
        return None;
    }
    root_schedule(parent.as_str(), by_name, seen)
}

/// The cycle through `start`, if its `after` leads back to it: `[start, …, start]`.
fn cycle_from<'j>(
    start: &'j str,
    by_name: &HashMap<&'j str, &'j JobConfig>,
) -> Option<Vec<&'j str>> {
    /// Depth-first, with the path so far; each job is entered once.
    fn walk<'j>(
        at: &'j str,
        start: &str,
        by_name: &HashMap<&'j str, &'j JobConfig>,
        path: &mut Vec<&'j str>,
        entered: &mut HashSet<&'j str>,
    ) -> bool {
        let Some(after) = by_name.get(at).and_then(|job| job.after.as_ref()) else {
            return false;
        };
        for parent in &after.parents {
            let Some((parent, _)) = by_name.get_key_value(parent.as_str()) else {
                continue;
            };
            path.push(parent);
            if *parent == start {
                return true;
            }
            if entered.insert(parent) && walk(parent, start, by_name, path, entered) {
                return true;
            }
            path.pop();
        }
        false
    }
    let (start, _) = by_name.get_key_value(start)?;
    let mut path = vec![*start];
    walk(start, start, by_name, &mut path, &mut HashSet::new()).then(|| {
        // The walk goes from child to parent; shown as runs flow, parent → child.
        path.reverse();
        path
    })
}
