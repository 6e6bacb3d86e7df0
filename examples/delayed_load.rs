//! Load for the delayed-submission benchmark (bench/delayed.sh): submits COUNT submissions of JOB
//! from one client, many requests out at once on one session, and prints the rate.
//!
//! ```text
//! cargo run --release --example delayed_load -- CONFIG JOB COUNT START_IN_MS SPREAD_MS [INFLIGHT] [PREFIX] [BATCH]
//! ```
//! Due times run evenly from now + START_IN_MS over SPREAD_MS; ids are PREFIX (default `b`)
//! followed by the number. BATCH 1 (the default) submits one by one, INFLIGHT requests out at
//! once; BATCH > 1 uses `submit_many` with that many per call, INFLIGHT calls out at once.
//! A call that fails (a server that did not answer in time, say) is sent again with the same
//! ids, which makes it idempotent, up to 5 times. Prints `submitted N in S s: R/s` and, when
//! there were any, how many calls were sent again.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
    let batch: u64 = rest.get(2).map_or(Ok(1), |n| n.parse())?;

    let config = zkcron::config::load(&PathBuf::from(config))?;
    let delayed = Arc::new(Delayed::connect(&config).await?);
    let job = JobName::new(job.as_str());
    let base = Utc::now().timestamp_millis() + start_in;
    let slots = Arc::new(Semaphore::new(inflight));
    let retries = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    let request = |i: u64| -> Result<SubmitRequest, Box<dyn std::error::Error>> {
        let offset =
            i64::try_from(u128::from(i) * u128::try_from(spread)? / u128::from(count.max(1)))?;
        Ok(SubmitRequest {
            traceparent: None,
            job: job.clone(),
            due: DateTime::from_timestamp_millis(base + offset).ok_or("due time out of range")?,
            id: Some(SubmissionId::parse(&format!("{prefix}{i}"))?),
            payload: Vec::new(),
        })
    };
    let mut i = 0;
    while i < count {
        let permit = Arc::clone(&slots).acquire_owned().await?;
        let requests = (i..(i + batch.max(1)).min(count))
            .map(&request)
            .collect::<Result<Vec<_>, _>>()?;
        i += requests.len() as u64;
        let (delayed, retries) = (Arc::clone(&delayed), Arc::clone(&retries));
        tasks.spawn(async move {
            let mut requests = requests;
            let mut attempt = 1;
            loop {
                let results = delayed.submit_many(requests.clone()).await;
                let failed: Vec<(SubmitRequest, _)> = requests
                    .into_iter()
                    .zip(results)
                    .filter_map(|(request, result)| result.err().map(|err| (request, err)))
                    .collect();
                let Some((_, last)) = failed.last() else {
                    break;
                };
                if attempt == 5 {
                    return Err(last.to_string());
                }
                eprintln!("retrying {} submissions: {last}", failed.len());
                retries.fetch_add(1, Ordering::Relaxed);
                requests = failed.into_iter().map(|(request, _)| request).collect();
                attempt += 1;
            }
            drop(permit);
            Ok::<(), String>(())
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
    let retried = retries.load(Ordering::Relaxed);
    if retried > 0 {
        println!("calls sent again after a failure: {retried}");
    }
    Ok(())
}
