//! The ledger's handle: the session the ledger's use cases run on, as the fire driver, HTTP,
//! `status`, the console's index and the one-shot clients hold it.
//!
//! Owns: `Ledger` (a session to the ensemble, lent by the lock driver or opened once by a
//! one-shot client, and the delayed queue's PostgreSQL store where it is kept there) and what
//! its holders may ask of it without sending a request: which session it is, and whether it has
//! ended.
//! Must not: send requests itself (the use cases do), or hand the session past the ledger.

use std::sync::Arc;
use std::time::Duration;

use super::postgres::PgStore;

use crate::ensemble::ZkSettings;
use crate::ids::SessionId;
use crate::zk::{self, Zk};

/// A session to the ensemble, for the ledger's use cases: `ledger::history(&ledger, …)`; and,
/// where the delayed queue is kept in PostgreSQL, that store, which the submissions' use cases
/// reach behind the same operations.
#[derive(Clone)]
pub struct Ledger {
    zk: Zk,
    delayed: Option<Arc<PgStore>>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("session", &self.session())
            .field("delayed_store", &self.delayed)
            .finish_non_exhaustive()
    }
}

/// A one-shot client (the CLI, `Steer`, `Delayed`) made no session within its `connect_timeout`,
/// or cannot use the delayed queue's store.
#[derive(Debug, thiserror::Error)]
pub enum Unreachable {
    #[error(transparent)]
    ZooKeeper(#[from] zk::Unreachable),
    #[error("[delayed] store = \"postgres\": the DSN cannot be used")]
    DelayedStore(#[source] super::postgres::StoreError),
}

impl Ledger {
    /// The ledger over `zk`: the lock driver's session, or a test's.
    pub fn new(zk: Zk) -> Self {
        Self { zk, delayed: None }
    }

    /// This ledger with the delayed queue kept in `store` rather than in ZooKeeper.
    #[must_use]
    pub fn with_delayed_store(mut self, store: Arc<PgStore>) -> Self {
        self.delayed = Some(store);
        self
    }

    /// The session of a one-shot client: given up after `timeout` (the config's
    /// `connect_timeout`), each of its requests bounded by `timeout` too.
    ///
    /// # Errors
    /// No session was made in time; the error names the connect string and why.
    pub async fn connect_once(
        settings: &ZkSettings,
        timeout: Duration,
    ) -> Result<Self, Unreachable> {
        Ok(Self::new(zk::connect_once(settings, timeout).await?))
    }

    /// [`Ledger::connect_once`], with the delayed queue kept in PostgreSQL when `delayed`
    /// says so: the store of lock group `lock_group` (its path), connected at its first request.
    ///
    /// # Errors
    /// As [`Ledger::connect_once`]; `DelayedStore` when the DSN is not one.
    pub async fn connect_once_with(
        settings: &ZkSettings,
        timeout: Duration,
        delayed: &crate::config::DelayedStore,
        lock_group: &str,
    ) -> Result<Self, Unreachable> {
        let ledger = Self::connect_once(settings, timeout).await?;
        let crate::config::DelayedStore::Postgres {
            dsn: Some(dsn),
            tls,
        } = delayed
        else {
            return Ok(ledger);
        };
        let store = PgStore::configured(dsn.expose(), lock_group, tls.as_ref())
            .map_err(Unreachable::DelayedStore)?;
        Ok(ledger.with_delayed_store(Arc::new(store)))
    }

    /// Which session this is (a new one after an expiry).
    pub fn session(&self) -> SessionId {
        SessionId(self.zk.session_id())
    }

    /// The session expired or was closed: no request on it can succeed.
    pub fn has_ended(&self) -> bool {
        self.zk.has_ended()
    }

    /// The session, for the ledger's use cases.
    pub(super) fn zk(&self) -> &Zk {
        &self.zk
    }

    /// The delayed queue's PostgreSQL store, when it is kept there.
    pub(super) fn delayed_store(&self) -> Option<&PgStore> {
        self.delayed.as_deref()
    }

    /// [`Ledger::delayed_store`], shared.
    pub(super) fn delayed_store_shared(&self) -> Option<Arc<PgStore>> {
        self.delayed.clone()
    }

    /// Whether the delayed queue is kept in PostgreSQL rather than in ZooKeeper.
    pub fn delayed_in_postgres(&self) -> bool {
        self.delayed.is_some()
    }

    /// The same ledger over `zk` (another bound on the same session).
    pub(super) fn on_zk(&self, zk: Zk) -> Self {
        Self {
            zk,
            delayed: self.delayed.clone(),
        }
    }
}
