//! The store: an SQLite file holding checkpoints (snapshots) and the journal since,
//! both kept as content-addressed chunks. This file is the handle, [`Store`], and its
//! API; the modules below do the work, and none of them knows the handle.

mod blob;
mod durable;
mod file;
mod history;
mod maker;
mod open;
mod recover;
mod rows;
mod stats;
mod task_rows;
mod verify;
mod write;
mod writer;

use std::fmt;
use std::path::Path;
use std::sync::{Arc, MutexGuard};

#[cfg(doc)]
use spool_core::{DurableNotifier, JournalError, JournalSink};
use spool_core::{Journal, JournalEntry, Snapshot};

use crate::StoreError;
use recover::{journal_from, snapshot_bytes};
use rows::{checkpoint_rows, count, read_head};
use spool_durable::{
    CheckpointInfo, CrashCounter, Op, SegmentInfo, SinkGroup, StoreSizes, WriteStats, WriterThread,
};
use write::Inner;
use writer::{Locked, Shared};

pub use open::{APPLICATION_ID, DEFAULT_QUEUE_GROUPS, Durability, SCHEMA_VERSION, StoreOptions};
pub use task_rows::ROW_INLINE_MAX;
pub use write::INLINE_MAX;

/// The durable store: checkpoints and the journal since, in one SQLite file.
///
/// A store is a [`JournalSink`]: give it to `RuntimeBuilder::journal` (in
/// `spool-runtime`) and the runtime writes to it as it runs; after a crash,
/// [`Store::recover`] gives the journal to `RuntimeBuilder::recover`. Clones share one
/// connection, so a test or a tool can read a store the runtime writes to (reads see
/// what is committed). One connection at a time holds the file. A write that fails
/// reaches the runtime as a [`JournalError::Sink`] holding the [`StoreError`].
///
/// Writes run on the store's writer thread: encoding, checksums and SQLite. As a
/// sink, a store buffers what is recorded and hands each group (a loop turn) to the
/// writer at [`JournalSink::commit`], through a bounded queue
/// ([`StoreOptions::queue_groups`]); the writer commits it — with the groups waiting
/// behind it, in one transaction — and tells the runtime through its
/// [`DurableNotifier`]. The store's own methods ([`append`](Store::append),
/// [`write_checkpoint`](Store::write_checkpoint)...) wait for their commit. The last
/// clone dropped waits for the writer to commit what was queued and closes the file;
/// what a sink recorded but never committed is dropped (nothing was let out for it).
pub struct Store {
    shared: Arc<Shared>,
    /// The lock file, held (locked) while any clone lives; after `shared`, so that it
    /// is let go only once the writer has committed and closed the file. `None` for a
    /// read-only handle, which takes no lock.
    _lock: Option<Arc<std::fs::File>>,
    path: Arc<Path>,
    /// What this handle, as a sink, recorded since its last commit.
    sink: SinkGroup,
}

/// A clone shares the file, the connection and the writer; as a sink it starts with
/// nothing recorded and no notifier.
impl Clone for Store {
    fn clone(&self) -> Store {
        Store {
            shared: Arc::clone(&self.shared),
            _lock: self._lock.clone(),
            path: Arc::clone(&self.path),
            sink: SinkGroup::default(),
        }
    }
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
    /// missing or damaged, [`StoreError::InUse`] if another process (or another open
    /// handle) holds its lock file, [`StoreError::Locked`] if another connection holds
    /// the database, [`StoreError::Sqlite`] if the file cannot be opened or created.
    ///
    /// The lock is the file `PATH.lock` beside the store, locked exclusively (an
    /// advisory lock the operating system lets go when the process dies, however it
    /// dies: a stale lock file locks nothing).
    pub fn open(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        Store::open_with(path, StoreOptions::default())
    }

    /// Opens the store at `path` with `options`, creating it if there is no file.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<Store, StoreError> {
        let path = path.as_ref();
        let lock = open::lock(path)?;
        let (conn, head) = open::connect(path, &options)?;
        let tail_bytes = history::tail_bytes(&conn, head)?;
        let groups = options.queue_groups;
        let inner = Inner {
            conn,
            tail_bytes,
            kept: None,
            crash: CrashCounter::new(options.crash_at),
            options,
            head,
            written: WriteStats::default(),
            file: file::Watch::new(path),
            read_only: false,
        };
        Ok(Store {
            shared: Arc::new(Shared::start(inner, groups)?),
            _lock: Some(Arc::new(lock)),
            path: Arc::from(path),
            sink: SinkGroup::default(),
        })
    }

    /// Opens the store at `path` to read only: it takes no lock, so it reads a store
    /// another process (or another handle) writes — every read sees what the writer
    /// committed last — and never creates, changes or writes the file. Its writes
    /// ([`append`](Store::append), [`write_checkpoint`](Store::write_checkpoint), a
    /// sink's commit, [`claim_maker`](Store::claim_maker)) fail with
    /// [`StoreError::ReadOnly`]. What `spool history` and tools read history with.
    ///
    /// # Errors
    /// [`StoreError::NotAStore`] for a missing or empty file or one that is not a
    /// spool store, [`StoreError::NewerSchema`] and [`StoreError::OlderSchema`] for a
    /// store of another schema version, [`StoreError::Corrupt`] if a table or the head
    /// row is missing or damaged, [`StoreError::Sqlite`] if the file cannot be opened.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        let path = path.as_ref();
        let (conn, head) = open::connect_read_only(path)?;
        let options = StoreOptions::default();
        let groups = options.queue_groups;
        let inner = Inner {
            conn,
            tail_bytes: 0,
            kept: None,
            crash: CrashCounter::new(None),
            options,
            head,
            written: WriteStats::default(),
            file: file::Watch::new(path),
            read_only: true,
        };
        Ok(Store {
            shared: Arc::new(Shared::start(inner, groups)?),
            _lock: None,
            path: Arc::from(path),
            sink: SinkGroup::default(),
        })
    }

    /// The file the store is in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.shared.lock()
    }

    /// Has the writer write `op` after everything queued before it, and waits for its
    /// number.
    fn call(&self, op: Op) -> Result<u64, StoreError> {
        self.shared.writer.call_one(op)
    }

    /// As a sink: its group, and the writer that commits it (see
    /// [`spool_durable::journal_sink!`]).
    fn sink_and_writer(&mut self) -> (&mut SinkGroup, Result<&WriterThread<Locked>, StoreError>) {
        (&mut self.sink, Ok(&self.shared.writer))
    }

    /// Starts a new journal at `snapshot` (encoded): a checkpoint after which the
    /// journal goes on from `snapshot`. Without history it drops every checkpoint and
    /// entry before it, whatever [`StoreOptions::keep_checkpoints`] says; with history
    /// ([`StoreOptions::history`]) the segments before it stay, as retention says.
    /// What [`JournalSink::start`] does. Returns the checkpoint's id.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] if the write failed (nothing is changed then), or
    /// [`StoreError::Corrupt`] if a chunk to drop is damaged.
    pub fn start_journal(&self, snapshot: &[u8]) -> Result<u64, StoreError> {
        self.call(Op::Checkpoint {
            snapshot: snapshot.to_vec(),
            start: true,
        })
    }

    /// Writes a checkpoint: `snapshot` (encoded) is the state after every entry
    /// appended so far. In the same transaction, drops the checkpoints neither
    /// [`StoreOptions::keep_checkpoints`] nor [`StoreOptions::history`] keeps (oldest
    /// first, never the latest), the entries no kept checkpoint needs, and the chunks
    /// nothing refers to any more. What [`JournalSink::checkpoint`] does.
    /// Returns the checkpoint's id.
    ///
    /// # Errors
    /// As [`Store::start_journal`].
    pub fn write_checkpoint(&self, snapshot: &[u8]) -> Result<u64, StoreError> {
        self.call(Op::Checkpoint {
            snapshot: snapshot.to_vec(),
            start: false,
        })
    }

    /// Appends one journal entry in a transaction of its own, durably (as
    /// [`Durability`] says) before returning. (A sink's [`JournalSink::record`] buffers
    /// instead, and its [`JournalSink::commit`] writes the group at once.) Returns the
    /// entry's sequence number.
    ///
    /// # Errors
    /// [`StoreError::Encode`] if the entry cannot be encoded, [`StoreError::Sqlite`] if
    /// the write failed (nothing is changed then).
    pub fn append(&self, entry: &JournalEntry) -> Result<u64, StoreError> {
        self.call(Op::Entry(entry.clone()))
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
                let mut info = CheckpointInfo::default();
                info.id = row.id;
                info.after_entry = row.last_seq;
                info.snapshot_bytes = row.len;
                info.entries_after = count(after, "a count")?;
                Ok(info)
            })
            .collect()
    }

    /// The segments of history kept, oldest first: each kept checkpoint, the wall time
    /// it was written, and its entries up to the next checkpoint (the latest's up to the
    /// last entry). [`recover_from`](Store::recover_from) reads the history from any of
    /// them to the last entry.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] if the read failed, [`StoreError::Corrupt`] for a row that
    /// does not match its checksum or does not hang together.
    pub fn segments(&self) -> Result<Vec<SegmentInfo>, StoreError> {
        let mut inner = self.lock();
        // One read: the head, the checkpoints and the latest entries agree.
        let tx = inner.conn.transaction()?;
        let head = read_head(&tx)?;
        let tail = history::tail_bytes(&tx, head)?;
        history::segments(&tx, head, tail)
    }

    /// What the store holds now: chunks, entries, checkpoints, and the file.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] if the read failed.
    pub fn sizes(&self) -> Result<StoreSizes, StoreError> {
        let inner = self.lock();
        stats::sizes(&inner.conn)
    }

    /// The name of what made the store, as recorded by [`claim_maker`](Store::claim_maker);
    /// `None` for a store no maker claimed (a new one, or one made before the record
    /// existed). Reading it writes nothing.
    ///
    /// The maker is a plain name the program that makes a store chooses (`spool demo`
    /// records `demo`, `spool run` and `spool serve` record `run`), so that a program
    /// given a store another made can refuse it instead of running what it holds.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] if the read failed.
    pub fn maker(&self) -> Result<Option<String>, StoreError> {
        let inner = self.lock();
        maker::maker(&inner.conn)
    }

    /// Records `maker` as what made the store, unless a maker is recorded already:
    /// returns the maker recorded after the call, `maker` itself or the one found
    /// (which is left as it is). The record is durable when this returns; it is kept in
    /// the store's `meta` table, created by the first record (a store made before the
    /// table existed opens without it).
    ///
    /// # Errors
    /// [`StoreError::Unsupported`] for an empty (or blank) name, [`StoreError::FileGone`]
    /// if the store's path no longer names its file, [`StoreError::Sqlite`] if the write
    /// failed (nothing is changed then).
    pub fn claim_maker(&self, maker: &str) -> Result<String, StoreError> {
        let mut inner = self.lock();
        maker::claim(&mut inner, maker)
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

spool_durable::journal_sink!(Store);
