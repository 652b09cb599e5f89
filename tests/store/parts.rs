//! Checkpoints in parts on the store: the header as the checkpoint's blob, a row per
//! task, rows written only for the tasks that changed; recovery puts them together into
//! the very snapshot the scheduler takes whole; damaged or missing rows are typed
//! errors.

use std::path::Path;

use rusqlite::Connection;
use serde_json::json;
use spool_core::{Config, DecodeError, JournalSink, NewTask, Response, Scheduler, Time};
use spool_store::{Store, StoreError};

use crate::api::open_without_history;
use crate::tasks::Worker;

/// A scheduler of `n` workers, polled once: each has one request out.
fn workers(n: usize) -> Scheduler {
    let mut s = Scheduler::new(Config::new());
    for i in 0..n {
        s.submit(
            Time::ZERO,
            NewTask::new(Worker::new(&format!("w{i}"), 4, None)),
        )
        .unwrap();
    }
    while s.step(Time::ZERO).is_some() {}
    s
}

/// Answers `k` requests and polls what they woke.
fn answer(s: &mut Scheduler, k: usize) {
    let out: Vec<_> = std::iter::from_fn(|| s.poll_request()).collect();
    for request in out.into_iter().take(k) {
        let _ = s.handle_response(Time::ZERO, Response::ok(request.key, json!("ok")));
    }
    while s.step(Time::ZERO).is_some() {}
}

/// A store at `path` whose journal starts at `s` and that holds a checkpoint in parts
/// of `s` now (full), then one after `k` answers (only the tasks those changed).
fn write(path: &Path, s: &mut Scheduler, k: usize) -> Store {
    let store = open_without_history(path);
    let mut sink = store.clone();
    sink.start(&s.snapshot().unwrap().encode().unwrap())
        .unwrap();
    let full = s.snapshot_changes().unwrap();
    assert!(full.full);
    sink.checkpoint_parts(full).unwrap();
    sink.commit().unwrap();
    answer(s, k);
    let changed = s.snapshot_changes().unwrap();
    assert!(!changed.full);
    assert_eq!(changed.rows.len(), k, "the tasks answered, and no other");
    sink.checkpoint_parts(changed).unwrap();
    sink.commit().unwrap();
    store
}

#[test]
fn a_checkpoint_in_parts_recovers_the_whole_snapshot_and_writes_only_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = workers(50);
    let store = write(&dir.path().join("parts.spool"), &mut s, 7);
    let written = store.write_stats();
    assert_eq!(written.task_rows, 50 + 7);
    let journal = store.recover().unwrap().unwrap();
    assert_eq!(journal.start, s.snapshot().unwrap().encode().unwrap());
    assert!(journal.entries.is_empty());
    store.verify().unwrap();
    assert_eq!(
        store.checkpoints().unwrap().len(),
        1,
        "only the latest in parts is kept"
    );

    // A whole checkpoint after parts drops the task rows; it recovers as itself.
    answer(&mut s, 3);
    let whole = s.snapshot().unwrap().encode().unwrap();
    store.write_checkpoint(&whole).unwrap();
    assert_eq!(store.recover().unwrap().unwrap().start, whole);
    store.verify().unwrap();
    let path = store.path().to_owned();
    drop(store);
    let rows: i64 = Connection::open(path)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 0);
}

#[test]
fn a_damaged_or_missing_task_row_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.spool");
    let mut s = workers(10);
    drop(write(&path, &mut s, 2));
    let tamper = |sql: &str| Connection::open(&path).unwrap().execute_batch(sql).unwrap();

    tamper(
        "UPDATE tasks SET body = CAST(REPLACE(CAST(body AS TEXT), 'w3', 'w9') AS BLOB) WHERE task = 4;",
    );
    let error = Store::open(&path).unwrap().recover().unwrap_err();
    assert_eq!(
        error.to_string(),
        StoreError::Corrupt("the row of task 4 does not match its checksum".into()).to_string()
    );

    tamper("DELETE FROM tasks WHERE task = 4;");
    match Store::open(&path).unwrap().recover() {
        Err(StoreError::Snapshot(DecodeError::Invalid(reason))) => {
            assert_eq!(
                reason,
                "the checkpoint has 9 task rows, its header counts 10"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(Store::open(&path).unwrap().verify().is_err());
}
