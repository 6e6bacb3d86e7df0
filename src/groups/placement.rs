//! Runs the groups' balancer (`groups::balance`) against ZooKeeper (issue 19): reads the live
//! members with their tags and who owns each group, tells each group's lock driver whether this
//! node contends for it, and asks this node's own lock of a group it should give up to hand it
//! over — through the release request an operator would write, so a move is the handoff that
//! exists (claims withdrawn at a tick boundary, the preferred peer contending at once).
//!
//! Owns: the watches on `members/` and on every group's lock, the reads they trigger, the
//! placement last sent to each lock, and the log line about a group no live member may own.
//! Must not: decide (the balancer does) or touch a lock node: the lock drivers do, and the lock
//! stays the only arbiter of who owns.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::control::ReleaseRequest;
use crate::groups::balance::{Balancer, GroupSpec, Member};
use crate::ids::NodeId;
use crate::layout::{ControlPaths, LockPaths};
use crate::ledger::Ledger;
use crate::ledger::control as store;
use crate::ledger::inspect::{self, Owner};
use crate::ledger::watch::{Change, Follow, NodeChange};
use crate::lock::driver::LockCommand;
use crate::report::error_chain;

/// A read that failed is tried again after this long.
const READ_RETRY: Duration = Duration::from_secs(1);
/// Events that come together (a node's locks released at its stop) are read once.
const GATHER: Duration = Duration::from_millis(50);

/// One group as placed: its lock's paths, what it requires, and its lock driver.
#[derive(Debug)]
pub struct PlacedGroup {
    /// The balancer's name: [`DEFAULT_GROUP`](crate::ids::DEFAULT_GROUP) or the `[[group]]` name.
    pub spec: GroupSpec,
    pub lock: LockPaths,
    pub control: ControlPaths,
    pub commands: mpsc::UnboundedSender<LockCommand>,
}

/// What the placement driver needs.
#[derive(Debug)]
pub struct Placement {
    pub me: NodeId,
    /// The lock group's paths (its `members/`, the default group's lock, `groups/`).
    pub base: LockPaths,
    pub groups: Vec<PlacedGroup>,
    /// `[lock] rebalance_after`.
    pub settle: Duration,
    /// `[lock] takeover_delay`: a crashed owner's groups go to their preferred survivors first.
    pub takeover_delay: Duration,
    /// Where a group that no live member may own is reported (`zkcron_group_unplaceable`).
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
}

/// Between two handovers by one node: moves are spaced so that each handoff is done (the
/// successor firing) before the next starts; a tenth of the settle time, at least a second.
fn spacing(settle: Duration) -> Duration {
    (settle / 10).max(Duration::from_secs(1))
}

impl Placement {
    /// Places the groups until `shutdown`, on whatever session `sessions` carries (the default
    /// group's: one session fewer per node, and its member node is the one the others see).
    pub async fn run(
        self,
        mut sessions: watch::Receiver<Option<Ledger>>,
        shutdown: CancellationToken,
    ) {
        let spacing = spacing(self.settle);
        let mut balancer = Balancer::new(self.me.clone(), self.settle, spacing)
            .with_grace(self.takeover_delay + spacing);
        let mut sent: BTreeMap<String, bool> = BTreeMap::new();
        let mut orphans_said: Vec<String> = Vec::new();
        loop {
            let client = sessions.borrow_and_update().clone();
            let Some(client) = client else {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    changed = sessions.changed() => if changed.is_err() { return },
                }
                continue;
            };
            let session = Session {
                placement: &self,
                client,
                balancer: &mut balancer,
                sent: &mut sent,
                orphans_said: &mut orphans_said,
                owners: BTreeMap::new(),
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = session.run() => {}
                changed = sessions.changed() => if changed.is_err() { return },
            }
        }
    }
}

/// The placement's work on one session.
struct Session<'a> {
    placement: &'a Placement,
    client: Ledger,
    balancer: &'a mut Balancer,
    sent: &'a mut BTreeMap<String, bool>,
    orphans_said: &'a mut Vec<String>,
    /// Each group's owner at the last reading: whose node a "marked releasing" event is.
    owners: BTreeMap<String, Option<NodeId>>,
}

impl Session<'_> {
    /// Reads and decides after every change of membership or ownership, and when the balancer
    /// asks to look again; ends when the session does (or cannot be watched).
    async fn run(self) {
        let Some(mut watches) = self.watch().await else {
            return;
        };
        let mut this = self;
        loop {
            let next_look = match this.look().await {
                Some(at) => at,
                None => Some(Instant::now() + READ_RETRY),
            };
            let sleep = async {
                match next_look {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = sleep => {}
                changed = watches.changed() => {
                    match changed {
                        Changed::Ended => return,
                        Changed::Marked(lock) => this.marked(&lock),
                        Changed::Membership => {}
                    }
                    // A stop releases a node's groups one after another: read them once.
                    tokio::time::sleep(GATHER).await;
                }
            }
        }
    }

    /// The lock node at `lock` was marked releasing: its owner at the last reading is handing
    /// the group over. Told to the balancer here, not only when a reading sees the mark, since
    /// the node is usually deleted before the reading that the event triggers.
    fn marked(&mut self, lock: &str) {
        let Some(group) = self.placement.groups.iter().find(|g| g.lock.lock == lock) else {
            return;
        };
        if let Some(Some(owner)) = self.owners.get(&group.spec.name) {
            self.balancer
                .handing_over(&group.spec.name, owner.clone(), Instant::now());
        }
    }

    /// Persistent recursive watches on the members and on every lock node.
    async fn watch(&self) -> Option<Watches> {
        let base = &self.placement.base;
        let groups_dir = format!("{}/groups", base.dir);
        let watch = |path: String| {
            let client = self.client.clone();
            async move {
                match Follow::add(&client, &path).await {
                    // `run` looks before it first waits.
                    Ok(watch) => Ok(watch.read_all_done()),
                    Err(err) => {
                        tracing::warn!(error = %error_chain(&err), "cannot watch for the groups' balance; trying again");
                        Err(())
                    }
                }
            }
        };
        let watched = async {
            Ok::<_, ()>(Watches {
                members: watch(base.members.clone()).await?,
                default_lock: watch(base.lock.clone()).await?,
                groups: watch(groups_dir).await?,
                members_prefix: format!("{}/", base.members),
            })
        };
        match watched.await {
            Ok(watches) => Some(watches),
            Err(()) => {
                tokio::time::sleep(READ_RETRY).await;
                None
            }
        }
    }

    /// One reading and decision; `Some(next look)`, or `None` when the reading failed.
    async fn look(&mut self) -> Option<Option<Instant>> {
        let members = match inspect::members(&self.client, &self.placement.base).await {
            Ok(members) => members,
            Err(err) => {
                tracing::warn!(error = %error_chain(&err), "cannot read the members for the groups' balance");
                return None;
            }
        };
        let members: Vec<Member> = members
            .into_iter()
            .map(|member| Member {
                tags: member.info.map(|info| info.tags).unwrap_or_default(),
                node: member.node_id,
            })
            .collect();
        let mut owners = BTreeMap::new();
        let now = Instant::now();
        for group in &self.placement.groups {
            let owner = match inspect::owner(&self.client, &group.lock).await {
                Ok(Owner::Held {
                    info: Some(info), ..
                }) if info.releasing => {
                    self.balancer
                        .handing_over(&group.spec.name, info.node_id, now);
                    None
                }
                Ok(Owner::Held {
                    info: Some(info), ..
                }) => Some(info.node_id),
                Ok(_) => None,
                Err(err) => {
                    tracing::warn!(error = %error_chain(&err), "cannot read a group's owner for the balance");
                    return None;
                }
            };
            owners.insert(group.spec.name.clone(), owner);
        }
        let specs: Vec<GroupSpec> = self
            .placement
            .groups
            .iter()
            .map(|g| g.spec.clone())
            .collect();
        self.balancer.members(members, now);
        let decision = self.balancer.decide(&specs, &owners, now);
        self.owners.clone_from(&owners);
        for group in &self.placement.groups {
            let contend = decision.contend.contains(&group.spec.name);
            if self.sent.insert(group.spec.name.clone(), contend) != Some(contend) {
                let _ = group.commands.send(LockCommand::Placement { contend });
            }
        }
        if let Some(name) = &decision.hand_over {
            self.hand_over(name).await;
        }
        for group in &self.placement.groups {
            let name = &group.spec.name;
            self.placement
                .metrics
                .group_unplaceable(name.as_str(), decision.orphaned.contains(name));
        }
        if decision.orphaned != *self.orphans_said {
            if !decision.orphaned.is_empty() {
                let names: Vec<&str> = decision.orphaned.iter().map(String::as_str).collect();
                tracing::warn!(
                    groups = names.join(", "),
                    "no live member carries the tags these groups require: their jobs do not fire"
                );
            }
            self.orphans_said.clone_from(&decision.orphaned);
        }
        Some(decision.next_look)
    }

    /// Asks this node's own lock of `name` to hand the group over.
    async fn hand_over(&self, name: &str) {
        let Some(group) = self.placement.groups.iter().find(|g| g.spec.name == name) else {
            return;
        };
        tracing::info!(
            group = name,
            "handing the group over to its preferred owner"
        );
        let request = ReleaseRequest {
            owner: self.placement.me.clone(),
            by: "zkcron balance".to_owned(),
            at_unix_ms: chrono::Utc::now().timestamp_millis(),
        };
        if let Err(err) = store::request_release(&self.client, &group.control, &request).await {
            tracing::warn!(group = name, error = %error_chain(&err), "cannot ask for the group's handover");
        }
    }
}

/// The watches, and which of their events can change a decision.
struct Watches {
    members: Follow,
    default_lock: Follow,
    groups: Follow,
    members_prefix: String,
}

/// What a watch event means for the balance.
enum Changed {
    /// The session ended.
    Ended,
    /// A member came or went, or a lock node was created or deleted.
    Membership,
    /// The lock node at this path was marked releasing: its owner is handing it over.
    Marked(String),
}

impl Watches {
    /// Waits for an event that matters: a member that comes or goes, a lock node created,
    /// changed (marked releasing) or deleted.
    async fn changed(&mut self) -> Changed {
        loop {
            let change = tokio::select! {
                change = self.members.changed() => change,
                change = self.default_lock.changed() => change,
                change = self.groups.changed() => change,
            };
            let (path, kind) = match change {
                None => return Changed::Ended,
                // After a disconnection: a lock or member may have come or gone unreported.
                Some(Change::ReadAll) => return Changed::Membership,
                Some(Change::Disconnected) => continue,
                Some(Change::Node { path, kind }) => (path, kind),
            };
            let member = path.starts_with(&self.members_prefix)
                && matches!(kind, NodeChange::Created | NodeChange::Deleted);
            let lock = path.ends_with("/lock");
            // Only a graceful release rewrites a lock node's data (`lock::driver`).
            if lock && kind == NodeChange::DataChanged {
                return Changed::Marked(path);
            }
            if member || lock {
                return Changed::Membership;
            }
        }
    }
}
