//! The ledger's steering use cases, on `control/`: pausing and resuming jobs, asking the owner
//! to run a backfill or to hand the lock over, and reading those back. Used alike by the
//! command door (through `control::client::Steer`), the HTTP API's reads and the fire driver's
//! watch.
//!
//! Owns: every ZooKeeper request on `<root>/<lock>/control`.
//! Must not: decide anything about firing or the lock, or what a request's data says
//! (`crate::control` does).

use super::Ledger;
use crate::control::{BackfillRequest, Pause, Pauses, ReleaseRequest};
use crate::ids::JobName;
use crate::layout::ControlPaths;
use crate::tally::WriteKind;
use crate::zk::{Fault, Mode};

/// A control request that did not go through.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("zookeeper request on {path} failed")]
    Zk {
        path: String,
        #[source]
        source: Fault,
    },
}

fn zk(path: &str) -> impl FnOnce(Fault) -> ControlError + '_ {
    move |source| ControlError::Zk {
        path: path.to_owned(),
        source,
    }
}

/// What a pause did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Paused {
    Now,
    /// The job was paused already (by this pause): left as it was.
    Already(Pause),
}

/// Pauses `job`: whichever node owns the lock starts nothing new of it until it is resumed.
///
/// # Errors
/// A request failed; nothing was written.
pub async fn pause(
    client: &Ledger,
    paths: &ControlPaths,
    job: &JobName,
    pause: &Pause,
) -> Result<Paused, ControlError> {
    let path = paths.pause(job);
    for _ in 0..2 {
        match client
            .zk()
            .create(
                WriteKind::Control,
                &path,
                &pause.to_bytes(),
                Mode::Persistent,
            )
            .await
        {
            Ok(_) => return Ok(Paused::Now),
            Err(Fault::NodeExists) => match read_pause(client, &path).await? {
                Some(existing) => return Ok(Paused::Already(existing)),
                None => continue, // resumed meanwhile: pause it again
            },
            Err(Fault::NoNode) => client
                .zk()
                .ensure_persistent(&paths.paused)
                .await
                .map_err(zk(&paths.paused))?,
            Err(source) => return Err(zk(&path)(source)),
        }
    }
    Err(zk(&path)(Fault::NodeExists))
}

/// Resumes `job`; `None` when it was not paused.
///
/// # Errors
/// A request failed.
pub async fn resume(
    client: &Ledger,
    paths: &ControlPaths,
    job: &JobName,
) -> Result<Option<Pause>, ControlError> {
    let path = paths.pause(job);
    let Some(pause) = read_pause(client, &path).await? else {
        return Ok(None);
    };
    match client.zk().delete(WriteKind::Control, &path, None).await {
        Ok(()) => Ok(Some(pause)),
        Err(Fault::NoNode) => Ok(None),
        Err(source) => Err(zk(&path)(source)),
    }
}

/// Every paused job. A pause node with foreign data still pauses its job (an operator made it),
/// with a reason that says so; the path is logged.
///
/// # Errors
/// A request failed.
pub async fn pauses(client: &Ledger, paths: &ControlPaths) -> Result<Pauses, ControlError> {
    let names = match client.zk().list_children(&paths.paused).await {
        Ok(names) => names,
        Err(Fault::NoNode) => return Ok(Pauses::new()),
        Err(source) => return Err(zk(&paths.paused)(source)),
    };
    let mut found = Pauses::new();
    for name in names {
        let job = JobName::new(name);
        if let Some(pause) = read_pause(client, &paths.pause(&job)).await? {
            found.insert(job, pause);
        }
    }
    Ok(found)
}

async fn read_pause(client: &Ledger, path: &str) -> Result<Option<Pause>, ControlError> {
    match client.zk().get_data(path).await {
        Ok((data, _)) => Ok(Some(Pause::parse(&data).unwrap_or_else(|err| {
            tracing::warn!(path, error = %err, "pause node holds foreign data; the job stays paused");
            Pause::new(Some("a pause node with foreign data"), "?", 0)
        }))),
        Err(Fault::NoNode) => Ok(None),
        Err(source) => Err(zk(path)(source)),
    }
}

/// Leaves a backfill request for whichever node owns the job's lock group; its node's name.
///
/// # Errors
/// A request failed; nothing was written.
pub async fn request_backfill(
    client: &Ledger,
    paths: &ControlPaths,
    request: &BackfillRequest,
) -> Result<String, ControlError> {
    let prefix = paths.backfill_request("req-");
    for _ in 0..2 {
        match client
            .zk()
            .create(
                WriteKind::Control,
                &prefix,
                &request.to_bytes(),
                Mode::Persistent,
            )
            .await
        {
            Ok((_, sequence)) => return Ok(format!("req-{sequence}")),
            Err(Fault::NoNode) => client
                .zk()
                .ensure_persistent(&paths.backfill)
                .await
                .map_err(zk(&paths.backfill))?,
            Err(source) => return Err(zk(&prefix)(source)),
        }
    }
    Err(zk(&prefix)(Fault::NoNode))
}

/// The backfill requests waiting, by node name, oldest first. Foreign data is logged with its
/// path, removed and skipped; a request of a newer format is skipped and left in place.
///
/// # Errors
/// A request failed.
pub async fn backfills(
    client: &Ledger,
    paths: &ControlPaths,
) -> Result<Vec<(String, BackfillRequest)>, ControlError> {
    let mut names = match client.zk().list_children(&paths.backfill).await {
        Ok(names) => names,
        Err(Fault::NoNode) => return Ok(Vec::new()),
        Err(source) => return Err(zk(&paths.backfill)(source)),
    };
    names.sort();
    let mut found = Vec::with_capacity(names.len());
    for name in names {
        let path = paths.backfill_request(&name);
        match client.zk().get_data(&path).await {
            Ok((data, _)) => {
                let format = crate::formats::format_of(&data).unwrap_or_else(crate::formats::first);
                if format > crate::formats::BACKFILL_REQUEST {
                    // A newer zkcron's request: left for an owner that knows its format.
                    crate::formats::newer_found("backfill request", format, &path);
                    continue;
                }
                match BackfillRequest::parse(&data) {
                    Ok(request) => found.push((name, request)),
                    Err(err) => {
                        tracing::warn!(path, error = %err, "backfill request holds foreign data; removed");
                        remove_backfill(client, paths, &name).await;
                    }
                }
            }
            Err(Fault::NoNode) => {}
            Err(source) => return Err(zk(&path)(source)),
        }
    }
    Ok(found)
}

/// Removes backfill request `name` (taken, or unusable); one already gone is fine.
pub async fn remove_backfill(client: &Ledger, paths: &ControlPaths, name: &str) {
    let path = paths.backfill_request(name);
    if let Err(err) = client
        .zk()
        .delete_if_there(WriteKind::Control, &path, None)
        .await
    {
        tracing::warn!(path, error = %err, "cannot remove the backfill request");
    }
}

/// Asks the owner named in `request` to hand the lock over; replaces an older request.
///
/// # Errors
/// A request failed.
pub async fn request_release(
    client: &Ledger,
    paths: &ControlPaths,
    request: &ReleaseRequest,
) -> Result<(), ControlError> {
    let data = request.to_bytes();
    for _ in 0..2 {
        match client
            .zk()
            .create(WriteKind::Control, &paths.release, &data, Mode::Persistent)
            .await
        {
            Ok(_) => return Ok(()),
            Err(Fault::NodeExists) => {
                match client
                    .zk()
                    .set_data(WriteKind::Control, &paths.release, &data, None)
                    .await
                {
                    Ok(_) => return Ok(()),
                    Err(Fault::NoNode) => continue, // taken meanwhile: create it again
                    Err(source) => return Err(zk(&paths.release)(source)),
                }
            }
            Err(Fault::NoNode) => {
                let parent = paths.release_parent();
                client
                    .zk()
                    .ensure_persistent(parent)
                    .await
                    .map_err(zk(parent))?;
            }
            Err(source) => return Err(zk(&paths.release)(source)),
        }
    }
    Err(zk(&paths.release)(Fault::NoNode))
}

/// The release request, if one is there, and its version (to remove just that one). Foreign
/// data is logged and reads as no request.
///
/// # Errors
/// A request failed.
pub async fn release_request(
    client: &Ledger,
    paths: &ControlPaths,
) -> Result<Option<(ReleaseRequest, i32)>, ControlError> {
    match client.zk().get_data(&paths.release).await {
        Ok((data, stat)) => match ReleaseRequest::parse(&data) {
            Ok(request) => Ok(Some((request, stat.version))),
            Err(err) => {
                tracing::warn!(path = paths.release, error = %err, "release request unreadable; ignored");
                Ok(None)
            }
        },
        Err(Fault::NoNode) => Ok(None),
        Err(source) => Err(zk(&paths.release)(source)),
    }
}

/// Removes the release request at `version` (acted on, or stale); a newer one stays.
pub async fn remove_release_request(client: &Ledger, paths: &ControlPaths, version: i32) {
    if let Err(err) = client
        .zk()
        .delete(WriteKind::Control, &paths.release, Some(version))
        .await
    {
        if !matches!(err, Fault::NoNode | Fault::BadVersion) {
            tracing::debug!(path = paths.release, error = %err, "release request not removed");
        }
    }
}
