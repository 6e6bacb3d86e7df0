//! `[delayed]`: where the delayed queue is kept — ZooKeeper (the default) or a PostgreSQL
//! database, for a queue of millions (docs/DELAYED.md).
//!
//! Owns: `store`, and the DSN's source (`dsn_env` or `dsn_file`, never the schedule file
//! itself, since a DSN may carry a password), read on this host only when a command reaches
//! the ledger.
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
            for (key, given) in [
                ("delayed.dsn_env", &raw.dsn_env),
                ("delayed.dsn_file", &raw.dsn_file),
            ] {
                if let Some(given) = given {
                    let message = "only read with store = \"postgres\"";
                    self.problem(given.span(), key, message);
                }
            }
            return DelayedStore::ZooKeeper;
        }
        let store_span = raw
            .store
            .as_ref()
            .map(toml::Spanned::span)
            .unwrap_or_default();
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
        DelayedStore::Postgres { dsn }
    }
}
