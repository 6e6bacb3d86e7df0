//! `[lock]`: which lock this node contends for, and how it takes over from a silent owner.
//!
//! Owns: the lock name and root (znode names), the takeover delay, the claim lead, the node id,
//! the clock offset a node may have, how long membership settles before groups move, and their
//! defaults.
//! Must not: touch the lock itself (`crate::lock` does); only checks that its names are znodes.

use std::time::Duration;

use super::schema::RawLock;
use super::validator::Validator;
use super::{LockConfig, NodeId};

const DEFAULT_TAKEOVER_DELAY: Duration = Duration::from_secs(10);
const DEFAULT_ROOT: &str = "/zkcron";
const DEFAULT_CLAIM_AHEAD: Duration = Duration::from_millis(250);
/// CockroachDB's default `--max-offset` is 500 ms; NTP keeps hosts within milliseconds. A second
/// is far from both, and far below what fires a tick early or late by a visible amount.
const DEFAULT_MAX_CLOCK_OFFSET: Duration = Duration::from_secs(1);
/// Below this, the round trip of the measuring write (half of it is its error) would decide.
const MIN_MAX_CLOCK_OFFSET: Duration = Duration::from_millis(100);
/// Long enough for a restarting node (a deploy) to come back before its groups move away,
/// short enough that a new node takes its share within a minute (issue 19).
const DEFAULT_REBALANCE_AFTER: Duration = Duration::from_secs(30);

impl Validator<'_> {
    pub(super) fn lock(&mut self, raw: RawLock) -> Option<LockConfig> {
        let name = raw.name.get_ref().clone();
        if let Err(reason) = crate::ids::validate_znode_name(&name) {
            self.problem(raw.name.span(), "lock.name", reason);
        }
        let root = match raw.root {
            Some(root) => {
                let value = root.get_ref().clone();
                let valid = value.starts_with('/')
                    && value.len() > 1
                    && !value.ends_with('/')
                    && value
                        .split('/')
                        .skip(1)
                        .all(|part| crate::ids::validate_znode_name(part).is_ok());
                if !valid {
                    self.problem(
                        root.span(),
                        "lock.root",
                        "expected an absolute znode path like \"/zkcron\"",
                    );
                }
                value
            }
            None => DEFAULT_ROOT.to_owned(),
        };
        let takeover_delay = self.duration(
            raw.takeover_delay,
            "lock.takeover_delay",
            DEFAULT_TAKEOVER_DELAY,
        );
        let node_id = raw.node_id.map(|id| {
            if let Err(reason) = crate::ids::validate_znode_name(id.get_ref()) {
                self.problem(id.span(), "lock.node_id", reason);
            }
            NodeId::new(id.into_inner())
        });
        let claim_ahead = self.duration(raw.claim_ahead, "lock.claim_ahead", DEFAULT_CLAIM_AHEAD);
        let max_clock_offset = self.max_clock_offset(raw.max_clock_offset);
        let rebalance_after = self.positive_duration(
            raw.rebalance_after,
            "lock.rebalance_after",
            DEFAULT_REBALANCE_AFTER,
        );
        Some(LockConfig {
            name,
            claim_ahead,
            root,
            takeover_delay,
            node_id,
            max_clock_offset,
            rebalance_after,
        })
    }

    /// `lock.max_clock_offset`: at least [`MIN_MAX_CLOCK_OFFSET`].
    fn max_clock_offset(&mut self, raw: Option<toml::Spanned<String>>) -> Duration {
        let span = raw.as_ref().map(toml::Spanned::span);
        let offset = self.duration(raw, "lock.max_clock_offset", DEFAULT_MAX_CLOCK_OFFSET);
        match span {
            Some(span) if offset < MIN_MAX_CLOCK_OFFSET => {
                self.problem(
                    span,
                    "lock.max_clock_offset",
                    "expected a duration of \"100ms\" or more",
                );
                DEFAULT_MAX_CLOCK_OFFSET
            }
            _ => offset,
        }
    }
}
