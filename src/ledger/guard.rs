//! The `running/<job>` guard of a `forbid` job's run, outside its claim: taken for a run that
//! outlives our hold of the lock, released for a claim that will never start.
//!
//! Owns: those two writes, and that only the session that made a guard deletes it.
//! Must not: take a guard a claim should take (the claim's multi-op does), or touch a record.

use super::Ledger;
use crate::ids::SessionId;
use crate::layout::LedgerPaths;
use crate::run::Claim;
use crate::tally::WriteKind;
use crate::zk::{Fault, Mode};

use super::ClaimError;

/// Deletes the `running/<job>` guard of a claim that will never start (the lock moved between
/// the claim and its start, or its withdrawal was refused) — only when the guard is our session's
/// own node: a forbid job's guard left behind by a live session would keep every next owner from
/// running the job. The record stays `claimed`, for the next owner to resolve.
///
/// Returns whether that is settled: the guard is gone, or is not ours (another session's, or
/// another run's); `false` when ZooKeeper did not answer, and the release is worth sending again.
pub async fn release_unstarted_guard(client: &Ledger, claim: &Claim) -> bool {
    if SessionId(client.zk().session_id()) != claim.session {
        // The guard went with the session that made it.
        return true;
    }
    match &claim.guard {
        Some(guard) => delete_own_guard(client, guard, &claim.record.run_id).await,
        None => true,
    }
}

/// Makes the `running/<job>` guard of `claim`'s run, which was claimed without one and outlives
/// our hold of the lock, on the session that claimed it; the guard's path when our session holds
/// it now. `None` when that session is gone (its guard would have gone with it), and when the
/// guard is another run's (logged: a run of the job is alive elsewhere too).
///
/// # Errors
/// The request failed.
pub async fn take_guard(
    client: &Ledger,
    paths: &LedgerPaths,
    claim: &Claim,
) -> Result<Option<String>, ClaimError> {
    let session = client.zk().session_id();
    if SessionId(session) != claim.session {
        return Ok(None);
    }
    let path = paths.running(&claim.record.job);
    let run_id = claim.record.run_id.as_bytes();
    match client
        .zk()
        .create(WriteKind::Guard, &path, run_id, Mode::Ephemeral)
        .await
    {
        Ok(_) => Ok(Some(path)),
        Err(Fault::NodeExists) => match client.zk().get_data(&path).await {
            // Ours: a reply lost before.
            Ok((data, stat)) if stat.ephemeral_owner == session && data == run_id => Ok(Some(path)),
            Ok((data, _)) => {
                tracing::warn!(path, holder = %String::from_utf8_lossy(&data), run_id = claim.record.run_id, "the guard is another run's: a run of the job is alive elsewhere too");
                Ok(None)
            }
            Err(Fault::NoNode) => Ok(None),
            Err(source) => Err(ClaimError::Zk { path, source }),
        },
        Err(source) => Err(ClaimError::Zk { path, source }),
    }
}

/// Deletes the guard at `path` if it is still run `run_id`'s, made by our session; whether that
/// is settled (see [`release_unstarted_guard`]). A delete after a lost reply must not take a
/// guard made since: a peer's (another session), or our own next run's (another run id). Only
/// the session that made a guard deletes it, so one read as this run's stays so until we delete
/// it.
pub(super) async fn delete_own_guard(client: &Ledger, path: &str, run_id: &str) -> bool {
    let (data, stat) = match client.zk().get_data(path).await {
        Ok(read) => read,
        Err(Fault::NoNode) => return true,
        Err(err) => {
            tracing::debug!(path, error = %err, "not deleted");
            return false;
        }
    };
    if stat.ephemeral_owner != client.zk().session_id() || data != run_id.as_bytes() {
        return true;
    }
    match client
        .zk()
        .delete_if_there(WriteKind::Guard, path, Some(stat.version))
        .await
    {
        Ok(()) => true,
        Err(err) => {
            tracing::debug!(path, error = %err, "not deleted");
            false
        }
    }
}
