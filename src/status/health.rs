//! The fleet's health as a script reads it (issue 51): every lock group this schedule names has
//! an owner that fires, and, when asked, a given node is a live member. `zkcron status` exits
//! with the verdict's code and `GET /fleetz` answers it.
//!
//! Owns: the verdict, its problems in words, and the exit code of each.
//! Must not: read anything (`status::cluster` does, and hands over what it found as
//! [`GroupLock`]s) or print.

use serde::Serialize;

use crate::ids::NodeId;

/// `status`'s exit code when a lock group has no owner that fires. 1–3 are every command's.
pub const NO_OWNER: u8 = 4;
/// `status --member`'s exit code when that node is not a live member.
pub const NOT_A_MEMBER: u8 = 5;
/// `status`'s exit code when ZooKeeper cannot be reached.
pub const UNREACHABLE: u8 = 6;

/// The fleet's health.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Health {
    pub healthy: bool,
    /// What is wrong, a sentence each; empty when healthy.
    pub problems: Vec<String>,
    /// What `zkcron status` exits with: 0, [`NO_OWNER`], [`NOT_A_MEMBER`] (the first problem's).
    pub exit_code: u8,
}

/// What the verdict reads of one lock group.
#[derive(Debug, Clone, Copy)]
pub struct GroupLock<'a> {
    pub name: &'a str,
    /// Its lock's path, for a squatter's fix.
    pub path: &'a str,
    /// `held`, `none` or `squatter`.
    pub state: &'a str,
    /// The holder's node id and whether it is handing the lock over; `None` when its data is
    /// not zkcron's.
    pub owner: Option<(&'a NodeId, bool)>,
    /// Live members that may own it.
    pub eligible_members: usize,
}

/// Judges the groups: every one owned by a node that is not handing it over; and `member`, when
/// given, among `live_members`.
pub fn judge<'a>(
    groups: impl IntoIterator<Item = GroupLock<'a>>,
    live_members: &[&NodeId],
    member: Option<&NodeId>,
) -> Health {
    let mut problems = Vec::new();
    let mut exit_code = 0;
    for group in groups {
        let problem = match (group.state, group.owner) {
            ("held", Some((_, false))) => None,
            ("held", Some((owner, true))) => Some(format!(
                "group {}: its owner {owner} is handing it over",
                group.name
            )),
            ("held", None) => Some(format!(
                "group {}: the lock is held by a node whose data is not zkcron's ({})",
                group.name, group.path
            )),
            ("squatter", _) => Some(format!(
                "group {}: a persistent node squats the lock path {}; delete it",
                group.name, group.path
            )),
            _ if group.eligible_members == 0 => Some(format!(
                "group {}: no owner, and no live member may own it",
                group.name
            )),
            _ => Some(format!(
                "group {}: no owner ({} live member(s) may own it)",
                group.name, group.eligible_members
            )),
        };
        if let Some(problem) = problem {
            problems.push(problem);
            if exit_code == 0 {
                exit_code = NO_OWNER;
            }
        }
    }
    if let Some(member) = member {
        if !live_members.contains(&member) {
            problems.push(format!("node {member} is not a live member"));
            if exit_code == 0 {
                exit_code = NOT_A_MEMBER;
            }
        }
    }
    Health {
        healthy: problems.is_empty(),
        problems,
        exit_code,
    }
}

/// The verdict when ZooKeeper could not be read: `why`.
pub fn unreachable(why: String) -> Health {
    Health {
        healthy: false,
        problems: vec![why],
        exit_code: UNREACHABLE,
    }
}

#[cfg(test)]
mod tests;
