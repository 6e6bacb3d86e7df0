//! `zkcron trigger`, `pause`, `resume`, `release` and `backfill`: arguments parsed into a
//! `zkcron::command::Command`, done through the door as the user running the command line, and
//! the outcome in words or JSON.

use chrono::{DateTime, Utc};
use clap::Args;

use super::document::print_document;
use super::error::{BackfillUsage, CliError, print_lines};
use zkcron::JobName;
use zkcron::audit::Actor;
use zkcron::command::{Command, CommandError, Door, Outcome};
use zkcron::config::Config;
use zkcron::control::backfill::TickPlan;
use zkcron::control::client::BackfillOptions;
use zkcron::ledger::control::Paused;

#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// The declared job to run now.
    job: String,
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The declared job to pause.
    job: String,
    /// Why, shown in `zkcron status` and in the skipped ticks' records.
    #[arg(long)]
    reason: Option<String>,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The paused job.
    job: String,
}

#[derive(Debug, Args)]
pub struct BackfillArgs {
    /// The declared job whose past ticks to run.
    job: String,
    /// The first tick to consider: RFC 3339, or a local date or date-time in the job's zone.
    #[arg(long, value_name = "TIME")]
    from: String,
    /// The last tick to consider (not after now), as --from.
    #[arg(long, value_name = "TIME")]
    to: String,
    /// Only list what would run.
    #[arg(long)]
    dry_run: bool,
    /// Also run the ticks older than every record the job keeps: their records may have been
    /// pruned (`history`), so they may have run.
    #[arg(long)]
    include_pruned: bool,
    /// Its runs also make the runs of the jobs that follow it (`after`), as on time; without
    /// it they make none.
    #[arg(long)]
    with_children: bool,
    /// One JSON object instead of text (docs/API.md).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The lock group to move (a `[[group]]` name, or `default`); without it, the default group.
    #[arg(long)]
    group: Option<String>,
    /// One JSON object instead of text (docs/API.md).
    #[arg(long)]
    json: bool,
}

/// Does `command` through the door, as the Unix user running this command line: the one
/// place the CLI establishes who acts.
///
/// # Errors
/// No session, or the command was refused or failed.
pub(super) async fn act(door: &Door, command: Command) -> Result<Outcome, CliError> {
    Ok(door.execute(command, &Actor::cli()).await?)
}

/// The door answered with another command's outcome (a bug).
pub(super) fn mismatched() -> CliError {
    CommandError::Mismatched.into()
}

pub async fn trigger(config: &Config, args: TriggerArgs) -> Result<(), CliError> {
    let door = Door::connect(config).await?;
    let job = JobName::new(args.job);
    let Outcome::Triggered(id) = act(&door, Command::Trigger { job: job.clone() }).await? else {
        return Err(mismatched());
    };
    eprintln!("zkcron: {job} triggered; follow it with: zkcron delayed show {id}");
    print_lines(&[id.to_string()])
}

pub async fn pause(config: &Config, args: PauseArgs) -> Result<(), CliError> {
    let door = Door::connect(config).await?;
    let job = JobName::new(args.job);
    let command = Command::Pause {
        job: job.clone(),
        reason: args.reason,
    };
    let Outcome::Paused(paused) = act(&door, command).await? else {
        return Err(mismatched());
    };
    match paused {
        Paused::Now => print_lines(&[format!(
            "{job} paused: its ticks are skipped and its submissions wait until `zkcron resume {job}`"
        )]),
        Paused::Already(pause) => print_lines(&[format!(
            "{job} was paused already, by {} ({}); left as it was",
            pause.by,
            pause.reason.as_deref().unwrap_or("no reason given")
        )]),
    }
}

pub async fn resume(config: &Config, args: ResumeArgs) -> Result<(), CliError> {
    let door = Door::connect(config).await?;
    let job = JobName::new(args.job);
    let Outcome::Resumed(was) = act(&door, Command::Resume { job: job.clone() }).await? else {
        return Err(mismatched());
    };
    match was {
        Some(pause) => print_lines(&[format!("{job} resumed (paused by {})", pause.by)]),
        None => print_lines(&[format!("{job} was not paused")]),
    }
}

pub async fn backfill(config: &Config, args: BackfillArgs) -> Result<(), CliError> {
    let job = JobName::new(args.job);
    let zone = config
        .jobs
        .iter()
        .find(|j| j.spec.name == job)
        .map_or(chrono_tz::UTC, |j| j.timezone);
    let from = super::explain::instant(&args.from, zone).map_err(BackfillUsage::From)?;
    let to = super::explain::instant(&args.to, zone).map_err(BackfillUsage::To)?;
    let door = Door::connect(config).await?;
    let command = Command::Backfill {
        job: job.clone(),
        from,
        to,
        options: BackfillOptions {
            include_pruned: args.include_pruned,
            dry_run: args.dry_run,
            with_children: args.with_children,
        },
    };
    let Outcome::Backfilled(done) = act(&door, command).await? else {
        return Err(mismatched());
    };
    let runs = done.plan.to_run(args.include_pruned).len();
    if args.json {
        let ticks: Vec<serde_json::Value> = done
            .plan
            .ticks
            .iter()
            .map(|(tick, plan)| {
                let (plan, status) = match plan {
                    TickPlan::Recorded(status) => ("recorded", Some(status.as_str())),
                    TickPlan::Run => ("run", None),
                    TickPlan::Unknown => ("unknown", None),
                };
                serde_json::json!({
                    "unix_ms": tick.timestamp_millis(),
                    "plan": plan,
                    "status": status,
                })
            })
            .collect();
        let document = serde_json::json!({
            "job": job.as_str(),
            "from_unix_ms": from.timestamp_millis(),
            "to_unix_ms": to.timestamp_millis(),
            "dry_run": args.dry_run,
            "include_pruned": args.include_pruned,
            "with_children": args.with_children,
            "ticks": ticks,
            "requested": if args.dry_run { 0 } else { runs },
        });
        return print_document(1, document);
    }
    let local = |at: DateTime<Utc>| {
        at.with_timezone(&zone)
            .format("%Y-%m-%d %H:%M:%S %:z")
            .to_string()
    };
    let mut lines = vec![format!(
        "{job}: {} tick(s) from {} to {}",
        done.plan.ticks.len(),
        local(from),
        local(to)
    )];
    let (run, unknown) = if args.dry_run {
        (
            "would run",
            "unknown: may have been pruned (--include-pruned runs it)",
        )
    } else {
        (
            "requested",
            "unknown: may have been pruned; not run without --include-pruned",
        )
    };
    for (tick, plan) in &done.plan.ticks {
        let state = match plan {
            TickPlan::Recorded(status) => format!("recorded {}: left alone", status.as_str()),
            TickPlan::Run => run.to_owned(),
            TickPlan::Unknown if args.include_pruned => {
                format!("{run} (older than every record kept)")
            }
            TickPlan::Unknown => unknown.to_owned(),
        };
        lines.push(format!("  {}  {state}", local(*tick)));
    }
    lines.push(if args.dry_run {
        format!("dry run: {runs} tick(s) would run; nothing was requested")
    } else if runs == 0 {
        "nothing to run".to_owned()
    } else {
        format!(
            "{runs} tick(s) requested: the owner runs them one after another, in order, with \
             ZKCRON_BACKFILL=1 (zkcron history {job} shows them)"
        )
    });
    print_lines(&lines)
}

pub async fn release(config: &Config, args: ReleaseArgs) -> Result<(), CliError> {
    let door = Door::connect(config).await?;
    let command = Command::Release {
        group: args.group.clone(),
        owner: None,
    };
    let Outcome::Released(released) = act(&door, command).await? else {
        return Err(mismatched());
    };
    if args.json {
        let document = serde_json::json!({
            "group": args.group.as_deref().unwrap_or(zkcron::ids::DEFAULT_GROUP),
            "from": released.from.to_string(),
            "to": released.to.to_string(),
            "after_ms": released.after.as_millis(),
        });
        return print_document(1, document);
    }
    let what = match &args.group {
        Some(group) => format!("group {group}"),
        None => "lock".to_owned(),
    };
    print_lines(&[format!(
        "{what} handed over from {} to {} in {} ms",
        released.from,
        released.to,
        released.after.as_millis()
    )])
}
