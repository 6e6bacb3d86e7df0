//! `[http]`: the node's listener for metrics, status and steering (docs/API.md).
//!
//! Owns: the listen address and the bearer token (from `token_env` or `token_file`, never from
//! the schedule file itself) or the named tokens (`tokens_file`, stored hashed), and the rule
//! that beyond loopback a token is required.
//! Must not: bind or serve (`crate::http` does), nor echo the token.

use std::ops::Range;

use super::schema::RawHttp;
use super::validator::{NeededBy, Validator};
use super::{HttpConfig, NamedToken, TokenKind};

impl Validator<'_> {
    pub(super) fn http(&mut self, raw: RawHttp) -> Option<HttpConfig> {
        let listen = match raw.listen.get_ref().trim().parse::<std::net::SocketAddr>() {
            Ok(listen) => Some(listen),
            Err(_) => {
                let message =
                    "expected an address and port like \"127.0.0.1:9464\" or \"[::1]:9464\"";
                self.problem(raw.listen.span(), "http.listen", message);
                None
            }
        };
        if let (Some(tokens), true) = (
            &raw.tokens_file,
            raw.token_env.is_some() || raw.token_file.is_some(),
        ) {
            let message =
                "set either tokens_file or a single token (token_env, token_file), not both";
            self.problem(tokens.span(), "http.tokens_file", message);
        }
        let token_named =
            raw.tokens_file.is_some() || raw.token_env.is_some() || raw.token_file.is_some();
        let looks_up = self.looks_up(NeededBy::Daemon);
        let tokens = raw
            .tokens_file
            .filter(|_| looks_up)
            .map(|file| self.named_tokens(file.get_ref(), file.span()))
            .unwrap_or_default();
        let token = match (raw.token_env, raw.token_file) {
            (Some(env), Some(_)) => {
                let message = "set either token_env or token_file, not both";
                self.problem(env.span(), "http.token_env", message);
                None
            }
            _ if !looks_up => None,
            (var, file) => {
                self.secret_from(var, file, ("http.token_env", "http.token_file"), "token")
            }
        };
        let listen = listen?;
        if !token_named && !listen.ip().is_loopback() {
            let message = format!(
                "listening on {listen}, beyond loopback, needs a token for its write endpoints: set token_env or token_file"
            );
            self.problem(raw.listen.span(), "http.listen", message);
        }
        Some(HttpConfig {
            listen,
            token,
            tokens,
        })
    }

    /// The lines of a tokens file: `NAME KIND SHA256-HEX`, `#` comments and blank lines
    /// skipped (`zkcron http-token NAME` makes a line).
    fn named_tokens(&mut self, path: &str, span: Range<usize>) -> Vec<NamedToken> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) => {
                let message = format!("cannot read tokens file {path}: {err}");
                self.problem(span, "http.tokens_file", message);
                return Vec::new();
            }
        };
        let mut tokens = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match named_token(line) {
                Ok(token) => tokens.push(token),
                Err(why) => {
                    let message = format!("{path}:{}: {why}", number + 1);
                    self.problem(span.clone(), "http.tokens_file", message);
                }
            }
        }
        if tokens.is_empty() {
            let message = format!("tokens file {path} names no token");
            self.problem(span, "http.tokens_file", message);
        }
        tokens
    }
}

fn named_token(line: &str) -> Result<NamedToken, &'static str> {
    let expected =
        "expected NAME KIND SHA256 (KIND: write or read; made by `zkcron http-token NAME`)";
    let [name, kind, hash] = line.split_whitespace().collect::<Vec<_>>()[..] else {
        return Err(expected);
    };
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    {
        return Err("a token's name may hold letters, digits, '_', '.' and '-' only");
    }
    let kind = match kind {
        "write" => TokenKind::Write,
        "read" => TokenKind::Read,
        _ => return Err(expected),
    };
    let mut sha256 = [0u8; 32];
    if hash.len() != 64 {
        return Err("the hash is 64 hex digits (SHA-256)");
    }
    for (i, byte) in sha256.iter_mut().enumerate() {
        *byte = hash
            .get(2 * i..2 * i + 2)
            .and_then(|pair| u8::from_str_radix(pair, 16).ok())
            .ok_or("the hash is 64 hex digits (SHA-256)")?;
    }
    Ok(NamedToken {
        name: name.to_owned(),
        kind,
        sha256,
    })
}
