//! The members this node saw leave, and until when each was one: a broadcast tick is owed by
//! every member alive at its instant, one gone since included. An owner killed mid-run is gone
//! by the time the next owner sweeps its ticks: without this, its run stayed open for good and
//! the ticks it was still a member for went unrecorded (issue 50).
//!
//! Owns: the members of the last reading with what a sweep needs of them (address, tags, since
//! when this node has seen them), and the departures of the last [`KEEP_FOR_MS`], each with the
//! last instant it is known to have been a member.
//! Must not: read ZooKeeper (the members' watch hands it each reading) or decide what a member
//! owes (the ledger's sweep does).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::ids::NodeId;
use crate::lock::node::{LiveMember, OwnerInfo};

/// How long a departure is kept: well past the ticks a new owner sweeps back (a minute).
const KEEP_FOR_MS: i64 = 10 * 60 * 1000;
/// At most this many departures are kept (a fleet that churns does not grow this node).
const KEEP_AT_MOST: usize = 1_000;

/// See the module docs. Shared by every group's driver of this node; the default group's
/// members watch feeds it.
#[derive(Debug, Default)]
pub struct Departed {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    present: HashMap<NodeId, LiveMember>,
    /// Oldest first: a member and the last instant it was one (Unix ms).
    gone: VecDeque<(LiveMember, i64)>,
}

impl Departed {
    /// A reading of the members (`members`, each with its data) made at `now_ms`: one of the
    /// last reading that is not among them was a member until `member_until_ms` at least (the
    /// change that told of it, or when the watch was disconnected and changes could go
    /// unreported). A member first seen here counts from `now_ms`.
    pub fn read(&self, members: &[(NodeId, Option<Vec<u8>>)], member_until_ms: i64, now_ms: i64) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let mut present = HashMap::with_capacity(members.len());
        for (node_id, data) in members {
            let known = state.present.remove(node_id);
            let parsed = data.as_deref().and_then(|data| OwnerInfo::parse(data).ok());
            let member = match (known, parsed) {
                (Some(known), Some(info)) => LiveMember {
                    ip: info.ip,
                    tags: info.tags,
                    ..known
                },
                (Some(known), None) => known,
                (None, Some(info)) => LiveMember {
                    node_id: info.node_id,
                    ip: info.ip,
                    tags: info.tags,
                    since_unix_ms: now_ms,
                },
                (None, None) => continue,
            };
            present.insert(node_id.clone(), member);
        }
        let left = std::mem::replace(&mut state.present, present);
        for member in left.into_values() {
            tracing::debug!(node = %member.node_id, member_until_ms, "a member left");
            state.gone.push_back((member, member_until_ms));
        }
        while state.gone.len() > KEEP_AT_MOST
            || state
                .gone
                .front()
                .is_some_and(|(_, until)| *until < now_ms - KEEP_FOR_MS)
        {
            state.gone.pop_front();
        }
    }

    /// The members gone since that were members at `tick_ms`.
    pub fn alive_at(&self, tick_ms: i64) -> Vec<LiveMember> {
        let Ok(state) = self.state.lock() else {
            return Vec::new();
        };
        state
            .gone
            .iter()
            .filter(|(member, until)| member.since_unix_ms < tick_ms && tick_ms < *until)
            .map(|(member, _)| member.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(node: &str, tags: &[&str]) -> Option<Vec<u8>> {
        let info = serde_json::json!({
            "node_id": node, "ip": "10.0.0.1", "host": "h", "pid": 1, "version": "0",
            "since_unix_ms": 0, "tags": tags,
        });
        Some(serde_json::to_vec(&info).expect("json"))
    }

    fn ids(members: &[LiveMember]) -> Vec<&str> {
        members.iter().map(|m| m.node_id.as_str()).collect()
    }

    #[test]
    fn a_member_gone_is_owed_the_ticks_between_its_first_sighting_and_its_departure() {
        let departed = Departed::default();
        let (a, b) = (NodeId::new("a"), NodeId::new("b"));
        departed.read(
            &[(a.clone(), data("a", &["x"])), (b.clone(), data("b", &[]))],
            1_000,
            1_000,
        );
        assert!(departed.alive_at(2_000).is_empty(), "nobody has left");
        departed.read(&[(b.clone(), data("b", &[]))], 5_000, 5_100);
        assert_eq!(ids(&departed.alive_at(2_000)), ["a"]);
        assert_eq!(departed.alive_at(2_000)[0].tags, ["x".to_owned()].into());
        assert!(
            departed.alive_at(1_000).is_empty(),
            "not before it was seen"
        );
        assert!(
            departed.alive_at(5_000).is_empty(),
            "not from its departure on"
        );
        // A departure is forgotten once it is older than any sweep looks back.
        departed.read(
            &[(b, data("b", &[]))],
            5_000 + KEEP_FOR_MS + 1,
            5_001 + KEEP_FOR_MS + 1,
        );
        assert!(departed.alive_at(2_000).is_empty());
    }

    #[test]
    fn a_reading_without_data_keeps_what_was_known_and_an_unreadable_newcomer_is_left_out() {
        let departed = Departed::default();
        let a = NodeId::new("a");
        departed.read(&[(a.clone(), data("a", &["x"]))], 1_000, 1_000);
        departed.read(&[(a.clone(), None), (NodeId::new("c"), None)], 2_000, 2_000);
        departed.read(&[], 3_000, 3_000);
        let gone = departed.alive_at(2_500);
        assert_eq!(
            ids(&gone),
            ["a"],
            "c was never readable: nothing is owed for it"
        );
        assert_eq!(gone[0].since_unix_ms, 1_000);
    }
}
