//! What the lock group stores in ZooKeeper: the lock node's and the epoch node's data.
//!
//! Owns: the JSON formats of `<root>/<lock>/lock`, `<root>/<lock>/epoch` and
//! `<root>/<lock>/members/<node_id>` (docs/ARCHITECTURE.md "ZooKeeper layout"), and their parsing.
//! Must not: do I/O. Data read from ZooKeeper is untrusted: parsing returns `Result`, never panics.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::ids::{JobName, NodeId, SessionId};

/// A live member as a broadcast sweep sees it: its member node's data, and when the node was
/// made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveMember {
    pub node_id: NodeId,
    pub ip: String,
    pub tags: BTreeSet<String>,
    /// When its member znode was created (the servers' clock): it runs only later ticks.
    pub since_unix_ms: i64,
}

/// Who holds (or held) the lock, as written by the holder into the lock node and its member node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerInfo {
    pub node_id: NodeId,
    pub ip: String,
    pub host: String,
    pub pid: u32,
    /// zkcron version of the holder, so a mixed fleet shows in `status`.
    pub version: Box<str>,
    pub since_unix_ms: i64,
    /// Set by an owner that is shutting down, just before it deletes the node, so that peers
    /// contend at once instead of waiting the takeover delay (DESIGN.md "Waiting").
    #[serde(default)]
    pub releasing: bool,
    /// In a member node: the fingerprint of this node's effective schedule (`drift`); an older
    /// zkcron publishes none.
    /// Boxed: a lock event carries an `OwnerInfo`, and most carry none of this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Box<ScheduleHash>>,
    /// In a member node: this node's clock minus the servers' as it last measured it (`clock`);
    /// the other members judge their own clocks against it. An older zkcron publishes none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_ms: Option<i64>,
    /// In a member node: this node's `[node] tags`, which the groups' balancer places by.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub tags: std::collections::BTreeSet<String>,
    /// The highest ledger format this node reads (`crate::layout::LEDGER_FORMAT`); an older
    /// zkcron publishes none, and reads format 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger_format: Option<u32>,
    /// In a member node: how this node's last clock check judged its clock (`clock`); none
    /// before its first check, or from an older zkcron. The event stream tells its changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_standing: Option<ClockStanding>,
    /// In a member node: this node's last reload of its schedule and how it ended; none before
    /// its first, or from an older zkcron. Boxed, as `api`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reload: Option<Box<ReloadNote>>,
    /// In a member node: where this node's HTTP API listens (`ip:port`), for what only this
    /// host has (a run's whole output: `zkcron logs`); none without `[http]`, or from an older
    /// zkcron.
    /// A boxed str: a lock event carries an `OwnerInfo`, which must stay small.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<Box<str>>,
    /// In a member node: where this node keeps the delayed queue (`[delayed] store`); an older
    /// zkcron publishes none, and keeps it in ZooKeeper. A node that keeps it in ZooKeeper
    /// stands aside from the lock while a live member keeps it in PostgreSQL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delayed_store: Option<DelayedStoreKind>,
    /// In a member node of a node that keeps the delayed queue in PostgreSQL: whether its last
    /// clock check could read the store. Such a node that cannot stands aside from the lock
    /// while a live member can; none published (an older zkcron) is taken as able.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delayed_store_reachable: Option<bool>,
}

/// Where a member keeps the delayed queue, and whether it could read it at its last check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreStanding {
    pub kind: DelayedStoreKind,
    /// Its last check read the store (always, for ZooKeeper; an older zkcron says nothing,
    /// and is taken as able).
    pub reachable: bool,
}

impl StoreStanding {
    /// As a member node publishes it: where (none from an older zkcron) and, for PostgreSQL,
    /// whether its last check read it.
    pub fn published(kind: Option<DelayedStoreKind>, reachable: Option<bool>) -> Option<Self> {
        kind.map(|kind| Self {
            kind,
            reachable: reachable != Some(false),
        })
    }

    fn in_postgres(&self) -> bool {
        self.kind == DelayedStoreKind::Postgres
    }
}

/// The member that keeps us out of the lock, if any:
/// - a node that keeps the delayed queue in ZooKeeper (`mine`, `None` from an older zkcron)
///   cannot read what a member that keeps it in PostgreSQL submitted, so it stands aside while
///   such a member lives: the PostgreSQL store wins a mixed fleet;
/// - a node that keeps it in PostgreSQL and could not read the store at its last check stands
///   aside while a member that keeps it there could: its submissions would wait under this
///   owner, and run under that one. When no member can read the store, none stands aside for
///   it, and the ticks go on.
pub fn kept_out_by_store<'a>(
    mine: Option<&StoreStanding>,
    others: &'a [(NodeId, StoreStanding)],
) -> Option<&'a NodeId> {
    let wins = |(_, other): &&(NodeId, StoreStanding)| match mine {
        Some(mine) if mine.in_postgres() => {
            !mine.reachable && other.in_postgres() && other.reachable
        }
        _ => other.in_postgres(),
    };
    others.iter().find(wins).map(|(node, _)| node)
}

/// Where a member keeps the delayed queue, as its member node says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DelayedStoreKind {
    Zookeeper,
    Postgres,
}

/// How a member's last clock check judged its clock (`lock::clock_watch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockStanding {
    /// Within `lock.max_clock_offset` of the fleet's.
    Agrees,
    /// Off the other members' by more: it stays out of contention.
    Skewed,
    /// Off the servers' by more, and no other member can fire: it fires by their clock.
    ByTheEnsemble,
}

impl ClockStanding {
    /// As an event's detail says it.
    pub fn says(self) -> &'static str {
        match self {
            Self::Agrees => "its clock agrees with the fleet's",
            Self::Skewed => {
                "its clock is off the other members' by more than lock.max_clock_offset: it stays out of contention"
            }
            Self::ByTheEnsemble => {
                "its clock is off the servers' by more than lock.max_clock_offset and no other member can fire: it fires by the servers' clock"
            }
        }
    }
}

/// A member's last reload of its schedule (`zkcron reload`, SIGHUP).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadNote {
    pub at_unix_ms: i64,
    pub applied: bool,
    /// What changed, or why the file was refused.
    pub detail: String,
}

impl OwnerInfo {
    /// Serialises for a znode; cannot fail for this plain struct.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses a lock or member node's data.
    ///
    /// # Errors
    /// The data is not the JSON we write (a foreign or corrupted node).
    pub fn parse(data: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(data)
    }

    /// Where a client on host `asking_host` reaches this member's HTTP API: its `api`, unless
    /// it has none or listens on its own host's loopback and the asker is elsewhere.
    ///
    /// # Errors
    /// Why it cannot be reached from there.
    pub fn api_from(&self, asking_host: &str) -> Result<&str, NoApi> {
        let Some(api) = self.api.as_deref() else {
            return Err(NoApi::None {
                node: self.node_id.clone(),
            });
        };
        // As the daemon writes it (`SocketAddr`'s text): `127.0.0.1:9464`, `[::1]:9464`.
        let ip = api.rsplit_once(':').map_or(api, |(ip, _)| ip);
        let loopback = ip.starts_with("127.") || ip == "[::1]";
        if loopback && self.host != asking_host {
            return Err(NoApi::Loopback {
                node: self.node_id.clone(),
                api: api.to_owned(),
                host: self.host.clone(),
            });
        }
        Ok(api)
    }

    /// A member node's schedule total and clock offset alone, without building the per-job
    /// fingerprint (1000 jobs: some 2000 small blocks, read every clock check of every member);
    /// `None` when the data is not ours. The fingerprint's `None` is an older zkcron's.
    pub fn parse_brief(data: &[u8]) -> Option<MemberBrief> {
        serde_json::from_slice(data).ok()
    }
}

/// Why a member's HTTP API cannot be reached from where the asker is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoApi {
    #[error(
        "node {node} has no HTTP API to ask ([http] is not set on it, or it runs an older zkcron)"
    )]
    None { node: NodeId },
    #[error("node {node} listens on {api}, its own host's loopback: ask from {host}")]
    Loopback {
        node: NodeId,
        api: String,
        host: String,
    },
}

/// What a member node's data says at a glance (`OwnerInfo::parse_brief`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct MemberBrief {
    pub node_id: NodeId,
    #[serde(default)]
    pub schedule: Option<ScheduleTotal>,
    #[serde(default)]
    pub clock_offset_ms: Option<i64>,
    #[serde(default)]
    pub ledger_format: Option<u32>,
    #[serde(default)]
    pub delayed_store: Option<DelayedStoreKind>,
    #[serde(default)]
    pub delayed_store_reachable: Option<bool>,
}

impl MemberBrief {
    /// Where it keeps the delayed queue and whether it could read it, if it says where.
    pub fn store_standing(&self) -> Option<StoreStanding> {
        StoreStanding::published(self.delayed_store, self.delayed_store_reachable)
    }
}

/// A schedule fingerprint's total alone.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ScheduleTotal {
    pub total: String,
}

/// A schedule's fingerprint, as a member znode carries it (`drift` computes and compares them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleHash {
    /// CRC-32 over every job's fingerprint, in name order: 8 hex digits.
    pub total: String,
    /// Per job, its CRC-32; `None` when the schedule is too large to list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<BTreeMap<JobName, String>>,
    /// The jobs a drop-in of this host declares or changes, each with those drop-ins' names
    /// (`zkcron.d/10-host.toml`): a difference in one of them is a per-host override, not an
    /// unexplained drift. An older zkcron publishes none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub per_host: BTreeMap<JobName, Vec<String>>,
    /// When the daemon loaded this schedule (at its start or its latest reload that applied),
    /// by its own clock; an older zkcron publishes none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_unix_ms: Option<i64>,
}

/// Data of the persistent `epoch` node: who made the latest acquisition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochData {
    pub node_id: NodeId,
    pub session: SessionId,
}

impl EpochData {
    /// Serialises for the epoch node.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses the epoch node's data.
    ///
    /// # Errors
    /// The data is not the JSON we write (never written, or foreign).
    pub fn parse(data: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(data)
    }
}

/// The lock node as the machine sees it: who holds it (by session) and what it claims to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockNode {
    /// `Stat::ephemeral_owner`: the only proof of ownership we trust (never the IP or node id).
    pub session: SessionId,
    /// The node's data version, for a versioned release.
    pub version: i32,
    /// `None` when the data did not parse: treated as a foreign owner (the driver logs the path).
    pub info: Option<OwnerInfo>,
}

impl LockNode {
    /// A persistent node squatting the lock path: nobody can ever own it through a session.
    pub fn is_squatter(&self) -> bool {
        self.session == SessionId::PERSISTENT
    }

    /// The node id the holder wrote, if its data parsed.
    pub fn node_id(&self) -> Option<&NodeId> {
        self.info.as_ref().map(|info| &info.node_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_info_round_trips_and_defaults_releasing() {
        let info = OwnerInfo {
            node_id: NodeId::new("10.0.0.5"),
            ip: "10.0.0.5".into(),
            host: "a".into(),
            pid: 7,
            version: "0.1.0".into(),
            since_unix_ms: 1,
            releasing: false,
            schedule: None,
            clock_offset_ms: Some(-15_000),
            clock_standing: Some(ClockStanding::Skewed),
            reload: None,
            tags: ["eu".to_owned()].into(),
            ledger_format: Some(2),
            api: None,
            delayed_store: None,
            delayed_store_reachable: None,
        };
        assert_eq!(OwnerInfo::parse(&info.to_bytes()).unwrap(), info);
        let old = br#"{"node_id":"n","ip":"i","host":"h","pid":1,"version":"v","since_unix_ms":2}"#;
        assert!(
            !OwnerInfo::parse(old).unwrap().releasing,
            "missing releasing means not releasing"
        );
        assert_eq!(
            OwnerInfo::parse(old).unwrap().ledger_format,
            None,
            "an older zkcron's member reads format 1"
        );
    }

    #[test]
    fn a_members_api_is_reached_from_elsewhere_unless_it_listens_on_loopback() {
        let member = |api: Option<&str>| OwnerInfo {
            node_id: NodeId::new("n2"),
            ip: "10.0.0.6".into(),
            host: "b".into(),
            pid: 7,
            version: "0.1.0".into(),
            since_unix_ms: 1,
            releasing: false,
            schedule: None,
            clock_offset_ms: None,
            clock_standing: None,
            reload: None,
            tags: BTreeSet::new(),
            ledger_format: None,
            api: api.map(Box::from),
            delayed_store: None,
            delayed_store_reachable: None,
        };
        assert_eq!(
            member(Some("10.0.0.6:9464")).api_from("a"),
            Ok("10.0.0.6:9464")
        );
        assert_eq!(
            member(Some("127.0.0.1:9464")).api_from("b"),
            Ok("127.0.0.1:9464")
        );
        let loopback = member(Some("[::1]:9464")).api_from("a").unwrap_err();
        assert_eq!(
            loopback.to_string(),
            "node n2 listens on [::1]:9464, its own host's loopback: ask from b"
        );
        assert!(matches!(
            member(None).api_from("b"),
            Err(NoApi::None { .. })
        ));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(OwnerInfo::parse(b"\xff\x00not json").is_err());
        assert!(EpochData::parse(b"").is_err());
    }

    #[test]
    fn a_node_that_keeps_the_queue_in_zookeeper_is_kept_out_by_a_member_that_keeps_it_in_postgres()
    {
        use super::{DelayedStoreKind as Kind, StoreStanding, kept_out_by_store};
        let standing = |kind, reachable| StoreStanding { kind, reachable };
        let others = [
            (NodeId::new("a"), standing(Kind::Zookeeper, true)),
            (NodeId::new("b"), standing(Kind::Postgres, false)),
        ];
        let zookeeper = standing(Kind::Zookeeper, true);
        assert_eq!(
            kept_out_by_store(Some(&zookeeper), &others).map(NodeId::as_str),
            Some("b"),
            "whether b reads its store or not, ours cannot hold what it submits"
        );
        assert_eq!(
            kept_out_by_store(None, &others).map(NodeId::as_str),
            Some("b"),
            "an older zkcron keeps it in ZooKeeper"
        );
        let postgres = standing(Kind::Postgres, true);
        assert_eq!(kept_out_by_store(Some(&postgres), &others), None);
        assert_eq!(kept_out_by_store(Some(&zookeeper), &others[..1]), None);
    }

    #[test]
    fn a_node_that_cannot_read_the_store_stands_aside_only_for_a_member_that_can() {
        use super::{DelayedStoreKind as Kind, StoreStanding, kept_out_by_store};
        let standing = |kind, reachable| StoreStanding { kind, reachable };
        let cut_off = standing(Kind::Postgres, false);
        let also_cut_off = [(NodeId::new("b"), standing(Kind::Postgres, false))];
        assert_eq!(
            kept_out_by_store(Some(&cut_off), &also_cut_off),
            None,
            "none can read it: nobody stands aside, and the ticks go on"
        );
        let one_can = [
            (NodeId::new("a"), standing(Kind::Zookeeper, true)),
            (NodeId::new("b"), standing(Kind::Postgres, false)),
            (NodeId::new("c"), standing(Kind::Postgres, true)),
        ];
        assert_eq!(
            kept_out_by_store(Some(&cut_off), &one_can).map(NodeId::as_str),
            Some("c")
        );
        let reads_it = standing(Kind::Postgres, true);
        assert_eq!(kept_out_by_store(Some(&reads_it), &one_can), None);
        // An older zkcron publishes no reachability: taken as able.
        let brief: MemberBrief =
            serde_json::from_str(r#"{"node_id":"d","delayed_store":"postgres"}"#)
                .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(brief.store_standing(), Some(standing(Kind::Postgres, true)));
    }
}
