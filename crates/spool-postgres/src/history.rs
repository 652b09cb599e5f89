//! The history a store keeps, as its segments: each kept checkpoint, when it was
//! written, and the entries up to the next.

use postgres::GenericClient;
use spool_durable::{KeptCheckpoint, SegmentInfo, segments_of};

use crate::error::PgStoreError;
use crate::rows::{Head, checkpoint_rows};

/// The encoded bytes of `shard`'s entries after its latest checkpoint: what the next
/// checkpoint records as the bytes of the segment before it.
pub(crate) fn tail_bytes(
    client: &mut impl GenericClient,
    shard: i32,
    head: Head,
) -> Result<u64, PgStoreError> {
    let bytes: i64 = client
        .query_one(
            "SELECT COALESCE(SUM(length(body)), 0)::bigint FROM spool.entries
             WHERE shard = $1 AND seq > COALESCE(
                 (SELECT last_seq FROM spool.checkpoints WHERE shard = $1 AND id = $2), 0)",
            &[&shard, &(head.checkpoint as i64)],
        )?
        .try_get(0)?;
    Ok(u64::try_from(bytes).unwrap_or(0))
}

/// `shard`'s segments kept, oldest first.
pub(crate) fn segments(
    client: &mut impl GenericClient,
    shard: i32,
) -> Result<Vec<SegmentInfo>, PgStoreError> {
    let head = crate::rows::read_head(client, shard, false)?;
    let tail = tail_bytes(client, shard, head)?;
    let rows = checkpoint_rows(client, shard, head)?;
    let kept: Vec<KeptCheckpoint> = rows
        .iter()
        .map(|row| KeptCheckpoint {
            id: row.id,
            last_seq: row.last_seq,
            at_ms: row.at,
            bytes: row.bytes,
            prior: row.prior,
        })
        .collect();
    Ok(segments_of(&kept, head.last_seq, tail))
}
