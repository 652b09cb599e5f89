//! What a store holds ([`StoreSizes`]), read from the file.

use rusqlite::Connection;

use super::rows::count;
use crate::StoreError;
use spool_durable::StoreSizes;

/// What the store holds now: what [`Store::sizes`](crate::Store::sizes) reads.
pub(super) fn sizes(conn: &Connection) -> Result<StoreSizes, StoreError> {
    let sum = |sql: &str| -> Result<(u64, u64, u64), StoreError> {
        let (a, b, c): (i64, i64, i64) =
            conn.query_row(sql, [], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
        Ok((count(a, "a sum")?, count(b, "a sum")?, count(c, "a sum")?))
    };
    let (chunks, chunk_bytes, _) =
        sum("SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0), 0 FROM chunks")?;
    let (index_chunks, index_bytes, _) =
        sum("SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0), 0 FROM chunks WHERE kind = 1")?;
    let (entries, entry_bytes, entry_rows) =
        sum("SELECT COUNT(*), COALESCE(SUM(len), 0), COALESCE(SUM(LENGTH(body)), 0) FROM entries")?;
    let (checkpoints, snapshot_bytes, roots) = sum(
        "SELECT COUNT(*), COALESCE(SUM(len), 0), COALESCE(SUM(LENGTH(roots)), 0) FROM checkpoints",
    )?;
    let (pages, page_size, free) = sum("SELECT (SELECT page_count FROM pragma_page_count),
                    (SELECT page_size FROM pragma_page_size),
                    (SELECT freelist_count FROM pragma_freelist_count)")?;
    let mut sizes = StoreSizes::default();
    sizes.chunks = chunks;
    sizes.chunk_bytes = chunk_bytes;
    sizes.index_chunks = index_chunks;
    sizes.index_bytes = index_bytes;
    sizes.entries = entries;
    sizes.entry_bytes = entry_bytes;
    sizes.checkpoints = checkpoints;
    sizes.snapshot_bytes = snapshot_bytes;
    sizes.row_bytes = entry_rows + roots;
    sizes.file_bytes = pages * page_size;
    sizes.free_bytes = free * page_size;
    Ok(sizes)
}
