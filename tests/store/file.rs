//! The store's file as a file: created for its owner alone, and a store whose file is
//! deleted or replaced while open writes nothing more.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use spool_store::{Store, StoreError};

use crate::api::{snapshot, tick};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn with_suffix(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}

/// A new store's file, its write-ahead log and its lock file are readable and
/// writable by their owner alone, whatever the umask lets through. (The store holds
/// its database exclusively, so SQLite keeps the log's index in memory: no `-shm`.)
#[test]
fn a_new_store_s_files_are_its_owners_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("private.spool");
    let store = Store::open(&path).unwrap();
    store.start_journal(&snapshot(2, 100, 1)).unwrap();
    store.append(&tick(1)).unwrap();
    let modes: Vec<(&str, u32)> = ["", "-wal", ".lock"]
        .into_iter()
        .map(|suffix| (suffix, mode(&with_suffix(&path, suffix))))
        .collect();
    assert_eq!(modes, [("", 0o600), ("-wal", 0o600), (".lock", 0o600)]);
}

/// The error a write gets once the store's file is gone, naming it.
fn gone(path: &Path) -> String {
    format!(
        "the store file {} was deleted or replaced while in use: nothing more is written \
         to it. Everything written before (every task acknowledged until now) is in the \
         deleted file, lost when this process ends; a store opened at {0} afterwards \
         does not hold it",
        path.display()
    )
}

/// A store whose file is deleted while it is open refuses every later write with an
/// error naming the file, instead of writing on into a file nobody can open again.
#[test]
fn a_store_whose_file_is_deleted_refuses_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deleted.spool");
    let store = Store::open(&path).unwrap();
    store.start_journal(&snapshot(1, 10, 2)).unwrap();
    assert_eq!(store.append(&tick(1)).unwrap(), 1);
    std::fs::remove_file(&path).unwrap();
    let error = store.append(&tick(2)).unwrap_err();
    assert!(
        matches!(&error, StoreError::FileGone { path: named } if named == &path),
        "{error:?}"
    );
    assert_eq!(error.to_string(), gone(&path));
    // And it stays refused.
    assert!(matches!(
        store.write_checkpoint(&snapshot(1, 10, 2)),
        Err(StoreError::FileGone { .. })
    ));
}

/// Another file put at the store's path (a restore from a backup copied over it) is
/// not the file the store has open: its writes are refused too.
#[test]
fn a_store_whose_file_is_replaced_refuses_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replaced.spool");
    let store = Store::open(&path).unwrap();
    store.start_journal(&snapshot(1, 10, 3)).unwrap();
    let other = dir.path().join("other");
    std::fs::write(&other, b"").unwrap();
    std::fs::rename(&other, &path).unwrap();
    let error = store.append(&tick(1)).unwrap_err();
    assert_eq!(error.to_string(), gone(&path));
}
