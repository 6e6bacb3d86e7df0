//! Submits delayed work from a Rust program with `zkcron::delayed`, the way a service would:
//! connect with the fleet's schedule file, submit idempotently, look at it, and cancel it
//! through `zkcron::command`'s door, which records the cancel in the audit trail.
//!
//! ```text
//! cargo run --example submit -- /etc/zkcron/zkcron.toml close-order order-4711 '{"order":4711}'
//! ```
//! Submits JOB, due in 30 minutes, under ID with PAYLOAD, submits it again (a no-op), shows it,
//! and cancels it when run with `--cancel` as a fifth argument.

use std::path::PathBuf;

use chrono::{Duration, Utc};

use zkcron::JobName;
use zkcron::audit::Actor;
use zkcron::command::{Command, Door};
use zkcron::delayed::client::{SubmissionState, Submitted};
use zkcron::delayed::{SubmissionId, SubmitRequest};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [config, job, id, payload, rest @ ..] = &args[..] else {
        return Err("usage: submit CONFIG JOB ID PAYLOAD [--cancel]".into());
    };
    let config = zkcron::config::load(&PathBuf::from(config))?;
    let door = Door::connect(&config).await?;
    let delayed = door.delayed();

    // A fixed due time and an id make the submit safe to retry after a timeout or a crash.
    let request = SubmitRequest {
        traceparent: None,
        job: JobName::new(job.as_str()),
        due: Utc::now() + Duration::minutes(30),
        id: Some(SubmissionId::parse(id)?),
        payload: payload.as_bytes().to_vec(),
    };
    let first = delayed.submit(request.clone()).await?;
    let again = delayed.submit(request).await?;
    let noop = again.outcome == Submitted::AlreadyThere;
    println!(
        "submitted {} ({:?}); the same again changed nothing: {noop}",
        first.id, first.outcome
    );

    if let Some((submission, state)) = delayed.show(&first.id).await? {
        let pending = state == SubmissionState::Pending;
        println!(
            "{}: job {}, due {} ms, {} payload bytes, pending: {pending}",
            first.id,
            submission.job,
            submission.due_unix_ms,
            submission.payload.len()
        );
    }
    if rest.first().map(String::as_str) == Some("--cancel") {
        let cancel = Command::Cancel {
            id: first.id.clone(),
        };
        door.execute(cancel, &Actor::api()).await?;
        println!("cancelled {}", first.id);
    }
    Ok(())
}
