//! A minimal HTTP/1.1 client for the tests of the node's listener: one request per connection,
//! `Connection: close`, the whole reply read back.
//!
//! Owns: writing a request and splitting the reply into status, headers and body.
//! Must not: be used for anything but the tests' own requests to a node on loopback.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A request gets this long for its whole reply (a release waits for the lock to move).
const REPLY_WITHIN: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// The header lines, lowercased names.
    pub headers: String,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|err| panic!("JSON body ({err}): {self:?}"))
    }
}

/// `METHOD path` to 127.0.0.1:`port`, with a bearer `token` and a JSON `body` if given.
pub async fn request(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Reply {
    let authorization = token.map(|token| format!("Bearer {token}"));
    let headers: Vec<(&str, &str)> = authorization
        .iter()
        .map(|value| ("Authorization", value.as_str()))
        .collect();
    request_with(port, method, path, &headers, body).await
}

/// `METHOD path` to 127.0.0.1:`port`, with these headers and a JSON `body` if given.
pub async fn request_with(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Reply {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap_or_else(|err| panic!("connect to the node's listener on {port}: {err}"));
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream
        .write_all(head.as_bytes())
        .await
        .expect("send the request");
    let mut reply = Vec::new();
    tokio::time::timeout(REPLY_WITHIN, stream.read_to_end(&mut reply))
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: no reply within {REPLY_WITHIN:?}"))
        .expect("read the reply");
    let text = String::from_utf8_lossy(&reply).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let (status_line, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {status_line:?}"));
    Reply {
        status,
        headers: headers.to_lowercase(),
        body: body.to_owned(),
    }
}

/// The port a node logged its listener up on (`listen = "127.0.0.1:0"` picks a free one).
pub fn logged_port(log: &str) -> Option<u16> {
    log.lines()
        .find(|line| line.contains("http listener up"))?
        .split_whitespace()
        .find_map(|field| field.strip_prefix("listen="))?
        .rsplit_once(':')?
        .1
        .parse()
        .ok()
}
