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

/// The checksum of checkpoint `id`: the last entry before it, its snapshot's (or
/// header's) length, whether it is in parts, and the root hashes.
pub(crate) fn checkpoint(id: u64, last_seq: u64, len: u64, parts: u64, roots: &[u8]) -> i64 {
    sum(Table::Checkpoint, &[id, last_seq, len, parts], roots)
}

/// The checksum of task `task`'s row: its encoded length, whether `body` holds the
/// row or the roots of its chunks, and `body`.
pub(crate) fn task(task: u64, len: u64, chunked: u64, body: &[u8]) -> i64 {
    sum(Table::Task, &[task, len, chunked], body)
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
        assert_ne!(base, checkpoint(7, 3, 0, 0, b"abc"));
        assert_ne!(base, task(7, 3, 0, b"abc"));
        assert_ne!(checkpoint(1, 2, 3, 0, b""), checkpoint(1, 2, 3, 1, b""));
        assert_eq!(base, entry(7, 3, 0, b"abc"));
        assert_ne!(head(1, 2), head(2, 1));
    }
}
