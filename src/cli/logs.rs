//! `zkcron logs JOB [RUN] [-f] [--json]`: a run's whole output, from the node that ran it.
//!
//! The run's record names the node; the node's member data names where its HTTP API listens;
//! the output comes from there (`GET /v1/jobs/{job}/runs/{run}/output`), with the read token
//! from `ZKCRON_HTTP_TOKEN` or `--token-file`. When that node cannot give it, the tail the
//! record keeps is printed, with why.
//!
//! Owns: choosing the run, finding its node, printing the lines.
//! Must not: read a run's file itself (only its node can).

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::CliError;
use super::error::UsageError;
use zkcron::JobName;
use zkcron::config::Config;
use zkcron::ledger;
use zkcron::output_store::parse_line;
use zkcron::output_store::remote::{self, Asked};
use zkcron::run::RunRecord;

/// How many of a job's newest records a run is looked for among.
const SEARCHED: usize = 200;

/// The variable the HTTP API's read token is taken from.
const TOKEN_ENV: &str = "ZKCRON_HTTP_TOKEN";

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The job's name.
    job: String,
    /// The run's id (`zkcron history --json` shows each run's `run_id`), or a submission's id;
    /// the job's newest run that started when not given.
    run: Option<String>,
    /// Follow a run still going: print its lines as they come, until it ends.
    #[arg(short, long)]
    follow: bool,
    /// One JSON object per line: `{"time", "stream", "line"}` (`stream`: `stdout`, `stderr`, or
    /// `zkcron` for what zkcron says of the output: its end, a bound reached).
    #[arg(long)]
    json: bool,
    /// Which attempt of a retried run; the one its record names (the latest) by default.
    #[arg(long)]
    attempt: Option<u32>,
    /// A file holding the HTTP API's read token; else the variable ZKCRON_HTTP_TOKEN.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

pub async fn logs(config: &Config, args: LogsArgs) -> Result<(), CliError> {
    let token = http_token(args.token_file.as_ref())?;
    let client = zkcron::delayed::client::session_for(config).await?;
    let job = JobName::new(args.job.clone());
    let records =
        ledger::history(&client, &config.lock.group_paths().ledger, &job, SEARCHED).await?;
    let record = chosen(&records, &args)?;
    let attempt = args.attempt.unwrap_or(record.attempt);
    let asked = Asked {
        job: job.as_str(),
        run: &record.run_id,
        node: record.node_id.as_str(),
        attempt: Some(attempt),
        follow: args.follow,
    };
    let authorization = token.map(|token| format!("Bearer {}", token.trim()));
    let paths = config.lock.paths();
    let mut answer = match remote::ask(&client, &paths, asked, authorization.as_deref()).await {
        Ok(answer) => answer,
        Err(err) => return tail_instead(record, err.to_string()),
    };
    let node = &record.node_id;
    let mut partial = Vec::new();
    let mut out = std::io::stdout().lock();
    loop {
        let chunk = answer.chunk().await.map_err(|err| CliError::NoOutput {
            why: format!(
                "node {node} stopped sending the output: {}",
                zkcron::report::error_chain(&err)
            ),
        })?;
        let Some(chunk) = chunk else { break };
        partial.extend_from_slice(&chunk);
        let Some(end) = partial.iter().rposition(|&b| b == b'\n') else {
            continue;
        };
        let whole: Vec<u8> = partial.drain(..=end).collect();
        print_lines(&mut out, &whole, args.json)?;
        out.flush().map_err(CliError::Stdout)?;
    }
    print_lines(&mut out, &partial, args.json)?;
    out.flush().map_err(CliError::Stdout)
}

/// The token from `--token-file`, else `ZKCRON_HTTP_TOKEN`, else none (a node without tokens).
pub(super) fn http_token(token_file: Option<&PathBuf>) -> Result<Option<String>, CliError> {
    if let Some(path) = token_file {
        let token = std::fs::read_to_string(path).map_err(|source| UsageError::TokenFile {
            path: path.clone(),
            source,
        })?;
        return Ok(Some(token.trim().to_owned()));
    }
    Ok(std::env::var(TOKEN_ENV)
        .ok()
        .filter(|token| !token.trim().is_empty()))
}

/// The run asked for: by its run id or its submission's id, else the newest that started.
fn chosen<'a>(records: &'a [RunRecord], args: &LogsArgs) -> Result<&'a RunRecord, UsageError> {
    match &args.run {
        Some(run) => records
            .iter()
            .find(|record| {
                record.run_id == *run
                    || record
                        .submission_id
                        .as_ref()
                        .is_some_and(|id| id.as_str() == run)
            })
            .ok_or_else(|| UsageError::NoSuchRun {
                job: args.job.clone(),
                run: run.clone(),
                searched: SEARCHED,
            }),
        None => records
            .iter()
            .find(|record| record.started_unix_ms.is_some())
            .ok_or_else(|| UsageError::NoRunStarted {
                job: args.job.clone(),
                searched: SEARCHED,
            }),
    }
}

/// Says why the output cannot be had, prints the tail the record keeps, and fails.
fn tail_instead(record: &RunRecord, why: String) -> Result<(), CliError> {
    eprintln!("zkcron: {why}");
    let tail = record.output.as_deref().unwrap_or_default();
    if tail.is_empty() {
        eprintln!(
            "zkcron: run {} kept no output in its record (the job's keep_output)",
            record.run_id
        );
    } else {
        eprintln!("zkcron: the end of its output, as its record keeps it:");
        writeln!(std::io::stdout().lock(), "{}", tail.trim_end_matches('\n'))
            .map_err(CliError::Stdout)?;
    }
    Err(CliError::NoOutput { why })
}

fn print_lines(out: &mut impl Write, lines: &[u8], json: bool) -> Result<(), CliError> {
    if lines.is_empty() {
        return Ok(());
    }
    if !json {
        return out.write_all(lines).map_err(CliError::Stdout);
    }
    for line in String::from_utf8_lossy(lines).lines() {
        let Some(parsed) = parse_line(line) else {
            continue;
        };
        let object = serde_json::to_string(&parsed).unwrap_or_default();
        writeln!(out, "{object}").map_err(CliError::Stdout)?;
    }
    Ok(())
}
