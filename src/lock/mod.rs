//! The singleton lock of a lock group: a pure state machine and its ZooKeeper data formats.
//!
//! Owns: deciding and proving who may fire jobs (DESIGN.md "The lock").
//! Must not: know about jobs, schedules or processes.

pub mod machine;
pub mod node;

pub use machine::{Action, Input, LockEvent, LockMachine, LockState};
