//! What a recovery reads: a kept checkpoint's snapshot and the journal entries after
//! it, up to the last one the head row says was committed, every row checked.

use postgres::GenericClient;
use spool_core::{Journal, JournalEntry, Snapshot, TaskId};
use spool_durable::EntrySequence;

use crate::error::PgStoreError;
use crate::rows::{CheckpointRow, Head, ROWS_AT, entry_row, kept_checkpoint, task_row};

/// Checkpoint `id`'s snapshot bytes.
pub(crate) fn snapshot_bytes(
    client: &mut impl GenericClient,
    shard: i32,
    id: u64,
    head: Head,
) -> Result<Vec<u8>, PgStoreError> {
    let row = kept_checkpoint(client, shard, id, head)?;
    checkpoint_bytes(client, shard, row, head)
}

/// The snapshot a checkpoint row stands for, encoded: its body, or, for a checkpoint in
/// parts, its header and every task row it reads put together — for each task, the
/// newest version kept from its base to it, unless that is a tombstone.
fn checkpoint_bytes(
    client: &mut impl GenericClient,
    shard: i32,
    row: CheckpointRow,
    head: Head,
) -> Result<Vec<u8>, PgStoreError> {
    if !row.parts {
        return Ok(row.body);
    }
    let kept = row.id != head.checkpoint;
    let rows = client.query(ROWS_AT, &[&shard, &(row.base as i64), &(row.id as i64)])?;
    let mut tasks: Vec<(TaskId, Vec<u8>)> = Vec::with_capacity(rows.len());
    for version in &rows {
        if let (task, Some(body)) = task_row(version, shard, kept)? {
            tasks.push((TaskId::from_raw(task), body));
        }
    }
    let snapshot = Snapshot::from_parts(&row.body, tasks.iter().map(|(id, r)| (*id, r.as_slice())))
        .map_err(PgStoreError::Snapshot)?;
    snapshot
        .encode()
        .map_err(|e| PgStoreError::Encode(e.to_string()))
}

/// Checkpoint `id`'s snapshot and every entry after it, up to the last one the head
/// row says was committed.
pub(crate) fn journal_from(
    client: &mut impl GenericClient,
    shard: i32,
    id: u64,
    head: Head,
) -> Result<Journal, PgStoreError> {
    let checkpoint = kept_checkpoint(client, shard, id, head)?;
    let after = checkpoint.last_seq;
    let start = checkpoint_bytes(client, shard, checkpoint, head)?;
    let rows = client.query(
        "SELECT seq, body, sum FROM spool.entries WHERE shard = $1 AND seq > $2 ORDER BY seq",
        &[&shard, &(after as i64)],
    )?;
    let mut entries = Vec::with_capacity(rows.len());
    let mut sequence = EntrySequence::new(after, head.last_seq);
    for row in &rows {
        let (seq, body) = entry_row(row, shard)?;
        sequence
            .take(seq)
            .map_err(|e| PgStoreError::Corrupt(e.to_string()))?;
        let entry = JournalEntry::from_bytes(&body)
            .map_err(|source| PgStoreError::Entry { seq, source })?;
        entries.push(entry);
    }
    sequence
        .finish()
        .map_err(|e| PgStoreError::Corrupt(e.to_string()))?;
    Ok(Journal { start, entries })
}
