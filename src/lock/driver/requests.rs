//! The lock machine's requests as ZooKeeper operations: acquire (create the lock node and bump
//! the epoch in one multi), read the owner with a watch, read the epoch, bump it for a fresh
//! token, and release gracefully; each reply, or its failure, as the machine's input.
//!
//! Owns: the requests, their time bound and the classification of ZooKeeper errors.
//! Must not: decide what an answer means (the lock machine does) or hold the session
//! (`lock::driver::connection`).

use std::future::Future;
use std::pin::Pin;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::ids::{FencingToken, SessionId};
use crate::layout::LockPaths;
use crate::lock::machine::{Action, Epoch, Input, RequestFailed};
use crate::lock::node::{EpochData, LockNode, OwnerInfo};
use crate::report::error_chain;
use crate::tally::WriteKind;
use crate::zk::{Fault, Mode, MultiFault, NodeEvent, Written, Zk};

use super::connection::{Connection, ensure_lock_paths};
use super::settings::LockSettings;

/// The watch `read_owner` armed on the lock node: what happened to it, `None` for the session's
/// own events.
pub(super) type WatchFuture = Pin<Box<dyn Future<Output = Option<NodeEvent>> + Send>>;

/// Carries out one request action; returns its answer for the machine (`None` for an event, which
/// is no request).
pub(super) async fn perform(
    conn: Option<&Connection>,
    settings: &LockSettings,
    action: Action,
    watch: &mut Option<WatchFuture>,
) -> Option<Input> {
    let Some(conn) = conn else {
        return Some(failed(&action, RequestFailed::Connection));
    };
    // Each request is bounded; an action of several is bounded as a whole too.
    let zk = conn.zk.bounded_by(conn.request_timeout());
    let request = async {
        match &action {
            Action::Create => create(conn, &zk, settings).await,
            Action::ReadOwner => read_owner(&zk, &settings.paths, watch).await,
            Action::ReadEpoch => read_epoch(&zk, &settings.paths).await,
            Action::Bump { lock_version } => bump(conn, &zk, settings, *lock_version).await,
            Action::Release { lock_version } => release(conn, &zk, settings, *lock_version).await,
            Action::Emit(_) => None,
        }
    };
    match tokio::time::timeout(conn.request_timeout(), request).await {
        Ok(answer) => answer,
        Err(_) => {
            tracing::warn!(?action, timeout = ?conn.request_timeout(), "zookeeper request timed out");
            Some(failed(&action, RequestFailed::Connection))
        }
    }
}

/// The failure answer to a request action.
fn failed(action: &Action, why: RequestFailed) -> Input {
    match action {
        Action::Create => Input::CreateDone(Err(why)),
        Action::ReadOwner => Input::OwnerRead(Err(why)),
        Action::ReadEpoch => Input::EpochRead(Err(why)),
        Action::Bump { .. } => Input::BumpDone(Err(why)),
        Action::Release { .. } | Action::Emit(_) => Input::ReleaseDone(Err(why)),
    }
}

/// Classifies a ZooKeeper error for the machine, logging what is not routine.
fn failure(path: &str, err: &Fault) -> RequestFailed {
    let why = match err {
        Fault::NodeExists => return RequestFailed::NodeExists,
        Fault::NoNode => RequestFailed::NoNode,
        Fault::BadVersion => RequestFailed::BadVersion,
        Fault::NoAuth => RequestFailed::NoAuth,
        Fault::ConnectionLoss | Fault::TimedOut(_) | Fault::SessionExpired | Fault::Closed => {
            RequestFailed::Connection
        }
        Fault::Refused(why) if why.contains("session moved") => RequestFailed::Connection,
        _ => RequestFailed::Other,
    };
    if matches!(err, Fault::QuotaExceeded) {
        tracing::error!(
            path,
            "zookeeper refused the lock's write: a quota on the lock root is exceeded; \
             `listquota` in zkCli.sh shows it, raise it (`setquota`) or remove it (`delquota`)"
        );
    } else if why == RequestFailed::NoAuth {
        tracing::error!(
            path,
            "zookeeper denied access (ACL); check zookeeper.auth and the node's ACL"
        );
    } else {
        tracing::warn!(path, error = %err, "zookeeper request failed");
    }
    why
}

fn multi_failure(path: &str, err: &MultiFault) -> RequestFailed {
    failure(path, err.fault())
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn epoch_data(conn: &Connection, settings: &LockSettings) -> Vec<u8> {
    EpochData {
        node_id: settings.me.node_id.clone(),
        session: conn.session,
    }
    .to_bytes()
}

/// The token is the epoch's version after our `set_data` in the same multi.
fn token_of(results: &[Written]) -> Result<FencingToken, RequestFailed> {
    match results.last() {
        Some(Written::SetData { stat }) => Ok(FencingToken(stat.version)),
        _ => Err(RequestFailed::Other),
    }
}

/// Acquires: create the ephemeral lock node and bump the epoch, all or nothing.
async fn create(conn: &Connection, zk: &Zk, settings: &LockSettings) -> Option<Input> {
    let paths = &settings.paths;
    // The schedule's fingerprint is a member's, not the lock's.
    let info = OwnerInfo {
        since_unix_ms: unix_ms(),
        releasing: false,
        schedule: None,
        clock_offset_ms: None,
        clock_standing: None,
        reload: None,
        tags: std::collections::BTreeSet::new(),
        ..settings.me.clone()
    };
    let mut multi = zk.multi(WriteKind::Lock);
    let built = multi
        .add_create(&paths.lock, &info.to_bytes(), Mode::Ephemeral)
        .and_then(|()| multi.add_set_data(&paths.epoch, &epoch_data(conn, settings), None));
    if let Err(err) = built {
        return Some(Input::CreateDone(Err(failure(&paths.lock, &err))));
    }
    let result = match multi.commit().await {
        Ok(results) => token_of(&results),
        // Someone holds it: routine, the machine reads who.
        Err(MultiFault::Op {
            index: 0,
            fault: Fault::NodeExists,
        }) => Err(RequestFailed::NodeExists),
        Err(err) => {
            let why = multi_failure(&paths.lock, &err);
            if why == RequestFailed::NoNode {
                // Someone removed the group's nodes: recreate them before the machine retries.
                if let Err(err) = ensure_lock_paths(zk, paths).await {
                    tracing::warn!(error = %error_chain(&err), "cannot recreate lock group nodes");
                }
            }
            Err(why)
        }
    };
    Some(Input::CreateDone(result))
}

/// Reads the lock node and arms a watch: a data watch when it exists, an exists watch when not.
async fn read_owner(zk: &Zk, paths: &LockPaths, watch: &mut Option<WatchFuture>) -> Option<Input> {
    let path = paths.lock.as_str();
    // The node can come and go between the two reads; a few rounds settle it.
    for _ in 0..3 {
        match zk.get_and_watch_data(path).await {
            Ok((data, stat, watcher)) => {
                *watch = Some(Box::pin(watcher.event()));
                let info = OwnerInfo::parse(&data)
                    .inspect_err(|err| {
                        tracing::warn!(path, error = %err, "lock node data is not zkcron's; treating it as a foreign owner");
                    })
                    .ok();
                let node = LockNode {
                    session: SessionId(stat.ephemeral_owner),
                    version: stat.version,
                    info,
                };
                return Some(Input::OwnerRead(Ok(Some(node))));
            }
            Err(Fault::NoNode) => match zk.check_and_watch_stat(path).await {
                Ok((None, watcher)) => {
                    *watch = Some(Box::pin(watcher.event()));
                    return Some(Input::OwnerRead(Ok(None)));
                }
                Ok((Some(_), _)) => continue,
                Err(err) => return Some(Input::OwnerRead(Err(failure(path, &err)))),
            },
            Err(err) => return Some(Input::OwnerRead(Err(failure(path, &err)))),
        }
    }
    Some(Input::OwnerRead(Err(RequestFailed::Other)))
}

async fn read_epoch(zk: &Zk, paths: &LockPaths) -> Option<Input> {
    let path = paths.epoch.as_str();
    let result = match zk.get_data(path).await {
        Ok((data, stat)) => {
            let holder = EpochData::parse(&data)
                .inspect_err(
                    |err| tracing::warn!(path, error = %err, "epoch node data is not zkcron's"),
                )
                .ok()
                .map(|epoch| epoch.session);
            Ok(Epoch {
                token: FencingToken(stat.version),
                holder,
            })
        }
        Err(err) => Err(failure(path, &err)),
    };
    Some(Input::EpochRead(result))
}

/// A fresh token while we keep our node: check our node's version and bump the epoch.
async fn bump(
    conn: &Connection,
    zk: &Zk,
    settings: &LockSettings,
    lock_version: i32,
) -> Option<Input> {
    let paths = &settings.paths;
    let mut multi = zk.multi(WriteKind::Lock);
    let built = multi
        .add_check_version(&paths.lock, lock_version)
        .and_then(|()| multi.add_set_data(&paths.epoch, &epoch_data(conn, settings), None));
    if let Err(err) = built {
        return Some(Input::BumpDone(Err(failure(&paths.lock, &err))));
    }
    let result = match multi.commit().await {
        Ok(results) => token_of(&results),
        Err(err) => Err(multi_failure(&paths.lock, &err)),
    };
    Some(Input::BumpDone(result))
}

/// Graceful release: mark the node as releasing, so that peers contend at once, then delete it.
async fn release(
    conn: &Connection,
    zk: &Zk,
    settings: &LockSettings,
    lock_version: i32,
) -> Option<Input> {
    let path = settings.paths.lock.as_str();
    let marked = OwnerInfo {
        releasing: true,
        since_unix_ms: unix_ms(),
        schedule: None,
        clock_offset_ms: None,
        clock_standing: None,
        reload: None,
        tags: std::collections::BTreeSet::new(),
        ..settings.me.clone()
    };
    let marked = marked.to_bytes();
    let marked = marked.as_slice();
    let mark_and_delete = |version: i32| async move {
        let stat = zk
            .set_data(WriteKind::Lock, path, marked, Some(version))
            .await?;
        zk.delete(WriteKind::Lock, path, Some(stat.version)).await
    };
    let result = match mark_and_delete(lock_version).await {
        // Someone wrote into our node (an operator, a stray tool). It is still ours while our
        // session owns it; without the mark peers would wait out the takeover delay.
        Err(Fault::BadVersion) => match zk.get_data(path).await {
            Ok((_, stat)) if SessionId(stat.ephemeral_owner) == conn.session => {
                tracing::warn!(
                    path,
                    "the lock node's data was changed by someone else; releasing it anyway"
                );
                mark_and_delete(stat.version).await
            }
            Ok(_) => Err(Fault::BadVersion),
            Err(err) => Err(err),
        },
        other => other,
    }
    .map_err(|err| failure(path, &err));
    if result.is_ok() {
        tracing::info!(path, "lock released for a graceful handoff");
    }
    Some(Input::ReleaseDone(result))
}
