//! `zkcron reload`: ask the running daemon to re-read its schedule and say what came of it, for
//! systemd's `ExecReload=` (a refused reload fails `systemctl reload`, the reason in the
//! journal) and for a person.
//!
//! Owns: the command's arguments and how its answer is printed.
//! Must not: read the schedule itself: the daemon reads its own file and answers.

use std::time::Duration;

use clap::Args;

use zkcron::reload::client;
use zkcron::reload::{ReloadAnswer, ReloadOutcome};

use super::error::{CliError, print_lines};

#[derive(Debug, Args)]
pub struct ReloadArgs {
    /// The daemon's pid (`ExecReload=zkcron reload --pid $MAINPID`); without it, the one
    /// zkcron daemon running on this host.
    #[arg(long)]
    pid: Option<u32>,
    /// How long to wait for the daemon's answer.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// The daemon's answer as one JSON document (docs/API.md, "zkcron reload --json").
    #[arg(long)]
    json: bool,
}

/// Asks, prints the answer, and fails with exit code 2 when the daemon refused the file.
pub async fn reload(args: ReloadArgs) -> Result<(), CliError> {
    let answer = client::ask(args.pid, args.timeout).await?;
    if args.json {
        print_lines(&[serde_json::to_string(&answer).unwrap_or_default()])?;
    }
    let ReloadAnswer { path, outcome, .. } = answer;
    match outcome {
        ReloadOutcome::Applied {
            schedule, changes, ..
        } => {
            if !args.json {
                print_lines(&[format!(
                    "{}: reloaded, schedule {schedule}; {}",
                    path.display(),
                    changes.summary()
                )])?;
            }
            Ok(())
        }
        ReloadOutcome::Refused { error } => Err(CliError::ReloadRefused { path, error }),
    }
}
