//! What a store holds ([`StoreSizes`]), what it wrote since it was opened
//! ([`WriteStats`]), and the checkpoints it keeps ([`CheckpointInfo`]): the same
//! figures on every backend (a backend without chunks or a file says 0 for them).

/// What a store holds now ([`DurableStore::sizes`](crate::DurableStore::sizes)).
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
    /// of chunked entries and checkpoints (on a backend without chunks, every row's
    /// bytes).
    pub row_bytes: u64,
    /// What the store takes on disk: on SQLite the database file (pages × page size,
    /// the write-ahead log aside), on PostgreSQL the store's tables with their indexes
    /// and TOAST.
    pub file_bytes: u64,
    /// Of which free pages, waiting to be reused or vacuumed (SQLite; 0 on PostgreSQL,
    /// which reuses dead rows' space by its own vacuum).
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
/// ([`DurableStore::write_stats`](crate::DurableStore::write_stats)).
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

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &WriteStats) {
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

/// A checkpoint the store keeps ([`DurableStore::checkpoints`](crate::DurableStore::checkpoints)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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

/// A segment of history the store keeps ([`DurableStore::segments`](crate::DurableStore::segments)):
/// a checkpoint and the journal entries after it, up to the next checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SegmentInfo {
    /// Its checkpoint's id: what [`DurableStore::recover_from`](crate::DurableStore::recover_from)
    /// reads the history from.
    pub checkpoint: u64,
    /// The wall time the store wrote its checkpoint.
    pub at: std::time::SystemTime,
    /// The sequence number of its first journal entry.
    pub first_entry: u64,
    /// The sequence number of its last journal entry: `first_entry - 1` when it has
    /// none.
    pub last_entry: u64,
    /// What its checkpoint and entries take, encoded (before chunks are shared).
    pub bytes: u64,
}

impl SegmentInfo {
    /// A segment: its checkpoint, when that was written, its entries' first and last
    /// sequence numbers, and its bytes.
    pub fn new(
        checkpoint: u64,
        at: std::time::SystemTime,
        first_entry: u64,
        last_entry: u64,
        bytes: u64,
    ) -> SegmentInfo {
        SegmentInfo {
            checkpoint,
            at,
            first_entry,
            last_entry,
            bytes,
        }
    }

    /// How many journal entries it holds.
    pub fn entries(&self) -> u64 {
        (self.last_entry + 1).saturating_sub(self.first_entry)
    }
}
