//! The store on its own: opening, locking, appending and checkpointing, what is
//! kept and what is dropped, and repeated content stored once.

use serde_json::json;
use spool_core::{Config, JournalEntry, NewTask, Response, Scheduler, Snapshot, Time};
use spool_store::{Durability, History, Store, StoreError, StoreOptions};

use crate::tasks::{Worker, prose};

/// Opens the store at `path` keeping no history: what the tests of the latest
/// checkpoints and their chunks look at.
pub(crate) fn open_without_history(path: impl AsRef<std::path::Path>) -> Store {
    Store::open_with(path, StoreOptions::new().history(History::off())).unwrap()
}

/// A scheduler holding `workers` workers, each with a log of `log_len` bytes of prose
/// (seeded by `seed`), encoded as a snapshot.
pub(crate) fn snapshot(workers: u32, log_len: usize, seed: u64) -> Vec<u8> {
    let mut scheduler = Scheduler::new(Config::new());
    for i in 0..workers {
        let mut worker = Worker::new(&format!("worker-{i}"), 10, None);
        worker.log.push(prose(seed * 1000 + u64::from(i), log_len));
        scheduler.submit(Time::ZERO, NewTask::new(worker)).unwrap();
    }
    scheduler.snapshot().unwrap().encode().unwrap()
}

/// A small entry.
pub(crate) fn tick(ms: u64) -> JournalEntry {
    JournalEntry::Timeout {
        at: Time::from_nanos(ms * 1_000_000),
    }
}

/// An entry carrying `text` (an answer), chunked when long.
pub(crate) fn answer(text: &str) -> JournalEntry {
    let mut scheduler = Scheduler::new(Config::new());
    let id = scheduler
        .submit(Time::ZERO, NewTask::new(Worker::new("w", 1, None)))
        .unwrap()
        .id;
    let _ = scheduler.step(Time::ZERO);
    let out = scheduler.poll_request().unwrap();
    assert_eq!(out.key.task(), id);
    JournalEntry::answer(Time::ZERO, &Response::ok(out.key, json!(text)))
}

/// A new store recovers nothing and lists nothing; it reopens as the same (empty)
/// store; recovering from a checkpoint it does not keep is a typed error.
#[test]
fn a_new_store_is_empty_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.spool");
    let store = Store::open(&path).unwrap();
    assert_eq!(store.path(), path.as_path());
    assert_eq!(store.recover().unwrap(), None);
    assert_eq!(store.latest_snapshot().unwrap(), None);
    assert_eq!(store.checkpoints().unwrap(), Vec::new());
    let sizes = store.sizes().unwrap();
    assert_eq!(
        (
            sizes.chunks,
            sizes.entries,
            sizes.checkpoints,
            sizes.stored()
        ),
        (0, 0, 0, 0)
    );
    assert!(sizes.file_bytes > 0);
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.recover().unwrap(), None);
    store.verify().unwrap();
    assert!(matches!(
        store.recover_from(7),
        Err(StoreError::NoCheckpoint(7))
    ));
}

/// One handle holds a store at a time: a second open while the first is alive is
/// refused with `InUse` (its lock file is held), naming the store, and works once the
/// first is dropped.
#[test]
fn a_store_in_use_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.spool");
    let first = Store::open(&path).unwrap();
    first.start_journal(&snapshot(1, 10, 1)).unwrap();
    let refused = Store::open(&path).unwrap_err();
    assert!(matches!(refused, StoreError::InUse { .. }), "{refused:?}");
    assert_eq!(
        refused.to_string(),
        format!(
            "the store {} is in use by another spool process (one process writes a store at \
             a time; its lock is {}.lock)",
            path.display(),
            path.display()
        )
    );
    drop(first);
    let second = Store::open(&path).unwrap();
    assert!(second.recover().unwrap().is_some());
}

/// Entries come back in order after the checkpoint, small ones (kept in their row)
/// and large ones (chunked) alike, and sequence numbers go on across a reopen (here
/// with `Durability::PowerLoss`).
#[test]
fn entries_come_back_in_order_across_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("entries.spool");
    let start = snapshot(2, 100, 2);
    let big = answer(&prose(9, 10_000));
    let mut entries = vec![tick(1), big.clone(), tick(2), answer("short")];
    {
        let store = Store::open(&path).unwrap();
        assert_eq!(store.start_journal(&start).unwrap(), 1);
        for (i, entry) in entries.iter().enumerate() {
            assert_eq!(store.append(entry).unwrap(), i as u64 + 1);
        }
        let stats = store.write_stats();
        assert_eq!((stats.checkpoints, stats.entries), (1, 4));
    }
    let power_loss = StoreOptions::new().durability(Durability::PowerLoss);
    let store = Store::open_with(&path, power_loss).unwrap();
    entries.push(tick(3));
    assert_eq!(store.append(&entries[4]).unwrap(), 5);
    assert_eq!(store.write_stats().entries, 1);
    let journal = store.recover().unwrap().unwrap();
    assert_eq!(journal.start, start);
    assert_eq!(journal.entries, entries);
    let sizes = store.sizes().unwrap();
    assert_eq!(sizes.entries, 5);
    assert!(sizes.chunks > 10, "the big answer is chunked");
    store.verify().unwrap();
}

/// `keep_checkpoints(2)` keeps the last two checkpoints and the entries after the
/// older; older ones are dropped with the chunks only they used (the store holds
/// exactly what a store given only what is kept would hold). A new journal's start
/// drops everything before it.
#[test]
fn old_checkpoints_entries_and_chunks_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(
        dir.path().join("gc.spool"),
        StoreOptions::new()
            .keep_checkpoints(2)
            .history(History::off()),
    )
    .unwrap();
    let snaps: Vec<Vec<u8>> = (0..4).map(|i| snapshot(3, 3000, 10 + i)).collect();
    store.start_journal(&snaps[0]).unwrap();
    store.append(&tick(1)).unwrap();
    store.append(&answer(&prose(50, 3000))).unwrap();
    let c1 = store.write_checkpoint(&snaps[1]).unwrap();
    store.append(&answer(&prose(51, 3000))).unwrap();
    let c2 = store.write_checkpoint(&snaps[2]).unwrap();
    store.append(&tick(4)).unwrap();
    store.verify().unwrap();

    let kept: Vec<(u64, u64, u64)> = store
        .checkpoints()
        .unwrap()
        .iter()
        .map(|c| (c.id, c.after_entry, c.entries_after))
        .collect();
    assert_eq!(kept, vec![(c1, 2, 2), (c2, 3, 1)]);
    let older = store.recover_from(c1).unwrap();
    assert_eq!(older.start, snaps[1]);
    assert_eq!(older.entries, vec![answer(&prose(51, 3000)), tick(4)]);
    assert_eq!(store.recover().unwrap().unwrap().entries, vec![tick(4)]);

    // The same content written to a fresh store gives the same chunks.
    let same = Store::open(dir.path().join("same.spool")).unwrap();
    same.start_journal(&snaps[1]).unwrap();
    same.write_checkpoint(&snaps[2]).unwrap();
    same.append(&answer(&prose(51, 3000))).unwrap();
    let (a, b) = (store.sizes().unwrap(), same.sizes().unwrap());
    assert_eq!((a.chunks, a.chunk_bytes), (b.chunks, b.chunk_bytes));

    let c3 = store.start_journal(&snaps[3]).unwrap();
    let kept: Vec<u64> = store.checkpoints().unwrap().iter().map(|c| c.id).collect();
    assert_eq!(kept, vec![c3]);
    assert_eq!(store.recover().unwrap().unwrap().entries, Vec::new());
    let fresh = Store::open(dir.path().join("fresh.spool")).unwrap();
    fresh.start_journal(&snaps[3]).unwrap();
    let (a, b) = (store.sizes().unwrap(), fresh.sizes().unwrap());
    assert_eq!(
        (a.chunks, a.chunk_bytes, a.entries),
        (b.chunks, b.chunk_bytes, 0)
    );
    store.verify().unwrap();
    assert!(matches!(store.recover_from(c1), Err(StoreError::NoCheckpoint(id)) if id == c1));
}

/// Repeated content is stored once: the same snapshot again writes no new chunk; a
/// snapshot with one more task writes a few chunks, not the snapshot again; a long
/// answer that repeats an earlier one's text but for a few words writes a few chunks.
#[test]
fn repeated_content_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("dedupe.spool")).unwrap();
    let base = snapshot(4, 5000, 7);
    store.start_journal(&base).unwrap();
    let first = store.write_stats();
    assert!(first.new_chunk_bytes >= base.len() as u64);

    store.write_checkpoint(&base).unwrap();
    let again = store.write_stats();
    assert_eq!(again.new_chunks, first.new_chunks);

    let grown = snapshot(5, 5000, 7);
    assert!(grown.len() > base.len() + 5000);
    store.write_checkpoint(&grown).unwrap();
    let more = store.write_stats();
    let new = more.new_chunk_bytes - again.new_chunk_bytes;
    assert!(
        new < (grown.len() - base.len()) as u64 + 4000,
        "{new} new bytes for a snapshot {} bytes longer",
        grown.len() - base.len()
    );

    let text = prose(99, 20_000);
    store.append(&answer(&text)).unwrap();
    let before = store.write_stats();
    let edited = format!("{} a few new words {}", &text[..10_000], &text[10_000..]);
    store.append(&answer(&edited)).unwrap();
    let after = store.write_stats();
    let new = after.new_chunk_bytes - before.new_chunk_bytes;
    assert!(new < 3000, "{new} new bytes for an edited 20 kB answer");
    let journal = store.recover().unwrap().unwrap();
    assert_eq!(journal.entries, vec![answer(&text), answer(&edited)]);
    assert_eq!(
        Snapshot::decode(&journal.start).unwrap(),
        Snapshot::decode(&grown).unwrap()
    );
    store.verify().unwrap();
}

/// Dropping a large checkpoint gives its pages back to the file system: a store that
/// held two 2 MB snapshots shrinks to a few pages once a new journal starts from a
/// small one.
#[test]
fn dropped_content_gives_its_pages_back() {
    let dir = tempfile::tempdir().unwrap();
    // Without history a new journal's start drops everything before it.
    let store = open_without_history(dir.path().join("vacuum.spool"));
    store.start_journal(&snapshot(20, 100_000, 1)).unwrap();
    store.write_checkpoint(&snapshot(20, 100_000, 2)).unwrap();
    let big = store.sizes().unwrap();
    assert!(big.file_bytes > 4_000_000, "{big:?}");
    store.start_journal(&snapshot(1, 100, 3)).unwrap();
    let small = store.sizes().unwrap();
    assert_eq!((small.chunks, small.free_bytes), (1, 0));
    assert!(small.file_bytes < 100_000, "{small:?}");
    store.verify().unwrap();
}

/// As a sink, a store buffers a group and writes it on its writer thread at `commit`:
/// with a notifier, `commit` returns at once and the notifier hears that the group is
/// durable, numbered from 1; a checkpoint in a group covers the entries before it; a
/// clone reads what is committed; without a notifier, `commit` waits.
#[test]
fn a_sink_commits_groups_on_its_writer_and_says_when_they_are_durable() {
    use spool_core::{Commit, DurableNotifier, JournalSink};

    let dir = tempfile::tempdir().unwrap();
    let mut sink = Store::open(dir.path().join("groups.spool")).unwrap();
    let reader = sink.clone();
    sink.start(&snapshot(1, 10, 1)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    sink.notify_with(DurableNotifier::new(move |notice| {
        let _ = tx.lock().unwrap().send(notice);
    }));
    for i in 0..3 {
        sink.record(&tick(i)).unwrap();
    }
    // Nothing is written before the group is committed.
    assert_eq!(reader.recover().unwrap().unwrap().entries.len(), 0);
    assert_eq!(sink.commit().unwrap(), Commit::Queued);
    assert_eq!(rx.recv().unwrap(), Ok(1));
    assert_eq!(reader.recover().unwrap().unwrap().entries.len(), 3);

    sink.record(&tick(3)).unwrap();
    sink.checkpoint(&snapshot(1, 10, 2)).unwrap();
    sink.record(&tick(4)).unwrap();
    assert_eq!(sink.commit().unwrap(), Commit::Queued);
    assert_eq!(rx.recv().unwrap(), Ok(2));
    let kept: Vec<u64> = reader
        .checkpoints()
        .unwrap()
        .iter()
        .map(|c| c.after_entry)
        .collect();
    assert_eq!(kept, [0, 4]);
    assert_eq!(reader.recover().unwrap().unwrap().entries, [tick(4)]);

    // Without a notifier, commit waits.
    let mut plain = reader.clone();
    plain.record(&tick(5)).unwrap();
    assert_eq!(plain.commit().unwrap(), Commit::Durable);
    assert_eq!(reader.recover().unwrap().unwrap().entries.len(), 2);
}

/// The test-only crash moments parse from what `SPOOL_CRASH_AT` holds.
#[test]
fn crash_moments_parse() {
    use spool_store::CrashAt;

    assert_eq!("commit:3".parse(), Ok(CrashAt::Commit(3)));
    assert_eq!("checkpoint:1".parse(), Ok(CrashAt::Checkpoint(1)));
    for bad in ["commit", "commit:0", "checkpoint:x", "sleep:3", ""] {
        assert!(bad.parse::<CrashAt>().is_err(), "{bad}");
    }
}
