//! What made a store: a name its maker records once, in the `meta` table, so that a
//! program given a store another program made can say so instead of running it.
//!
//! The record is one row of `meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)` under
//! the key `maker`. The table is created by the first record, not by opening: a store
//! written before the record existed opens as it is (and reads as having no maker), and
//! opening a store never writes to it.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::write::Inner;
use crate::StoreError;

/// The key the maker is recorded under.
const MAKER: &str = "maker";

/// Whether the `meta` table exists (a store made before it did has none).
fn has_meta(conn: &Connection) -> Result<bool, StoreError> {
    let found: i64 = conn.query_row(
        "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' AND name = 'meta'",
        [],
        |row| row.get(0),
    )?;
    Ok(found == 1)
}

/// The maker recorded in the store, if any.
pub(super) fn maker(conn: &Connection) -> Result<Option<String>, StoreError> {
    if !has_meta(conn)? {
        return Ok(None);
    }
    let value = conn
        .query_row("SELECT value FROM meta WHERE key = ?1", [MAKER], |row| {
            row.get::<_, String>(0)
        })
        .optional()?;
    Ok(value)
}

/// Records `name` as the maker unless a maker is recorded already, in one transaction;
/// returns the maker recorded after it (`name`, or the one found, unchanged).
pub(super) fn claim(inner: &mut Inner, name: &str) -> Result<String, StoreError> {
    if name.trim().is_empty() {
        return Err(StoreError::Unsupported(
            "a store's maker must be named: the name given is empty".to_owned(),
        ));
    }
    inner.check_writable()?;
    // The path must still name the file opened: a record written to a deleted file
    // would be lost with the process.
    inner.file.check()?;
    let tx = inner
        .conn
        .transaction_with_behavior(TransactionBehavior::Immediate)?;
    if let Some(found) = maker(&tx)? {
        return Ok(found);
    }
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    )?;
    tx.execute(
        "INSERT INTO meta (key, value) VALUES (?1, ?2)",
        [MAKER, name],
    )?;
    tx.commit()?;
    Ok(name.to_owned())
}

#[cfg(test)]
mod tests {
    use crate::{Store, StoreError};

    fn store() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("made.spool");
        (dir, path)
    }

    /// A new store has no maker; the first claim records it, for good.
    #[test]
    fn the_first_claim_is_recorded_and_kept_across_opens() {
        let (_dir, path) = store();
        let store = Store::open(&path).expect("a new store");
        assert_eq!(store.maker().expect("read"), None);
        assert_eq!(store.claim_maker("demo").expect("claimed"), "demo");
        assert_eq!(store.maker().expect("read"), Some("demo".to_owned()));
        drop(store);
        let store = Store::open(&path).expect("opened again");
        assert_eq!(store.maker().expect("read"), Some("demo".to_owned()));
    }

    /// A second claim by another maker changes nothing and says who made the store.
    #[test]
    fn a_claim_on_a_store_made_by_another_returns_that_maker_unchanged() {
        let (_dir, path) = store();
        let store = Store::open(&path).expect("a new store");
        assert_eq!(store.claim_maker("run").expect("claimed"), "run");
        assert_eq!(store.claim_maker("demo").expect("no error"), "run");
        assert_eq!(store.claim_maker("run").expect("no error"), "run");
        drop(store);
        let store = Store::open(&path).expect("opened again");
        assert_eq!(store.maker().expect("read"), Some("run".to_owned()));
    }

    /// A store made before the record existed (no `meta` table) opens, reads as having
    /// no maker, is not written to by opening or reading, and takes a claim.
    #[test]
    fn a_store_without_the_meta_table_opens_and_takes_a_claim() {
        let (_dir, path) = store();
        let store = Store::open(&path).expect("a new store");
        store.start_journal(b"snapshot").expect("started");
        drop(store);
        let before = std::fs::read(&path).expect("the file");
        let store = Store::open(&path).expect("opened again");
        assert_eq!(store.maker().expect("read"), None);
        drop(store);
        assert_eq!(
            std::fs::read(&path).expect("the file"),
            before,
            "opening and reading the maker wrote nothing"
        );
        let store = Store::open(&path).expect("opened again");
        assert_eq!(store.claim_maker("run").expect("claimed"), "run");
        assert_eq!(store.maker().expect("read"), Some("run".to_owned()));
        store
            .verify()
            .expect("the store checks out with its meta table");
    }

    /// An empty name is not a maker.
    #[test]
    fn an_empty_maker_is_refused() {
        let (_dir, path) = store();
        let store = Store::open(&path).expect("a new store");
        match store.claim_maker("  ") {
            Err(StoreError::Unsupported(message)) => assert_eq!(
                message,
                "a store's maker must be named: the name given is empty"
            ),
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(store.maker().expect("read"), None);
    }
}
