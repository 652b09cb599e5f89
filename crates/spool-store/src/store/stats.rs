//! What a store holds ([`StoreSizes`]), what it wrote since it was opened
//! ([`WriteStats`]), and the checkpoints it keeps ([`CheckpointInfo`]).

use rusqlite::Connection;

use super::rows::count;
use crate::StoreError;

/// What a store holds now ([`Store::sizes`](crate::Store::sizes)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreSizes {
    /// Distinct chunks, data and index.
    pub chunks: u64,
    /// Their bytes.
    pub chunk_bytes: u64,
    /// Of those, the index chunks (lists of chunk hashes).
    pub index_chunks: u64,
    /// Their bytes.
    pub index_bytes: u64,
    /// Journal entries kept.
    pub entries: u64,
    /// Their encoded length, summed: what keeping them plainly would take.
    pub entry_bytes: u64,
    /// Checkpoints kept.
    pub checkpoints: u64,
    /// Their snapshots' length, summed: what keeping them plainly would take.
    pub snapshot_bytes: u64,
    /// Bytes kept in rows rather than chunks: small entries whole, and the root hashes
    /// of chunked entries and checkpoints.
    pub row_bytes: u64,
    /// The database file's size (pages × page size, the write-ahead log aside).
    pub file_bytes: u64,
    /// Of which free pages, waiting to be reused or vacuumed.
    pub free_bytes: u64,
}

impl StoreSizes {
    /// What the store keeps of its data: chunks and row bytes.
    pub fn stored(&self) -> u64 {
        self.chunk_bytes + self.row_bytes
    }

    /// What the same checkpoints and entries would take stored plainly, each whole.
    pub fn plain(&self) -> u64 {
        self.snapshot_bytes + self.entry_bytes
    }
}

/// What a store was given and what it wrote, since it was opened
/// ([`Store::write_stats`](crate::Store::write_stats)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteStats {
    /// Journal entries appended.
    pub entries: u64,
    /// Their encoded length, summed.
    pub entry_bytes: u64,
    /// Checkpoints written (the journal's start included).
    pub checkpoints: u64,
    /// What checkpoints were given, summed: each whole snapshot's length, each
    /// checkpoint in parts' header and rows — what writing them without chunks would
    /// have written.
    pub snapshot_bytes: u64,
    /// Chunks that were new (the others were already stored and only referenced).
    pub new_chunks: u64,
    /// Their bytes.
    pub new_chunk_bytes: u64,
    /// Bytes written into rows: small entries and task rows whole, root hashes.
    pub row_bytes: u64,
    /// Task rows written by checkpoints in parts.
    pub task_rows: u64,
}

impl WriteStats {
    /// Bytes of data written: new chunks and row bytes.
    pub fn written(&self) -> u64 {
        self.new_chunk_bytes + self.row_bytes
    }

    /// Bytes that writing every snapshot and entry whole would have written.
    pub fn plain(&self) -> u64 {
        self.snapshot_bytes + self.entry_bytes
    }

    pub(super) fn add(&mut self, other: &WriteStats) {
        self.entries += other.entries;
        self.entry_bytes += other.entry_bytes;
        self.task_rows += other.task_rows;
        self.checkpoints += other.checkpoints;
        self.snapshot_bytes += other.snapshot_bytes;
        self.new_chunks += other.new_chunks;
        self.new_chunk_bytes += other.new_chunk_bytes;
        self.row_bytes += other.row_bytes;
    }
}

/// A checkpoint the store keeps ([`Store::checkpoints`](crate::Store::checkpoints)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointInfo {
    /// Its id: ids grow with every checkpoint written.
    pub id: u64,
    /// The sequence number of the last journal entry before it (0: none).
    pub after_entry: u64,
    /// The snapshot's length.
    pub snapshot_bytes: u64,
    /// Journal entries after it.
    pub entries_after: u64,
}

/// What the store holds now: what [`Store::sizes`](crate::Store::sizes) reads.
pub(super) fn sizes(conn: &Connection) -> Result<StoreSizes, StoreError> {
    let sum = |sql: &str| -> Result<(u64, u64, u64), StoreError> {
        let (a, b, c): (i64, i64, i64) =
            conn.query_row(sql, [], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
        Ok((count(a, "a sum")?, count(b, "a sum")?, count(c, "a sum")?))
    };
    let (chunks, chunk_bytes, _) =
        sum("SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0), 0 FROM chunks")?;
    let (index_chunks, index_bytes, _) =
        sum("SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0), 0 FROM chunks WHERE kind = 1")?;
    let (entries, entry_bytes, entry_rows) =
        sum("SELECT COUNT(*), COALESCE(SUM(len), 0), COALESCE(SUM(LENGTH(body)), 0) FROM entries")?;
    let (checkpoints, snapshot_bytes, roots) = sum(
        "SELECT COUNT(*), COALESCE(SUM(len), 0), COALESCE(SUM(LENGTH(roots)), 0) FROM checkpoints",
    )?;
    let (pages, page_size, free) = sum("SELECT (SELECT page_count FROM pragma_page_count),
                    (SELECT page_size FROM pragma_page_size),
                    (SELECT freelist_count FROM pragma_freelist_count)")?;
    Ok(StoreSizes {
        chunks,
        chunk_bytes,
        index_chunks,
        index_bytes,
        entries,
        entry_bytes,
        checkpoints,
        snapshot_bytes,
        row_bytes: entry_rows + roots,
        file_bytes: pages * page_size,
        free_bytes: free * page_size,
    })
}
