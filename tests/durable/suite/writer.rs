//! One writer per store, the maker record, and the counts a store gives of what it
//! wrote and what it holds.

use spool_durable::DurableError;

use super::tasks::prose;
use super::{Backend, answer, open, snapshot, tick};

/// While one handle writes a store, a second `open` of it is refused with `InUse`
/// (naming the store); once the first is dropped, it opens and reads what the first
/// wrote.
pub fn a_second_writer_is_refused(backend: &dyn Backend) {
    let name = "writer_one";
    let first = open(backend, name);
    first.start_journal(&snapshot(1, 10, 1)).unwrap();
    first.append(&tick(1)).unwrap();
    match backend.open(name, &super::Options::default()) {
        Err(DurableError::InUse { what, .. }) => {
            assert!(what.contains(&first.name()), "{what}");
        }
        other => panic!("{}: a second writer: {other:?}", backend.kind()),
    }
    // The first goes on writing.
    assert_eq!(first.append(&tick(2)).unwrap(), 2);
    drop(first);
    let second = open(backend, name);
    assert_eq!(
        second.recover().unwrap().unwrap().entries,
        [tick(1), tick(2)]
    );
}

/// `claim_maker` records the first name and keeps it; `maker` reads it, across a
/// reopen; an empty name is refused. `write_stats` counts what this handle was given
/// (entries and their bytes, checkpoints and their snapshots' bytes), from zero at
/// each open; `sizes` counts what the store holds.
pub fn maker_and_counts(backend: &dyn Backend) {
    let name = "writer_maker";
    let store = open(backend, name);
    assert_eq!(store.maker().unwrap(), None);
    assert_eq!(store.write_stats(), spool_durable::WriteStats::default());
    assert_eq!(store.claim_maker("demo").unwrap(), "demo");
    assert_eq!(store.claim_maker("run").unwrap(), "demo");
    assert!(matches!(
        store.claim_maker(""),
        Err(DurableError::Unsupported(_))
    ));
    assert_eq!(store.maker().unwrap().as_deref(), Some("demo"));

    let (s1, s2) = (snapshot(2, 300, 1), snapshot(3, 300, 2));
    let entries = [tick(1), answer(&prose(4, 10_000)), tick(2)];
    store.start_journal(&s1).unwrap();
    for entry in &entries {
        store.append(entry).unwrap();
    }
    store.write_checkpoint(&s2).unwrap();
    let entry_bytes: u64 = entries
        .iter()
        .map(|e| e.to_bytes().unwrap().len() as u64)
        .sum();
    let stats = store.write_stats();
    assert_eq!(
        (
            stats.entries,
            stats.entry_bytes,
            stats.checkpoints,
            stats.snapshot_bytes
        ),
        (3, entry_bytes, 2, (s1.len() + s2.len()) as u64)
    );
    assert_eq!(stats.task_rows, 0);
    assert!(stats.written() > 0);
    let sizes = store.sizes().unwrap();
    assert_eq!(
        (
            sizes.entries,
            sizes.entry_bytes,
            sizes.checkpoints,
            sizes.snapshot_bytes
        ),
        (3, entry_bytes, 2, (s1.len() + s2.len()) as u64)
    );
    assert!(sizes.file_bytes > 0);
    drop(store);

    let store = open(backend, name);
    assert_eq!(store.maker().unwrap().as_deref(), Some("demo"));
    assert_eq!(store.write_stats(), spool_durable::WriteStats::default());
    store.append(&tick(3)).unwrap();
    let stats = store.write_stats();
    assert_eq!((stats.entries, stats.checkpoints), (1, 0));
    assert_eq!(store.sizes().unwrap().entries, 4);
}
