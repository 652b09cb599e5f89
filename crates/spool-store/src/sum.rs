//! Row checksums: every row the store reads back — a journal entry, a checkpoint, the
//! head — carries a checksum over all its fields, its key included, so a changed
//! value, a renumbered row or a row moved to another table is found on read.
//!
//! Chunks need none: their key is the BLAKE3 hash of their kind and bytes.

use std::sync::LazyLock;

/// The key row checksums are hashed with, apart from every chunk hash.
static ROW_KEY: LazyLock<[u8; 32]> =
    LazyLock::new(|| blake3::derive_key("spool-store v2 row checksum", &[]));

/// Which table a row is in, hashed first so that no row can pass for another's.
#[derive(Copy, Clone)]
enum Table {
    Entry = 1,
    Checkpoint = 2,
    Head = 3,
    Task = 4,
    TaskHistory = 5,
}

/// The checksum of a row of `table` with these numbers and bytes: BLAKE3 keyed, the
/// first 8 bytes, as the signed integer SQLite keeps.
fn sum(table: Table, numbers: &[u64], bytes: &[u8]) -> i64 {
    let mut hasher = blake3::Hasher::new_keyed(&ROW_KEY);
    hasher.update(&[table as u8]);
    for number in numbers {
        hasher.update(&number.to_le_bytes());
    }
    hasher.update(&(bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
    let mut first = [0u8; 8];
    first.copy_from_slice(&hasher.finalize().as_bytes()[..8]);
    i64::from_le_bytes(first)
}

/// The checksum of journal entry `seq`: its encoded length, whether `body` holds the
/// entry or the roots of its chunks (`chunked`, as stored), and `body`.
pub(crate) fn entry(seq: u64, len: u64, chunked: u64, body: &[u8]) -> i64 {
    sum(Table::Entry, &[seq, len, chunked], body)
}

/// What a checkpoint row says beside its key and roots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CheckpointFields {
    /// The last entry before it.
    pub(crate) last_seq: u64,
    /// Its snapshot's (or header's) length.
    pub(crate) len: u64,
    /// Whether it is in parts (0 or 1, as stored).
    pub(crate) parts: u64,
    /// The wall time it was written, in milliseconds since the Unix epoch.
    pub(crate) at: u64,
    /// The bytes it was given (a snapshot, or a header and rows).
    pub(crate) bytes: u64,
    /// The encoded bytes of the entries of the segment before it.
    pub(crate) prior: u64,
}

/// The checksum of checkpoint `id`: its fields and the root hashes.
pub(crate) fn checkpoint(id: u64, fields: CheckpointFields, roots: &[u8]) -> i64 {
    let CheckpointFields {
        last_seq,
        len,
        parts,
        at,
        bytes,
        prior,
    } = fields;
    sum(
        Table::Checkpoint,
        &[id, last_seq, len, parts, at, bytes, prior],
        roots,
    )
}

/// The checksum of task `task`'s row written by checkpoint `since`: its encoded
/// length, whether `body` holds the row or the roots of its chunks, and `body`.
pub(crate) fn task(task: u64, since: u64, len: u64, chunked: u64, body: &[u8]) -> i64 {
    sum(Table::Task, &[task, since, len, chunked], body)
}

/// The checksum of a kept old row of task `task`: written by checkpoint `since`,
/// replaced (or dropped) by checkpoint `until`, with `row_sum` the checksum it had in
/// `tasks` (which covers its length, chunked flag and body, checked apart on read).
pub(crate) fn task_history(task: u64, since: u64, until: u64, row_sum: i64) -> i64 {
    sum(
        Table::TaskHistory,
        &[task, since, until, row_sum as u64],
        &[],
    )
}

/// The checksum of the head row: the last entry committed and the latest checkpoint.
pub(crate) fn head(last_seq: u64, checkpoint: u64) -> i64 {
    sum(Table::Head, &[last_seq, checkpoint], &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field, and the table, changes the checksum.
    #[test]
    fn every_field_is_covered() {
        let base = entry(7, 3, 0, b"abc");
        assert_ne!(base, entry(8, 3, 0, b"abc"));
        assert_ne!(base, entry(7, 4, 0, b"abc"));
        assert_ne!(base, entry(7, 3, 1, b"abc"));
        assert_ne!(base, entry(7, 3, 0, b"abd"));
        let fields = CheckpointFields {
            last_seq: 3,
            len: 0,
            parts: 0,
            at: 0,
            bytes: 0,
            prior: 0,
        };
        assert_ne!(base, checkpoint(7, fields, b"abc"));
        assert_ne!(base, task(7, 0, 3, 0, b"abc"));
        assert_ne!(task(7, 0, 3, 0, b"abc"), task(7, 1, 3, 0, b"abc"));
        let row_sum = task(7, 0, 3, 0, b"abc");
        assert_ne!(row_sum, task_history(7, 0, 0, row_sum));
        assert_ne!(
            task_history(7, 1, 2, row_sum),
            task_history(7, 1, 3, row_sum)
        );
        assert_ne!(
            task_history(7, 1, 2, row_sum),
            task_history(7, 1, 2, task(7, 0, 3, 0, b"abd"))
        );
        for changed in [
            CheckpointFields { parts: 1, ..fields },
            CheckpointFields { at: 1, ..fields },
            CheckpointFields { bytes: 1, ..fields },
            CheckpointFields { prior: 1, ..fields },
        ] {
            assert_ne!(checkpoint(1, fields, b""), checkpoint(1, changed, b""));
        }
        assert_eq!(base, entry(7, 3, 0, b"abc"));
        assert_ne!(head(1, 2), head(2, 1));
    }
}
