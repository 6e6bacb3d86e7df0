//! The ledger's steering use cases, on `control/`: pausing and resuming jobs, asking the owner
//! to run a backfill or to hand the lock over, and reading those back. Used alike by the
//! command door (through `control::client::Steer`), the HTTP API's reads and the fire driver's
//! watch.
//!
//! Owns: every ZooKeeper request on `<root>/<lock>/control`.
//! Must not: decide anything about firing or the lock, or what a request's data says
//! (`crate::control` does).

use zookeeper_client::{Acls, Client, CreateMode, Error as ZkErr};

use crate::control::{BackfillRequest, Pause, Pauses, ReleaseRequest};
use crate::ids::JobName;
use crate::layout::ControlPaths;

/// A control request that did not go through.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("zookeeper request on {path} failed")]
    Zk {
        path: String,
        #[source]
        source: ZkErr,
    },
}

fn zk(path: &str) -> impl FnOnce(ZkErr) -> ControlError + '_ {
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
    client: &Client,
    paths: &ControlPaths,
    job: &JobName,
    pause: &Pause,
    acls: Acls<'static>,
) -> Result<Paused, ControlError> {
    let path = paths.pause(job);
    let options = CreateMode::Persistent.with_acls(acls);
    for _ in 0..2 {
        crate::zk::tally::wrote(crate::zk::tally::WriteKind::Control, 1);
        match client.create(&path, &pause.to_bytes(), &options).await {
            Ok(_) => return Ok(Paused::Now),
            Err(ZkErr::NodeExists) => match read_pause(client, &path).await? {
                Some(existing) => return Ok(Paused::Already(existing)),
                None => continue, // resumed meanwhile: pause it again
            },
            Err(ZkErr::NoNode) => client
                .mkdir(&paths.paused, &options)
                .await
                .map_err(zk(&paths.paused))?,
            Err(source) => return Err(zk(&path)(source)),
        }
    }
    Err(zk(&path)(ZkErr::NodeExists))
}

/// Resumes `job`; `None` when it was not paused.
///
/// # Errors
/// A request failed.
pub async fn resume(
    client: &Client,
    paths: &ControlPaths,
    job: &JobName,
) -> Result<Option<Pause>, ControlError> {
    let path = paths.pause(job);
    let Some(pause) = read_pause(client, &path).await? else {
        return Ok(None);
    };
    crate::zk::tally::wrote(crate::zk::tally::WriteKind::Control, 1);
    match client.delete(&path, None).await {
        Ok(()) => Ok(Some(pause)),
        Err(ZkErr::NoNode) => Ok(None),
        Err(source) => Err(zk(&path)(source)),
    }
}

/// Every paused job. A pause node with foreign data still pauses its job (an operator made it),
/// with a reason that says so; the path is logged.
///
/// # Errors
/// A request failed.
pub async fn pauses(client: &Client, paths: &ControlPaths) -> Result<Pauses, ControlError> {
    let names = match client.list_children(&paths.paused).await {
        Ok(names) => names,
        Err(ZkErr::NoNode) => return Ok(Pauses::new()),
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

async fn read_pause(client: &Client, path: &str) -> Result<Option<Pause>, ControlError> {
    match client.get_data(path).await {
        Ok((data, _)) => Ok(Some(Pause::parse(&data).unwrap_or_else(|err| {
            tracing::warn!(path, error = %err, "pause node holds foreign data; the job stays paused");
            Pause::new(Some("a pause node with foreign data"), "?", 0)
        }))),
        Err(ZkErr::NoNode) => Ok(None),
        Err(source) => Err(zk(path)(source)),
    }
}

/// Leaves a backfill request for whichever node owns the job's lock group; its node's name.
///
/// # Errors
/// A request failed; nothing was written.
pub async fn request_backfill(
    client: &Client,
    paths: &ControlPaths,
    request: &BackfillRequest,
    acls: Acls<'static>,
) -> Result<String, ControlError> {
    let options = CreateMode::PersistentSequential.with_acls(acls);
    let prefix = paths.backfill_request("req-");
    for _ in 0..2 {
        crate::zk::tally::wrote(crate::zk::tally::WriteKind::Control, 1);
        match client.create(&prefix, &request.to_bytes(), &options).await {
            Ok((_, sequence)) => return Ok(format!("req-{sequence}")),
            Err(ZkErr::NoNode) => client
                .mkdir(&paths.backfill, &CreateMode::Persistent.with_acls(acls))
                .await
                .map_err(zk(&paths.backfill))?,
            Err(source) => return Err(zk(&prefix)(source)),
        }
    }
    Err(zk(&prefix)(ZkErr::NoNode))
}

/// The backfill requests waiting, by node name, oldest first. Foreign data is logged with its
/// path, removed and skipped; a request of a newer format is skipped and left in place.
///
/// # Errors
/// A request failed.
pub async fn backfills(
    client: &Client,
    paths: &ControlPaths,
) -> Result<Vec<(String, BackfillRequest)>, ControlError> {
    let mut names = match client.list_children(&paths.backfill).await {
        Ok(names) => names,
        Err(ZkErr::NoNode) => return Ok(Vec::new()),
        Err(source) => return Err(zk(&paths.backfill)(source)),
    };
    names.sort();
    let mut found = Vec::with_capacity(names.len());
    for name in names {
        let path = paths.backfill_request(&name);
        match client.get_data(&path).await {
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
            Err(ZkErr::NoNode) => {}
            Err(source) => return Err(zk(&path)(source)),
        }
    }
    Ok(found)
}

/// Removes backfill request `name` (taken, or unusable); one already gone is fine.
pub async fn remove_backfill(client: &Client, paths: &ControlPaths, name: &str) {
    let path = paths.backfill_request(name);
    crate::zk::tally::wrote(crate::zk::tally::WriteKind::Control, 1);
    if let Err(err) = crate::zk::delete_if_there(client, &path, None).await {
        tracing::warn!(path, error = %err, "cannot remove the backfill request");
    }
}

/// Asks the owner named in `request` to hand the lock over; replaces an older request.
///
/// # Errors
/// A request failed.
pub async fn request_release(
    client: &Client,
    paths: &ControlPaths,
    request: &ReleaseRequest,
    acls: Acls<'static>,
) -> Result<(), ControlError> {
    let options = CreateMode::Persistent.with_acls(acls);
    let data = request.to_bytes();
    for _ in 0..2 {
        crate::zk::tally::wrote(crate::zk::tally::WriteKind::Control, 1);
        match client.create(&paths.release, &data, &options).await {
            Ok(_) => return Ok(()),
            Err(ZkErr::NodeExists) => {
                match client.set_data(&paths.release, &data, None).await {
                    Ok(_) => return Ok(()),
                    Err(ZkErr::NoNode) => continue, // taken meanwhile: create it again
                    Err(source) => return Err(zk(&paths.release)(source)),
                }
            }
            Err(ZkErr::NoNode) => {
                let parent = paths.release_parent();
                client.mkdir(parent, &options).await.map_err(zk(parent))?;
            }
            Err(source) => return Err(zk(&paths.release)(source)),
        }
    }
    Err(zk(&paths.release)(ZkErr::NoNode))
}

/// The release request, if one is there, and its version (to remove just that one). Foreign
/// data is logged and reads as no request.
///
/// # Errors
/// A request failed.
pub async fn release_request(
    client: &Client,
    paths: &ControlPaths,
) -> Result<Option<(ReleaseRequest, i32)>, ControlError> {
    match client.get_data(&paths.release).await {
        Ok((data, stat)) => match ReleaseRequest::parse(&data) {
            Ok(request) => Ok(Some((request, stat.version))),
            Err(err) => {
                tracing::warn!(path = paths.release, error = %err, "release request unreadable; ignored");
                Ok(None)
            }
        },
        Err(ZkErr::NoNode) => Ok(None),
        Err(source) => Err(zk(&paths.release)(source)),
    }
}

/// Removes the release request at `version` (acted on, or stale); a newer one stays.
pub async fn remove_release_request(client: &Client, paths: &ControlPaths, version: i32) {
    crate::zk::tally::wrote(crate::zk::tally::WriteKind::Control, 1);
    if let Err(err) = client.delete(&paths.release, Some(version)).await {
        if !matches!(err, ZkErr::NoNode | ZkErr::BadVersion) {
            tracing::debug!(path = paths.release, error = %err, "release request not removed");
        }
    }
}
