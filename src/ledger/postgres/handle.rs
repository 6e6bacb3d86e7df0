//! The PostgreSQL store's handle: one connection to the database, made again when the last one
//! ended, and the statements prepared on it.
//!
//! Owns: `PgStore` (the DSN's settings, the lock group, the live connection) and opening it
//! (connect, migrate, prepare).
//! Must not: send the queue's statements (`queue` and `fence` do).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use tokio_postgres::Socket;
use tokio_postgres::config::SslMode;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};

use super::error::StoreError;
use super::schema;
use super::statements::Statements;

/// How long a request (and a connection's start) may go unanswered, unless the DSN's
/// `connect_timeout` says otherwise for the start: ZooKeeper's doorway bounds its requests the
/// same way (`zk::REQUEST_BOUND`).
pub const REQUEST_BOUND: Duration = Duration::from_secs(10);

/// Every statement of the store reads through an index that matches its order and bound; a
/// bitmap or sequential scan is never what it wants. Without these, a new day's partition (no
/// statistics yet) had a claim of 100 read every due row through a bitmap scan and sort them
/// (`EXPLAIN ANALYZE`: all 10 000 due rows for 100), a cost that grows with the backlog.
/// Scoped to the store's own connections.
const PLANNER_SETTINGS: &str = "SET enable_bitmapscan = off; SET enable_seqscan = off";

/// The delayed queue in PostgreSQL, for one fleet, claimed under one lock group's fence: a
/// client connected again whenever the previous connection ended (the server restarted, or the
/// network dropped it).
pub struct PgStore {
    config: tokio_postgres::Config,
    /// The queue's key: the fleet's lock path (its default group's), whatever group claims.
    pub(super) lock_group: String,
    /// The fence's key: the lock path of the group whose owner claims through this handle (the
    /// default group's, `lock_group`, unless [`PgStore::fenced_by`] says otherwise). Each
    /// group's tokens count on their own, as each group's `epoch` does in ZooKeeper.
    pub(super) fence_group: String,
    live: Mutex<Option<Arc<Live>>>,
    /// A second connection for what may take long and has no one waiting on it — the owner's
    /// chores (the pending count, prunes, the forget sweep, dropping days) and history reads —
    /// so that it never queues the claims behind it: a connection answers in order.
    side: Mutex<Option<Arc<Live>>>,
    /// The schema was brought to this version's by this handle's first connection.
    migrated: std::sync::atomic::AtomicBool,
    /// The newest token this handle raised the fence to (0: none yet).
    pub(super) raised: std::sync::atomic::AtomicI64,
    /// How long a request may go unanswered before the connection is given up.
    request_bound: Duration,
    /// TLS to the server (`[delayed] tls`); `None`: plain, as the DSN's default `sslmode`
    /// (`prefer`) then connects.
    pub(super) tls: Option<rustls_tokio_postgres::MakeRustlsConnect>,
}

/// An opened client, its connection polled by a task of its own until it ends.
fn spawned<S>(
    (client, connection): (
        tokio_postgres::Client,
        tokio_postgres::Connection<Socket, S>,
    ),
) -> tokio_postgres::Client
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(%error, "the connection to PostgreSQL ended");
        }
    });
    client
}

/// One connection and the statements prepared on it.
pub(super) struct Live {
    pub(super) client: tokio_postgres::Client,
    pub(super) statements: Statements,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The DSN may hold a password: only where it leads.
        f.debug_struct("PgStore")
            .field("hosts", &self.config.get_hosts())
            .field("dbname", &self.config.get_dbname())
            .field("lock_group", &self.lock_group)
            .field("fence_group", &self.fence_group)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects to the database `dsn` names (a libpq connection string or URL), brings its
    /// schema to this version's, and keeps the queue of `lock_group` (its ZooKeeper lock path).
    ///
    /// # Errors
    /// `Dsn` for a string that is not one; `Unreachable`; `NewerSchema` when a newer zkcron
    /// migrated the database; `Migration` when a migration failed.
    pub async fn open(dsn: &str, lock_group: &str) -> Result<Self, StoreError> {
        let store = Self::new(dsn, lock_group)?;
        store.live().await?;
        Ok(store)
    }

    /// The store of `lock_group` in the database `dsn` names, not connected yet: its first
    /// request connects and migrates, as [`PgStore::open`] does. A daemon starts so, and goes on
    /// firing its ticks while the database is away.
    ///
    /// # Errors
    /// `Dsn` for a string that is not one.
    pub fn new(dsn: &str, lock_group: &str) -> Result<Self, StoreError> {
        let mut config: tokio_postgres::Config = dsn.parse().map_err(StoreError::Dsn)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(REQUEST_BOUND);
        }
        Ok(Self {
            config,
            lock_group: lock_group.to_owned(),
            fence_group: lock_group.to_owned(),
            live: Mutex::new(None),
            side: Mutex::new(None),
            migrated: std::sync::atomic::AtomicBool::new(false),
            raised: std::sync::atomic::AtomicI64::new(0),
            request_bound: REQUEST_BOUND,
            tls: None,
        })
    }

    /// [`PgStore::new`] as `[delayed]` configures it: over TLS with `tls` (the server's
    /// certificate checked against its CA, this node's presented when given), where the DSN's
    /// `sslmode` of `prefer` (its default) becomes `require`, so TLS is never given up for a
    /// plain connection; plain without it.
    ///
    /// # Errors
    /// `Dsn` for a string that is not one; `Tls` when the files are not usable, or the DSN's
    /// `sslmode` contradicts `tls` (`crate::dsn::sslmode_problem`).
    pub fn configured(
        dsn: &str,
        lock_group: &str,
        tls: Option<&crate::ensemble::TlsFiles>,
    ) -> Result<Self, StoreError> {
        let mut store = Self::new(dsn, lock_group)?;
        if let Some(problem) = crate::dsn::sslmode_problem(&store.config, tls.is_some()) {
            return Err(StoreError::Tls(problem.to_string()));
        }
        if let Some(files) = tls {
            let client = files.client_config().map_err(StoreError::Tls)?;
            store.config.ssl_mode(SslMode::Require);
            store.tls = Some(rustls_tokio_postgres::MakeRustlsConnect::new(client));
        }
        Ok(store)
    }

    /// This store with requests bounded by `bound` instead of [`REQUEST_BOUND`].
    #[must_use]
    pub fn with_request_bound(mut self, bound: Duration) -> Self {
        self.request_bound = bound;
        self
    }

    /// The same queue, claimed by the owner of the lock group at `group` (a named group's lock
    /// path, issue 19): its claims and take-overs are fenced by that group's row, its reads and
    /// writes of the queue are the fleet's. Connects on its own, at its first request.
    #[must_use]
    pub fn fenced_by(&self, group: &str) -> Self {
        Self {
            config: self.config.clone(),
            lock_group: self.lock_group.clone(),
            fence_group: group.to_owned(),
            live: Mutex::new(None),
            side: Mutex::new(None),
            migrated: std::sync::atomic::AtomicBool::new(false),
            raised: std::sync::atomic::AtomicI64::new(0),
            request_bound: self.request_bound,
            tls: self.tls.clone(),
        }
    }

    /// The lock group whose queue this is.
    pub fn lock_group(&self) -> &str {
        &self.lock_group
    }

    /// A connection made with `tls` (`NoTls`, or this store's rustls connector), which the
    /// caller polls itself: the listener reads notifications from it, the others spawn it.
    pub(super) async fn connect_with<T>(
        &self,
        tls: T,
    ) -> Result<
        (
            tokio_postgres::Client,
            tokio_postgres::Connection<Socket, T::Stream>,
        ),
        StoreError,
    >
    where
        T: MakeTlsConnect<Socket>,
        T::TlsConnect: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        // `connect_timeout` bounds the socket's connect; a server that accepts and then says
        // nothing (paused) is bounded here.
        self.bounded_raw("a connection's start", self.config.connect(tls))
            .await?
            .map_err(StoreError::Unreachable)
    }

    async fn connect_raw(&self) -> Result<tokio_postgres::Client, StoreError> {
        let client = match &self.tls {
            None => spawned(self.connect_with(tokio_postgres::NoTls).await?),
            Some(tls) => spawned(self.connect_with(tls.clone()).await?),
        };
        self.bounded(
            "the planner's settings",
            client.batch_execute(PLANNER_SETTINGS),
        )
        .await?;
        Ok(client)
    }

    /// `request` within the store's request bound, its error typed. On the bound the
    /// connection is given up: the server is not answering it (paused, or the network is
    /// gone), and the next request connects again rather than queueing behind this one.
    ///
    /// # Errors
    /// `TimedOut` on the bound; `Query` when the database refused it.
    pub(super) async fn bounded<T>(
        &self,
        what: &'static str,
        request: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, StoreError> {
        self.bounded_raw(what, request)
            .await?
            .map_err(StoreError::query(what))
    }

    /// [`PgStore::bounded`] for a request whose error the caller reads itself.
    ///
    /// # Errors
    /// `TimedOut` on the bound.
    pub(super) async fn bounded_raw<T>(
        &self,
        what: &'static str,
        request: impl Future<Output = T>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.request_bound, request).await {
            Ok(answered) => Ok(answered),
            Err(_) => {
                // Not waited for: `live` holds it while it connects, which is bounded here too.
                // A connection it is handing out now is given up by its own request's bound.
                if let Ok(mut live) = self.live.try_lock() {
                    *live = None;
                }
                Err(StoreError::TimedOut {
                    what,
                    after: self.request_bound,
                })
            }
        }
    }

    /// The live connection, or a new one when the last has closed.
    pub(super) async fn live(&self) -> Result<Arc<Live>, StoreError> {
        self.connection(&self.live).await
    }

    /// The side connection (see `side`), or a new one when the last has closed.
    pub(super) async fn side(&self) -> Result<Arc<Live>, StoreError> {
        self.connection(&self.side).await
    }

    async fn connection(&self, slot: &Mutex<Option<Arc<Live>>>) -> Result<Arc<Live>, StoreError> {
        let mut live = slot.lock().await;
        if let Some(current) = live.as_ref()
            && !current.client.is_closed()
        {
            return Ok(Arc::clone(current));
        }
        let mut client = self.connect_raw().await?;
        if !self.migrated.load(std::sync::atomic::Ordering::Acquire) {
            // Not bounded: it may wait for another node's migration, which takes what it takes.
            schema::migrate(&mut client).await?;
            self.migrated
                .store(true, std::sync::atomic::Ordering::Release);
        }
        let statements = self
            .bounded_raw("preparing the statements", Statements::prepare(&client))
            .await??;
        let fresh = Arc::new(Live { client, statements });
        *live = Some(Arc::clone(&fresh));
        Ok(fresh)
    }
}
