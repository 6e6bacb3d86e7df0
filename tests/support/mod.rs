//! Test support shared by the integration tests (`mod support;` at the top of each test file).
//!
//! - [`zk_cluster`]: real ZooKeeper servers and ensembles, faults by PID, waits with stated bounds.

// Each integration test is its own crate and uses a different part of the support code.
#![allow(dead_code, unused_imports)]

pub mod daemon;
pub mod node;
pub mod zk_cluster;

pub use zk_cluster::{
    HarnessError, Mode, NotReached, Within, ZkEnsemble, closed_port, expire_session, fault_lock,
    shared_ensemble, try_wait_for, unique_chroot, wait_for, wait_until, within,
};
