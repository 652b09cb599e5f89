//! The store: an SQLite file holding checkpoints (snapshots) and the journal since,
//! both kept as content-addressed chunks.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::types::ValueRef;
use rusqlite::{
    Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior, params,
};
use spool_core::{Journal, JournalEntry, Snapshot};
use spool_core::{JournalError, JournalSink};

use crate::StoreError;
use crate::chunk::{ChunkKind, HASH_LEN, Hash, Tree};
use crate::sum;

/// The schema version this build writes and reads (`PRAGMA user_version`).
///
/// Version 2 added a checksum to every entry and checkpoint row and the head row;
/// a version-1 store is refused with [`StoreError::OlderSchema`].
pub const SCHEMA_VERSION: i64 = 2;

/// What marks an SQLite file as a spool store (`PRAGMA application_id`, "SPOL").
pub const APPLICATION_ID: i64 = 0x5350_4f4c;

/// Journal entries up to this many bytes are kept whole in their row; larger ones are
/// chunked like snapshots.
pub const INLINE_MAX: usize = 256;

/// The largest buffer a read reserves up front from a length stored on disk.
const RESERVE_MAX: u64 = 64 << 20;

const SCHEMA: &str = "
CREATE TABLE chunks (
    id INTEGER PRIMARY KEY,
    hash BLOB NOT NULL UNIQUE,
    kind INTEGER NOT NULL,
    refs INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE checkpoints (
    id INTEGER PRIMARY KEY,
    last_seq INTEGER NOT NULL,
    len INTEGER NOT NULL,
    roots BLOB NOT NULL,
    sum INTEGER NOT NULL
);
CREATE TABLE entries (
    seq INTEGER PRIMARY KEY,
    len INTEGER NOT NULL,
    chunked INTEGER NOT NULL,
    body BLOB NOT NULL,
    sum INTEGER NOT NULL
);
CREATE TABLE head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    last_seq INTEGER NOT NULL,
    checkpoint INTEGER NOT NULL,
    sum INTEGER NOT NULL
);
";

/// The tables of a store.
const TABLES: [&str; 4] = ["chunks", "checkpoints", "entries", "head"];

/// How much a commit survives.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// A commit survives the process dying at any moment (a panic, an abort, a
    /// SIGKILL, the OOM killer): SQLite's WAL with `synchronous = NORMAL`. The commit
    /// is in the operating system's hands when the call returns, not yet on the disk;
    /// a power loss or kernel crash may lose the last commits (never the file's
    /// consistency). No `fsync` per entry, so a record costs microseconds.
    #[default]
    Process,
    /// A commit survives power loss too: `synchronous = FULL`, an `fsync` of the WAL
    /// on every commit (milliseconds on most disks).
    PowerLoss,
}

/// How a store is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreOptions {
    keep_checkpoints: usize,
    durability: Durability,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            keep_checkpoints: 2,
            durability: Durability::Process,
        }
    }
}

impl StoreOptions {
    /// The defaults: keep the last 2 checkpoints, [`Durability::Process`].
    pub fn new() -> StoreOptions {
        StoreOptions::default()
    }

    /// How many checkpoints to keep (at least 1), with the journal entries after the
    /// oldest of them: older ones are dropped, and the chunks only they used, in the
    /// transaction that writes a new one.
    #[must_use]
    pub fn keep_checkpoints(mut self, count: usize) -> StoreOptions {
        self.keep_checkpoints = count.max(1);
        self
    }

    /// How much a commit survives.
    #[must_use]
    pub fn durability(mut self, durability: Durability) -> StoreOptions {
        self.durability = durability;
        self
    }
}

/// What a store holds now ([`Store::sizes`]).
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

/// What a store was given and what it wrote, since it was opened ([`Store::write_stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteStats {
    /// Journal entries appended.
    pub entries: u64,
    /// Their encoded length, summed.
    pub entry_bytes: u64,
    /// Checkpoints written (the journal's start included).
    pub checkpoints: u64,
    /// Their snapshots' length, summed: what writing each whole would have written.
    pub snapshot_bytes: u64,
    /// Chunks that were new (the others were already stored and only referenced).
    pub new_chunks: u64,
    /// Their bytes.
    pub new_chunk_bytes: u64,
    /// Bytes written into rows: small entries whole, root hashes.
    pub row_bytes: u64,
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

    fn add(&mut self, other: &WriteStats) {
        self.entries += other.entries;
        self.entry_bytes += other.entry_bytes;
        self.checkpoints += other.checkpoints;
        self.snapshot_bytes += other.snapshot_bytes;
        self.new_chunks += other.new_chunks;
        self.new_chunk_bytes += other.new_chunk_bytes;
        self.row_bytes += other.row_bytes;
    }
}

/// A checkpoint the store keeps ([`Store::checkpoints`]).
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

struct Inner {
    conn: Connection,
    options: StoreOptions,
    /// What the head row says, as of the last commit.
    head: Head,
    written: WriteStats,
}

/// The head row: where the journal ends. Every write updates it in its transaction,
/// so a recovery can tell a journal whose last entries or latest checkpoint were lost
/// from one that ends there.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
struct Head {
    /// The sequence number of the last entry committed (0: none yet).
    last_seq: u64,
    /// The id of the latest checkpoint (0: none yet).
    checkpoint: u64,
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
        let conn = Connection::open(path)?;
        let not_a_store = |reason: String| StoreError::NotAStore {
            path: path.to_path_buf(),
            reason,
        };
        conn.busy_timeout(Duration::from_millis(200))?;
        // One connection holds the file from open to close: two writers would
        // interleave two journals. It also keeps the WAL index in the process's memory.
        conn.execute_batch("PRAGMA locking_mode = EXCLUSIVE")?;
        let header = conn.query_row(
            "SELECT (SELECT application_id FROM pragma_application_id),
                    (SELECT user_version FROM pragma_user_version),
                    (SELECT COUNT(*) FROM sqlite_schema)",
            [],
            |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?, row.get(2)?)),
        );
        let (application_id, version, objects): (i64, i64, i64) = match header {
            Ok(header) => header,
            Err(e) if e.sqlite_error_code() == Some(ErrorCode::NotADatabase) => {
                return Err(not_a_store("not an SQLite database".to_owned()));
            }
            Err(e) => return Err(e.into()),
        };
        let fresh = objects == 0 && application_id == 0 && version == 0;
        if fresh {
            // Before any table: freed pages can then be given back to the file system.
            conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL")?;
        } else if application_id != APPLICATION_ID {
            return Err(not_a_store(format!(
                "an SQLite database of another program (application_id {application_id:#x})"
            )));
        } else if version > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                found: version,
                supported: SCHEMA_VERSION,
            });
        } else if (1..SCHEMA_VERSION).contains(&version) {
            return Err(StoreError::OlderSchema {
                found: version,
                supported: SCHEMA_VERSION,
            });
        } else if version < SCHEMA_VERSION {
            return Err(not_a_store(format!(
                "schema version {version}, which no spool wrote"
            )));
        }
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Unsupported(format!(
                "SQLite refused write-ahead logging here (journal mode `{mode}`)"
            )));
        }
        let synchronous = match options.durability {
            Durability::Process => "NORMAL",
            Durability::PowerLoss => "FULL",
        };
        conn.execute_batch(&format!(
            "PRAGMA synchronous = {synchronous}; PRAGMA journal_size_limit = 4194304;
             PRAGMA cell_size_check = ON;"
        ))?;
        let mut conn = conn;
        {
            // Takes the file's lock now (and, for a new file, creates the schema), so a
            // second opener is refused here rather than at its first write.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Exclusive)?;
            if fresh {
                tx.execute_batch(SCHEMA)?;
                tx.execute(
                    "INSERT INTO head (id, last_seq, checkpoint, sum) VALUES (1, 0, 0, ?1)",
                    [sum::head(0, 0)],
                )?;
                tx.execute_batch(&format!(
                    "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};"
                ))?;
            }
            tx.commit()?;
        }
        for table in TABLES {
            let found: i64 = conn.query_row(
                "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                [table],
                |row| row.get(0),
            )?;
            if found != 1 {
                return Err(StoreError::Corrupt(format!(
                    "the table `{table}` is missing"
                )));
            }
        }
        let head = read_head(&conn)?;
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
        let conn = &inner.conn;
        let sum = |sql: &str| -> Result<(u64, u64, u64), StoreError> {
            let (a, b, c): (i64, i64, i64) =
                conn.query_row(sql, [], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
            Ok((count(a, "a sum")?, count(b, "a sum")?, count(c, "a sum")?))
        };
        let (chunks, chunk_bytes, _) =
            sum("SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0), 0 FROM chunks")?;
        let (index_chunks, index_bytes, _) =
            sum("SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0), 0 FROM chunks WHERE kind = 1")?;
        let (entries, entry_bytes, entry_rows) = sum(
            "SELECT COUNT(*), COALESCE(SUM(len), 0), COALESCE(SUM(LENGTH(body)), 0) FROM entries",
        )?;
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
        verify(&inner.conn)
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

impl Inner {
    fn append(&mut self, bytes: &[u8]) -> Result<u64, StoreError> {
        let seq = self.head.last_seq + 1;
        let len = bytes.len() as u64;
        let mut written = WriteStats {
            entries: 1,
            entry_bytes: len,
            ..WriteStats::default()
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let (chunked, body) = if bytes.len() <= INLINE_MAX {
            (false, bytes.to_vec())
        } else {
            (true, put_blob(&tx, bytes, &mut written)?)
        };
        written.row_bytes += body.len() as u64;
        let check = sum::entry(seq, len, u64::from(chunked), &body);
        tx.prepare_cached(
            "INSERT INTO entries (seq, len, chunked, body, sum) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![seq as i64, len as i64, chunked, body, check])?;
        let head = Head {
            last_seq: seq,
            ..self.head
        };
        write_head(&tx, head)?;
        tx.commit()?;
        self.head = head;
        self.written.add(&written);
        Ok(seq)
    }

    fn checkpoint(&mut self, snapshot: &[u8], start: bool) -> Result<u64, StoreError> {
        let mut written = WriteStats {
            checkpoints: 1,
            snapshot_bytes: snapshot.len() as u64,
            ..WriteStats::default()
        };
        let keep = if start {
            1
        } else {
            self.options.keep_checkpoints
        };
        let head = Head {
            last_seq: self.head.last_seq,
            checkpoint: self.head.checkpoint + 1,
        };
        let id = head.checkpoint;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        // The new checkpoint's chunks are referenced before the old ones are released,
        // so what they share is never deleted and written again.
        let roots = put_blob(&tx, snapshot, &mut written)?;
        written.row_bytes += roots.len() as u64;
        let len = snapshot.len() as u64;
        let check = sum::checkpoint(id, head.last_seq, len, &roots);
        tx.prepare_cached(
            "INSERT INTO checkpoints (id, last_seq, len, roots, sum) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![
            id as i64,
            head.last_seq as i64,
            len as i64,
            roots,
            check
        ])?;
        // Rows are checked before their roots are released: a damaged row's roots
        // could name chunks others still use.
        let rows = checkpoint_rows(&tx, head)?;
        let kept_from = rows.len().saturating_sub(keep);
        for old in &rows[..kept_from] {
            release_all(&tx, &old.roots)?;
            tx.prepare_cached("DELETE FROM checkpoints WHERE id = ?1")?
                .execute([old.id as i64])?;
        }
        let oldest = rows[kept_from..]
            .iter()
            .map(|row| row.last_seq)
            .min()
            .unwrap_or(head.last_seq);
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
            release_all(&tx, &entry.body)?;
        }
        tx.prepare_cached("DELETE FROM entries WHERE seq <= ?1")?
            .execute([oldest as i64])?;
        write_head(&tx, head)?;
        // Give freed pages back once they are a quarter of the file.
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
        tx.commit()?;
        self.head = head;
        self.written.add(&written);
        Ok(id)
    }
}

/// The head row, checked against its checksum.
fn read_head(conn: &Connection) -> Result<Head, StoreError> {
    let row: Option<(Raw, Raw, Raw)> = conn
        .query_row(
            "SELECT last_seq, checkpoint, sum FROM head WHERE id = 1",
            [],
            |row| Ok((Raw::read(row, 0)?, Raw::read(row, 1)?, Raw::read(row, 2)?)),
        )
        .optional()?;
    let Some((last_seq, checkpoint, check)) = row else {
        return Err(StoreError::Corrupt("the head row is missing".to_owned()));
    };
    let what = || "the head row".to_owned();
    let (last_seq, checkpoint) = (
        int(last_seq, "last_seq", what)?,
        int(checkpoint, "checkpoint", what)?,
    );
    let check = int(check, "sum", what)?;
    let head = Head {
        last_seq: last_seq as u64,
        checkpoint: checkpoint as u64,
    };
    if sum::head(head.last_seq, head.checkpoint) != check {
        return Err(StoreError::Corrupt(
            "the head row does not match its checksum".to_owned(),
        ));
    }
    if last_seq < 0 || checkpoint < 0 {
        return Err(StoreError::Corrupt(format!(
            "the head row holds a negative number ({last_seq}, {checkpoint})"
        )));
    }
    Ok(head)
}

/// Writes the head row, with its checksum.
fn write_head(tx: &Transaction<'_>, head: Head) -> Result<(), StoreError> {
    let changed = tx
        .prepare_cached("UPDATE head SET last_seq = ?1, checkpoint = ?2, sum = ?3 WHERE id = 1")?
        .execute(params![
            head.last_seq as i64,
            head.checkpoint as i64,
            sum::head(head.last_seq, head.checkpoint)
        ])?;
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::Corrupt("the head row is missing".to_owned()))
    }
}

/// A journal entry's row, checked against its checksum.
#[derive(Debug)]
struct EntryRow {
    seq: u64,
    /// The entry's encoded length.
    len: u64,
    /// Whether `body` holds the roots of the entry's chunks rather than the entry.
    chunked: bool,
    body: Vec<u8>,
}

impl EntryRow {
    /// The row `(seq, len, chunked, body, sum)` as read, if it matches its checksum and
    /// its values make sense.
    fn checked((seq, len, chunked, body, check): RawRow) -> Result<EntryRow, StoreError> {
        let what = || format!("journal entry {seq}");
        let (len, chunked) = (int(len, "len", what)?, int(chunked, "chunked", what)?);
        let (body, check) = (blob(body, "body", what)?, int(check, "sum", what)?);
        // The values as written (a negative one was not), so any change shows.
        if sum::entry(seq as u64, len as u64, chunked as u64, &body) != check {
            return Err(StoreError::Corrupt(format!(
                "journal entry {seq} does not match its checksum"
            )));
        }
        let seq = count(seq, "an entry's sequence number")?;
        let len = count(len, "an entry's length")?;
        let chunked = match chunked {
            0 => false,
            1 => true,
            other => {
                return Err(StoreError::Corrupt(format!(
                    "journal entry {seq} has the chunked flag {other}"
                )));
            }
        };
        Ok(EntryRow {
            seq,
            len,
            chunked,
            body,
        })
    }
}

/// A checkpoint's row, checked against its checksum.
#[derive(Debug)]
struct CheckpointRow {
    id: u64,
    /// The sequence number of the last entry before it.
    last_seq: u64,
    /// The snapshot's length.
    len: u64,
    /// The snapshot's root hashes.
    roots: Vec<u8>,
}

impl CheckpointRow {
    /// The row `(id, last_seq, len, roots, sum)` as read, if it matches its checksum
    /// and agrees with the head row.
    fn checked(
        (id, last_seq, len, roots, check): RawRow,
        head: Head,
    ) -> Result<CheckpointRow, StoreError> {
        let what = || format!("checkpoint {id}");
        let (last_seq, len) = (int(last_seq, "last_seq", what)?, int(len, "len", what)?);
        let (roots, check) = (blob(roots, "roots", what)?, int(check, "sum", what)?);
        if sum::checkpoint(id as u64, last_seq as u64, len as u64, &roots) != check {
            return Err(StoreError::Corrupt(format!(
                "checkpoint {id} does not match its checksum"
            )));
        }
        let row = CheckpointRow {
            id: count(id, "a checkpoint id")?,
            last_seq: count(last_seq, "a checkpoint's last entry")?,
            len: count(len, "a snapshot's length")?,
            roots,
        };
        if row.id > head.checkpoint || row.last_seq > head.last_seq {
            return Err(StoreError::Corrupt(format!(
                "checkpoint {} (after entry {}) is past the head row (checkpoint {}, entry {})",
                row.id, row.last_seq, head.checkpoint, head.last_seq
            )));
        }
        Ok(row)
    }
}

/// A column's value as read, whatever type the file says: a damaged record header
/// can change a column's type (and text need not be UTF-8, so it is never decoded).
#[derive(Debug)]
enum Raw {
    Integer(i64),
    Blob(Vec<u8>),
    /// Any other type, by name.
    Other(&'static str),
}

impl Raw {
    /// Column `index` of `row`.
    fn read(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<Raw> {
        Ok(match row.get_ref(index)? {
            ValueRef::Integer(n) => Raw::Integer(n),
            ValueRef::Blob(bytes) => Raw::Blob(bytes.to_vec()),
            ValueRef::Null => Raw::Other("null"),
            ValueRef::Real(_) => Raw::Other("a real"),
            ValueRef::Text(_) => Raw::Other("text"),
        })
    }

    fn type_name(&self) -> &'static str {
        match self {
            Raw::Integer(_) => "an integer",
            Raw::Blob(_) => "a blob",
            Raw::Other(name) => name,
        }
    }
}

/// A row as read: its key (a rowid, always an integer) and four columns.
type RawRow = (i64, Raw, Raw, Raw, Raw);

/// A row of four columns after its key, as read.
fn raw_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok((
        row.get(0)?,
        Raw::read(row, 1)?,
        Raw::read(row, 2)?,
        Raw::read(row, 3)?,
        Raw::read(row, 4)?,
    ))
}

/// Column `column` of the row `what` names, which must be an integer.
fn int(value: Raw, column: &str, what: impl Fn() -> String) -> Result<i64, StoreError> {
    match value {
        Raw::Integer(n) => Ok(n),
        other => Err(StoreError::Corrupt(format!(
            "{}: `{column}` holds {}, not an integer",
            what(),
            other.type_name()
        ))),
    }
}

/// Column `column` of the row `what` names, which must be a blob.
fn blob(value: Raw, column: &str, what: impl Fn() -> String) -> Result<Vec<u8>, StoreError> {
    match value {
        Raw::Blob(bytes) => Ok(bytes),
        other => Err(StoreError::Corrupt(format!(
            "{}: `{column}` holds {}, not a blob",
            what(),
            other.type_name()
        ))),
    }
}

/// Every checkpoint row, oldest first, each checked.
fn checkpoint_rows(conn: &Connection, head: Head) -> Result<Vec<CheckpointRow>, StoreError> {
    let mut stmt =
        conn.prepare_cached("SELECT id, last_seq, len, roots, sum FROM checkpoints ORDER BY id")?;
    let rows = stmt.query_map([], raw_row)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(CheckpointRow::checked(row?, head)?);
    }
    Ok(out)
}

/// Checkpoint `id`'s row, checked; `None` if there is none.
fn checkpoint_row(
    conn: &Connection,
    id: u64,
    head: Head,
) -> Result<Option<CheckpointRow>, StoreError> {
    let row = conn
        .prepare_cached("SELECT id, last_seq, len, roots, sum FROM checkpoints WHERE id = ?1")?
        .query_row([id as i64], raw_row)
        .optional()?;
    row.map(|row| CheckpointRow::checked(row, head)).transpose()
}

/// Checkpoint `id`'s row, which the head row says exists.
fn kept_checkpoint(conn: &Connection, id: u64, head: Head) -> Result<CheckpointRow, StoreError> {
    match checkpoint_row(conn, id, head)? {
        Some(row) => Ok(row),
        None if id == head.checkpoint => Err(StoreError::Corrupt(format!(
            "checkpoint {id}, the latest, is missing"
        ))),
        None => Err(StoreError::NoCheckpoint(id)),
    }
}

/// Stores `data` as chunks (each new one written, each known one referenced once
/// more) and returns its root hashes, concatenated.
fn put_blob(
    tx: &Transaction<'_>,
    data: &[u8],
    written: &mut WriteStats,
) -> Result<Vec<u8>, StoreError> {
    let tree = Tree::build(data);
    let top = tree.top();
    for index in 0..tree.levels[top].len() {
        put(tx, &tree, top, index, written)?;
    }
    Ok(tree.roots())
}

/// References chunk `index` of `level` once more, writing it (and, below it, its
/// children) if it is new.
fn put(
    tx: &Transaction<'_>,
    tree: &Tree<'_>,
    level: usize,
    index: usize,
    written: &mut WriteStats,
) -> Result<(), StoreError> {
    let node = &tree.levels[level][index];
    let known = tx
        .prepare_cached("UPDATE chunks SET refs = refs + 1 WHERE hash = ?1")?
        .execute([&node.hash[..]])?;
    if known > 0 {
        return Ok(());
    }
    let (kind, bytes) = if level == 0 {
        (ChunkKind::Data, tree.data[node.span.clone()].to_vec())
    } else {
        (ChunkKind::Index, tree.bytes(level, index))
    };
    written.new_chunks += 1;
    written.new_chunk_bytes += bytes.len() as u64;
    tx.prepare_cached("INSERT INTO chunks (hash, kind, refs, data) VALUES (?1, ?2, 1, ?3)")?
        .execute(params![&node.hash[..], kind.code(), bytes])?;
    if level > 0 {
        for child in node.span.clone() {
            put(tx, tree, level - 1, child, written)?;
        }
    }
    Ok(())
}

/// Drops one reference to each of `roots` (hashes, concatenated).
fn release_all(tx: &Transaction<'_>, roots: &[u8]) -> Result<(), StoreError> {
    for hash in split_hashes(roots, "a row's root hashes")? {
        release(tx, hash)?;
    }
    Ok(())
}

/// Drops one reference to chunk `hash`; a chunk left with none is deleted, and the
/// chunks an index chunk lists lose a reference in turn.
fn release(tx: &Transaction<'_>, hash: Hash) -> Result<(), StoreError> {
    let mut stack = vec![hash];
    while let Some(hash) = stack.pop() {
        let row: Option<(i64, i64, i64)> = tx
            .prepare_cached("SELECT id, refs, kind FROM chunks WHERE hash = ?1")?
            .query_row([&hash[..]], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .optional()?;
        let Some((id, refs, kind)) = row else {
            return Err(StoreError::Corrupt(format!(
                "chunk {} is referenced but missing",
                hex(&hash)
            )));
        };
        if refs > 1 {
            tx.prepare_cached("UPDATE chunks SET refs = refs - 1 WHERE id = ?1")?
                .execute([id])?;
            continue;
        }
        if ChunkKind::from_code(kind) == Some(ChunkKind::Index) {
            let data: Vec<u8> = tx
                .prepare_cached("SELECT data FROM chunks WHERE id = ?1")?
                .query_row([id], |row| row.get(0))?;
            check_hash(ChunkKind::Index, &hash, &data)?;
            stack.extend(split_hashes(&data, "an index chunk")?);
        }
        tx.prepare_cached("DELETE FROM chunks WHERE id = ?1")?
            .execute([id])?;
    }
    Ok(())
}

/// Checkpoint `id`'s snapshot bytes.
fn snapshot_bytes(conn: &Connection, id: u64, head: Head) -> Result<Vec<u8>, StoreError> {
    let row = kept_checkpoint(conn, id, head)?;
    read_blob(conn, &row.roots, row.len)
}

/// Checkpoint `id`'s snapshot and every entry after it, up to the last one the head
/// row says was committed.
fn journal_from(conn: &Connection, id: u64, head: Head) -> Result<Journal, StoreError> {
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

/// A blob's bytes from its roots, every chunk checked against its hash.
fn read_blob(conn: &Connection, roots: &[u8], len: u64) -> Result<Vec<u8>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT kind, data FROM chunks WHERE hash = ?1")?;
    let mut out = Vec::with_capacity(len.min(RESERVE_MAX) as usize);
    let mut stack: Vec<Hash> = split_hashes(roots, "a row's root hashes")?;
    stack.reverse();
    while let Some(hash) = stack.pop() {
        let row: Option<(i64, Vec<u8>)> = stmt
            .query_row([&hash[..]], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?;
        let Some((kind, data)) = row else {
            return Err(StoreError::Corrupt(format!(
                "chunk {} is missing",
                hex(&hash)
            )));
        };
        let kind = ChunkKind::from_code(kind).ok_or_else(|| {
            StoreError::Corrupt(format!("chunk {} has the unknown kind {kind}", hex(&hash)))
        })?;
        check_hash(kind, &hash, &data)?;
        match kind {
            ChunkKind::Data => {
                out.extend_from_slice(&data);
                if out.len() as u64 > len {
                    break;
                }
            }
            ChunkKind::Index => {
                let children = split_hashes(&data, "an index chunk")?;
                stack.extend(children.into_iter().rev());
            }
        }
    }
    if out.len() as u64 != len {
        return Err(StoreError::Corrupt(format!(
            "a blob's chunks hold {}{} bytes, not the {len} recorded",
            if out.len() as u64 > len { "over " } else { "" },
            out.len()
        )));
    }
    Ok(out)
}

/// `bytes` as a list of hashes.
fn split_hashes(bytes: &[u8], what: &str) -> Result<Vec<Hash>, StoreError> {
    if bytes.len() % HASH_LEN != 0 {
        return Err(StoreError::Corrupt(format!(
            "{what} has {} bytes, not a whole number of hashes",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(HASH_LEN)
        .map(|c| {
            let mut hash = [0u8; HASH_LEN];
            hash.copy_from_slice(c);
            hash
        })
        .collect())
}

/// Checks that `data` hashes to `hash`.
fn check_hash(kind: ChunkKind, hash: &Hash, data: &[u8]) -> Result<(), StoreError> {
    if kind.hash(data) == *hash {
        Ok(())
    } else {
        Err(StoreError::Corrupt(format!(
            "chunk {} does not match its hash",
            hex(hash)
        )))
    }
}

/// A count or length read from disk, which cannot be negative.
fn count(value: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("{what} is negative ({value})")))
}

/// The first bytes of a hash in hex, to name a chunk in messages.
fn hex(hash: &Hash) -> String {
    hash[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The whole-store check behind [`Store::verify`].
fn verify(conn: &Connection) -> Result<(), StoreError> {
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
    if let (Some(oldest), Some(first), Some(last)) = (oldest, first, last) {
        if first > oldest + 1 || last - first + 1 != kept {
            return Err(StoreError::Corrupt(format!(
                "journal entries are missing: {kept} kept from {first} to {last}, the oldest checkpoint after {oldest}"
            )));
        }
    }
    // Last, what a recovery reads: every kept checkpoint and the entries after it.
    for checkpoint in &checkpoints {
        journal_from(conn, checkpoint.id, head)?;
    }
    Ok(())
}
