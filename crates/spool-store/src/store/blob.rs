//! Blobs in the `chunks` table: a snapshot or a large entry stored as content-defined
//! chunks (each stored once, counted by reference), released, and read back with every
//! chunk checked against its hash.

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use crate::StoreError;
use crate::chunk::{ChunkKind, HASH_LEN, Hash, Tree};
use spool_durable::WriteStats;

/// The largest buffer a read reserves up front from a length stored on disk.
const RESERVE_MAX: u64 = 64 << 20;

/// Stores `data` as chunks (each new one written, each known one referenced once
/// more) and returns its root hashes, concatenated.
pub(super) fn put_blob(
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
pub(super) fn release_all(tx: &Transaction<'_>, roots: &[u8]) -> Result<(), StoreError> {
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

/// A blob's bytes from its roots, every chunk checked against its hash.
pub(super) fn read_blob(conn: &Connection, roots: &[u8], len: u64) -> Result<Vec<u8>, StoreError> {
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
pub(super) fn split_hashes(bytes: &[u8], what: &str) -> Result<Vec<Hash>, StoreError> {
    if !bytes.len().is_multiple_of(HASH_LEN) {
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
pub(super) fn check_hash(kind: ChunkKind, hash: &Hash, data: &[u8]) -> Result<(), StoreError> {
    if kind.hash(data) == *hash {
        Ok(())
    } else {
        Err(StoreError::Corrupt(format!(
            "chunk {} does not match its hash",
            hex(hash)
        )))
    }
}

/// The first bytes of a hash in hex, to name a chunk in messages.
pub(super) fn hex(hash: &Hash) -> String {
    hash[..8].iter().map(|b| format!("{b:02x}")).collect()
}
