//! The whole-store check behind [`Store::verify`](crate::Store::verify): every chunk
//! against its hash, every reference count against the references there are, and every
//! kept checkpoint's journal read as a recovery reads it.

use std::collections::HashMap;

use rusqlite::Connection;

use super::blob::{check_hash, hex, split_hashes};
use super::recover::journal_from;
use super::rows::{EntryRow, TaskRow, checkpoint_rows, raw_row, read_head};
use crate::StoreError;
use crate::chunk::{ChunkKind, Hash};

/// The whole-store check behind [`Store::verify`](crate::Store::verify).
pub(super) fn verify(conn: &Connection) -> Result<(), StoreError> {
    let check: String = conn.query_row("PRAGMA quick_check", [], |row| row.get(0))?;
    if check != "ok" {
        return Err(StoreError::Corrupt(format!(
            "SQLite's quick_check: {check}"
        )));
    }
    let head = read_head(conn)?;
    // References from rows, then from index chunks; compared with the counts kept.
    let mut expected: HashMap<Hash, i64> = HashMap::new();
    let mut refer = |roots: &[u8], what: &str| -> Result<(), StoreError> {
        for hash in split_hashes(roots, what)? {
            *expected.entry(hash).or_default() += 1;
        }
        Ok(())
    };
    let checkpoints = checkpoint_rows(conn, head)?;
    for row in &checkpoints {
        refer(&row.roots, "a checkpoint's roots")?;
    }
    match checkpoints.last() {
        Some(latest) if latest.id == head.checkpoint => {}
        None if head.checkpoint == 0 => {}
        _ => {
            return Err(StoreError::Corrupt(format!(
                "checkpoint {}, the latest, is missing",
                head.checkpoint
            )));
        }
    }
    {
        let mut stmt =
            conn.prepare("SELECT seq, len, chunked, body, sum FROM entries ORDER BY seq")?;
        let rows = stmt.query_map([], raw_row)?;
        for row in rows {
            let row = EntryRow::checked(row?)?;
            if row.chunked {
                refer(&row.body, "an entry's roots")?;
            }
        }
    }
    {
        let mut stmt = conn.prepare("SELECT task, len, chunked, body, sum FROM tasks")?;
        let rows = stmt.query_map([], raw_row)?;
        for row in rows {
            let row = TaskRow::checked(row?)?;
            if row.chunked {
                refer(&row.body, "a task row's roots")?;
            }
        }
    }
    let mut counted: HashMap<Hash, i64> = HashMap::new();
    {
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
            let hash: Hash = hash.as_slice().try_into().map_err(|_| {
                StoreError::Corrupt(format!("a chunk's key has {} bytes", hash.len()))
            })?;
            let kind = ChunkKind::from_code(kind).ok_or_else(|| {
                StoreError::Corrupt(format!("chunk {} has the unknown kind {kind}", hex(&hash)))
            })?;
            check_hash(kind, &hash, &data)?;
            if kind == ChunkKind::Index {
                refer(&data, "an index chunk")?;
            }
            counted.insert(hash, refs);
        }
    }
    for (hash, refs) in &counted {
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
    // Last, what a recovery reads: every kept checkpoint and the entries after it.
    for checkpoint in &checkpoints {
        journal_from(conn, checkpoint.id, head)?;
    }
    Ok(())
}
