//! Writes: the connection and what it keeps of the head, and the transactions that
//! append an entry and write a checkpoint (dropping what no kept checkpoint needs).

use rusqlite::{Connection, TransactionBehavior, params};

use super::blob::{put_blob, release_all};
use super::open::StoreOptions;
use super::rows::{EntryRow, Head, checkpoint_rows, raw_row, write_head};
use super::stats::WriteStats;
use crate::StoreError;
use crate::sum;

/// Journal entries up to this many bytes are kept whole in their row; larger ones are
/// chunked like snapshots.
pub const INLINE_MAX: usize = 256;

/// What a [`Store`](crate::Store) and its clones share behind one lock: the
/// connection, the options, the head as of the last commit, and the write counts.
pub(super) struct Inner {
    pub(super) conn: Connection,
    pub(super) options: StoreOptions,
    /// What the head row says, as of the last commit.
    pub(super) head: Head,
    pub(super) written: WriteStats,
}

impl Inner {
    pub(super) fn append(&mut self, bytes: &[u8]) -> Result<u64, StoreError> {
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

    pub(super) fn checkpoint(&mut self, snapshot: &[u8], start: bool) -> Result<u64, StoreError> {
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
