//! What a recovery reads: a kept checkpoint's snapshot and the journal entries after
//! it, up to the last one the head row says was committed.

use rusqlite::Connection;
use spool_core::{Journal, JournalEntry, Snapshot, TaskId};
use spool_durable::EntrySequence;

use super::blob::read_blob;
use super::rows::{
    CheckpointRow, EntryRow, HISTORY_COLUMNS, Head, TASK_COLUMNS, TaskRow, kept_checkpoint,
    raw_history_row, raw_row, raw_task_row,
};
use crate::StoreError;

/// Checkpoint `id`'s snapshot bytes.
pub(super) fn snapshot_bytes(
    conn: &Connection,
    id: u64,
    head: Head,
) -> Result<Vec<u8>, StoreError> {
    let row = kept_checkpoint(conn, id, head)?;
    checkpoint_bytes(conn, &row, head)
}

/// The snapshot a checkpoint row stands for, encoded: its blob, or, for a checkpoint
/// in parts, its header and every task row it reads put together — the rows in
/// `tasks` for the latest, and for an older one the rows it wrote or found, from
/// `tasks` and `task_history`.
fn checkpoint_bytes(
    conn: &Connection,
    row: &CheckpointRow,
    head: Head,
) -> Result<Vec<u8>, StoreError> {
    let blob = read_blob(conn, &row.roots, row.len)?;
    if !row.parts {
        return Ok(blob);
    }
    let mut tasks = Vec::new();
    if row.id == head.checkpoint {
        let mut stmt =
            conn.prepare_cached(&format!("SELECT {TASK_COLUMNS} FROM tasks ORDER BY task"))?;
        for raw in stmt.query_map([], raw_task_row)? {
            tasks.push(TaskRow::checked(raw?)?);
        }
    } else {
        let id = row.id as i64;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE since <= ?1"
        ))?;
        for raw in stmt.query_map([id], raw_task_row)? {
            tasks.push(TaskRow::checked(raw?)?);
        }
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {HISTORY_COLUMNS} FROM task_history WHERE since <= ?1 AND until > ?1"
        ))?;
        for raw in stmt.query_map([id], raw_history_row)? {
            tasks.push(TaskRow::checked_old(raw?)?);
        }
        tasks.sort_by_key(|task| task.task);
        if let Some(pair) = tasks.windows(2).find(|pair| pair[0].task == pair[1].task) {
            return Err(StoreError::Corrupt(format!(
                "checkpoint {} finds two rows of task {} (from checkpoints {} and {})",
                row.id, pair[0].task, pair[0].since, pair[1].since
            )));
        }
    }
    let mut rows: Vec<(TaskId, Vec<u8>)> = Vec::with_capacity(tasks.len());
    for task in tasks {
        let what = || format!("the row of task {}", task.task);
        let bytes = row_bytes(conn, task.chunked, &task.body, task.len, what)?;
        rows.push((TaskId::from_raw(task.task), bytes));
    }
    let snapshot = Snapshot::from_parts(&blob, rows.iter().map(|(id, r)| (*id, r.as_slice())))
        .map_err(StoreError::Snapshot)?;
    snapshot
        .encode()
        .map_err(|e| StoreError::Encode(e.to_string()))
}

/// Checkpoint `id`'s snapshot and every entry after it, up to the last one the head
/// row says was committed.
pub(super) fn journal_from(conn: &Connection, id: u64, head: Head) -> Result<Journal, StoreError> {
    let checkpoint = kept_checkpoint(conn, id, head)?;
    let start = checkpoint_bytes(conn, &checkpoint, head)?;
    let mut stmt = conn.prepare_cached(
        "SELECT seq, len, chunked, body, sum FROM entries WHERE seq > ?1 ORDER BY seq",
    )?;
    let rows = stmt.query_map([checkpoint.last_seq as i64], raw_row)?;
    let mut entries = Vec::new();
    let mut sequence = EntrySequence::new(checkpoint.last_seq, head.last_seq);
    for row in rows {
        let row = EntryRow::checked(row?)?;
        let seq = row.seq;
        sequence
            .take(seq)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let what = || format!("journal entry {seq}");
        let bytes = row_bytes(conn, row.chunked, &row.body, row.len, what)?;
        let entry =
            JournalEntry::from_bytes(&bytes).map_err(|source| StoreError::Entry { seq, source })?;
        entries.push(entry);
    }
    sequence
        .finish()
        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(Journal { start, entries })
}

/// What a row holds: its `body` if it is whole, else the blob its roots name; either
/// must be `len` bytes.
fn row_bytes(
    conn: &Connection,
    chunked: bool,
    body: &[u8],
    len: u64,
    what: impl Fn() -> String,
) -> Result<Vec<u8>, StoreError> {
    if chunked {
        read_blob(conn, body, len)
    } else if body.len() as u64 == len {
        Ok(body.to_vec())
    } else {
        Err(StoreError::Corrupt(format!(
            "{} has {} bytes, not {len}",
            what(),
            body.len()
        )))
    }
}
