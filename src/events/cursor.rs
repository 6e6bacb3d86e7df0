//! Where a follower of the events stands: the last ZooKeeper change it was told of and, where
//! the delayed queue is kept in PostgreSQL, the last change of the store's runs.
//!
//! ZooKeeper orders its changes by zxid; the store orders its runs' changes by the transaction
//! that made them (`ledger::postgres` reads them only once every earlier transaction is over),
//! then by id. Neither order can be put in the other, so a cursor is the pair, written
//! `<zxid>` alone (nothing from the store: a fleet that keeps its queue in ZooKeeper, or a
//! follower from before the store) or `<zxid>.<transaction>.<id>`. A submission id holds no
//! character that would make this ambiguous: the first two dots split it.
//!
//! Owns: the cursor, its text and its parse. Pure.
//! Must not: read either store.

use std::fmt;

/// A position in the store's change feed of runs: after every change of transactions before
/// `xid`, and of transaction `xid` up to run `id` (`""`: before all of them).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StoreMark {
    pub xid: u64,
    pub id: String,
}

impl fmt::Display for StoreMark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.xid, self.id)
    }
}

impl StoreMark {
    /// `<transaction>.<id>`, as [`StoreMark`]'s `Display` writes it.
    pub fn parse(text: &str) -> Option<Self> {
        let (xid, id) = text.split_once('.')?;
        let xid = decimal(xid)?;
        let plain = id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        plain.then(|| Self {
            xid,
            id: id.to_owned(),
        })
    }
}

/// Where a follower stands.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cursor {
    /// The zxid of the last ZooKeeper change told.
    pub zxid: i64,
    /// The store's last change told, when the group keeps its queue there.
    pub store: Option<StoreMark>,
}

impl Cursor {
    /// A cursor of ZooKeeper's alone.
    pub fn of_zxid(zxid: i64) -> Self {
        Self { zxid, store: None }
    }

    /// Parses `<zxid>` or `<zxid>.<transaction>.<id>`; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        match text.split_once('.') {
            None => Some(Self::of_zxid(text.parse().ok()?)),
            Some((zxid, store)) => Some(Self {
                zxid: zxid.parse().ok()?,
                store: Some(StoreMark::parse(store)?),
            }),
        }
    }
}

impl std::str::FromStr for Cursor {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Self::parse(text).ok_or_else(|| {
            format!(
                "{text:?} is not an event's cursor: a zxid, or `<zxid>.<transaction>.<id>` \
                 as each event's id: line gives"
            )
        })
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.store {
            None => write!(f, "{}", self.zxid),
            Some(store) => write!(f, "{}.{store}", self.zxid),
        }
    }
}

/// A store mark in JSON: its text, as the cursor writes it (serde's `serialize_with` hands
/// the field by reference).
#[allow(clippy::ref_option)]
pub(super) fn mark_as_text<S: serde::Serializer>(
    mark: &Option<StoreMark>,
    to: S,
) -> Result<S::Ok, S::Error> {
    match mark {
        Some(mark) => to.collect_str(mark),
        None => to.serialize_none(),
    }
}

/// A store mark read from its text in JSON.
pub(super) fn mark_from_text<'de, D: serde::Deserializer<'de>>(
    from: D,
) -> Result<Option<StoreMark>, D::Error> {
    let text = <Option<String> as serde::Deserialize>::deserialize(from)?;
    text.map(|text| {
        StoreMark::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{text:?} is not a store mark (`<transaction>.<id>`)"
            ))
        })
    })
    .transpose()
}

/// A number of digits only: no sign, no spaces.
fn decimal(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_as_written_and_nothing_else_reads_as_one() {
        let cursors = [
            Cursor::of_zxid(4_294_967_301),
            Cursor {
                zxid: 7,
                store: Some(StoreMark {
                    xid: 912,
                    id: "order-1.close".to_owned(),
                }),
            },
            Cursor {
                zxid: 0,
                store: Some(StoreMark {
                    xid: 5,
                    id: String::new(),
                }),
            },
        ];
        for cursor in cursors {
            let text = cursor.to_string();
            assert_eq!(Cursor::parse(&text), Some(cursor), "{text}");
        }
        assert_eq!(
            Cursor::parse("7.912.order-1.close")
                .and_then(|cursor| cursor.store)
                .map(|store| store.id),
            Some("order-1.close".to_owned())
        );
        for bad in ["", "x", "7.", "7.x.a", "7.-1.a", "7.1.a b", "7.1.a/b", "-"] {
            assert_eq!(Cursor::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn store_marks_order_by_transaction_then_id() {
        let mark = |xid, id: &str| StoreMark {
            xid,
            id: id.to_owned(),
        };
        assert!(mark(5, "") < mark(5, "a"));
        assert!(mark(5, "z") < mark(6, ""));
    }
}
