//! `[[group]]`, `[node]` and a job's `group`: which lock group a job's ticks and submissions
//! belong to, and which nodes may own each group (issue 19).
//!
//! Owns: a group's name (a znode name, unique) and the tags it requires, this node's tags, and
//! resolving the group a job names to a declared one.
//! Must not: decide who owns a group (`groups::balance` prefers, the lock decides).

use std::collections::BTreeSet;

use toml::Spanned;

use super::error::JobContext;
use super::schema::{RawGroup, RawNode};
use super::validator::Validator;
use super::{GroupConfig, NodeConfig};

/// More groups than this is a lock and a session per group on every node for little gain: a
/// group is a unit of failover and placement, not of work (a job is that).
const MAX_GROUPS: usize = 256;

impl Validator<'_> {
    /// Every `[[group]]`, in file order; problems recorded, bad ones left out.
    pub(super) fn declared_groups(&mut self, raw: Vec<Spanned<RawGroup>>) -> Vec<GroupConfig> {
        let mut groups: Vec<GroupConfig> = Vec::new();
        for group in raw {
            let span = group.span();
            let group = group.into_inner();
            let name = group.name.get_ref().clone();
            let context = format!("group {name:?}");
            if let Err(reason) = crate::ids::validate_znode_name(&name) {
                self.problem(group.name.span(), format!("{context}: name"), reason);
                continue;
            }
            if name == crate::ids::DEFAULT_GROUP {
                self.problem(
                    group.name.span(),
                    format!("{context}: name"),
                    "\"default\" is the group of the jobs without `group`: choose another name",
                );
                continue;
            }
            if groups.iter().any(|known| known.name == name) {
                self.problem(group.name.span(), context, "duplicate group name");
                continue;
            }
            if groups.len() == MAX_GROUPS {
                self.problem(span, context, format!("at most {MAX_GROUPS} groups"));
                continue;
            }
            let requires = self.tags(group.requires, &format!("{context}: requires"));
            groups.push(GroupConfig { name, requires });
        }
        groups
    }

    /// `[node]`: this node's tags.
    pub(super) fn node(&mut self, raw: Option<RawNode>) -> NodeConfig {
        let tags = raw.and_then(|node| node.tags);
        NodeConfig {
            tags: self.tags(tags, "node.tags"),
        }
    }

    /// A list of tags: each a znode-safe word, once.
    pub(super) fn tags(
        &mut self,
        raw: Option<Spanned<Vec<Spanned<String>>>>,
        context: &str,
    ) -> BTreeSet<String> {
        let mut tags = BTreeSet::new();
        for tag in raw.map(Spanned::into_inner).unwrap_or_default() {
            if let Err(reason) = crate::ids::validate_znode_name(tag.get_ref()) {
                self.problem(tag.span(), context, reason);
            } else if !tags.insert(tag.get_ref().clone()) {
                self.problem(tag.span(), context, "named twice");
            }
        }
        tags
    }

    /// A job's `group`: a declared `[[group]]`; `None` is the default group.
    pub(super) fn job_group(
        &mut self,
        raw: Option<Spanned<String>>,
        job: JobContext<'_>,
    ) -> Option<String> {
        let raw = raw?;
        if self.groups.iter().any(|g| g.name == *raw.get_ref()) {
            return Some(raw.into_inner());
        }
        let declared: Vec<&str> = self.groups.iter().map(|g| g.name.as_str()).collect();
        let message = match declared.as_slice() {
            [] => "no [[group]] is declared (jobs without `group` are in the default group)"
                .to_owned(),
            _ => format!("expected a declared [[group]]: {}", declared.join(", ")),
        };
        self.problem(raw.span(), job.key("group"), message);
        None
    }
}
