//! A real local HTTP server that HTTP targets deliver to (issue 23): it records every request it
//! is sent and answers by path, so a test can make a target fail, ask for a pause or hang.
//!
//! Owns: the receiver's listeners (plain, TLS with the test PKI, and a silent one that reads a
//! request and never answers), what it answers, and what it saw.
//! Must not: start zkcron or ZooKeeper.
//!
//! Answers by path (the attempt is the request's `Zkcron-Attempt`):
//! - `/ok`: 200.
//! - `/fail-then-ok`: attempt 1 gets 500 with `database down`, later attempts 200.
//! - `/always-fail`: 500 with a 2000-byte body (more than a record keeps).
//! - `/busy-then-ok`: attempt 1 gets 429 with `Retry-After: 2`, later attempts 200.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri, Version};
use axum::response::{IntoResponse, Response};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::daemon::now_ms;

/// One request the receiver was sent.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// `HTTP/1.1` or `HTTP/2.0`.
    pub version: String,
    pub path: String,
    /// Lowercase names.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    pub at_ms: i64,
}

impl Seen {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }
}

#[derive(Debug, Default)]
struct State {
    seen: Mutex<Vec<Seen>>,
    /// When the silent listener's connections were closed by the client, in Unix ms.
    closed: Mutex<Vec<i64>>,
    /// When the silent listener read a request it will never answer, in Unix ms.
    held: Mutex<Vec<i64>>,
    /// The headers of those requests (lowercase names), in arrival order.
    held_headers: Mutex<Vec<BTreeMap<String, String>>>,
}

/// The running receiver; its tasks end with the test's runtime.
pub struct Receiver {
    /// `http://127.0.0.1:PORT` (or `https://localhost:PORT`).
    pub base: String,
    /// `http://127.0.0.1:PORT` of the listener that never answers.
    pub silent: String,
    state: Arc<State>,
}

impl Receiver {
    /// A plain HTTP receiver on a free loopback port.
    pub async fn start() -> Self {
        Self::serve(None).await
    }

    /// An HTTPS receiver presenting `server_pem` (its certificate, then its key), named
    /// `localhost`.
    pub async fn start_tls(server_pem: &Path) -> Self {
        let pem = std::fs::read(server_pem).expect("read the server's PEM");
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<_, _>>()
            .expect("the server's certificate");
        let key = PrivateKeyDer::from_pem_slice(&pem).expect("the server's key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("a server TLS config");
        Self::serve(Some(TlsAcceptor::from(Arc::new(config)))).await
    }

    async fn serve(tls: Option<TlsAcceptor>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let port = listener.local_addr().expect("receiver address").port();
        let state = Arc::new(State::default());
        let app = router(Arc::clone(&state));
        let base = match tls {
            None => {
                tokio::spawn(async move { axum::serve(listener, app).await });
                format!("http://127.0.0.1:{port}")
            }
            Some(acceptor) => {
                let tls = TlsListener { listener, acceptor };
                tokio::spawn(async move { axum::serve(tls, app).await });
                format!("https://localhost:{port}")
            }
        };
        let silent = start_silent(Arc::clone(&state)).await;
        Self {
            base,
            silent,
            state,
        }
    }

    /// Every request so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.state
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The headers of each request the silent listener holds (lowercase names).
    pub fn held_headers(&self) -> Vec<BTreeMap<String, String>> {
        self.state
            .held_headers
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default()
    }

    /// When the silent listener read a request, and when its client closed the connection.
    pub fn silent_log(&self) -> (Vec<i64>, Vec<i64>) {
        let held = self
            .state
            .held
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default();
        let closed = self
            .state
            .closed
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default();
        (held, closed)
    }
}

fn router(state: Arc<State>) -> Router {
    Router::new().fallback(
        move |method: Method, version: Version, uri: Uri, headers: HeaderMap, body: Bytes| {
            let state = Arc::clone(&state);
            async move { answer(&state, (method, version), &uri, &headers, body) }
        },
    )
}

fn answer(
    state: &State,
    (method, version): (Method, Version),
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let headers: BTreeMap<String, String> = headers
        .iter()
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            (name.as_str().to_owned(), value)
        })
        .collect();
    let seen = Seen {
        method: method.to_string(),
        version: format!("{version:?}"),
        path: uri.path().to_owned(),
        headers,
        body: body.to_vec(),
        at_ms: now_ms(),
    };
    let first = seen.header("zkcron-attempt") == "1";
    let path = seen.path.clone();
    let mut all = state
        .seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let first_to_path = !all.iter().any(|earlier| earlier.path == path);
    all.push(seen);
    drop(all);
    match path.as_str() {
        "/unavailable-once" if first_to_path => {
            (StatusCode::SERVICE_UNAVAILABLE, "not yet").into_response()
        }
        "/fail-then-ok" if first => {
            (StatusCode::INTERNAL_SERVER_ERROR, "database down").into_response()
        }
        "/always-fail" => (StatusCode::INTERNAL_SERVER_ERROR, "x".repeat(2000)).into_response(),
        "/busy-then-ok" if first => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "2")],
            "slow down",
        )
            .into_response(),
        _ => (StatusCode::OK, "ok").into_response(),
    }
}

/// A listener that reads each request and never answers, noting when its client gives up.
async fn start_silent(state: Arc<State>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind silent");
    let port = listener.local_addr().expect("silent address").port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(hold(stream, Arc::clone(&state)));
        }
    });
    format!("http://127.0.0.1:{port}")
}

async fn hold(mut stream: TcpStream, state: Arc<State>) {
    let mut buffer = vec![0u8; 16 * 1024];
    let mut noted = false;
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) if !noted => {
                noted = true;
                state.held.lock().map(|mut v| v.push(now_ms())).ok();
                let head = String::from_utf8_lossy(&buffer[..read]).into_owned();
                let headers = head
                    .lines()
                    .skip(1)
                    .filter_map(|line| line.split_once(':'))
                    .map(|(name, value)| {
                        (name.trim().to_ascii_lowercase(), value.trim().to_owned())
                    })
                    .collect();
                state.held_headers.lock().map(|mut v| v.push(headers)).ok();
            }
            Ok(_) => {}
        }
    }
    state.closed.lock().map(|mut v| v.push(now_ms())).ok();
}

/// TLS over a TCP listener, for `axum::serve`: a failed handshake (a client that does not trust
/// the certificate) is skipped.
struct TlsListener {
    listener: TcpListener,
    acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((stream, addr)) = self.listener.accept().await else {
                continue;
            };
            if let Ok(tls) = self.acceptor.accept(stream).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}
