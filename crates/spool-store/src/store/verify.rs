//! The whole-store check behind [`Store::verify`](crate::Store::verify): every chunk
//! against its hash, every reference count against the references there are, and every
//! kept checkpoint's journal read as a recovery reads it.

use std::collections::BTreeMap;

use rusqlite::Connection;

use super::blob::{check_hash, hex, split_hashes};
use super::recover::journal_from;
use super::rows::{
    CheckpointRow, EntryRow, HISTORY_COLUMNS, Head, TASK_COLUMNS, TaskRow, checkpoint_rows,
    raw_history_row, raw_row, raw_task_row, read_head,
};
use crate::StoreError;
use crate::chunk::{ChunkKind, Hash};

/// How many times each chunk is referenced, by its hash.
type References = BTreeMap<Hash, i64>;

/// The whole-store check behind [`Store::verify`](crate::Store::verify).
pub(super) fn verify(conn: &Connection) -> Result<(), StoreError> {
    quick_check(conn)?;
    let head = read_head(conn)?;
    // References from rows, then from index chunks; compared with the counts kept.
    let mut expected = References::new();
    let checkpoints = checkpoint_rows(conn, head)?;
    for row in &checkpoints {
        refer(&mut expected, &row.roots, "a checkpoint's roots")?;
    }
    check_latest(&checkpoints, head)?;
    refer_entries(conn, &mut expected)?;
    refer_task_rows(conn, &mut expected)?;
    let counted = check_chunks(conn, &mut expected)?;
    compare_counts(&expected, &counted)?;
    check_journal_span(conn)?;
    // Last, what a recovery reads: every kept checkpoint and the entries after it.
    for checkpoint in &checkpoints {
        journal_from(conn, checkpoint.id, head)?;
    }
    Ok(())
}

/// SQLite's own check of the file's pages and indexes.
fn quick_check(conn: &Connection) -> Result<(), StoreError> {
    let check: String = conn.query_row("PRAGMA quick_check", [], |row| row.get(0))?;
    if check != "ok" {
        return Err(StoreError::Corrupt(format!(
            "SQLite's quick_check: {check}"
        )));
    }
    Ok(())
}

/// Counts one reference to each chunk named in `roots` (`what` says whose they are,
/// for the error if they are not a list of hashes).
fn refer(expected: &mut References, roots: &[u8], what: &str) -> Result<(), StoreError> {
    for hash in split_hashes(roots, what)? {
        *expected.entry(hash).or_default() += 1;
    }
    Ok(())
}

/// Checks that the checkpoint the head row names is the latest of `checkpoints` (or
/// that there is none, before the first).
fn check_latest(checkpoints: &[CheckpointRow], head: Head) -> Result<(), StoreError> {
    match checkpoints.last() {
        Some(latest) if latest.id == head.checkpoint => Ok(()),
        None if head.checkpoint == 0 => Ok(()),
        _ => Err(StoreError::Corrupt(format!(
            "checkpoint {}, the latest, is missing",
            head.checkpoint
        ))),
    }
}

/// Checks every journal entry's row and counts the chunks the chunked ones refer to.
fn refer_entries(conn: &Connection, expected: &mut References) -> Result<(), StoreError> {
    let mut stmt = conn.prepare("SELECT seq, len, chunked, body, sum FROM entries ORDER BY seq")?;
    let rows = stmt.query_map([], raw_row)?;
    for row in rows {
        let row = EntryRow::checked(row?)?;
        if row.chunked {
            refer(expected, &row.body, "an entry's roots")?;
        }
    }
    Ok(())
}

/// Checks every task row, the kept old ones too, and counts the chunks the chunked ones
/// refer to.
fn refer_task_rows(conn: &Connection, expected: &mut References) -> Result<(), StoreError> {
    let mut stmt = conn.prepare(&format!("SELECT {TASK_COLUMNS} FROM tasks"))?;
    let rows = stmt.query_map([], raw_task_row)?;
    for row in rows {
        let row = TaskRow::checked(row?)?;
        if row.chunked {
            refer(expected, &row.body, "a task row's roots")?;
        }
    }
    let mut stmt = conn.prepare(&format!("SELECT {HISTORY_COLUMNS} FROM task_history"))?;
    let rows = stmt.query_map([], raw_history_row)?;
    for row in rows {
        let row = TaskRow::checked_old(row?)?;
        if row.chunked {
            refer(expected, &row.body, "a kept task row's roots")?;
        }
    }
    Ok(())
}

/// Checks every chunk's key, kind and hash, counts the chunks each index chunk refers
/// to, and returns the reference count each chunk keeps.
fn check_chunks(conn: &Connection, expected: &mut References) -> Result<References, StoreError> {
    let mut counted = References::new();
    let mut stmt = conn.prepare("SELECT hash, kind, refs, data FROM chunks")?;
    let rows = stmt.query_map([], |row| {
        Ok((
            row.get::<_, Vec<u8>>(0)?,
            row.get::<_, i64>(1)?,
            row.get::<_, i64>(2)?,
            row.get::<_, Vec<u8>>(3)?,
        ))
    })?;
    for row in rows {
        let (hash, kind, refs, data) = row?;
        let hash: Hash = hash
            .as_slice()
            .try_into()
            .map_err(|_| StoreError::Corrupt(format!("a chunk's key has {} bytes", hash.len())))?;
        let kind = ChunkKind::from_code(kind).ok_or_else(|| {
            StoreError::Corrupt(format!("chunk {} has the unknown kind {kind}", hex(&hash)))
        })?;
        check_hash(kind, &hash, &data)?;
        if kind == ChunkKind::Index {
            refer(expected, &data, "an index chunk")?;
        }
        counted.insert(hash, refs);
    }
    Ok(counted)
}

/// Checks that every chunk keeps the count of the references there are to it, and
/// that every chunk referred to is there.
fn compare_counts(expected: &References, counted: &References) -> Result<(), StoreError> {
    for (hash, refs) in counted {
        let want = expected.get(hash).copied().unwrap_or(0);
        if *refs != want {
            return Err(StoreError::Corrupt(format!(
                "chunk {} counts {refs} references, but {want} refer to it",
                hex(hash)
            )));
        }
    }
    if let Some(hash) = expected.keys().find(|h| !counted.contains_key(*h)) {
        return Err(StoreError::Corrupt(format!(
            "chunk {} is referenced but missing",
            hex(hash)
        )));
    }
    Ok(())
}

/// Checks that the journal entries kept run without a gap from the one after the
/// oldest checkpoint.
fn check_journal_span(conn: &Connection) -> Result<(), StoreError> {
    let (oldest, first, last, kept): (Option<i64>, Option<i64>, Option<i64>, i64) = conn
        .query_row(
            "SELECT (SELECT MIN(last_seq) FROM checkpoints), MIN(seq), MAX(seq), COUNT(*)
             FROM entries",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
        )?;
    if let (Some(oldest), Some(first), Some(last)) = (oldest, first, last)
        && (first > oldest + 1 || last - first + 1 != kept)
    {
        return Err(StoreError::Corrupt(format!(
            "journal entries are missing: {kept} kept from {first} to {last}, the oldest checkpoint after {oldest}"
        )));
    }
    Ok(())
}
