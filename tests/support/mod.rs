//! Test support shared by the integration tests (`use crate::support;` at the top of each test
//! file of tests/integration.rs).
//!
//! - [`zk_cluster`]: real ZooKeeper servers and ensembles, faults by PID, waits with stated bounds.
//! - [`postgres`]: real PostgreSQL servers, a database per test, faults by PID.
//! - [`proxy`]: a TCP proxy in front of a server, to partition one node from ZooKeeper.
//! - [`chaos`]: the chaos suite's cluster of nodes behind proxies, its faults and its report.
//! - [`invariants`]: what the chaos suite checks after each scenario, on a log in memory.

// Some helpers serve only the ignored tests, which a filtered build may leave out.
#![allow(dead_code, unused_imports)]

pub mod api_doc;
pub mod browser;
pub mod chaos;
pub mod daemon;
pub mod faked_clock;
pub mod http;
pub mod invariants;
pub mod io_faults;
pub mod netem;
pub mod node;
pub mod otlp;
pub mod postgres;
pub mod proxy;
pub mod receiver;
pub mod tls;
pub mod zk_cluster;

/// The name by which `--exact` selects the test `name` of the module whose `module_path!()` is
/// `module`: the module path without the crate's name (`runner::name` for tests/runner.rs), for a
/// test that re-runs this binary to run one of its tests in a process of its own.
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{name}"),
        None => name.to_owned(),
    }
}

/// Dead: gone (ESRCH) or a zombie. This sandbox's PID 1 never reaps orphans, so a killed
/// orphan stays a zombie here; it has exited and holds nothing but its pid.
pub fn is_dead(pid: nix::unistd::Pid) -> bool {
    match nix::sys::signal::kill(pid, None) {
        Err(nix::errno::Errno::ESRCH) => true,
        Ok(()) => {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // State is the first field after the command name in parentheses.
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        }
        Err(e) => panic!("kill({pid}, 0): {e}"),
    }
}

pub use zk_cluster::{
    HarnessError, Mode, NotReached, Within, ZkEnsemble, closed_port, expire_session, fault_lock,
    fault_tests_alone, heavy_fault_lock, shared_ensemble, try_wait_for, unique_chroot, wait_for,
    wait_until, within,
};
