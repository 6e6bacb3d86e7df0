//! Firing: the pure fire machine that decides whether, when and why a run starts, the queue of
//! next fire times it keeps, and the driver that performs its actions (DESIGN.md "Data flow").
//!
//! Owns: every decision about starting a run, and carrying those decisions out against the
//! ledger and the runner.
//! Must not: decide anything about the lock (that is `lock`), or let anything but the machine
//! decide about firing.

pub mod driver;
pub mod machine;
pub mod next;
mod queue;

pub use machine::{Action, FireMachine, FireReason, Input};
