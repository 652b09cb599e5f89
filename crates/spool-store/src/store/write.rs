//! Writes: the connection and what it keeps of the head, and the transaction that
//! writes a group of entries and checkpoints (a checkpoint dropping what no kept
//! checkpoint needs). Run on the writer thread ([`super::writer`]).

use rusqlite::{Connection, Transaction, TransactionBehavior, params};
use spool_core::SnapshotParts;

use super::blob::{put_blob, release_all};
use super::file::Watch;
use super::open::StoreOptions;
use super::rows::{EntryRow, Head, checkpoint_row, checkpoint_rows, raw_row, write_head};
use super::task_rows::{clear_task_rows, prune_task_history, write_task_rows};
use crate::StoreError;
use crate::sum;
use spool_durable::{CrashCounter, History, Op, SegmentCost, WriteStats};

/// Journal entries up to this many bytes are kept whole in their row; larger ones are
/// chunked like snapshots.
pub const INLINE_MAX: usize = 256;

/// What a [`Store`](crate::Store) and its clones share behind one lock (the writer
/// thread takes it for each transaction, readers for each read): the connection, the
/// options, the head as of the last commit, and the write counts.
pub(super) struct Inner {
    pub(super) conn: Connection,
    pub(super) options: StoreOptions,
    /// What the head row says, as of the last commit.
    pub(super) head: Head,
    /// The encoded bytes of the entries after the latest checkpoint, as of the last
    /// commit: the next checkpoint records them as its segment's predecessor's.
    pub(super) tail_bytes: u64,
    pub(super) written: WriteStats,
    pub(super) crash: CrashCounter,
    /// The store's path and the file it named when opened.
    pub(super) file: Watch,
    /// The checkpoints kept, as of the last commit, as retention weighs them: read at
    /// the first checkpoint written (`None` until then).
    pub(super) kept: Option<Vec<Kept>>,
    /// Whether the connection reads only ([`Store::open_read_only`](crate::Store::open_read_only)).
    pub(super) read_only: bool,
}

impl Inner {
    /// Writes `ops` in order in one transaction (one `fsync` with
    /// `Durability::PowerLoss`), with the head row once at the end. Returns each op's
    /// number: an entry's sequence number, a checkpoint's id. Nothing is changed if it
    /// fails. A store whose file was deleted or replaced writes nothing more
    /// ([`StoreError::FileGone`]): what it wrote would be lost with the process.
    pub(super) fn write(&mut self, ops: &[&Op]) -> Result<Vec<u64>, StoreError> {
        self.check_writable()?;
        self.file.check()?;
        let mut head = self.head;
        let mut tail = self.tail_bytes;
        // What the checkpoints of this batch keep: the kept ones copied on the first.
        let mut kept: Option<Vec<Kept>> = None;
        let mut written = WriteStats::default();
        let mut ids = Vec::with_capacity(ops.len());
        let now_ms = self.options.clock.now_ms();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        for op in ops {
            let id = match op {
                Op::Entry(entry) => {
                    let bytes = entry
                        .to_bytes()
                        .map_err(|e| StoreError::Encode(e.to_string()))?;
                    tail += bytes.len() as u64;
                    append(&tx, &mut head, &bytes, &mut written)?
                }
                Op::Checkpoint { snapshot, start } => {
                    let keep = Keep {
                        start: *start,
                        count: if *start {
                            1
                        } else {
                            self.options.keep_checkpoints
                        },
                        history: self.options.history,
                        now_ms,
                    };
                    let body = Body::Whole(snapshot);
                    let kept = match &mut kept {
                        Some(kept) => kept,
                        slot @ None => slot.insert(kept_now(&tx, self.kept.as_ref(), self.head)?),
                    };
                    let id = checkpoint(&tx, &mut head, body, &keep, tail, kept, &mut written)?;
                    tail = 0;
                    if !*start {
                        self.crash.in_checkpoint();
                    }
                    id
                }
                Op::Parts(parts) => {
                    let keep = Keep {
                        start: false,
                        count: 1,
                        history: self.options.history,
                        now_ms,
                    };
                    let body = Body::Parts(parts);
                    let kept = match &mut kept {
                        Some(kept) => kept,
                        slot @ None => slot.insert(kept_now(&tx, self.kept.as_ref(), self.head)?),
                    };
                    let id = checkpoint(&tx, &mut head, body, &keep, tail, kept, &mut written)?;
                    tail = 0;
                    self.crash.in_checkpoint();
                    id
                }
            };
            ids.push(id);
        }
        write_head(&tx, head)?;
        if !Op::starts(ops) {
            self.crash.in_commit();
        }
        tx.commit()?;
        self.head = head;
        self.tail_bytes = tail;
        if kept.is_some() {
            self.kept = kept;
        }
        self.written.add(&written);
        Ok(ids)
    }
}

impl Inner {
    /// Refuses a write on a read-only handle.
    pub(super) fn check_writable(&self) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly {
                path: self.file.path().to_path_buf(),
            });
        }
        Ok(())
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

/// What a checkpoint writes.
#[derive(Clone, Copy)]
enum Body<'a> {
    /// A whole snapshot, encoded.
    Whole(&'a [u8]),
    /// A header and the rows of the tasks that changed.
    Parts(&'a SnapshotParts),
}

/// What a checkpoint keeps of the ones before it.
struct Keep {
    /// It starts a new journal: without history nothing before it is kept; with
    /// history, the segments before it are kept as for any checkpoint.
    start: bool,
    /// How many checkpoints to keep at least, itself included.
    count: usize,
    /// How much history to keep.
    history: History,
    /// The wall time it is written at, in milliseconds since the Unix epoch.
    now_ms: u64,
}

impl Keep {
    /// Whether the rows a checkpoint in parts replaces are kept for the checkpoints
    /// before it.
    fn history(&self) -> bool {
        !self.history.is_off()
    }
}

/// Writes a checkpoint after `head`'s last entry (`prior`: the encoded bytes of the
/// entries since the one before), and drops what `keep` does not keep: the oldest
/// checkpoints, the entries no kept one needs, the old task rows no kept one reads,
/// and the chunks nothing refers to any more. A checkpoint in parts writes its header
/// as the checkpoint's blob and its rows over the `tasks` table; without history only
/// the latest checkpoint in parts can be read (the rows are the latest), so one drops
/// every checkpoint before it, and a whole checkpoint drops the task rows and every
/// checkpoint in parts. With history, the rows replaced are kept in `task_history`,
/// and the checkpoints in parts kept can be read.
fn checkpoint(
    tx: &Transaction<'_>,
    head: &mut Head,
    body: Body<'_>,
    keep: &Keep,
    prior: u64,
    kept: &mut Vec<Kept>,
    written: &mut WriteStats,
) -> Result<u64, StoreError> {
    let bytes = match body {
        Body::Whole(snapshot) => snapshot.len() as u64,
        Body::Parts(parts) => {
            (parts.header.len() + parts.rows.iter().map(|(_, r)| r.len()).sum::<usize>()) as u64
        }
    };
    written.checkpoints += 1;
    written.snapshot_bytes += bytes;
    head.checkpoint += 1;
    let head = *head;
    let stamp = Stamp {
        at: keep.now_ms,
        bytes,
        prior,
    };
    // The new checkpoint's chunks are referenced before the old ones are released,
    // so what they share is never deleted and written again.
    insert_checkpoint(tx, head, body, stamp, written)?;
    kept.push(Kept {
        id: head.checkpoint,
        last_seq: head.last_seq,
        parts: matches!(body, Body::Parts(_)),
        at: stamp.at,
        bytes: stamp.bytes,
        prior: stamp.prior,
    });
    let until = keep.history().then_some(head.checkpoint);
    match body {
        Body::Whole(_) => clear_task_rows(tx, until)?,
        Body::Parts(parts) => {
            write_task_rows(tx, parts, head.checkpoint, keep.history(), written)?;
        }
    }
    let (oldest_id, oldest_seq) = drop_old_checkpoints(tx, head, keep, kept)?;
    drop_entries_through(tx, oldest_seq)?;
    prune_task_history(tx, oldest_id)?;
    give_back_free_pages(tx)?;
    Ok(head.checkpoint)
}

/// What a checkpoint row records beside its snapshot.
#[derive(Clone, Copy)]
struct Stamp {
    /// Its wall time, in milliseconds since the Unix epoch.
    at: u64,
    /// The bytes it was given.
    bytes: u64,
    /// The encoded bytes of the entries of the segment before it.
    prior: u64,
}

/// Writes the row of checkpoint `head.checkpoint` (after `head.last_seq`), its blob (the
/// snapshot, or the header of one in parts) stored as chunks.
fn insert_checkpoint(
    tx: &Transaction<'_>,
    head: Head,
    body: Body<'_>,
    stamp: Stamp,
    written: &mut WriteStats,
) -> Result<(), StoreError> {
    let (blob, parts) = match body {
        Body::Whole(snapshot) => (snapshot, false),
        Body::Parts(parts) => (parts.header.as_slice(), true),
    };
    let id = head.checkpoint;
    let roots = put_blob(tx, blob, written)?;
    written.row_bytes += roots.len() as u64;
    let len = blob.len() as u64;
    let fields = sum::CheckpointFields {
        last_seq: head.last_seq,
        len,
        parts: u64::from(parts),
        at: stamp.at,
        bytes: stamp.bytes,
        prior: stamp.prior,
    };
    let check = sum::checkpoint(id, fields, &roots);
    tx.prepare_cached(
        "INSERT INTO checkpoints (id, last_seq, len, roots, sum, parts, at, bytes, prior)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        id as i64,
        head.last_seq as i64,
        len as i64,
        roots,
        check,
        parts,
        stamp.at as i64,
        stamp.bytes as i64,
        stamp.prior as i64
    ])?;
    Ok(())
}

/// What retention weighs of a kept checkpoint: kept in memory from one write to the
/// next ([`Inner::kept`]), so a checkpoint reads only the rows it drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Kept {
    pub(super) id: u64,
    /// The last entry before it.
    pub(super) last_seq: u64,
    /// Whether it is in parts.
    pub(super) parts: bool,
    /// Its wall time, in milliseconds since the Unix epoch.
    pub(super) at: u64,
    /// The bytes it was given.
    pub(super) bytes: u64,
    /// The encoded bytes of the entries of the segment before it.
    pub(super) prior: u64,
}

/// The kept checkpoints, oldest first, as retention weighs them: every row read and
/// checked.
pub(super) fn read_kept(conn: &Connection, head: Head) -> Result<Vec<Kept>, StoreError> {
    Ok(checkpoint_rows(conn, head)?
        .into_iter()
        .map(|row| Kept {
            id: row.id,
            last_seq: row.last_seq,
            parts: row.parts,
            at: row.at,
            bytes: row.bytes,
            prior: row.prior,
        })
        .collect())
}

/// The checkpoints kept as of `head` (the last commit): `cached` if it ends at
/// `head`'s checkpoint, else read from the rows.
fn kept_now(
    tx: &Transaction<'_>,
    cached: Option<&Vec<Kept>>,
    head: Head,
) -> Result<Vec<Kept>, StoreError> {
    match cached {
        Some(kept) if kept.last().map_or(0, |k| k.id) == head.checkpoint => Ok(kept.clone()),
        _ => read_kept(tx, head),
    }
}

/// Drops the checkpoints `keep` does not keep — beyond the last `keep.count` and
/// outside the history kept, and, without history, those in parts other than
/// `head.checkpoint` (which cannot be read any more) — releasing their chunks, and
/// takes them out of `kept` (the checkpoints kept, `head.checkpoint` last); returns
/// the oldest checkpoint kept and the last entry before it (the entries up to it are
/// needed no more).
fn drop_old_checkpoints(
    tx: &Transaction<'_>,
    head: Head,
    keep: &Keep,
    kept: &mut Vec<Kept>,
) -> Result<(u64, u64), StoreError> {
    let latest = kept.len().saturating_sub(1);
    let by_count = kept.len().saturating_sub(keep.count);
    let kept_from = if keep.start && !keep.history() {
        latest
    } else {
        let costs: Vec<SegmentCost> = kept
            .iter()
            .enumerate()
            .map(|(index, row)| {
                let next = kept.get(index + 1);
                SegmentCost {
                    ended_ms: next.map_or(keep.now_ms, |next| next.at),
                    bytes: row.bytes + next.map_or(0, |next| next.prior),
                }
            })
            .collect();
        by_count.min(keep.history.keep_from(&costs, keep.now_ms))
    };
    let history = keep.history();
    let mut index = 0;
    let mut failed = None;
    kept.retain(|old| {
        let unreadable = old.parts && old.id != head.checkpoint && !history;
        let drop = index < kept_from || unreadable;
        index += 1;
        if drop && failed.is_none() {
            failed = drop_checkpoint(tx, old.id, head).err();
        }
        !drop
    });
    if let Some(error) = failed {
        return Err(error);
    }
    Ok(kept
        .first()
        .map_or((head.checkpoint, head.last_seq), |oldest| {
            (oldest.id, oldest.last_seq)
        }))
}

/// Drops checkpoint `id`'s row, releasing its chunks.
fn drop_checkpoint(tx: &Transaction<'_>, id: u64, head: Head) -> Result<(), StoreError> {
    // The row is checked before its roots are released: a damaged row's roots could
    // name chunks others still use.
    if let Some(old) = checkpoint_row(tx, id, head)? {
        release_all(tx, &old.roots)?;
        tx.prepare_cached("DELETE FROM checkpoints WHERE id = ?1")?
            .execute([id as i64])?;
    }
    Ok(())
}

/// Drops the journal entries up to `oldest`, releasing the chunks of the chunked ones.
fn drop_entries_through(tx: &Transaction<'_>, oldest: u64) -> Result<(), StoreError> {
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
    Ok(())
}

/// Gives freed pages back to the file system once they are a quarter of the file.
fn give_back_free_pages(tx: &Transaction<'_>) -> Result<(), StoreError> {
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
    Ok(())
}
