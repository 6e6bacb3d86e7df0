//! A job whose run is an HTTP request instead of a process (issue 23): where it goes and what
//! it carries, as the config validated it.
//!
//! Owns: `HttpTarget`, `HttpTls`, `HttpVersion`.
//! Must not: send anything (that is `delivery`), nor print a header's value: headers may hold
//! secrets read from a file or the environment.

use std::fmt;
use std::path::PathBuf;

/// Where an HTTP job's run goes. Declared in the schedule file only: a submitter chooses the
/// body, never the URL or the headers.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpTarget {
    /// An absolute `http` or `https` URL.
    pub url: String,
    /// An HTTP method token, e.g. `POST`.
    pub method: String,
    /// Sent with every request, before the contract's `Zkcron-*` headers (which win).
    pub headers: Vec<(String, String)>,
    /// A tick's (or a trigger's) body; a submission's payload is sent instead.
    pub body: Option<Vec<u8>>,
    pub tls: HttpTls,
    pub version: HttpVersion,
    /// Whether a run may be sent again after a failover.
    pub resend: Resend,
}

/// Whether a submission's run whose owner died while it was being sent may be sent again by
/// the next owner (`[[job]] http.resend`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Resend {
    /// At most once: the run's record says `running` before the request goes, so the next
    /// owner sends only what provably was not sent, and records the rest `interrupted`.
    #[default]
    Never,
    /// The target is idempotent by its `Idempotency-Key` (the run id): the request goes as soon
    /// as the run is claimed, with no write in front of it, and a run still `claimed` after a
    /// failover is sent again, with the same key.
    Idempotent,
}

/// The TLS material of an `https` target, read when the config was loaded.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HttpTls {
    /// PEM certificates trusted instead of the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// A client certificate chain and its key, PEM, for servers that ask for one.
    pub identity_pem: Option<Vec<u8>>,
    /// Where the CA came from, for messages.
    pub ca_file: Option<PathBuf>,
}

/// Which HTTP version a target is spoken to in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum HttpVersion {
    /// HTTP/1.1 over `http`; over `https`, HTTP/2 when the server offers it (ALPN).
    #[default]
    Auto,
    /// HTTP/1.1 only, even where the server offers HTTP/2.
    Http1,
    /// HTTP/2 from the first byte (prior knowledge): `h2c` over `http`.
    Http2,
}

impl fmt::Debug for HttpTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values may be secrets: their names only.
        let headers: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("HttpTarget")
            .field("url", &self.url)
            .field("method", &self.method)
            .field("headers", &headers)
            .field("body_bytes", &self.body.as_ref().map(Vec::len))
            .field("ca_file", &self.tls.ca_file)
            .field("client_identity", &self.tls.identity_pem.is_some())
            .field("version", &self.version)
            .field("resend", &self.resend)
            .finish()
    }
}

impl fmt::Debug for HttpTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpTls")
            .field("ca_file", &self.ca_file)
            .field("client_identity", &self.identity_pem.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_names_headers_but_never_their_values() {
        let target = HttpTarget {
            url: "https://orders.internal/close".into(),
            method: "POST".into(),
            headers: vec![("Authorization".into(), "Bearer s3cret".into())],
            body: None,
            tls: HttpTls::default(),
            version: HttpVersion::Auto,
            resend: Resend::Never,
        };
        let shown = format!("{target:?}");
        assert!(shown.contains("Authorization"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}
