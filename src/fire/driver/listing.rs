//! The fire driver's listings of run records for catch-up, a bounded number at a time.
//!
//! A node that starts being able to fire lists every job's records. One task per job made the
//! daemon's memory peak with ten thousand jobs at startup, and its RSS stays at that peak
//! ever after (the allocator keeps what was freed).
//! Owns: the listings waiting their turn and the ones out.
//! Must not: decide what to list (the machine does) or read a listing (`list_records` does).

use std::collections::VecDeque;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use zookeeper_client::Client;

use crate::fire::machine::Input;
use crate::ids::JobName;
use crate::layout::LedgerPaths;
use crate::layout::LockPaths;

use super::{bounded, list_records};

/// Listings out at once: enough to keep a session's pipeline full.
const IN_FLIGHT: usize = 32;

/// Takes listing requests; each answer goes to the machine as `Input::RecordsListed`.
pub(super) struct Lister {
    requests: mpsc::UnboundedSender<(Client, JobName)>,
}

impl Lister {
    /// Starts the listing task; it ends when the `Lister` is dropped and its listings are done.
    pub fn start(
        paths: LedgerPaths,
        group: LockPaths,
        answers: mpsc::UnboundedSender<Input>,
    ) -> Self {
        let (requests, queue) = mpsc::unbounded_channel();
        tokio::spawn(run(queue, paths, group, answers));
        Self { requests }
    }

    /// Lists `job`'s records on `client`'s session, in turn.
    pub fn list(&self, client: Client, job: JobName) {
        // The task outlives every sender; a send fails only if it panicked.
        let _ = self.requests.send((client, job));
    }
}

async fn run(
    mut requests: mpsc::UnboundedReceiver<(Client, JobName)>,
    paths: LedgerPaths,
    group: LockPaths,
    answers: mpsc::UnboundedSender<Input>,
) {
    let mut waiting: VecDeque<(Client, JobName)> = VecDeque::new();
    let mut out = JoinSet::new();
    let mut open = true;
    loop {
        while out.len() < IN_FLIGHT {
            let Some((client, job)) = waiting.pop_front() else {
                // Ten thousand requests at startup leave 2.2 MB of queue behind (issue 10).
                if waiting.capacity() > IN_FLIGHT {
                    waiting = VecDeque::new();
                }
                break;
            };
            let (paths, group, answers) = (paths.clone(), group.clone(), answers.clone());
            out.spawn(async move {
                let listed = bounded(job.as_str(), list_records(&client, &paths, &group, &job));
                let result = listed
                    .await
                    .unwrap_or_else(|| Err("no answer in time".into()));
                let _ = answers.send(Input::RecordsListed { job, result });
            });
        }
        tokio::select! {
            request = requests.recv(), if open => match request {
                Some(request) => waiting.push_back(request),
                None => open = false,
            },
            Some(_) = out.join_next() => {}
            else => return,
        }
    }
}
