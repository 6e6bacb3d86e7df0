//! Writes audit entries as operators' actions would (`zkcron::audit`), to measure what the trail
//! costs ZooKeeper (`bench/audit_cost.sh`); then, with `prune`, prunes them all as the owner
//! would once they are older than `[audit] keep`.
//!
//! ```text
//! cargo run --release --example audit_load -- 127.0.0.1:2181/bench write COUNT
//! cargo run --release --example audit_load -- 127.0.0.1:2181/bench prune
//! ```
//! `write` prints the round trip of each entry's create (p50, p99, max); `prune` prints how many
//! entries went, in how many requests, in how long. Entries go under `/zkcron/audit-bench`,
//! spread over the ten days before now.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use zkcron::audit::AuditEntry;
use zkcron::ensemble::ZkSettings;
use zkcron::layout::{AuditPaths, LockPaths};
use zkcron::ledger::audit as trail;

const DAY_MS: i64 = 24 * 3600 * 1000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: audit_load CONNECT (write COUNT | prune)";
    let connect = args.next().ok_or(usage)?;
    let what = args.next().ok_or(usage)?;
    let settings = ZkSettings::open(connect, Duration::from_secs(10));
    let client = zkcron::ledger::Ledger::connect_once(&settings, Duration::from_secs(10)).await?;
    let paths = AuditPaths::new(&LockPaths::new("/zkcron", "audit-bench"));
    let now = chrono::Utc::now().timestamp_millis();
    match what.as_str() {
        "write" => {
            let count: i64 = args.next().ok_or(usage)?.parse()?;
            let mut took = Vec::new();
            for i in 0..count {
                let entry = AuditEntry {
                    format: 1,
                    // Ten days of actions, oldest first.
                    at_unix_ms: now - 10 * DAY_MS + i * (10 * DAY_MS / count.max(1)),
                    action: "pause".into(),
                    job: Some(format!("nightly-report-{:03}", i % 100)),
                    args: BTreeMap::from([("reason".into(), "database migration".into())]),
                    by: "alice@ops-bastion-1".into(),
                    from: "cli".into(),
                    who: zkcron::audit::Who::default(),
                    result: "ok".into(),
                };
                let started = Instant::now();
                trail::record(&client, &paths, &entry).await;
                took.push(started.elapsed().as_secs_f64() * 1000.0);
            }
            took.sort_by(f64::total_cmp);
            let at = |q: f64| took[((took.len() as f64 - 1.0) * q).round() as usize];
            println!(
                "wrote {count} entries: create p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
                at(0.5),
                at(0.99),
                at(1.0)
            );
        }
        "prune" => {
            let started = Instant::now();
            let pruned = trail::prune(
                &client,
                &paths,
                Duration::from_secs(3600),
                now + 11 * DAY_MS,
            )
            .await?;
            println!(
                "pruned {pruned} entries in {:.2} s: {} write ops in {} transactions",
                started.elapsed().as_secs_f64(),
                tallied("zkcron_zk_write_ops_total")?,
                tallied("zkcron_zk_transactions_total")?
            );
        }
        other => return Err(format!("{other}: {usage}").into()),
    }
    Ok(())
}

/// The prune writes this process counted (`zkcron::tally`), as its metrics say them.
fn tallied(metric: &str) -> Result<u64, Box<dyn std::error::Error>> {
    let mut registry = prometheus_client::registry::Registry::default();
    zkcron::tally::register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    let line = format!("{metric}{{kind=\"prune\"}} ");
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(line.as_str()))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0))
}
