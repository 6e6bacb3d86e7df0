//! Steering a lock group from outside (`zkcron pause`, `resume`, `release`, `trigger`; the HTTP
//! API): the znodes under `control/` (DESIGN.md "ZooKeeper layout") and what they hold.
//!
//! Owns: the pause and release-request formats (untrusted data: any client can write them) and
//! the checks a steering request passes before it is written (`client`); the reads and writes
//! on `control/` are the ledger's (`ledger::control`), and who asked is the audit trail's
//! actor (`audit::actor`).
//! Must not: decide what a pause or a release means: the fire machine holds a paused job's
//! starts, the lock machine hands the lock over.

pub mod backfill;
pub mod client;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{JobName, NodeId};

/// The longest pause reason kept; a longer one is cut (it is shown in status lines).
pub const MAX_REASON: usize = 512;
/// A release request older than this is stale (its asker has given up waiting) and ignored.
pub const RELEASE_REQUEST_TTL_MS: i64 = 60_000;

/// A job is paused: it starts nothing new until resumed. Its ticks are recorded `skipped`, its
/// submissions and triggers stay pending.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    /// Why, as the operator said it.
    #[serde(default)]
    pub reason: Option<String>,
    /// Who paused it (`user@host`, or the HTTP API's caller).
    pub by: String,
    pub since_unix_ms: i64,
}

/// The paused jobs of a lock group, as last read.
pub type Pauses = BTreeMap<JobName, Pause>;

/// The owner named here is asked to hand the lock over (for maintenance).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseRequest {
    /// The owner when the request was made: a later owner does not act on it.
    pub owner: NodeId,
    pub by: String,
    pub at_unix_ms: i64,
}

/// The most ticks one backfill asks for: its request, one znode, stays far below
/// `jute.maxbuffer` (each tick is at most 14 digits and a comma).
pub const MAX_BACKFILL_TICKS: usize = 10_000;

/// `zkcron backfill`: run these past ticks of `job` that have no record, in order, through the
/// one claim path (a tick run meanwhile is not run again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackfillRequest {
    pub job: JobName,
    /// Scheduled instants, Unix ms, ascending.
    pub ticks: Vec<i64>,
    pub by: String,
    pub at_unix_ms: i64,
    /// The runs make their children's runs (`after`); an older owner ignores it and makes none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub with_children: bool,
}

impl BackfillRequest {
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses a request's data (untrusted: any client can write it); its ticks come sorted,
    /// each once, at most [`MAX_BACKFILL_TICKS`].
    ///
    /// # Errors
    /// Not a backfill request.
    pub fn parse(data: &[u8]) -> Result<Self, FormatError> {
        let mut request: Self = serde_json::from_slice(data)?;
        request.ticks.sort_unstable();
        request.ticks.dedup();
        request.ticks.truncate(MAX_BACKFILL_TICKS);
        Ok(request)
    }
}

/// Why bytes under `control/` are not what they should be.
#[derive(Debug, thiserror::Error)]
#[error("not a zkcron control record")]
pub struct FormatError(#[from] serde_json::Error);

impl Pause {
    pub fn new(reason: Option<&str>, by: &str, since_unix_ms: i64) -> Self {
        Self {
            reason: reason.map(|r| r.chars().take(MAX_REASON).collect()),
            by: by.to_owned(),
            since_unix_ms,
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        // Strings and numbers always serialise.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses a pause znode's data (written by any client).
    ///
    /// # Errors
    /// Not a pause: log it with its path; the job counts as paused all the same (the node says
    /// an operator wanted it so).
    pub fn parse(data: &[u8]) -> Result<Self, FormatError> {
        Ok(serde_json::from_slice(data)?)
    }

    /// What the skipped records of a paused job's ticks say.
    pub fn skip_reason(&self) -> String {
        match &self.reason {
            Some(reason) => format!("paused by {}: {reason}", self.by),
            None => format!("paused by {}", self.by),
        }
    }
}

impl ReleaseRequest {
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// # Errors
    /// Not a release request: it is ignored (and removed by the next request).
    pub fn parse(data: &[u8]) -> Result<Self, FormatError> {
        Ok(serde_json::from_slice(data)?)
    }

    /// Whether `me`, the owner now, is to hand the lock over.
    pub fn asks(&self, me: &NodeId, now_unix_ms: i64) -> bool {
        &self.owner == me && now_unix_ms - self.at_unix_ms <= RELEASE_REQUEST_TTL_MS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_round_trips_and_its_reason_is_bounded() {
        let pause = Pause::new(Some("downstream broken"), "ops@h1", 1_700_000_000_000);
        assert_eq!(Pause::parse(&pause.to_bytes()).expect("parses"), pause);
        assert_eq!(pause.skip_reason(), "paused by ops@h1: downstream broken");
        let long = Pause::new(Some(&"é".repeat(MAX_REASON + 5)), "ops", 0);
        assert_eq!(long.reason.map(|r| r.chars().count()), Some(MAX_REASON));
        assert_eq!(Pause::new(None, "ops", 0).skip_reason(), "paused by ops");
        assert!(Pause::parse(b"").is_err());
        assert!(Pause::parse(b"{\"reason\":1}").is_err());
    }

    #[test]
    fn a_release_request_asks_only_the_owner_it_names_while_fresh() {
        let request = ReleaseRequest {
            owner: NodeId::new("10.0.0.5"),
            by: "ops@h1".into(),
            at_unix_ms: 1_000_000,
        };
        let parsed = ReleaseRequest::parse(&request.to_bytes()).expect("parses");
        assert!(parsed.asks(&NodeId::new("10.0.0.5"), 1_000_000 + RELEASE_REQUEST_TTL_MS));
        assert!(!parsed.asks(&NodeId::new("10.0.0.6"), 1_000_000));
        assert!(!parsed.asks(&NodeId::new("10.0.0.5"), 1_000_001 + RELEASE_REQUEST_TTL_MS));
    }
}
