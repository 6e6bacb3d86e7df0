//! Every integration test of zkcron, in one test binary: each file under `tests/` is a module of
//! it (`cargo test --test integration daemon::` runs tests/daemon.rs).
//!
//! One binary rather than one per file (Cargo's default) because:
//! - the support code and the tests are compiled and linked once, not once per file: most of the
//!   tests' build on 2 cores was that (docs/BENCHMARKS.md, "The tests' own time");
//! - every test that needs no fault shares one ZooKeeper ensemble ([`support::shared_ensemble`]),
//!   started once for the whole run instead of once per file;
//! - the tests of all files share one pool of test threads (16, `.cargo/config.toml`), so a file
//!   of a few long tests no longer holds the run while the other thread idles, and the fault
//!   tests of every file share one bound ([`support::fault_lock`]: three at a time).
//!
//! What must not be shared by tests of one process is not used by any: no test sets environment
//! variables, changes directory or installs signal handlers in this process; the few that need
//! a process of their own re-run this binary with `--exact` ([`support::test_name`]).

mod support;

mod audit;
mod backfill;
mod broadcast;
mod calendars;
mod catch_up;
mod chains;
mod chaos;
mod chaos_invariants;
mod client_commands;
mod clock_skew;
mod config_check;
mod config_reference;
mod console;
mod daemon;
mod delayed;
mod delayed_big;
mod delayed_fire;
mod drift;
mod events;
mod fire;
mod fixtures_capture;
mod fuzz;
mod groups;
mod http;
mod http_delivery;
mod idle;
mod jitter;
mod layering;
mod ledger;
mod limits;
mod lock;
mod metrics;
mod newer_formats;
mod notices;
mod pg_daemon;
mod pg_store;
mod pg_store_properties;
mod readme;
mod reschedule;
mod retries;
mod run_as;
mod run_output;
mod runner;
mod secure_zk;
mod steer;
mod stored_formats;
mod submission_properties;
mod submit_cli;
mod telemetry;
mod upgrade;
mod version;
mod zk_cluster;
mod zk_watch;
