//! Everything that ends a command with a non-zero exit code, and which code (the table in
//! `zkcron --help`); printing a command's lines.
//!
//! Owns: `CliError` and the commands' usage errors, so that every command file takes its
//! errors from here and none from another.
//! Must not: print anything but what a command hands it.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use zkcron::command::CommandError;
use zkcron::config::LoadError;
use zkcron::control::client::SteerError;
use zkcron::daemon::DaemonError;
use zkcron::delayed::client::SubmissionError;
use zkcron::delayed::due::DueError;
use zkcron::delayed::{DelayedError, MAX_PAYLOAD};
use zkcron::identity::IdentityError;
use zkcron::ledger::ClaimError;
use zkcron::lock::driver::DriverError;
use zkcron::lock::members::MemberError;
use zkcron::status::StatusError;

/// Everything that ends a command with a non-zero exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] LoadError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error(transparent)]
    Lock(#[from] DriverError),
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    #[error(transparent)]
    Unreachable(#[from] zkcron::ledger::Unreachable),
    #[error("cannot write into {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{problems} problem(s) would keep jobs from starting on this host (--strict)")]
    Strict { problems: usize },
    #[error("{secrets} secret(s) written in a file that group or others may read")]
    Exposed { secrets: usize },
    #[error("{}: {problems} problem(s), listed in the JSON on stdout", file.display())]
    Invalid { file: PathBuf, problems: usize },
    #[error(transparent)]
    Zk(#[from] zkcron::ledger::RequestFailed),
    #[error(transparent)]
    Ledger(#[from] ClaimError),
    #[error(transparent)]
    Delayed(#[from] DelayedError),
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error(transparent)]
    Steer(#[from] SteerError),
    #[error(transparent)]
    Status(#[from] StatusError),
    #[error("cannot write to stdout")]
    Stdout(#[source] std::io::Error),
    #[error(transparent)]
    Explain(#[from] ExplainError),
    #[error(transparent)]
    Backfill(#[from] BackfillUsage),
    #[error(transparent)]
    Audit(#[from] zkcron::ledger::audit::AuditError),
    #[error(transparent)]
    Command(CommandError),
    #[error(transparent)]
    Reload(#[from] zkcron::reload::client::ReloadError),
    /// `reload`: the daemon read its file and refused it; it runs the schedule it ran before.
    #[error("{}: reload refused; the running schedule is kept: {error}", path.display())]
    ReloadRefused { path: PathBuf, error: String },
    /// `acl apply`: nodes these credentials may not change (closed to others); each was named.
    #[error("the ACL of {nodes} node(s) could not be set (each is named above)")]
    AclRefused { nodes: usize },
    /// `logs`: the node that ran the run cannot give its output (the record's tail was shown).
    #[error("{why}")]
    NoOutput { why: String },
    /// `events`: no member could serve the events, or one refused.
    #[error("cannot follow the events: {why}")]
    NoEvents { why: String },
    /// `delayed migrate`: submissions left in ZooKeeper (each was named).
    #[error("{left} submission(s) left in ZooKeeper (each is named above); the rest moved")]
    NotMoved { left: usize },
    /// `status`: the fleet is not healthy; exits with the verdict's own code.
    #[error("{}", .0.problems.join("; "))]
    Unhealthy(zkcron::status::health::Health),
}

impl From<CommandError> for CliError {
    fn from(err: CommandError) -> Self {
        match err {
            CommandError::Steer(err) => CliError::Steer(err),
            CommandError::Delayed(err) => CliError::Delayed(err),
            CommandError::Acl(_) | CommandError::Mismatched => CliError::Command(err),
        }
    }
}

impl From<SubmissionError> for CliError {
    fn from(err: SubmissionError) -> Self {
        CliError::Delayed(err.into())
    }
}

impl CliError {
    /// The exit-code table above, in code.
    pub fn exit_code(&self) -> ExitCode {
        // Waiting cannot fix these: a restart loop would only hide them.
        let duplicate = |err: &DriverError| {
            matches!(
                err,
                DriverError::Member(MemberError::Duplicate { .. })
                    | DriverError::NoRecursiveWatches { .. }
            )
        };
        match self {
            CliError::Config(_)
            | CliError::Identity(_)
            | CliError::Usage(_)
            | CliError::Explain(_)
            | CliError::Backfill(_)
            | CliError::Strict { .. }
            | CliError::Exposed { .. }
            | CliError::Invalid { .. }
            | CliError::ReloadRefused { .. }
            | CliError::NotMoved { .. } => ExitCode::from(2),
            CliError::Delayed(err) if err.is_refusal() => ExitCode::from(2),
            CliError::Steer(err) if err.is_refusal() => ExitCode::from(2),
            CliError::Steer(SteerError::NotHandedOver { .. }) => ExitCode::from(3),
            CliError::Lock(err) | CliError::Daemon(DaemonError::Lock(err)) if duplicate(err) => {
                ExitCode::from(2)
            }
            CliError::Daemon(DaemonError::CannotRunAs { .. }) => ExitCode::from(2),
            CliError::Unhealthy(health) => ExitCode::from(health.exit_code),
            _ => ExitCode::from(1),
        }
    }
}

/// Why the command line itself is not a submission.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error(transparent)]
    Due(#[from] DueError),
    #[error("--timezone {0:?}: not an IANA time zone name (e.g. Europe/Berlin)")]
    Zone(String),
    #[error("--id: {0}")]
    Id(#[from] zkcron::delayed::submission::IdError),
    #[error("cannot read the payload from {what}")]
    Payload {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the payload from {what} has more than {MAX_PAYLOAD} bytes (64 KiB)")]
    PayloadTooLarge { what: String },
    #[error("no job named {job:?}: it is not in the schedule and has no run in the ledger")]
    NoSuchJob { job: String },
    #[error("no job named {job:?} in the schedule")]
    NoSuchDeclaredJob { job: String },
    #[error("{} exists: not replaced (--force replaces it)", path.display())]
    Exists { path: PathBuf },
    #[error("--node-id {id:?}: {why}")]
    NodeId { id: String, why: &'static str },
    #[error(
        "job {job} has no run {run} among its newest {searched} records (zkcron history {job} lists them)"
    )]
    NoSuchRun {
        job: String,
        run: String,
        searched: usize,
    },
    #[error("job {job} has no run that started among its newest {searched} records")]
    NoRunStarted { job: String, searched: usize },
    #[error("cannot read the HTTP token from {}", path.display())]
    TokenFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Why an explanation cannot be given.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("no job named {job:?} in {file}")]
    NoSuchJob { job: String, file: String },
    #[error("--from: {0}")]
    From(#[source] DueError),
    #[error("--count must be from 1 to {max}, not {count}")]
    Count { count: usize, max: usize },
}

/// A backfill's range that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum BackfillUsage {
    #[error("--from: {0}")]
    From(#[source] DueError),
    #[error("--to: {0}")]
    To(#[source] DueError),
}

/// Prints `lines` to stdout, one per line.
pub fn print_lines(lines: &[String]) -> Result<(), CliError> {
    writeln!(std::io::stdout().lock(), "{}", lines.join("\n")).map_err(CliError::Stdout)
}
