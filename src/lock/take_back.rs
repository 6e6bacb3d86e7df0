//! Taking back a session the ZooKeeper client gave up on: the client reports a session
//! Expired after about 1.4 × its timeout without any server, although the servers may still
//! hold it (a paused ensemble), and with it our lock and member nodes (DESIGN.md "Learned
//! while building the lock"). The lock machine meanwhile counts the node disconnected.
//!
//! Owns: the attempt under way, and trying again after one that got no answer.
//! Must not: decide what a session taken back or lost means (the lock machine does).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::zk::Resumable;

use crate::ensemble::ZkSettings;
use crate::zk;

/// Pause between attempts that got no answer.
const RETRY: Duration = Duration::from_millis(100);

type Attempt<'a> = Pin<Box<dyn Future<Output = zk::Resumed> + Send + 'a>>;

/// The take-back of one lock driver's session.
pub struct TakeBack<'a> {
    zk: &'a ZkSettings,
    /// The session being taken back, and the attempt out.
    under_way: Option<(Resumable, Attempt<'a>)>,
}

impl<'a> TakeBack<'a> {
    pub fn new(zk: &'a ZkSettings) -> Self {
        Self {
            zk,
            under_way: None,
        }
    }

    /// Whether an attempt is under way.
    pub fn active(&self) -> bool {
        self.under_way.is_some()
    }

    /// Starts taking `session` back at once.
    pub fn start(&mut self, session: Resumable) {
        self.attempt(session, Duration::ZERO);
    }

    /// Nothing to take back any more (it came back, or expired).
    pub fn stop(&mut self) {
        self.under_way = None;
    }

    /// The outcome of the attempt; pends while none is under way. One that got no answer
    /// (logged) is tried again after a pause, and not reported. Cancel-safe.
    pub async fn outcome(&mut self) -> zk::Resumed {
        loop {
            let Some((session, attempt)) = self.under_way.as_mut() else {
                return std::future::pending().await;
            };
            match attempt.await {
                zk::Resumed::NoAnswer(err) => {
                    tracing::debug!(error = %crate::report::error_chain(&err), "session not taken back yet; trying again");
                    let session = session.clone();
                    self.attempt(session, RETRY);
                }
                outcome => {
                    self.under_way = None;
                    return outcome;
                }
            }
        }
    }

    fn attempt(&mut self, session: Resumable, delay: Duration) {
        let zk = self.zk;
        let attempt_session = session.clone();
        let attempt = Box::pin(async move {
            tokio::time::sleep(delay).await;
            zk::resume(zk, attempt_session).await
        });
        self.under_way = Some((session, attempt));
    }
}
