//! Which lock groups a node contends for, and which it hands over, so that ownership is
//! balanced over the live members and sticky (issue 19). The lock stays the only arbiter of who
//! owns a group; this decides only where each node stands: every eligible node may take a group
//! nobody holds, and an owner that is not a group's preferred owner hands it over — through the
//! release path, a handoff — once membership has settled, one group at a time.
//!
//! Owns: each group's preferred owner (rendezvous hashing of (group, node), at most ⌈G/N⌉
//! groups a node among the nodes whose tags the group requires), when membership counts as
//! settled, and the pace of moves.
//! Must not: read a clock or do I/O (the driver feeds members, owners and the time in).
//!
//! A group its owner is handing over (an operator's `zkcron release --group`, or a move of
//! this balancer's) is preferred elsewhere while the handover lasts, so that the handoff lands
//! on another node instead of waiting out the takeover delay for the yielding owner.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::ids::NodeId;

/// A live member as the balancer sees it: its id and the tags it carries (`[node] tags`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Member {
    pub node: NodeId,
    pub tags: BTreeSet<String>,
}

/// A lock group and the tags a node needs to own it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpec {
    pub name: String,
    pub requires: BTreeSet<String>,
}

impl GroupSpec {
    fn admits(&self, member: &Member) -> bool {
        self.requires.is_subset(&member.tags)
    }
}

/// The rendezvous score of `node` for `group`: the first 8 bytes of SHA-256 over
/// `group \n node`, so every node (and any other implementation) computes the same.
fn score(group: &str, node: &NodeId) -> u64 {
    // The default group hashed as "" before it had one name everywhere: kept, so that nodes of
    // either version prefer the same owner for it.
    let key = if group == crate::ids::DEFAULT_GROUP {
        ""
    } else {
        group
    };
    let text = format!("{key}\n{node}");
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest.as_ref()[..8]);
    u64::from_be_bytes(first)
}

/// Each group's preferred owner among `members`, given who owns each group now (`current`):
///
/// 1. a live owner that may own its group keeps it, up to ⌈G/N⌉ groups (those it scores
///    highest for);
/// 2. the other groups go by rendezvous score, the (group, node) pairs highest first, to nodes
///    with room under ⌈G/N⌉ that carry the tags the group requires;
/// 3. a group whose eligible nodes are all full goes to its best-scored eligible node anyway;
/// 4. a node below ⌊G/N⌋ takes, one at a time, the group it scores highest for from a node
///    above it.
///
/// So a join moves about the new node's share and a leave about the leaver's groups, not a
/// reshuffle; a group that no member may own has none.
pub fn preferred_owners(
    groups: &[GroupSpec],
    members: &[Member],
    current: &BTreeMap<String, Option<NodeId>>,
) -> BTreeMap<String, Option<NodeId>> {
    preferred_owners_avoiding(groups, members, current, &BTreeMap::new())
}

/// [`preferred_owners`], where each group in `avoid` is not given to the node it names while
/// another member may own it (a handover under way: the yielding owner is not its successor).
fn preferred_owners_avoiding(
    groups: &[GroupSpec],
    members: &[Member],
    current: &BTreeMap<String, Option<NodeId>>,
    avoid: &BTreeMap<String, NodeId>,
) -> BTreeMap<String, Option<NodeId>> {
    let eligible = |group: &GroupSpec, member: &Member| {
        group.admits(member)
            && match avoid.get(&group.name) {
                Some(leaving) if &member.node == leaving => !members
                    .iter()
                    .any(|other| &other.node != leaving && group.admits(other)),
                _ => true,
            }
    };
    let capacity = groups.len().div_ceil(members.len().max(1));
    let floor = groups.len() / members.len().max(1);
    let mut pairs: Vec<(u64, &GroupSpec, &Member)> = groups
        .iter()
        .flat_map(|group| {
            members
                .iter()
                .filter(move |member| eligible(group, member))
                .map(move |member| (score(&group.name, &member.node), group, member))
        })
        .collect();
    // Ties (of a 64-bit hash) broken by name, so every node sorts alike.
    pairs.sort_by(|a, b| (b.0, &b.1.name, &b.2.node).cmp(&(a.0, &a.1.name, &a.2.node)));
    let mut owners: BTreeMap<String, Option<NodeId>> = groups
        .iter()
        .map(|group| (group.name.clone(), None))
        .collect();
    let mut load: BTreeMap<NodeId, usize> = BTreeMap::new();
    let owns_now = |group: &GroupSpec, member: &Member| {
        current.get(&group.name).cloned().flatten().as_ref() == Some(&member.node)
    };
    let kept = pairs
        .iter()
        .filter(|(_, group, member)| owns_now(group, member));
    let free = pairs.iter();
    for (_, group, member) in kept.chain(free) {
        let taken = load.entry(member.node.clone()).or_default();
        let owner = owners.entry(group.name.clone()).or_default();
        if owner.is_none() && *taken < capacity {
            *owner = Some(member.node.clone());
            *taken += 1;
        }
    }
    for (_, group, member) in &pairs {
        let owner = owners.entry(group.name.clone()).or_default();
        if owner.is_none() {
            *owner = Some(member.node.clone());
            *load.entry(member.node.clone()).or_default() += 1;
        }
    }
    lift_to_floor(&pairs, floor, &mut owners, &mut load);
    owners
}

/// Step 4 of [`preferred_owners`]: nodes below `floor` take groups from nodes above it.
fn lift_to_floor(
    pairs: &[(u64, &GroupSpec, &Member)],
    floor: usize,
    owners: &mut BTreeMap<String, Option<NodeId>>,
    load: &mut BTreeMap<NodeId, usize>,
) {
    for _ in 0..pairs.len() {
        let above = |node: &NodeId, load: &BTreeMap<NodeId, usize>| {
            load.get(node).copied().unwrap_or(0) > floor
        };
        let steal = pairs.iter().find(|(_, group, member)| {
            load.get(&member.node).copied().unwrap_or(0) < floor
                && owners
                    .get(&group.name)
                    .cloned()
                    .flatten()
                    .is_some_and(|owner| above(&owner, load))
        });
        let Some((_, group, member)) = steal else {
            return;
        };
        if let Some(Some(from)) = owners.insert(group.name.clone(), Some(member.node.clone())) {
            *load.entry(from).or_default() -= 1;
        }
        *load.entry(member.node.clone()).or_default() += 1;
    }
}

/// What a node should do about the groups now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    /// The groups this node may contend for now (it is eligible and either preferred, or the
    /// group has had no owner for longer than the settle time).
    pub contend: BTreeSet<String>,
    /// A group this node owns and hands over now, to its preferred owner.
    pub hand_over: Option<String>,
    /// Groups no live member may own (their tags): reported, not silently idle.
    pub orphaned: Vec<String>,
    /// When to decide again even if nothing changes (settling ends, the spacing passes, an
    /// unowned group's wait ends).
    pub next_look: Option<Instant>,
}

/// One node's balancer: the membership it has seen, since when, and its last move.
#[derive(Debug)]
pub struct Balancer {
    me: NodeId,
    /// `[lock] rebalance_after`: membership unchanged this long counts as settled.
    settle: Duration,
    /// Between two handovers by this node.
    spacing: Duration,
    members: Vec<Member>,
    changed_at: Option<Instant>,
    last_move: Option<Instant>,
    unowned_since: BTreeMap<String, Instant>,
    /// Groups whose owner is handing them over: the node, and until when it is avoided.
    handing_over: BTreeMap<String, (NodeId, Instant)>,
    /// While membership is unsettled, how long a group must have had no owner before a node
    /// that is not its preferred owner contends for it too.
    grace: Duration,
}

impl Balancer {
    pub fn new(me: NodeId, settle: Duration, spacing: Duration) -> Self {
        Self {
            me,
            settle,
            spacing,
            members: Vec::new(),
            changed_at: None,
            last_move: None,
            unowned_since: BTreeMap::new(),
            handing_over: BTreeMap::new(),
            grace: Duration::ZERO,
        }
    }

    /// A node that is not a free group's preferred owner contends for it while membership is
    /// unsettled only once it has had no owner for `grace`. Given the takeover delay and a
    /// little more, the preferred survivor of a crashed owner takes each of its groups first,
    /// and the failover moves nothing else (without it, the survivors race for the groups and
    /// the balance then moves the surplus again).
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// `from` is handing `group` over (it marked its lock node releasing): another eligible
    /// member is preferred for it until someone else owns it, or for the settle time at most —
    /// the yielding owner itself stays out for its takeover delay, so nobody would take it.
    pub fn handing_over(&mut self, group: &str, from: NodeId, now: Instant) {
        self.handing_over
            .insert(group.to_owned(), (from, now + self.settle));
    }

    /// The live members now (ours included). A change of who is there, or of their tags,
    /// starts the settle time again: a member that flaps moves nothing.
    pub fn members(&mut self, mut members: Vec<Member>, now: Instant) {
        members.sort();
        members.dedup();
        if members != self.members {
            self.members = members;
            self.changed_at = Some(now);
        }
    }

    fn settled_at(&self) -> Option<Instant> {
        self.changed_at.map(|at| at + self.settle)
    }

    /// Decides from the groups and who owns each now (`None`: nobody).
    pub fn decide(
        &mut self,
        groups: &[GroupSpec],
        owners: &BTreeMap<String, Option<NodeId>>,
        now: Instant,
    ) -> Decision {
        self.handing_over.retain(|group, (from, until)| {
            now < *until
                && owners
                    .get(group)
                    .is_none_or(|owner| owner.as_ref().is_none_or(|owner| owner == from))
        });
        let avoid: BTreeMap<String, NodeId> = self
            .handing_over
            .iter()
            .map(|(group, (from, _))| (group.clone(), from.clone()))
            .collect();
        let preferred = preferred_owners_avoiding(groups, &self.members, owners, &avoid);
        let live: BTreeSet<&NodeId> = self.members.iter().map(|m| &m.node).collect();
        let me = self.members.iter().find(|m| m.node == self.me);
        let settled = self.settled_at().is_some_and(|at| now >= at);
        self.unowned_since
            .retain(|group, _| owners.get(group).is_some_and(Option::is_none));
        // Owners read in the middle of a move (a group between owners, handed over, or still
        // held by a member that is gone) are not the balance: a handover decided on them can
        // be undone by the next, and two nodes then hand a group back and forth, each seeing
        // the other as its better owner (seen on a join, issue 19).
        let in_flux = !self.handing_over.is_empty()
            || groups.iter().any(|group| {
                let placeable = preferred.get(&group.name).is_some_and(Option::is_some);
                match owners.get(&group.name).cloned().flatten() {
                    None => placeable,
                    Some(owner) => !live.contains(&owner),
                }
            });
        let mut decision = Decision::default();
        let mut looks = Vec::new();
        if !settled {
            looks.extend(self.settled_at());
        }
        for group in groups {
            let name = &group.name;
            let owner = owners.get(name).cloned().flatten();
            let favourite = preferred.get(name).cloned().flatten();
            if favourite.is_none() {
                decision.orphaned.push(name.clone());
                continue;
            }
            let Some(me) = me.filter(|me| group.admits(me)) else {
                continue;
            };
            let mine = favourite.as_ref() == Some(&me.node);
            let (waited_out, graced) = match owner {
                Some(_) => (false, false),
                None => {
                    let since = *self.unowned_since.entry(name.clone()).or_insert(now);
                    // Never before the grace either: a settle time shorter than the takeover
                    // delay would let every node race for a crashed owner's groups again.
                    let wait = self.settle.max(self.grace);
                    looks.push(since + wait);
                    if !settled {
                        looks.push(since + self.grace);
                    }
                    (now >= since + wait, now >= since + self.grace)
                }
            };
            if mine || waited_out || (owner.is_none() && !settled && graced) {
                decision.contend.insert(name.clone());
            }
            let handover_due = owner.as_ref() == Some(&self.me)
                && !mine
                && favourite.as_ref().is_some_and(|node| live.contains(node));
            if handover_due && settled && in_flux {
                // Nothing else may wake us once the move settles (no member comes or goes):
                // look again.
                tracing::debug!(group = %name, "handover due, but owners are moving; looking again");
                looks.push(now + self.spacing);
            }
            if handover_due && settled && !in_flux && decision.hand_over.is_none() {
                match self.last_move.map(|at| at + self.spacing) {
                    Some(at) if now < at => looks.push(at),
                    _ => {
                        decision.hand_over = Some(name.clone());
                        decision.contend.remove(name);
                        self.last_move = Some(now);
                        looks.push(now + self.spacing);
                    }
                }
            }
        }
        decision.next_look = looks.into_iter().filter(|at| *at > now).min();
        decision
    }
}

#[cfg(test)]
mod tests;
