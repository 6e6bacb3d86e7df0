//! Asking the member that ran a run for its output: found by its member data, reached at the
//! API address it publishes, answered as a stream.
//!
//! Owns: finding that member, its address from here, the request and what its refusal said.
//! Must not: read a run's file (the store on that host does), or print anything.

use std::time::Duration;

use crate::ids::NodeId;
use crate::layout::LockPaths;
use crate::ledger::Ledger;
use crate::lock::node::NoApi;
use crate::report::error_chain;

/// How long the member has to accept the connection.
const CONNECT: Duration = Duration::from_secs(5);

/// Which output is asked for, of whom.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    pub job: &'a str,
    pub run: &'a str,
    /// The node that ran it, as its record says.
    pub node: &'a str,
    /// Its latest kept attempt when `None`.
    pub attempt: Option<u32>,
    /// Follow a run still going, until it ends.
    pub follow: bool,
}

/// Why the member that ran a run cannot give its output.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error("cannot read the members: {0}")]
    Members(String),
    #[error(
        "node {node}, which ran it, is not a live member: the output it kept cannot be read now"
    )]
    Gone { node: String },
    #[error(transparent)]
    NoApi(#[from] NoApi),
    #[error("node {node}'s API address {api:?} is not one")]
    Address { node: String, api: String },
    #[error("node {node} at {api} did not answer: {why}")]
    NoAnswer {
        node: String,
        api: String,
        why: String,
    },
    #[error("node {node} answered {status}: {said}")]
    Refused {
        node: String,
        status: u16,
        said: String,
    },
}

/// Asks the member that ran `asked`'s run for its output, with `authorization` (an
/// `Authorization` header's value) if given; its answer's body is the output, as it comes.
///
/// # Errors
/// The member is gone, cannot be reached from this host, or refused.
pub async fn ask(
    ledger: &Ledger,
    paths: &LockPaths,
    asked: Asked<'_>,
    authorization: Option<&str>,
) -> Result<reqwest::Response, AskError> {
    let node = asked.node.to_owned();
    let members = crate::ledger::inspect::members(ledger, paths)
        .await
        .map_err(|err| AskError::Members(error_chain(&err)))?;
    let info = members
        .into_iter()
        .find(|member| member.node_id == NodeId::new(asked.node))
        .and_then(|member| member.info)
        .ok_or_else(|| AskError::Gone { node: node.clone() })?;
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let api = info.api_from(&host)?.to_owned();
    let mut url =
        reqwest::Url::parse(&format!("http://{api}/")).map_err(|_| AskError::Address {
            node: node.clone(),
            api: api.clone(),
        })?;
    if let Ok(mut path) = url.path_segments_mut() {
        path.extend(["v1", "jobs", asked.job, "runs", asked.run, "output"]);
    }
    {
        let mut query = url.query_pairs_mut();
        query.append_pair("node", asked.node);
        if let Some(attempt) = asked.attempt {
            query.append_pair("attempt", &attempt.to_string());
        }
        query.append_pair("follow", if asked.follow { "true" } else { "false" });
    }
    let no_answer = |err: reqwest::Error| AskError::NoAnswer {
        node: node.clone(),
        api: api.clone(),
        why: error_chain(&err),
    };
    let client = reqwest::Client::builder()
        .connect_timeout(CONNECT)
        .build()
        .map_err(no_answer)?;
    let mut request = client.get(url);
    if let Some(authorization) = authorization {
        request = request.header(reqwest::header::AUTHORIZATION, authorization);
    }
    let answer = request.send().await.map_err(no_answer)?;
    let status = answer.status();
    if status.is_success() {
        return Ok(answer);
    }
    // Our API's refusals are `{"error": "…"}`; anything else is said as it came.
    let said = answer.text().await.unwrap_or_default();
    let said = serde_json::from_str::<serde_json::Value>(&said)
        .ok()
        .and_then(|body| body.get("error")?.as_str().map(str::to_owned))
        .unwrap_or(said);
    Err(AskError::Refused {
        node,
        status: status.as_u16(),
        said,
    })
}
