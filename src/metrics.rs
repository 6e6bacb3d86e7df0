//! Prometheus metrics of one node (`GET /metrics`, docs/API.md): the lock as this node sees it,
//! and per job its runs, lateness, durations, skipped and missed ticks.
//!
//! Owns: the registry, every metric's name, help text and labels, and the classification of a
//! record's reason into a small, fixed label set.
//! Must not: decide anything or do I/O: the drivers report what happened, the HTTP listener
//! encodes it.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use crate::ids::JobName;
use crate::run::{RunRecord, RunStatus};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabel {
    job: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabel {
    group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabel {
    limit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobStatusLabels {
    job: String,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobReasonLabels {
    job: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// Where the ZooKeeper session is, as `zkcron_zk_session_state` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// No session (starting, or expired and not yet replaced).
    None = 0,
    Connected = 1,
    /// A session that cannot reach a server right now.
    Disconnected = 2,
}

type Histograms = Family<JobLabel, Histogram, fn() -> Histogram>;

/// Lateness buckets: from a millisecond (on time) to an hour (caught up after an outage).
fn lateness_buckets() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 300.0, 3600.0,
    ])
}

/// Duration buckets: from 10 ms to a day.
fn duration_buckets() -> Histogram {
    Histogram::new([
        0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14_400.0, 86_400.0,
    ])
}

/// One node's metrics.
pub struct Metrics {
    registry: Registry,
    lock_owner: Gauge,
    fencing_token: Gauge,
    session_state: Gauge,
    acquisitions: Counter,
    lost: Counter,
    runs: Family<JobStatusLabels, Counter>,
    lateness: Histograms,
    duration: Histograms,
    last_success: Family<JobLabel, Gauge<f64, AtomicU64>>,
    missed: Family<JobReasonLabels, Counter>,
    skipped: Family<JobReasonLabels, Counter>,
    running: Family<JobLabel, Gauge>,
    delayed_pending: Gauge,
    delayed_moved: Counter,
    schedule_drift: Gauge,
    writes_refused: Gauge,
    clock_offset: Gauge<f64, AtomicU64>,
    clock_off_fleet: Gauge<f64, AtomicU64>,
    clock_skewed: Gauge,
    clock_correction: Gauge<f64, AtomicU64>,
    limit_waiting: Family<LimitLabel, Gauge>,
    limit_held: Family<LimitLabel, Gauge>,
    group_owner: Family<GroupLabel, Gauge>,
    group_token: Family<GroupLabel, Gauge>,
    group_acquisitions: Family<GroupLabel, Counter>,
    group_lost: Family<GroupLabel, Counter>,
    group_unplaceable: Family<GroupLabel, Gauge>,
    deliveries: Family<JobClassLabels, Counter>,
    notices: Family<NoticeLabels, Counter>,
    delivery_latency: Histograms,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NoticeLabels {
    job: String,
    channel: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobClassLabels {
    job: String,
    class: &'static str,
}

/// Delivery latency buckets: from half a millisecond (a receiver on this host) to a minute.
fn delivery_buckets() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 15.0, 60.0,
    ])
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every family, registered by concern (`register_*`): one entry a family.
    pub fn new() -> Self {
        let metrics = Self {
            lock_owner: Gauge::default(),
            fencing_token: Gauge::default(),
            session_state: Gauge::default(),
            acquisitions: Counter::default(),
            lost: Counter::default(),
            runs: Family::default(),
            lateness: Family::new_with_constructor(lateness_buckets),
            duration: Family::new_with_constructor(duration_buckets),
            last_success: Family::default(),
            missed: Family::default(),
            skipped: Family::default(),
            running: Family::default(),
            delayed_pending: Gauge::default(),
            delayed_moved: Counter::default(),
            schedule_drift: Gauge::default(),
            writes_refused: Gauge::default(),
            clock_offset: Gauge::default(),
            clock_off_fleet: Gauge::default(),
            clock_skewed: Gauge::default(),
            clock_correction: Gauge::default(),
            limit_waiting: Family::default(),
            limit_held: Family::default(),
            group_owner: Family::default(),
            group_token: Family::default(),
            group_acquisitions: Family::default(),
            group_lost: Family::default(),
            group_unplaceable: Family::default(),
            deliveries: Family::default(),
            notices: Family::default(),
            delivery_latency: Family::new_with_constructor(delivery_buckets),
            registry: Registry::default(),
        };
        let mut registry = Registry::default();
        // Counters get `_total`, the info metric `_info`, from the encoder.
        crate::tally::register(&mut registry);
        metrics.register_node(&mut registry);
        metrics.register_jobs(&mut registry);
        metrics.register_clock(&mut registry);
        metrics.register_groups(&mut registry);
        metrics.register_deliveries(&mut registry);
        Self {
            registry,
            ..metrics
        }
    }

    /// The lock, the session and what the owner watches over.
    fn register_node(&self, registry: &mut Registry) {
        registry.register(
            "zkcron_build",
            "The zkcron version of this node",
            Info::new(BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            }),
        );
        registry.register(
            "zkcron_lock_owner",
            "1 while this node owns the lock and may fire (connected), else 0",
            self.lock_owner.clone(),
        );
        registry.register(
            "zkcron_fencing_token",
            "This node's fencing token while it owns the lock (the epoch's version), else 0",
            self.fencing_token.clone(),
        );
        registry.register(
            "zkcron_zk_session_state",
            "The ZooKeeper session: 0 none, 1 connected, 2 disconnected",
            self.session_state.clone(),
        );
        registry.register(
            "zkcron_lock_acquisitions",
            "Times this node acquired the lock (each with a new fencing token)",
            self.acquisitions.clone(),
        );
        registry.register(
            "zkcron_lock_lost",
            "Times this node lost the lock (or could no longer prove it owned it)",
            self.lost.clone(),
        );
        registry.register(
            "zkcron_delayed_pending",
            "Delayed submissions pending in the lock group, as last counted by this node while owner",
            self.delayed_pending.clone(),
        );
        registry.register(
            "zkcron_delayed_moved_to_store",
            "Submissions this node found pending in ZooKeeper's due tree while the delayed queue is kept in PostgreSQL, and moved into the store",
            self.delayed_moved.clone(),
        );
        registry.register(
            "zkcron_schedule_drift",
            "1 while the owner sees members whose schedule differs from its own, else 0",
            self.schedule_drift.clone(),
        );
        registry.register(
            "zkcron_writes_refused",
            "1 while ZooKeeper refuses this node's claims and records (a quota exceeded, an ACL), else 0",
            self.writes_refused.clone(),
        );
    }

    /// Runs: how they ended, how late and how long, what was missed or skipped, limits.
    fn register_jobs(&self, registry: &mut Registry) {
        registry.register(
            "zkcron_job_runs",
            "Runs started by this node that ended, by final status",
            self.runs.clone(),
        );
        registry.register(
            "zkcron_job_fire_lateness_seconds",
            "From a run's scheduled instant (tick or due time) to its start, on this node",
            self.lateness.clone(),
        );
        registry.register(
            "zkcron_job_duration_seconds",
            "How long runs started by this node took, start to end",
            self.duration.clone(),
        );
        registry.register(
            "zkcron_job_last_success_timestamp_seconds",
            "Unix time of the end of the job's latest successful run on this node",
            self.last_success.clone(),
        );
        registry.register(
            "zkcron_job_missed_ticks",
            "Ticks recorded missed by this node (nobody fired them), by reason",
            self.missed.clone(),
        );
        registry.register(
            "zkcron_job_skipped",
            "Ticks recorded skipped by this node, by reason (paused, run_alive, other)",
            self.skipped.clone(),
        );
        registry.register(
            "zkcron_job_running",
            "Runs of the job alive on this node now",
            self.running.clone(),
        );
        registry.register(
            "zkcron_limit_waiting",
            "Runs on this node waiting in a [[limit]]'s queue for a lease",
            self.limit_waiting.clone(),
        );
        registry.register(
            "zkcron_limit_held",
            "Leases of a [[limit]] held by runs on this node",
            self.limit_held.clone(),
        );
    }

    /// This node's clock against the servers' and the fleet's.
    fn register_clock(&self, registry: &mut Registry) {
        registry.register(
            "zkcron_clock_offset_seconds",
            "This node's clock minus the ZooKeeper servers', measured on a write of its member node",
            self.clock_offset.clone(),
        );
        registry.register(
            "zkcron_clock_off_fleet_seconds",
            "This node's clock minus the fleet's (the median of the members' clocks and the servers')",
            self.clock_off_fleet.clone(),
        );
        registry.register(
            "zkcron_clock_skewed",
            "1 while this node's clock is off the fleet's by more than lock.max_clock_offset and it stays out of contention, else 0",
            self.clock_skewed.clone(),
        );
        registry.register(
            "zkcron_clock_correction_seconds",
            "What this node takes off its clock to fire by the ZooKeeper servers' (alone, and off theirs by more than lock.max_clock_offset), else 0",
            self.clock_correction.clone(),
        );
    }

    /// Each lock group this node contends for.
    fn register_groups(&self, registry: &mut Registry) {
        registry.register(
            "zkcron_group_owner",
            "1 while this node owns the lock group and may fire its jobs, else 0 (the default group is \"default\")",
            self.group_owner.clone(),
        );
        registry.register(
            "zkcron_group_fencing_token",
            "This node's fencing token of the lock group while it owns it, else 0",
            self.group_token.clone(),
        );
        registry.register(
            "zkcron_group_acquisitions",
            "Times this node acquired the lock group",
            self.group_acquisitions.clone(),
        );
        registry.register(
            "zkcron_group_lost",
            "Times this node lost the lock group (or could no longer prove it owned it)",
            self.group_lost.clone(),
        );
        registry.register(
            "zkcron_group_unplaceable",
            "1 while no live member carries every tag the lock group requires (its jobs do not fire), else 0",
            self.group_unplaceable.clone(),
        );
    }

    /// HTTP targets and failure notices.
    fn register_deliveries(&self, registry: &mut Registry) {
        registry.register(
            "zkcron_http_deliveries",
            "Runs of HTTP targets that ended here, by job and answer: the status class (2xx, 4xx, 5xx, …), error (no answer), timeout or cancelled",
            self.deliveries.clone(),
        );
        registry.register(
            "zkcron_http_delivery_seconds",
            "From sending an HTTP target's request to the end of its answer (or its timeout)",
            self.delivery_latency.clone(),
        );
        registry.register(
            "zkcron_notices",
            "Failure and recovery notices by job, channel (command, webhook) and result: sent, failed (the hook exited non-zero or was killed at its timeout), gave_up (the webhook never took it)",
            self.notices.clone(),
        );
    }

    /// A notice of `job` went out by `channel` (`command`, `webhook`) with this `result`.
    pub fn noticed(&self, job: &JobName, channel: &'static str, result: &'static str) {
        self.notices
            .get_or_create(&NoticeLabels {
                job: job.as_str().to_owned(),
                channel,
                result,
            })
            .inc();
    }

    /// An HTTP target's run ended: its answer's `class` (`2xx`, …, `error`, `timeout`,
    /// `cancelled`) after `seconds`.
    pub fn delivered(&self, job: &JobName, class: &'static str, seconds: f64) {
        let job = job.as_str().to_owned();
        self.delivery_latency
            .get_or_create(&JobLabel { job: job.clone() })
            .observe(seconds);
        self.deliveries
            .get_or_create(&JobClassLabels { job, class })
            .inc();
    }

    /// The Prometheus text format (OpenMetrics), for `GET /metrics`.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    /// The lock's status changed.
    pub fn lock_status(&self, may_fire: bool, token: Option<i32>, session: SessionState) {
        self.lock_owner.set(i64::from(may_fire));
        self.fencing_token.set(token.map_or(0, i64::from));
        self.session_state.set(session as i64);
    }

    pub fn acquired(&self) {
        self.acquisitions.inc();
    }

    pub fn lost(&self) {
        self.lost.inc();
    }

    /// Lock group `group`'s status on this node changed.
    pub fn group_status(&self, group: &str, may_fire: bool, token: Option<i32>) {
        let label = group_label(group);
        self.group_owner
            .get_or_create(&label)
            .set(i64::from(may_fire));
        self.group_token
            .get_or_create(&label)
            .set(token.map_or(0, i64::from));
    }

    pub fn group_acquired(&self, group: &str) {
        self.group_acquisitions
            .get_or_create(&group_label(group))
            .inc();
    }

    pub fn group_lost(&self, group: &str) {
        self.group_lost.get_or_create(&group_label(group)).inc();
    }

    /// Whether any live member may own lock group `group`.
    pub fn group_unplaceable(&self, group: &str, unplaceable: bool) {
        self.group_unplaceable
            .get_or_create(&group_label(group))
            .set(i64::from(unplaceable));
    }

    /// A run started at `started_unix_ms` for its instant `scheduled_unix_ms`.
    pub fn run_started(&self, job: &JobName, scheduled_unix_ms: i64, started_unix_ms: i64) {
        let label = job_label(job);
        let late_ms = (started_unix_ms - scheduled_unix_ms).max(0);
        // Milliseconds as f64: exact far beyond any lateness.
        #[allow(clippy::cast_precision_loss)]
        self.lateness
            .get_or_create(&label)
            .observe(late_ms as f64 / 1000.0);
        self.running.get_or_create(&label).inc();
    }

    /// A run's process ended after `seconds`.
    pub fn run_ended(&self, job: &JobName, seconds: f64) {
        let label = job_label(job);
        self.duration.get_or_create(&label).observe(seconds);
        self.running.get_or_create(&label).dec();
    }

    /// A run counted by [`Metrics::run_started`] whose process never started: its record could
    /// not be marked `running` first (issue 31). It is no longer running; it has no duration.
    pub fn run_not_started(&self, job: &JobName) {
        self.running.get_or_create(&job_label(job)).dec();
    }

    /// A record this node wrote: a run's final record, or a `skipped` or `missed` one.
    pub fn recorded(&self, record: &RunRecord) {
        let job = record.job.as_str().to_owned();
        match record.status {
            RunStatus::Skipped => {
                let reason = skip_reason(record.error.as_deref());
                self.skipped
                    .get_or_create(&JobReasonLabels { job, reason })
                    .inc();
            }
            RunStatus::Missed => {
                let reason = miss_reason(record.error.as_deref());
                self.missed
                    .get_or_create(&JobReasonLabels { job, reason })
                    .inc_by(record.missed_ticks.unwrap_or(1));
            }
            status @ (RunStatus::Succeeded
            | RunStatus::Failed
            | RunStatus::TimedOut
            | RunStatus::Cancelled
            | RunStatus::Interrupted) => {
                if status == RunStatus::Succeeded {
                    if let Some(end) = record.finished_unix_ms {
                        #[allow(clippy::cast_precision_loss)]
                        self.last_success
                            .get_or_create(&JobLabel { job: job.clone() })
                            .set(end as f64 / 1000.0);
                    }
                }
                self.runs
                    .get_or_create(&JobStatusLabels {
                        job,
                        status: status.as_str(),
                    })
                    .inc();
            }
            RunStatus::Claimed | RunStatus::Running => {}
        }
    }

    pub fn delayed_pending(&self, count: usize) {
        self.delayed_pending
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    pub fn delayed_moved(&self, count: usize) {
        self.delayed_moved
            .inc_by(u64::try_from(count).unwrap_or(u64::MAX));
    }

    pub fn schedule_drift(&self, drifting: bool) {
        self.schedule_drift.set(i64::from(drifting));
    }

    pub fn writes_refused(&self, refused: bool) {
        self.writes_refused.set(i64::from(refused));
    }

    /// A run of this node began (`+1`) or ended (`-1`) waiting for a lease of `limit`.
    pub fn limit_waiting(&self, limit: &str, change: i64) {
        self.limit_waiting
            .get_or_create(&LimitLabel {
                limit: limit.to_owned(),
            })
            .inc_by(change);
    }

    /// A run of this node took (`+1`) or gave back (`-1`) a lease of `limit`.
    pub fn limit_held(&self, limit: &str, change: i64) {
        self.limit_held
            .get_or_create(&LimitLabel {
                limit: limit.to_owned(),
            })
            .inc_by(change);
    }

    pub fn clock(&self, verdict: &crate::lock::clock::ClockVerdict) {
        // Milliseconds of a clock offset are far inside f64's exact range.
        #[allow(clippy::cast_precision_loss)]
        let seconds = |ms: i64| ms as f64 / 1000.0;
        self.clock_offset.set(seconds(verdict.offset_ms));
        self.clock_off_fleet.set(seconds(verdict.off_fleet_ms));
        self.clock_skewed.set(i64::from(verdict.skewed));
        self.clock_correction.set(seconds(verdict.correction_ms));
    }
}

fn group_label(group: &str) -> GroupLabel {
    GroupLabel {
        group: group.to_owned(),
    }
}

fn job_label(job: &JobName) -> JobLabel {
    JobLabel {
        job: job.as_str().to_owned(),
    }
}

/// A skipped record's reason as a label: the texts the fire machine writes.
fn skip_reason(error: Option<&str>) -> &'static str {
    match error {
        Some(text) if text.starts_with("paused by ") => "paused",
        Some(text) if text.contains("run of the job is") => "run_alive",
        _ => "other",
    }
}

/// A missed record's reason as a label, from the cause the fire machine writes first.
fn miss_reason(error: Option<&str>) -> &'static str {
    match error {
        Some(text) if text.contains("zookeeper was unreachable") => "zookeeper_unreachable",
        Some(text) if text.contains("no node owned the lock") => "no_owner",
        Some(text) if text.contains("stalled") || text.contains("ran past their time") => "stalled",
        Some(text) if text.contains("starting_deadline") => "starting_deadline",
        Some(text) if text.contains(crate::run::MISSED_BY_A_MEMBER) => "broadcast_node",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{FencingToken, NodeId};

    fn record(status: RunStatus, error: Option<&str>) -> RunRecord {
        let mut record = RunRecord::claimed(
            &JobName::new("report"),
            1_000,
            (&NodeId::new("n1"), "10.0.0.1"),
            FencingToken(3),
            1_000,
        );
        record.status = status;
        record.error = error.map(str::to_owned);
        record.finished_unix_ms = Some(2_500);
        record
    }

    #[test]
    fn the_text_format_has_every_documented_metric_with_its_help() {
        let metrics = Metrics::new();
        metrics.lock_status(true, Some(3), SessionState::Connected);
        metrics.acquired();
        let job = JobName::new("report");
        metrics.run_started(&job, 1_000, 1_002);
        metrics.run_ended(&job, 1.5);
        metrics.recorded(&record(RunStatus::Succeeded, None));
        metrics.recorded(&record(RunStatus::Skipped, Some("paused by ops@h: broken")));
        let mut missed = record(
            RunStatus::Missed,
            Some("beyond starting_deadline: no node could fire it in time"),
        );
        missed.missed_ticks = Some(4);
        metrics.recorded(&missed);
        let node_missed = record(RunStatus::Missed, Some(crate::run::MISSED_BY_A_MEMBER));
        metrics.recorded(&node_missed);
        metrics.limit_waiting("db", 1);
        metrics.limit_waiting("db", 1);
        metrics.limit_waiting("db", -1);
        metrics.limit_held("db", 1);
        metrics.clock(&crate::lock::clock::judge(-1_500, &[0], 1_000));
        let text = metrics.encode();
        for line in [
            "zkcron_build_info{version=\"",
            "zkcron_lock_owner 1",
            "zkcron_fencing_token 3",
            "zkcron_zk_session_state 1",
            "zkcron_lock_acquisitions_total 1",
            "zkcron_lock_lost_total 0",
            "zkcron_job_runs_total{job=\"report\",status=\"succeeded\"} 1",
            "zkcron_job_fire_lateness_seconds_bucket{le=\"0.0025\",job=\"report\"} 1",
            "zkcron_job_fire_lateness_seconds_count{job=\"report\"} 1",
            "zkcron_job_duration_seconds_sum{job=\"report\"} 1.5",
            "zkcron_job_last_success_timestamp_seconds{job=\"report\"} 2.5",
            "zkcron_job_skipped_total{job=\"report\",reason=\"paused\"} 1",
            "zkcron_job_missed_ticks_total{job=\"report\",reason=\"starting_deadline\"} 4",
            "zkcron_job_missed_ticks_total{job=\"report\",reason=\"broadcast_node\"} 1",
            "zkcron_job_running{job=\"report\"} 0",
            "zkcron_delayed_pending 0",
            "zkcron_schedule_drift 0",
            "zkcron_writes_refused 0",
            "zkcron_limit_waiting{limit=\"db\"} 1",
            "zkcron_limit_held{limit=\"db\"} 1",
            "zkcron_clock_offset_seconds -1.5",
            "zkcron_clock_off_fleet_seconds -1.5",
            "zkcron_clock_skewed 1",
            "zkcron_clock_correction_seconds 0",
            "# HELP zkcron_lock_owner 1 while this node owns the lock",
        ] {
            assert!(text.contains(line), "{line:?} in\n{text}");
        }
    }

    #[test]
    fn a_run_that_never_started_is_not_left_running() {
        let metrics = Metrics::new();
        let job = JobName::new("close");
        metrics.run_started(&job, 1_000, 1_000);
        metrics.run_not_started(&job);
        let text = metrics.encode();
        assert!(
            text.contains("zkcron_job_running{job=\"close\"} 0"),
            "issue 31: {text}"
        );
    }

    #[test]
    fn reasons_become_a_small_fixed_label_set() {
        assert_eq!(skip_reason(Some("paused by a@b")), "paused");
        assert_eq!(
            skip_reason(Some(
                "a run of the job is still alive on this node (concurrency = forbid)"
            )),
            "run_alive"
        );
        assert_eq!(skip_reason(None), "other");
        assert_eq!(
            miss_reason(Some(
                "claimed, but too late to start (the node was stalled)"
            )),
            "stalled"
        );
        assert_eq!(
            miss_reason(Some(
                "no node owned the lock; not caught up (misfire = skip)"
            )),
            "no_owner"
        );
        assert_eq!(
            miss_reason(Some(
                "zookeeper was unreachable; older than starting_deadline (1m)"
            )),
            "zookeeper_unreachable"
        );
        assert_eq!(miss_reason(Some("something new")), "other");
    }
}
