//! A claimed run as the fire machine and the ledger share it: the record, where it is stored and
//! at which version, and the nodes that live and die with it.
//!
//! Owns: the data of a claim and how its record is written (create, or again at a version).
//! Must not: make the claim (that is `ledger`) or decide whether to (the fire machine).

use crate::ids::SessionId;
use crate::run::RunRecord;

/// A tick we claimed: its record and the record's znode version, for compare-and-set updates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub path: String,
    pub version: i32,
    pub record: RunRecord,
    /// The `running/<job>` guard this claim created, if any (it lives with the claiming session).
    pub guard: Option<String>,
    /// A submission's open-run marker (`delayed/open/<job>/...`), deleted with the final record.
    pub open: Option<String>,
    /// The session that made the claim: only it may delete the guard.
    pub session: SessionId,
    /// The record as we last sent it, whether or not its reply arrived: if the stored record is
    /// exactly this, a failed compare-and-set was our own write with a lost reply.
    pub sent: RunRecord,
    /// The jobs that run after this one (`after`): its final record leaves each a mark, in the
    /// same multi-op. Set by the fire machine on the final record only.
    pub children: Vec<crate::ids::JobName>,
    /// A submission's run that leaves marks: its payload, which the marks carry to the
    /// children's submissions. Set with `children`.
    pub payload: Option<std::sync::Arc<Vec<u8>>>,
}

impl Claim {
    /// What the run's final record deletes with it: the guard, only by the session that made
    /// the claim (no other session's guard is ever deleted), and a submission's open marker.
    pub fn final_deletes(&self, same_session: bool) -> impl Iterator<Item = &String> {
        self.guard
            .iter()
            .filter(move |_| same_session)
            .chain(self.open_to_close())
    }

    /// A submission's open marker, once the run is over: not while its record promises a retry,
    /// so that the next owner finds the run among the open ones and keeps the promise.
    pub fn open_to_close(&self) -> Option<&String> {
        self.open
            .as_ref()
            .filter(|_| self.record.retry_at_unix_ms.is_none())
    }
}

/// How a claim writes its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimMode {
    /// Create the tick's record: the first claim of a tick.
    Create,
    /// Overwrite the stored record at this version: the next attempt of a run (a retry, or the
    /// rerun of an interrupted run).
    Again { version: i32 },
}
