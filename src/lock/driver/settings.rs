//! What a lock driver is given: who this node is, how its lock behaves and which part it plays
//! (member or named group), and where it says when the servers last answered.
//!
//! Owns: `LockSettings`, `LockRole` and `Heard`, the values the driver, its session and its
//! requests all read.
//! Must not: talk to ZooKeeper or run anything; the driver (`lock::driver`) does.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use crate::layout::LockPaths;
use crate::ledger::Ledger;
use crate::ledger::postgres::PgStore;
use crate::lock::clock_watch::ClockSettings;
use crate::lock::node::OwnerInfo;
use crate::zk::Zk;

/// Who we are and how the lock behaves.
#[derive(Debug, Clone)]
pub struct LockSettings {
    pub paths: LockPaths,
    /// What we write into the lock and member nodes (`since_unix_ms` is set per acquisition).
    pub me: OwnerInfo,
    pub takeover_delay: Duration,
    /// Drawn once by the caller, up to a small fraction of the delay.
    pub jitter: Duration,
    /// Written as servers answer, read by status (the HTTP API's lease).
    pub heard: Arc<Heard>,
    /// How this node's clock is checked against the fleet's.
    pub clock: ClockSettings,
    /// Which part this lock plays on the node (issue 19).
    pub role: LockRole,
    /// Where the delayed queue is kept, when not in ZooKeeper: every session's ledger reaches
    /// it.
    pub delayed_store: Option<Arc<PgStore>>,
}

impl LockSettings {
    /// The ledger on a session's `zk`, as this lock's holders reach it.
    pub(super) fn ledger_on(&self, zk: Zk) -> Ledger {
        let ledger = Ledger::new(zk);
        match &self.delayed_store {
            Some(store) => ledger.with_delayed_store(Arc::clone(store)),
            None => ledger,
        }
    }
}

/// What the member lock's clock check judged, which a named group's lock follows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemberVerdict {
    /// The node's clock is off the other members'.
    pub skewed: bool,
    /// A live member reads the delayed store where this node cannot
    /// (`lock::node::kept_out_by_store`).
    pub store_kept_out: bool,
}

/// The default group's lock registers the node as a member and checks its clock; a named
/// group's lock only contends, where the balancer places it, and follows that clock verdict.
#[derive(Debug, Clone)]
pub enum LockRole {
    /// The node's one lock without groups, or the default group's among them. `placed`: the
    /// balancer decides whether it contends (it waits for the first word).
    Member {
        placed: bool,
        /// Where the clock verdict goes for the named groups' locks.
        verdict: Arc<tokio::sync::watch::Sender<MemberVerdict>>,
    },
    /// A named group's lock: placed by the balancer; skewed while the member's clock is, kept
    /// out while the member is for its delayed store.
    Group {
        verdict: tokio::sync::watch::Receiver<MemberVerdict>,
    },
}

impl LockRole {
    /// The lock of a node without groups: a member, contending as before groups existed.
    pub fn alone() -> Self {
        Self::Member {
            placed: false,
            verdict: Arc::new(tokio::sync::watch::Sender::new(MemberVerdict::default())),
        }
    }

    /// Whether the balancer decides if this lock contends.
    pub(super) fn placed(&self) -> bool {
        match self {
            Self::Member { placed, .. } => *placed,
            Self::Group { .. } => true,
        }
    }
}

/// When a ZooKeeper server last answered this node (wall clock), and the session's timeout:
/// ownership is provable until the sum, which status shows as the owner's lease.
#[derive(Debug, Default)]
pub struct Heard {
    unix_ms: AtomicI64,
    timeout_ms: AtomicI64,
}

impl Heard {
    /// `(last heard, session timeout)` in ms; `None` before the first session.
    pub fn lease(&self) -> Option<(i64, i64)> {
        let timeout = self.timeout_ms.load(Ordering::Relaxed);
        (timeout > 0).then(|| (self.unix_ms.load(Ordering::Relaxed), timeout))
    }

    /// A server answered a request sent at `at`.
    pub(super) fn heard_at(&self, at: std::time::SystemTime) {
        let ms = at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        self.unix_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// The current session's timeout, which the lease adds to the last answer.
    pub(super) fn set_timeout(&self, timeout: Duration) {
        self.timeout_ms.store(
            i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
    }
}
