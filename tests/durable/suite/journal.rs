//! The journal's numbering, the kept checkpoints, and reading them back: what
//! `start_journal`, `write_checkpoint` and `append` return, what `checkpoints` lists,
//! and what `recover`, `recover_from` and `latest_snapshot` give.

use spool_core::Snapshot;
use spool_durable::DurableError;

use super::tasks::prose;
use super::{Backend, Options, answer, open, snapshot, tick};

/// `(id, after_entry, entries_after, snapshot_bytes)` of every kept checkpoint.
fn kept(store: &dyn spool_durable::DurableStore) -> Vec<(u64, u64, u64, u64)> {
    store
        .checkpoints()
        .unwrap()
        .iter()
        .map(|c| (c.id, c.after_entry, c.entries_after, c.snapshot_bytes))
        .collect()
}

/// A new store holds nothing: no journal, no checkpoint, no snapshot, nothing to
/// recover from; it verifies, and reopens as the same empty store.
pub fn an_empty_store(backend: &dyn Backend) {
    let store = open(backend, "journal_empty");
    assert_eq!(store.recover().unwrap(), None);
    assert_eq!(store.latest_snapshot().unwrap(), None);
    assert_eq!(kept(&*store), []);
    store.verify().unwrap();
    let sizes = store.sizes().unwrap();
    assert_eq!((sizes.entries, sizes.checkpoints), (0, 0));
    assert_eq!(store.maker().unwrap(), None);
    drop(store);
    let store = open(backend, "journal_empty");
    assert_eq!(store.recover().unwrap(), None);
    assert!(matches!(
        store.recover_from(1),
        Err(DurableError::NoCheckpoint(1))
    ));
}

/// Checkpoint ids count from 1 and entries from 1, across checkpoints and reopens;
/// every checkpoint lists the entry before it and the entries after it; a recovery
/// gives the latest checkpoint's snapshot byte for byte and the entries after it in
/// order, small and large alike; a new journal drops everything before it.
pub fn numbering_and_checkpoints(backend: &dyn Backend) {
    let name = "journal_numbering";
    let (s1, s2, s3) = (
        snapshot(2, 500, 1),
        snapshot(3, 4000, 2),
        snapshot(1, 100, 3),
    );
    let big = answer(&prose(9, 20_000));
    {
        let store = open(backend, name);
        assert_eq!(store.start_journal(&s1).unwrap(), 1);
        assert_eq!(store.append(&tick(1)).unwrap(), 1);
        assert_eq!(store.append(&big).unwrap(), 2);
        assert_eq!(store.append(&tick(2)).unwrap(), 3);
        assert_eq!(store.write_checkpoint(&s2).unwrap(), 2);
        assert_eq!(store.append(&tick(3)).unwrap(), 4);
        let len = |s: &[u8]| s.len() as u64;
        assert_eq!(kept(&*store), [(1, 0, 4, len(&s1)), (2, 3, 1, len(&s2))]);
        let journal = store.recover().unwrap().unwrap();
        assert_eq!(journal.start, s2);
        assert_eq!(journal.entries, [tick(3)]);
        assert_eq!(
            store.latest_snapshot().unwrap(),
            Some(Snapshot::decode(&s2).unwrap())
        );
        store.verify().unwrap();
    }
    // Reopened, the numbers go on.
    let store = open(backend, name);
    assert_eq!(store.append(&tick(5)).unwrap(), 5);
    assert_eq!(
        store.recover().unwrap().unwrap().entries,
        [tick(3), tick(5)]
    );
    let older = store.recover_from(1).unwrap();
    assert_eq!(older.start, s1);
    assert_eq!(older.entries, [tick(1), big, tick(2), tick(3), tick(5)]);

    // A new journal: the one checkpoint kept, nothing after it; numbers go on.
    assert_eq!(store.start_journal(&s3).unwrap(), 3);
    assert_eq!(kept(&*store), [(3, 5, 0, s3.len() as u64)]);
    let journal = store.recover().unwrap().unwrap();
    assert_eq!((journal.start, journal.entries), (s3.clone(), vec![]));
    assert!(matches!(
        store.recover_from(1),
        Err(DurableError::NoCheckpoint(1))
    ));
    assert_eq!(store.append(&tick(6)).unwrap(), 6);
    assert_eq!(store.recover().unwrap().unwrap().entries, [tick(6)]);
    store.verify().unwrap();
}

/// With `keep_checkpoints` 2 (and with 3), a checkpoint drops the oldest beyond it and
/// the entries only it needed; `recover_from` reads any kept one and refuses a
/// dropped one with `NoCheckpoint`.
pub fn kept_checkpoints_and_recover_from(backend: &dyn Backend) {
    for keep in [2, 3] {
        let name = format!("journal_keep_{keep}");
        let options = Options {
            keep_checkpoints: Some(keep),
            ..Options::default()
        };
        let store = backend.open(&name, &options).unwrap();
        let snaps: Vec<Vec<u8>> = (0..5).map(|i| snapshot(2, 300, 10 + i)).collect();
        assert_eq!(store.start_journal(&snaps[0]).unwrap(), 1);
        let mut seq = 0;
        for (i, snap) in snaps.iter().enumerate().skip(1) {
            // `i` entries before checkpoint `i + 1`.
            for _ in 0..i {
                seq += 1;
                assert_eq!(store.append(&tick(seq)).unwrap(), seq);
            }
            assert_eq!(store.write_checkpoint(snap).unwrap(), i as u64 + 1);
        }
        seq += 1;
        assert_eq!(store.append(&tick(seq)).unwrap(), seq);
        // Checkpoint 5 is after entry 10, 4 after 6, 3 after 3; entry 11 after all.
        let expected: Vec<(u64, u64, u64, u64)> = [(3, 3), (4, 6), (5, 10)]
            .into_iter()
            .skip(3 - keep)
            .map(|(id, after)| (id, after, 11 - after, snaps[id as usize - 1].len() as u64))
            .collect();
        assert_eq!(kept(&*store), expected, "keep {keep}");
        for (id, after, ..) in &expected {
            let journal = store.recover_from(*id).unwrap();
            assert_eq!(journal.start, snaps[*id as usize - 1]);
            let ticks: Vec<_> = (after + 1..=11).map(tick).collect();
            assert_eq!(journal.entries, ticks, "keep {keep}, from {id}");
        }
        let dropped = 5 - keep as u64;
        assert!(
            matches!(store.recover_from(dropped), Err(DurableError::NoCheckpoint(id)) if id == dropped),
            "keep {keep}"
        );
        assert!(matches!(
            store.recover_from(99),
            Err(DurableError::NoCheckpoint(99))
        ));
        assert_eq!(store.sizes().unwrap().checkpoints, keep as u64);
        assert_eq!(store.sizes().unwrap().entries, 11 - expected[0].1);
        store.verify().unwrap();
    }
}
