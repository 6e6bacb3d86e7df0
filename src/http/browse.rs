//! The reads the web console is built on, in the public API: the overview, the jobs table (paged,
//! filtered and sorted on the server), pending and recent submissions, one submission.
//!
//! Owns: those endpoints' shapes (docs/API.md). Must not: decide or write anything; the jobs
//! table's runs come from the console's [`RunIndex`], everything else from ZooKeeper as asked.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::{Deserialize, Serialize};

use super::auth::authorize;
use super::errors::{ApiError, chain};
use super::index::{JobRuns, RunDigest, RunIndex};
use super::state::{HttpState, NodeReport};
use crate::config::{JobConfig, TokenKind};
use crate::control::Pause;
use crate::delayed::client::Delayed;
use crate::delayed::submission::{AfterRun, SubmissionId};
use crate::ids::JobName;
use crate::ledger::control as control_store;
use crate::ledger::submissions::SubmissionState;
use crate::run::{RunRecord, RunStatus};
use crate::status::ClusterReport;

/// The most rows one page of the jobs table holds.
const MAX_PAGE: usize = 500;
/// How many bytes of a payload `GET /v1/submissions/{id}` shows.
const PREVIEW_BYTES: usize = 512;

/// How far the console's index has read the ledger.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct IndexProgress {
    pub ready: bool,
    pub jobs_loaded: usize,
    pub jobs_to_load: usize,
}

impl IndexProgress {
    fn of(index: &RunIndex) -> Self {
        index.state.read().map_or(
            Self {
                ready: false,
                jobs_loaded: 0,
                jobs_to_load: 0,
            },
            |state| Self {
                ready: state.ready,
                jobs_loaded: state.loaded,
                jobs_to_load: state.to_load,
            },
        )
    }
}

/// `GET /v1/overview`: this node, the cluster's locks and members, and what needs a look. The
/// node part answers even when ZooKeeper does not (`error` says why `cluster` is missing).
#[derive(Serialize)]
struct Overview {
    now_unix_ms: i64,
    node: NodeReport,
    cluster: Option<ClusterReport>,
    error: Option<String>,
    jobs_declared: usize,
    paused: Vec<PausedJob>,
    /// Jobs whose run is alive somewhere in the cluster now.
    running: Vec<JobName>,
    /// Jobs whose newest run failed, timed out or was interrupted.
    failing: Vec<JobName>,
    index: Option<IndexProgress>,
}

#[derive(Serialize)]
struct PausedJob {
    job: JobName,
    #[serde(flatten)]
    pause: Pause,
}

pub(super) async fn overview(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers, TokenKind::Read, peer)?;
    let config = state.config();
    let mut overview = Overview {
        now_unix_ms: Utc::now().timestamp_millis(),
        node: state.node_report(),
        cluster: None,
        error: None,
        jobs_declared: config.jobs.len(),
        paused: Vec::new(),
        running: Vec::new(),
        failing: Vec::new(),
        index: None,
    };
    let client = match state.client() {
        Ok(client) => client,
        Err(err) => {
            overview.error = Some(err.message);
            return Ok(axum::Json(overview).into_response());
        }
    };
    let paths = config.lock.group_paths();
    let read = async {
        let cluster = crate::status::cluster(&client, &config).await?;
        let pauses = control_store::pauses(&client, &paths.control).await?;
        Ok::<_, crate::status::StatusError>((cluster, pauses))
    };
    match read.await {
        Ok((cluster, pauses)) => {
            overview.cluster = Some(cluster);
            overview.paused = pauses
                .into_iter()
                .map(|(job, pause)| PausedJob { job, pause })
                .collect();
        }
        Err(err) => overview.error = Some(chain(&err)),
    }
    let index = state.index(&client);
    overview.running = running_now(&client, &paths.ledger, &index)
        .await
        .into_iter()
        .collect();
    overview.running.sort();
    if let Ok(runs) = index.state.read() {
        overview.failing = config
            .jobs
            .iter()
            .filter(|job| {
                runs.jobs
                    .get(&job.spec.name)
                    .and_then(JobRuns::last)
                    .is_some_and(|last| failing(last.status))
            })
            .map(|job| job.spec.name.clone())
            .collect();
    }
    overview.index = Some(IndexProgress::of(&index));
    Ok(axum::Json(overview).into_response())
}

fn failing(status: RunStatus) -> bool {
    matches!(
        status,
        RunStatus::Failed | RunStatus::TimedOut | RunStatus::Interrupted
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JobsQuery {
    /// Part of the name, any case.
    q: Option<String>,
    /// Exactly this job.
    name: Option<String>,
    /// `all` (default), `failing`, `ok`, `missed`, `running`, `paused`, `never`, `disabled`.
    status: Option<String>,
    group: Option<String>,
    /// `name` (default), `next`, `last` (newest run first), `missed` (most first).
    sort: Option<String>,
    offset: Option<usize>,
    limit: Option<usize>,
}

/// What a filter by status may ask for.
const STATUSES: [&str; 8] = [
    "all", "failing", "ok", "missed", "running", "paused", "never", "disabled",
];
const SORTS: [&str; 4] = ["name", "next", "last", "missed"];

#[derive(Serialize)]
struct JobsPage {
    /// Jobs declared in this node's schedule.
    total: usize,
    /// Jobs that pass the filter; `jobs` is `offset..offset+limit` of them.
    matched: usize,
    offset: usize,
    limit: usize,
    /// How many jobs each status filter would show (name and group filters applied).
    counts: std::collections::BTreeMap<&'static str, usize>,
    index: IndexProgress,
    jobs: Vec<JobRow>,
}

#[derive(Serialize)]
struct JobRow {
    name: JobName,
    group: String,
    schedule: Option<String>,
    schedule_words: Option<String>,
    /// The jobs whose runs it follows (`after`), and how they must have ended.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    after: Vec<JobName>,
    #[serde(skip_serializing_if = "Option::is_none")]
    after_status: Option<&'static str>,
    /// A broadcast job (`broadcast`): the tags a node needs to run it (empty: every node).
    #[serde(skip_serializing_if = "Option::is_none")]
    broadcast: Option<Vec<String>>,
    timezone: String,
    enabled: bool,
    paused: Option<Pause>,
    next_unix_ms: Option<i64>,
    running: bool,
    /// `false` while the index has not read this job's records yet: `last`, `missed_ticks` and
    /// `runs` are then unknown, not empty.
    indexed: bool,
    last: Option<RunDigest>,
    missed_ticks: u64,
    /// The newest runs, oldest first.
    runs: Vec<StripRun>,
}

#[derive(Serialize)]
struct StripRun {
    scheduled_unix_ms: i64,
    status: RunStatus,
}

/// One job's facts for filtering and sorting, before its row is built.
struct Facts<'a> {
    job: &'a JobConfig,
    paused: Option<&'a Pause>,
    running: bool,
    runs: Option<&'a JobRuns>,
}

impl Facts<'_> {
    fn last(&self) -> Option<&RunDigest> {
        self.runs.and_then(JobRuns::last)
    }

    fn is(&self, status: &str) -> bool {
        match status {
            "failing" => self.last().is_some_and(|last| failing(last.status)),
            "ok" => self
                .last()
                .is_some_and(|last| last.status == RunStatus::Succeeded),
            "missed" => self.runs.is_some_and(|runs| runs.missed_ticks() > 0),
            "running" => self.running,
            "paused" => self.paused.is_some(),
            "never" => self.runs.is_some_and(|runs| runs.strip.is_empty()),
            "disabled" => !self.job.enabled,
            _ => true,
        }
    }

    fn next(&self, now: chrono::DateTime<Utc>) -> Option<i64> {
        crate::fire::next::next_run(self.job, self.paused.is_some(), now)
            .ok()
            .map(|run| run.tick.timestamp_millis())
    }

    /// The job's row in the jobs table.
    fn row(&self, now: chrono::DateTime<Utc>) -> JobRow {
        let job = self.job;
        JobRow {
            name: job.spec.name.clone(),
            group: job
                .group
                .clone()
                .unwrap_or_else(|| crate::ids::DEFAULT_GROUP.to_owned()),
            schedule: job.schedule.as_ref().map(|s| s.expression().to_owned()),
            schedule_words: job
                .schedule
                .as_ref()
                .and_then(|s| crate::schedule::words::describe(s.expression())),
            after: job.after.iter().flat_map(|a| a.parents.clone()).collect(),
            after_status: job.after.as_ref().map(|a| a.status.as_str()),
            broadcast: job
                .broadcast
                .as_ref()
                .map(|b| b.requires.iter().cloned().collect()),
            timezone: job.timezone.name().to_owned(),
            enabled: job.enabled,
            paused: self.paused.cloned(),
            next_unix_ms: self.next(now),
            running: self.running,
            indexed: self.runs.is_some(),
            last: self.last().cloned(),
            missed_ticks: self.runs.map_or(0, JobRuns::missed_ticks),
            runs: self
                .runs
                .map(|runs| {
                    runs.strip
                        .iter()
                        .map(|(name, status)| StripRun {
                            scheduled_unix_ms: name.scheduled_unix_ms,
                            status: *status,
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// The jobs whose run is alive in the cluster now: those whose newest record says `running`
/// (the index), and those whose guard names a run (a `forbid` run that outlived its owner's
/// hold of the lock, or the first of an owner's).
async fn running_now(
    client: &crate::ledger::Ledger,
    ledger: &crate::layout::LedgerPaths,
    index: &RunIndex,
) -> std::collections::HashSet<JobName> {
    let mut running = crate::ledger::running_jobs(client, ledger).await;
    if let Ok(runs) = index.state.read() {
        running.extend(
            runs.jobs
                .iter()
                .filter(|(_, job)| job.running())
                .map(|(name, _)| name.clone()),
        );
    }
    running
}

fn bad_request(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, message)
}

pub(super) async fn jobs(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    query: Result<Query<JobsQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers, TokenKind::Read, peer)?;
    let Query(query) = query.map_err(|err| bad_request(err.body_text()))?;
    let (status, sort) = query.status_and_sort()?;
    let offset = query.offset.unwrap_or(0);
    let limit = query.limit.unwrap_or(50).clamp(1, MAX_PAGE);
    let client = state.client()?;
    let config = state.config();
    let paths = config.lock.group_paths();
    let pauses = control_store::pauses(&client, &paths.control)
        .await
        .map_err(|err| ApiError::unavailable(chain(&err)))?;
    let index = state.index(&client);
    let alive = running_now(&client, &paths.ledger, &index).await;
    let progress = IndexProgress::of(&index);
    let runs = index
        .state
        .read()
        .map_err(|_| ApiError::unavailable("the console's index failed; ask again"))?;
    let needle = query.q.as_deref().map(str::to_lowercase);
    let facts: Vec<Facts<'_>> = config
        .jobs
        .iter()
        .filter(|job| query.matches_name_and_group(job, needle.as_deref()))
        .map(|job| Facts {
            job,
            paused: pauses.get(&job.spec.name),
            running: alive.contains(&job.spec.name),
            runs: runs.jobs.get(&job.spec.name),
        })
        .collect();
    let counts = STATUSES
        .iter()
        .map(|status| (*status, facts.iter().filter(|f| f.is(status)).count()))
        .collect();
    let mut chosen: Vec<Facts<'_>> = facts.into_iter().filter(|f| f.is(status)).collect();
    let now = Utc::now();
    sort_facts(&mut chosen, sort, now);
    let matched = chosen.len();
    let rows = chosen
        .iter()
        .skip(offset)
        .take(limit)
        .map(|f| f.row(now))
        .collect();
    Ok(axum::Json(JobsPage {
        total: config.jobs.len(),
        matched,
        offset,
        limit,
        counts,
        index: progress,
        jobs: rows,
    })
    .into_response())
}

impl JobsQuery {
    /// The status filter and the sort asked for, each one of those there are.
    fn status_and_sort(&self) -> Result<(&str, &str), ApiError> {
        let status = self.status.as_deref().unwrap_or("all");
        if !STATUSES.contains(&status) {
            return Err(bad_request(format!(
                "status: {status:?} is not one of {}",
                STATUSES.join(", ")
            )));
        }
        let sort = self.sort.as_deref().unwrap_or("name");
        if !SORTS.contains(&sort) {
            return Err(bad_request(format!(
                "sort: {sort:?} is not one of {}",
                SORTS.join(", ")
            )));
        }
        Ok((status, sort))
    }

    /// Whether `job` passes the filters by name and group; `needle` is `q` in lower case.
    fn matches_name_and_group(&self, job: &JobConfig, needle: Option<&str>) -> bool {
        let name = job.spec.name.as_str();
        self.name.as_deref().is_none_or(|exact| exact == name)
            && needle.is_none_or(|needle| name.to_lowercase().contains(needle))
            && self.group.as_deref().is_none_or(|group| {
                job.group.as_deref().unwrap_or(crate::ids::DEFAULT_GROUP) == group
            })
    }
}

/// Sorts the jobs table's rows by `sort` (one of `SORTS`), then by name.
fn sort_facts(chosen: &mut [Facts<'_>], sort: &str, now: chrono::DateTime<Utc>) {
    match sort {
        "next" => {
            // Jobs that will not fire come last.
            chosen
                .sort_by_cached_key(|f| (f.next(now).unwrap_or(i64::MAX), f.job.spec.name.clone()));
        }
        "last" => chosen.sort_by_cached_key(|f| {
            (
                std::cmp::Reverse(f.last().map(|last| last.scheduled_unix_ms)),
                f.job.spec.name.clone(),
            )
        }),
        "missed" => chosen.sort_by_cached_key(|f| {
            (
                std::cmp::Reverse(f.runs.map(JobRuns::missed_ticks)),
                f.job.spec.name.clone(),
            )
        }),
        _ => chosen.sort_by(|a, b| a.job.spec.name.cmp(&b.job.spec.name)),
    }
}

/// A pending submission as the console lists it: no payload, its size.
#[derive(Serialize)]
pub(super) struct PendingRow {
    id: SubmissionId,
    job: JobName,
    due_unix_ms: i64,
    submitted_unix_ms: i64,
    payload_bytes: usize,
    requested_by: Option<String>,
    retry_of: Option<SubmissionId>,
    /// A chained job's submission: the parent's run it follows.
    after: Option<AfterRun>,
}

/// `GET /v1/submissions?state=pending`: in due order, from the oldest bucket.
pub(super) async fn pending(
    state: &HttpState,
    job: Option<&JobName>,
    limit: usize,
) -> Result<Response, ApiError> {
    let delayed = Delayed::with_client(state.client()?, &state.config());
    let pending = delayed
        .list(job, limit)
        .await
        .map_err(|err| ApiError::from_delayed(&err))?;
    let rows: Vec<PendingRow> = pending
        .into_iter()
        .map(|p| PendingRow {
            payload_bytes: p.submission.payload.len(),
            id: p.id,
            job: p.submission.job,
            due_unix_ms: p.submission.due_unix_ms,
            submitted_unix_ms: p.submission.submitted_unix_ms,
            requested_by: p.submission.requested_by,
            retry_of: p.submission.retry_of,
            after: p.submission.after,
        })
        .collect();
    Ok(axum::Json(rows).into_response())
}

/// `GET /v1/submissions?state=recent`: the newest submission runs across jobs, from the index.
pub(super) fn recent(
    state: &HttpState,
    job: Option<&JobName>,
    limit: usize,
) -> Result<Response, ApiError> {
    let index = state.index(&state.client()?);
    let runs = index
        .state
        .read()
        .map_err(|_| ApiError::unavailable("the console's index failed; ask again"))?;
    let recent: Vec<RunDigest> = runs
        .recent_submissions(super::index::RECENT_SUBMISSIONS)
        .into_iter()
        .filter(|run| job.is_none_or(|job| &run.job == job))
        .take(limit)
        .collect();
    Ok(axum::Json(recent).into_response())
}

/// The first bytes of a payload, as text when they are text, else as hex.
#[derive(Serialize, Debug, PartialEq, Eq)]
struct Preview {
    /// `text` or `hex`.
    kind: &'static str,
    shown: String,
    /// More bytes follow.
    truncated: bool,
}

fn preview(payload: &[u8]) -> Preview {
    let head = &payload[..payload.len().min(PREVIEW_BYTES)];
    let truncated = payload.len() > head.len();
    // A multi-byte character cut at the end of the head is still text.
    let text = match std::str::from_utf8(head) {
        Ok(text) => Some(text),
        Err(err) if err.error_len().is_none() => {
            std::str::from_utf8(&head[..err.valid_up_to()]).ok()
        }
        Err(_) => None,
    };
    match text.filter(|text| {
        !text
            .chars()
            .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    }) {
        Some(text) => Preview {
            kind: "text",
            shown: text.to_owned(),
            truncated,
        },
        None => Preview {
            kind: "hex",
            shown: head
                .chunks(16)
                .map(|line| {
                    line.iter()
                        .map(|byte| format!("{byte:02x}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect::<Vec<_>>()
                .join("\n"),
            truncated,
        },
    }
}

#[derive(Serialize)]
struct SubmissionDetail {
    id: SubmissionId,
    job: JobName,
    due_unix_ms: i64,
    submitted_unix_ms: i64,
    requested_by: Option<String>,
    retry_of: Option<SubmissionId>,
    after: Option<AfterRun>,
    payload_bytes: usize,
    payload: Preview,
    /// `pending`, `recorded` (see `record`), `remembered` (ran; record pruned) or `pruned`.
    state: &'static str,
    record: Option<Box<RunRecord>>,
}

/// `GET /v1/submissions/{id}`.
pub(super) async fn submission(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers, TokenKind::Read, peer)?;
    let id = super::errors::path_id(&id)?;
    let delayed = Delayed::with_client(state.client()?, &state.config());
    let Some((submission, found)) = delayed
        .show(&id)
        .await
        .map_err(|err| ApiError::from_delayed(&err))?
    else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no submission {id}"),
        ));
    };
    let (state_name, record) = match found {
        SubmissionState::Pending => ("pending", None),
        SubmissionState::Recorded(record) => ("recorded", Some(record)),
        SubmissionState::Remembered(_) => ("remembered", None),
        SubmissionState::Pruned => ("pruned", None),
    };
    Ok(axum::Json(SubmissionDetail {
        payload_bytes: submission.payload.len(),
        payload: preview(&submission.payload),
        id,
        job: submission.job,
        due_unix_ms: submission.due_unix_ms,
        submitted_unix_ms: submission.submitted_unix_ms,
        requested_by: submission.requested_by,
        retry_of: submission.retry_of,
        after: submission.after,
        state: state_name,
        record,
    })
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_is_shown_as_text_only_when_it_is_text() {
        assert_eq!(preview(b"{\"order\": 7}\n").kind, "text");
        let script = preview(b"<script>alert(1)</script>");
        assert_eq!(script.kind, "text", "escaping is the page's job, not hex");
        assert_eq!(script.shown, "<script>alert(1)</script>");
        let binary = preview(&[0, 1, 0xff, 0x41]);
        assert_eq!(binary.kind, "hex");
        assert_eq!(binary.shown, "00 01 ff 41");
        // A character cut by the preview's end is still text; the rest is marked truncated.
        let mut long = "é".repeat(PREVIEW_BYTES);
        long.push('x');
        let cut = preview(long.as_bytes());
        assert_eq!(cut.kind, "text");
        assert!(cut.truncated);
        assert_eq!(cut.shown.chars().count(), PREVIEW_BYTES / 2);
        let escape = preview(b"\x1b[31mred");
        assert_eq!(escape.kind, "hex", "terminal escapes are not shown as text");
    }
}
