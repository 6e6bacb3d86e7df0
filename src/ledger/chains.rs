//! Chains (`after`) in the ledger: the marks a parent's final record leaves for its children, in
//! the same multi-op, and reading a child's marks back for its group's owner.
//!
//! Owns: the mark's create (its path, data and parent) and the listing of `after/<child>`, with
//! foreign names and unreadable marks logged by path and skipped.
//! Must not: decide whether a child runs (the fire machine does); its claim, which deletes the
//! marks it follows, is the [`ClaimPlan`](super::ClaimPlan)'s.

use zookeeper_client::{Acls, Client, CreateMode, CreateOptions, Error as ZkErr};

use super::error::ClaimError;
use crate::ids::JobName;
use crate::layout::{LedgerPaths, MarkName};
use crate::run::{ChainMark, Claim, FoundMark, RunRecord};

/// One mark to create with a parent's final record.
#[derive(Debug, Clone)]
pub struct MarkCreate {
    pub path: String,
    /// `after/<child>`, made when the create finds it missing.
    pub dir: String,
    pub data: Vec<u8>,
    pub acls: Acls<'static>,
}

/// The marks `claim`'s final record leaves: one per child the fire machine named, none while
/// the record promises a retry (a retried parent counts once, at its last attempt).
pub fn marks_of(paths: &LedgerPaths, claim: &Claim, acls: Acls<'static>) -> Vec<MarkCreate> {
    let record = &claim.record;
    if record.retry_at_unix_ms.is_some() {
        return Vec::new();
    }
    let data = ChainMark::of(&record.run_id, record.status).to_bytes();
    claim
        .children
        .iter()
        .map(|child| MarkCreate {
            path: paths.chain_mark(child, record.scheduled_unix_ms, &record.job),
            dir: paths.after_of(child),
            data: data.clone(),
            acls,
        })
        .collect()
}

/// The marks a chained run's claim took (its `parents`), to make again when the claim is given
/// back unstarted.
pub fn marks_taken_by(
    paths: &LedgerPaths,
    record: &RunRecord,
    acls: Acls<'static>,
) -> Vec<MarkCreate> {
    record
        .parents
        .iter()
        .map(|parent| MarkCreate {
            path: paths.chain_mark(&record.job, record.scheduled_unix_ms, &parent.job),
            dir: paths.after_of(&record.job),
            data: ChainMark::of(&parent.run_id, parent.status).to_bytes(),
            acls,
        })
        .collect()
}

/// Adds the creates of `marks` to a multi-op through `add` (its `add_create`: a plain multi-op
/// and a fenced one have one each).
///
/// # Errors
/// The op could not be built.
pub(super) fn add_creates(
    marks: &[MarkCreate],
    mut add: impl FnMut(&str, &[u8], &CreateOptions<'_>) -> Result<(), ZkErr>,
) -> Result<(), ZkErr> {
    marks.iter().try_for_each(|mark| {
        let options = CreateMode::Persistent.with_acls(mark.acls);
        add(&mark.path, &mark.data, &options)
    })
}

/// Makes the marks' parents, after a create found one missing.
pub(super) async fn make_dirs(client: &Client, marks: &[MarkCreate]) {
    for mark in marks {
        if let Err(err) = crate::zk::ensure_persistent(client, &mark.dir, mark.acls).await {
            tracing::debug!(path = mark.dir, error = %err, "chain marks' parent not made");
        }
    }
}

/// The marks left for `child`, oldest instant first. Foreign names and unreadable marks are
/// logged with their path and skipped; a mark gone between the listing and its read is not
/// there.
///
/// # Errors
/// The listing failed (no `after/<child>` means no marks).
pub async fn marks_for(
    client: &Client,
    paths: &LedgerPaths,
    child: &JobName,
) -> Result<Vec<FoundMark>, ClaimError> {
    let dir = paths.after_of(child);
    let names = crate::zk::children_if_there(client, &dir)
        .await
        .map_err(ClaimError::on(&dir))?;
    let mut found = Vec::with_capacity(names.len());
    for name in names {
        let path = format!("{dir}/{name}");
        let Some(parsed) = MarkName::parse(&name) else {
            tracing::warn!(path, "not a chain mark's name; skipped");
            continue;
        };
        let data = match client.get_data(&path).await {
            Ok((data, _)) => data,
            Err(ZkErr::NoNode) => continue,
            Err(source) => return Err(ClaimError::Zk { path, source }),
        };
        match ChainMark::parse(&data) {
            Ok(mark) if mark.format <= crate::formats::CHAIN_MARK => {
                found.push(FoundMark { name: parsed, mark })
            }
            Ok(mark) => crate::formats::newer_found("chain mark", mark.format, &path),
            Err(err) => tracing::warn!(path, error = %err, "unreadable chain mark; skipped"),
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}
