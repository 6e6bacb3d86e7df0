//! The events a node has seen since it began following its group, kept for followers that
//! reconnect.
//!
//! A follower resumes from its cursor (the id of the last event it got). When the cursor is one
//! this journal gave — the id of an event it still keeps, or where it began — the follower gets
//! every event after it, in the order they were seen. When it is not — the node started
//! following after it (it restarted, or another node serves now), or dropped the oldest of the
//! [`CAPACITY`] it keeps — the answer is a gap ([`Resume::Gone`]), never a silent jump: no node
//! can tell the servers' newest zxid without writing, so a cursor from elsewhere is never taken
//! for one that is kept. What it can still give is the runs' events read back from their
//! records (each record's latest word, read by the hub), the events it kept, and a
//! [`EventKind::Gap`] event in place of the rest.
//!
//! Owns: the journal, the zxid each recently changed record was last told at, and the resume
//! rule. Pure: no I/O.
//! Must not: read ZooKeeper or decide what an event is (`events`).

use std::collections::{HashMap, VecDeque};

use super::{Event, EventKind};

/// Events kept for followers that reconnect: minutes of a busy group (a thousand runs a minute
/// make two thousand events), a few MiB at most.
pub const CAPACITY: usize = 10_000;

/// What a follower resuming from a cursor gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// Every event after the cursor, in order (none when it is the newest).
    Kept(Vec<Event>),
    /// `after` is not a cursor this journal gave and keeps: it keeps what it saw since
    /// `kept_from`.
    Gone { after: i64, kept_from: i64 },
}

/// The journal of one node's hub.
#[derive(Debug)]
pub struct Journal {
    events: VecDeque<Event>,
    capacity: usize,
    /// Where following began: the newest zxid the hub's first reads saw.
    start: i64,
    /// Events were dropped: the newest dropped one's id. A cursor the journal gave before it
    /// is no longer kept.
    dropped: Option<i64>,
    /// Per record path, the zxid of the write last told; forgotten once older than what is
    /// kept, when its notifications are long past.
    told: HashMap<String, i64>,
}

impl Journal {
    /// A journal of at most `capacity` events, following from `start` (a zxid).
    pub fn new(capacity: usize, start: i64) -> Self {
        Self {
            events: VecDeque::new(),
            capacity: capacity.max(1),
            start,
            dropped: None,
            told: HashMap::new(),
        }
    }

    /// The oldest position kept: where following began, or the newest event dropped.
    pub fn kept_from(&self) -> i64 {
        self.dropped.unwrap_or(self.start).max(self.start)
    }

    /// The newest event's id, or where the journal began.
    pub fn newest_id(&self) -> i64 {
        self.events.back().map_or(self.start, |event| event.id)
    }

    /// What the record at `path` says now, read after a change: `Some` with the event when it
    /// is news, `None` when this write was told already (a change is read once per
    /// notification, and a read can see a later write whose own notification follows).
    pub fn record_changed(&mut self, path: &str, event: Event) -> Option<Event> {
        if self.told.get(path).is_some_and(|&told| told >= event.id) {
            return None;
        }
        self.told.insert(path.to_owned(), event.id);
        self.push(event.clone());
        Some(event)
    }

    /// Keeps `event`, dropping the oldest past the capacity.
    pub fn push(&mut self, event: Event) {
        self.events.push_back(event);
        while self.events.len() > self.capacity {
            if let Some(dropped) = self.events.pop_front() {
                self.dropped = Some(self.dropped.map_or(dropped.id, |id| id.max(dropped.id)));
            }
        }
        if self.told.len() > self.capacity {
            let kept_from = self.kept_from();
            self.told.retain(|_, told| *told > kept_from);
        }
    }

    /// What a follower whose last event was `cursor` gets: what follows it, when this journal
    /// gave it and keeps what followed.
    pub fn after(&self, cursor: i64) -> Resume {
        let gone = Resume::Gone {
            after: cursor,
            kept_from: self.kept_from(),
        };
        if let Some(at) = self.events.iter().rposition(|event| event.id == cursor) {
            return Resume::Kept(self.events.iter().skip(at + 1).cloned().collect());
        }
        if cursor == self.start && self.dropped.is_none() {
            return Resume::Kept(self.events.iter().cloned().collect());
        }
        gone
    }

    /// What a follower that accepts the gap after `cursor` gets, ordered by id: the runs'
    /// events after it as `records` say (each kept record's latest write, read back) and as
    /// this journal kept them, each write once; the other events kept after it; and a gap
    /// event for what was not kept.
    pub fn across_gap(&self, cursor: i64, records: Vec<Event>, now_ms: i64) -> Vec<Event> {
        let kept = self
            .events
            .iter()
            .filter(|event| event.id > cursor)
            .cloned();
        let mut seen = std::collections::HashSet::new();
        let mut events: Vec<Event> = kept
            .chain(records.into_iter().filter(|event| event.id > cursor))
            .filter(|event| !event.kind.of_a_run() || seen.insert((event.record_key(), event.id)))
            .collect();
        // From 0 is a listing of what is kept: nothing was promised before it.
        if cursor > 0 {
            let gap_at = self.kept_from().max(cursor);
            events.push(Event::gap(cursor, gap_at, now_ms));
        }
        // The gap goes before the events of its own zxid.
        events.sort_by_key(|event| (event.id, event.kind != EventKind::Gap));
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, id: i64) -> Event {
        Event::bare(kind, id, id * 10)
    }

    fn ids(events: &[Event]) -> Vec<i64> {
        events.iter().map(|event| event.id).collect()
    }

    #[test]
    fn a_follower_resumes_after_a_cursor_this_journal_gave_and_any_other_is_gone() {
        let mut journal = Journal::new(3, 100);
        for id in [101, 103, 102] {
            journal.push(event(EventKind::MemberJoined, id));
        }
        // Where it began: everything, in the order seen.
        let Resume::Kept(all) = journal.after(100) else {
            panic!("kept");
        };
        assert_eq!(ids(&all), [101, 103, 102]);
        // After an event it gave: what followed it, even a smaller id seen later.
        let Resume::Kept(after) = journal.after(103) else {
            panic!("kept");
        };
        assert_eq!(ids(&after), [102]);
        assert_eq!(journal.after(102), Resume::Kept(Vec::new()));
        // A cursor it never gave (another node's, or from before it began): gone, even when
        // it is newer than where it began.
        for cursor in [99, 104, 150] {
            assert_eq!(
                journal.after(cursor),
                Resume::Gone {
                    after: cursor,
                    kept_from: 100
                }
            );
        }
        // The fourth drops the first: its cursor and where it began are gone.
        journal.push(event(EventKind::MemberLeft, 104));
        assert_eq!(journal.kept_from(), 101);
        assert!(matches!(
            journal.after(100),
            Resume::Gone { kept_from: 101, .. }
        ));
        assert!(matches!(journal.after(101), Resume::Gone { .. }));
        let Resume::Kept(after) = journal.after(103) else {
            panic!("kept");
        };
        assert_eq!(ids(&after), [102, 104]);
        assert_eq!(journal.newest_id(), 104);
    }

    fn run(kind: EventKind, id: i64, run_id: &str) -> Event {
        Event {
            job: Some("a".to_owned()),
            run_id: Some(run_id.to_owned()),
            ..event(kind, id)
        }
    }

    #[test]
    fn across_a_gap_runs_come_back_from_their_records_once_and_the_gap_is_said() {
        let mut journal = Journal::new(3, 200);
        // Followed: a record ends (told once however often it is read), a member leaves, an
        // owner changes.
        let ended = journal.record_changed("a/2", run(EventKind::RunEnded, 205, "a-2"));
        assert!(ended.is_some());
        assert!(
            journal
                .record_changed("a/2", run(EventKind::RunEnded, 205, "a-2"))
                .is_none(),
            "read twice, told once"
        );
        journal.push(event(EventKind::MemberLeft, 206));
        journal.push(event(EventKind::OwnerChanged, 207));
        journal.record_changed("a/3", run(EventKind::RunStarted, 208, "a-3"));
        // Capacity 3: 205 dropped.
        assert_eq!(journal.kept_from(), 205);
        // The records as read back: one written before following began, the one that ended,
        // one older than the cursor, and one written since (the journal tells it too).
        let records = vec![
            run(EventKind::RunEnded, 150, "a-1"),
            run(EventKind::RunEnded, 205, "a-2"),
            run(EventKind::RunEnded, 120, "a-0"),
            run(EventKind::RunStarted, 208, "a-3"),
        ];
        let across = journal.across_gap(140, records.clone(), 999);
        let kinds: Vec<(i64, EventKind)> = across.iter().map(|e| (e.id, e.kind)).collect();
        assert_eq!(
            kinds,
            [
                (150, EventKind::RunEnded),
                (205, EventKind::Gap),
                (205, EventKind::RunEnded),
                (206, EventKind::MemberLeft),
                (207, EventKind::OwnerChanged),
                (208, EventKind::RunStarted),
            ]
        );
        // A cursor from another node, past where this one began: the gap starts at it.
        let across = journal.across_gap(206, records.clone(), 999);
        let kinds: Vec<(i64, EventKind)> = across.iter().map(|e| (e.id, e.kind)).collect();
        assert_eq!(
            kinds,
            [
                (206, EventKind::Gap),
                (207, EventKind::OwnerChanged),
                (208, EventKind::RunStarted),
            ]
        );
        // From 0, a listing: everything kept and read back, no gap.
        assert_eq!(
            ids(&journal.across_gap(0, records, 999)),
            [120, 150, 205, 206, 207, 208]
        );
    }
}
