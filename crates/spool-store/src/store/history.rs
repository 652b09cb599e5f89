//! The history a store keeps, as its segments: each kept checkpoint, when it was
//! written, and the entries up to the next.

use rusqlite::Connection;
use spool_durable::{KeptCheckpoint, SegmentInfo, segments_of};

use super::rows::{Head, checkpoint_rows};
use crate::StoreError;

/// The encoded bytes of the entries after the latest checkpoint: what the next
/// checkpoint records as the bytes of the segment before it. A damaged length counts 0
/// here: reading the entry finds the damage and names it.
pub(super) fn tail_bytes(conn: &Connection, head: Head) -> Result<u64, StoreError> {
    let bytes: i64 = conn.query_row(
        "SELECT COALESCE(SUM(CASE WHEN typeof(len) = 'integer' AND len > 0 THEN len ELSE 0 END), 0)
         FROM entries
         WHERE seq > COALESCE((SELECT CASE WHEN typeof(last_seq) = 'integer' THEN last_seq END
                               FROM checkpoints WHERE id = ?1), 0)",
        [head.checkpoint as i64],
        |row| row.get(0),
    )?;
    Ok(u64::try_from(bytes).unwrap_or(0))
}

/// The segments kept, oldest first (`tail`: the encoded bytes of the latest one's
/// entries).
pub(super) fn segments(
    conn: &Connection,
    head: Head,
    tail: u64,
) -> Result<Vec<SegmentInfo>, StoreError> {
    let rows = checkpoint_rows(conn, head)?;
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
