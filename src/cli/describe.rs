//! `zkcron describe JOB`: the description `zkcron::describe` gathers, as a person reads it or as
//! one JSON document (`--json`).
//!
//! Owns: the command's arguments and the text layout.
//! Must not: gather anything itself.

use std::path::Path;

use chrono::Utc;
use chrono_tz::Tz;
use clap::Args;

use zkcron::config::Config;
use zkcron::describe::{JobDescription, JobNow};

use super::error::{CliError, UsageError, print_lines};

#[derive(Debug, Args)]
pub struct DescribeArgs {
    /// The job's name.
    job: String,
    /// One JSON document (docs/API.md, "zkcron describe --json").
    #[arg(long)]
    json: bool,
}

/// Describes the job; one not in the schedule is a usage error (exit 2). An ensemble that
/// cannot be reached leaves out what only it knows, and says so.
pub async fn describe(config: &Config, path: &Path, args: DescribeArgs) -> Result<(), CliError> {
    let session = zkcron::delayed::client::session_for(config).await;
    let client = session
        .as_ref()
        .map_err(|err| zkcron::report::error_chain(err));
    let described = zkcron::describe::describe(config, path, &args.job, client, Utc::now())
        .await
        .map_err(|err| match err {
            zkcron::describe::DescribeError::NoSuchJob { job, .. } => {
                CliError::Usage(UsageError::NoSuchDeclaredJob { job })
            }
            zkcron::describe::DescribeError::Origins(err) => CliError::Config(err),
        })?;
    if args.json {
        let text = serde_json::to_string(&described).map_err(|err| CliError::Stdout(err.into()))?;
        return print_lines(&[text]);
    }
    let tz = config
        .jobs
        .iter()
        .find(|job| job.spec.name == described.job)
        .map_or(chrono_tz::UTC, |job| job.timezone);
    print_lines(&lines(&described, tz))
}

fn lines(described: &JobDescription, tz: Tz) -> Vec<String> {
    let at = |unix_ms: i64| {
        chrono::DateTime::from_timestamp_millis(unix_ms).map_or_else(
            || "?".to_owned(),
            |at| {
                at.with_timezone(&tz)
                    .format("%Y-%m-%d %H:%M:%S %:z")
                    .to_string()
            },
        )
    };
    let mut lines = vec![
        format!("job:      {}", described.job),
        format!("file:     {}", described.file.display()),
    ];
    let owner = match (&described.now, &described.unreachable) {
        (
            Some(JobNow {
                owner: Some(owner),
                fencing_token,
                ..
            }),
            _,
        ) => format!(
            "owned by {owner}, fencing token {}",
            fencing_token.map_or_else(|| "?".to_owned(), |token| token.to_string())
        ),
        (Some(_), _) => "no owner: nothing fires it now".to_owned(),
        (None, Some(why)) => format!("ZooKeeper cannot be reached ({why})"),
        (None, None) => "?".to_owned(),
    };
    lines.push(format!("group:    {} ({owner})", described.group));
    if let Some(now) = &described.now {
        lines.push(match &now.paused {
            Some(pause) => format!(
                "paused:   by {} since {}{}",
                pause.by,
                at(pause.since_unix_ms),
                pause
                    .reason
                    .as_ref()
                    .map_or_else(String::new, |reason| format!(": {reason}"))
            ),
            None => "paused:   no".to_owned(),
        });
    }
    lines.push(String::new());
    lines.push(format!("{:<22}  {:<40}  FROM", "KEY", "VALUE"));
    for key in &described.keys {
        let value = key
            .value
            .as_ref()
            .map_or_else(|| "(none)".to_owned(), ToString::to_string);
        lines.push(format!("{:<22}  {value:<40}  {}", key.key, key.origin));
    }
    lines.push(String::new());
    let pause_unknown = if described.now.is_none() {
        " (pause unknown)"
    } else {
        ""
    };
    lines.push(format!("next fires ({}){pause_unknown}:", tz.name()));
    for fire in &described.next {
        let jittered = if fire.starts_unix_ms == fire.unix_ms {
            String::new()
        } else {
            format!("  starts {} (jitter)", at(fire.starts_unix_ms))
        };
        lines.push(format!("  {}{jittered}", at(fire.unix_ms)));
    }
    if let Some(why) = &described.next_stops {
        lines.push(format!("  {why}"));
    }
    let Some(now) = &described.now else {
        return lines;
    };
    lines.push(String::new());
    lines.push(format!(
        "last runs:\n  {:<26}  {:<15}  {:<11}  {:>4}  {:>7}  {:>5}",
        "SCHEDULED", "NODE", "STATUS", "EXIT", "ATTEMPT", "TOKEN"
    ));
    for run in &now.runs {
        lines.push(format!(
            "  {:<26}  {:<15}  {:<11}  {:>4}  {:>7}  {:>5}",
            at(run.scheduled_unix_ms),
            run.node_id,
            run.status.as_str(),
            run.exit_code
                .map_or_else(|| "-".to_owned(), |code| code.to_string()),
            run.attempt,
            run.fencing_token.0
        ));
    }
    if now.runs.is_empty() {
        lines.push("  none kept".to_owned());
    }
    lines.push(String::new());
    lines.push("operator actions:".to_owned());
    for entry in &now.audit {
        lines.push(format!(
            "  {}  {:<10}  by {} from {}  {}",
            at(entry.at_unix_ms),
            entry.action,
            entry.by,
            entry.from,
            entry.result
        ));
    }
    if now.audit.is_empty() {
        lines.push("  none kept".to_owned());
    }
    lines
}
