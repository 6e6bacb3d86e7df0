//! Newtypes for the identifiers that travel between modules, so they cannot be swapped.
//!
//! Owns: `NodeId`, `SessionId`, `FencingToken`, `JobName`, their formatting, and the check that a
//! name is usable as a znode name.
//! Must not: know how they are stored or transported (that is `lock::node` and `zk`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The lock group of the jobs without `group`, as status, metrics, the balancer and
/// `release --group` call it; no `[[group]]` may take the name.
pub const DEFAULT_GROUP: &str = "default";

/// Identity of one zkcron process in its lock group (DESIGN.md "The lock": defaults to the host IP).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(String);

impl NodeId {
    /// Wraps an id; validation (non-empty, znode-name safe) is the config's job.
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    /// The id as it appears in znode names and logs.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// A ZooKeeper session id, as the server reports it in `Stat::ephemeral_owner`.
///
/// Zero is what ZooKeeper reports for a persistent node, so it never names a live session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(pub i64);

impl SessionId {
    /// `ephemeral_owner` of a persistent node.
    pub const PERSISTENT: SessionId = SessionId(0);
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The `epoch` znode's data version after an acquisition: grows by one with every acquisition in
/// the lock group, so a larger token always names a later owner (DESIGN.md "The lock").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FencingToken(pub i32);

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A job's name from the schedule: `[A-Za-z0-9_.-]+`, unique in a schedule (the config checks).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobName(String);

impl JobName {
    /// Wraps a name; validation is the config's job.
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    /// The name as it appears in znode names, logs and `ZKCRON_JOB`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// A name usable as one znode path segment.
///
/// # Errors
/// Says what is wrong with it.
pub fn validate_znode_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("must not be empty");
    }
    if name == "." || name == ".." || name.contains('/') || name.chars().any(char::is_control) {
        return Err(
            "must be usable as a znode name: no '/', no control characters, not '.' or '..'",
        );
    }
    Ok(())
}
