//! The store: an SQLite file holding checkpoints (snapshots) and the journal since,
//! both kept as content-addressed chunks.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{
    Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior, params,
};
use spool_core::{Journal, JournalEntry, Snapshot};
use spool_runtime::JournalSink;

use crate::StoreError;
use crate::chunk::{ChunkKind, HASH_LEN, Hash, Tree};

/// The schema version this build writes and reads (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 1;

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
    roots BLOB NOT NULL
);
CREATE TABLE entries (
    seq INTEGER PRIMARY KEY,
    len INTEGER NOT NULL,
    chunked INTEGER NOT NULL,
    body BLOB NOT NULL
);
";

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
/// A store is a [`JournalSink`]: give it to [`RuntimeBuilder::journal`] and the runtime
/// writes to it as it runs; after a crash, [`Store::recover`] gives the journal to
/// [`RuntimeBuilder::recover`]. Clones share one connection, so a test or a tool can
/// read a store the runtime writes to. One connection at a time holds the file.
///
/// [`RuntimeBuilder::journal`]: spool_runtime::RuntimeBuilder::journal
/// [`RuntimeBuilder::recover`]: spool_runtime::RuntimeBuilder::recover
#[derive(Clone)]
pub struct Store {
    inner: Arc<Mutex<Inner>>,
    path: Arc<Path>,
}

struct Inner {
    conn: Connection,
    options: StoreOptions,
    /// The sequence number the next entry gets.
    next_seq: u64,
    written: WriteStats,
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
    /// [`StoreError::NewerSchema`], [`StoreError::Locked`] if another connection holds
    /// it, [`StoreError::Sqlite`] if the file cannot be opened or created.
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
            "PRAGMA synchronous = {synchronous}; PRAGMA journal_size_limit = 4194304;"
        ))?;
        let mut conn = conn;
        {
            // Takes the file's lock now (and, for a new file, creates the schema), so a
            // second opener is refused here rather than at its first write.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Exclusive)?;
            if fresh {
                tx.execute_batch(SCHEMA)?;
                tx.execute_batch(&format!(
                    "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};"
                ))?;
            }
            tx.commit()?;
        }
        for table in ["chunks", "checkpoints", "entries"] {
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
        let last: (Option<i64>, Option<i64>) = conn.query_row(
            "SELECT (SELECT MAX(seq) FROM entries), (SELECT MAX(last_seq) FROM checkpoints)",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        let last = count(last.0.unwrap_or(0), "an entry's sequence number")?
            .max(count(last.1.unwrap_or(0), "a checkpoint's last entry")?);
        Ok(Store {
            inner: Arc::new(Mutex::new(Inner {
                conn,
                options,
                next_seq: last + 1,
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
        let bytes = entry.to_bytes().map_err(StoreError::Encode)?;
        self.lock().append(&bytes)
    }

    /// The latest checkpoint's snapshot (as [`Journal::start`]) and every entry after
    /// it, in order: what [`RuntimeBuilder::recover`] goes on from. `None` for a store
    /// with no checkpoint.
    ///
    /// [`RuntimeBuilder::recover`]: spool_runtime::RuntimeBuilder::recover
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] if a chunk does not match its hash or is missing, or an
    /// entry is missing; [`StoreError::Entry`] for an entry that does not decode.
    pub fn recover(&self) -> Result<Option<Journal>, StoreError> {
        let mut inner = self.lock();
        let tx = inner.conn.transaction()?;
        let Some(id) = latest(&tx)? else {
            return Ok(None);
        };
        journal_from(&tx, id).map(Some)
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
        journal_from(&tx, id)
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
        let Some(id) = latest(&tx)? else {
            return Ok(None);
        };
        let bytes = snapshot_bytes(&tx, id)?;
        Snapshot::decode(&bytes)
            .map(Some)
            .map_err(StoreError::Snapshot)
    }

    /// The checkpoints kept, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Sqlite`] if the read failed, [`StoreError::Corrupt`] for a row that
    /// does not hang together.
    pub fn checkpoints(&self) -> Result<Vec<CheckpointInfo>, StoreError> {
        let inner = self.lock();
        let mut stmt = inner.conn.prepare(
            "SELECT id, last_seq, len, (SELECT COUNT(*) FROM entries WHERE seq > last_seq)
             FROM checkpoints ORDER BY id",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (id, last, len, after): (i64, i64, i64, i64) = row?;
            out.push(CheckpointInfo {
                id: count(id, "a checkpoint id")?,
                after_entry: count(last, "a checkpoint's last entry")?,
                snapshot_bytes: count(len, "a snapshot's length")?,
                entries_after: count(after, "a count")?,
            });
        }
        Ok(out)
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
    fn start(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.start_journal(snapshot)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn record(&mut self, entry: &JournalEntry) -> Result<(), String> {
        self.append(entry).map(drop).map_err(|e| e.to_string())
    }

    fn checkpoint(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.write_checkpoint(snapshot)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

impl Inner {
    fn append(&mut self, bytes: &[u8]) -> Result<u64, StoreError> {
        let seq = self.next_seq;
        let mut written = WriteStats {
            entries: 1,
            entry_bytes: bytes.len() as u64,
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
        tx.prepare_cached("INSERT INTO entries (seq, len, chunked, body) VALUES (?1, ?2, ?3, ?4)")?
            .execute(params![seq as i64, bytes.len() as i64, chunked, body])?;
        tx.commit()?;
        self.next_seq += 1;
        self.written.add(&written);
        Ok(seq)
    }

    fn checkpoint(&mut self, snapshot: &[u8], start: bool) -> Result<u64, StoreError> {
        let mut written = WriteStats {
            checkpoints: 1,
            snapshot_bytes: snapshot.len() as u64,
            ..WriteStats::default()
        };
        let last_seq = self.next_seq - 1;
        let keep = if start {
            1
        } else {
            self.options.keep_checkpoints
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        // The new checkpoint's chunks are referenced before the old ones are released,
        // so what they share is never deleted and written again.
        let roots = put_blob(&tx, snapshot, &mut written)?;
        written.row_bytes += roots.len() as u64;
        tx.prepare_cached("INSERT INTO checkpoints (last_seq, len, roots) VALUES (?1, ?2, ?3)")?
            .execute(params![last_seq as i64, snapshot.len() as i64, roots])?;
        let id = count(tx.last_insert_rowid(), "a checkpoint id")?;
        let dropped: Vec<(i64, Vec<u8>)> = {
            let mut stmt = tx.prepare_cached(
                "SELECT id, roots FROM checkpoints WHERE id NOT IN
                 (SELECT id FROM checkpoints ORDER BY id DESC LIMIT ?1)",
            )?;
            let rows = stmt.query_map([keep as i64], |row| Ok((row.get(0)?, row.get(1)?)))?;
            rows.collect::<Result<_, _>>()?
        };
        for (old, roots) in dropped {
            release_all(&tx, &roots)?;
            tx.prepare_cached("DELETE FROM checkpoints WHERE id = ?1")?
                .execute([old])?;
        }
        let oldest: i64 = tx.query_row("SELECT MIN(last_seq) FROM checkpoints", [], |row| {
            row.get(0)
        })?;
        let chunked: Vec<Vec<u8>> = {
            let mut stmt =
                tx.prepare_cached("SELECT body FROM entries WHERE seq <= ?1 AND chunked != 0")?;
            let rows = stmt.query_map([oldest], |row| row.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        for roots in chunked {
            release_all(&tx, &roots)?;
        }
        tx.prepare_cached("DELETE FROM entries WHERE seq <= ?1")?
            .execute([oldest])?;
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
        self.written.add(&written);
        Ok(id)
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

/// The id of the latest checkpoint, if any.
fn latest(conn: &Connection) -> Result<Option<u64>, StoreError> {
    let id: Option<i64> =
        conn.query_row("SELECT MAX(id) FROM checkpoints", [], |row| row.get(0))?;
    id.map(|id| count(id, "a checkpoint id")).transpose()
}

/// Checkpoint `id`'s snapshot bytes.
fn snapshot_bytes(conn: &Connection, id: u64) -> Result<Vec<u8>, StoreError> {
    let (len, roots) = checkpoint_row(conn, id)?.1;
    read_blob(conn, &roots, len)
}

/// Checkpoint `id`'s row: its last entry, then the snapshot's length and roots.
fn checkpoint_row(conn: &Connection, id: u64) -> Result<(u64, (u64, Vec<u8>)), StoreError> {
    let row: Option<(i64, i64, Vec<u8>)> = conn
        .query_row(
            "SELECT last_seq, len, roots FROM checkpoints WHERE id = ?1",
            [id as i64],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .optional()?;
    let (last, len, roots) = row.ok_or(StoreError::NoCheckpoint(id))?;
    Ok((
        count(last, "a checkpoint's last entry")?,
        (count(len, "a snapshot's length")?, roots),
    ))
}

/// Checkpoint `id`'s snapshot and every entry after it.
fn journal_from(conn: &Connection, id: u64) -> Result<Journal, StoreError> {
    let (last, (len, roots)) = checkpoint_row(conn, id)?;
    let start = read_blob(conn, &roots, len)?;
    let mut stmt =
        conn.prepare("SELECT seq, len, chunked, body FROM entries WHERE seq > ?1 ORDER BY seq")?;
    let rows = stmt.query_map([last as i64], |row| {
        Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
    })?;
    let mut entries = Vec::new();
    for (expected, row) in (last + 1..).zip(rows) {
        let (seq, len, chunked, body): (i64, i64, bool, Vec<u8>) = row?;
        let seq = count(seq, "an entry's sequence number")?;
        if seq != expected {
            return Err(StoreError::Corrupt(format!(
                "journal entry {expected} is missing (the next kept is {seq})"
            )));
        }
        let len = count(len, "an entry's length")?;
        let bytes = if chunked {
            read_blob(conn, &body, len)?
        } else if body.len() as u64 == len {
            body
        } else {
            return Err(StoreError::Corrupt(format!(
                "journal entry {seq} has {} bytes, not {len}",
                body.len()
            )));
        };
        let entry =
            JournalEntry::from_bytes(&bytes).map_err(|source| StoreError::Entry { seq, source })?;
        entries.push(entry);
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
    // References from rows, then from index chunks; compared with the counts kept.
    let mut expected: HashMap<Hash, i64> = HashMap::new();
    let mut refer = |roots: &[u8], what: &str| -> Result<(), StoreError> {
        for hash in split_hashes(roots, what)? {
            *expected.entry(hash).or_default() += 1;
        }
        Ok(())
    };
    {
        let mut stmt = conn.prepare("SELECT roots FROM checkpoints")?;
        let rows = stmt.query_map([], |row| row.get::<_, Vec<u8>>(0))?;
        for roots in rows {
            refer(&roots?, "a checkpoint's roots")?;
        }
        let mut stmt = conn.prepare("SELECT body FROM entries WHERE chunked != 0")?;
        let rows = stmt.query_map([], |row| row.get::<_, Vec<u8>>(0))?;
        for roots in rows {
            refer(&roots?, "an entry's roots")?;
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
    let ids: Vec<i64> = {
        let mut stmt = conn.prepare("SELECT id FROM checkpoints ORDER BY id")?;
        let rows = stmt.query_map([], |row| row.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    for id in ids {
        journal_from(conn, count(id, "a checkpoint id")?)?;
    }
    Ok(())
}
