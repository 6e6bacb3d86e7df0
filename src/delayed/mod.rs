//! Delayed one-off jobs: submissions of declared jobs for a later time (docs/DELAYED.md).
//!
//! Owns: the submission format and bucket arithmetic (`submission`), and the library API that
//! programs use to submit, cancel, show and list submissions.
//! Must not: decide when anything fires (that is the fire machine) or make raw ZooKeeper calls
//! (that is `ledger::submissions`).

pub mod client;
pub mod due;
pub mod submission;

pub use client::{Delayed, DelayedError, Receipt, SubmitRequest};
pub use submission::{AfterRun, DueBucket, MAX_PAYLOAD, Shard, Submission, SubmissionId};
