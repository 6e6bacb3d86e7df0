//! The day partitions of the pending and ended tables: made when a row first needs one, dropped
//! when its day is over and nothing in it is kept any more.
//!
//! Pending rows are partitioned by the day they are due, ended rows by the day they ended, both
//! in UTC days since the Unix epoch (`zkcron_pending_d20426` holds 2025-12-04's dues). A claim
//! deletes pending rows, which leaves dead tuples behind; they go with their day's partition
//! instead of waiting for a vacuum that a busy queue outruns.
//!
//! Owns: the partitions' names and bounds, listing them, making one, dropping an empty one.
//! Must not: move rows between them (a reschedule's `UPDATE` does, by the partition key).

use tokio_postgres::error::SqlState;

use super::error::StoreError;

/// A UTC day's length in milliseconds: the partitions' width.
pub(super) const DAY_MS: i64 = 86_400_000;

/// A table partitioned by day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Partitioned {
    /// `zkcron_pending`, by `due_ms`.
    Pending,
    /// `zkcron_ended`, by `ended_ms`.
    Ended,
}

impl Partitioned {
    fn table(self) -> &'static str {
        match self {
            Self::Pending => "zkcron_pending",
            Self::Ended => "zkcron_ended",
        }
    }

    /// A new partition's storage parameters. A pending day is analyzed and vacuumed after a
    /// fixed number of changed rows, not a share of its size, and its vacuum is not slowed
    /// down: the claims' deletes leave dead tuples at the front of its due index, which every
    /// claim steps over until a vacuum removes them (bench/pg_queue.sh: 3.5 ms a claim of 100
    /// with 9 000 behind it, 7 ms with 50 000).
    fn storage(self) -> &'static str {
        match self {
            Self::Pending => {
                "WITH (autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 1000, \
                 autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000, \
                 autovacuum_vacuum_cost_delay = 0)"
            }
            Self::Ended => "",
        }
    }

    /// The partition holding `unix_ms`'s day.
    pub(super) fn partition(self, unix_ms: i64) -> String {
        format!("{}_d{}", self.table(), day_of(unix_ms))
    }
}

/// Days since the Unix epoch, UTC.
pub(super) fn day_of(unix_ms: i64) -> i64 {
    unix_ms.div_euclid(DAY_MS)
}

/// Whether `error` says a row found no partition for its key: make the partition and try again.
pub(super) fn is_missing_partition(error: &tokio_postgres::Error) -> bool {
    error.as_db_error().is_some_and(|db| {
        *db.code() == SqlState::CHECK_VIOLATION
            && db.message().starts_with("no partition of relation")
    })
}

/// Makes the partition of `table` for `unix_ms`'s day, unless it exists.
///
/// # Errors
/// `Query` when the database refused it for another reason than another node making it first.
pub(super) async fn ensure(
    client: &tokio_postgres::Client,
    table: Partitioned,
    unix_ms: i64,
) -> Result<(), StoreError> {
    let day = day_of(unix_ms);
    let statement = format!(
        "CREATE TABLE IF NOT EXISTS {partition} PARTITION OF {parent} \
         FOR VALUES FROM ({from}) TO ({to}) {storage}",
        partition = table.partition(unix_ms),
        parent = table.table(),
        from = day * DAY_MS,
        to = (day + 1) * DAY_MS,
        storage = table.storage(),
    );
    match client.batch_execute(&statement).await {
        Ok(()) => Ok(()),
        // Two nodes making the same partition at once: `IF NOT EXISTS` checks before it
        // creates, so the later one can fail on the catalog's unique index instead.
        Err(error)
            if error.code() == Some(&SqlState::UNIQUE_VIOLATION)
                || error.code() == Some(&SqlState::DUPLICATE_TABLE) =>
        {
            Ok(())
        }
        Err(source) => Err(StoreError::Query {
            what: "making a day's partition",
            source,
        }),
    }
}

/// The days of `table`'s partitions (of the names this module gives; others are not ours).
pub(super) async fn days(
    client: &tokio_postgres::Client,
    table: Partitioned,
) -> Result<Vec<i64>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT c.relname::text FROM pg_inherits i \
             JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent \
             WHERE p.relname = $1",
            &[&table.table()],
        )
        .await?;
    let prefix = format!("{}_d", table.table());
    Ok(rows
        .iter()
        .filter_map(|row| row.get::<_, String>(0).strip_prefix(&prefix)?.parse().ok())
        .collect())
}

/// Drops `table`'s partition of `day` if it holds no row: locked first, so that no row comes in
/// between the look and the drop (one statement, its own transaction). Its name when dropped.
///
/// # Errors
/// `Query` when the database refused it.
pub(super) async fn drop_if_empty(
    client: &tokio_postgres::Client,
    table: Partitioned,
    day: i64,
) -> Result<Option<String>, StoreError> {
    let name = table.partition(day * DAY_MS);
    let statement = format!(
        "DO $$ BEGIN \
         IF to_regclass('{name}') IS NOT NULL THEN \
         LOCK TABLE {name} IN ACCESS EXCLUSIVE MODE; \
         IF NOT EXISTS (SELECT 1 FROM {name}) THEN DROP TABLE {name}; END IF; \
         END IF; END $$"
    );
    let query = |what| move |source| StoreError::Query { what, source };
    client
        .batch_execute(&statement)
        .await
        .map_err(query("dropping an empty day partition"))?;
    let left = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .await
        .map_err(query("looking for a day partition"))?;
    Ok((!left.get::<_, bool>(0)).then_some(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_partition_is_named_by_utc_days_since_the_epoch() {
        // 2026-12-04T12:00:00Z
        let noon = 1_796_385_600_000;
        assert_eq!(day_of(noon), 20_791);
        assert_eq!(
            Partitioned::Pending.partition(noon),
            "zkcron_pending_d20791"
        );
        assert_eq!(Partitioned::Ended.partition(noon), "zkcron_ended_d20791");
        assert_eq!(day_of(20_791 * DAY_MS), 20_791);
        assert_eq!(day_of(20_791 * DAY_MS - 1), 20_790);
    }
}
