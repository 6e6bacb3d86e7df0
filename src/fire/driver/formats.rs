//! Which ledger format this node's owners write: format 2 (a submission's run open by its
//! record alone) only while every live member reads it, since any of them may own the lock next
//! and must find the runs left open; format 1 (an `open/` marker) otherwise.
//!
//! Owns: the node's one view of its members' formats, shared by every group's driver, and
//! saying when it changes. Must not: read ZooKeeper itself (the members' watch in `drift` hands
//! it what it read).

use std::sync::atomic::{AtomicBool, Ordering};

use crate::ids::NodeId;
use crate::layout::LEDGER_FORMAT;
use crate::ledger::OpenRuns;
use crate::lock::node::OwnerInfo;

/// The members' formats as last read. Until the first read it says format 1: a node that
/// cannot tell writes what every zkcron reads.
#[derive(Debug, Default)]
pub struct FleetFormat {
    by_record: AtomicBool,
}

impl FleetFormat {
    /// How this node's claims keep a submission's run open.
    pub fn open_runs(&self) -> OpenRuns {
        if self.by_record.load(Ordering::Relaxed) {
            OpenRuns::ByRecord
        } else {
            OpenRuns::Marked
        }
    }

    /// Every live member's data, as read: format 2 when each publishes it (an unreadable or
    /// foreign member counts as an older zkcron).
    pub fn members_read(&self, members: &[(NodeId, Option<Vec<u8>>)]) {
        let older: Vec<&NodeId> = members
            .iter()
            .filter(|(_, data)| {
                let format = data
                    .as_deref()
                    .and_then(OwnerInfo::parse_brief)
                    .and_then(|brief| brief.ledger_format)
                    .unwrap_or(1);
                format < LEDGER_FORMAT
            })
            .map(|(node, _)| node)
            .collect();
        let by_record = older.is_empty() && !members.is_empty();
        if self.by_record.swap(by_record, Ordering::Relaxed) == by_record {
            return;
        }
        if by_record {
            tracing::info!(
                format = LEDGER_FORMAT,
                "every member reads the ledger's newest format: a submission's run is kept open by its record alone"
            );
        } else {
            let older: Vec<&str> = older.iter().map(|node| node.as_str()).collect();
            tracing::info!(
                members = older.join(", "),
                "members of an older zkcron: a submission's run is marked open in `open/` again, as they read it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, format: Option<u32>) -> (NodeId, Option<Vec<u8>>) {
        let data = match format {
            Some(format) => format!(r#"{{"node_id":"{id}","ledger_format":{format}}}"#),
            None => format!(r#"{{"node_id":"{id}"}}"#),
        };
        (NodeId::new(id.to_owned()), Some(data.into_bytes()))
    }

    #[test]
    fn format_2_only_while_every_member_reads_it() {
        let fleet = FleetFormat::default();
        assert_eq!(fleet.open_runs(), OpenRuns::Marked, "nothing read yet");
        fleet.members_read(&[member("a", Some(2)), member("b", Some(2))]);
        assert_eq!(fleet.open_runs(), OpenRuns::ByRecord);
        fleet.members_read(&[member("a", Some(2)), member("old", None)]);
        assert_eq!(fleet.open_runs(), OpenRuns::Marked, "an older member");
        let foreign = (NodeId::new("x".to_owned()), Some(b"garbage".to_vec()));
        fleet.members_read(&[member("a", Some(2)), foreign]);
        assert_eq!(
            fleet.open_runs(),
            OpenRuns::Marked,
            "unreadable counts as older"
        );
        fleet.members_read(&[member("a", Some(3))]);
        assert_eq!(
            fleet.open_runs(),
            OpenRuns::ByRecord,
            "a newer one reads it too"
        );
    }
}
