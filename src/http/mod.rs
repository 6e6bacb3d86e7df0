//! One small HTTP listener per node (`[http] listen`, docs/API.md): metrics, health, status and
//! history to read; trigger, submissions, pause, resume and release to steer; and the web console
//! (`/console/`), a page built on those same endpoints.
//!
//! Owns: routes, the bearer token check on write endpoints, JSON error bodies and status codes.
//! Must not: hold policy. Reads go to ZooKeeper through `status` and `ledger`; writes go through
//! `control::client` and `delayed::client`, the same code the CLI uses, and the owner acts on
//! them through its fire machine like on any other input.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use chrono::Utc;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::command::{Command, CommandError, Door, Outcome};
use crate::config::TokenKind;
use crate::control::client::{Released, Steer};
use crate::delayed::client::{Delayed, Rescheduled, SubmitRequest};
use crate::delayed::submission::SubmissionId;
use crate::ids::{JobName, NodeId};
use crate::ledger::control::Paused;

mod auth;
mod browse;
mod console;
mod errors;
mod events;
mod index;
mod output;
mod state;

use auth::authorize;
use errors::{ApiError, chain, path_id};
use state::NodeReport;
pub use state::{ConsoleIndex, HttpState};

/// The most runs `GET /v1/jobs/{job}/runs` returns.
const MAX_RUNS: usize = 1000;

/// Why the listener could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen for HTTP on {listen}")]
pub struct BindError {
    pub listen: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// Binds `listen` now (so a taken port fails the start) and serves until `shutdown`; returns
/// the serving task and the address bound.
///
/// # Errors
/// The address cannot be bound.
pub async fn start(
    listen: SocketAddr,
    state: HttpState,
    shutdown: CancellationToken,
) -> Result<(tokio::task::JoinHandle<()>, SocketAddr), BindError> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| BindError { listen, source })?;
    let bound = listener.local_addr().unwrap_or(listen);
    tracing::info!(listen = %bound, "http listener up");
    let console = Arc::clone(&state.console);
    let hubs = Arc::clone(&state.events);
    let app = router(state);
    let served = tokio::spawn(async move {
        // The index's watch goes with the listener.
        let _stop_index = console.stop.clone().drop_guard();
        // So do the event hub's, and its followers' streams.
        let _stop_events = hubs.stop_guard();
        let served = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
        if let Err(err) = served {
            tracing::error!(error = %err, "http listener failed");
        }
    });
    Ok((served, bound))
}

fn router(state: HttpState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/fleetz", get(fleetz))
        .route("/v1/status", get(status))
        .route("/v1/overview", get(browse::overview))
        .route("/v1/jobs", get(browse::jobs))
        .route("/v1/jobs/{job}/runs", get(runs))
        .route("/v1/jobs/{job}/runs/{run}/output", get(output::run_output))
        .route("/v1/jobs/{job}/trigger", post(trigger))
        .route("/v1/jobs/{job}/backfill", post(backfill))
        .route("/v1/jobs/{job}/submissions", post(submit))
        .route("/v1/jobs/{job}/pause", post(pause))
        .route("/v1/jobs/{job}/resume", post(resume))
        .route("/v1/submissions", get(submissions))
        .route(
            "/v1/submissions/{id}",
            delete(cancel).get(browse::submission),
        )
        .route("/v1/submissions/{id}/reschedule", post(reschedule))
        .route("/v1/submissions/{id}/retry", post(retry))
        .route("/v1/release", post(release))
        .route("/v1/audit", get(audit))
        .route("/v1/events", get(events::events))
        .merge(console::routes())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            audit_refused_writes,
        ))
        .with_state(state)
        .layer(axum::middleware::map_response(console::security_headers))
}

/// A write refused for its token (none, a wrong one, a read-only one) goes into the audit trail
/// once, with the address it came from: someone tried to act.
async fn audit_refused_writes(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let who = crate::audit::Who::http(None, peer.ip(), auth::given_name(request.headers()));
    let actor = http_actor(who, request.headers());
    let response = next.run(request).await;
    let refused = matches!(
        response.status(),
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
    );
    if refused && method != axum::http::Method::GET {
        if let Ok(door) = door_of(&state) {
            let why = format!("refused: {}", response.status());
            door.refused(format!("{method} {path}"), why, &actor).await;
        }
    }
    response
}

async fn metrics(State(state): State<HttpState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

#[derive(Serialize)]
struct Ready {
    ready: bool,
    reason: Option<&'static str>,
}

/// Ready: a session is up and the schedule is loaded. Not: "this node owns the lock".
async fn readyz(State(state): State<HttpState>) -> Response {
    let connected = state.view.borrow().lock.connected;
    let (code, reason) = if connected {
        (StatusCode::OK, None)
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Some("no zookeeper session"),
        )
    };
    (
        code,
        axum::Json(Ready {
            ready: connected,
            reason,
        }),
    )
        .into_response()
}

/// The fleet's health, as `zkcron status` exits on it: 200 when every lock group has an owner
/// that fires, 503 with the problems otherwise (or when this node has no session). Open like
/// `/readyz`: a load balancer or a probe reads it without a token.
async fn fleetz(State(state): State<HttpState>) -> Response {
    use crate::status::health;
    let health = match state.client() {
        Ok(client) => match crate::status::cluster(&client, &state.config()).await {
            Ok(cluster) => cluster.health(None),
            Err(err) => health::unreachable(chain(&err)),
        },
        Err(_) => health::unreachable("no zookeeper session on this node".to_owned()),
    };
    let code = if health.healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(health)).into_response()
}

#[derive(Serialize)]
struct StatusBody {
    node: NodeReport,
    #[serde(flatten)]
    group: crate::status::StatusReport,
}

async fn status(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers, TokenKind::Read, peer)?;
    let client = state.client()?;
    let config = state.config();
    let group = crate::status::gather(&client, &config, Utc::now())
        .await
        .map_err(|err| ApiError::unavailable(chain(&err)))?;
    let node = state.node_report();
    Ok(axum::Json(StatusBody { node, group }).into_response())
}

#[derive(Deserialize)]
struct RunsQuery {
    limit: Option<usize>,
}

async fn runs(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(job): Path<String>,
    Query(query): Query<RunsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers, TokenKind::Read, peer)?;
    let client = state.client()?;
    let job = JobName::new(job);
    let limit = query.limit.unwrap_or(20).min(MAX_RUNS);
    let config = state.config();
    let paths = config.lock.group_paths().ledger;
    let records = crate::ledger::history(&client, &paths, &job, limit)
        .await
        .map_err(|err| ApiError::unavailable(chain(&err)))?;
    Ok(axum::Json(records).into_response())
}

/// `GET /v1/audit?since_unix_ms=…&job=…`: the operator actions since then (the last day by
/// default), oldest first.
#[derive(Deserialize)]
struct AuditQuery {
    since_unix_ms: Option<i64>,
    job: Option<String>,
}

async fn audit(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<AuditQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers, TokenKind::Read, peer)?;
    let client = state.client()?;
    let config = state.config();
    let paths = crate::layout::AuditPaths::new(&config.lock.paths());
    let day_ago = chrono::Utc::now().timestamp_millis() - 24 * 3600 * 1000;
    let since = query.since_unix_ms.unwrap_or(day_ago);
    let entries: Vec<crate::audit::AuditEntry> = crate::ledger::audit::read(&client, &paths, since)
        .await
        .map_err(|err| ApiError::unavailable(chain(&err)))?
        .into_iter()
        .filter(|entry| query.job.is_none() || entry.job == query.job)
        .collect();
    Ok(axum::Json(entries).into_response())
}

#[derive(Serialize)]
struct Accepted {
    submission_id: String,
}

async fn trigger(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(job): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (door, actor) = writer(&state, &headers, peer)?;
    let job = JobName::new(job);
    let Outcome::Triggered(id) = door.execute(Command::Trigger { job }, &actor).await? else {
        return Err(CommandError::Mismatched.into());
    };
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(Accepted {
            submission_id: id.to_string(),
        }),
    )
        .into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmissionsQuery {
    state: Option<String>,
    job: Option<String>,
    limit: Option<usize>,
}

/// `GET /v1/submissions?state=pending|recent|failed[&job=J][&limit=N]`: pending ones in due
/// order; the newest runs; the dead letters, as run records.
async fn submissions(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    query: Result<Query<SubmissionsQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers, TokenKind::Read, peer)?;
    let Query(query) =
        query.map_err(|err| ApiError::new(StatusCode::BAD_REQUEST, err.body_text()))?;
    let job = query.job.map(JobName::new);
    let limit = query.limit.unwrap_or(50).min(MAX_RUNS);
    match query.state.as_deref() {
        Some("failed") => {}
        Some("pending") => return browse::pending(&state, job.as_ref(), limit).await,
        Some("recent") => return browse::recent(&state, job.as_ref(), limit),
        _ => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "state: one of \"pending\", \"recent\" and \"failed\"",
            ));
        }
    }
    let delayed = Delayed::with_client(state.client()?, &state.config());
    let failed = delayed
        .failed(job.as_ref(), limit)
        .await
        .map_err(|err| ApiError::from_delayed(&err))?;
    Ok(axum::Json(failed).into_response())
}

/// A due time in a request body: exactly one of `at` and `in`, or (`optional`) neither: now.
fn body_due(
    at: Option<String>,
    within: Option<String>,
    optional: bool,
) -> Result<chrono::DateTime<Utc>, ApiError> {
    match (at, within) {
        (Some(at), None) => crate::delayed::due::due_at(&at, None).map_err(|err| {
            ApiError::new(StatusCode::BAD_REQUEST, format!("\"at\": {}", chain(&err)))
        }),
        (None, Some(within)) => crate::delayed::due::due_in(&within, Utc::now()).map_err(|err| {
            ApiError::new(StatusCode::BAD_REQUEST, format!("\"in\": {}", chain(&err)))
        }),
        (None, None) if optional => Ok(Utc::now()),
        _ => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "give exactly one of \"at\" (RFC 3339) and \"in\" (a duration)",
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WhenBody {
    at: Option<String>,
    #[serde(rename = "in")]
    in_: Option<String>,
    /// A retry's new id.
    id: Option<String>,
}

#[derive(Serialize)]
struct RescheduledAnswer {
    submission_id: String,
    due_unix_ms: i64,
    /// `false`: it was due then already; nothing changed.
    moved: bool,
}

/// `POST /v1/submissions/{id}/reschedule`: `{"at": …}` or `{"in": …}`.
async fn reschedule(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<axum::Json<WhenBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let (door, actor) = writer(&state, &headers, peer)?;
    let axum::Json(body) =
        body.map_err(|err| ApiError::new(StatusCode::BAD_REQUEST, err.body_text()))?;
    if body.id.is_some() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "\"id\": a reschedule keeps the submission's id",
        ));
    }
    let id = path_id(&id)?;
    let due = body_due(body.at, body.in_, false)?;
    let command = Command::Reschedule {
        id: id.clone(),
        due,
    };
    let (moved, submission) = match door.execute(command, &actor).await? {
        Outcome::Rescheduled(Rescheduled::Moved(s)) => (true, s),
        Outcome::Rescheduled(Rescheduled::AlreadyThere(s)) => (false, s),
        _ => return Err(CommandError::Mismatched.into()),
    };
    Ok(axum::Json(RescheduledAnswer {
        submission_id: id.to_string(),
        due_unix_ms: submission.due_unix_ms,
        moved,
    })
    .into_response())
}

/// `POST /v1/submissions/{id}/retry`: `{"at"|"in": …, "id": NEW}`, all optional (due now, a
/// generated id).
async fn retry(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Option<axum::Json<WhenBody>>,
) -> Result<Response, ApiError> {
    let (door, actor) = writer(&state, &headers, peer)?;
    let body = body.map_or(
        WhenBody {
            at: None,
            in_: None,
            id: None,
        },
        |axum::Json(body)| body,
    );
    let id = path_id(&id)?;
    let due = body_due(body.at, body.in_, true)?;
    let new_id = body.id.as_deref().map(path_id).transpose()?;
    let Outcome::Retried(receipt) = door
        .execute(Command::Retry { id, due, new_id }, &actor)
        .await?
    else {
        return Err(CommandError::Mismatched.into());
    };
    Ok(submitted(&receipt))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BackfillBody {
    /// RFC 3339, or a local date-time in the job's zone.
    from: String,
    to: String,
    #[serde(default)]
    include_pruned: bool,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    with_children: bool,
}

impl BackfillBody {
    fn options(&self) -> crate::control::client::BackfillOptions {
        crate::control::client::BackfillOptions {
            include_pruned: self.include_pruned,
            dry_run: self.dry_run,
            with_children: self.with_children,
        }
    }
}

#[derive(Serialize)]
struct BackfillAnswer {
    /// Ticks in the range.
    ticks: usize,
    /// With a record: left alone.
    recorded: usize,
    /// Older than every record kept (run only with `include_pruned`).
    unknown: usize,
    /// What runs (Unix ms), or would run in a dry run.
    to_run: Vec<i64>,
    /// False for a dry run, or when nothing is to run.
    requested: bool,
}

/// `POST /v1/jobs/{job}/backfill`: `{"from": …, "to": …, "include_pruned": false, "dry_run":
/// false}`; 202 once requested, 200 for a dry run (or nothing to run).
async fn backfill(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(job): Path<String>,
    headers: HeaderMap,
    body: Result<axum::Json<BackfillBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let (door, actor) = writer(&state, &headers, peer)?;
    let axum::Json(body) =
        body.map_err(|err| ApiError::new(StatusCode::BAD_REQUEST, err.body_text()))?;
    let config = state.config();
    let job = JobName::new(job);
    let zone = config
        .jobs
        .iter()
        .find(|j| j.spec.name == job)
        .map(|j| j.timezone);
    let instant = |key: &str, text: &str| {
        crate::delayed::due::due_at(text, zone).map_err(|err| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("\"{key}\": {}", chain(&err)),
            )
        })
    };
    let command = Command::Backfill {
        job,
        from: instant("from", &body.from)?,
        to: instant("to", &body.to)?,
        options: body.options(),
    };
    let Outcome::Backfilled(done) = door.execute(command, &actor).await? else {
        return Err(CommandError::Mismatched.into());
    };
    let to_run = done.plan.to_run(body.include_pruned);
    let requested = !done.requested.is_empty();
    let answer = BackfillAnswer {
        ticks: done.plan.ticks.len(),
        recorded: done
            .plan
            .count(|p| matches!(p, crate::control::backfill::TickPlan::Recorded(_))),
        unknown: done
            .plan
            .count(|p| p == crate::control::backfill::TickPlan::Unknown),
        to_run,
        requested,
    };
    let code = if requested {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((code, axum::Json(answer)).into_response())
}

/// `POST /v1/jobs/{job}/submissions`: exactly one of `at` and `in`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitBody {
    /// RFC 3339.
    at: Option<String>,
    /// A duration from now, e.g. "30m".
    #[serde(rename = "in")]
    in_: Option<String>,
    id: Option<String>,
    /// The run's stdin, as text.
    payload: Option<String>,
}

/// 201 for a new submission, 200 for the same request made before under its id.
fn submitted(receipt: &crate::delayed::client::Receipt) -> Response {
    let created = receipt.outcome == crate::delayed::client::Submitted::Created;
    let code = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let answer = Submitted {
        submission_id: receipt.id.to_string(),
        created,
    };
    (code, axum::Json(answer)).into_response()
}

#[derive(Serialize)]
struct Submitted {
    submission_id: String,
    /// `false`: the same request was submitted before under this id; nothing changed.
    created: bool,
}

async fn submit(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(job): Path<String>,
    headers: HeaderMap,
    body: Result<axum::Json<SubmitBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let (door, actor) = writer(&state, &headers, peer)?;
    let axum::Json(body) =
        body.map_err(|err| ApiError::new(StatusCode::BAD_REQUEST, err.body_text()))?;
    let due = body_due(body.at, body.in_, false)?;
    let id = body
        .id
        .as_deref()
        .map(SubmissionId::parse)
        .transpose()
        .map_err(|err| ApiError::new(StatusCode::BAD_REQUEST, format!("\"id\": {err}")))?;
    // The caller's trace context, as W3C Trace Context propagates it: the run's span links
    // to it.
    let traceparent = headers
        .get("traceparent")
        .map(|value| value.to_str().unwrap_or("not text").to_owned());
    let command = Command::Submit(SubmitRequest {
        traceparent,
        job: JobName::new(job),
        due,
        id,
        payload: body.payload.unwrap_or_default().into_bytes(),
    });
    let Outcome::Submitted(receipt) = door.execute(command, &actor).await? else {
        return Err(CommandError::Mismatched.into());
    };
    Ok(submitted(&receipt))
}

async fn cancel(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (door, actor) = writer(&state, &headers, peer)?;
    let id = path_id(&id)?;
    door.execute(Command::Cancel { id }, &actor).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PauseBody {
    reason: Option<String>,
}

#[derive(Serialize)]
struct PauseAnswer {
    job: String,
    paused: bool,
    /// The pause as stored (an earlier one when it was paused already).
    by: Option<String>,
    reason: Option<String>,
}

async fn pause(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(job): Path<String>,
    headers: HeaderMap,
    body: Option<axum::Json<PauseBody>>,
) -> Result<Response, ApiError> {
    let (door, actor) = writer(&state, &headers, peer)?;
    let reason = body.and_then(|axum::Json(body)| body.reason);
    let name = JobName::new(job);
    let command = Command::Pause {
        job: name.clone(),
        reason: reason.clone(),
    };
    let stored = match door.execute(command, &actor).await? {
        Outcome::Paused(Paused::Now) => crate::control::Pause::new(reason.as_deref(), &actor.by, 0),
        Outcome::Paused(Paused::Already(pause)) => pause,
        _ => return Err(CommandError::Mismatched.into()),
    };
    Ok(axum::Json(PauseAnswer {
        job: name.to_string(),
        paused: true,
        by: Some(stored.by),
        reason: stored.reason,
    })
    .into_response())
}

async fn resume(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(job): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (door, actor) = writer(&state, &headers, peer)?;
    let name = JobName::new(job);
    let command = Command::Resume { job: name.clone() };
    let Outcome::Resumed(was) = door.execute(command, &actor).await? else {
        return Err(CommandError::Mismatched.into());
    };
    Ok(axum::Json(PauseAnswer {
        job: name.to_string(),
        paused: false,
        by: was.as_ref().map(|p| p.by.clone()),
        reason: was.and_then(|p| p.reason),
    })
    .into_response())
}

#[derive(Serialize)]
struct ReleaseAnswer {
    from: NodeId,
    to: NodeId,
    after_ms: u128,
}

impl ReleaseAnswer {
    fn of(released: Released) -> Response {
        axum::Json(ReleaseAnswer {
            from: released.from,
            to: released.to,
            after_ms: released.after.as_millis(),
        })
        .into_response()
    }
}

#[derive(Deserialize)]
struct ReleaseQuery {
    /// A `[[group]]`'s name; the default group's lock without it (or with `default`).
    group: Option<String>,
}

/// This node hands the lock (or `?group=NAME`'s) over, for its maintenance; refused unless it is
/// the owner.
async fn release(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<ReleaseQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (door, actor) = writer(&state, &headers, peer)?;
    let group = query
        .group
        .filter(|group| group != crate::ids::DEFAULT_GROUP);
    // The default group's owner is known here; another group's is checked against the lock.
    if group.is_none() && state.view.borrow().lock.token.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "{} does not own the lock: ask the owner's API, or use zkcron release",
                state.me
            ),
        ));
    }
    let owner = group.is_some().then(|| state.me.clone());
    let Outcome::Released(released) = door
        .execute(Command::Release { group, owner }, &actor)
        .await?
    else {
        return Err(CommandError::Mismatched.into());
    };
    Ok(ReleaseAnswer::of(released))
}

/// The door over the daemon's session.
fn door_of(state: &HttpState) -> Result<Door, ApiError> {
    let config = state.config();
    Ok(Door::over(
        Steer::with_client(state.client()?, &config),
        &config,
    ))
}

/// A write's door and its actor, established once: the request must prove its right to write.
fn writer(
    state: &HttpState,
    headers: &HeaderMap,
    peer: SocketAddr,
) -> Result<(Door, crate::audit::Actor), ApiError> {
    let who = authorize(state, headers, TokenKind::Write, peer)?;
    Ok((door_of(state)?, http_actor(who, headers)))
}

/// Who an HTTP request acts as in the audit trail: `who` (its token's name and its peer), from
/// the web console when the console sent it (`X-Zkcron-Client: console`), else from `http`.
fn http_actor(who: crate::audit::Who, headers: &HeaderMap) -> crate::audit::Actor {
    let console = headers
        .get(CLIENT_HEADER)
        .is_some_and(|client| client.as_bytes() == b"console");
    crate::audit::Actor::new(who, if console { "console" } else { "http" })
}

/// The header the web console names itself with, for the audit trail's "from".
const CLIENT_HEADER: &str = "x-zkcron-client";
