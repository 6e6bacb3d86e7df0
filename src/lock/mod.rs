//! The singleton lock of a lock group: a pure state machine, its ZooKeeper data formats, and the
//! driver that runs it against a real session.
//!
//! Owns: deciding and proving who may fire jobs (DESIGN.md "The lock").
//! Must not: know about jobs, schedules or processes.

pub mod clock;
pub mod clock_schedule;
pub mod clock_watch;
pub mod driver;
pub mod machine;
pub mod members;
pub mod node;
pub mod take_back;

pub use machine::{Action, Input, LockEvent, LockMachine, LockState, LockStatus};
