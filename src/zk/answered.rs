//! When the servers last answered a session: the one fact every request through the doorway
//! adds to (`door`), and that the lock's heartbeat reads (`Zk::last_answered`).
//!
//! Owns: that instant, shared by a session's clones.
//! Must not: send anything, or judge what a fault means.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// When the servers last showed they hear the session: the instant the latest-sent answered
/// request went out. Shared by a session's clones, so that every request any part of the node
/// sends proves the session alive, and the lock's heartbeat asks only when none did.
#[derive(Debug)]
pub(super) struct Answered {
    /// The doorway's making: the session's handshake was answered just before.
    made: Instant,
    /// Nanoseconds after `made`.
    sent_after_made: AtomicU64,
}

impl Answered {
    pub(super) fn new() -> Self {
        Self {
            made: Instant::now(),
            sent_after_made: AtomicU64::new(0),
        }
    }

    pub(super) fn note(&self, sent: Instant) {
        let nanos = u64::try_from(sent.saturating_duration_since(self.made).as_nanos());
        self.sent_after_made
            .fetch_max(nanos.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub(super) fn last(&self) -> Instant {
        self.made + Duration::from_nanos(self.sent_after_made.load(Ordering::Relaxed))
    }
}
