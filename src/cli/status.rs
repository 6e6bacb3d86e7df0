//! `zkcron status` as a person reads it: the lock and its groups, the members and their
//! clocks, then one line per job in the spirit of `systemctl list-timers`.
//!
//! Owns: the text of the report (`--json` prints the report as it is).
//! Must not: gather anything itself (`zkcron::status` does).

use std::time::Duration;

use chrono::Utc;
use clap::Args;

use super::error::{CliError, print_lines};
use zkcron::JobName;
use zkcron::config::Config;
use zkcron::ids::NodeId;
use zkcron::ledger::Ledger;
use zkcron::status::health::{self, Health};
use zkcron::status::{JobReport, LimitReport, StatusReport};

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// One JSON object (a stable format: docs/API.md) instead of text.
    #[arg(long)]
    json: bool,
    /// Wait until every group has an owner that fires (and --member is live), up to this long
    /// (60s when no duration is given); then report as without it.
    #[arg(long, value_name = "DURATION", num_args = 0..=1, default_missing_value = "60s",
          value_parser = humantime::parse_duration)]
    wait: Option<Duration>,
    /// Also require this node to be a live member (exit 5 when it is not); without a value,
    /// this host's node id (`ZKCRON_NODE_ID`, else `lock.node_id`, else its IP).
    #[arg(long, value_name = "NODE_ID", num_args = 0..=1, default_missing_value = "")]
    member: Option<String>,
}

/// How often `--wait` looks again.
const WAIT_STEP: Duration = Duration::from_millis(500);

/// The report, then the exit code of the fleet's health: 0 when every group has an owner that
/// fires; [`health::NO_OWNER`], [`health::NOT_A_MEMBER`], [`health::UNREACHABLE`] otherwise.
pub async fn status(config: &Config, args: StatusArgs) -> Result<(), CliError> {
    let member = match args.member.as_deref() {
        None => None,
        // This host's id as `zkcron run` takes it: ZKCRON_NODE_ID, the file, its IP.
        Some("") => Some(
            match (std::env::var("ZKCRON_NODE_ID"), &config.lock.node_id) {
                (Ok(id), _) if !id.is_empty() => NodeId::new(id),
                (_, Some(id)) => id.clone(),
                _ => zkcron::identity::this_process(None)?.node_id,
            },
        ),
        Some(id) => Some(NodeId::new(id)),
    };
    let client = match args.wait {
        Some(wait) => wait_healthy(config, member.as_ref(), wait).await,
        None => None,
    };
    let report = gather(config, client, member.as_ref()).await?;
    if args.json {
        let text = serde_json::to_string(&report).map_err(|err| CliError::Stdout(err.into()))?;
        print_lines(&[text])?;
    } else {
        print_lines(&status_lines(&report, config))?;
    }
    if report.health.healthy {
        Ok(())
    } else {
        Err(CliError::Unhealthy(report.health))
    }
}

/// Waits up to `wait` until every group has an owner that fires (and `member` is live),
/// reading only the locks and the members, on one session once it is made; that session, if
/// one was made.
async fn wait_healthy(config: &Config, member: Option<&NodeId>, wait: Duration) -> Option<Ledger> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut client = None;
    loop {
        if client.is_none() {
            client = zkcron::delayed::client::session_for(config).await.ok();
        }
        if let Some(session) = &client {
            let cluster = zkcron::status::cluster(session, config).await;
            if cluster.is_ok_and(|cluster| cluster.health(member).healthy) {
                return client;
            }
        }
        if tokio::time::Instant::now() + WAIT_STEP >= deadline {
            return client;
        }
        tokio::time::sleep(WAIT_STEP).await;
    }
}

/// The report with the fleet's health judged for `member`, on `client` or a session made now;
/// ZooKeeper unreachable is [`health::UNREACHABLE`].
async fn gather(
    config: &Config,
    client: Option<Ledger>,
    member: Option<&NodeId>,
) -> Result<StatusReport, CliError> {
    let client = match client {
        Some(client) => client,
        None => zkcron::delayed::client::session_for(config)
            .await
            .map_err(|err| {
                CliError::Unhealthy(health::unreachable(zkcron::report::error_chain(&err)))
            })?,
    };
    let mut report = zkcron::status::gather(&client, config, Utc::now()).await?;
    report.health = report.cluster.health(member);
    Ok(report)
}

/// `zkcron status` as text: the lock, then one line per job in the spirit of
/// `systemctl list-timers`.
fn status_lines(report: &StatusReport, config: &Config) -> Vec<String> {
    let mut lines = lock_lines(report);
    if config.grouped() {
        lines.extend(group_lines(report));
    }
    lines.extend(job_lines(report, config));
    lines.extend(health_lines(&report.health));
    for drift in &report.cluster.schedule_drift {
        lines.push(format!(
            "schedule drift: {} (it would fire a different schedule after a takeover)",
            zkcron::drift::describe(drift)
        ));
    }
    lines.extend(report.limits.iter().map(limit_line));
    // What this host's own drop-ins set (node_id, tags, secrets' names): where a value came from.
    for (drop_in, set) in &config.drop_ins {
        lines.push(format!(
            "schedule read here with drop-in {}: {}",
            drop_in.display(),
            set.join(", ")
        ));
    }
    // Submissions for jobs the schedule no longer declares are kept; say so.
    for away in &report.undeclared_pending {
        lines.push(format!(
            "{:<20}  not in the schedule: {} pending submission(s) kept until it is back",
            away.job.as_str(),
            away.pending_submissions
        ));
    }
    lines
}

/// The verdict a script reads from the exit code, in words.
fn health_lines(health: &Health) -> Vec<String> {
    if health.healthy {
        return vec!["health:        every group has an owner that fires".to_owned()];
    }
    health
        .problems
        .iter()
        .map(|problem| format!("health:        {problem} (exit {})", health.exit_code))
        .collect()
}

/// The lock for `status`: its owner, its fencing token, and the members with their clocks.
fn lock_lines(report: &StatusReport) -> Vec<String> {
    let lock = &report.cluster.lock;
    let mut lines = vec![format!("lock {} ({})", lock.name, lock.path)];
    let session = lock.session.as_deref().unwrap_or("?");
    let owner = match (lock.state, &lock.owner) {
        ("squatter", _) => "a persistent node squats the lock path: no node can own it until an operator deletes it".to_owned(),
        ("held", Some(info)) => format!(
            "{} (ip {}, host {}, pid {}, version {}, since {}, session {session})",
            info.node_id,
            info.ip,
            info.host,
            info.pid,
            info.version,
            since(info.since_unix_ms),
        ),
        ("held", None) => format!("a foreign node with unreadable data (session {session})"),
        _ => "none".to_owned(),
    };
    lines.push(format!("owner:         {owner}"));
    lines.push(match lock.fencing_token {
        Some(token) => format!(
            "fencing token: {token} (latest acquisition by {})",
            lock.last_acquired_by
                .as_ref()
                .map_or_else(|| "?".to_owned(), ToString::to_string)
        ),
        None => "fencing token: none (never acquired)".to_owned(),
    });
    lines.push(format!("members:       {}", report.cluster.members.len()));
    for member in &report.cluster.members {
        let mut detail = match &member.info {
            Some(info) => format!(
                "ip {}, host {}, pid {}, version {}{}",
                info.ip,
                info.host,
                info.pid,
                info.version,
                info.schedule
                    .as_deref()
                    .map_or_else(String::new, schedule_detail)
            ),
            None => "unreadable data, or gone".to_owned(),
        };
        if let Some(clock) = &member.clock {
            detail.push_str(&clock_detail(clock));
        }
        lines.push(format!("  {}  {detail}", member.node_id));
    }
    lines
}

/// The jobs for `status`: a header, then a line per job and what it has pending, its times in
/// the job's zone.
fn job_lines(report: &StatusReport, config: &Config) -> Vec<String> {
    let mut lines = vec![format!(
        "{:<20}  {:<26}  {:<26}  {:<11}  {:<15}  {:>6}  {:<5}  {}",
        "JOB", "NEXT", "LAST", "STATUS", "NODE", "MISSED", "ALIVE", "PENDING"
    )];
    let more = if report.pending_complete { "" } else { "+" };
    for job in &report.jobs {
        let tz = config
            .jobs
            .iter()
            .find(|j| j.spec.name == job.name)
            .map_or(chrono_tz::UTC, |j| j.timezone);
        let format = |ms: i64| {
            chrono::DateTime::from_timestamp_millis(ms).map_or("?".into(), |at| {
                at.with_timezone(&tz)
                    .format("%Y-%m-%d %H:%M:%S %:z")
                    .to_string()
            })
        };
        lines.push(job_line(job, tz, more, &format));
        if let Some(requires) = &job.broadcast {
            let which = if requires.is_empty() {
                "every live node".to_owned()
            } else {
                let tags: Vec<&str> = requires.iter().map(String::as_str).collect();
                format!("every live node tagged {}", tags.join(", "))
            };
            lines.push(format!(
                "{:<20}  broadcast: {which} runs each tick (the last run shown is one node's)",
                ""
            ));
        }
        if let Some(pause) = &job.paused {
            lines.push(format!(
                "{:<20}  paused by {}: {}",
                "",
                pause.by,
                pause.reason.as_deref().unwrap_or("no reason given")
            ));
        }
        lines.extend(retry_lines(&job.pending_retries, &format));
        if let Some(deliveries) = &job.deliveries {
            lines.push(delivery_line(deliveries));
        }
    }
    lines
}

/// A job's line for `status`, under the header of `job_lines`. `more` marks a pending count
/// that may be short (`+`); `at` shows an instant in the job's zone `tz`.
fn job_line(job: &JobReport, tz: chrono_tz::Tz, more: &str, at: &dyn Fn(i64) -> String) -> String {
    let next = match (&job.paused, job.enabled, &job.schedule, job.next_unix_ms) {
        (Some(pause), _, _, _) => {
            format!("paused since {}", since_local(pause.since_unix_ms, tz))
        }
        (None, false, _, _) => "disabled".into(),
        (None, true, None, _) if !job.after.is_empty() => {
            let parents: Vec<&str> = job.after.iter().map(JobName::as_str).collect();
            format!("after {}", parents.join(", "))
        }
        (None, true, None, _) => "on demand".into(),
        (None, true, Some(_), next) => next.map_or("-".into(), at),
    };
    let (last_at, status, node) = match &job.last {
        Some(r) => (
            at(r.scheduled_unix_ms),
            r.status.as_str().to_owned(),
            r.node_id.to_string(),
        ),
        None => ("-".into(), "-".into(), "-".into()),
    };
    let alive = match &job.alive_run {
        Some(run_id) => format!("yes ({run_id})"),
        None => "no".into(),
    };
    let submitted = match job.next_due_unix_ms {
        Some(due) => format!("{}{more}, next due {}", job.pending_submissions, at(due)),
        None => format!("0{more}"),
    };
    format!(
        "{:<20}  {next:<26}  {last_at:<26}  {status:<11}  {node:<15}  {:>6}  {alive:<5}  {submitted}",
        job.name.as_str(),
        job.missed_ticks,
    )
}

/// A `[[limit]]` for `status`: how many of its places are held, by which runs, and who waits.
fn limit_line(limit: &LimitReport) -> String {
    let runs = |holders: &[zkcron::ledger::limits::LeaseHolder]| {
        holders
            .iter()
            .map(|h| format!("{} on {}", h.run_id, h.node_id))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut line = format!(
        "limit {}: {} of {} held",
        limit.name,
        limit.holders.len(),
        limit.max
    );
    if !limit.holders.is_empty() {
        line.push_str(&format!(" ({})", runs(&limit.holders)));
    }
    if !limit.waiting.is_empty() {
        line.push_str(&format!(
            "; {} waiting ({})",
            limit.waiting.len(),
            runs(&limit.waiting)
        ));
    }
    line
}

/// The lock groups for `status`: the balance, then one line per group (issue 19).
fn group_lines(report: &StatusReport) -> Vec<String> {
    let balance: Vec<String> = report
        .cluster
        .balance
        .iter()
        .map(|member| format!("{} {}", member.node_id, member.groups.len()))
        .collect();
    let mut lines = vec![
        format!(
            "groups:        {} (owned per member: {})",
            report.cluster.groups.len(),
            if balance.is_empty() {
                "no live member".to_owned()
            } else {
                balance.join(", ")
            }
        ),
        format!(
            "  {:<20}  {:<15}  {:>5}  {:<16}  JOBS",
            "GROUP", "OWNER", "TOKEN", "REQUIRES"
        ),
    ];
    for group in &report.cluster.groups {
        let owner = match (group.lock.state, &group.lock.owner) {
            ("held", Some(info)) if info.releasing => format!("{} (handing over)", info.node_id),
            ("held", Some(info)) => info.node_id.to_string(),
            ("held", None) => "foreign".to_owned(),
            ("squatter", _) => "squatter".to_owned(),
            _ => "none".to_owned(),
        };
        let token = group
            .lock
            .fencing_token
            .map_or_else(|| "-".to_owned(), |t| t.to_string());
        let requires = if group.requires.is_empty() {
            "-".to_owned()
        } else {
            group.requires.join(",")
        };
        const SHOWN: usize = 4;
        let mut jobs: Vec<&str> = group.jobs.iter().take(SHOWN).map(JobName::as_str).collect();
        let more = group.jobs.len().saturating_sub(SHOWN);
        let more = if more > 0 {
            format!(" +{more}")
        } else {
            String::new()
        };
        if jobs.is_empty() {
            jobs.push("-");
        }
        lines.push(format!(
            "  {:<20}  {owner:<15}  {token:>5}  {requires:<16}  {}{more}",
            group.name,
            jobs.join(", ")
        ));
    }
    for name in &report.cluster.unplaceable {
        lines.push(format!(
            "group {name}: no live member carries the tags it requires: its jobs do not fire"
        ));
    }
    lines
}

/// An HTTP target's kept deliveries for `status`: answers by class, then latency.
fn delivery_line(deliveries: &zkcron::status::DeliverySummary) -> String {
    let classes: Vec<String> = deliveries
        .by_class
        .iter()
        .map(|(class, count)| format!("{class} {count}"))
        .collect();
    let classes = if classes.is_empty() {
        "none yet".to_owned()
    } else {
        classes.join(", ")
    };
    let latency = match (
        deliveries.latency_p50_ms,
        deliveries.latency_p99_ms,
        deliveries.latency_max_ms,
    ) {
        (Some(p50), Some(p99), Some(max)) => {
            format!("; latency p50 {p50} ms, p99 {p99} ms, max {max} ms")
        }
        _ => String::new(),
    };
    format!("{:<20}  deliveries (kept records): {classes}{latency}", "")
}

/// A job's promised retries for `status`, soonest first, a few at most.
fn retry_lines(
    retries: &[zkcron::status::PendingRetry],
    at: &dyn Fn(i64) -> String,
) -> Vec<String> {
    const SHOWN: usize = 5;
    let mut lines: Vec<String> = retries
        .iter()
        .take(SHOWN)
        .map(|retry| {
            let what = match &retry.submission_id {
                Some(id) => format!("submission {id}"),
                None => format!("tick {}", at(retry.scheduled_unix_ms)),
            };
            format!(
                "{:<20}  retry: {what}, attempt {} of {} at {}",
                "",
                retry.attempt,
                retry.attempts,
                at(retry.at_unix_ms)
            )
        })
        .collect();
    if retries.len() > SHOWN {
        lines.push(format!(
            "{:<20}  … and {} more retries",
            "",
            retries.len() - SHOWN
        ));
    }
    lines
}

/// A member's clock for `status`: its offset to the servers, and to the fleet when that is
/// what keeps it out of contention.
fn clock_detail(clock: &zkcron::lock::clock::ClockVerdict) -> String {
    let seconds = |ms: i64| {
        let sign = if ms < 0 { '-' } else { '+' };
        format!("{sign}{}.{:03}s", ms.abs() / 1000, ms.abs() % 1000)
    };
    let mut detail = format!(", clock {} vs zookeeper", seconds(clock.offset_ms));
    if clock.skewed {
        detail.push_str(&format!(
            ", {} off the fleet: OUT OF CONTENTION (lock.max_clock_offset)",
            seconds(clock.off_fleet_ms)
        ));
    } else if clock.correction_ms != 0 {
        detail.push_str(&format!(
            ", alone: firing by the ensemble's clock (offset {})",
            zkcron::lock::clock_watch::offset_text(clock.correction_ms)
        ));
    }
    detail
}

fn since_local(unix_ms: i64, tz: chrono_tz::Tz) -> String {
    chrono::DateTime::from_timestamp_millis(unix_ms).map_or_else(
        || "?".to_owned(),
        |at| at.with_timezone(&tz).format("%Y-%m-%d %H:%M").to_string(),
    )
}

/// The schedule a member runs, as `zkcron reload` and the log name it, and since when.
fn schedule_detail(schedule: &zkcron::lock::node::ScheduleHash) -> String {
    match schedule.loaded_unix_ms {
        Some(loaded) => format!(", schedule {} loaded {}", schedule.total, since(loaded)),
        None => format!(", schedule {}", schedule.total),
    }
}

fn since(unix_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(unix_ms)
        .map_or_else(|| "?".to_owned(), |at| at.to_rfc3339())
}
