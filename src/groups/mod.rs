//! Lock groups (issue 19): which node should own which group — a preference, never a proof.
//!
//! Owns: the balancer that weighs members and groups (`balance`, pure) and its driver against
//! ZooKeeper (`placement`: the live members, the yields it asks the lock for).
//! Must not: decide who fires — the lock and the fenced claim do (DESIGN.md "Groups").

pub mod balance;
pub mod placement;
