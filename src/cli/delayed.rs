//! `zkcron submit` and `zkcron delayed list|show|cancel|reschedule|retry|migrate`: arguments and human
//! output; the reads over the `zkcron::delayed` library API, the actions through
//! `zkcron::command`'s door (`super::steer::act`).

use std::io::Read;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use clap::{Args, Subcommand};

use super::document::print_document;
use super::error::{CliError, UsageError, print_lines};
use super::steer::{act, mismatched};
use zkcron::JobName;
use zkcron::command::{Command, Door, Outcome};
use zkcron::config::Config;
use zkcron::delayed::client::{Pending, Rescheduled, SubmissionState, Submitted};
use zkcron::delayed::due;
use zkcron::delayed::{Delayed, MAX_PAYLOAD, Submission, SubmissionId, SubmitRequest};
use zkcron::run::{RunRecord, RunStatus};

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("when").required(true).args(["at", "in_"]))]
#[command(group = clap::ArgGroup::new("payload_source").args(["payload", "payload_file", "payload_stdin"]))]
pub struct SubmitArgs {
    /// The declared job to run.
    job: String,
    #[command(flatten)]
    when: When,
    /// Makes the submit idempotent: the same request under the same id again changes nothing.
    /// Letters, digits, '_', '.', '-'; at most 64. [default: a generated id]
    #[arg(long)]
    id: Option<String>,
    /// The payload the run reads on stdin, as text.
    #[arg(long)]
    payload: Option<String>,
    /// The payload, read from this file; `-` reads standard input.
    #[arg(long, value_name = "FILE")]
    payload_file: Option<PathBuf>,
    /// The payload, read from standard input (the same as --payload-file -).
    #[arg(long)]
    payload_stdin: bool,
    /// The submitter's trace context (W3C), which the run's span links to; a job that submits
    /// passes on its own (`TRACEPARENT`, which zkcron gives it with `[telemetry]`).
    #[arg(long, env = "TRACEPARENT", value_name = "00-TRACE-SPAN-FLAGS")]
    traceparent: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum DelayedCommand {
    /// Pending submissions in due order (due times in each job's zone), then recent outcomes.
    List {
        /// Only this job's submissions.
        #[arg(long)]
        job: Option<String>,
        /// How many pending submissions, and how many recent outcomes, at most.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// One JSON document instead of tables: `{"format": 1, "job", "pending": […],
        /// "recent": [record, …]}`, or with --failed `{"format": 1, "job", "failed": […]}`.
        #[arg(long)]
        json: bool,
        /// Only the dead letters: submissions whose run ended failed, timed_out or missed with
        /// no retry left (`zkcron delayed retry` submits one again).
        #[arg(long)]
        failed: bool,
    },
    /// One submission: its job, due time, payload size and where it is in its life.
    Show {
        /// The submission's id.
        id: String,
        /// One JSON document instead of text (docs/API.md).
        #[arg(long)]
        json: bool,
    },
    /// Cancel a pending submission; refused, with the reason, once it has started.
    Cancel {
        /// The submission's id.
        id: String,
    },
    /// Move a pending submission to another due time; refused, with the reason, once it was
    /// claimed or cancelled. The same move again changes nothing.
    #[command(group = clap::ArgGroup::new("when").required(true).args(["at", "in_"]))]
    Reschedule {
        /// The submission's id.
        id: String,
        #[command(flatten)]
        when: When,
    },
    /// Submit a failed submission again (a dead letter: failed, timed_out or missed), with its
    /// payload, under a new id that names the old one (retry_of). Prints the new id.
    Retry {
        /// The failed submission's id.
        id: String,
        #[command(flatten)]
        when: When,
        /// The new submission's id (makes the retry idempotent). [default: a generated id]
        #[arg(long = "id", id = "new_id", value_name = "NEW_ID")]
        new_id: Option<String>,
    },
    /// Move every submission pending in ZooKeeper into the PostgreSQL store (`[delayed] store =
    /// "postgres"`), once a node that keeps the queue there owns the lock, with the ids ZooKeeper
    /// remembers for `dedup_window`. Cut short, run it again: what moved stays moved, and
    /// nothing is moved twice.
    Migrate {
        /// Where to: the only store a queue moves to.
        #[arg(long, value_enum)]
        to: MigrateTo,
    },
}

/// Where `delayed migrate` moves the queue.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum MigrateTo {
    Postgres,
}

/// A due time given on the command line: `--at` or `--in` (neither: now).
#[derive(Debug, Args)]
pub struct When {
    /// When: RFC 3339 (2026-11-22T14:00:00+01:00), or a local date-time with --timezone.
    #[arg(long, value_name = "TIME", conflicts_with = "in_")]
    at: Option<String>,
    /// When: this long from now, e.g. 30m or 2h 15m.
    #[arg(long = "in", id = "in_", value_name = "DURATION")]
    in_: Option<String>,
    /// The IANA zone of a local --at time, e.g. Europe/Berlin.
    #[arg(long, value_name = "ZONE")]
    timezone: Option<String>,
}

impl When {
    /// The instant named; now when neither `--at` nor `--in` is given (where one is required,
    /// clap asks for it).
    fn due(&self) -> Result<DateTime<Utc>, UsageError> {
        let zone = self
            .timezone
            .as_deref()
            .map(|name| {
                name.parse::<Tz>()
                    .map_err(|_| UsageError::Zone(name.to_owned()))
            })
            .transpose()?;
        Ok(match (&self.at, &self.in_) {
            (Some(at), _) => due::due_at(at, zone)?,
            (None, Some(within)) => due::due_in(within, Utc::now())?,
            (None, None) => Utc::now(),
        })
    }
}

pub async fn submit(config: &Config, args: SubmitArgs) -> Result<(), CliError> {
    let due = args.when.due()?;
    let id = args
        .id
        .as_deref()
        .map(SubmissionId::parse)
        .transpose()
        .map_err(UsageError::from)?;
    let payload = read_payload(&args)?;
    let job = JobName::new(args.job);
    let door = Door::connect(config).await?;
    if door.delayed().job(&job).is_some_and(|job| !job.enabled) {
        eprintln!(
            "zkcron: job {job} is disabled (enabled = false): the submission waits until it is enabled"
        );
    }
    let command = Command::Submit(SubmitRequest {
        traceparent: args.traceparent,
        job,
        due,
        id,
        payload,
    });
    let Outcome::Submitted(receipt) = act(&door, command).await? else {
        return Err(mismatched());
    };
    if receipt.outcome == Submitted::AlreadyThere {
        eprintln!(
            "zkcron: submission {} already exists with this same request; nothing changed",
            receipt.id
        );
    }
    print_lines(&[receipt.id.to_string()])
}

fn read_payload(args: &SubmitArgs) -> Result<Vec<u8>, UsageError> {
    let stdin = || {
        (
            "standard input".to_owned(),
            Box::new(std::io::stdin()) as Box<dyn Read>,
        )
    };
    let (what, reader): (String, Box<dyn Read>) = if let Some(text) = &args.payload {
        (
            "--payload".to_owned(),
            Box::new(std::io::Cursor::new(text.clone().into_bytes())),
        )
    } else if args.payload_stdin || args.payload_file.as_deref() == Some(Path::new("-")) {
        stdin()
    } else if let Some(path) = &args.payload_file {
        let file = std::fs::File::open(path).map_err(|source| UsageError::Payload {
            what: path.display().to_string(),
            source,
        })?;
        (path.display().to_string(), Box::new(file))
    } else {
        if stdin_is_piped() {
            eprintln!(
                "zkcron: standard input was not read: the submission has no payload; to send \
                 it as the payload, add --payload-file - (or --payload TEXT, --payload-file FILE)"
            );
        }
        return Ok(Vec::new());
    };
    let mut payload = Vec::new();
    // One byte past the limit is enough to know it is too large, without reading all of it.
    reader
        .take(MAX_PAYLOAD as u64 + 1)
        .read_to_end(&mut payload)
        .map_err(|source| UsageError::Payload {
            what: what.clone(),
            source,
        })?;
    if payload.len() > MAX_PAYLOAD {
        return Err(UsageError::PayloadTooLarge { what });
    }
    Ok(payload)
}

/// Whether standard input is a pipe, a socket or a file: data someone meant to send. A terminal
/// or `/dev/null` (how services and cron start commands) is not.
fn stdin_is_piped() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    let Ok(fd) = std::io::stdin().as_fd().try_clone_to_owned() else {
        return false;
    };
    std::fs::File::from(fd).metadata().is_ok_and(|meta| {
        let kind = meta.file_type();
        kind.is_fifo() || kind.is_socket() || kind.is_file()
    })
}

pub async fn run(config: &Config, command: DelayedCommand) -> Result<(), CliError> {
    let door = Door::connect(config).await?;
    let delayed = door.delayed();
    match command {
        DelayedCommand::List {
            job,
            limit,
            json,
            failed,
        } => {
            let job = job.map(JobName::new);
            let asked_for = job.as_ref().map(JobName::as_str);
            if failed {
                let failed = delayed.failed(job.as_ref(), limit).await?;
                if json {
                    return print_document(
                        1,
                        serde_json::json!({"job": asked_for, "failed": failed}),
                    );
                }
                return print_lines(&record_rows(delayed, "FAILED", &failed));
            }
            let pending = delayed.list(job.as_ref(), limit).await?;
            let recent = delayed.recent(job.as_ref(), limit).await?;
            if json {
                let pending: Vec<serde_json::Value> = pending
                    .iter()
                    .map(|p| pending_json(&p.id, &p.submission))
                    .collect();
                return print_document(
                    1,
                    serde_json::json!({"job": asked_for, "pending": pending, "recent": recent}),
                );
            }
            print_lines(&list_lines(delayed, &pending, &recent))
        }
        DelayedCommand::Reschedule { id, when: asked } => {
            let id = SubmissionId::parse(&id).map_err(UsageError::from)?;
            let due = asked.due()?;
            let command = Command::Reschedule {
                id: id.clone(),
                due,
            };
            let (verb, moved) = match act(&door, command).await? {
                Outcome::Rescheduled(Rescheduled::Moved(moved)) => ("rescheduled", moved),
                Outcome::Rescheduled(Rescheduled::AlreadyThere(moved)) => {
                    ("already due then:", moved)
                }
                _ => return Err(mismatched()),
            };
            let zone = zone_of(delayed, &moved.job);
            print_lines(&[format!(
                "{verb} {id} ({}, due {})",
                moved.job,
                when(moved.due_unix_ms, zone)
            )])
        }
        DelayedCommand::Retry {
            id,
            when: asked,
            new_id,
        } => {
            let id = SubmissionId::parse(&id).map_err(UsageError::from)?;
            let new_id = new_id
                .as_deref()
                .map(SubmissionId::parse)
                .transpose()
                .map_err(UsageError::from)?;
            let command = Command::Retry {
                id: id.clone(),
                due: asked.due()?,
                new_id,
            };
            let Outcome::Retried(receipt) = act(&door, command).await? else {
                return Err(mismatched());
            };
            if receipt.outcome == Submitted::AlreadyThere {
                eprintln!(
                    "zkcron: submission {} already retries {id} this same way; nothing changed",
                    receipt.id
                );
            }
            print_lines(&[receipt.id.to_string()])
        }
        DelayedCommand::Migrate {
            to: MigrateTo::Postgres,
        } => {
            let Outcome::Migrated(moved) = act(&door, Command::MigrateDelayed).await? else {
                return Err(mismatched());
            };
            for (id, why) in &moved.refused {
                eprintln!("zkcron: {id} left in ZooKeeper: {why}");
            }
            print_lines(&[format!(
                "moved {} pending submission(s) and {} remembered id(s) from ZooKeeper into PostgreSQL",
                moved.moved.len(),
                moved.remembered.moved
            )])?;
            if moved.refused.is_empty() {
                Ok(())
            } else {
                Err(CliError::NotMoved {
                    left: moved.refused.len(),
                })
            }
        }
        DelayedCommand::Show { id, json } => {
            let id = SubmissionId::parse(&id).map_err(UsageError::from)?;
            if json {
                print_document(1, show_json(delayed, id).await?)
            } else {
                print_lines(&show_lines(delayed, id).await?)
            }
        }
        DelayedCommand::Cancel { id, .. } => {
            let id = SubmissionId::parse(&id).map_err(UsageError::from)?;
            let command = Command::Cancel { id: id.clone() };
            let Outcome::Cancelled(cancelled) = act(&door, command).await? else {
                return Err(mismatched());
            };
            let zone = zone_of(delayed, &cancelled.job);
            print_lines(&[format!(
                "cancelled {id} ({}, due {})",
                cancelled.job,
                when(cancelled.due_unix_ms, zone)
            )])
        }
    }
}

/// `delayed show --json`: the submission, and its record (as `history --json` prints one) or
/// its tombstone.
async fn show_json(delayed: &Delayed, id: SubmissionId) -> Result<serde_json::Value, CliError> {
    let Some((submission, state)) = delayed.show(&id).await? else {
        return Err(zkcron::delayed::client::SubmissionError::NotFound { id }.into());
    };
    let (state, record, remembered_until) = match state {
        SubmissionState::Pending => ("pending", None, None),
        SubmissionState::Recorded(record) => ("recorded", Some(record), None),
        SubmissionState::Remembered(tombstone) => {
            ("remembered", None, Some(tombstone.remembered_until_unix_ms))
        }
        SubmissionState::Pruned => ("pruned", None, None),
    };
    Ok(serde_json::json!({
        "id": id.to_string(),
        "job": submission.job.as_str(),
        "due_unix_ms": submission.due_unix_ms,
        "submitted_unix_ms": submission.submitted_unix_ms,
        "payload_bytes": submission.payload.len(),
        "requested_by": submission.requested_by,
        "retry_of": submission.retry_of.map(|old| old.to_string()),
        "after": submission.after,
        "state": state,
        "record": record,
        "remembered_until_unix_ms": remembered_until,
    }))
}

/// `delayed show`: one submission, and where it is in its life.
async fn show_lines(delayed: &Delayed, id: SubmissionId) -> Result<Vec<String>, CliError> {
    let Some((submission, state)) = delayed.show(&id).await? else {
        return Err(zkcron::delayed::client::SubmissionError::NotFound { id }.into());
    };
    let zone = zone_of(delayed, &submission.job);
    let mut payload = format!("{} bytes", submission.payload.len());
    let state = match state {
        SubmissionState::Pending => "pending".to_owned(),
        SubmissionState::Recorded(record) => record_state(&record, zone),
        SubmissionState::Remembered(tombstone) => {
            payload = format!("{} bytes (no longer kept)", tombstone.payload_bytes);
            format!(
                "finished (its record was pruned); the id is remembered until {}",
                when(tombstone.remembered_until_unix_ms, zone)
            )
        }
        SubmissionState::Pruned => "finished (its record was pruned)".to_owned(),
    };
    let retry_of = submission
        .retry_of
        .as_ref()
        .map(|old| format!("retry of   {old}"));
    let after = submission.after.as_ref().map(|parent| {
        format!(
            "after      {} run {} ({})",
            parent.job, parent.run_id, parent.status
        )
    });
    Ok([
        format!("id         {id}"),
        format!("job        {}", submission.job),
        format!("due        {}", when(submission.due_unix_ms, zone)),
        format!("submitted  {}", when(submission.submitted_unix_ms, zone)),
        format!("payload    {payload}"),
        format!("state      {state}"),
    ]
    .into_iter()
    .chain(retry_of)
    .chain(after)
    .collect())
}

fn list_lines(delayed: &Delayed, pending: &[Pending], recent: &[RunRecord]) -> Vec<String> {
    let mut lines = vec![format!(
        "{:<26}  {:<20}  {:<26}  {:>7}",
        "PENDING", "JOB", "DUE", "PAYLOAD"
    )];
    for p in pending {
        let zone = zone_of(delayed, &p.submission.job);
        lines.push(format!(
            "{:<26}  {:<20}  {:<26}  {:>7}",
            p.id,
            p.submission.job,
            when(p.submission.due_unix_ms, zone),
            p.submission.payload.len()
        ));
    }
    lines.push(String::new());
    lines.extend(record_rows(delayed, "RECENT", recent));
    lines
}

/// A table of submissions' records under `heading`: id, job, due, state.
fn record_rows(delayed: &Delayed, heading: &str, records: &[RunRecord]) -> Vec<String> {
    let mut lines = vec![format!(
        "{:<26}  {:<20}  {:<26}  {}",
        heading, "JOB", "DUE", "STATE"
    )];
    for r in records {
        let zone = zone_of(delayed, &r.job);
        let id = r.submission_id.as_ref().map_or("-", SubmissionId::as_str);
        lines.push(format!(
            "{:<26}  {:<20}  {:<26}  {}",
            id,
            r.job,
            when(r.scheduled_unix_ms, zone),
            record_state(r, zone)
        ));
    }
    lines
}

fn pending_json(id: &SubmissionId, submission: &Submission) -> serde_json::Value {
    serde_json::json!({
        "id": id.as_str(),
        "state": "pending",
        "job": submission.job.as_str(),
        "due_unix_ms": submission.due_unix_ms,
        "submitted_unix_ms": submission.submitted_unix_ms,
        "payload_bytes": submission.payload.len(),
    })
}

fn record_state(record: &RunRecord, zone: Tz) -> String {
    let status = record.status.as_str().to_owned();
    let mut state = match record.status {
        RunStatus::Cancelled => status,
        _ => format!(
            "{status} on {} (attempt {})",
            record.node_id, record.attempt
        ),
    };
    if let Some(finished) = record.finished_unix_ms {
        state.push_str(&format!(", at {}", when(finished, zone)));
    }
    if let Some(error) = &record.error {
        state.push_str(": ");
        state.push_str(error);
    }
    match (&record.output, record.http_status) {
        (Some(answer), Some(_)) => {
            state.push_str(&format!("; answer: \"{}\"", answer.escape_debug()));
        }
        _ => {
            if let Some(last) = record.last_output_line() {
                state.push_str(&format!("; last output: \"{}\"", last.escape_debug()));
            }
        }
    }
    if let Some(retry_at) = record.retry_at_unix_ms {
        state.push_str(&format!(
            "; retry: attempt {} at {}",
            record.attempt + 1,
            when(retry_at, zone)
        ));
    }
    state
}

fn zone_of(delayed: &Delayed, job: &JobName) -> Tz {
    delayed.job(job).map_or(chrono_tz::UTC, |job| job.timezone)
}

fn when(unix_ms: i64, zone: Tz) -> String {
    DateTime::from_timestamp_millis(unix_ms).map_or("?".into(), |at| {
        at.with_timezone(&zone)
            .format("%Y-%m-%d %H:%M:%S %:z")
            .to_string()
    })
}
