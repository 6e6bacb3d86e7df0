//! Command-line interface: clap types, the exit-code table, human output.
//!
//! Owns: parsing arguments into library settings, printing results, mapping errors to exit codes.
//! Must not: contain logic that belongs to a library module (lock policy, ZooKeeper calls).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use zkcron::lock::driver::{self, DriverError, LockPaths, LockSettings};
use zkcron::lock::members::MemberError;
use zkcron::lock::node::OwnerInfo;
use zkcron::zk::ZkSettings;
use zkcron::{LockEvent, NodeId};

const EXIT_CODES: &str = "\
Exit codes:
  0  success (or a clean stop on SIGTERM/SIGINT)
  1  runtime failure (ZooKeeper unreachable for a one-shot command, I/O error)
  2  usage error or invalid configuration, including a node_id already used by a live process";

/// Cron jobs that fire exactly once across a fleet, coordinated by ZooKeeper.
#[derive(Debug, Parser)]
#[command(name = "zkcron", version, about, after_help = EXIT_CODES)]
pub struct Cli {
    /// Log filter, e.g. `info` or `zkcron=debug` (RUST_LOG syntax).
    #[arg(long, global = true, default_value = "info", env = "ZKCRON_LOG")]
    pub log_level: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Contend for a lock and print every lock event as a line on stdout; runs no jobs.
    ///
    /// Lines: `acquired token=N`, `lost`, `owner none`, `owner node_id=ID session=0xS`,
    /// `owner squatter`, `owner foreign session=0xS`, and `stopped` after a clean release.
    #[command(after_help = EXIT_CODES)]
    LockDemo(LockDemoArgs),
}

#[derive(Debug, Args)]
pub struct LockDemoArgs {
    /// ZooKeeper connect string: `host:port[,host:port…][/chroot]`.
    #[arg(long)]
    connect: String,
    /// Lock group name: one lock, one singleton group.
    #[arg(long)]
    name: String,
    /// Root znode of all zkcron lock groups.
    #[arg(long, default_value = "/zkcron")]
    root: String,
    /// This process's id in the group; must be unique per live process [default: this host's IP].
    #[arg(long)]
    node_id: Option<String>,
    /// Requested ZooKeeper session timeout, e.g. `10s`.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    session_timeout: Duration,
    /// How long peers wait after a crashed owner's node is gone before contending.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    takeover_delay: Duration,
}

/// Everything that ends a command with a non-zero exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("invalid --node-id {id:?}: {reason}")]
    BadNodeId { id: String, reason: &'static str },
    #[error("cannot find this host's IP address to use as node_id; set lock.node_id (--node-id)")]
    NoLocalIp(#[source] local_ip_address::Error),
    #[error(transparent)]
    Lock(#[from] DriverError),
    #[error("cannot write to stdout")]
    Stdout(#[source] std::io::Error),
    #[allow(dead_code)] // used by the config-file commands of the next issue
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl CliError {
    /// The exit-code table above, in code.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CliError::BadNodeId { .. }
            | CliError::Lock(DriverError::Member(MemberError::Duplicate { .. })) => {
                ExitCode::from(2)
            }
            _ => ExitCode::from(1),
        }
    }
}

impl Command {
    /// Runs the command until it finishes or `shutdown` is cancelled.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), CliError> {
        match self {
            Command::LockDemo(args) => lock_demo(args, shutdown).await,
        }
    }
}

async fn lock_demo(args: LockDemoArgs, shutdown: CancellationToken) -> Result<(), CliError> {
    let (node_id, ip) = match (args.node_id, local_ip_address::local_ip()) {
        (Some(id), ip) => (
            id,
            ip.map_or_else(|_| "unknown".to_owned(), |ip| ip.to_string()),
        ),
        (None, Ok(ip)) => (ip.to_string(), ip.to_string()),
        (None, Err(err)) => return Err(CliError::NoLocalIp(err)),
    };
    validate_node_id(&node_id)?;
    let zk = ZkSettings {
        connect: args.connect,
        session_timeout: args.session_timeout,
    };
    let me = OwnerInfo {
        node_id: NodeId::new(node_id),
        ip,
        host: gethostname::gethostname().to_string_lossy().into_owned(),
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").into(),
        since_unix_ms: 0,
        releasing: false,
    };
    let settings = LockSettings {
        paths: LockPaths::new(&args.root, &args.name),
        me,
        takeover_delay: args.takeover_delay,
        jitter: takeover_jitter(args.takeover_delay),
    };
    let (events, mut received) = mpsc::unbounded_channel();
    let printer = tokio::spawn(async move {
        let mut out = std::io::stdout();
        while let Some(event) = received.recv().await {
            writeln!(out, "{}", event_line(&event)).and_then(|()| out.flush())?;
        }
        Ok::<(), std::io::Error>(())
    });
    let result = driver::run(&zk, &settings, &shutdown, &events).await;
    drop(events);
    let printed = printer.await.unwrap_or(Ok(()));
    result?;
    printed.map_err(CliError::Stdout)?;
    println!("stopped");
    Ok(())
}

/// Up to a tenth of the delay (at most one second), so that many peers do not contend at once.
fn takeover_jitter(delay: Duration) -> Duration {
    let max_ms =
        u64::try_from((delay / 10).min(Duration::from_secs(1)).as_millis()).unwrap_or(1000);
    Duration::from_millis(rand::random_range(0..=max_ms))
}

fn validate_node_id(id: &str) -> Result<(), CliError> {
    let bad = |reason| {
        Err(CliError::BadNodeId {
            id: id.to_owned(),
            reason,
        })
    };
    if id.is_empty() {
        return bad("must not be empty");
    }
    if id == "." || id == ".." || id.contains('/') || id.chars().any(char::is_control) {
        return bad(
            "must be usable as a znode name: no '/', no control characters, not '.' or '..'",
        );
    }
    Ok(())
}

fn event_line(event: &LockEvent) -> String {
    match event {
        LockEvent::Acquired { token } => format!("acquired token={token}"),
        LockEvent::Lost => "lost".into(),
        LockEvent::OwnerChanged { owner: None } => "owner none".into(),
        LockEvent::OwnerChanged { owner: Some(node) } if node.is_squatter() => {
            "owner squatter".into()
        }
        LockEvent::OwnerChanged { owner: Some(node) } => match node.node_id() {
            Some(id) => format!("owner node_id={id} session={}", node.session),
            None => format!("owner foreign session={}", node.session),
        },
    }
}
