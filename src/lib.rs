//! zkcron: cron jobs for a fleet, coordinated by ZooKeeper; each tick claimed at most once and
//! every one recorded.
//!
//! Data flow (DESIGN.md "Data flow"):
//! ```text
//! schedule.toml ──► config ──► Schedule (jobs, cron, tz)
//! ZooKeeper ◄──► zk session ◄──► lock::driver ◄──► lock::machine (pure)
//!                                     │ one ordered stream: LockUpdate (session, event, status)
//!                                fire::driver ◄──► fire::machine (pure): ticks, lock changes,
//!                                     │            claim results, run ends ──► actions
//!                                     ├──► ledger (one fenced claim path, run records)
//!                                     ├──► runner (child process)
//!                                     └──► delivery (an HTTP request: a job whose target is a URL)
//! ```
//! `daemon` only wires these together.

pub mod audit;
pub mod calendar;
pub mod command;
pub mod config;
pub mod control;
pub mod daemon;
pub mod delayed;
pub mod delivery;
pub mod describe;
pub mod drift;
pub mod dsn;
pub mod ensemble;
pub mod ensemble_clock;
pub mod events;
pub mod fire;
pub mod formats;
pub mod groups;
pub mod heap;
pub mod http;
pub mod identity;
pub mod ids;
pub mod layout;
pub mod ledger;
pub mod lock;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod output_store;
pub mod reload;
pub mod report;
pub mod run;
pub mod runner;
pub mod schedule;
pub mod secret;
pub mod status;
pub mod tally;
pub mod telemetry;
pub mod view;
pub mod zk;

pub use ids::{FencingToken, JobName, NodeId, SessionId};
pub use lock::{LockEvent, LockMachine};
