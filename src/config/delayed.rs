//! `[delayed]`: where the delayed queue is kept — ZooKeeper (the default) or a PostgreSQL
//! database, for a queue of millions (docs/DELAYED.md).
//!
//! Owns: `store`, the DSN's source (`dsn_env` or `dsn_file`, never the schedule file itself,
//! since a DSN may carry a password) and the TLS files (`tls`), read on this host only when a
//! command reaches the ledger, and the DSN checked (`crate::dsn`) where it was read.
//! Must not: connect to the database (`ledger::postgres` does).

use super::DelayedStore;
use super::schema::RawDelayed;
use super::validator::{NeededBy, Validator};

impl Validator<'_> {
    pub(super) fn delayed(&mut self, raw: Option<RawDelayed>) -> DelayedStore {
        let Some(raw) = raw else {
            return DelayedStore::ZooKeeper;
        };
        let postgres = match raw.store.as_ref().map(|store| store.get_ref().as_str()) {
            None | Some("zookeeper") => false,
            Some("postgres") => true,
            Some(other) => {
                let span = raw
                    .store
                    .as_ref()
                    .map(toml::Spanned::span)
                    .unwrap_or_default();
                let message = format!("expected \"zookeeper\" or \"postgres\", found {other:?}");
                self.problem(span, "delayed.store", message);
                return DelayedStore::ZooKeeper;
            }
        };
        if !postgres {
            let given = [
                (
                    "delayed.dsn_env",
                    raw.dsn_env.as_ref().map(toml::Spanned::span),
                ),
                (
                    "delayed.dsn_file",
                    raw.dsn_file.as_ref().map(toml::Spanned::span),
                ),
                ("delayed.tls", raw.tls.as_ref().map(toml::Spanned::span)),
            ];
            for (key, span) in given {
                if let Some(span) = span {
                    self.problem(span, key, "only read with store = \"postgres\"");
                }
            }
            return DelayedStore::ZooKeeper;
        }
        let store_span = raw
            .store
            .as_ref()
            .map(toml::Spanned::span)
            .unwrap_or_default();
        let source_span = raw
            .dsn_env
            .as_ref()
            .or(raw.dsn_file.as_ref())
            .map(toml::Spanned::span);
        let tls_given = raw.tls.is_some();
        let tls = raw.tls.and_then(|tls| self.tls(tls, "delayed.tls"));
        let dsn = match (raw.dsn_env, raw.dsn_file) {
            (Some(env), Some(_)) => {
                self.problem(
                    env.span(),
                    "delayed.dsn_env",
                    "set either dsn_env or dsn_file, not both",
                );
                None
            }
            (None, None) => {
                let message = "store = \"postgres\" needs its DSN: set dsn_env (an environment \
                               variable's name) or dsn_file (a file holding it)";
                self.problem(store_span, "delayed.store", message);
                None
            }
            // Every command that reaches the ledger reads it, as it reaches ZooKeeper.
            _ if !self.looks_up(NeededBy::ZooKeeper) => None,
            (var, file) => {
                self.secret_from(var, file, ("delayed.dsn_env", "delayed.dsn_file"), "DSN")
            }
        };
        if let (Some(secret), Some(span)) = (&dsn, source_span) {
            // What the DSN says is checked here, never echoed: it may carry a password.
            if let Err(problem) = crate::dsn::parse(secret.expose(), tls_given) {
                self.problem(span, "delayed.dsn", problem.to_string());
            }
        }
        DelayedStore::Postgres { dsn, tls }
    }
}
