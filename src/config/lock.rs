//! `[lock]`: which lock this node contends for, and how it takes over from a silent owner.
//!
//! Owns: the lock name and root (znode names), the takeover delay, the claim lead, the node id,
//! and their defaults.
//! Must not: touch the lock itself (`crate::lock` does); only checks that its names are znodes.

use std::time::Duration;

use super::schema::RawLock;
use super::validator::Validator;
use super::{LockConfig, NodeId};

const DEFAULT_TAKEOVER_DELAY: Duration = Duration::from_secs(10);
const DEFAULT_ROOT: &str = "/zkcron";
const DEFAULT_CLAIM_AHEAD: Duration = Duration::from_millis(250);

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
        Some(LockConfig {
            name,
            claim_ahead,
            root,
            takeover_delay,
            node_id,
        })
    }
}
