//! `[[job]] http = { … }`: a job whose run is an HTTP request (issue 23).
//!
//! Owns: the target's URL, method, headers (literal, or read from the environment or a file as
//! `[http]` tokens are), body, TLS files, HTTP version and whether a run may be sent again
//! after a failover (`resend`), and the keys that apply to a process
//! only (`working_dir`, `env`, `kill_grace`), refused beside it.
//! Must not: connect anywhere (`crate::delivery` does), nor echo a header read from a secret.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;

use reqwest::header::{HeaderName, HeaderValue};
use toml::Spanned;

use super::error::JobContext;
use super::schema::RawHttpTarget;
use super::validator::{NeededBy, Validator};
use super::{Problem, Secret};
use crate::run::{HttpTarget, HttpTls, HttpVersion, Resend};

/// Headers zkcron sets on every request: the run's contract and the HTTP client's own framing.
const RESERVED_HEADERS: [&str; 5] = [
    "idempotency-key",
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
];

impl Validator<'_> {
    /// The job's `http` table; `None` when it cannot be used (the problems are recorded).
    pub(super) fn http_target(
        &mut self,
        raw: Spanned<RawHttpTarget>,
        job: JobContext<'_>,
    ) -> Option<HttpTarget> {
        let span = raw.span();
        let raw = raw.into_inner();
        let url = self.http_url(
            &raw.url,
            job.key("http.url"),
            "send them in a header read by headers_from_env or headers_from_file",
        );
        let method = match &raw.method {
            None => Some("POST".to_owned()),
            Some(method) => {
                let upper = method.get_ref().trim().to_ascii_uppercase();
                match reqwest::Method::from_bytes(upper.as_bytes()) {
                    Ok(_) if !upper.is_empty() => Some(upper),
                    _ => {
                        let message = "expected an HTTP method like \"POST\" or \"PUT\"";
                        self.problem(method.span(), job.key("http.method"), message);
                        None
                    }
                }
            }
        };
        let tls = self.target_tls(&raw, span, job);
        let mut headers = Vec::new();
        let mut seen = BTreeMap::new();
        let literal = raw
            .headers
            .map(|h| (h, "http.headers", HeaderSource::Literal));
        let env = raw
            .headers_from_env
            .map(|h| (h, "http.headers_from_env", HeaderSource::Env));
        let file = raw
            .headers_from_file
            .map(|h| (h, "http.headers_from_file", HeaderSource::File));
        for (table, key, source) in [literal, env, file].into_iter().flatten() {
            let span = table.span();
            for (name, value) in table.into_inner() {
                let context = job.key(&format!("{key}.{name}"));
                if let Some(earlier) = seen.insert(name.to_ascii_lowercase(), key) {
                    let message = format!("header {name} is set in {earlier} already");
                    self.problem(span.clone(), context, message);
                    continue;
                }
                if let Some(header) = self.header(&name, &value, source, span.clone(), context) {
                    headers.push(header);
                }
            }
        }
        let version = match &raw.version {
            None => Some(HttpVersion::Auto),
            Some(version) => match version.get_ref().as_str() {
                "auto" => Some(HttpVersion::Auto),
                "http1" => Some(HttpVersion::Http1),
                "http2" => Some(HttpVersion::Http2),
                _ => {
                    let message = "expected \"auto\", \"http1\" or \"http2\"";
                    self.problem(version.span(), job.key("http.version"), message);
                    None
                }
            },
        };
        let resend = match &raw.resend {
            None => Some(Resend::Never),
            Some(resend) => match resend.get_ref().as_str() {
                "never" => Some(Resend::Never),
                "idempotent" => Some(Resend::Idempotent),
                _ => {
                    let message = "expected \"never\" (at most once, the default) or \"idempotent\" (the target deduplicates by Idempotency-Key)";
                    self.problem(resend.span(), job.key("http.resend"), message);
                    None
                }
            },
        };
        Some(HttpTarget {
            url: url?,
            method: method?,
            headers,
            body: raw.body.map(|body| body.into_inner().into_bytes()),
            tls: tls?,
            version: version?,
            resend: resend?,
        })
    }

    /// An absolute `http` or `https` URL with a host and no credentials in it; `secrets_go`
    /// says where credentials belong instead.
    pub(super) fn http_url(
        &mut self,
        raw: &Spanned<String>,
        context: String,
        secrets_go: &str,
    ) -> Option<String> {
        let text = raw.get_ref().trim();
        let url = match reqwest::Url::parse(text) {
            Ok(url) => url,
            Err(err) => {
                let message =
                    format!("expected a URL like \"http://127.0.0.1:8080/orders/close\" ({err})");
                self.problem(raw.span(), context, message);
                return None;
            }
        };
        let holds_credentials = !url.username().is_empty() || url.password().is_some();
        let why = if !matches!(url.scheme(), "http" | "https") {
            Some(format!(
                "expected an http:// or https:// URL, not {}://",
                url.scheme()
            ))
        } else if url.host_str().is_none_or(str::is_empty) {
            Some("the URL names no host".to_owned())
        } else if holds_credentials {
            Some(format!(
                "credentials do not belong in the URL: {secrets_go}"
            ))
        } else {
            None
        };
        match why {
            Some(message) => {
                self.problem(raw.span(), context, message);
                if let Some(problem) = self.problems.last_mut() {
                    // Never echo a password, not even in the line a problem points at.
                    problem.secret = holds_credentials;
                }
                None
            }
            None => Some(url.to_string()),
        }
    }

    /// One header: its name checked, its value from where `source` says, checked too.
    fn header(
        &mut self,
        name: &str,
        value: &str,
        source: HeaderSource,
        span: Range<usize>,
        context: String,
    ) -> Option<(String, String)> {
        let lower = name.to_ascii_lowercase();
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            self.problem(span, context, format!("{name:?} is not a header name"));
            return None;
        }
        if lower.starts_with("zkcron-") || RESERVED_HEADERS.contains(&lower.as_str()) {
            let message = format!("{name} is set by zkcron for every request");
            self.problem(span, context, message);
            return None;
        }
        let value = match source {
            HeaderSource::Literal => value.to_owned(),
            // Named, not read: left out of a config that sends nothing.
            HeaderSource::Env | HeaderSource::File if !self.looks_up(NeededBy::Daemon) => {
                return None;
            }
            HeaderSource::Env => match (self.env)(value).filter(|v| !v.trim().is_empty()) {
                Some(secret) => secret.trim().to_owned(),
                None => {
                    let message = format!("environment variable {value} is not set or empty");
                    self.problem(span, context, message);
                    return None;
                }
            },
            HeaderSource::File => match std::fs::read_to_string(value) {
                Ok(text) if !text.trim().is_empty() => text.trim().to_owned(),
                Ok(_) => {
                    self.problem(span, context, format!("header file {value} is empty"));
                    return None;
                }
                Err(err) => {
                    let message = format!("cannot read header file {value}: {err}");
                    self.problem(span, context, message);
                    return None;
                }
            },
        };
        if HeaderValue::from_str(&value).is_err() {
            let message = match source {
                HeaderSource::Literal => format!("{value:?} is not a valid header value"),
                // Never echo a secret.
                HeaderSource::Env | HeaderSource::File => {
                    "the value read holds characters a header may not (a line break, a control \
                     character)"
                        .to_owned()
                }
            };
            self.problems.push(Problem {
                span: Some(span),
                context,
                message,
                secret: source != HeaderSource::Literal,
            });
            return None;
        }
        Some((name.to_owned(), value))
    }

    /// `ca_file`, `client_cert` and `client_key`, read and parsed now: a bad file is a problem
    /// at load, not a failed run at 3 a.m.
    fn target_tls(
        &mut self,
        raw: &RawHttpTarget,
        span: Range<usize>,
        job: JobContext<'_>,
    ) -> Option<HttpTls> {
        let mut tls = HttpTls::default();
        let mut usable = true;
        let looks_up = self.looks_up(NeededBy::Daemon);
        if let Some(ca_file) = raw.ca_file.as_ref().filter(|_| looks_up) {
            let context = job.key("http.ca_file");
            if let Some(pem) = self.read_file(ca_file, &context) {
                match reqwest::Certificate::from_pem_bundle(pem.as_bytes()) {
                    Ok(certs) if !certs.is_empty() => {
                        tls.ca_pem = Some(pem.into_bytes());
                        tls.ca_file = Some(PathBuf::from(ca_file.get_ref()));
                    }
                    Ok(_) | Err(_) => {
                        let message = format!(
                            "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                            ca_file.get_ref()
                        );
                        self.problem(ca_file.span(), context, message);
                        usable = false;
                    }
                }
            } else {
                usable = false;
            }
        }
        match (&raw.client_cert, &raw.client_key) {
            (Some(_), Some(_)) if !looks_up => {}
            (Some(cert), Some(key)) => {
                let cert_pem = self.read_file(cert, &job.key("http.client_cert"));
                let key_pem = self
                    .read_file(key, &job.key("http.client_key"))
                    .map(Secret::new);
                match (cert_pem, key_pem) {
                    (Some(cert_pem), Some(key_pem)) => {
                        let mut identity = cert_pem.into_bytes();
                        identity.push(b'\n');
                        identity.extend_from_slice(key_pem.expose().as_bytes());
                        if let Err(err) = reqwest::Identity::from_pem(&identity) {
                            let message = format!(
                                "{} and {} are not a PEM certificate and its private key ({err})",
                                cert.get_ref(),
                                key.get_ref()
                            );
                            self.problem(cert.span(), job.key("http.client_cert"), message);
                            usable = false;
                        } else {
                            tls.identity_pem = Some(identity);
                        }
                    }
                    _ => usable = false,
                }
            }
            (None, None) => {}
            (Some(_), None) | (None, Some(_)) => {
                let message = "set both client_cert and client_key, or neither";
                self.problem(span, job.key("http"), message);
                usable = false;
            }
        }
        usable.then_some(tls)
    }
}

/// Where a header's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeaderSource {
    /// Written in the schedule file.
    Literal,
    /// `headers_from_env`: the value names an environment variable.
    Env,
    /// `headers_from_file`: the value names a file.
    File,
}
