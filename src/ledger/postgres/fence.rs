//! The fence: a lock group's newest fencing token in the database, the row every claim checks.
//!
//! ZooKeeper's `epoch` version is the token; the database cannot read it, so the owner raises
//! this row to its token when it gains the lock, before it claims anything. A raise takes the
//! row's lock, so it waits for the claims in flight (which hold the row `FOR SHARE`), and every
//! claim after it with an older token finds no row to share: a stale owner claims nothing,
//! whatever it believes.
//!
//! Owns: raising the row and reading it.
//! Must not: claim, or take a token from anywhere but its caller (the lock driver's).

use super::error::StoreError;
use super::handle::PgStore;
use crate::ids::FencingToken;

impl PgStore {
    /// Raises the fence of this lock group to `token`, which this node got from ZooKeeper when
    /// it gained the lock. Raising it to the token it holds already is a no-op.
    ///
    /// # Errors
    /// `Fenced` when the row holds a newer token (another node gained the lock since);
    /// `Unreachable` or `Query` when the database did not answer.
    pub async fn raise_fence(&self, token: FencingToken) -> Result<(), StoreError> {
        let live = self.live().await?;
        let raised = self
            .bounded(
                "raising the fence",
                live.client.query_opt(
                    &live.statements.raise_fence,
                    &[&self.fence_group, &i64::from(token.0)],
                ),
            )
            .await?;
        if raised.is_some() {
            self.raised
                .fetch_max(i64::from(token.0), std::sync::atomic::Ordering::AcqRel);
            return Ok(());
        }
        self.fenced(token).await
    }

    /// [`PgStore::raise_fence`], unless this handle raised it to `token` already: a new owner's
    /// catch-up lists each of its jobs, and the first raise orders every one of them after the
    /// previous owner's writes (a raise to the same token again is a commit that adds nothing).
    ///
    /// # Errors
    /// As [`PgStore::raise_fence`].
    pub async fn raise_fence_once(&self, token: FencingToken) -> Result<(), StoreError> {
        let raised = self.raised.load(std::sync::atomic::Ordering::Acquire);
        if raised == i64::from(token.0) {
            return Ok(());
        }
        self.raise_fence(token).await
    }

    /// The answer to a statement that checked the fence at `token` and found another: `Fenced`
    /// with the token the fence holds (0 before any owner raised it).
    ///
    /// # Errors
    /// Always: `Fenced`, or why the fence could not be read.
    pub(super) async fn fenced<T>(&self, token: FencingToken) -> Result<T, StoreError> {
        Err(StoreError::Fenced {
            lock_group: self.fence_group.clone(),
            ours: token,
            current: self.fence().await?.unwrap_or(0),
        })
    }

    /// Whether the store answers a read now (the fence row), on the side connection, so that
    /// a check of a busy owner is not queued behind its claims. For the clock check's verdict
    /// on who may own.
    ///
    /// # Errors
    /// `Unreachable`, `Query` or `TimedOut` when the database did not answer.
    pub async fn probe(&self) -> Result<(), StoreError> {
        let side = self.side().await?;
        self.bounded(
            "reading the fence",
            side.client
                .query_opt(&side.statements.read_fence, &[&self.fence_group]),
        )
        .await
        .map(drop)
    }

    /// The token the fence holds now; none before any owner raised it.
    ///
    /// # Errors
    /// `Unreachable` or `Query` when the database did not answer.
    pub async fn fence(&self) -> Result<Option<i64>, StoreError> {
        let live = self.live().await?;
        let row = self
            .bounded(
                "reading the fence",
                live.client
                    .query_opt(&live.statements.read_fence, &[&self.fence_group]),
            )
            .await?;
        Ok(row.map(|row| row.get(0)))
    }
}
