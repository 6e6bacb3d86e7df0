//! Command-line interface: clap types, the exit-code table, human output.
//!
//! Owns: parsing arguments, choosing the log setup, printing results, mapping errors to exit codes.
//! Must not: contain logic that belongs to a library module (lock policy, scheduling, ZooKeeper
//! layout, raw ZooKeeper requests).

mod acl;
mod audit;
mod check;
mod delayed;
mod describe;
mod document;
mod error;
mod events;
mod explain;
mod init;
mod logs;
mod reload;
mod status;
mod steer;

pub use error::CliError;
use error::{UsageError, print_lines};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use zkcron::config::{self, Config, LogFormat, Lookups};
use zkcron::daemon::{self, DaemonSettings};
use zkcron::ensemble::ZkSettings;
use zkcron::identity;
use zkcron::layout::LockPaths;
use zkcron::ledger;
use zkcron::lock::clock_watch::ClockSettings;
use zkcron::lock::driver::LockUpdate;
use zkcron::lock::driver::{self, LockRole, LockSettings};
use zkcron::run::RunRecord;
use zkcron::{JobName, LockEvent, NodeId, logging};

const EXIT_CODES: &str = "\
Exit codes:
  0  success (or a clean stop on SIGTERM/SIGINT)
  1  runtime failure (ZooKeeper unreachable for a one-shot command, I/O error)
  2  usage error or invalid configuration (with check --strict, a command or working_dir
     missing on this host too), including a node_id already used by a live process, ZooKeeper
     servers older than 3.6, or a job's user the daemon cannot switch to; a refused submission
     (unknown job, payload too large, due beyond the starting_deadline, its id taken by a
     different request) or cancel (not found, already started); a refused trigger (unknown,
     disabled or paused job), pause (unknown job), history (a job neither in the schedule nor
     in the ledger), logs (no such run) or release (no owner, no other node alive to take over); a reload the
     daemon refused (it keeps the schedule it ran)
  3  a release that was accepted but did not move the lock in time
  4  status: a lock group has no owner that fires
  5  status --member: that node is not a live member
  6  status: ZooKeeper cannot be reached";

/// Where the schedule file is when neither --config nor ZKCRON_CONFIG says (the .deb's conffile).
const DEFAULT_CONFIG: &str = "/etc/zkcron/zkcron.toml";

/// Cron jobs for a fleet, coordinated by ZooKeeper: each tick and submission claimed by one
/// host at most once, and every one recorded (run, skipped, missed or interrupted).
#[derive(Debug, Parser)]
#[command(name = "zkcron", version = zkcron::identity::VERSION, about, after_help = EXIT_CODES)]
pub struct Cli {
    /// Log filter, e.g. `info` or `zkcron=debug` (RUST_LOG syntax); overrides `[log] level`.
    #[arg(long, global = true, env = "ZKCRON_LOG")]
    log_level: Option<String>,
    /// The schedule file (docs/CONFIG.md), the same on every host of the lock group.
    #[arg(
        long,
        short,
        global = true,
        env = "ZKCRON_CONFIG",
        default_value = DEFAULT_CONFIG,
        value_name = "FILE"
    )]
    config: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon: contend for the lock and fire the schedule's jobs while owning it.
    ///
    /// SIGTERM/SIGINT stop it (the lock is handed over at once, running jobs get their
    /// kill_grace); SIGHUP or `zkcron reload` reloads the schedule (a broken file is refused and
    /// the old one kept).
    #[command(after_help = EXIT_CODES)]
    Run(RunArgs),
    /// Write a commented starting schedule where every command reads it (--config, else
    /// ZKCRON_CONFIG, else /etc/zkcron/zkcron.toml), for `zkcron check` and `zkcron run`.
    #[command(after_help = EXIT_CODES)]
    Init(init::InitArgs),
    /// Validate a schedule file and show each job's next three fire times in its own time zone.
    ///
    /// It also warns about what would keep a job from starting on this host: a command that is
    /// not an executable file here, a working_dir that does not exist.
    #[command(after_help = EXIT_CODES)]
    Check(check::CheckArgs),
    /// Show the lock owner (node, ip, host, since, fencing token), the live members, and per
    /// job: next fire, last run, ticks recorded missed among the kept records, a run alive now.
    ///
    /// It exits 0 only when every lock group of this schedule has an owner that fires: 4 when
    /// one has none, 5 when --member is not a live member, 6 when ZooKeeper cannot be reached.
    #[command(after_help = EXIT_CODES)]
    Status(status::StatusArgs),
    /// Show one job as it will run and as it runs now: every key with the defaults applied and
    /// where its value comes from (file:line, a drop-in, [defaults], or zkcron's default), its
    /// next five fires (calendars, pause, jitter), its group's owner, its last runs and the
    /// operator actions on it.
    #[command(after_help = EXIT_CODES)]
    Describe(describe::DescribeArgs),
    /// Show a job's runs, newest first: scheduled time (in the job's zone), node, ip, start,
    /// duration, status, exit, attempt, fencing token.
    #[command(after_help = EXIT_CODES)]
    History {
        /// The job's name.
        job: String,
        /// How many runs at most.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// One JSON document instead of a table: `{"format": 1, "job", "runs": [record, …]}`,
        /// the records as docs/API.md shows them, newest first.
        #[arg(long)]
        json: bool,
        /// Under each run, the output its record kept (the job's `keep_output`: by default the
        /// last 4 KiB of stdout and stderr of a run that did not succeed).
        #[arg(long, conflicts_with = "json")]
        output: bool,
    },
    /// Show a run's whole output (stdout and stderr, each line stamped), fetched from the node
    /// that ran it: the job's newest run that started, or RUN; -f follows a run still going.
    ///
    /// It asks that node's HTTP API, with the read token from ZKCRON_HTTP_TOKEN or
    /// --token-file. When the node cannot answer (gone, no [http], loopback only) it says why,
    /// prints the tail the run's record keeps, and exits 1.
    #[command(after_help = EXIT_CODES)]
    Logs(logs::LogsArgs),
    /// Show what happened in the lock group — runs claimed, started, ended, missed and skipped,
    /// owner changes, members joining and leaving, pauses — of the last hour; -f follows them
    /// as they happen, across a failover.
    ///
    /// It asks a live member's HTTP API (this host's node first), with the read token from
    /// ZKCRON_HTTP_TOKEN or --token-file. Events the serving node did not keep are printed as a
    /// gap, with the runs of that range read back from their records.
    #[command(after_help = EXIT_CODES)]
    Events(events::EventsArgs),
    /// Show the operator actions of a period, oldest first: pauses, resumes, triggers,
    /// releases, backfills, ACLs applied, and the cancels, reschedules and retries of
    /// submissions, each with who asked, from where, and how it ended.
    #[command(after_help = EXIT_CODES)]
    Audit(audit::AuditArgs),
    /// Contend for a lock and print every lock event as a line on stdout; runs no jobs.
    ///
    /// Lines: `acquired token=N`, `lost`, `owner none`, `owner node_id=ID session=0xS`,
    /// `owner squatter`, `owner foreign session=0xS`, and `stopped` after a clean release.
    #[command(after_help = EXIT_CODES)]
    LockDemo(LockDemoArgs),
    /// Submit a declared job to run once, later: prints the submission id.
    ///
    /// The run gets the payload on stdin and ZKCRON_SUBMISSION_ID beside the usual job contract.
    /// A due time in the past is accepted within the job's starting_deadline.
    #[command(after_help = EXIT_CODES)]
    Submit(delayed::SubmitArgs),
    /// Delayed submissions: list the pending ones and recent outcomes, show one, cancel one,
    /// reschedule a pending one, or submit a failed one again (retry).
    #[command(after_help = EXIT_CODES)]
    Delayed {
        #[command(subcommand)]
        command: delayed::DelayedCommand,
    },
    /// Run a declared job now, once, through the ledger: whichever node owns the lock starts
    /// it, recorded as manual with who asked. Prints its submission id.
    #[command(after_help = EXIT_CODES)]
    Trigger(steer::TriggerArgs),
    /// Run the past ticks of a job that have no run record, in order, through the ledger:
    /// whichever node owns the lock runs them, with ZKCRON_BACKFILL=1; a tick that has a record
    /// (it ran, was skipped, or stands for a missed gap) is left alone.
    #[command(after_help = EXIT_CODES)]
    Backfill(steer::BackfillArgs),
    /// Pause a job in the whole cluster: its ticks are recorded skipped (never replayed), its
    /// submissions wait; a run alive now goes on.
    #[command(after_help = EXIT_CODES)]
    Pause(steer::PauseArgs),
    /// Resume a paused job: its next tick fires, its waiting submissions are claimed.
    #[command(after_help = EXIT_CODES)]
    Resume(steer::ResumeArgs),
    /// Ask the daemon running on this host to re-read its schedule, and wait for its answer:
    /// what changed, or why it refused the file (it then keeps the schedule it ran).
    ///
    /// For systemd's `ExecReload=zkcron reload --pid $MAINPID`: a refused reload exits 2, so
    /// `systemctl reload` fails with the reason in the journal. SIGHUP reloads too, answering
    /// only in the log.
    #[command(after_help = EXIT_CODES)]
    Reload(reload::ReloadArgs),
    /// Ask the lock owner to hand the lock over (for maintenance), and wait until a peer owns it.
    ///
    /// The owner gives back its claimed, unstarted ticks, releases, and stays out of contention
    /// for the takeover delay; its running jobs follow their on_lost.
    #[command(after_help = EXIT_CODES)]
    Release(steer::ReleaseArgs),
    /// Give the nodes already in ZooKeeper the ACL the schedule asks for now (`acl`,
    /// `read_acl`): to close a ledger a fleet ran open, once every node runs with credentials
    /// (docs/UPGRADING.md), or to let a new `read_acl` identity read what is there.
    #[command(subcommand, after_help = EXIT_CODES)]
    Acl(acl::AclCommand),
    /// Make a named token for the HTTP API: prints the token (give it to the client; it is
    /// stored nowhere), then the line to append to `[http] tokens_file`, which holds only its
    /// SHA-256. Restart the node to apply.
    HttpToken {
        /// The token's name: recorded as who asked (`token:NAME`).
        name: String,
        #[command(flatten)]
        no_schedule: NoSchedule,
        /// Reads only (dashboards, the console): no trigger, submit, cancel, pause, resume or
        /// release.
        #[arg(long)]
        read_only: bool,
    },
    /// Print the man page or a shell's completions, generated from these very definitions
    /// (packaging: `zkcron generate man > zkcron.1`).
    Generate {
        /// What to print.
        #[arg(value_enum)]
        what: Generated,
        #[command(flatten)]
        no_schedule: NoSchedule,
        /// With `man`: write zkcron.1 and one page per subcommand (zkcron-run.1, …) into
        /// this directory instead of printing zkcron.1.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// What `zkcron generate` prints.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Generated {
    /// The man page (roff), section 1.
    Man,
    Bash,
    Zsh,
    Fish,
}

/// The `--config` of a command that reads no schedule: its own, hidden, so that the global one
/// is not offered in its help (clap propagates a global argument only where a command has no
/// argument of that id). Accepted and ignored.
#[derive(Debug, Args)]
struct NoSchedule {
    #[arg(
        id = "config",
        long = "config",
        short = 'c',
        hide = true,
        value_name = "FILE"
    )]
    _ignored: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// This process's id in the lock group, over `[lock] node_id` of every file: the one value
    /// each host sets, without a drop-in.
    #[arg(long, env = "ZKCRON_NODE_ID", value_name = "NODE_ID")]
    node_id: Option<String>,
}

#[derive(Debug, Args)]
struct LockDemoArgs {
    #[command(flatten)]
    no_schedule: NoSchedule,
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

impl Cli {
    /// Runs the command until it finishes or `shutdown` is cancelled; `reloads` carries SIGHUP.
    pub async fn run(
        self,
        shutdown: CancellationToken,
        reloads: mpsc::UnboundedReceiver<()>,
    ) -> Result<(), CliError> {
        let path = self.config;
        let quiet = |default: &str| {
            logging::init(
                LogFormat::Text,
                self.log_level.as_deref().unwrap_or(default),
            );
        };
        match self.command {
            Command::Run(args) => {
                let node_id = args.node_id.map(node_id_given).transpose()?;
                let mut loaded = config::load(&path)?;
                if let Some(node_id) = &node_id {
                    loaded.lock.node_id = Some(node_id.clone());
                }
                let level = self.log_level.unwrap_or_else(|| loaded.log.level.clone());
                logging::init(loaded.log.format, &level);
                daemon::warn_of_exposures(&loaded);
                run_daemon(path, loaded, node_id, (shutdown, reloads)).await
            }
            Command::Init(args) => init::init(&path, &args),
            Command::Check(args) => check::check(args, &path),
            Command::Status(args) => {
                quiet("warn");
                status::status(&client_config(&path)?, args).await
            }
            Command::History {
                job,
                limit,
                json,
                output,
            } => {
                quiet("warn");
                let shown = if json {
                    HistoryFormat::Json
                } else {
                    HistoryFormat::Table { output }
                };
                history(&client_config(&path)?, &JobName::new(job), limit, shown).await
            }
            Command::Logs(args) => {
                quiet("warn");
                logs::logs(&client_config(&path)?, args).await
            }
            Command::Events(args) => {
                quiet("warn");
                events::events(&client_config(&path)?, args).await
            }
            Command::Describe(args) => {
                quiet("warn");
                describe::describe(&client_config(&path)?, &path, args).await
            }
            Command::Audit(args) => {
                quiet("warn");
                audit::audit(&client_config(&path)?, args).await
            }
            Command::Submit(args) => {
                quiet("warn");
                delayed::submit(&client_config(&path)?, args).await
            }
            Command::Delayed { command } => {
                quiet("warn");
                delayed::run(&client_config(&path)?, command).await
            }
            Command::Trigger(args) => {
                quiet("warn");
                steer::trigger(&client_config(&path)?, args).await
            }
            Command::Backfill(args) => {
                quiet("warn");
                steer::backfill(&client_config(&path)?, args).await
            }
            Command::Pause(args) => {
                quiet("warn");
                steer::pause(&client_config(&path)?, args).await
            }
            Command::Resume(args) => {
                quiet("warn");
                steer::resume(&client_config(&path)?, args).await
            }
            Command::Release(args) => {
                quiet("warn");
                steer::release(&client_config(&path)?, args).await
            }
            Command::Reload(args) => {
                quiet("warn");
                reload::reload(args).await
            }
            Command::Acl(command) => {
                quiet("warn");
                acl::run(&client_config(&path)?, command).await
            }
            Command::Generate { what, dir, .. } => generate(what, dir.as_deref()),
            Command::HttpToken {
                name, read_only, ..
            } => http_token(&name, read_only),
            Command::LockDemo(args) => {
                quiet("info");
                lock_demo(args, shutdown).await
            }
        }
    }
}

/// The schedule as a client command needs it: every key checked, and on this host only what
/// reaching ZooKeeper takes looked up (none of the daemon's secrets, files or programs).
fn client_config(path: &Path) -> Result<Config, config::LoadError> {
    config::load_with(path, Lookups::ZooKeeper)
}

/// `--node-id` (or `ZKCRON_NODE_ID`), checked as `[lock] node_id` is.
fn node_id_given(id: String) -> Result<NodeId, CliError> {
    zkcron::ids::validate_znode_name(&id).map_err(|why| UsageError::NodeId {
        id: id.clone(),
        why,
    })?;
    Ok(NodeId::new(id))
}

async fn run_daemon(
    path: PathBuf,
    config: Config,
    node_id: Option<NodeId>,
    (shutdown, reloads): (CancellationToken, mpsc::UnboundedReceiver<()>),
) -> Result<(), CliError> {
    let me = identity::this_process(config.lock.node_id.as_ref())?;
    let settings = DaemonSettings {
        config_path: path,
        node_id,
        me,
        jitter: takeover_jitter(config.lock.takeover_delay),
        launcher: zkcron::run::Launcher::this_binary(),
    };
    Ok(daemon::run(config, settings, shutdown, reloads).await?)
}

/// How `zkcron history` prints its records.
#[derive(Clone, Copy)]
enum HistoryFormat {
    Json,
    /// A table; `output`: each run's kept output under its row.
    Table {
        output: bool,
    },
}

async fn history(
    config: &Config,
    job: &JobName,
    limit: usize,
    format: HistoryFormat,
) -> Result<(), CliError> {
    let client = zkcron::delayed::client::session_for(config).await?;
    let paths = config.lock.group_paths().ledger;
    let records = ledger::history(&client, &paths, job, limit).await?;
    let declared = config.jobs.iter().find(|j| &j.spec.name == job);
    if declared.is_none() {
        if records.is_empty() {
            return Err(UsageError::NoSuchJob {
                job: job.to_string(),
            }
            .into());
        }
        // Its runs outlive it: a job taken out of the schedule keeps its history.
        eprintln!("zkcron: job {job} is not in the schedule; these are its runs from before");
    }
    let HistoryFormat::Table { output } = format else {
        return document::print_document(
            1,
            serde_json::json!({"job": job.as_str(), "runs": records}),
        );
    };
    let tz = declared.map_or(chrono_tz::UTC, |j| j.timezone);
    let attempts = declared.map(|j| j.retries + 1);
    let mut lines = vec![format!(
        "{:<25}  {:<15}  {:<15}  {:<8}  {:>9}  {:<11}  {:>4}  {:>7}  {:>5}",
        "SCHEDULED", "NODE", "IP", "STARTED", "DURATION", "STATUS", "EXIT", "ATTEMPT", "TOKEN"
    )];
    for r in &records {
        lines.push(history_line(r, tz, attempts, output));
    }
    writeln!(std::io::stdout().lock(), "{}", lines.join("\n")).map_err(CliError::Stdout)
}

/// One record as a table row; `attempts`: how many the job's `retries` allow in all; `output`:
/// its kept output in full beneath it, instead of its last line.
fn history_line(r: &RunRecord, tz: chrono_tz::Tz, attempts: Option<u32>, output: bool) -> String {
    let at = |ms: i64| chrono::DateTime::from_timestamp_millis(ms).map(|t| t.with_timezone(&tz));
    let scheduled = at(r.scheduled_unix_ms).map_or("?".into(), |t| {
        t.format("%Y-%m-%d %H:%M:%S %:z").to_string()
    });
    let started = r
        .started_unix_ms
        .and_then(at)
        .map_or("-".into(), |t| t.format("%H:%M:%S").to_string());
    let duration = match (r.started_unix_ms, r.finished_unix_ms) {
        (Some(start), Some(end)) => {
            format!("{}.{:03}s", (end - start) / 1000, (end - start) % 1000)
        }
        _ => "-".into(),
    };
    let exit = match (r.exit_code, r.signal, r.http_status) {
        (Some(code), _, _) => code.to_string(),
        (None, Some(signal), _) => format!("sig{signal}"),
        (None, None, Some(status)) => status.to_string(),
        _ => "-".into(),
    };
    let status = r.status.as_str();
    // A promised retry: the run is not over.
    let retry = r
        .retry_at_unix_ms
        .and_then(at)
        .map_or(String::new(), |when| {
            let of = attempts.map_or(String::new(), |n| format!(" of {n}"));
            format!(
                "  retry: attempt {}{of} at {}",
                r.attempt + 1,
                when.format("%H:%M:%S")
            )
        });
    let mut line = format!(
        "{scheduled:<25}  {:<15}  {:<15}  {started:<8}  {duration:>9}  {:<11}  {exit:>4}  {:>7}  {:>5}{retry}",
        r.node_id.as_str(),
        r.ip,
        status,
        r.attempt,
        r.fencing_token.0
    );
    // Why it failed, under its row: a table cell would cut it short.
    if let Some(error) = &r.error {
        line.push_str(&format!("\n    {error}"));
    }
    // A calendar's run of skipped ticks, recorded at its first.
    if let Some(through) = r.skipped_through_unix_ms.and_then(at) {
        let ticks = r.missed_ticks.unwrap_or(1);
        line.push_str(&format!(
            "\n    {ticks} tick(s), through {}",
            through.format("%Y-%m-%d %H:%M:%S %:z")
        ));
    }
    // Which parents' runs a chained run came from.
    if !r.parents.is_empty() {
        let parents: Vec<String> = r
            .parents
            .iter()
            .map(|p| format!("{} run {} ({})", p.job, p.run_id, p.status.as_str()))
            .collect();
        line.push_str(&format!("\n    after: {}", parents.join(", ")));
    }
    match (&r.output, r.http_status) {
        (Some(kept), _) if output => {
            for said in kept.lines() {
                line.push_str(&format!("\n    | {said}"));
            }
        }
        (Some(answer), Some(_)) => {
            line.push_str(&format!("\n    answer: \"{}\"", answer.escape_debug()));
        }
        _ => {
            if let Some(last) = r.last_output_line() {
                line.push_str(&format!("\n    last output: \"{}\"", last.escape_debug()));
            }
        }
    }
    line
}

fn generate(what: Generated, dir: Option<&Path>) -> Result<(), CliError> {
    let mut command = <Cli as clap::CommandFactory>::command();
    if let (Generated::Man, Some(dir)) = (what, dir) {
        // The main page names each subcommand's page: all of them, so none is missing.
        return clap_mangen::generate_to(command, dir).map_err(|source| CliError::Write {
            path: dir.to_owned(),
            source,
        });
    }
    // Into memory first: clap_complete panics on a failed write (a closed pipe).
    let mut text = Vec::new();
    let shell = match what {
        Generated::Man => None,
        Generated::Bash => Some(clap_complete::Shell::Bash),
        Generated::Zsh => Some(clap_complete::Shell::Zsh),
        Generated::Fish => Some(clap_complete::Shell::Fish),
    };
    match shell {
        Some(shell) => clap_complete::generate(shell, &mut command, "zkcron", &mut text),
        None => clap_mangen::Man::new(command)
            .render(&mut text)
            .map_err(CliError::Stdout)?,
    }
    let mut out = std::io::stdout().lock();
    out.write_all(&text)
        .and_then(|()| out.flush())
        .map_err(CliError::Stdout)
}

fn http_token(name: &str, read_only: bool) -> Result<(), CliError> {
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let token = hex(&rand::random::<[u8; 32]>());
    let hash = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token.as_bytes());
    let kind = if read_only { "read" } else { "write" };
    print_lines(&[
        token.clone(),
        format!("{name} {kind} {}", hex(hash.as_ref())),
    ])
}

async fn lock_demo(args: LockDemoArgs, shutdown: CancellationToken) -> Result<(), CliError> {
    let node_id = args.node_id.map(NodeId::new);
    let me = identity::this_process(node_id.as_ref())?;
    let zk = ZkSettings::open(args.connect, args.session_timeout);
    let settings = LockSettings {
        paths: LockPaths::new(&args.root, &args.name),
        me,
        takeover_delay: args.takeover_delay,
        jitter: takeover_jitter(args.takeover_delay),
        heard: Default::default(),
        clock: ClockSettings {
            max_offset: Duration::from_secs(1),
            metrics: None,
            ensemble: Default::default(),
        },
        role: LockRole::alone(),
        delayed_store: None,
    };
    let (updates, mut received) = mpsc::unbounded_channel();
    let printer = tokio::spawn(async move {
        let mut out = std::io::stdout();
        while let Some(update) = received.recv().await {
            if let LockUpdate::Event(event) = update {
                writeln!(out, "{}", event_line(&event)).and_then(|()| out.flush())?;
            }
        }
        Ok::<(), std::io::Error>(())
    });
    // The demo claims no ticks: nothing reports a failed fence.
    let (_commands, mut commands) = mpsc::unbounded_channel();
    let result = driver::run(&zk, &settings, &shutdown, &updates, &mut commands).await;
    drop(updates);
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

fn event_line(event: &LockEvent) -> String {
    match event {
        LockEvent::Acquired { token } => format!("acquired token={token}"),
        LockEvent::Lost => "lost".into(),
        LockEvent::HandedOver => "handed over".into(),
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
