//! A PostgreSQL connection string (DSN), as the delayed queue's store reads it: parsed by
//! tokio-postgres and checked against `[delayed] tls`, for `zkcron check` and for the store
//! alike.
//!
//! Owns: what a DSN says that zkcron acts on (a connection string at all; `sslmode` against
//! TLS), in words that never show the DSN itself, since it may carry a password.
//! Must not: connect (`ledger::postgres` does), or read the DSN from where it is kept (`config`
//! does).

use tokio_postgres::config::SslMode;

/// What is wrong with a DSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DsnProblem {
    #[error("not a PostgreSQL connection string (libpq's key=value form or a postgresql:// URL)")]
    NotOne,
    #[error(
        "the DSN says sslmode=require: set [delayed] tls with the CA that signed the server's \
         certificate"
    )]
    TlsWanted,
    #[error("the DSN says sslmode=disable beside [delayed] tls: remove one of them")]
    TlsRefused,
}

/// `text` parsed, if it is a DSN whose `sslmode` agrees with `tls` (`[delayed] tls` is set).
///
/// # Errors
/// What is wrong with it.
pub fn parse(text: &str, tls: bool) -> Result<tokio_postgres::Config, DsnProblem> {
    let parsed: tokio_postgres::Config = text.parse().map_err(|_| DsnProblem::NotOne)?;
    sslmode_problem(&parsed, tls).map_or(Ok(parsed), Err)
}

/// What is wrong with `dsn`'s `sslmode` beside `[delayed] tls` (set or not), if anything: a
/// DSN that asks for TLS needs the CA to check the server with, and one that refuses it
/// contradicts `tls`.
pub fn sslmode_problem(dsn: &tokio_postgres::Config, tls: bool) -> Option<DsnProblem> {
    match (dsn.get_ssl_mode(), tls) {
        (SslMode::Require, false) => Some(DsnProblem::TlsWanted),
        (SslMode::Disable, true) => Some(DsnProblem::TlsRefused),
        _ => None,
    }
}
