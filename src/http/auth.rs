//! Who a request may act as: bearer tokens (one write token, or named read and write tokens),
//! compared in constant time, and the name a person gives beside what proved the right.
//!
//! Owns: authorizing a request and naming who asked, for the records.
//! Must not: answer the request.

use std::net::SocketAddr;

use axum::http::{HeaderMap, StatusCode, header};

use super::errors::ApiError;
use super::state::HttpState;
use crate::audit::Who;
use crate::config::{NamedToken, TokenKind};

/// Write endpoints need `Authorization: Bearer <token>`; without a configured token they are off.
/// Who a request may act as: the caller of a write endpoint must be allowed to write (`Write`);
/// with named tokens, `/v1/` reads need one too (`Read`). Returns who asked, for the records:
/// the named token, the peer, and the name the request gives.
pub(super) fn authorize(
    state: &HttpState,
    headers: &HeaderMap,
    need: TokenKind,
    peer: SocketAddr,
) -> Result<Who, ApiError> {
    let token = proven(state, headers, need)?;
    Ok(Who::http(token, peer.ip(), given_name(headers)))
}

/// The named token the request proves to hold; `None` where no name proves it (the one write
/// token, or a read open to all).
pub(super) fn proven(
    state: &HttpState,
    headers: &HeaderMap,
    need: TokenKind,
) -> Result<Option<String>, ApiError> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim);
    if !state.tokens.is_empty() {
        return named(&state.tokens, given, need).map(Some);
    }
    if need == TokenKind::Read {
        return Ok(None);
    }
    let Some(token) = &state.token else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "write endpoints are off: [http] has no token_env, token_file or tokens_file",
        ));
    };
    match given {
        Some(given) if same_secret(given.as_bytes(), token.expose().as_bytes()) => Ok(None),
        Some(_) => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "wrong bearer token",
        )),
        None => Err(needs_token()),
    }
}

/// The named token `given` is, if it may do `need`: its name.
pub(super) fn named(
    tokens: &[NamedToken],
    given: Option<&str>,
    need: TokenKind,
) -> Result<String, ApiError> {
    let given = given.ok_or_else(needs_token)?;
    let hash = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, given.as_bytes());
    let token = tokens
        .iter()
        .find(|token| same_secret(hash.as_ref(), &token.sha256))
        .ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "wrong bearer token"))?;
    if need == TokenKind::Write && token.kind != TokenKind::Write {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!("token {} is read-only", token.name),
        ));
    }
    Ok(token.name.clone())
}

pub(super) fn needs_token() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "this endpoint needs Authorization: Bearer <token>",
    )
}

/// Compares without stopping at the first difference, so timing tells nothing of the token.
pub(super) fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

/// The header a person names themselves with (the console sends it): recorded beside the
/// address or token that proved the right to write, never instead of it.
pub(super) const ACTOR_HEADER: &str = "x-zkcron-actor";

/// The name the request gives in [`ACTOR_HEADER`], if any. Only letters, digits and ` .-_@`
/// are kept, at most 64 of them.
pub(super) fn given_name(headers: &HeaderMap) -> Option<String> {
    let name: String = headers
        .get(ACTOR_HEADER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_alphanumeric() || " .-_@".contains(*c))
        .take(64)
        .collect();
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same_secret(b"s3cret", b"s3cret"));
        assert!(!same_secret(b"s3cres", b"s3cret"));
        assert!(!same_secret(b"s3cre", b"s3cret"));
        assert!(!same_secret(b"", b"s3cret"));
    }
}
