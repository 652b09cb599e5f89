//! What a store holds ([`StoreSizes`]), read from its tables.

use postgres::GenericClient;
use spool_durable::StoreSizes;

use crate::error::PgStoreError;
use crate::schema::TABLES;

/// What the store's `shard` holds now, and what its tables take on disk.
pub(crate) fn sizes(
    client: &mut impl GenericClient,
    shard: i32,
) -> Result<StoreSizes, PgStoreError> {
    let row = client.query_one(
        "SELECT
           (SELECT count(*) FROM spool.entries WHERE shard = $1),
           (SELECT coalesce(sum(length(body)), 0)::bigint FROM spool.entries WHERE shard = $1),
           (SELECT count(*) FROM spool.checkpoints WHERE shard = $1),
           (SELECT coalesce(sum(len), 0)::bigint FROM spool.checkpoints WHERE shard = $1),
           (SELECT coalesce(sum(length(body)), 0)::bigint FROM spool.checkpoints WHERE shard = $1),
           (SELECT coalesce(sum(length(body)), 0)::bigint FROM (
              SELECT DISTINCT ON (task) body FROM spool.tasks
              WHERE shard = $1 AND since >= coalesce((
                  SELECT c.base FROM spool.checkpoints c
                  JOIN spool.head h ON h.shard = c.shard AND h.checkpoint = c.id
                  WHERE c.shard = $1), 0)
              ORDER BY task, since DESC) AS live)",
        &[&shard],
    )?;
    let number = |index: usize| -> Result<u64, PgStoreError> {
        let value: i64 = row.try_get(index)?;
        Ok(u64::try_from(value).unwrap_or(0))
    };
    let tables: Vec<String> = TABLES.iter().map(|t| format!("spool.{t}")).collect();
    let file: i64 = client
        .query_one(
            "SELECT coalesce(sum(pg_total_relation_size(t::regclass)), 0)::bigint
             FROM unnest($1::text[]) AS t",
            &[&tables],
        )?
        .try_get(0)?;
    let mut sizes = StoreSizes::default();
    sizes.entries = number(0)?;
    sizes.entry_bytes = number(1)?;
    sizes.checkpoints = number(2)?;
    sizes.snapshot_bytes = number(3)?;
    sizes.row_bytes = sizes.entry_bytes + number(4)? + number(5)?;
    sizes.file_bytes = u64::try_from(file).unwrap_or(0);
    Ok(sizes)
}
