//! Load for the delayed-submission benchmark (bench/delayed.sh): submits COUNT submissions of JOB
//! from one client, many requests out at once on one session, and prints the rate.
//!
//! ```text
//! cargo run --release --example delayed_load -- CONFIG JOB COUNT START_IN_MS SPREAD_MS [INFLIGHT] [PREFIX]
//! ```
//! Due times run evenly from now + START_IN_MS over SPREAD_MS; ids are PREFIX (default `b`)
//! followed by the number. Prints `submitted N in S s: R/s`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use zkcron::JobName;
use zkcron::delayed::{Delayed, SubmissionId, SubmitRequest};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: delayed_load CONFIG JOB COUNT START_IN_MS SPREAD_MS [INFLIGHT] [PREFIX]";
    let [config, job, count, start_in, spread, rest @ ..] = &args[..] else {
        return Err(usage.into());
    };
    let count: u64 = count.parse()?;
    let start_in: i64 = start_in.parse()?;
    let spread: i64 = spread.parse()?;
    let inflight: usize = rest.first().map_or(Ok(256), |n| n.parse())?;
    let prefix = rest.get(1).map_or("b", String::as_str).to_owned();

    let config = zkcron::config::load(&PathBuf::from(config))?;
    let delayed = Arc::new(Delayed::connect(&config).await?);
    let job = JobName::new(job.as_str());
    let base = Utc::now().timestamp_millis() + start_in;
    let slots = Arc::new(Semaphore::new(inflight));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for i in 0..count {
        let permit = Arc::clone(&slots).acquire_owned().await?;
        let offset =
            i64::try_from(u128::from(i) * u128::try_from(spread)? / u128::from(count.max(1)))?;
        let request = SubmitRequest {
            job: job.clone(),
            due: DateTime::from_timestamp_millis(base + offset).ok_or("due time out of range")?,
            id: Some(SubmissionId::parse(&format!("{prefix}{i}"))?),
            payload: Vec::new(),
        };
        let delayed = Arc::clone(&delayed);
        tasks.spawn(async move {
            let result = delayed.submit(request).await;
            drop(permit);
            result
        });
        while let Some(done) = tasks.try_join_next() {
            done??;
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "submitted {count} in {seconds:.2} s: {:.0}/s",
        count as f64 / seconds
    );
    Ok(())
}
