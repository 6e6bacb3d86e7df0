//! The watch on the members: the owner's check of their schedule fingerprints (`crate::drift`) —
//! a member that would fire a different schedule is logged once per change and exported as
//! `zkcron_schedule_drift` — and, on every node, the ledger format they read (`formats`).
//!
//! Owns: one persistent recursive watch on `members/` per session, and what was last reported.
//! Must not: decide anything about firing; a drifting member is reported, never refused.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::drift::{self, Drift};
use crate::ids::NodeId;
use crate::layout::LockPaths;
use crate::ledger::Ledger;
use crate::ledger::inspect;
use crate::ledger::watch::{Change, Follow, NodeChange};
use crate::lock::node::{OwnerInfo, ScheduleTotal};
use crate::metrics::Metrics;
use crate::report::error_chain;
use crate::view::NodeView;

use super::departed::Departed;
use super::formats::FleetFormat;

/// What the watch needs, for one session.
pub(super) struct DriftWatch {
    pub client: Ledger,
    pub group: LockPaths,
    pub me: NodeId,
    pub metrics: Arc<Metrics>,
    pub view: watch::Receiver<NodeView>,
    /// Told the members' formats when one joins or leaves.
    pub fleet: Arc<FleetFormat>,
    /// Told who left, and until when each was a member.
    pub departed: Arc<Departed>,
    pub stop: CancellationToken,
}

impl DriftWatch {
    /// Compares at the start, after every change below `members/` and every change of this
    /// node's lock status, while this node owns the lock (a member's rewrite that leaves its
    /// schedule's total as it was is read alone and compares nothing); reads the formats at the
    /// start and whenever a member joins or leaves. Ends with the session or `stop`.
    pub(super) fn spawn(mut self) {
        tokio::spawn(async move {
            let watcher = tokio::select! {
                () = self.stop.cancelled() => return,
                watcher = Follow::add(&self.client, &self.group.members) => watcher,
            };
            let mut watcher = match watcher {
                Ok(watcher) => watcher,
                Err(err) => {
                    tracing::warn!(error = %error_chain(&err), "cannot watch the members' schedules; drift is not checked this session");
                    return;
                }
            };
            let mut reported: Option<Vec<Drift>> = None;
            let mut formats_unread = false;
            // Since when changes may have gone unreported: a member missing from the next
            // reading was one until then at least, not until that reading.
            let mut unreported_since: Option<i64> = None;
            // Each member's schedule total at the last reading, while no change went unread
            // since: a member's rewrite that leaves its total as it was (its clock check, every
            // session timeout) then costs one read of that member, not of all.
            let mut totals: Option<Totals> = None;
            loop {
                // Any change compares again: the watch's first (read all) is the start, and a
                // disconnection ends with one too.
                let (joined_or_left, rewritten) = tokio::select! {
                    () = self.stop.cancelled() => return,
                    change = watcher.changed() => match change {
                        None => return,
                        Some(Change::Disconnected) => {
                            unreported_since.get_or_insert_with(now_ms);
                            totals = None;
                            continue;
                        }
                        Some(Change::ReadAll) => (true, None),
                        Some(Change::Node { kind: NodeChange::DataChanged, path }) => {
                            (false, self.member_of(&path))
                        }
                        Some(Change::Node { kind, .. }) => {
                            (matches!(kind, NodeChange::Created | NodeChange::Deleted), None)
                        }
                    },
                    changed = self.view.changed() => if changed.is_err() { return } else { (false, None) },
                };
                let owner = self.view.borrow().lock.may_fire;
                if !owner {
                    self.metrics.schedule_drift(false);
                    reported = None;
                }
                // A join whose read failed is read at the next change, whatever it is.
                formats_unread |= joined_or_left;
                if !owner && !formats_unread {
                    totals = None;
                    continue;
                }
                if !formats_unread
                    && let (Some(member), Some(seen)) = (&rewritten, &totals)
                    && self.total_unchanged(member, seen).await
                {
                    continue;
                }
                let changed_at = now_ms();
                let members = match inspect::member_data(&self.client, &self.group).await {
                    Ok(members) => members,
                    Err(err) => {
                        tracing::warn!(error = %error_chain(&err), "cannot read the members");
                        totals = None;
                        continue;
                    }
                };
                totals = Some(totals_of(&members));
                if formats_unread {
                    self.fleet.members_read(&members);
                    let until = unreported_since.take().unwrap_or(changed_at);
                    self.departed.read(&members, until, now_ms());
                    formats_unread = false;
                }
                if owner && let Some(drifts) = self.compare(&members) {
                    self.metrics.schedule_drift(!drifts.is_empty());
                    report(&mut reported, drifts);
                }
            }
        });
    }

    /// The member whose node is `path`; `None` for `members/` itself.
    fn member_of(&self, path: &str) -> Option<NodeId> {
        let name = path.strip_prefix(&self.group.members)?.strip_prefix('/')?;
        (!name.is_empty() && !name.contains('/')).then(|| NodeId::new(name.to_owned()))
    }

    /// `member`'s schedule total reads as `seen` has it: its rewrite changed nothing a compare
    /// looks at (the total stands for every job's fingerprint). A failed read says no.
    async fn total_unchanged(&self, member: &NodeId, seen: &Totals) -> bool {
        let Some(before) = seen.get(member) else {
            return false;
        };
        let Ok(Some(brief)) = inspect::member_brief(&self.client, &self.group, member).await else {
            return false;
        };
        brief.schedule == *before
    }

    /// Every live member's drift from this node's published schedule; `None` when ours is not
    /// among them. Each member's total is read first: the per-job fingerprints are parsed only
    /// for a member whose total differs: a join, a leave or a reload brings this compare.
    fn compare(&self, members: &[(NodeId, Option<Vec<u8>>)]) -> Option<Vec<Drift>> {
        let own_data = members
            .iter()
            .find(|(node, _)| *node == self.me)?
            .1
            .as_ref()?;
        let own_total = OwnerInfo::parse_brief(own_data)?.schedule?.total;
        let mut own = None;
        let mut drifts = Vec::new();
        for (node, data) in members.iter().filter(|(node, _)| *node != self.me) {
            let Some(data) = data else { continue };
            let brief = OwnerInfo::parse_brief(data);
            let agrees = brief
                .as_ref()
                .and_then(|brief| brief.schedule.as_ref())
                .is_some_and(|theirs| theirs.total == own_total);
            if agrees {
                continue;
            }
            let Ok(info) = OwnerInfo::parse(data) else {
                continue;
            };
            if own.is_none() {
                own = OwnerInfo::parse(own_data).ok()?.schedule;
            }
            let own = own.as_deref()?;
            drifts.extend(drift::compare(own, node, info.schedule.as_deref()));
        }
        Some(drifts)
    }
}

/// Each member's schedule total as last read (`None`: unreadable, or an older zkcron's).
type Totals = BTreeMap<NodeId, Option<ScheduleTotal>>;

fn totals_of(members: &[(NodeId, Option<Vec<u8>>)]) -> Totals {
    members
        .iter()
        .map(|(node, data)| {
            let brief = data.as_deref().and_then(OwnerInfo::parse_brief);
            (node.clone(), brief.and_then(|brief| brief.schedule))
        })
        .collect()
}

/// Logs a change of the drift seen, once.
fn report(reported: &mut Option<Vec<Drift>>, drifts: Vec<Drift>) {
    if reported.as_ref() == Some(&drifts) {
        return;
    }
    if drifts.is_empty() {
        if reported.as_ref().is_some_and(|before| !before.is_empty()) {
            tracing::info!("schedule drift gone: every member publishes the owner's schedule");
        }
    } else {
        let details: Vec<String> = drifts.iter().map(drift::describe).collect();
        tracing::warn!(
            members = details.join("; "),
            "schedule drift: these members would fire a different schedule after a takeover"
        );
    }
    *reported = Some(drifts);
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
