//! The data a run is made of, shared by the config, the fire machine, the ledger, the runner and
//! the metrics: plain types, no I/O.
//!
//! Owns: what a run is (`spec`; an HTTP job's `target`), how it ended (`outcome`), how it is
//! recorded (`record`), claimed (`claim`) and told of when it fails (`notice`).
//! Must not: import anything above the identifiers and the layout: everything that decides or
//! performs a run imports from here, never the other way round.

mod chain;
mod claim;
mod key;
mod notice;
mod outcome;
mod record;
mod spec;
mod target;
mod trace;

pub use chain::{ChainMark, FoundMark};
pub use claim::{Claim, ClaimMode};
pub use key::{Due, RunKey};
pub use notice::{Notice, NoticeChannels, NoticeKind, Webhook};
pub use outcome::{OUTPUT_KEPT, OutputTail, RESPONSE_KEPT, RunOutcome, RunReport};
pub use record::{MISSED_BY_A_MEMBER, ParentRun, RecordError, RunRecord, RunStatus};
pub use spec::{ContractKey, JobSpec, Launcher, Program, RunAs, RunContext, SubmissionInput};
pub use target::{HttpTarget, HttpTls, HttpVersion, Resend};
pub use trace::{AttemptTrace, RunTrace, span_context_of, traceparent};
