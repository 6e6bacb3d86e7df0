//! Waking the owner when work is submitted: every submit statement notifies the channel
//! `zkcron_submitted` with its earliest due time, the id of a single submission (`-` for a
//! batch) and its lock group, and the owner listens on a
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
use tokio_postgres::{AsyncMessage, Socket};

use super::error::StoreError;
use super::handle::PgStore;
use crate::delayed::submission::SubmissionId;
use crate::ids::JobName;

/// What one submit statement wakes the owner with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submit {
    /// The earliest due time it submitted (Unix ms).
    pub due_unix_ms: i64,
    /// Its one submission; `None` for a batch (read the due index from `due_unix_ms` on).
    pub id: Option<SubmissionId>,
    /// That submission's job, so that only its lock group's owner reads it (issue 19).
    pub job: Option<JobName>,
}

/// The channel every submit notifies (`statements` names it in its SQL).
const LISTEN: &str = "LISTEN zkcron_submitted";

/// Notifications not yet read by the owner; past this, later ones are dropped (the owner is
/// behind and will read the due index anyway).
const BACKLOG: usize = 1024;

impl PgStore {
    /// Listens for submissions to this lock group: a message for each submit statement. The receiver closes when the listening connection ends;
    /// listen again then, and read the due index, since what was sent meanwhile is lost.
    ///
    /// # Errors
    /// `Unreachable` when no connection could be made; `Query` when `LISTEN` was refused.
    pub async fn listen(&self) -> Result<mpsc::Receiver<Submit>, StoreError> {
        let (wakes, woken) = mpsc::channel(BACKLOG);
        let (answer, answered) = oneshot::channel();
        let lock_group = self.lock_group.clone();
        match &self.tls {
            None => {
                let connected = self.connect_with(tokio_postgres::NoTls).await?;
                forward(connected, lock_group, wakes, answer);
            }
            Some(tls) => {
                let connected = self.connect_with(tls.clone()).await?;
                forward(connected, lock_group, wakes, answer);
            }
        }
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

/// Sends `LISTEN` on the connection and forwards each notification for `lock_group` to
/// `wakes`; `answer` gets the `LISTEN`'s result.
fn forward<S>(
    (client, mut connection): (
        tokio_postgres::Client,
        tokio_postgres::Connection<Socket, S>,
    ),
    lock_group: String,
    wakes: mpsc::Sender<Submit>,
    answer: oneshot::Sender<Result<(), tokio_postgres::Error>>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
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
                        if let Some(submit) = submit_of(notification.payload(), &lock_group) {
                            // Full: the owner is behind and reads the due index anyway.
                            let _ = wakes.try_send(submit);
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
}

/// What a notification's payload (`<due ms> <id or -> <lock group>`, then `\n<job>` for a
/// single submission) says for `lock_group`. A newline parts the job from the group, since
/// either may hold a space and neither a control character.
fn submit_of(payload: &str, lock_group: &str) -> Option<Submit> {
    let (head, job) = match payload.split_once('\n') {
        Some((head, job)) => (head, Some(JobName::new(job))),
        None => (payload, None),
    };
    let mut parts = head.splitn(3, ' ');
    let (due, id, group) = (parts.next()?, parts.next()?, parts.next()?);
    if group != lock_group {
        return None;
    }
    let id = match id {
        "-" => None,
        id => Some(SubmissionId::parse(id).ok()?),
    };
    Some(Submit {
        due_unix_ms: due.parse().ok()?,
        id,
        job,
    })
}

#[cfg(test)]
mod tests {
    use super::{Submit, submit_of};
    use crate::delayed::submission::SubmissionId;
    use crate::ids::JobName;

    #[test]
    fn a_notification_wakes_only_its_own_lock_group_and_names_a_single_submission() {
        let one = SubmissionId::parse("order-42").ok();
        assert_eq!(
            submit_of(
                "1700000000000 order-42 /zkcron/a b\nclose all",
                "/zkcron/a b"
            ),
            Some(Submit {
                due_unix_ms: 1_700_000_000_000,
                id: one.clone(),
                job: Some(JobName::new("close all")),
            }),
            "a lock group's path and a job's name may hold a space"
        );
        assert_eq!(
            submit_of("1700000000000 order-42 /zkcron/a", "/zkcron/a"),
            Some(Submit {
                due_unix_ms: 1_700_000_000_000,
                id: one,
                job: None,
            }),
            "a submit that names no job"
        );
        assert_eq!(
            submit_of("1700000000000 - /zkcron/a", "/zkcron/a"),
            Some(Submit {
                due_unix_ms: 1_700_000_000_000,
                id: None,
                job: None,
            })
        );
        assert_eq!(submit_of("1700000000000 - /zkcron/b", "/zkcron/a"), None);
        assert_eq!(submit_of("x - /zkcron/a", "/zkcron/a"), None);
        assert_eq!(submit_of("garbage", "/zkcron/a"), None);
    }
}
