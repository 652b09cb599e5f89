//! The store: an SQLite file holding checkpoints (snapshots) and the journal since,
//! both kept as content-addressed chunks. This file is the handle, [`Store`], and its
//! API; the modules below do the work, and none of them knows the handle.

mod blob;
mod open;
mod recover;
mod rows;
mod stats;
mod verify;
mod write;

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use spool_core::{Journal, JournalEntry, Snapshot};
use spool_core::{JournalError, JournalSink};

use crate::StoreError;
use recover::{journal_from, snapshot_bytes};
use rows::{checkpoint_rows, count, read_head};
use write::Inner;

pub use open::{APPLICATION_ID, Durability, SCHEMA_VERSION, StoreOptions};
pub use stats::{CheckpointInfo, StoreSizes, WriteStats};
pub use write::INLINE_MAX;

/// The durable store: checkpoints and the journal since, in one SQLite file.
///
/// A store is a [`JournalSink`]: give it to `RuntimeBuilder::journal` (in
/// `spool-runtime`) and the runtime writes to it as it runs; after a crash,
/// [`Store::recover`] gives the journal to `RuntimeBuilder::recover`. Clones share one
/// connection, so a test or a tool can read a store the runtime writes to. One
/// connection at a time holds the file. A write that fails reaches the runtime as a
/// [`JournalError::Sink`] holding the [`StoreError`].
#[derive(Clone)]
pub struct Store {
    inner: Arc<Mutex<Inner>>,
    path: Arc<Path>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the store at `path`, creating it if there is no file, with the default
    /// [`StoreOptions`].
    ///
    /// # Errors
    /// [`StoreError::NotAStore`] for a file that is not a spool store,
    /// [`StoreError::NewerSchema`] and [`StoreError::OlderSchema`] for a store of
    /// another schema version, [`StoreError::Corrupt`] if a table or the head row is
    /// missing or damaged, [`StoreError::Locked`] if another connection holds it,
    /// [`StoreError::Sqlite`] if the file cannot be opened or created.
    pub fn open(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        Store::open_with(path, StoreOptions::default())
    }

    /// Opens the store at `path` with `options`, creating it if there is no file.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<Store, StoreError> {
        let path = path.as_ref();
        let (conn, head) = open::connect(path, &options)?;
        Ok(Store {
            inner: Arc::new(Mutex::new(Inner {
                conn,
                options,
                head,
                written: WriteStats::default(),
            })),
            path: Arc::from(path),
        })
    }

    /// The file the store is in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while the lock was held dropped its transaction, which rolled back.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts a new journal at `snapshot` (encoded): a checkpoint that drops every
    /// checkpoint and entry before it, whatever [`StoreOptions::keep_checkpoints`] says.
    /// What [`JournalSink::start`] does. Returns the checkpoint's id.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] if the write failed (nothing is changed then), or
    /// [`StoreError::Corrupt`] if a chunk to drop is damaged.
    pub fn start_journal(&self, snapshot: &[u8]) -> Result<u64, StoreError> {
        self.lock().checkpoint(snapshot, true)
    }

    /// Writes a checkpoint: `snapshot` (encoded) is the state after every entry
    /// appended so far. In the same transaction, drops the checkpoints beyond
    /// [`StoreOptions::keep_checkpoints`], the entries no kept checkpoint needs, and
    /// the chunks nothing refers to any more. What [`JournalSink::checkpoint`] does.
    /// Returns the checkpoint's id.
    ///
    /// # Errors
    /// As [`Store::start_journal`].
    pub fn write_checkpoint(&self, snapshot: &[u8]) -> Result<u64, StoreError> {
        self.lock().checkpoint(snapshot, false)
    }

    /// Appends one journal entry, durably (as [`Durability`] says) before returning.
    /// What [`JournalSink::record`] does. Returns the entry's sequence number.
    ///
    /// # Errors
    /// [`StoreError::Encode`] if the entry cannot be encoded, [`StoreError::Sqlite`] if
    /// the write failed (nothing is changed then).
    pub fn append(&self, entry: &JournalEntry) -> Result<u64, StoreError> {
        let bytes = entry
            .to_bytes()
            .map_err(|e| StoreError::Encode(e.to_string()))?;
        self.lock().append(&bytes)
    }

    /// The latest checkpoint's snapshot (as [`Journal::start`]) and every entry after
    /// it, in order: what `RuntimeBuilder::recover` (in `spool-runtime`) goes on from.
    /// `None` for a store with no checkpoint.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] naming what is damaged: a row that does not match its
    /// checksum, a chunk that does not match its hash or is missing, an entry or the
    /// latest checkpoint missing; [`StoreError::Entry`] for an entry that does not
    /// decode.
    pub fn recover(&self) -> Result<Option<Journal>, StoreError> {
        let mut inner = self.lock();
        let tx = inner.conn.transaction()?;
        let head = read_head(&tx)?;
        if head.checkpoint == 0 {
            return Ok(None);
        }
        journal_from(&tx, head.checkpoint, head).map(Some)
    }

    /// Like [`recover`](Store::recover), from the kept checkpoint `id` (see
    /// [`checkpoints`](Store::checkpoints)) rather than the latest: its snapshot and
    /// every entry after it.
    ///
    /// # Errors
    /// [`StoreError::NoCheckpoint`] if no checkpoint `id` is kept; otherwise as
    /// [`recover`](Store::recover).
    pub fn recover_from(&self, id: u64) -> Result<Journal, StoreError> {
        let mut inner = self.lock();
        let tx = inner.conn.transaction()?;
        let head = read_head(&tx)?;
        if id == 0 || id > head.checkpoint {
            return Err(StoreError::NoCheckpoint(id));
        }
        journal_from(&tx, id, head)
    }

    /// The latest checkpoint's snapshot, decoded (for `spool inspect`: its
    /// [`rows`](Snapshot::rows) need no registry). `None` for a store with no checkpoint.
    ///
    /// # Errors
    /// As [`recover`](Store::recover), and [`StoreError::Snapshot`] if the bytes are
    /// not a snapshot this build reads.
    pub fn latest_snapshot(&self) -> Result<Option<Snapshot>, StoreError> {
        let mut inner = self.lock();
        let tx = inner.conn.transaction()?;
        let head = read_head(&tx)?;
        if head.checkpoint == 0 {
            return Ok(None);
        }
        let bytes = snapshot_bytes(&tx, head.checkpoint, head)?;
        Snapshot::decode(&bytes)
            .map(Some)
            .map_err(StoreError::Snapshot)
    }

    /// The checkpoints kept, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] if the read failed, [`StoreError::Corrupt`] for a row that
    /// does not match its checksum or does not hang together.
    pub fn checkpoints(&self) -> Result<Vec<CheckpointInfo>, StoreError> {
        let inner = self.lock();
        let head = read_head(&inner.conn)?;
        checkpoint_rows(&inner.conn, head)?
            .into_iter()
            .map(|row| {
                let after: i64 = inner.conn.query_row(
                    "SELECT COUNT(*) FROM entries WHERE seq > ?1",
                    [row.last_seq as i64],
                    |r| r.get(0),
                )?;
                Ok(CheckpointInfo {
                    id: row.id,
                    after_entry: row.last_seq,
                    snapshot_bytes: row.len,
                    entries_after: count(after, "a count")?,
                })
            })
            .collect()
    }

    /// What the store holds now: chunks, entries, checkpoints, and the file.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] if the read failed.
    pub fn sizes(&self) -> Result<StoreSizes, StoreError> {
        let inner = self.lock();
        stats::sizes(&inner.conn)
    }

    /// What this handle's store was given and wrote since it was opened.
    pub fn write_stats(&self) -> WriteStats {
        self.lock().written.clone()
    }

    /// Checks the whole store: SQLite's own check of the file, every chunk against its
    /// hash, every reference count against the references there are, every hash named
    /// present, no entry missing after the oldest checkpoint, and every kept
    /// checkpoint's journal readable as [`recover_from`](Store::recover_from) reads
    /// it. Reads everything: for tests and tools, not for every open.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] naming the first problem found, or as
    /// [`recover`](Store::recover).
    pub fn verify(&self) -> Result<(), StoreError> {
        let inner = self.lock();
        verify::verify(&inner.conn)
    }
}

impl JournalSink for Store {
    fn start(&mut self, snapshot: &[u8]) -> Result<(), JournalError> {
        self.start_journal(snapshot)
            .map(drop)
            .map_err(JournalError::sink)
    }

    fn record(&mut self, entry: &JournalEntry) -> Result<(), JournalError> {
        self.append(entry).map(drop).map_err(JournalError::sink)
    }

    fn checkpoint(&mut self, snapshot: &[u8]) -> Result<(), JournalError> {
        self.write_checkpoint(snapshot)
            .map(drop)
            .map_err(JournalError::sink)
    }
}
