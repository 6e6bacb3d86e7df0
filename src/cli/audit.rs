//! `zkcron audit`: the operator actions of a period, from the audit trail (`zkcron::audit`).

use std::io::Write as _;
use std::time::Duration;

use clap::Args;

use super::error::CliError;
use zkcron::audit::AuditEntry;
use zkcron::config::Config;
use zkcron::layout::AuditPaths;

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// How far back, e.g. 2h, 7d.
    #[arg(long, default_value = "1d", value_parser = humantime::parse_duration)]
    since: Duration,
    /// Only the actions on this job.
    #[arg(long)]
    job: Option<String>,
    /// One JSON document instead of a table: `{"format": 1, "since_unix_ms", "job",
    /// "entries": [entry, …]}`, oldest first (docs/API.md).
    #[arg(long)]
    json: bool,
}

pub async fn audit(config: &Config, args: AuditArgs) -> Result<(), CliError> {
    let client = zkcron::delayed::client::session_for(config).await?;
    let paths = AuditPaths::new(&config.lock.paths());
    // A period longer than chrono can count back reaches to the first entry ever written.
    let since = chrono::Duration::from_std(args.since)
        .ok()
        .and_then(|period| chrono::Utc::now().checked_sub_signed(period))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
    let entries: Vec<AuditEntry> =
        zkcron::ledger::audit::read(&client, &paths, since.timestamp_millis())
            .await?
            .into_iter()
            .filter(|entry| args.job.is_none() || entry.job == args.job)
            .collect();
    if args.json {
        return super::document::print_document(
            1,
            serde_json::json!({
                "since_unix_ms": since.timestamp_millis(),
                "job": args.job,
                "entries": entries,
            }),
        );
    }
    let mut lines = Vec::with_capacity(entries.len() + 1);
    lines.push(format!(
        "{:<20}  {:<10}  {:<16}  {:<24}  {:<7}  {:<16}  {:<20}  RESULT",
        "AT (UTC)", "ACTION", "JOB", "BY", "FROM", "ZOOKEEPER AS", "ARGS"
    ));
    lines.extend(entries.iter().map(line));
    writeln!(std::io::stdout().lock(), "{}", lines.join("\n")).map_err(CliError::Stdout)
}

fn line(entry: &AuditEntry) -> String {
    let at = chrono::DateTime::from_timestamp_millis(entry.at_unix_ms).map_or_else(
        || "?".to_owned(),
        |at| at.format("%Y-%m-%d %H:%M:%S").to_string(),
    );
    let args: Vec<String> = entry
        .args
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    format!(
        "{at:<20}  {:<10}  {:<16}  {:<24}  {:<7}  {:<16}  {:<20}  {}",
        entry.action,
        entry.job.as_deref().unwrap_or("-"),
        entry.by,
        entry.from,
        entry.who.zookeeper.as_deref().unwrap_or("-"),
        args.join(" "),
        entry.result
    )
}
