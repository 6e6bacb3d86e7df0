//! The hub's own bookkeeping: what it tells of the owners, the members and the pauses, and of
//! a member's notes.

use super::*;

fn node(id: &str) -> NodeId {
    NodeId::new(id.to_owned())
}

fn seen<T>(value: T, zxid: i64) -> Seen<T> {
    Seen {
        value,
        zxid,
        at_unix_ms: None,
    }
}

#[test]
fn what_changed_in_the_owners_members_and_pauses_is_told_once_at_its_own_zxid() {
    let mut known = Known {
        owners: BTreeMap::from([(String::new(), seen(Some(node("a")), 3))]),
        members: seen(BTreeSet::from([node("a"), node("b")]), 4),
        paused: seen(BTreeSet::new(), 0),
        notes: BTreeMap::new(),
    };
    let now = Known {
        owners: BTreeMap::from([(String::new(), seen(Some(node("b")), 12))]),
        members: seen(BTreeSet::from([node("b"), node("c")]), 14),
        paused: seen(BTreeSet::from([JobName::new("backup".to_owned())]), 9),
        notes: BTreeMap::new(),
    };
    assert_eq!(now.newest_zxid(), 14);
    let events = known.diff(now, 1_000);
    let told: Vec<(i64, EventKind, Option<&str>)> = events
        .iter()
        .map(|e| (e.id, e.kind, e.node.as_deref().or(e.job.as_deref())))
        .collect();
    assert_eq!(
        told,
        [
            (12, EventKind::OwnerChanged, Some("b")),
            (14, EventKind::MemberJoined, Some("c")),
            (14, EventKind::MemberLeft, Some("a")),
            (9, EventKind::JobPaused, Some("backup")),
        ]
    );
    let again = Known {
        owners: BTreeMap::from([(String::new(), seen(Some(node("b")), 12))]),
        members: seen(BTreeSet::from([node("b"), node("c")]), 14),
        paused: seen(BTreeSet::new(), 15),
        notes: BTreeMap::new(),
    };
    let events = known.diff(again, 2_000);
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].id, events[0].kind), (15, EventKind::JobResumed));
}

#[test]
fn a_members_clock_verdicts_and_reloads_are_news_once_and_a_first_agreement_is_not() {
    let notes = |clock, reload: Option<(bool, i64)>, zxid| Notes {
        node: node("b"),
        clock,
        reload: reload.map(|(applied, at_unix_ms)| ReloadNote {
            at_unix_ms,
            applied,
            detail: "what changed".to_owned(),
        }),
        zxid,
        at_unix_ms: 0,
    };
    let kinds = |events: Vec<Event>| events.into_iter().map(|e| e.kind).collect::<Vec<_>>();
    let first = notes(Some(ClockStanding::Agrees), None, 5);
    assert_eq!(kinds(first.news(None)), []);
    let skewed = notes(Some(ClockStanding::Skewed), None, 6);
    assert_eq!(kinds(skewed.news(Some(&first))), [EventKind::ClockVerdict]);
    assert_eq!(
        kinds(skewed.news(Some(&skewed))),
        [],
        "rewritten, unchanged"
    );
    let refused = notes(Some(ClockStanding::Skewed), Some((false, 100)), 7);
    assert_eq!(
        kinds(refused.news(Some(&skewed))),
        [EventKind::ReloadRefused]
    );
    let applied = notes(Some(ClockStanding::Agrees), Some((true, 200)), 8);
    assert_eq!(
        kinds(applied.news(Some(&refused))),
        [EventKind::ClockVerdict, EventKind::ReloadApplied]
    );
}
