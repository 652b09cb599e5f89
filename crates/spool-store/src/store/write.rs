//! Writes: the connection and what it keeps of the head, and the transaction that
//! writes a group of entries and checkpoints (a checkpoint dropping what no kept
//! checkpoint needs). Run on the writer thread ([`super::writer`]).

use rusqlite::{Connection, Transaction, TransactionBehavior, params};
use spool_core::JournalEntry;

use super::blob::{put_blob, release_all};
use super::open::{CrashAt, StoreOptions};
use super::rows::{EntryRow, Head, checkpoint_rows, raw_row, write_head};
use super::stats::WriteStats;
use crate::StoreError;
use crate::sum;

/// Journal entries up to this many bytes are kept whole in their row; larger ones are
/// chunked like snapshots.
pub const INLINE_MAX: usize = 256;

/// One write in a transaction: an entry appended, or a checkpoint.
#[derive(Debug)]
pub(super) enum Op {
    /// A journal entry, encoded on the writer thread.
    Entry(JournalEntry),
    /// A checkpoint's encoded snapshot; `start` drops everything before it.
    Checkpoint { snapshot: Vec<u8>, start: bool },
}

/// Where a test asks the writer to abort the process, counted by [`Inner`] (see
/// [`CrashAt`]).
#[derive(Debug, Default)]
pub(super) struct Crash {
    at: Option<CrashAt>,
    commits: u64,
    checkpoints: u64,
}

impl Crash {
    pub(super) fn new(at: Option<CrashAt>) -> Crash {
        Crash {
            at,
            ..Crash::default()
        }
    }

    /// Ends the process inside the Nth checkpoint write, after its rows are written
    /// and the old ones dropped, before its transaction commits.
    fn in_checkpoint(&mut self) {
        self.checkpoints += 1;
        if self.at == Some(CrashAt::Checkpoint(self.checkpoints)) {
            crash();
        }
    }

    /// Ends the process inside the Nth commit, after every row is written, before the
    /// transaction commits.
    fn in_commit(&mut self) {
        self.commits += 1;
        if self.at == Some(CrashAt::Commit(self.commits)) {
            crash();
        }
    }
}

/// Ends the process at once, as a kill would: no destructor runs, no thread is told,
/// the open transaction is left as it is (`exit` rather than `abort`, so that no core
/// file is written). The status is SIGKILL's, 128 + 9.
fn crash() -> ! {
    std::process::exit(CRASH_STATUS)
}

/// The exit status of a process a [`CrashAt`] ended.
pub const CRASH_STATUS: i32 = 137;

/// What a [`Store`](crate::Store) and its clones share behind one lock (the writer
/// thread takes it for each transaction, readers for each read): the connection, the
/// options, the head as of the last commit, and the write counts.
pub(super) struct Inner {
    pub(super) conn: Connection,
    pub(super) options: StoreOptions,
    /// What the head row says, as of the last commit.
    pub(super) head: Head,
    pub(super) written: WriteStats,
    pub(super) crash: Crash,
}

impl Inner {
    /// Writes `ops` in order in one transaction (one `fsync` with
    /// `Durability::PowerLoss`), with the head row once at the end. Returns each op's
    /// number: an entry's sequence number, a checkpoint's id. Nothing is changed if it
    /// fails.
    pub(super) fn write(&mut self, ops: &[&Op]) -> Result<Vec<u64>, StoreError> {
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
                    let id = checkpoint(&tx, &mut head, snapshot, keep, &mut written)?;
                    if !*start {
                        self.crash.in_checkpoint();
                    }
                    id
                }
            };
            ids.push(id);
        }
        write_head(&tx, head)?;
        let starts = ops
            .iter()
            .any(|op| matches!(op, Op::Checkpoint { start: true, .. }));
        if !starts {
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

/// Writes a checkpoint of `snapshot` after `head`'s last entry, and drops the
/// checkpoints beyond the last `keep`, the entries no kept one needs, and the chunks
/// nothing refers to any more.
fn checkpoint(
    tx: &Transaction<'_>,
    head: &mut Head,
    snapshot: &[u8],
    keep: usize,
    written: &mut WriteStats,
) -> Result<u64, StoreError> {
    written.checkpoints += 1;
    written.snapshot_bytes += snapshot.len() as u64;
    head.checkpoint += 1;
    let head = *head;
    let id = head.checkpoint;
    // The new checkpoint's chunks are referenced before the old ones are released,
    // so what they share is never deleted and written again.
    let roots = put_blob(tx, snapshot, written)?;
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
    let rows = checkpoint_rows(tx, head)?;
    let kept_from = rows.len().saturating_sub(keep);
    for old in &rows[..kept_from] {
        release_all(tx, &old.roots)?;
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
        release_all(tx, &entry.body)?;
    }
    tx.prepare_cached("DELETE FROM entries WHERE seq <= ?1")?
        .execute([oldest as i64])?;
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
    Ok(id)
}
