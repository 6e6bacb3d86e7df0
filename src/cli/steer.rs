//! `zkcron trigger`, `pause`, `resume` and `release`: arguments and human output over the
//! `zkcron::control` library API.

use clap::Args;

use super::{CliError, print_lines};
use zkcron::JobName;
use zkcron::config::Config;
use zkcron::control::client::Steer;
use zkcron::control::requester;
use zkcron::control::store::Paused;

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
pub struct ReleaseArgs {
    /// The lock group to move (a `[[group]]` name, or `default`); without it, the default group.
    #[arg(long)]
    group: Option<String>,
}

pub async fn trigger(config: &Config, args: TriggerArgs) -> Result<(), CliError> {
    let steer = Steer::connect(config).await?;
    let job = JobName::new(args.job);
    let id = steer.trigger(&job, &requester()).await?;
    eprintln!("zkcron: {job} triggered; follow it with: zkcron delayed show {id}");
    print_lines(&[id.to_string()])
}

pub async fn pause(config: &Config, args: PauseArgs) -> Result<(), CliError> {
    let steer = Steer::connect(config).await?;
    let job = JobName::new(args.job);
    match steer
        .pause(&job, args.reason.as_deref(), &requester())
        .await?
    {
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
    let steer = Steer::connect(config).await?;
    let job = JobName::new(args.job);
    match steer.resume(&job).await? {
        Some(pause) => print_lines(&[format!("{job} resumed (paused by {})", pause.by)]),
        None => print_lines(&[format!("{job} was not paused")]),
    }
}

pub async fn release(config: &Config, args: ReleaseArgs) -> Result<(), CliError> {
    let steer = Steer::connect(config).await?;
    let released = steer
        .release_group(args.group.as_deref(), &requester())
        .await?;
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
