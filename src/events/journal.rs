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

use super::cursor::{Cursor, StoreMark};
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
    Gone { after: Cursor, kept_from: Cursor },
}

/// One kept event, and where it came from.
#[derive(Debug, Clone)]
struct Kept {
    event: Event,
    /// Read from the PostgreSQL store's change feed, not from ZooKeeper.
    from_store: bool,
}

/// The runs' changes read back from the PostgreSQL store for a follower across a gap: each
/// run's event after the follower's store mark as the store says now, up to `through` (the
/// journal's own store events after it are told as kept).
#[derive(Debug, Clone, Default)]
pub struct StoreReadBack {
    pub events: Vec<Event>,
    /// The newest change read back; the journal's store events after it follow.
    pub through: Option<StoreMark>,
    /// More changed than is read back for one follower: the changes between the last read back
    /// and `through` are lost to it, and the gap says so.
    pub cut_at: Option<StoreMark>,
}

/// The journal of one node's hub.
#[derive(Debug)]
pub struct Journal {
    events: VecDeque<Kept>,
    capacity: usize,
    /// Where following began: the newest zxid the hub's first reads saw, and the store's
    /// feed's horizon then when it keeps the delayed queue.
    start: Cursor,
    /// Events were dropped: the newest dropped one's cursor. A cursor the journal gave before
    /// it is no longer kept.
    dropped: Option<Cursor>,
    /// The newest ZooKeeper change told, and the newest change of the store's feed.
    position: Cursor,
    /// Per record path, the zxid of the write last told; forgotten once older than what is
    /// kept, when its notifications are long past.
    told: HashMap<String, i64>,
}

impl Journal {
    /// A journal of at most `capacity` events, following from `start`.
    pub fn new(capacity: usize, start: Cursor) -> Self {
        Self {
            events: VecDeque::new(),
            capacity: capacity.max(1),
            position: start.clone(),
            start,
            dropped: None,
            told: HashMap::new(),
        }
    }

    /// The oldest position kept: where following began, or the newest event dropped.
    pub fn kept_from(&self) -> Cursor {
        let mut from = self.dropped.clone().unwrap_or_else(|| self.start.clone());
        from.zxid = from.zxid.max(self.start.zxid);
        from
    }

    /// The newest event's cursor, or where the journal began.
    pub fn newest(&self) -> Cursor {
        self.events
            .back()
            .map_or_else(|| self.start.clone(), |kept| kept.event.cursor())
    }

    /// The newest zxid told, or where the journal began.
    pub fn newest_zxid(&self) -> i64 {
        self.position.zxid
    }

    /// The store's newest change told, or its horizon when the journal began.
    pub fn store_mark(&self) -> Option<&StoreMark> {
        self.position.store.as_ref()
    }

    /// What the record at `path` says now, read after a change: `Some` with the event when it
    /// is news, `None` when this write was told already (a change is read once per
    /// notification, and a read can see a later write whose own notification follows).
    pub fn record_changed(&mut self, path: &str, event: Event) -> Option<Event> {
        if self.told.get(path).is_some_and(|&told| told >= event.id) {
            return None;
        }
        self.told.insert(path.to_owned(), event.id);
        Some(self.push(event))
    }

    /// Keeps an event read off ZooKeeper, dropping the oldest past the capacity; it is told
    /// with the store's newest mark, so that its cursor stands for both.
    pub fn push(&mut self, mut event: Event) -> Event {
        self.position.zxid = self.position.zxid.max(event.id);
        event.store_mark = self.position.store.clone();
        self.keep(event, false)
    }

    /// Keeps a run's change read off the store's feed at `mark`: told with the newest zxid
    /// told, so that its cursor stands for both.
    pub fn store_changed(&mut self, mut event: Event, mark: StoreMark) -> Event {
        event.id = self.position.zxid;
        event.store_mark = Some(mark.clone());
        self.position.store = Some(mark);
        self.keep(event, true)
    }

    /// The store's feed is followed from `mark` on, where it could not be read when the journal
    /// began: a gap event says its changes before were not told.
    pub fn store_begun(&mut self, mark: StoreMark, now_ms: i64) -> Event {
        let mut gap = Event::bare(EventKind::Gap, self.position.zxid, now_ms);
        gap.detail = Some(format!(
            "the delayed store could not be read when this node began following: the runs it \
             changed before {mark} are not told (zkcron history reads them)"
        ));
        gap.store_mark = Some(mark.clone());
        self.position.store = Some(mark);
        self.keep(gap, true)
    }

    fn keep(&mut self, event: Event, from_store: bool) -> Event {
        self.events.push_back(Kept {
            event: event.clone(),
            from_store,
        });
        while self.events.len() > self.capacity {
            if let Some(dropped) = self.events.pop_front() {
                // Ids come in the order read, not always rising: the newest dropped one counts.
                let mut cursor = dropped.event.cursor();
                if let Some(before) = &self.dropped {
                    cursor.zxid = cursor.zxid.max(before.zxid);
                }
                self.dropped = Some(cursor);
            }
        }
        if self.told.len() > self.capacity {
            let kept_from = self.kept_from().zxid;
            self.told.retain(|_, told| *told > kept_from);
        }
        event
    }

    /// What a follower whose last event was `cursor` gets: what follows it, when this journal
    /// gave it and keeps what followed. Where kept events share a cursor (the changes of one
    /// zxid; a gap said at the newest zxid after a change of the store's), it resumes after the
    /// first of them: it may be told the others again, and never misses one.
    pub fn after(&self, cursor: &Cursor) -> Resume {
        if let Some(at) = self
            .events
            .iter()
            .position(|kept| kept.event.cursor() == *cursor)
        {
            return Resume::Kept(
                self.events
                    .iter()
                    .skip(at + 1)
                    .map(|kept| kept.event.clone())
                    .collect(),
            );
        }
        if *cursor == self.start && self.dropped.is_none() {
            return Resume::Kept(self.events.iter().map(|kept| kept.event.clone()).collect());
        }
        Resume::Gone {
            after: cursor.clone(),
            kept_from: self.kept_from(),
        }
    }

    /// What a follower that accepts the gap after `cursor` gets: the runs' events after it as
    /// `records` say (each kept record's latest write in ZooKeeper, read back) and as this
    /// journal kept them, each write once, ordered by zxid; the other events kept after it; a
    /// gap event for what was not kept; then the store's runs after its store mark (all kept,
    /// without one), as `store` read them back and as the journal kept them after that. Each event's cursor is set
    /// anew so that a follower let go anywhere in it resumes without a loss.
    pub fn across_gap(
        &self,
        cursor: &Cursor,
        records: Vec<Event>,
        store: StoreReadBack,
        now_ms: i64,
    ) -> Vec<Event> {
        let after = cursor.zxid;
        let kept_of_zookeeper = self
            .events
            .iter()
            .filter(|kept| !kept.from_store && kept.event.id > after)
            .map(|kept| kept.event.clone());
        let mut seen = std::collections::HashSet::new();
        let mut events: Vec<Event> = kept_of_zookeeper
            .chain(records.into_iter().filter(|event| event.id > after))
            .filter(|event| !event.kind.of_a_run() || seen.insert((event.record_key(), event.id)))
            .collect();
        // From 0 is a listing of what is kept: nothing was promised before it.
        if after > 0 {
            let kept_from = self.kept_from();
            let gap_at = Cursor {
                zxid: kept_from.zxid.max(after),
                store: cursor.store.clone(),
            };
            let mut gap = Event::gap(cursor, &gap_at, now_ms);
            if let (Some(cut), Some(through), Some(detail)) =
                (&store.cut_at, &store.through, gap.detail.as_mut())
            {
                detail.push_str(&format!(
                    "; of the delayed store's runs, those changed after {cut} up to {through} \
                     were too many to read back for one follower and are lost"
                ));
            }
            events.push(gap);
        }
        // The gap goes before the events of its own zxid.
        events.sort_by_key(|event| (event.id, event.kind != EventKind::Gap));
        for event in &mut events {
            event.store_mark = cursor.store.clone();
        }
        let mut zxid = events.last().map_or(after, |event| event.id).max(after);
        let kept_of_store = self
            .events
            .iter()
            .filter(|kept| {
                kept.from_store
                    && kept.event.store_mark.as_ref() > store.through.as_ref()
                    && kept.event.store_mark > cursor.store
            })
            .map(|kept| kept.event.clone());
        for mut event in store.events.into_iter().chain(kept_of_store) {
            zxid = zxid.max(event.id);
            event.id = zxid;
            events.push(event);
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn z(zxid: i64) -> Cursor {
        Cursor::of_zxid(zxid)
    }

    fn event(kind: EventKind, id: i64) -> Event {
        Event::bare(kind, id, id * 10)
    }

    fn ids(events: &[Event]) -> Vec<i64> {
        events.iter().map(|event| event.id).collect()
    }

    #[test]
    fn a_follower_resumes_after_a_cursor_this_journal_gave_and_any_other_is_gone() {
        let mut journal = Journal::new(3, z(100));
        for id in [101, 103, 102] {
            journal.push(event(EventKind::MemberJoined, id));
        }
        // Where it began: everything, in the order seen.
        let Resume::Kept(all) = journal.after(&z(100)) else {
            panic!("kept");
        };
        assert_eq!(ids(&all), [101, 103, 102]);
        // After an event it gave: what followed it, even a smaller id seen later.
        let Resume::Kept(after) = journal.after(&z(103)) else {
            panic!("kept");
        };
        assert_eq!(ids(&after), [102]);
        assert_eq!(journal.after(&z(102)), Resume::Kept(Vec::new()));
        // A cursor it never gave (another node's, or from before it began): gone, even when
        // it is newer than where it began.
        for cursor in [99, 104, 150] {
            assert_eq!(
                journal.after(&z(cursor)),
                Resume::Gone {
                    after: z(cursor),
                    kept_from: z(100)
                }
            );
        }
        // The fourth drops the first: its cursor and where it began are gone.
        journal.push(event(EventKind::MemberLeft, 104));
        assert_eq!(journal.kept_from(), z(101));
        assert!(matches!(
            journal.after(&z(100)),
            Resume::Gone { kept_from, .. } if kept_from == z(101)
        ));
        assert!(matches!(journal.after(&z(101)), Resume::Gone { .. }));
        let Resume::Kept(after) = journal.after(&z(103)) else {
            panic!("kept");
        };
        assert_eq!(ids(&after), [102, 104]);
        assert_eq!(journal.newest(), z(104));
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
        let mut journal = Journal::new(3, z(200));
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
        assert_eq!(journal.kept_from(), z(205));
        // The records as read back: one written before following began, the one that ended,
        // one older than the cursor, and one written since (the journal tells it too).
        let records = vec![
            run(EventKind::RunEnded, 150, "a-1"),
            run(EventKind::RunEnded, 205, "a-2"),
            run(EventKind::RunEnded, 120, "a-0"),
            run(EventKind::RunStarted, 208, "a-3"),
        ];
        let across = journal.across_gap(&z(140), records.clone(), StoreReadBack::default(), 999);
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
        let across = journal.across_gap(&z(206), records.clone(), StoreReadBack::default(), 999);
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
            ids(&journal.across_gap(&z(0), records, StoreReadBack::default(), 999)),
            [120, 150, 205, 206, 207, 208]
        );
    }

    fn store_run(run_id: &str, xid: u64) -> (Event, StoreMark) {
        (
            run(EventKind::RunEnded, 0, run_id),
            StoreMark {
                xid,
                id: run_id.to_owned(),
            },
        )
    }

    fn cursors(events: &[Event]) -> Vec<String> {
        events.iter().map(|e| e.cursor().to_string()).collect()
    }

    #[test]
    fn a_follower_whose_cursor_several_events_share_resumes_after_the_first_and_misses_none() {
        let mut journal = Journal::new(10, z(10));
        journal.push(event(EventKind::MemberJoined, 11));
        journal.push(event(EventKind::MemberLeft, 11));
        journal.push(event(EventKind::OwnerChanged, 12));
        let Resume::Kept(after) = journal.after(&z(11)) else {
            panic!("kept");
        };
        let kinds: Vec<EventKind> = after.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [EventKind::MemberLeft, EventKind::OwnerChanged],
            "a follower let go after the first of zxid 11 still gets the second"
        );
    }

    #[test]
    fn the_stores_runs_are_told_between_zookeepers_changes_each_with_a_cursor_for_both() {
        let start = Cursor {
            zxid: 300,
            store: Some(StoreMark {
                xid: 50,
                id: String::new(),
            }),
        };
        let mut journal = Journal::new(10, start.clone());
        journal.push(event(EventKind::MemberLeft, 301));
        let (first, at) = store_run("s-1", 51);
        let told = journal.store_changed(first, at);
        assert_eq!(
            told.cursor().to_string(),
            "301.51.s-1",
            "told at the newest zxid"
        );
        journal.push(event(EventKind::OwnerChanged, 302));
        let (second, at) = store_run("s-2", 52);
        journal.store_changed(second, at);
        let Resume::Kept(all) = journal.after(&start) else {
            panic!("kept");
        };
        assert_eq!(
            cursors(&all),
            ["301.50.", "301.51.s-1", "302.51.s-1", "302.52.s-2"]
        );
        // A follower resumes after any of them, a store's change or ZooKeeper's.
        let Resume::Kept(after) = journal.after(&all[1].cursor()) else {
            panic!("kept");
        };
        assert_eq!(cursors(&after), ["302.51.s-1", "302.52.s-2"]);
        // The zxid alone is not a cursor this journal gave.
        assert!(matches!(journal.after(&z(302)), Resume::Gone { .. }));
    }

    #[test]
    fn across_a_gap_the_stores_runs_come_from_its_feed_after_the_followers_mark_then_from_the_journal()
     {
        let mark = |xid, id: &str| StoreMark {
            xid,
            id: id.to_owned(),
        };
        let start = Cursor {
            zxid: 400,
            store: Some(mark(60, "")),
        };
        let mut journal = Journal::new(10, start);
        for (run_id, xid) in [("s-1", 61), ("s-2", 62), ("s-3", 63)] {
            let (event, at) = store_run(run_id, xid);
            journal.store_changed(event, at);
        }
        journal.push(event(EventKind::OwnerChanged, 401));
        // Another node's cursor: store mark 58. The feed read back through 62 (the journal's
        // mark when the read began); the journal's own store events after it follow.
        let mut read_back = Vec::new();
        for (run_id, xid) in [("s-0", 59), ("s-1", 61), ("s-2", 62)] {
            let (mut event, at) = store_run(run_id, xid);
            event.store_mark = Some(at);
            read_back.push(event);
        }
        let elsewhere = Cursor {
            zxid: 390,
            store: Some(mark(58, "x")),
        };
        let across = journal.across_gap(
            &elsewhere,
            Vec::new(),
            StoreReadBack {
                events: read_back,
                through: Some(mark(62, "s-2")),
                cut_at: None,
            },
            999,
        );
        let told: Vec<(EventKind, String)> = across
            .iter()
            .map(|e| (e.kind, e.cursor().to_string()))
            .collect();
        assert_eq!(
            told,
            [
                (EventKind::Gap, "400.58.x".to_owned()),
                (EventKind::OwnerChanged, "401.58.x".to_owned()),
                (EventKind::RunEnded, "401.59.s-0".to_owned()),
                (EventKind::RunEnded, "401.61.s-1".to_owned()),
                (EventKind::RunEnded, "401.62.s-2".to_owned()),
                (EventKind::RunEnded, "401.63.s-3".to_owned()),
            ],
            "each run once, and every cursor resumes without a loss"
        );
        // A cursor without a store mark (0, or from before the store): every kept run read
        // back, then the journal's after what was read.
        let (mut kept_back, at) = store_run("s-1", 61);
        kept_back.store_mark = Some(at);
        let across = journal.across_gap(
            &z(390),
            Vec::new(),
            StoreReadBack {
                events: vec![kept_back],
                through: Some(mark(61, "s-1")),
                cut_at: None,
            },
            999,
        );
        let runs: Vec<_> = across
            .iter()
            .filter(|e| e.kind == EventKind::RunEnded)
            .filter_map(|e| e.run_id.clone())
            .collect();
        assert_eq!(runs, ["s-1", "s-2", "s-3"]);
        // Too many to read back: the gap says which were lost.
        let across = journal.across_gap(
            &elsewhere,
            Vec::new(),
            StoreReadBack {
                events: Vec::new(),
                through: Some(mark(62, "s-2")),
                cut_at: Some(mark(58, "x")),
            },
            999,
        );
        let detail = across[0].detail.clone().unwrap_or_default();
        assert!(detail.contains("after 58.x up to 62.s-2"), "{detail}");
    }
}
