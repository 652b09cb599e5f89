//! Damaged and foreign files: every one is a typed error, never a panic and never a
//! wrong journal.

use std::path::Path;

use rusqlite::Connection;
use spool_core::JournalError;
use spool_runtime::{Runtime, RuntimeError};
use spool_store::{SCHEMA_VERSION, Store, StoreError};

use crate::api::{answer, open_without_history, snapshot, tick};
use crate::tasks::{prose, registry};

/// A store at `path` with a start, a checkpoint and three entries (the middle one
/// chunked), closed.
fn write_store(path: &Path) {
    let store = open_without_history(path);
    store.start_journal(&snapshot(2, 500, 1)).unwrap();
    store.write_checkpoint(&snapshot(3, 4000, 2)).unwrap();
    store.append(&tick(1)).unwrap();
    store.append(&answer(&prose(5, 3000))).unwrap();
    store.append(&tick(2)).unwrap();
}

/// Runs `sql` on the closed store at `path`, behind its back.
fn tamper(path: &Path, sql: &str) {
    Connection::open(path).unwrap().execute_batch(sql).unwrap();
}

/// A file that is not an SQLite database, another program's SQLite database, and a
/// store of a newer schema are each refused with their own error; an empty file is
/// made a new store.
#[test]
fn files_that_are_not_stores_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(
        &text,
        "these are not the pages you are looking for\n".repeat(200),
    )
    .unwrap();
    match Store::open(&text) {
        Err(StoreError::NotAStore { path, reason }) => {
            assert_eq!(path, text);
            assert_eq!(reason, "not an SQLite database");
        }
        other => panic!("{other:?}"),
    }

    let other = dir.path().join("other.db");
    tamper(
        &other,
        "CREATE TABLE songs (title TEXT); PRAGMA application_id = 42;",
    );
    match Store::open(&other) {
        Err(StoreError::NotAStore { reason, .. }) => {
            assert_eq!(
                reason,
                "an SQLite database of another program (application_id 0x2a)"
            );
        }
        other => panic!("{other:?}"),
    }

    let newer = dir.path().join("newer.spool");
    write_store(&newer);
    tamper(
        &newer,
        &format!("PRAGMA user_version = {};", SCHEMA_VERSION + 1),
    );
    assert!(matches!(
        Store::open(&newer),
        Err(StoreError::NewerSchema {
            found: 5,
            supported: 4
        })
    ));

    let empty = dir.path().join("empty.spool");
    std::fs::write(&empty, b"").unwrap();
    let store = Store::open(&empty).unwrap();
    assert_eq!(store.recover().unwrap(), None);
}

/// A file marked as a spool store but of no schema version spool wrote, and a store
/// that lost a table, are refused when opened, each with what is wrong.
#[test]
fn a_store_without_its_version_or_a_table_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let unversioned = dir.path().join("unversioned.spool");
    tamper(
        &unversioned,
        &format!(
            "CREATE TABLE songs (title TEXT); PRAGMA application_id = {};",
            spool_store::APPLICATION_ID
        ),
    );
    match Store::open(&unversioned) {
        Err(StoreError::NotAStore { path, reason }) => {
            assert_eq!(path, unversioned);
            assert_eq!(reason, "schema version 0, which no spool wrote");
        }
        other => panic!("{other:?}"),
    }

    let tableless = dir.path().join("tableless.spool");
    write_store(&tableless);
    tamper(&tableless, "DROP TABLE tasks;");
    assert_eq!(
        Store::open(&tableless).unwrap_err().to_string(),
        "the store is damaged: the table `tasks` is missing"
    );
}

/// Bytes flipped in the file where a chunk's data lies: the store opens (SQLite's
/// pages are sound) but recovering is `Corrupt` — the chunk no longer matches its
/// hash — and so is `verify`; nothing damaged is handed to a replay.
#[test]
fn a_chunk_damaged_in_the_file_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flipped.spool");
    write_store(&path);
    assert!(!dir.path().join("flipped.spool-wal").exists());
    let mut bytes = std::fs::read(&path).unwrap();
    let marker = b"worker-2";
    let at: Vec<usize> = bytes
        .windows(marker.len())
        .enumerate()
        .filter(|(_, w)| *w == marker)
        .map(|(i, _)| i)
        .collect();
    assert!(!at.is_empty(), "the snapshot's text is in the file");
    for i in at {
        bytes[i] ^= 0x20;
    }
    std::fs::write(&path, &bytes).unwrap();

    let store = Store::open(&path).unwrap();
    match store.recover() {
        Err(StoreError::Corrupt(message)) => {
            assert!(message.ends_with("does not match its hash"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        store.latest_snapshot(),
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(store.verify(), Err(StoreError::Corrupt(_))));
}

/// Rows removed or altered behind the store's back: a missing chunk, a missing
/// entry, an entry that is not an entry, a wrong length, a value of the wrong type, a
/// wrong reference count — each its typed error.
#[test]
fn missing_and_altered_rows_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let check = |name: &str, sql: &str| -> StoreError {
        let path = dir.path().join(name);
        write_store(&path);
        Store::open(&path).unwrap().recover().unwrap();
        tamper(&path, sql);
        let store = Store::open(&path).unwrap();
        let verified = store.verify();
        assert!(
            matches!(verified, Err(StoreError::Corrupt(_))),
            "{name}: {verified:?}"
        );
        store.recover().unwrap_err()
    };

    let error = check(
        "chunk.spool",
        "DELETE FROM chunks WHERE kind = 0 AND id = (SELECT MAX(id) FROM chunks WHERE kind = 0);",
    );
    assert!(
        matches!(&error, StoreError::Corrupt(m) if m.ends_with("is missing")),
        "{error}"
    );

    let error = check("entry.spool", "DELETE FROM entries WHERE seq = 2;");
    assert_eq!(
        error.to_string(),
        "the store is damaged: journal entry 2 is missing (the next kept is 3)"
    );

    let error = check(
        "garbled.spool",
        "UPDATE entries SET body = x'ffffffff', len = 4 WHERE seq = 3;",
    );
    assert_eq!(
        error.to_string(),
        "the store is damaged: journal entry 3 does not match its checksum"
    );

    let error = check("length.spool", "UPDATE checkpoints SET len = len + 1;");
    assert_eq!(
        error.to_string(),
        "the store is damaged: checkpoint 2 does not match its checksum"
    );

    let error = check(
        "type.spool",
        "UPDATE entries SET len = 'long' WHERE seq = 1;",
    );
    assert_eq!(
        error.to_string(),
        "the store is damaged: journal entry 1: `len` holds text, not an integer"
    );
    let error = check(
        "text.spool",
        "UPDATE checkpoints SET roots = CAST(roots AS TEXT) WHERE id = 2;",
    );
    assert_eq!(
        error.to_string(),
        "the store is damaged: checkpoint 2: `roots` holds text, not a blob"
    );

    // A row renumbered, or two rows swapped, no longer match their checksums.
    let error = check(
        "renumbered.spool",
        "UPDATE entries SET seq = 4 WHERE seq = 3;",
    );
    assert_eq!(
        error.to_string(),
        "the store is damaged: journal entry 4 does not match its checksum"
    );
    let error = check(
        "swapped.spool",
        "UPDATE entries SET seq = 0 WHERE seq = 1; UPDATE entries SET seq = 1 WHERE seq = 3;
         UPDATE entries SET seq = 3 WHERE seq = 0;",
    );
    assert_eq!(
        error.to_string(),
        "the store is damaged: journal entry 1 does not match its checksum"
    );

    // What a dropped tail looks like: the head row knows what was committed.
    let error = check("tail.spool", "DELETE FROM entries WHERE seq = 3;");
    assert_eq!(
        error.to_string(),
        "the store is damaged: journal entry 3, the last committed, is missing"
    );
    let error = check("tail2.spool", "DELETE FROM entries WHERE seq >= 2;");
    assert_eq!(
        error.to_string(),
        "the store is damaged: journal entries 2 to 3, the last committed, are missing"
    );
    let error = check("latest.spool", "DELETE FROM checkpoints WHERE id = 2;");
    assert_eq!(
        error.to_string(),
        "the store is damaged: checkpoint 2, the latest, is missing"
    );
    for (name, sql, expected) in [
        (
            "head.spool",
            "UPDATE head SET last_seq = 2;",
            "the head row does not match its checksum",
        ),
        (
            "headless.spool",
            "DELETE FROM head;",
            "the head row is missing",
        ),
    ] {
        let path = dir.path().join(name);
        write_store(&path);
        tamper(&path, sql);
        assert_eq!(
            Store::open(&path).unwrap_err().to_string(),
            format!("the store is damaged: {expected}")
        );
    }

    let path = dir.path().join("refs.spool");
    write_store(&path);
    tamper(&path, "UPDATE chunks SET refs = refs + 1 WHERE id = 1;");
    let store = Store::open(&path).unwrap();
    match store.verify() {
        Err(StoreError::Corrupt(m)) => assert!(m.contains("counts 2 references"), "{m}"),
        other => panic!("{other:?}"),
    }
}

/// `verify` checks in a fixed order and stops at the first thing wrong: the latest
/// checkpoint, then every row (entries, task rows, chunks: key, kind, hash), then the
/// reference counts, then the journal's span, then what a recovery reads. Most damage
/// here breaks more than one of these; the message is the first one's.
#[test]
fn verify_reports_the_first_thing_wrong_in_its_order() {
    let dir = tempfile::tempdir().unwrap();
    let verified = |name: &str, sql: &str| -> String {
        let path = dir.path().join(name);
        write_store(&path);
        tamper(&path, sql);
        match Store::open(&path).unwrap().verify() {
            Err(error) => error.to_string(),
            Ok(()) => format!("{name}: verified"),
        }
    };
    let seen: Vec<String> = [
        // The latest checkpoint gone: its chunks' counts are wrong too.
        ("latest", "DELETE FROM checkpoints WHERE id = 2;"),
        // An entry's row garbled: also a gap in the journal.
        (
            "garbled",
            "UPDATE entries SET body = x'ffffffff', len = 4 WHERE seq = 3;",
        ),
        ("key", "UPDATE chunks SET hash = x'00' WHERE id = 1;"),
        ("kind", "UPDATE chunks SET kind = 9 WHERE id = 1;"),
        ("hash", "UPDATE chunks SET data = x'00' WHERE id = 1;"),
        // A count off by one, and an entry missing: the count is found first.
        (
            "count",
            "UPDATE chunks SET refs = refs + 1 WHERE id = 1; DELETE FROM entries WHERE seq = 1;",
        ),
        (
            "chunk",
            "DELETE FROM chunks WHERE kind = 0 AND id = (SELECT MAX(id) FROM chunks WHERE kind = 0);",
        ),
        ("gap", "DELETE FROM entries WHERE seq = 1;"),
        ("tail", "DELETE FROM entries WHERE seq = 3;"),
    ]
    .into_iter()
    .map(|(name, sql)| verified(name, sql))
    .collect();
    let expected = [
        "checkpoint 2, the latest, is missing",
        "journal entry 3 does not match its checksum",
        "a chunk's key has 1 bytes",
        "chunk ee8aeb967f879a3a has the unknown kind 9",
        "chunk ee8aeb967f879a3a does not match its hash",
        "chunk ee8aeb967f879a3a counts 2 references, but 1 refer to it",
        "chunk a7256a8891130d4a is referenced but missing",
        "journal entries are missing: 2 kept from 2 to 3, the oldest checkpoint after 0",
        // Found by reading the journal as a recovery does.
        "journal entry 3, the last committed, is missing",
    ]
    .map(|message| format!("the store is damaged: {message}"));
    assert_eq!(seen, expected);
}

/// With every chunk's count wrong, `verify` names the chunk with the smallest hash, the
/// same on every run: the counts are compared in hash order, never in a hash map's.
#[test]
fn with_many_counts_wrong_verify_names_the_same_chunk_every_time() {
    let dir = tempfile::tempdir().unwrap();
    let seen: Vec<String> = (0..6)
        .map(|i| {
            let path = dir.path().join(format!("counts-{i}.spool"));
            write_store(&path);
            tamper(&path, "UPDATE chunks SET refs = refs + 1;");
            Store::open(&path)
                .unwrap()
                .verify()
                .unwrap_err()
                .to_string()
        })
        .collect();
    let path = dir.path().join("counts-0.spool");
    let conn = Connection::open(&path).unwrap();
    let chunks: i64 = conn
        .query_row("SELECT COUNT(*) FROM chunks", [], |row| row.get(0))
        .unwrap();
    assert!(chunks > 2, "{chunks} chunks: too few to tell an order");
    let smallest: String = conn
        .query_row(
            "SELECT lower(hex(substr(hash, 1, 8))) FROM chunks ORDER BY hash LIMIT 1",
            [],
            |row| row.get(0),
        )
        .unwrap();
    let refs: i64 = conn
        .query_row("SELECT refs FROM chunks ORDER BY hash LIMIT 1", [], |row| {
            row.get(0)
        })
        .unwrap();
    let expected = format!(
        "the store is damaged: chunk {smallest} counts {refs} references, but {} refer to it",
        refs - 1
    );
    assert_eq!(seen, vec![expected; 6]);
}

/// A file cut short (a disk that lost its tail): a typed error, not a panic.
#[test]
fn a_truncated_file_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("short.spool");
    write_store(&path);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let result = Store::open(&path).and_then(|store| {
        store.verify()?;
        store.recover()
    });
    assert!(matches!(result, Err(StoreError::Corrupt(_))), "{result:?}");
}

/// One ASCII digit changed on disk inside a small (inline) journal entry — an answer
/// `311 * 40 = 12440.` becoming `12449.` — is found when the store is read, naming the
/// entry; the changed answer is never handed to a replay.
#[test]
fn a_digit_changed_in_a_small_entry_on_disk_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("digit.spool");
    {
        let store = Store::open(&path).unwrap();
        store.start_journal(&snapshot(1, 100, 1)).unwrap();
        store.append(&tick(1)).unwrap();
        let small = answer("311 * 40 = 12440.");
        assert!(small.to_bytes().unwrap().len() <= spool_store::INLINE_MAX);
        assert_eq!(store.append(&small).unwrap(), 2);
        store.append(&tick(2)).unwrap();
    }
    assert!(!dir.path().join("digit.spool-wal").exists());
    let mut bytes = std::fs::read(&path).unwrap();
    let at = find(&bytes, b"12440.");
    assert_eq!(at.len(), 1, "the answer is in the file once");
    bytes[at[0] + 4] = b'9';
    std::fs::write(&path, &bytes).unwrap();

    let store = Store::open(&path).unwrap();
    let expected = "the store is damaged: journal entry 2 does not match its checksum";
    assert_eq!(store.recover().unwrap_err().to_string(), expected);
    assert_eq!(store.verify().unwrap_err().to_string(), expected);
}

/// A checkpoint's `last_seq` changed on disk (which made finished agents show as
/// waiting and requests be sent again) is found, naming the checkpoint; so is its
/// snapshot's length.
#[test]
fn a_checkpoint_field_changed_on_disk_is_found() {
    for (name, sql) in [
        ("last_seq", "UPDATE checkpoints SET last_seq = last_seq + 1"),
        ("last_seq-down", "UPDATE checkpoints SET last_seq = 0"),
        (
            "roots",
            "UPDATE checkpoints SET roots = CAST(roots || roots AS BLOB)",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{name}.spool"));
        {
            let store = Store::open(&path).unwrap();
            store.start_journal(&snapshot(2, 500, 1)).unwrap();
            store.append(&tick(1)).unwrap();
            store.append(&tick(2)).unwrap();
            store.write_checkpoint(&snapshot(3, 500, 2)).unwrap();
            store.append(&tick(3)).unwrap();
        }
        tamper(&path, &format!("{sql} WHERE id = 2;"));
        let store = Store::open(&path).unwrap();
        let expected = "the store is damaged: checkpoint 2 does not match its checksum";
        assert_eq!(store.recover().unwrap_err().to_string(), expected, "{name}");
        assert_eq!(
            store.latest_snapshot().unwrap_err().to_string(),
            expected,
            "{name}"
        );
        assert_eq!(
            store.checkpoints().unwrap_err().to_string(),
            expected,
            "{name}"
        );
        assert_eq!(store.verify().unwrap_err().to_string(), expected, "{name}");
        // Writing on does not build on the damaged row either.
        assert_eq!(
            store
                .write_checkpoint(&snapshot(1, 10, 3))
                .unwrap_err()
                .to_string(),
            expected,
            "{name}"
        );
    }
}

/// A version-1 store (no row checksums) is refused with its own error.
#[test]
fn a_version_1_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.spool");
    write_store(&path);
    tamper(&path, "PRAGMA user_version = 1;");
    let error = Store::open(&path).unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::OlderSchema {
                found: 1,
                supported: 4
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "the store has schema version 1, older than this build reads (4): finish its run \
         with the spool that wrote it, or start a new store"
    );
}

/// Where `needle` is in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Vec<usize> {
    haystack
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect()
}

/// A runtime built on a damaged store is an error, not a panic. The damage is where a
/// recovery does not read but starting the new journal does (the older of two kept
/// checkpoints, whose chunks the start releases): the store recovers, and `try_build`
/// returns the store's error.
#[test]
fn a_runtime_on_a_damaged_store_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("older.spool");
    {
        let store = Store::open(&path).unwrap();
        store.start_journal(&snapshot(2, 500, 1)).unwrap();
        store.append(&tick(1)).unwrap();
        store.write_checkpoint(&snapshot(3, 500, 2)).unwrap();
        store.append(&tick(2)).unwrap();
    }
    tamper(&path, "UPDATE checkpoints SET len = len + 1 WHERE id = 1;");
    let store = Store::open(&path).unwrap();
    let journal = store.recover().unwrap().unwrap();
    let built = Runtime::builder()
        .recover(&journal, &registry())
        .unwrap()
        .journal(store.clone())
        .try_build();
    match built {
        Err(error) => {
            assert!(
                matches!(&error, RuntimeError::JournalStart(JournalError::Sink(_))),
                "{error:?}"
            );
            assert_eq!(
                error.to_string(),
                "the runtime's journal could not start: the journal's sink failed: \
                 the store is damaged: checkpoint 1 does not match its checksum"
            );
            // The store's own error is kept as the source, for a caller to inspect.
            let store_error = std::error::Error::source(&error)
                .and_then(std::error::Error::source)
                .and_then(|e| e.downcast_ref::<spool_store::StoreError>());
            assert!(
                matches!(store_error, Some(spool_store::StoreError::Corrupt(_))),
                "{store_error:?}"
            );
        }
        Ok(_) => panic!("a runtime was built on a damaged store"),
    }
    // Nothing was written: the store recovers as before.
    assert_eq!(store.recover().unwrap(), Some(journal));
}
