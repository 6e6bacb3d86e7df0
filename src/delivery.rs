//! Delivers a run whose target is an HTTP request (issue 23): the run is the call, not a process.
//!
//! Owns: the node's HTTP clients (one per TLS setup and HTTP version, shared by every job and
//! lock group of the node, each keeping its connections alive and pooled per host), the cap on
//! requests in flight per host, the contract headers (the job contract's variables as
//! `Zkcron-*` headers, `Idempotency-Key` = the run id), reading the answer (its status, the
//! start of a failure's body, `Retry-After`), the job's timeout and cancellation.
//! Must not: talk to ZooKeeper, or decide whether a run starts, is retried or when (the fire
//! machine does: a delivery is a run like any other, claimed, recorded and resumed the same way).

use std::collections::HashMap;
use std::future::pending;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use tokio::sync::Semaphore;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::ensemble_clock::Deadline;
use crate::metrics::Metrics;
use crate::report::error_chain;
use crate::run::{
    HttpTarget, HttpVersion, JobSpec, RESPONSE_KEPT, RunContext, RunOutcome, RunReport,
};
use crate::runner::hold_until;

/// At most this many requests to one host (scheme, host and port) are in flight from this node
/// at once; more wait their turn. Over HTTP/1.1 that is the number of connections it opens to
/// that host.
pub const MAX_IN_FLIGHT_PER_HOST: usize = 64;
/// A response body is read up to this much so that its connection can be used again; a longer
/// one is cut off and its connection closed.
const DRAIN_LIMIT: usize = 64 * 1024;
/// Idle pooled connections are closed after this long.
const POOL_IDLE: Duration = Duration::from_secs(90);
/// How long a connection may take to open, whatever the job's `timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// `User-Agent` of every request.
const USER_AGENT: &str = concat!("zkcron/", env!("CARGO_PKG_VERSION"));

/// The node's HTTP clients and the per-host caps: made once by the daemon, shared by every
/// lock group's fire driver.
#[derive(Debug)]
pub struct Deliveries {
    clients: Mutex<HashMap<ClientKey, reqwest::Client>>,
    hosts: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Where each delivery's answer class and latency are counted.
    metrics: Arc<Metrics>,
}

/// What makes two targets need different clients: their trust, their identity, their version.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ClientKey {
    ca_pem: Option<Vec<u8>>,
    identity_pem: Option<Vec<u8>>,
    version: HttpVersion,
}

impl ClientKey {
    fn of(target: &HttpTarget) -> Self {
        Self {
            ca_pem: target.tls.ca_pem.clone(),
            identity_pem: target.tls.identity_pem.clone(),
            version: target.version,
        }
    }
}

impl Deliveries {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            clients: Mutex::default(),
            hosts: Mutex::default(),
            metrics,
        }
    }

    /// Makes the clients of the schedule's HTTP targets (`jobs`: all of its jobs) now, off any
    /// run's path: a client loads the system's roots or its CA file when it is made (~0.1 s),
    /// which would otherwise make a job's first delivery late. A client that cannot be made is
    /// logged; its runs will say why. Clients no target uses any more (a CA replaced by a
    /// reload) are dropped, with their pools.
    pub fn warm<'a>(&self, jobs: impl IntoIterator<Item = &'a JobSpec>) {
        let mut used = std::collections::HashSet::new();
        for spec in jobs {
            if let crate::run::Program::Http(target) = &spec.program {
                used.insert(ClientKey::of(target));
                if let Err(err) = self.client(target) {
                    warn!(job = %spec.name, error = %chain(&err), "cannot set up the job's HTTP client");
                }
            }
        }
        self.clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|key, _| used.contains(key));
    }

    /// Sends the run's request and reads its answer. `cancel` (on_lost = cancel, a shutdown)
    /// aborts a request in flight: its connection is closed. The job's `timeout` bounds the
    /// whole exchange, from sending to the end of the answer. Sent not before `not_before`.
    ///
    /// Never fails: a request that cannot be made or is not answered is
    /// [`RunOutcome::RequestFailed`].
    pub async fn deliver(
        &self,
        spec: &JobSpec,
        target: &HttpTarget,
        ctx: &RunContext,
        cancel: CancellationToken,
        not_before: Option<Deadline>,
    ) -> RunReport {
        let job = &spec.name;
        let run_id = ctx.run_id.as_str();
        let held = tokio::select! {
            () = cancel.cancelled() => false,
            () = hold_until(not_before) => true,
        };
        if !held || cancel.is_cancelled() {
            info!(job = %job, run_id, "run cancelled before it started");
            return report(
                RunOutcome::CancelledBeforeStart,
                Utc::now(),
                Duration::ZERO,
                None,
            );
        }
        let (started_at, sent) = (Utc::now(), Instant::now());
        info!(job = %job, run_id, url = target.url, token = ctx.fencing_token.0,
              attempt = ctx.attempt, resumed = ctx.resumed, "delivery started");
        let deadline = spec.timeout.map(|t| sent + t);
        let timed_out = async {
            match deadline {
                Some(at) => sleep_until(at).await,
                None => pending().await,
            }
        };
        // Dropping the exchange drops its request: hyper closes a connection whose answer was
        // not read to its end, so the receiver sees the call abandoned.
        let (outcome, retry_after) = tokio::select! {
            biased;
            answer = self.exchange(spec, target, ctx) => answer,
            () = cancel.cancelled() => {
                info!(job = %job, run_id, "delivery cancelled; its request is abandoned");
                (RunOutcome::Cancelled, None)
            }
            () = timed_out => {
                warn!(job = %job, run_id, timeout = ?spec.timeout,
                      "delivery timed out; its request is abandoned");
                (RunOutcome::TimedOut, None)
            }
        };
        let duration = sent.elapsed();
        let status = match &outcome {
            RunOutcome::Responded { status, .. } => Some(*status),
            _ => None,
        };
        self.metrics
            .delivered(job, answer_class(&outcome), duration.as_secs_f64());
        info!(job = %job, run_id, outcome = %outcome, status,
              duration_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
              "delivery finished");
        report(outcome, started_at, duration, retry_after)
    }

    /// The request and its answer, without the timeout and cancellation around it.
    async fn exchange(
        &self,
        spec: &JobSpec,
        target: &HttpTarget,
        ctx: &RunContext,
    ) -> (RunOutcome, Option<Duration>) {
        let failed = |error: String| (RunOutcome::RequestFailed { error }, None);
        let client = match self.client(target) {
            Ok(client) => client,
            Err(err) => return failed(format!("cannot set up the HTTP client: {}", chain(&err))),
        };
        let url = match reqwest::Url::parse(&target.url) {
            Ok(url) => url,
            Err(err) => return failed(format!("bad URL {}: {err}", target.url)),
        };
        let method = match reqwest::Method::from_bytes(target.method.as_bytes()) {
            Ok(method) => method,
            Err(err) => return failed(format!("bad method {}: {err}", target.method)),
        };
        let body = body(target, ctx);
        let headers = match request_headers(spec, target, ctx, body.is_some()) {
            Ok(headers) => headers,
            Err(why) => return failed(why),
        };
        let permit = self.host_slot(&url).acquire_owned().await;
        let mut request = client.request(method, url).headers(headers);
        if let Some(body) = body {
            request = request.body(body);
        }
        let mut response = match request.send().await {
            Ok(response) => response,
            Err(err) => return failed(chain(&err)),
        };
        let status = response.status().as_u16();
        let success = response.status().is_success();
        let retry_after = matches!(status, 429 | 503)
            .then(|| response.headers().get(RETRY_AFTER))
            .flatten()
            .and_then(|value| retry_after(value, Utc::now()));
        // Read to its end (up to a bound) so that the connection goes back to the pool; only a
        // failure's first bytes are kept.
        let mut kept = Vec::new();
        let mut read = 0;
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if !success && kept.len() < RESPONSE_KEPT {
                        let room = RESPONSE_KEPT - kept.len();
                        kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    }
                    read += chunk.len();
                    if read > DRAIN_LIMIT {
                        break;
                    }
                }
                Ok(None) => break,
                // The status has answered the call; the rest of the body is not the job's.
                Err(err) => {
                    tracing::debug!(error = %chain(&err), "response body cut short");
                    break;
                }
            }
        }
        drop(permit);
        let body = String::from_utf8_lossy(&kept).into_owned();
        (RunOutcome::Responded { status, body }, retry_after)
    }

    /// The client for `target`'s TLS setup and version, made at its first use.
    fn client(&self, target: &HttpTarget) -> Result<reqwest::Client, reqwest::Error> {
        let key = ClientKey::of(target);
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = build_client(&key)?;
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// The cap of requests in flight to `url`'s host.
    fn host_slot(&self, url: &reqwest::Url) -> Arc<Semaphore> {
        let host = format!(
            "{}://{}:{}",
            url.scheme(),
            url.host_str().unwrap_or_default(),
            url.port_or_known_default().unwrap_or_default()
        );
        let mut hosts = self
            .hosts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(
            hosts
                .entry(host)
                .or_insert_with(|| Arc::new(Semaphore::new(MAX_IN_FLIGHT_PER_HOST))),
        )
    }
}

fn build_client(key: &ClientKey) -> Result<reqwest::Client, reqwest::Error> {
    let mut builder = reqwest::Client::builder()
        .user_agent(USER_AGENT)
        // A delivery is one call: a redirect is an answer to record, not a second request
        // (a 303 would turn a POST into a GET elsewhere).
        .redirect(reqwest::redirect::Policy::none())
        // Where a call goes is the schedule file's to say, not the environment's.
        .no_proxy()
        .connect_timeout(CONNECT_TIMEOUT)
        .pool_idle_timeout(POOL_IDLE)
        .pool_max_idle_per_host(MAX_IN_FLIGHT_PER_HOST)
        .tcp_nodelay(true);
    if let Some(ca) = &key.ca_pem {
        builder = builder.tls_certs_only(reqwest::Certificate::from_pem_bundle(ca)?);
    }
    if let Some(identity) = &key.identity_pem {
        builder = builder.identity(reqwest::Identity::from_pem(identity)?);
    }
    builder = match key.version {
        HttpVersion::Auto => builder,
        HttpVersion::Http1 => builder.http1_only(),
        HttpVersion::Http2 => builder.http2_prior_knowledge(),
    };
    builder.build()
}

/// The target's own headers, then the run's contract (DESIGN.md "Job contract", as headers).
fn request_headers(
    spec: &JobSpec,
    target: &HttpTarget,
    ctx: &RunContext,
    has_body: bool,
) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    for (name, value) in &target.headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("bad header name {name:?}"))?;
        // Never echo the value: it may be a secret.
        let value =
            HeaderValue::from_str(value).map_err(|_| format!("bad value of header {name}"))?;
        headers.insert(name, value);
    }
    if has_body && !headers.contains_key(CONTENT_TYPE) {
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
    }
    for (name, value) in contract_headers(spec, ctx) {
        let value = HeaderValue::from_str(&value)
            .map_err(|_| format!("{name} cannot be sent as a header: {value:?}"))?;
        headers.insert(HeaderName::from_static(name), value);
    }
    Ok(headers)
}

/// The job contract's facts as headers: what a process gets as `ZKCRON_*` variables, and
/// `Idempotency-Key`, the run id: the same on every attempt of the run, so a receiver that did
/// the work once answers a repeat without doing it again.
fn contract_headers(spec: &JobSpec, ctx: &RunContext) -> Vec<(&'static str, String)> {
    let mut headers: Vec<(&'static str, String)> = ctx
        .contract(&spec.name)
        .into_iter()
        .filter_map(|(key, value)| Some((key.header?, value)))
        .collect();
    headers.push(("idempotency-key", ctx.run_id.clone()));
    headers
}

/// What the request carries: a submission's payload; a tick's run (or a submission without a
/// payload, such as a plain trigger) the target's declared `body`, if any.
fn body(target: &HttpTarget, ctx: &RunContext) -> Option<Vec<u8>> {
    match &ctx.submission {
        Some(submission) if !submission.payload.is_empty() || target.body.is_none() => {
            Some(submission.payload.as_ref().clone())
        }
        _ => target.body.clone(),
    }
}

/// `Retry-After` as seconds or an HTTP date, from `now`; `None` when it is neither.
fn retry_after(value: &HeaderValue, now: DateTime<Utc>) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = DateTime::parse_from_rfc2822(text).ok()?;
    Some((at.with_timezone(&Utc) - now).to_std().unwrap_or_default())
}

/// The `class` label of a delivery's answer.
fn answer_class(outcome: &RunOutcome) -> &'static str {
    match outcome {
        RunOutcome::Responded { status, .. } => match status / 100 {
            1 => "1xx",
            2 => "2xx",
            3 => "3xx",
            4 => "4xx",
            _ => "5xx",
        },
        RunOutcome::TimedOut => "timeout",
        RunOutcome::Cancelled | RunOutcome::CancelledBeforeStart => "cancelled",
        _ => "error",
    }
}

fn report(
    outcome: RunOutcome,
    started_at: DateTime<Utc>,
    duration: Duration,
    retry_after: Option<Duration>,
) -> RunReport {
    RunReport {
        outcome,
        started_at,
        duration,
        retry_after,
        output: String::new(),
    }
}

fn chain(err: &reqwest::Error) -> String {
    error_chain(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::JobName;
    use crate::run::{HttpTls, Launcher, Program};

    fn http_job(name: &str, version: HttpVersion) -> JobSpec {
        JobSpec {
            name: JobName::new(name),
            program: Program::Http(Box::new(HttpTarget {
                url: "http://127.0.0.1:1/x".into(),
                method: "POST".into(),
                headers: Vec::new(),
                body: None,
                tls: HttpTls::default(),
                version,
                resend: crate::run::Resend::Never,
            })),
            working_dir: None,
            env: std::collections::BTreeMap::new(),
            timeout: None,
            kill_grace: Duration::ZERO,
            launcher: Launcher::Direct,
            user: None,
        }
    }

    #[test]
    fn targets_that_share_a_setup_share_a_client_and_a_reload_drops_the_unused() {
        let deliveries = Deliveries::new(Arc::new(Metrics::new()));
        let (a, b) = (
            http_job("a", HttpVersion::Auto),
            http_job("b", HttpVersion::Auto),
        );
        let h2 = http_job("c", HttpVersion::Http2);
        deliveries.warm([&a, &b, &h2]);
        let count = || {
            deliveries
                .clients
                .lock()
                .map(|c| c.len())
                .unwrap_or_default()
        };
        assert_eq!(count(), 2, "one client per TLS setup and version");
        deliveries.warm([&h2]);
        assert_eq!(count(), 1, "the reloaded schedule's only");
        let kept = deliveries
            .clients
            .lock()
            .map(|c| c.keys().next().map(|k| k.version));
        assert_eq!(kept.ok().flatten(), Some(HttpVersion::Http2));
    }

    #[test]
    fn retry_after_reads_seconds_and_dates_and_ignores_the_rest() {
        let now = DateTime::parse_from_rfc3339("2026-11-25T10:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .expect("a fixed instant");
        let value = |text: &'static str| HeaderValue::from_static(text);
        assert_eq!(retry_after(&value("2"), now), Some(Duration::from_secs(2)));
        assert_eq!(
            retry_after(&value("Wed, 25 Nov 2026 10:00:30 GMT"), now),
            Some(Duration::from_secs(30))
        );
        // A date already past asks for no wait at all.
        assert_eq!(
            retry_after(&value("Wed, 25 Nov 2026 09:00:00 GMT"), now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(&value("soon"), now), None);
        assert_eq!(retry_after(&value("-1"), now), None);
    }
}
