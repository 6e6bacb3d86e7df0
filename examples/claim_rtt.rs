//! Measures the round trip of a tick claim — `check(epoch, token)` + create the run record, the
//! same multi-op `zkcron run` sends before every tick — against a running ensemble.
//!
//! ```text
//! cargo run --release --example claim_rtt -- 127.0.0.1:2181,127.0.0.1:2182/bench [COUNT]
//! ```
//! Prints count, p50, p90, p99 and max in milliseconds. It writes under `/zkcron-claim-rtt` in
//! the connect string's chroot and deletes what it wrote.

use std::time::{Duration, Instant};

use zookeeper_client::{Acls, Client, CreateMode};

use zkcron::ensemble::ZkSettings;
use zkcron::layout::LedgerPaths;
use zkcron::layout::LockPaths;
use zkcron::ledger::{self};
use zkcron::run::{ClaimMode, RunRecord};
use zkcron::zk;
use zkcron::{FencingToken, JobName, NodeId};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let connect = args.next().ok_or("usage: claim_rtt CONNECT [COUNT]")?;
    let count: usize = args.next().map_or(Ok(500), |n| n.parse())?;
    let client = zk::connect(&ZkSettings::open(connect, Duration::from_secs(10))).await?;
    let lock = LockPaths::new("/zkcron-claim-rtt", "bench");
    let paths = LedgerPaths::new(&lock);
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    client.mkdir(&lock.dir, &open).await?;
    if client.check_stat(&lock.epoch).await?.is_none() {
        client.create(&lock.epoch, b"", &open).await?;
    }
    let token = FencingToken(client.set_data(&lock.epoch, b"{}", None).await?.version);
    let job = JobName::new("bench");
    let node = NodeId::new("bench");
    let doorway = ledger::Ledger::new(zk::Zk::new(
        client.clone(),
        &Acls::anyone_all(),
        zk::REQUEST_BOUND,
    ));

    let mut samples = Vec::with_capacity(count);
    for i in 0..count {
        let tick = i64::try_from(i)? * 1000;
        let record = RunRecord::claimed(&job, tick, (&node, "127.0.0.1"), token, 0);
        let started = Instant::now();
        ledger::claim(&doorway, &paths, record, ClaimMode::Create, true).await?;
        samples.push(started.elapsed());
        // Release the guard as a run's end would, so the next claim is not refused.
        client.delete(&paths.running(&job), None).await?;
    }
    cleanup(&client, &paths, &job, &lock).await?;

    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    println!(
        "claims: {}  p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms  (the first claim of a job also creates its parents)",
        samples.len(),
        ms(at(0.5)),
        ms(at(0.9)),
        ms(at(0.99)),
        ms(samples[samples.len() - 1])
    );
    Ok(())
}

async fn cleanup(
    client: &Client,
    paths: &LedgerPaths,
    job: &JobName,
    lock: &LockPaths,
) -> Result<(), zookeeper_client::Error> {
    for child in client.list_children(&paths.job_runs(job)).await? {
        client
            .delete(&format!("{}/{child}", paths.job_runs(job)), None)
            .await?;
    }
    for path in [
        paths.job_runs(job),
        paths.runs.clone(),
        paths.running.clone(),
        lock.epoch.clone(),
        lock.dir.clone(),
    ] {
        client.delete(&path, None).await?;
    }
    Ok(())
}
