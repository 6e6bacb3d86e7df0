//! `zkcron events [-f] [--json] [--after ID] [--since D]`: what happened in the lock group —
//! runs claimed, started, ended, missed and skipped, owner changes, members joining and
//! leaving, pauses — from a live member's HTTP API (`GET /v1/events`), with the read token from
//! `ZKCRON_HTTP_TOKEN` or `--token-file`. `-f` follows, across the failover of the member
//! serving it; a gap in what was kept is printed as one, never skipped silently.
//!
//! Owns: the arguments and printing the events.
//! Must not: read the events' sources itself (`zkcron::events::client` asks a member).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::CliError;
use super::logs::http_token;
use zkcron::config::Config;
use zkcron::events::client::{self, Following};
use zkcron::events::cursor::Cursor;
use zkcron::events::{Event, EventKind};

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Follow: print events as they happen, until interrupted (across a failover of the node
    /// serving them).
    #[arg(short, long)]
    follow: bool,
    /// One JSON object per line: the event as `GET /v1/events` gives it (`id`, `kind`,
    /// `at_unix_ms`, and `job`, `run_id`, `node`, `status`, `token`, `detail` where they apply).
    #[arg(long)]
    json: bool,
    /// Resume after this event's id, as its `id:` line gives it: a ZooKeeper zxid, valid on
    /// every node, followed by the delayed store's mark where the queue is kept in PostgreSQL.
    #[arg(long, value_name = "ID")]
    after: Option<Cursor>,
    /// Without --after: the events of this long ago and newer, read back from the run records
    /// and what the node kept (`0s`: only new ones, with -f).
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    since: Duration,
    /// A file holding the HTTP API's read token; else the variable ZKCRON_HTTP_TOKEN.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

pub async fn events(config: &Config, args: EventsArgs) -> Result<(), CliError> {
    let token = http_token(args.token_file.as_ref())?;
    let client = zkcron::delayed::client::session_for(config).await?;
    let since_ms = chrono::Utc::now().timestamp_millis()
        - i64::try_from(args.since.as_millis()).unwrap_or(i64::MAX);
    // From the start of what is kept, filtered by --since below; nothing old with `0s`.
    let after = args
        .after
        .clone()
        .or((!args.since.is_zero()).then_some(Cursor::of_zxid(0)));
    let following = Following {
        after,
        follow: args.follow,
        prefer: config.lock.node_id.clone(),
        authorization: token.map(|token| format!("Bearer {token}")),
    };
    let mut out = std::io::stdout().lock();
    let mut failed = None;
    let printed = client::follow(&client, &config.lock.paths(), following, |event| {
        let old = event.kind != EventKind::Gap && event.at_unix_ms < since_ms;
        if args.after.is_none() && old {
            return true;
        }
        if let Err(err) = print(&mut out, event, args.json) {
            failed = Some(err);
            return false;
        }
        true
    })
    .await;
    if let Some(err) = failed {
        return Err(CliError::Stdout(err));
    }
    printed.map_err(|err| CliError::NoEvents {
        why: err.to_string(),
    })
}

fn print(out: &mut impl Write, event: &Event, json: bool) -> std::io::Result<()> {
    if json {
        let line = serde_json::to_string(event).map_err(std::io::Error::other)?;
        writeln!(out, "{line}")?;
    } else {
        writeln!(out, "{}", event.line())?;
    }
    out.flush()
}
