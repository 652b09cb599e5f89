//! What a recovery reads: a kept checkpoint's snapshot and the journal entries after
//! it, up to the last one the head row says was committed, every row checked.

use postgres::GenericClient;
use spool_core::{Journal, JournalEntry, Snapshot, TaskId};
use spool_durable::EntrySequence;

use crate::error::PgStoreError;
use crate::rows::{
    CheckpointRow, HISTORY_COLUMNS, Head, TASK_COLUMNS, entry_row, kept_checkpoint, old_task_row,
    task_row,
};

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
/// parts, its header and every task row it reads put together — the rows in `tasks`
/// for the latest, and for an older one the rows it wrote or found, from `tasks` and
/// `task_history`.
fn checkpoint_bytes(
    client: &mut impl GenericClient,
    shard: i32,
    row: CheckpointRow,
    head: Head,
) -> Result<Vec<u8>, PgStoreError> {
    if !row.parts {
        return Ok(row.body);
    }
    let mut tasks: Vec<(TaskId, Vec<u8>)> = Vec::new();
    if row.id == head.checkpoint {
        let rows = client.query(
            &format!("SELECT {TASK_COLUMNS} FROM spool.tasks WHERE shard = $1 ORDER BY task"),
            &[&shard],
        )?;
        for row in &rows {
            let (task, body) = task_row(row, shard)?;
            tasks.push((TaskId::from_raw(task), body));
        }
    } else {
        let id = row.id as i64;
        let rows = client.query(
            &format!("SELECT {TASK_COLUMNS} FROM spool.tasks WHERE shard = $1 AND since <= $2"),
            &[&shard, &id],
        )?;
        for row in &rows {
            let (task, body) = task_row(row, shard)?;
            tasks.push((TaskId::from_raw(task), body));
        }
        let rows = client.query(
            &format!(
                "SELECT {HISTORY_COLUMNS} FROM spool.task_history
                 WHERE shard = $1 AND since <= $2 AND until > $2"
            ),
            &[&shard, &id],
        )?;
        for row in &rows {
            let (task, body) = old_task_row(row, shard)?;
            tasks.push((TaskId::from_raw(task), body));
        }
        tasks.sort_by_key(|(task, _)| *task);
        if let Some(pair) = tasks.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(PgStoreError::Corrupt(format!(
                "checkpoint {id} finds two rows of task {}",
                pair[0].0.get()
            )));
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
