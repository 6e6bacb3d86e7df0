//! zkcron: cron jobs that fire exactly once across a fleet, coordinated by ZooKeeper.
//!
//! Data flow (DESIGN.md "Data flow"):
//! ZooKeeper ◄──► [`zk`] session ◄──► `lock::driver` ◄──► [`lock::machine`] (pure) ──► [`LockEvent`]s.

pub mod ids;
pub mod lock;
pub mod report;
pub mod zk;

pub use ids::{FencingToken, JobName, NodeId, SessionId};
pub use lock::{LockEvent, LockMachine};
