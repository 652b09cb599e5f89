//! The task rows a checkpoint in parts writes: the latest in `tasks`, and, while
//! history is kept, the rows they replaced in `task_history` (each with the checkpoints
//! that wrote and replaced it), so an older checkpoint in parts can still be read.

use rusqlite::{OptionalExtension, Transaction, params};
use spool_core::SnapshotParts;
use spool_durable::WriteStats;

use super::blob::{put_blob, release_all};
use super::rows::{HISTORY_COLUMNS, TASK_COLUMNS, TaskRow, raw_history_row, raw_task_row};
use crate::StoreError;
use crate::sum;

/// Task rows up to this many bytes are kept whole in the `tasks` table; larger ones (a
/// long transcript) are chunked, so that what they share with the task's row at the
/// last checkpoint is stored once.
pub const ROW_INLINE_MAX: usize = 4096;

/// The row of task `task`, checked, if it has one.
fn task_row(tx: &Transaction<'_>, task: u64) -> Result<Option<TaskRow>, StoreError> {
    let row = tx
        .prepare_cached(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE task = ?1"))?
        .query_row([task as i64], raw_task_row)
        .optional()?;
    row.map(TaskRow::checked).transpose()
}

/// The statement that copies task rows into `task_history` as replaced by checkpoint
/// `?1`; a `WHERE` picks which.
const COPY: &str = "INSERT INTO task_history
     (until, task, since, len, chunked, body, row_sum, sum)
     SELECT ?1, task, since, len, chunked, body, sum, spool_kept_sum(task, since, ?1, sum)
     FROM tasks";

/// How many task rows one statement copies at most.
const COPY_BATCH: usize = 256;

/// Keeps the rows of `tasks` (those that have one) in `task_history` as replaced by
/// checkpoint `until`, copied by SQLite, [`COPY_BATCH`] a statement: their chunks'
/// references go with them. The kept row's checksum covers the row's own (checked
/// with the body when it is read), so a row damaged before it was kept is still found.
fn keep_old(tx: &Transaction<'_>, tasks: &[u64], until: u64) -> Result<(), StoreError> {
    for batch in tasks.chunks(COPY_BATCH) {
        let marks: Vec<String> = (0..batch.len()).map(|i| format!("?{}", i + 2)).collect();
        let sql = format!("{COPY} WHERE task IN ({})", marks.join(", "));
        let mut stmt = tx.prepare_cached(&sql)?;
        let params: Vec<i64> = std::iter::once(until as i64)
            .chain(batch.iter().map(|&task| task as i64))
            .collect();
        stmt.execute(rusqlite::params_from_iter(params))?;
    }
    Ok(())
}

/// Keeps every task row in `task_history` as replaced by checkpoint `until`.
fn keep_all(tx: &Transaction<'_>, until: u64) -> Result<(), StoreError> {
    tx.prepare_cached(COPY)?.execute([until as i64])?;
    Ok(())
}

/// Drops task `task`'s row; without history (`kept` false) its chunks are released,
/// with history its row was kept already and its references go with it.
fn drop_task_row(tx: &Transaction<'_>, task: u64, kept: bool) -> Result<(), StoreError> {
    if !kept
        && let Some(row) = task_row(tx, task)?
        && row.chunked
    {
        // Checked before its roots are released: a damaged row's roots could name
        // chunks others still use.
        release_all(tx, &row.body)?;
    }
    tx.prepare_cached("DELETE FROM tasks WHERE task = ?1")?
        .execute([task as i64])?;
    Ok(())
}

/// Drops every task row: kept as replaced by checkpoint `until` if history is kept
/// (`Some`), else their chunks released.
pub(super) fn clear_task_rows(tx: &Transaction<'_>, until: Option<u64>) -> Result<(), StoreError> {
    if let Some(until) = until {
        keep_all(tx, until)?;
    } else {
        let chunked: Vec<TaskRow> = {
            let mut stmt = tx.prepare_cached(&format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE chunked != 0"
            ))?;
            let rows = stmt.query_map([], raw_task_row)?;
            let mut out = Vec::new();
            for row in rows {
                out.push(TaskRow::checked(row?)?);
            }
            out
        };
        for row in chunked {
            release_all(tx, &row.body)?;
        }
    }
    tx.prepare_cached("DELETE FROM tasks")?.execute([])?;
    Ok(())
}

/// Writes `parts`' rows, as checkpoint `id`'s, over the task rows: all of them anew if
/// the parts are full, else the changed ones replaced and the removed ones dropped.
/// With `history`, the rows replaced or dropped are kept in `task_history`.
pub(super) fn write_task_rows(
    tx: &Transaction<'_>,
    parts: &SnapshotParts,
    id: u64,
    history: bool,
    written: &mut WriteStats,
) -> Result<(), StoreError> {
    let until = history.then_some(id);
    if history && !parts.full {
        // The rows it replaces or drops are kept, references and all, first.
        let replaced: Vec<u64> = (parts.removed.iter())
            .chain(parts.rows.iter().map(|(task, _)| task))
            .map(|task| task.get())
            .collect();
        keep_old(tx, &replaced, id)?;
    }
    if parts.full {
        clear_task_rows(tx, until)?;
    } else {
        for task in &parts.removed {
            drop_task_row(tx, task.get(), history)?;
        }
    }
    for (task, bytes) in &parts.rows {
        let task = task.get();
        // With history its old row was kept above, references and all; without, its
        // old row's chunks go after the new row's are referenced, so what they share
        // is not written again.
        if !parts.full
            && !history
            && let Some(old) = task_row(tx, task)?
            && old.chunked
        {
            let (chunked, body) = task_body(tx, bytes, written)?;
            release_all(tx, &old.body)?;
            put_task_row(tx, task, id, bytes.len(), chunked, &body, written)?;
            continue;
        }
        let (chunked, body) = task_body(tx, bytes, written)?;
        put_task_row(tx, task, id, bytes.len(), chunked, &body, written)?;
    }
    Ok(())
}

/// What a task row's `body` holds for `bytes`: the bytes, or the roots of their chunks
/// if they are large.
fn task_body(
    tx: &Transaction<'_>,
    bytes: &[u8],
    written: &mut WriteStats,
) -> Result<(bool, Vec<u8>), StoreError> {
    if bytes.len() <= ROW_INLINE_MAX {
        Ok((false, bytes.to_vec()))
    } else {
        Ok((true, put_blob(tx, bytes, written)?))
    }
}

/// Writes task `task`'s row as checkpoint `since`'s, replacing any it had.
fn put_task_row(
    tx: &Transaction<'_>,
    task: u64,
    since: u64,
    len: usize,
    chunked: bool,
    body: &[u8],
    written: &mut WriteStats,
) -> Result<(), StoreError> {
    written.task_rows += 1;
    written.row_bytes += body.len() as u64;
    let check = sum::task(task, since, len as u64, u64::from(chunked), body);
    tx.prepare_cached(
        "INSERT OR REPLACE INTO tasks (task, len, chunked, body, sum, since)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        task as i64,
        len as i64,
        chunked,
        body,
        check,
        since as i64
    ])?;
    Ok(())
}

/// Drops the kept old task rows no checkpoint from `oldest` on reads (those replaced by
/// `oldest` or before), releasing their chunks.
pub(super) fn prune_task_history(tx: &Transaction<'_>, oldest: u64) -> Result<(), StoreError> {
    let chunked: Vec<TaskRow> = {
        let mut stmt = tx.prepare_cached(&format!(
            "SELECT {HISTORY_COLUMNS} FROM task_history WHERE until <= ?1 AND chunked != 0"
        ))?;
        let rows = stmt.query_map([oldest as i64], raw_history_row)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(TaskRow::checked_old(row?)?);
        }
        out
    };
    for row in chunked {
        release_all(tx, &row.body)?;
    }
    tx.prepare_cached("DELETE FROM task_history WHERE until <= ?1")?
        .execute([oldest as i64])?;
    Ok(())
}
