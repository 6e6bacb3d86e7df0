//! Waking the owner when work is submitted: every submit statement notifies the channel
//! `zkcron_submitted` with its lock group and its earliest due time, and the owner listens on a
//! connection of its own, so it claims new work on time without polling the due index for it.
//!
//! A notification is a hint, never the record: one sent while nobody listened (the owner's
//! listening connection was down) is lost, and the owner reads the due index again whenever it
//! listens anew. That read, bounded and periodic, is also the fallback for a database without
//! `LISTEN` (CockroachDB, YugabyteDB).
//!
//! Owns: the listening connection and reading its notifications.
//! Must not: claim, or decide when to read the due index (the fire machine does).

use std::future::poll_fn;

use tokio::sync::{mpsc, oneshot};
use tokio_postgres::AsyncMessage;

use super::error::StoreError;
use super::handle::PgStore;

/// The channel every submit notifies (`statements` names it in its SQL).
const LISTEN: &str = "LISTEN zkcron_submitted";

/// Notifications not yet read by the owner; past this, later ones are dropped (the owner is
/// behind and will read the due index anyway).
const BACKLOG: usize = 1024;

impl PgStore {
    /// Listens for submissions to this lock group: each message is the earliest due time (Unix
    /// ms) of one submit statement. The receiver closes when the listening connection ends;
    /// listen again then, and read the due index, since what was sent meanwhile is lost.
    ///
    /// # Errors
    /// `Unreachable` when no connection could be made; `Query` when `LISTEN` was refused.
    pub async fn listen(&self) -> Result<mpsc::Receiver<i64>, StoreError> {
        let (client, mut connection) = self.connect_unprepared().await?;
        let (wakes, woken) = mpsc::channel(BACKLOG);
        let (answer, answered) = oneshot::channel();
        let lock_group = self.lock_group.clone();
        // One task owns the client and its connection: it polls the connection (which reads
        // the notifications and carries the `LISTEN`), and ends with the connection or once
        // nobody reads what it forwards.
        tokio::spawn(async move {
            let listen = client.batch_execute(LISTEN);
            tokio::pin!(listen);
            let mut answer = Some(answer);
            loop {
                tokio::select! {
                    result = &mut listen, if answer.is_some() => {
                        let failed = result.is_err();
                        if let Some(answer) = answer.take()
                            && (answer.send(result).is_err() || failed)
                        {
                            return;
                        }
                    }
                    message = poll_fn(|cx| connection.poll_message(cx)) => match message {
                        Some(Ok(AsyncMessage::Notification(notification))) => {
                            if let Some(due) = due_of(notification.payload(), &lock_group) {
                                // Full: the owner is behind and reads the due index anyway.
                                let _ = wakes.try_send(due);
                            }
                        }
                        Some(Ok(_)) => {}
                        Some(Err(error)) => {
                            tracing::warn!(%error, "the PostgreSQL listening connection ended");
                            return;
                        }
                        None => return,
                    },
                    () = wakes.closed() => return,
                }
            }
        });
        match self.bounded_raw("LISTEN", answered).await? {
            Ok(Ok(())) => Ok(woken),
            Ok(Err(source)) => Err(StoreError::Query {
                what: "LISTEN",
                source,
            }),
            Err(_) => Err(StoreError::ListenEnded),
        }
    }
}

/// The due time a notification's payload (`<lock group> <due ms>`) carries for `lock_group`.
fn due_of(payload: &str, lock_group: &str) -> Option<i64> {
    let (group, due) = payload.rsplit_once(' ')?;
    (group == lock_group).then(|| due.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::due_of;

    #[test]
    fn a_notification_wakes_only_its_own_lock_group() {
        assert_eq!(
            due_of("/zkcron/a 1700000000000", "/zkcron/a"),
            Some(1_700_000_000_000)
        );
        assert_eq!(due_of("/zkcron/b 1700000000000", "/zkcron/a"), None);
        assert_eq!(due_of("/zkcron/a x", "/zkcron/a"), None);
        assert_eq!(due_of("garbage", "/zkcron/a"), None);
    }
}
