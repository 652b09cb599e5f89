//! Damaged and foreign files: every one is a typed error, never a panic and never a
//! wrong journal.

use std::path::Path;

use rusqlite::Connection;
use spool_store::{SCHEMA_VERSION, Store, StoreError};

use crate::api::{answer, snapshot, tick};
use crate::tasks::prose;

/// A store at `path` with a start, a checkpoint and three entries (the middle one
/// chunked), closed.
fn write_store(path: &Path) {
    let store = Store::open(path).unwrap();
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
            found: 2,
            supported: 1
        })
    ));

    let empty = dir.path().join("empty.spool");
    std::fs::write(&empty, b"").unwrap();
    let store = Store::open(&empty).unwrap();
    assert_eq!(store.recover().unwrap(), None);
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

    let path = dir.path().join("garbled.spool");
    write_store(&path);
    tamper(
        &path,
        "UPDATE entries SET body = x'ffffffff', len = 4 WHERE seq = 3;",
    );
    let store = Store::open(&path).unwrap();
    assert!(matches!(
        store.verify(),
        Err(StoreError::Entry { seq: 3, .. })
    ));
    assert!(matches!(
        store.recover(),
        Err(StoreError::Entry { seq: 3, .. })
    ));
    drop(store);

    let error = check("length.spool", "UPDATE checkpoints SET len = len + 1;");
    assert!(
        matches!(&error, StoreError::Corrupt(m) if m.contains("not the")),
        "{error}"
    );

    let error = check(
        "type.spool",
        "UPDATE entries SET len = 'long' WHERE seq = 1;",
    );
    assert!(matches!(&error, StoreError::Corrupt(_)), "{error}");

    let path = dir.path().join("refs.spool");
    write_store(&path);
    tamper(&path, "UPDATE chunks SET refs = refs + 1 WHERE id = 1;");
    let store = Store::open(&path).unwrap();
    match store.verify() {
        Err(StoreError::Corrupt(m)) => assert!(m.contains("counts 2 references"), "{m}"),
        other => panic!("{other:?}"),
    }
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
