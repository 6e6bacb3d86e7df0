//! The delayed queue's schema in PostgreSQL, migrated by version with refinery: the SQL files of
//! `migrations/` (`V<n>__<what>.sql`), applied in order and recorded in
//! `zkcron_schema_history`.
//!
//! Owns: bringing a database to this version's schema, one node at a time, and refusing a
//! database that a newer zkcron migrated.
//! Must not: touch the queue's rows.

use super::error::StoreError;

refinery::embed_migrations!("src/ledger/postgres/migrations");

/// Where refinery records which versions are applied.
const HISTORY_TABLE: &str = "zkcron_schema_history";

/// The session-level advisory lock key that makes nodes starting together migrate one at a
/// time (`zkcron` in ASCII): the others wait, then find nothing left to apply.
const MIGRATION_LOCK: i64 = 0x7a6b_6372_6f6e;

/// The newest schema version this zkcron knows.
pub(super) fn known_version() -> i64 {
    migrations::runner()
        .get_migrations()
        .iter()
        .map(|migration| i64::from(migration.version()))
        .max()
        .unwrap_or(0)
}

/// Brings the database to [`known_version`], holding the migration lock while it does.
///
/// # Errors
/// `NewerSchema` when the database is past [`known_version`]; `Migration` when a migration
/// failed (its transaction is rolled back); `Query` when the lock could not be taken.
pub(super) async fn migrate(client: &mut tokio_postgres::Client) -> Result<(), StoreError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(StoreError::query("the migration lock"))?;
    let migrated = migrate_locked(client).await;
    // An unlock that fails leaves the lock to the session's end, which is near: the connection
    // is the store's own and a failure here means it is broken.
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    migrated
}

async fn migrate_locked(client: &mut tokio_postgres::Client) -> Result<(), StoreError> {
    let known = known_version();
    if let Some(found) = applied_version(client).await?
        && found > known
    {
        return Err(StoreError::NewerSchema { found, known });
    }
    let mut runner = migrations::runner();
    runner.set_migration_table_name(HISTORY_TABLE);
    runner
        .run_async(client)
        .await
        .map(drop)
        .map_err(StoreError::Migration)
}

/// The newest version applied to the database; none before the first migration.
async fn applied_version(client: &tokio_postgres::Client) -> Result<Option<i64>, StoreError> {
    let history = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&HISTORY_TABLE])
        .await
        .map_err(StoreError::query("the schema history's existence"))?;
    if !history.get::<_, bool>(0) {
        return Ok(None);
    }
    let newest = client
        .query_one(
            &format!("SELECT max(version)::bigint FROM {HISTORY_TABLE}"),
            &[],
        )
        .await
        .map_err(StoreError::query("the schema's version"))?;
    Ok(newest.get(0))
}
