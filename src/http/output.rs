//! `GET /v1/jobs/{job}/runs/{run}/output`: a run's whole output, as the host that ran it keeps
//! it (`crate::output_store`), streamed as it is read; `follow=true` follows a run still going.
//! Asked of another node than the one that ran it (`node=`), the answer comes from that node's
//! API, through this one (the console's page is served by one node, the runs ran on any).
//!
//! Owns: the route, who may read output, and passing the answer on from another member.
//! Must not: read or write a run's file (the store does), or steer anything.

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use super::auth::proven;
use super::errors::ApiError;
use super::state::HttpState;
use crate::config::TokenKind;
use crate::output_store::remote::{self, AskError, Asked};

/// How much of the output is on its way at once between the file and the client.
const IN_FLIGHT: usize = 64 * 1024;

#[derive(Deserialize)]
pub(super) struct OutputQuery {
    /// Which attempt; its latest kept here when not given.
    attempt: Option<u32>,
    /// Follow a run still going, until it ends.
    #[serde(default)]
    follow: bool,
    /// The node that ran it (its record says): the answer comes from there.
    node: Option<String>,
}

pub(super) async fn run_output(
    State(state): State<HttpState>,
    Path((job, run)): Path<(String, String)>,
    Query(query): Query<OutputQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    may_read_output(&state, &headers)?;
    if let Some(node) = query
        .node
        .as_deref()
        .filter(|node| *node != state.me.as_str())
    {
        return from_member(&state, node, (&job, &run), &query, &headers).await;
    }
    let Some(store) = state.outputs.clone() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "node {} keeps no run output: its [output] dir is not set",
                state.me
            ),
        ));
    };
    let Some(path) = store.find(&job, &run, query.attempt) else {
        let attempt = query
            .attempt
            .map_or_else(String::new, |attempt| format!(" (attempt {attempt})"));
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "no output of run {run}{attempt} of job {job} is kept on node {}: it ran elsewhere, it is older than [output] keeps, or it was not kept",
                state.me
            ),
        ));
    };
    let (mut into, from) = tokio::io::duplex(IN_FLIGHT);
    let stop = state.stop.clone();
    tokio::spawn(async move {
        // An error here is the client gone, or the file removed under it: the answer ends.
        let _ = store.read(&path, query.follow, &mut into, &stop).await;
    });
    Ok(streamed(Body::from_stream(
        tokio_util::io::ReaderStream::new(from),
    )))
}

/// Output may hold what a job printed of its secrets: with named tokens it takes a read token,
/// with the one write token that token; with no token at all (a loopback listener) anyone on
/// the host may read it, as they may its journal.
fn may_read_output(state: &HttpState, headers: &HeaderMap) -> Result<(), ApiError> {
    let need = if state.tokens.is_empty() && state.token.is_some() {
        TokenKind::Write
    } else {
        TokenKind::Read
    };
    proven(state, headers, need).map(|_| ())
}

/// The output of a run on `node`, asked of its own API and passed on as it comes.
async fn from_member(
    state: &HttpState,
    node: &str,
    (job, run): (&str, &str),
    query: &OutputQuery,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let client = state.client()?;
    let asked = Asked {
        job,
        run,
        node,
        attempt: query.attempt,
        follow: query.follow,
    };
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    let paths = state.config().lock.paths();
    let mut answer = remote::ask(&client, &paths, asked, authorization)
        .await
        .map_err(|err| match err {
            AskError::Members(_) => ApiError::unavailable(err.to_string()),
            AskError::Refused { status, said, .. } => ApiError::new(
                StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                said,
            ),
            _ => ApiError::new(StatusCode::BAD_GATEWAY, err.to_string()),
        })?;
    let (mut into, from) = tokio::io::duplex(IN_FLIGHT);
    let stop = state.stop.clone();
    tokio::spawn(async move {
        loop {
            let chunk = tokio::select! {
                () = stop.cancelled() => return,
                chunk = answer.chunk() => chunk,
            };
            match chunk {
                Ok(Some(bytes)) => {
                    if into.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                Ok(None) | Err(_) => return,
            }
        }
    });
    Ok(streamed(Body::from_stream(
        tokio_util::io::ReaderStream::new(from),
    )))
}

fn streamed(body: Body) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}
