//! What a recovery reads: a kept checkpoint's snapshot and the journal entries after
//! it, up to the last one the head row says was committed.

use rusqlite::Connection;
use spool_core::{Journal, JournalEntry};

use super::blob::read_blob;
use super::rows::{EntryRow, Head, kept_checkpoint, raw_row};
use crate::StoreError;

/// Checkpoint `id`'s snapshot bytes.
pub(super) fn snapshot_bytes(
    conn: &Connection,
    id: u64,
    head: Head,
) -> Result<Vec<u8>, StoreError> {
    let row = kept_checkpoint(conn, id, head)?;
    read_blob(conn, &row.roots, row.len)
}

/// Checkpoint `id`'s snapshot and every entry after it, up to the last one the head
/// row says was committed.
pub(super) fn journal_from(conn: &Connection, id: u64, head: Head) -> Result<Journal, StoreError> {
    let checkpoint = kept_checkpoint(conn, id, head)?;
    let start = read_blob(conn, &checkpoint.roots, checkpoint.len)?;
    let mut stmt = conn.prepare_cached(
        "SELECT seq, len, chunked, body, sum FROM entries WHERE seq > ?1 ORDER BY seq",
    )?;
    let rows = stmt.query_map([checkpoint.last_seq as i64], raw_row)?;
    let mut entries = Vec::new();
    let mut expected = checkpoint.last_seq + 1;
    for row in rows {
        let row = EntryRow::checked(row?)?;
        let seq = row.seq;
        if seq > head.last_seq {
            return Err(StoreError::Corrupt(format!(
                "journal entry {seq} is past the last one committed ({})",
                head.last_seq
            )));
        }
        if seq > expected {
            return Err(StoreError::Corrupt(format!(
                "journal entry {expected} is missing (the next kept is {seq})"
            )));
        }
        if seq < expected {
            return Err(StoreError::Corrupt(format!(
                "journal entry {seq} is out of order (after entry {})",
                expected - 1
            )));
        }
        let bytes = if row.chunked {
            read_blob(conn, &row.body, row.len)?
        } else if row.body.len() as u64 == row.len {
            row.body
        } else {
            return Err(StoreError::Corrupt(format!(
                "journal entry {seq} has {} bytes, not {}",
                row.body.len(),
                row.len
            )));
        };
        let entry =
            JournalEntry::from_bytes(&bytes).map_err(|source| StoreError::Entry { seq, source })?;
        entries.push(entry);
        expected += 1;
    }
    if expected <= head.last_seq {
        return Err(StoreError::Corrupt(if expected == head.last_seq {
            format!("journal entry {expected}, the last committed, is missing")
        } else {
            format!(
                "journal entries {expected} to {}, the last committed, are missing",
                head.last_seq
            )
        }));
    }
    Ok(Journal { start, entries })
}
