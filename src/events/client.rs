//! Following a lock group's events from outside (`zkcron events`): a live member's HTTP API is
//! found by its member data, its stream read, and when that member goes — the node killed, its
//! session lost — another one is asked to resume from the last event's id. Where the new node did
//! not keep the events after it (410), the follower is told of the gap and takes the runs'
//! events of that range from their records, never a silent jump.
//!
//! Owns: choosing a member, the request, reading the stream's frames, resuming.
//! Must not: print anything (the caller is given each event) or read ZooKeeper beyond the
//! members.

use std::time::Duration;

use super::Event;
use super::cursor::Cursor;
use crate::ids::NodeId;
use crate::layout::LockPaths;
use crate::ledger::Ledger;
use crate::report::error_chain;

/// How long a member has to accept the connection.
const CONNECT: Duration = Duration::from_secs(5);
/// Between two tries of the members when none answered: a failover takes seconds.
const RETRY: Duration = Duration::from_secs(1);
/// Between a stream's end and asking again.
const RESUME_AFTER: Duration = Duration::from_millis(200);

/// Why following stopped.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error("cannot read the members: {0}")]
    Members(String),
    #[error("no live member publishes an HTTP API reachable from this host ({0})")]
    NoApi(String),
    #[error("node {node} answered {status}: {said}")]
    Refused {
        node: String,
        status: u16,
        said: String,
    },
    #[error("the member's stream is not one of events: {0}")]
    Garbled(String),
}

/// What to follow.
#[derive(Debug, Clone)]
pub struct Following {
    /// Resume after this event's id; from now when `None`.
    pub after: Option<Cursor>,
    /// Follow new events; else end after what is kept.
    pub follow: bool,
    /// Prefer this member (the node of this host's schedule).
    pub prefer: Option<NodeId>,
    /// An `Authorization` header's value.
    pub authorization: Option<String>,
}

/// Follows the events of the group at `paths`, giving each to `told` in order, until the
/// stream ends (`follow = false`), `told` says stop (`false`) or no member can be reached.
/// When the serving member goes, the next resumes from the last event's id; what it did not
/// keep is told by its gap event (`crate::events::EventKind::Gap`).
///
/// # Errors
/// No member could serve, or one refused.
pub async fn follow(
    ledger: &Ledger,
    paths: &LockPaths,
    mut following: Following,
    mut told: impl FnMut(&Event) -> bool,
) -> Result<(), FollowError> {
    let http = reqwest::Client::builder()
        .connect_timeout(CONNECT)
        .build()
        .map_err(|err| FollowError::Members(error_chain(&err)))?;
    // From 0: a listing of everything kept, runs' records and all, which no gap can surprise.
    let mut across_gap = following.after == Some(Cursor::of_zxid(0));
    let mut tried_without = 0;
    loop {
        let apis = member_apis(ledger, paths, following.prefer.as_ref()).await?;
        let mut answered = None;
        let mut why = Vec::new();
        for (node, api) in apis {
            let url = events_url(&api, following.after.as_ref(), across_gap, following.follow);
            let mut request = http.get(url);
            if let Some(authorization) = &following.authorization {
                request = request.header(reqwest::header::AUTHORIZATION, authorization);
            }
            if let Some(after) = &following.after {
                request = request.header("Last-Event-ID", after.to_string());
            }
            match request.send().await {
                Ok(answer) => {
                    answered = Some((node, answer));
                    break;
                }
                Err(err) => why.push(format!("{node} at {api}: {}", error_chain(&err))),
            }
        }
        let Some((node, answer)) = answered else {
            // Mid-failover every member may be gone or starting: try again, a while.
            tried_without += 1;
            if tried_without > 30 {
                return Err(FollowError::NoApi(why.join("; ")));
            }
            tokio::time::sleep(RETRY).await;
            continue;
        };
        tried_without = 0;
        let status = answer.status();
        if status == reqwest::StatusCode::GONE {
            // Said once by the gap event that the resumed stream starts with.
            across_gap = true;
            continue;
        }
        if !status.is_success() {
            let said = answer.text().await.unwrap_or_default();
            let said = serde_json::from_str::<serde_json::Value>(&said)
                .ok()
                .and_then(|body| body.get("error")?.as_str().map(str::to_owned))
                .unwrap_or(said);
            return Err(FollowError::Refused {
                node: node.to_string(),
                status: status.as_u16(),
                said,
            });
        }
        across_gap = false;
        let ended = read_stream(answer, &mut following, &mut told).await?;
        if ended == Ended::Stop || !following.follow {
            return Ok(());
        }
        // The member stopped serving (killed, its session lost): another one resumes, after
        // a moment, so that a member that ends every stream at once is not asked in a loop.
        tokio::time::sleep(RESUME_AFTER).await;
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The caller asked to stop.
    Stop,
    /// The stream ended or broke.
    Stream,
}

/// Reads the frames of one answer, advancing the cursor.
async fn read_stream(
    mut answer: reqwest::Response,
    following: &mut Following,
    told: &mut impl FnMut(&Event) -> bool,
) -> Result<Ended, FollowError> {
    let mut pending = String::new();
    loop {
        let chunk = match answer.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) | Err(_) => return Ok(Ended::Stream),
        };
        pending.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = pending.find("\n\n") {
            let frame: String = pending.drain(..end + 2).collect();
            let (id, event) = parse_frame(&frame)?;
            // The last id given is where it stands: the stream's order is the journal's.
            if let Some(id) = id {
                following.after = Some(id);
            }
            if event.as_ref().is_some_and(|event| !told(event)) {
                return Ok(Ended::Stop);
            }
        }
    }
}

/// One Server-Sent Events frame: its `id:` (the cursor) and its `data:` lines as an event;
/// neither for a comment.
fn parse_frame(frame: &str) -> Result<(Option<Cursor>, Option<Event>), FollowError> {
    let field = |name: &str| {
        frame
            .lines()
            .filter_map(move |line| line.strip_prefix(name))
            .map(str::trim_start)
            .collect::<Vec<&str>>()
    };
    let id = field("id:").last().and_then(|id| Cursor::parse(id));
    let data = field("data:");
    if data.is_empty() {
        return Ok((id, None));
    }
    serde_json::from_str(&data.join("\n"))
        .map(|event| (id, Some(event)))
        .map_err(|err| FollowError::Garbled(format!("{err}: {frame:?}")))
}

/// The members' API addresses reachable from this host: `prefer` first, then the rest.
async fn member_apis(
    ledger: &Ledger,
    paths: &LockPaths,
    prefer: Option<&NodeId>,
) -> Result<Vec<(NodeId, String)>, FollowError> {
    let members = crate::ledger::inspect::members(ledger, paths)
        .await
        .map_err(|err| FollowError::Members(error_chain(&err)))?;
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let mut apis: Vec<(NodeId, String)> = members
        .into_iter()
        .filter_map(|member| {
            let info = member.info?;
            let api = info.api_from(&host).ok()?.to_owned();
            Some((member.node_id, api))
        })
        .collect();
    apis.sort_by_key(|(node, _)| Some(node) != prefer);
    Ok(apis)
}

fn events_url(api: &str, after: Option<&Cursor>, across_gap: bool, follow: bool) -> String {
    let mut url = format!("http://{api}/v1/events?follow={follow}");
    if let Some(after) = after {
        url.push_str(&format!("&after={after}"));
    }
    if across_gap {
        url.push_str("&across_gap=true");
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventKind;

    #[test]
    fn a_frame_reads_as_its_event_and_a_comment_as_none() {
        let frame = "id: 12\nevent: member_left\ndata: {\"id\":12,\"kind\":\"member_left\",\"at_unix_ms\":5,\"node\":\"b\"}\n\n";
        let (id, event) = parse_frame(frame).unwrap_or_default();
        assert_eq!(id, Some(Cursor::of_zxid(12)));
        assert_eq!(
            event.map(|e| (e.id, e.kind)),
            Some((12, EventKind::MemberLeft))
        );
        assert!(matches!(parse_frame(": keep-alive\n\n"), Ok((None, None))));
        assert!(matches!(
            parse_frame("id: 40\n\n"),
            Ok((
                Some(Cursor {
                    zxid: 40,
                    store: None
                }),
                None
            ))
        ));
        let (id, _) = parse_frame("id: 40.912.order-1\n\n").unwrap_or_default();
        assert_eq!(
            id.map(|id| id.to_string()),
            Some("40.912.order-1".to_owned())
        );
        assert!(matches!(
            parse_frame("data: {\n\n"),
            Err(FollowError::Garbled(_))
        ));
        assert_eq!(
            events_url("10.0.0.1:9464", Some(&Cursor::of_zxid(7)), true, false),
            "http://10.0.0.1:9464/v1/events?follow=false&after=7&across_gap=true"
        );
    }
}
