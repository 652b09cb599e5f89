//! Checkpoints in parts (the tasks that changed since the last checkpoint, what the
//! runtime hands a sink that takes parts) and whole (`write_checkpoint` of the full
//! snapshot) of the same run recover to the same snapshot bytes.

use serde_json::json;
use spool_core::{Config, NewTask, RequestKey, Response, Scheduler, Snapshot, Time};

use super::tasks::{Worker, registry};
use super::{Backend, open};

/// A scheduler of `n` workers of 4 steps, polled once: each has one request out. It
/// records its journal from now on.
fn workers(n: usize) -> Scheduler {
    let mut s = Scheduler::new(Config::new());
    s.record_journal(true);
    for i in 0..n {
        s.submit(
            Time::ZERO,
            NewTask::new(Worker::new(&format!("w{i}"), 4, None)),
        )
        .unwrap();
    }
    while s.step(Time::ZERO).is_some() {}
    // What came before the journal's start is in its starting snapshot.
    while s.poll_journal().is_some() {}
    s
}

/// Takes the requests `s` has out into `pending`, answers the first `k` of them (at
/// `at`), and polls what they woke.
fn answer(s: &mut Scheduler, pending: &mut Vec<RequestKey>, k: usize, at: Time) {
    pending.extend(std::iter::from_fn(|| s.poll_request()).map(|r| r.key));
    for key in pending.drain(..k.min(pending.len())) {
        let _ = s.handle_response(at, Response::ok(key, json!("ok")));
    }
    while s.step(at).is_some() {}
}

/// The same run written to two stores, at the same moments: to one in parts through
/// its sink (the first checkpoint full, each later one only the tasks that changed:
/// some, one, none, then many as tasks end), to the other whole. After every
/// checkpoint, and after both are reopened, both recover the snapshot the scheduler
/// takes whole, byte for byte, and decode to the same snapshot. The scheduler's
/// journal entries go to both as well: those after the last checkpoint come back, and
/// both journals replay to the same state.
pub fn parts_and_whole_recover_the_same_snapshot(backend: &dyn Backend) {
    let (parts_name, whole_name) = ("parts_in_parts", "parts_whole");
    let parts = open(backend, parts_name);
    let whole = open(backend, whole_name);
    let mut sink = parts.sink();
    assert!(
        sink.takes_parts(),
        "{}: the sink takes parts",
        backend.kind()
    );

    let mut s = workers(30);
    let start = s.snapshot().unwrap().encode().unwrap();
    sink.start(&start).unwrap();
    whole.start_journal(&start).unwrap();
    let full = s.snapshot_changes().unwrap();
    assert!(full.full);
    sink.checkpoint_parts(full).unwrap();
    sink.commit().unwrap();
    whole.write_checkpoint(&start).unwrap();

    let check = |parts: &dyn spool_durable::DurableStore,
                 whole: &dyn spool_durable::DurableStore,
                 expected: &[u8],
                 when: &str| {
        let from_parts = parts.recover().unwrap().unwrap();
        let from_whole = whole.recover().unwrap().unwrap();
        assert_eq!(
            from_parts.start,
            expected,
            "{}: parts, {when}",
            backend.kind()
        );
        assert_eq!(
            from_whole.start,
            expected,
            "{}: whole, {when}",
            backend.kind()
        );
        assert_eq!(from_parts.entries, from_whole.entries);
        let snapshot = Some(Snapshot::decode(expected).unwrap());
        assert_eq!(parts.latest_snapshot().unwrap(), snapshot, "{when}");
        assert_eq!(whole.latest_snapshot().unwrap(), snapshot, "{when}");
    };
    check(&*parts, &*whole, &start, "at the start");

    let mut rows = Vec::new();
    let mut pending = Vec::new();
    for (round, k) in [7, 1, 0, 30, 30, 30, 30].into_iter().enumerate() {
        let at = Time::from_nanos((round as u64 + 1) * 1_000_000);
        answer(&mut s, &mut pending, k, at);
        while let Some(entry) = s.poll_journal() {
            sink.record(&entry).unwrap();
            whole.append(&entry).unwrap();
        }
        let changes = s.snapshot_changes().unwrap();
        assert!(!changes.full);
        rows.push(changes.rows.len());
        sink.checkpoint_parts(changes).unwrap();
        sink.commit().unwrap();
        let now = s.snapshot().unwrap().encode().unwrap();
        whole.write_checkpoint(&now).unwrap();
        check(&*parts, &*whole, &now, &format!("after round {round}"));
    }
    // Only the tasks answered changed: 120 answers in all, the last 22 ending the last
    // workers.
    assert_eq!(rows, [7, 1, 0, 30, 30, 30, 22]);
    let end = s.snapshot().unwrap().encode().unwrap();
    // Entries after the last checkpoint: a timeout that ends nothing.
    s.handle_timeout(Time::from_nanos(99_000_000));
    let mut after = Vec::new();
    while let Some(entry) = s.poll_journal() {
        sink.record(&entry).unwrap();
        whole.append(&entry).unwrap();
        after.push(entry);
    }
    sink.commit().unwrap();
    assert!(!after.is_empty());
    assert!(
        s.snapshot()
            .unwrap()
            .rows()
            .iter()
            .all(|r| r.state.starts_with("Completed")),
        "every worker ended"
    );
    drop(sink);
    drop(parts);
    drop(whole);

    let parts = open(backend, parts_name);
    let whole = open(backend, whole_name);
    check(&*parts, &*whole, &end, "reopened");
    // The entries after the checkpoint come back, and both journals replay to the
    // same state: the scheduler's.
    let (from_parts, from_whole) = (
        parts.recover().unwrap().unwrap(),
        whole.recover().unwrap().unwrap(),
    );
    assert_eq!(from_parts.entries, after, "{}", backend.kind());
    let replayed = |journal: &spool_core::Journal| {
        let replay = Scheduler::replay(journal, &registry()).unwrap();
        replay.scheduler.snapshot().unwrap()
    };
    let (a, b) = (replayed(&from_parts), replayed(&from_whole));
    assert_eq!(a.encode().unwrap(), b.encode().unwrap());
    assert_eq!(a.rows(), s.snapshot().unwrap().rows());
    parts.verify().unwrap();
    whole.verify().unwrap();
}
