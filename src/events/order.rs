//! Tells a run record's write only once every earlier write's notification has come.
//!
//! A record changed is read after its notification, and the read may see a later write of it
//! whose own notification has not come yet. Told then, that write's zxid could go before the
//! zxid of another record's write notified in the meantime, and a follower resuming after the
//! later one would never get the earlier. ZooKeeper sends notifications in zxid order, and each
//! write of a node raises its version by one: a read at a version beyond what its notifications
//! announced is held until the notification of that version comes, and told then.
//!
//! Owns: the versions the notifications announced and the reads held back.
//! Must not: read ZooKeeper or tell anything to a follower (`events::hub` does both).

use std::collections::HashMap;

use super::Event;

/// Records whose version is known at most: past it, every version is forgotten and what is
/// read is told as before (a record that changed before following began is as unknown).
const KNOWN_AT_MOST: usize = 4096;

/// The versions each followed record's notifications announced, and the reads held back.
#[derive(Debug, Default)]
pub struct WriteOrder {
    /// Per record path, the version its latest notification announced.
    announced: HashMap<String, i32>,
    /// Per record path, a read of a version not announced yet.
    held: HashMap<String, (i32, Event)>,
    /// Held reads whose version has been announced since.
    released: Vec<Event>,
}

impl WriteOrder {
    /// The record at `path` was created: its version 0 is announced.
    pub fn created(&mut self, path: &str) {
        if self.announced.len() >= KNOWN_AT_MOST {
            self.announced.clear();
        }
        self.announced.insert(path.to_owned(), 0);
        self.release_up_to_announced(path);
    }

    /// The record at `path` was written once more.
    pub fn rewritten(&mut self, path: &str) {
        if let Some(version) = self.announced.get_mut(path) {
            *version += 1;
        }
        self.release_up_to_announced(path);
    }

    /// The record at `path` was deleted. The delete's notification follows those of every
    /// write before it, so a read held for it is told.
    pub fn deleted(&mut self, path: &str) {
        self.announced.remove(path);
        if let Some((_, event)) = self.held.remove(path) {
            self.released.push(event);
        }
    }

    fn release_up_to_announced(&mut self, path: &str) {
        let announced = self.announced.get(path).copied();
        let due = self
            .held
            .get(path)
            .is_some_and(|(version, _)| announced.is_none_or(|announced| *version <= announced));
        if due && let Some((_, event)) = self.held.remove(path) {
            self.released.push(event);
        }
    }

    /// The event of a read of `path` at `version`: `Some` to tell now, `None` when held until
    /// its version is announced.
    pub fn read(&mut self, path: &str, version: i32, event: Event) -> Option<Event> {
        match self.announced.get(path) {
            Some(&announced) if version > announced => {
                self.held.insert(path.to_owned(), (version, event));
                None
            }
            _ => {
                self.held.remove(path);
                Some(event)
            }
        }
    }

    /// The held reads whose notification has come since they were read.
    pub fn take_released(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.released)
    }

    /// Notifications were lost (a reconnection): nothing announced is known any more, and
    /// every record is read again whole.
    pub fn forget(&mut self) {
        self.announced.clear();
        self.held.clear();
        self.released.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventKind;

    fn event(id: i64) -> Event {
        Event::bare(EventKind::RunEnded, id, 0)
    }

    fn released_ids(order: &mut WriteOrder) -> Vec<i64> {
        order.take_released().iter().map(|e| e.id).collect()
    }

    #[test]
    fn a_read_past_its_notifications_is_held_until_its_own_comes() {
        let mut order = WriteOrder::default();
        order.created("/runs/a/1");
        // Read after the create's notification, it already says the final write (version 1).
        assert_eq!(order.read("/runs/a/1", 1, event(973)), None);
        assert!(released_ids(&mut order).is_empty());
        order.rewritten("/runs/a/1");
        assert_eq!(released_ids(&mut order), [973]);
    }

    #[test]
    fn a_read_at_its_announced_version_is_told_at_once() {
        let mut order = WriteOrder::default();
        order.created("/runs/a/1");
        assert_eq!(
            order.read("/runs/a/1", 0, event(972)).map(|e| e.id),
            Some(972)
        );
        order.rewritten("/runs/a/1");
        assert_eq!(
            order.read("/runs/a/1", 1, event(974)).map(|e| e.id),
            Some(974)
        );
        assert!(released_ids(&mut order).is_empty());
    }

    #[test]
    fn a_record_whose_creation_was_not_seen_is_told_as_read() {
        let mut order = WriteOrder::default();
        order.rewritten("/runs/a/1");
        assert_eq!(order.read("/runs/a/1", 5, event(9)).map(|e| e.id), Some(9));
    }

    #[test]
    fn a_held_read_of_a_deleted_record_is_released_not_lost() {
        let mut order = WriteOrder::default();
        order.created("/runs/a/1");
        assert_eq!(order.read("/runs/a/1", 2, event(20)), None);
        order.deleted("/runs/a/1");
        assert_eq!(released_ids(&mut order), [20]);
    }

    #[test]
    fn a_reconnection_forgets_what_was_held() {
        let mut order = WriteOrder::default();
        order.created("/runs/a/1");
        assert_eq!(order.read("/runs/a/1", 1, event(20)), None);
        order.forget();
        order.rewritten("/runs/a/1");
        assert!(released_ids(&mut order).is_empty());
        assert_eq!(
            order.read("/runs/a/1", 1, event(20)).map(|e| e.id),
            Some(20)
        );
    }
}
