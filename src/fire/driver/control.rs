//! The fire driver's watch on `control/`: paused jobs and release requests, for the machine.
//!
//! Owns: one persistent recursive watch on `control/` per session, reading the paused jobs at
//! its start, after a disconnection and after every change below `control/paused`, taking a release request that
//! names this node (removing it, so it is acted on once), and reading the backfill requests at
//! its start and whenever one is made or taken.
//! Must not: decide what a pause or a release means (the machines do).

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::fire::machine::{ControlInput, Input};
use crate::ids::NodeId;
use crate::layout::ControlPaths;
use crate::ledger::Ledger;
use crate::ledger::control as store;
use chrono::Utc;

use super::session::{Session, bounded};
use crate::ids::JobName;
use crate::ledger::watch::{Change, Follow, NodeChange};
use crate::report::error_chain;

/// A failed read of the pauses is tried again after this long: the machine fires nothing
/// before its first reading.
const READ_RETRY: Duration = Duration::from_secs(1);

/// Watches `control/` for the life of `client`'s session; ends when `stop` is cancelled or the
/// session ends. Reads everything once when it starts, so changes made while no session was up
/// are seen.
pub(super) fn watch(
    client: Ledger,
    paths: ControlPaths,
    me: NodeId,
    answers: mpsc::UnboundedSender<Input>,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let added = Follow::add_after_creating(&client, &paths.dir, &paths.paused, &stop);
        let Some(watcher) = added.await else {
            return;
        };
        let watch = Watch {
            client,
            paths,
            me,
            answers,
            stop,
        };
        let mut watcher = match watcher {
            Ok(watcher) => watcher,
            Err(err) => {
                // Without the watch, changes are seen at the next session; this reading still
                // lets the machine fire.
                tracing::warn!(error = %error_chain(&err), "cannot watch for pauses and release requests");
                watch.read_all().await;
                return;
            }
        };
        let paused_prefix = format!("{}/", watch.paths.paused);
        let backfill_prefix = format!("{}/", watch.paths.backfill);
        loop {
            let go_on = match watcher.changed_until(&watch.stop).await {
                None => false,
                Some(Change::ReadAll) => watch.read_all().await,
                Some(Change::Node { path, .. }) if path.starts_with(&paused_prefix) => {
                    watch.read_pauses().await
                }
                Some(Change::Node { path, .. }) if path.starts_with(&backfill_prefix) => {
                    watch.read_backfills().await
                }
                Some(Change::Node { path, kind })
                    if path == watch.paths.release
                        && matches!(kind, NodeChange::Created | NodeChange::DataChanged) =>
                {
                    watch.take_release_request().await
                }
                Some(Change::Node { .. } | Change::Disconnected) => true,
            };
            if !go_on {
                return;
            }
        }
    });
}

struct Watch {
    client: Ledger,
    paths: ControlPaths,
    me: NodeId,
    answers: mpsc::UnboundedSender<Input>,
    stop: CancellationToken,
}

impl Watch {
    /// Everything below `control/`: at the start, and after a disconnection (changes made
    /// meanwhile may not have been reported). `false`: stop.
    async fn read_all(&self) -> bool {
        self.read_pauses().await && self.take_release_request().await && self.read_backfills().await
    }

    /// Reads the paused jobs until it succeeds, and hands them to the machine. `false`: stop.
    async fn read_pauses(&self) -> bool {
        loop {
            match store::pauses(&self.client, &self.paths).await {
                Ok(pauses) => {
                    return self
                        .answers
                        .send(Input::Control(ControlInput::PausesRead(pauses)))
                        .is_ok();
                }
                Err(err) => {
                    tracing::warn!(error = %error_chain(&err), retry_in = ?READ_RETRY, "cannot read the paused jobs");
                }
            }
            tokio::select! {
                () = self.stop.cancelled() => return false,
                () = tokio::time::sleep(READ_RETRY) => {}
            }
        }
    }

    /// Reads the backfill requests waiting and hands them to the machine (which takes the ones
    /// for its jobs once it may fire). A failed read is logged: the next request, or the next
    /// session, reads them again. `false`: stop.
    async fn read_backfills(&self) -> bool {
        match store::backfills(&self.client, &self.paths).await {
            Ok(requests) => self
                .answers
                .send(Input::Control(ControlInput::BackfillsRead(requests)))
                .is_ok(),
            Err(err) => {
                tracing::warn!(error = %error_chain(&err), "cannot read the backfill requests");
                true
            }
        }
    }

    /// A release request that names this node: removed (acted on once) and handed to the
    /// machine; a stale one (its owner is gone, or it is old) is removed too. `false`: stop.
    async fn take_release_request(&self) -> bool {
        let request = match store::release_request(&self.client, &self.paths).await {
            Ok(Some(request)) => request,
            Ok(None) => return true,
            Err(err) => {
                tracing::warn!(error = %error_chain(&err), "cannot read the release request");
                return true;
            }
        };
        let (request, version) = request;
        let now_ms = chrono::Utc::now().timestamp_millis();
        if request.owner != self.me {
            return true; // the node it names takes it
        }
        store::remove_release_request(&self.client, &self.paths, version).await;
        if !request.asks(&self.me, now_ms) {
            tracing::info!(by = request.by, "stale release request removed");
            return true;
        }
        tracing::info!(by = request.by, "release requested");
        self.answers
            .send(Input::Control(ControlInput::ReleaseRequested))
            .is_ok()
    }
}

/// Pauses `job` as `zkcron pause` would, by `zkcron` itself; the pause comes back through
/// the watch on `control/`.
pub(super) fn pause(s: &Session, paths: &ControlPaths, job: JobName, reason: String) {
    let Some(client) = s.client.clone() else {
        tracing::error!(job = %job, reason, "cannot pause the job: no ZooKeeper session");
        return;
    };
    let paths = paths.clone();
    s.tasks.spawn(async move {
        let pause = crate::control::Pause {
            reason: Some(reason),
            by: "zkcron".to_owned(),
            since_unix_ms: Utc::now().timestamp_millis(),
        };
        let paused = store::pause(&client, &paths, &job, &pause);
        match bounded(job.as_str(), paused).await {
            Some(Ok(_)) => tracing::warn!(job = %job, reason = pause.reason, "job paused; `zkcron resume` resumes it"),
            Some(Err(err)) => tracing::error!(job = %job, error = %error_chain(&err), "cannot pause the job"),
            None => {}
        }
    });
}

/// Removes a backfill request the machine took.
pub(super) fn remove_backfill(s: &Session, paths: &ControlPaths, name: String) {
    if let Some(client) = s.client.clone() {
        let paths = paths.clone();
        s.tasks.spawn(async move {
            store::remove_backfill(&client, &paths, &name).await;
        });
    }
}
