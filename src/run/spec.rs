//! What a run is made of before it starts: the job's program and settings as the config
//! validated them, and the facts the job receives (DESIGN.md "Job contract").
//!
//! Owns: `Program`, `Launcher`, `JobSpec`, `RunContext`, `SubmissionInput`.
//! Must not: spawn anything (that is `runner`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::target::HttpTarget;
use crate::ids::{FencingToken, JobName, NodeId};

/// What to execute for a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// Executed directly: the first element is the program (looked up in `PATH` when it has no
    /// `/`), the rest are its arguments, passed verbatim.
    Argv(Vec<String>),
    /// A shell command line, run as `/bin/sh -c <string>`.
    Shell(String),
    /// Not a process: an HTTP request (issue 23), sent by `delivery`.
    Http(Box<HttpTarget>),
}

impl Program {
    /// The executable and its arguments; `None` for an empty argv or an HTTP target.
    pub fn argv(&self) -> Option<(&str, Vec<&str>)> {
        match self {
            Program::Argv(argv) => argv.split_first().map(|(program, args)| {
                (program.as_str(), args.iter().map(String::as_str).collect())
            }),
            Program::Shell(line) => Some(("/bin/sh", vec!["-c", line.as_str()])),
            Program::Http(_) => None,
        }
    }
}

/// Everything the runner needs to know about one job, as the config validated it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// The job's name (`ZKCRON_JOB`, log field `job`).
    pub name: JobName,
    /// What to execute.
    pub program: Program,
    /// Directory the job starts in; `None` keeps the daemon's.
    pub working_dir: Option<PathBuf>,
    /// Added to the daemon's environment. The contract variables and the stripping of the systemd
    /// variables take precedence over these.
    pub env: BTreeMap<String, String>,
    /// The run is stopped (SIGTERM → grace → SIGKILL) this long after it started; `None`: never.
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL to the process group.
    pub kill_grace: Duration,
    /// How the process is made (the daemon uses its own binary; see [`Launcher`]).
    pub launcher: Launcher,
    /// The user the process runs as; `None`: the daemon's.
    pub user: Option<Arc<RunAs>>,
}

/// The user a job's process runs as (`[[job]] user`), found in the user database when the
/// schedule was loaded: its ids, its groups and its home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub name: String,
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
    /// Every group it is a member of (`getgrouplist`), the primary one among them.
    pub groups: Vec<u32>,
    pub home: PathBuf,
}

impl JobSpec {
    /// Its runs may be sent again after a failover: an HTTP target with `resend =
    /// "idempotent"`.
    pub fn resends_after_failover(&self) -> bool {
        matches!(&self.program, Program::Http(target) if target.resend == super::Resend::Idempotent)
    }

    /// Its submissions may be claimed at their instant, the claim saying `running`, so that the
    /// claim is the one write in front of their start (issue 33): all but an idempotent HTTP
    /// target's, which needs no write in front and is claimed ahead.
    pub fn starts_submissions_with_their_claim(&self) -> bool {
        !self.resends_after_failover()
    }
}

/// One fact of the job contract (DESIGN.md "Job contract"), by its two spellings: a process's
/// environment variable and an HTTP target's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContractKey {
    /// `ZKCRON_RUN_ID`.
    pub env: &'static str,
    /// `zkcron-run-id`; `None` where a header would only repeat another.
    pub header: Option<&'static str>,
}

const fn key(env: &'static str, header: &'static str) -> ContractKey {
    ContractKey {
        env,
        header: Some(header),
    }
}

impl RunContext {
    /// The job contract for this run of `job`, each fact with its value, in one list for the
    /// runner's environment and the delivery's headers alike.
    pub fn contract(&self, job: &JobName) -> Vec<(ContractKey, String)> {
        let mut facts = vec![
            (key("ZKCRON_JOB", "zkcron-job"), job.as_str().to_owned()),
            (key("ZKCRON_RUN_ID", "zkcron-run-id"), self.run_id.clone()),
            (
                key("ZKCRON_SCHEDULED_AT", "zkcron-scheduled-at"),
                self.scheduled_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            ),
            (
                ContractKey {
                    env: "ZKCRON_SCHEDULED_UNIX_MS",
                    header: None,
                },
                self.scheduled_at.timestamp_millis().to_string(),
            ),
            (
                key("ZKCRON_NODE", "zkcron-node"),
                self.node.as_str().to_owned(),
            ),
            (
                key("ZKCRON_FENCING_TOKEN", "zkcron-fencing-token"),
                self.fencing_token.0.to_string(),
            ),
            (
                key("ZKCRON_ATTEMPT", "zkcron-attempt"),
                self.attempt.to_string(),
            ),
            (
                key("ZKCRON_RESUMED", "zkcron-resumed"),
                if self.resumed { "1" } else { "0" }.to_owned(),
            ),
        ];
        if self.backfill {
            facts.push((key("ZKCRON_BACKFILL", "zkcron-backfill"), "1".to_owned()));
        }
        if !self.parent_runs.is_empty() {
            let parents = key("ZKCRON_PARENT_RUN_ID", "zkcron-parent-run-id");
            facts.push((parents, self.parent_runs.join(",")));
        }
        if let Some(trace) = &self.trace {
            // W3C Trace Context: the header, and its environment-variable carrier.
            facts.push((key("TRACEPARENT", "traceparent"), trace.traceparent()));
        }
        if let Some(submission) = &self.submission {
            let id = key("ZKCRON_SUBMISSION_ID", "zkcron-submission-id");
            facts.push((id, submission.id.clone()));
            if let Some(by) = &submission.requested_by {
                let asked = key("ZKCRON_REQUESTED_BY", "zkcron-requested-by");
                facts.push((asked, by.clone()));
            }
        }
        facts
    }
}

/// The facts about one run that the job receives in its environment (DESIGN.md "Job contract").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunContext {
    /// Unique id of this run (`ZKCRON_RUN_ID`, log field `run_id`).
    pub run_id: String,
    /// The tick this run belongs to (`ZKCRON_SCHEDULED_AT`, `ZKCRON_SCHEDULED_UNIX_MS`).
    pub scheduled_at: DateTime<Utc>,
    /// The node running it (`ZKCRON_NODE`).
    pub node: NodeId,
    /// The owner's fencing token when the tick was claimed (`ZKCRON_FENCING_TOKEN`).
    pub fencing_token: FencingToken,
    /// 1-based attempt number (`ZKCRON_ATTEMPT`).
    pub attempt: u32,
    /// Started by on_locked/catch-up instead of on time (`ZKCRON_RESUMED=1`).
    pub resumed: bool,
    /// A past tick run by `zkcron backfill` (`ZKCRON_BACKFILL=1`).
    pub backfill: bool,
    /// The run of a delayed submission: its id and the payload the job reads on stdin.
    pub submission: Option<SubmissionInput>,
    /// A chained run (`after`): its parents' run ids (`ZKCRON_PARENT_RUN_ID`, comma-separated).
    pub parent_runs: Vec<String>,
    /// Where telemetry is on: this attempt's span, the parent of what the job does
    /// (`TRACEPARENT`, the `traceparent` header). Boxed: a run's start action is the largest
    /// the fire machine hands out, and without telemetry this costs a word.
    pub trace: Option<Box<super::AttemptTrace>>,
}

/// What a submission's run gets beside the job contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmissionInput {
    /// `ZKCRON_SUBMISSION_ID`.
    pub id: String,
    /// Written to the job's stdin, then stdin is closed.
    pub payload: Arc<Vec<u8>>,
    /// A manual trigger: who asked (`ZKCRON_REQUESTED_BY`).
    pub requested_by: Option<String>,
    /// Its pending marker names its job (lock groups): recorded, so a withdrawn claim restores
    /// that marker.
    pub marker_names_job: bool,
    /// The submitter's trace context: its run's record keeps it among the run span's links.
    /// Boxed: it rides in every run's start action, the largest the fire machine hands out.
    pub traceparent: Option<Box<str>>,
}

/// How the runner makes a job's process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Launcher {
    /// Each run started at its go, by a `CLONE_VFORK` child of the daemon that sets the signal
    /// and execs the job: what a library caller gets, with no zkcron binary at hand.
    #[default]
    Direct,
    /// As [`Launcher::Direct`], and a run known ahead of its instant is prepared: this zkcron
    /// binary, `posix_spawn`ed in launcher mode, waits for the go and execs the job at its
    /// instant (the daemon passes `/proc/self/exe`, which names its own binary even after a
    /// package upgrade replaced it).
    Binary(PathBuf),
}

impl Launcher {
    /// The daemon's own binary as the launcher.
    pub fn this_binary() -> Self {
        Launcher::Binary(PathBuf::from("/proc/self/exe"))
    }
}
