//! Reloading the schedule of a running daemon so that whoever asked learns the outcome
//! (issue 51): `zkcron reload`, which systemd's `ExecReload=` runs, asks the daemon over a local
//! socket and waits for "applied" (with what changed) or "refused" (with why); SIGHUP asks the
//! same without an answer.
//!
//! Owns: the request and its answer (`answer`), what changed between two schedules (`changes`),
//! the daemon's end of the socket (`listener`) and the asking end (`client`).
//! Must not: load or apply a schedule itself: the daemon's reloader does, for every way a reload
//! is asked.

mod answer;
pub mod changes;
pub mod client;
pub mod listener;

pub use answer::{RELOAD_FORMAT, ReloadAnswer, ReloadOutcome, ReloadRequest};
pub use changes::Changes;
