//! `[http]`: the node's listener for metrics, status and steering (docs/API.md).
//!
//! Owns: the listen address and the bearer token (from `token_env` or `token_file`, never from
//! the schedule file itself), and the rule that beyond loopback a token is required.
//! Must not: bind or serve (`crate::http` does), nor echo the token.

use super::schema::RawHttp;
use super::validator::Validator;
use super::{HttpConfig, Secret};

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
        let token = match (raw.token_env, raw.token_file) {
            (Some(env), Some(_)) => {
                let message = "set either token_env or token_file, not both";
                self.problem(env.span(), "http.token_env", message);
                None
            }
            (Some(var), None) => match (self.env)(var.get_ref()).filter(|t| !t.trim().is_empty()) {
                Some(value) => Some(Secret::new(value.trim())),
                None => {
                    let message =
                        format!("environment variable {} is not set or empty", var.get_ref());
                    self.problem(var.span(), "http.token_env", message);
                    None
                }
            },
            (None, Some(file)) => match std::fs::read_to_string(file.get_ref()) {
                Ok(text) if !text.trim().is_empty() => Some(Secret::new(text.trim())),
                Ok(_) => {
                    let message = format!("token file {} is empty", file.get_ref());
                    self.problem(file.span(), "http.token_file", message);
                    None
                }
                Err(err) => {
                    let message = format!("cannot read token file {}: {err}", file.get_ref());
                    self.problem(file.span(), "http.token_file", message);
                    None
                }
            },
            (None, None) => None,
        };
        let listen = listen?;
        if token.is_none() && !listen.ip().is_loopback() {
            let message = format!(
                "listening on {listen}, beyond loopback, needs a token for its write endpoints: set token_env or token_file"
            );
            self.problem(raw.listen.span(), "http.listen", message);
        }
        Some(HttpConfig { listen, token })
    }
}
