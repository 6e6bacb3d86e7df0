//! `broadcast` and `requires`: a scheduled job that every live member carrying the tags runs,
//! each tick once per node (issue 36), and the keys that make no sense for one.
//!
//! Owns: reading the two keys of a `[[job]]` and refusing the combinations a broadcast cannot
//! keep: no schedule (a submission runs once), `after` or being a parent (a chain joins one run
//! per instant), retries, limits, calendars and `concurrency = "replace"`.
//! Must not: decide which node runs a tick (the fire machine's broadcast part does).

use std::ops::Range;
use std::sync::Arc;

use toml::Spanned;

use super::error::JobContext;
use super::model::{Broadcast, Concurrency};
use super::validator::Validator;

/// The keys of a `[[job]]` a broadcast is checked against, with where each was written.
pub(super) struct BroadcastKeys {
    pub broadcast: Option<Spanned<bool>>,
    pub requires: Option<Spanned<Vec<Spanned<String>>>>,
    pub schedule: Option<Range<usize>>,
    /// Each key a broadcast refuses, when the job sets it.
    pub refused: [(&'static str, Option<Range<usize>>); 5],
    pub concurrency: Option<Concurrency>,
}

impl Validator<'_> {
    /// A job's `broadcast` and `requires`; `None` for a job that is not a broadcast.
    pub(super) fn job_broadcast(
        &mut self,
        keys: BroadcastKeys,
        job: JobContext<'_>,
    ) -> Option<Arc<Broadcast>> {
        let on = keys.broadcast.as_ref().is_some_and(|b| *b.get_ref());
        if !on {
            if let Some(requires) = keys.requires {
                self.problem(
                    requires.span(),
                    job.key("requires"),
                    "only a broadcast job requires tags of the nodes that run it: add \
                     `broadcast = true`",
                );
            }
            return None;
        }
        let span = keys.broadcast.map(|b| b.span()).unwrap_or_default();
        if keys.schedule.is_none() {
            self.problem(
                span.clone(),
                job.key("broadcast"),
                "only a job with a schedule runs on every node (a submission runs once)",
            );
        }
        for (key, written) in keys.refused {
            if let Some(written) = written {
                let message = format!("a broadcast job has no `{key}`: {}", why_not(key));
                self.problem(written, job.key(key), message);
            }
        }
        if keys.concurrency == Some(Concurrency::Replace) {
            self.problem(
                span,
                job.key("concurrency"),
                "a broadcast job's concurrency is \"forbid\" or \"allow\", each on its own node",
            );
        }
        let requires = self.tags(keys.requires, &job.key("requires"));
        Some(Arc::new(Broadcast { requires }))
    }
}

/// Why a broadcast refuses `key`.
fn why_not(key: &str) -> &'static str {
    match key {
        "after" => "a chained run is one per instant, a broadcast one per node",
        "retries" => "each node runs a tick once, on time, or records it missed",
        "limits" => "each node's run is its own, outside the owner's limits",
        "except" | "only" => "calendars skip the ticks of a job run once per tick",
        _ => "it does not apply",
    }
}
