//! Writes: the connection and what it keeps of the head, and the transaction that
//! writes a group of entries and checkpoints (a checkpoint dropping what no kept
//! checkpoint needs). Run on the writer thread ([`super::writer`]).

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use spool_core::SnapshotParts;

use super::blob::{put_blob, release_all};
use super::file::Watch;
use super::open::StoreOptions;
use super::rows::{EntryRow, Head, TaskRow, checkpoint_rows, raw_row, write_head};
use crate::StoreError;
use crate::sum;
use spool_durable::{CrashCounter, Op, WriteStats};

/// Journal entries up to this many bytes are kept whole in their row; larger ones are
/// chunked like snapshots.
pub const INLINE_MAX: usize = 256;

/// Task rows up to this many bytes are kept whole in the `tasks` table; larger ones (a
/// long transcript) are chunked, so that what they share with the task's row at the
/// last checkpoint is stored once.
pub const ROW_INLINE_MAX: usize = 4096;

/// What a [`Store`](crate::Store) and its clones share behind one lock (the writer
/// thread takes it for each transaction, readers for each read): the connection, the
/// options, the head as of the last commit, and the write counts.
pub(super) struct Inner {
    pub(super) conn: Connection,
    pub(super) options: StoreOptions,
    /// What the head row says, as of the last commit.
    pub(super) head: Head,
    pub(super) written: WriteStats,
    pub(super) crash: CrashCounter,
    /// The store's path and the file it named when opened.
    pub(super) file: Watch,
}

impl Inner {
    /// Writes `ops` in order in one transaction (one `fsync` with
    /// `Durability::PowerLoss`), with the head row once at the end. Returns each op's
    /// number: an entry's sequence number, a checkpoint's id. Nothing is changed if it
    /// fails. A store whose file was deleted or replaced writes nothing more
    /// ([`StoreError::FileGone`]): what it wrote would be lost with the process.
    pub(super) fn write(&mut self, ops: &[&Op]) -> Result<Vec<u64>, StoreError> {
        self.file.check()?;
        let mut head = self.head;
        let mut written = WriteStats::default();
        let mut ids = Vec::with_capacity(ops.len());
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        for op in ops {
            let id = match op {
                Op::Entry(entry) => {
                    let bytes = entry
                        .to_bytes()
                        .map_err(|e| StoreError::Encode(e.to_string()))?;
                    append(&tx, &mut head, &bytes, &mut written)?
                }
                Op::Checkpoint { snapshot, start } => {
                    let keep = if *start {
                        1
                    } else {
                        self.options.keep_checkpoints
                    };
                    let body = Body::Whole(snapshot);
                    let id = checkpoint(&tx, &mut head, body, keep, &mut written)?;
                    if !*start {
                        self.crash.in_checkpoint();
                    }
                    id
                }
                Op::Parts(parts) => {
                    let id = checkpoint(&tx, &mut head, Body::Parts(parts), 1, &mut written)?;
                    self.crash.in_checkpoint();
                    id
                }
            };
            ids.push(id);
        }
        write_head(&tx, head)?;
        if !Op::starts(ops) {
            self.crash.in_commit();
        }
        tx.commit()?;
        self.head = head;
        self.written.add(&written);
        Ok(ids)
    }
}

/// Appends the entry `bytes` after `head`'s last.
fn append(
    tx: &Transaction<'_>,
    head: &mut Head,
    bytes: &[u8],
    written: &mut WriteStats,
) -> Result<u64, StoreError> {
    let seq = head.last_seq + 1;
    let len = bytes.len() as u64;
    written.entries += 1;
    written.entry_bytes += len;
    let (chunked, body) = if bytes.len() <= INLINE_MAX {
        (false, bytes.to_vec())
    } else {
        (true, put_blob(tx, bytes, written)?)
    };
    written.row_bytes += body.len() as u64;
    let check = sum::entry(seq, len, u64::from(chunked), &body);
    tx.prepare_cached(
        "INSERT INTO entries (seq, len, chunked, body, sum) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![seq as i64, len as i64, chunked, body, check])?;
    head.last_seq = seq;
    Ok(seq)
}

/// What a checkpoint writes.
#[derive(Clone, Copy)]
enum Body<'a> {
    /// A whole snapshot, encoded.
    Whole(&'a [u8]),
    /// A header and the rows of the tasks that changed.
    Parts(&'a SnapshotParts),
}

/// Writes a checkpoint after `head`'s last entry, and drops the checkpoints beyond the
/// last `keep`, the entries no kept one needs, and the chunks nothing refers to any
/// more. A checkpoint in parts writes its header as the checkpoint's blob and its rows
/// over the `tasks` table; only the latest checkpoint in parts can be read (the rows
/// are the latest), so one drops every checkpoint before it, and a whole checkpoint
/// drops the task rows and every checkpoint in parts.
fn checkpoint(
    tx: &Transaction<'_>,
    head: &mut Head,
    body: Body<'_>,
    keep: usize,
    written: &mut WriteStats,
) -> Result<u64, StoreError> {
    written.checkpoints += 1;
    written.snapshot_bytes += match body {
        Body::Whole(snapshot) => snapshot.len() as u64,
        Body::Parts(parts) => {
            (parts.header.len() + parts.rows.iter().map(|(_, r)| r.len()).sum::<usize>()) as u64
        }
    };
    head.checkpoint += 1;
    let head = *head;
    // The new checkpoint's chunks are referenced before the old ones are released,
    // so what they share is never deleted and written again.
    insert_checkpoint(tx, head, body, written)?;
    match body {
        Body::Whole(_) => clear_task_rows(tx)?,
        Body::Parts(parts) => write_task_rows(tx, parts, written)?,
    }
    let oldest = drop_old_checkpoints(tx, head, keep)?;
    drop_entries_through(tx, oldest)?;
    give_back_free_pages(tx)?;
    Ok(head.checkpoint)
}

/// Writes the row of checkpoint `head.checkpoint` (after `head.last_seq`), its blob (the
/// snapshot, or the header of one in parts) stored as chunks.
fn insert_checkpoint(
    tx: &Transaction<'_>,
    head: Head,
    body: Body<'_>,
    written: &mut WriteStats,
) -> Result<(), StoreError> {
    let (blob, parts) = match body {
        Body::Whole(snapshot) => (snapshot, false),
        Body::Parts(parts) => (parts.header.as_slice(), true),
    };
    let id = head.checkpoint;
    let roots = put_blob(tx, blob, written)?;
    written.row_bytes += roots.len() as u64;
    let len = blob.len() as u64;
    let check = sum::checkpoint(id, head.last_seq, len, u64::from(parts), &roots);
    tx.prepare_cached(
        "INSERT INTO checkpoints (id, last_seq, len, roots, sum, parts)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        id as i64,
        head.last_seq as i64,
        len as i64,
        roots,
        check,
        parts
    ])?;
    Ok(())
}

/// Drops the checkpoints before the last `keep`, and those in parts other than
/// `head.checkpoint` (which cannot be read any more), releasing their chunks; returns
/// the last entry before the oldest checkpoint kept (the entries up to it are needed no
/// more).
fn drop_old_checkpoints(tx: &Transaction<'_>, head: Head, keep: usize) -> Result<u64, StoreError> {
    // Rows are checked before their roots are released: a damaged row's roots
    // could name chunks others still use.
    let rows = checkpoint_rows(tx, head)?;
    let kept_from = rows.len().saturating_sub(keep);
    let mut oldest = head.last_seq;
    for (index, old) in rows.iter().enumerate() {
        if index < kept_from || (old.parts && old.id != head.checkpoint) {
            release_all(tx, &old.roots)?;
            tx.prepare_cached("DELETE FROM checkpoints WHERE id = ?1")?
                .execute([old.id as i64])?;
        } else {
            oldest = oldest.min(old.last_seq);
        }
    }
    Ok(oldest)
}

/// Drops the journal entries up to `oldest`, releasing the chunks of the chunked ones.
fn drop_entries_through(tx: &Transaction<'_>, oldest: u64) -> Result<(), StoreError> {
    let chunked: Vec<EntryRow> = {
        let mut stmt = tx.prepare_cached(
            "SELECT seq, len, chunked, body, sum FROM entries WHERE seq <= ?1 AND chunked != 0",
        )?;
        let rows = stmt.query_map([oldest as i64], raw_row)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(EntryRow::checked(row?)?);
        }
        out
    };
    for entry in chunked {
        release_all(tx, &entry.body)?;
    }
    tx.prepare_cached("DELETE FROM entries WHERE seq <= ?1")?
        .execute([oldest as i64])?;
    Ok(())
}

/// Gives freed pages back to the file system once they are a quarter of the file.
fn give_back_free_pages(tx: &Transaction<'_>) -> Result<(), StoreError> {
    let (pages, free): (i64, i64) = tx.query_row(
        "SELECT (SELECT page_count FROM pragma_page_count),
                (SELECT freelist_count FROM pragma_freelist_count)",
        [],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    if free >= 64 && free * 4 >= pages {
        // The pragma frees one page per row it steps through.
        let mut stmt = tx.prepare("PRAGMA incremental_vacuum")?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
    }
    Ok(())
}

/// The row of task `task`, checked, if it has one.
fn task_row(tx: &Transaction<'_>, task: u64) -> Result<Option<TaskRow>, StoreError> {
    let row = tx
        .prepare_cached("SELECT task, len, chunked, body, sum FROM tasks WHERE task = ?1")?
        .query_row([task as i64], raw_row)
        .optional()?;
    row.map(TaskRow::checked).transpose()
}

/// Drops task `task`'s row, releasing its chunks.
fn drop_task_row(tx: &Transaction<'_>, task: u64) -> Result<(), StoreError> {
    // Checked before its roots are released: a damaged row's roots could name chunks
    // others still use.
    if let Some(row) = task_row(tx, task)? {
        if row.chunked {
            release_all(tx, &row.body)?;
        }
        tx.prepare_cached("DELETE FROM tasks WHERE task = ?1")?
            .execute([task as i64])?;
    }
    Ok(())
}

/// Drops every task row, releasing their chunks.
fn clear_task_rows(tx: &Transaction<'_>) -> Result<(), StoreError> {
    let chunked: Vec<TaskRow> = {
        let mut stmt = tx
            .prepare_cached("SELECT task, len, chunked, body, sum FROM tasks WHERE chunked != 0")?;
        let rows = stmt.query_map([], raw_row)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(TaskRow::checked(row?)?);
        }
        out
    };
    for row in chunked {
        release_all(tx, &row.body)?;
    }
    tx.prepare_cached("DELETE FROM tasks")?.execute([])?;
    Ok(())
}

/// Writes `parts`' rows over the task rows: all of them anew if the parts are full,
/// else the changed ones replaced and the removed ones dropped.
fn write_task_rows(
    tx: &Transaction<'_>,
    parts: &SnapshotParts,
    written: &mut WriteStats,
) -> Result<(), StoreError> {
    if parts.full {
        clear_task_rows(tx)?;
    } else {
        for task in &parts.removed {
            drop_task_row(tx, task.get())?;
        }
    }
    for (task, bytes) in &parts.rows {
        let task = task.get();
        if !parts.full {
            // Its old row's chunks go after the new row's are referenced below, so
            // what they share is not written again.
            if let Some(old) = task_row(tx, task)?
                && old.chunked
            {
                let (chunked, body) = task_body(tx, bytes, written)?;
                release_all(tx, &old.body)?;
                put_task_row(tx, task, bytes.len(), chunked, &body, written)?;
                continue;
            }
        }
        let (chunked, body) = task_body(tx, bytes, written)?;
        put_task_row(tx, task, bytes.len(), chunked, &body, written)?;
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

/// Writes task `task`'s row, replacing any it had.
fn put_task_row(
    tx: &Transaction<'_>,
    task: u64,
    len: usize,
    chunked: bool,
    body: &[u8],
    written: &mut WriteStats,
) -> Result<(), StoreError> {
    written.task_rows += 1;
    written.row_bytes += body.len() as u64;
    let check = sum::task(task, len as u64, u64::from(chunked), body);
    tx.prepare_cached(
        "INSERT OR REPLACE INTO tasks (task, len, chunked, body, sum) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![task as i64, len as i64, chunked, body, check])?;
    Ok(())
}
