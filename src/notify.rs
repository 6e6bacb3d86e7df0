//! Failure notices out (issue 20): a job's `on_failure` command and its `on_failure_webhook`.
//!
//! Owns: running the hook — in its own process group, the notice as JSON on stdin and in
//! `ZKCRON_*` variables, its output logged, the group killed at [`HOOK_TIMEOUT`] — and POSTing
//! the webhook, tried again with backoff for [`WEBHOOK_PATIENCE`] and then given up; a log line
//! and a metric for each end.
//! Must not: decide whether a notice is due (the fire machine does), hold up firing (every
//! notice goes on its own task), or send one notice twice on purpose: a webhook is tried again
//! only when it did not take the notice (no answer, a 408, 429 or 5xx).

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

use crate::metrics::Metrics;
use crate::run::{Notice, Webhook};

/// A hook still running after this is killed with its process group.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a webhook that does not take a notice is tried again before it is given up.
pub const WEBHOOK_PATIENCE: Duration = Duration::from_secs(600);
/// The first wait before trying a webhook again; it doubles up to [`WEBHOOK_BACKOFF_MAX`].
const WEBHOOK_BACKOFF: Duration = Duration::from_secs(1);
const WEBHOOK_BACKOFF_MAX: Duration = Duration::from_secs(60);
/// One webhook request, from connecting to the end of its answer.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of a hook's output is logged.
const HOOK_OUTPUT_LOGGED: u64 = 16 * 1024;
const USER_AGENT: &str = concat!("zkcron/", env!("CARGO_PKG_VERSION"));

/// Sends notices; one per node, shared by every lock group's fire driver.
#[derive(Debug)]
pub struct Notifier {
    /// Made at the first webhook notice, not at start: the client loads and keeps the host's
    /// root certificates (~100 KB, and the parse of them besides), which a schedule without a
    /// webhook never needs (issue 32). `Err`: why there is none; each webhook notice says so
    /// when it is given up.
    http: tokio::sync::OnceCell<Result<reqwest::Client, String>>,
    metrics: Arc<Metrics>,
}

impl Notifier {
    /// A notifier counting into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            http: tokio::sync::OnceCell::new(),
            metrics,
        }
    }

    /// The webhooks' client, made at its first use on the blocking pool (it reads the root
    /// certificates from disk), so that no fire on a worker waits for it.
    async fn http(&self) -> &Result<reqwest::Client, String> {
        self.http
            .get_or_init(|| async {
                let made = tokio::task::spawn_blocking(|| {
                    reqwest::Client::builder()
                        .user_agent(USER_AGENT)
                        .timeout(WEBHOOK_TIMEOUT)
                        .redirect(reqwest::redirect::Policy::none())
                        .build()
                        .map_err(|err| crate::report::error_chain(&err))
                })
                .await
                .unwrap_or_else(|err| Err(err.to_string()));
                if let Err(why) = &made {
                    tracing::error!(error = why, "no HTTP client for on_failure webhooks");
                }
                made
            })
            .await
    }

    /// Sends `notice` to each of its channels, each on its own task; returns at once.
    pub fn send(self: &Arc<Self>, notice: Notice) {
        let notice = Arc::new(notice);
        if let Some(command) = notice.channels.command.clone() {
            let (this, notice) = (Arc::clone(self), Arc::clone(&notice));
            tokio::spawn(async move { this.run_hook(&command, &notice).await });
        }
        if let Some(webhook) = notice.channels.webhook.clone() {
            let (this, notice) = (Arc::clone(self), Arc::clone(&notice));
            tokio::spawn(async move { this.post(&webhook, &notice).await });
        }
    }

    async fn run_hook(&self, argv: &[String], notice: &Notice) {
        let job = &notice.record.job;
        let result = match hook(argv, notice).await {
            Ok(()) => {
                tracing::info!(job = %job, run_id = notice.record.run_id, notice = notice.kind.as_str(), "on_failure command ran");
                "sent"
            }
            Err(why) => {
                tracing::warn!(job = %job, run_id = notice.record.run_id, notice = notice.kind.as_str(), error = why, "on_failure command failed");
                "failed"
            }
        };
        self.metrics.noticed(job, "command", result);
    }

    async fn post(&self, webhook: &Webhook, notice: &Notice) {
        let job = &notice.record.job;
        let body = notice.to_json().to_string();
        let started = tokio::time::Instant::now();
        let mut backoff = WEBHOOK_BACKOFF;
        let mut attempt = 1;
        let http = match self.http().await {
            Ok(http) => http,
            Err(why) => {
                tracing::error!(job = %job, run_id = notice.record.run_id, error = why, "on_failure webhook not called: no HTTP client");
                self.metrics.noticed(job, "webhook", "gave_up");
                return;
            }
        };
        loop {
            let mut request = http
                .post(&webhook.url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone());
            if let Some(token) = &webhook.token {
                request = request.bearer_auth(token.expose());
            }
            let (again, why) = match request.send().await {
                Ok(answer) if answer.status().is_success() => {
                    tracing::info!(job = %job, run_id = notice.record.run_id, notice = notice.kind.as_str(), attempt, "on_failure webhook took the notice");
                    self.metrics.noticed(job, "webhook", "sent");
                    return;
                }
                Ok(answer) => {
                    let status = answer.status();
                    let again = status.is_server_error()
                        || status == reqwest::StatusCode::REQUEST_TIMEOUT
                        || status == reqwest::StatusCode::TOO_MANY_REQUESTS;
                    (again, format!("answered HTTP {}", status.as_u16()))
                }
                Err(err) => (true, crate::report::error_chain(&err)),
            };
            if !again || started.elapsed() + backoff > WEBHOOK_PATIENCE {
                let patience = if again {
                    " and ran out of patience"
                } else {
                    ""
                };
                tracing::error!(job = %job, run_id = notice.record.run_id, notice = notice.kind.as_str(), attempt, error = why, "on_failure webhook did not take the notice{patience}; it is given up");
                self.metrics.noticed(job, "webhook", "gave_up");
                return;
            }
            tracing::warn!(job = %job, run_id = notice.record.run_id, attempt, error = why, retry_in = ?backoff, "on_failure webhook did not take the notice; trying again");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(WEBHOOK_BACKOFF_MAX);
            attempt += 1;
        }
    }
}

/// Runs the hook to its end (or kills it at [`HOOK_TIMEOUT`]); why it failed, if it did.
async fn hook(argv: &[String], notice: &Notice) -> Result<(), String> {
    let (program, args) = argv.split_first().ok_or("no program")?;
    let job = &notice.record.job;
    let mut command = CommandWrap::with_new(program, |command| {
        command
            .args(args)
            .envs(notice.env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    });
    command.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    let mut child = command
        .spawn()
        .map_err(|err| format!("cannot start {program}: {err}"))?;
    let document = notice.to_json().to_string();
    let stdin = child.stdin().take();
    let stdout = child.stdout().take();
    let stderr = child.stderr().take();
    let talk = async {
        let feed = async {
            if let Some(mut stdin) = stdin {
                // A hook that does not read its stdin is fine: a broken pipe is ignored.
                let _ = stdin.write_all(document.as_bytes()).await;
            }
        };
        let (_, out, err) = tokio::join!(feed, read_some(stdout), read_some(stderr));
        (out, err)
    };
    let ended = timeout(HOOK_TIMEOUT, async {
        let (out, err) = talk.await;
        (child.wait().await, out, err)
    })
    .await;
    let Ok((status, out, err)) = ended else {
        // Killing the leader's group: what the hook started goes too.
        let _ = Box::into_pin(child.kill()).await;
        return Err(format!("killed after {HOOK_TIMEOUT:?}"));
    };
    for (stream, text) in [("stdout", out), ("stderr", err)] {
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            tracing::info!(job = %job, run_id = notice.record.run_id, stream, line, "on_failure output");
        }
    }
    match status {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("{program} ended with {status}")),
        Err(err) => Err(format!("cannot wait for {program}: {err}")),
    }
}

/// Reads a stream to its end, keeping the first [`HOOK_OUTPUT_LOGGED`] bytes.
async fn read_some<R: tokio::io::AsyncRead + Unpin>(stream: Option<R>) -> String {
    let Some(stream) = stream else {
        return String::new();
    };
    let mut kept = Vec::new();
    let mut limited = stream.take(HOOK_OUTPUT_LOGGED);
    let _ = limited.read_to_end(&mut kept).await;
    // Drain the rest so the hook never blocks on a full pipe.
    let mut rest = limited.into_inner();
    let _ = tokio::io::copy(&mut rest, &mut tokio::io::sink()).await;
    String::from_utf8_lossy(&kept).into_owned()
}
