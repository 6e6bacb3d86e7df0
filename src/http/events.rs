//! `GET /v1/events`: the lock group's events as Server-Sent Events (`crate::events`), resumable
//! with `Last-Event-ID` (or `?after=`). A cursor older than what this node kept is answered
//! 410 Gone with the range lost, never with a silent jump to the next event; `across_gap=true`
//! takes instead the runs' events read back from their records and a `gap` event in the place
//! of the rest. `follow=false` answers what is kept after the cursor and ends.
//!
//! Owns: the route, the cursor's parsing and the stream's wire format.
//! Must not: read ZooKeeper (the hub does) or decide what an event is.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::broadcast::error::RecvError;

use super::auth::authorize;
use super::errors::ApiError;
use super::state::HttpState;
use crate::config::TokenKind;
use crate::events::cursor::Cursor;
use crate::events::hub::Subscribed;
use crate::events::{Event, EventKind};

/// How long a first follower waits for a new hub to read the group.
const READ_WITHIN: Duration = Duration::from_secs(30);
/// A comment this often keeps proxies and the client's own timeout from ending a quiet stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// What is on its way at once between the hub and the client.
const IN_FLIGHT: usize = 64 * 1024;

#[derive(Deserialize)]
pub(super) struct EventsQuery {
    /// The id of the last event the follower got (`Last-Event-ID` wins).
    after: Option<String>,
    /// Where events after the cursor were not kept: the runs' events from their records and a
    /// `gap` event, instead of 410.
    #[serde(default)]
    across_gap: bool,
    /// Follow new events (the default); `false`: the answer ends after what is kept.
    follow: Option<bool>,
}

/// The 410 answer: what was lost, and how to go on.
#[derive(Serialize)]
struct Gone {
    error: String,
    after: serde_json::Value,
    kept_from: serde_json::Value,
}

/// A cursor in JSON: a zxid as the number it always was, a cursor with the store's part as
/// its text.
fn cursor_json(cursor: &Cursor) -> serde_json::Value {
    match cursor.store {
        None => serde_json::Value::from(cursor.zxid),
        Some(_) => serde_json::Value::from(cursor.to_string()),
    }
}

pub(super) async fn events(
    State(state): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers, TokenKind::Read, peer)?;
    let after = match query.after.as_deref() {
        Some(after) => Some(Cursor::parse(after).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "after is not an event's id (as each event's id: line gives)",
            )
        })?),
        None => None,
    };
    let cursor = last_event_id(&headers)?.or(after);
    let client = state.client()?;
    let hub = state.events.hub(&client, &state.config());
    let subscribed = tokio::time::timeout(READ_WITHIN, hub.subscribe(cursor, query.across_gap))
        .await
        .map_err(|_| {
            ApiError::unavailable(format!(
                "the event hub has not read the group within {} s",
                READ_WITHIN.as_secs()
            ))
        })?
        .map_err(|err| ApiError::unavailable(err.to_string()))?;
    let (position, backlog, mut live) = match subscribed {
        Subscribed::Gone { after, kept_from } => {
            let gone = Gone {
                error: format!(
                    "event {after} is not one node {} kept: it keeps the events it saw since \
                     {kept_from}; resume with across_gap=true to get the runs' events after it \
                     from their records and a gap event for the rest",
                    state.me
                ),
                after: cursor_json(&after),
                kept_from: cursor_json(&kept_from),
            };
            return Ok((StatusCode::GONE, axum::Json(gone)).into_response());
        }
        Subscribed::Stream {
            position,
            backlog,
            live,
        } => (position, backlog, live),
    };
    let follow = query.follow.unwrap_or(true);
    let (mut into, from) = tokio::io::duplex(IN_FLIGHT);
    let (stop, hub_stopped) = (state.stop.clone(), hub.stopped());
    let follower = hub.follower();
    tokio::spawn(async move {
        let _follower = follower;
        // Where it starts, so that a follower that gets no event before this node goes still
        // resumes from here (an id without data moves the cursor, sets off no event).
        if into
            .write_all(format!("id: {position}\n\n").as_bytes())
            .await
            .is_err()
        {
            return;
        }
        let mut last = position;
        for event in &backlog {
            if write(&mut into, event).await.is_err() {
                return;
            }
            last = event.cursor();
        }
        if !follow {
            return;
        }
        let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
        keep_alive.reset();
        loop {
            let event = tokio::select! {
                () = stop.cancelled() => return,
                () = hub_stopped.cancelled() => return,
                _ = keep_alive.tick() => {
                    if into.write_all(b": keep-alive\n\n").await.is_err() {
                        return;
                    }
                    continue;
                }
                received = live.recv() => received,
            };
            let event = match event {
                Ok(event) => event,
                Err(RecvError::Lagged(behind)) => {
                    // Told, and let go: it resumes from its cursor, from the journal.
                    let mut gap = Event::bare(
                        EventKind::Gap,
                        last.zxid,
                        chrono::Utc::now().timestamp_millis(),
                    );
                    gap.store_mark = last.store.clone();
                    gap.detail = Some(format!(
                        "this follower fell {behind} events behind; reconnect with Last-Event-ID {last} to resume"
                    ));
                    let _ = write(&mut into, &gap).await;
                    return;
                }
                Err(RecvError::Closed) => return,
            };
            if write(&mut into, &event).await.is_err() {
                return;
            }
            last = event.cursor();
        }
    });
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        Body::from_stream(tokio_util::io::ReaderStream::new(from)),
    )
        .into_response())
}

/// `Last-Event-ID`, when given: an event's id — a zxid, with the store's mark after it where the
/// delayed queue is kept in PostgreSQL.
fn last_event_id(headers: &HeaderMap) -> Result<Option<Cursor>, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(Cursor::parse)
        .map(Some)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "Last-Event-ID is not an event's id (as each event's id: line gives)",
            )
        })
}

/// One event in the Server-Sent Events format: its id, its kind as the event's name, and
/// itself as one line of JSON.
async fn write(into: &mut (impl AsyncWrite + Unpin), event: &Event) -> std::io::Result<()> {
    let data = serde_json::to_string(event).map_err(std::io::Error::other)?;
    let frame = format!(
        "id: {}\nevent: {}\ndata: {data}\n\n",
        event.cursor(),
        event.kind.as_str()
    );
    into.write_all(frame.as_bytes()).await
}
