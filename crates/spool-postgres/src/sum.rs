//! Row checksums: every row the store reads back — a journal entry, a checkpoint, a
//! task row, the head — carries a checksum over its table, its shard, every key and
//! number field and its body, so a changed value, a renumbered or swapped row, or a
//! row moved to another shard or table is found on read.

use std::sync::LazyLock;

/// The key row checksums are hashed with (apart from every other use of BLAKE3).
static ROW_KEY: LazyLock<[u8; 32]> =
    LazyLock::new(|| blake3::derive_key("spool-postgres v1 row checksum", &[]));

/// Which table a row is in, hashed first so that no row can pass for another's.
#[derive(Copy, Clone)]
enum Table {
    Entry = 1,
    Checkpoint = 2,
    Head = 3,
    Task = 4,
    Inbox = 5,
    TaskVersion = 7,
}

/// The checksum of a row of `table` in `shard` with these numbers and bytes: keyed
/// BLAKE3, its first 8 bytes as the `bigint` PostgreSQL keeps.
fn sum(table: Table, shard: i32, numbers: &[i64], bytes: &[u8]) -> i64 {
    let mut hasher = blake3::Hasher::new_keyed(&ROW_KEY);
    hasher.update(&[table as u8]);
    hasher.update(&shard.to_le_bytes());
    for number in numbers {
        hasher.update(&number.to_le_bytes());
    }
    hasher.update(&(bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
    let mut first = [0u8; 8];
    first.copy_from_slice(&hasher.finalize().as_bytes()[..8]);
    i64::from_le_bytes(first)
}

/// The checksum of journal entry `seq` and its encoded bytes.
pub(crate) fn entry(shard: i32, seq: i64, body: &[u8]) -> i64 {
    sum(Table::Entry, shard, &[seq], body)
}

/// What a checkpoint row says beside its key and body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CheckpointFields {
    /// The last entry before it.
    pub(crate) last_seq: i64,
    /// Whether it is in parts.
    pub(crate) parts: bool,
    /// Its body's length as written.
    pub(crate) len: i64,
    /// The wall time it was written, in milliseconds since the Unix epoch.
    pub(crate) at: i64,
    /// The bytes it was given (a snapshot, or a header and rows).
    pub(crate) bytes: i64,
    /// The encoded bytes of the entries of the segment before it.
    pub(crate) prior: i64,
    /// The checkpoint its task rows start from (see [`crate::versions`]).
    pub(crate) base: i64,
}

/// The checksum of checkpoint `id`: its fields and the body (the snapshot, or the
/// header of one in parts).
pub(crate) fn checkpoint(shard: i32, id: i64, fields: CheckpointFields, body: &[u8]) -> i64 {
    let CheckpointFields {
        last_seq,
        parts,
        len,
        at,
        bytes,
        prior,
        base,
    } = fields;
    sum(
        Table::Checkpoint,
        shard,
        &[id, last_seq, i64::from(parts), len, at, bytes, prior, base],
        body,
    )
}

/// The checksum of task `task`'s row, written by checkpoint `since`.
pub(crate) fn task(shard: i32, task: i64, since: i64, body: &[u8]) -> i64 {
    sum(Table::Task, shard, &[task, since], body)
}

/// The checksum of a version of task `task`'s row, kept at checkpoint `since`: its
/// body as checkpoint `origin` wrote it, whose row checksum is `row_sum` (a version
/// copied by a later checkpoint keeps the body and row checksum it was copied from), or
/// a tombstone (the task was dropped at `since`; no body).
pub(crate) fn version(
    shard: i32,
    task: i64,
    since: i64,
    origin: i64,
    row_sum: i64,
    tombstone: bool,
) -> i64 {
    sum(
        Table::TaskVersion,
        shard,
        &[task, since, origin, row_sum, i64::from(tombstone)],
        &[],
    )
}

/// The checksum of inbox row `id`: its idempotency key and body.
pub(crate) fn inbox(shard: i32, id: i64, key: &str, body: &[u8]) -> i64 {
    let mut bytes = Vec::with_capacity(8 + key.len() + body.len());
    bytes.extend_from_slice(&(key.len() as u64).to_le_bytes());
    bytes.extend_from_slice(key.as_bytes());
    bytes.extend_from_slice(body);
    sum(Table::Inbox, shard, &[id], &bytes)
}

/// The checksum of the head row: the last entry committed, the latest checkpoint, the
/// writer's epoch.
pub(crate) fn head(shard: i32, last_seq: i64, checkpoint: i64, epoch: i64) -> i64 {
    sum(Table::Head, shard, &[last_seq, checkpoint, epoch], &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field, the shard and the table change the checksum.
    #[test]
    fn every_field_is_covered() {
        let base = entry(0, 7, b"abc");
        assert_ne!(base, entry(1, 7, b"abc"));
        assert_ne!(base, entry(0, 8, b"abc"));
        assert_ne!(base, entry(0, 7, b"abd"));
        assert_ne!(base, task(0, 7, 0, b"abc"));
        assert_ne!(task(0, 7, 0, b"abc"), task(0, 7, 1, b"abc"));
        let kept = version(0, 7, 2, 1, 9, false);
        assert_ne!(kept, version(0, 7, 3, 1, 9, false));
        assert_ne!(kept, version(0, 7, 2, 2, 9, false));
        assert_ne!(kept, version(0, 7, 2, 1, 8, false));
        assert_ne!(kept, version(0, 7, 2, 1, 9, true));
        assert_eq!(base, entry(0, 7, b"abc"));
        let fields = CheckpointFields {
            last_seq: 2,
            parts: false,
            len: 3,
            at: 0,
            bytes: 0,
            prior: 0,
            base: 1,
        };
        let checkpoint_sum = checkpoint(0, 1, fields, b"abc");
        assert_ne!(checkpoint_sum, checkpoint(0, 2, fields, b"abc"));
        for changed in [
            CheckpointFields {
                parts: true,
                ..fields
            },
            CheckpointFields {
                last_seq: 3,
                ..fields
            },
            CheckpointFields { len: 4, ..fields },
            CheckpointFields { at: 1, ..fields },
            CheckpointFields { bytes: 1, ..fields },
            CheckpointFields { prior: 1, ..fields },
            CheckpointFields { base: 0, ..fields },
        ] {
            assert_ne!(checkpoint_sum, checkpoint(0, 1, changed, b"abc"));
        }
        assert_ne!(head(0, 1, 2, 3), head(0, 2, 1, 3));
        assert_ne!(head(0, 1, 2, 3), head(0, 1, 2, 4));
    }
}
