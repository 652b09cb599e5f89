//! History kept: the segments a store keeps across checkpoints (in parts, as the
//! runtime writes them), read back from any kept checkpoint as one journal that
//! replays to the state recovery gives; retention by age and by size; `off`; damage to
//! a kept row named.

use std::time::{Duration, SystemTime};

use serde_json::json;
use spool_core::{Config, NewTask, RequestKey, Response, Scheduler, Time};
use spool_durable::{DurableError, DurableStore, History, WallClock};

use super::tasks::{Worker, prose, registry};
use super::{Backend, Damage, Options, snapshot, tick};

/// A scheduler of `n` workers of 4 steps, each with a log long enough that its row is
/// chunked on SQLite, polled once; it records its journal from now on.
fn workers(n: usize) -> Scheduler {
    let mut s = Scheduler::new(Config::new());
    s.record_journal(true);
    for i in 0..n {
        let mut worker = Worker::new(&format!("w{i}"), 4, None);
        worker.log.push(prose(i as u64, 6000));
        s.submit(Time::ZERO, NewTask::new(worker)).unwrap();
    }
    while s.step(Time::ZERO).is_some() {}
    while s.poll_journal().is_some() {}
    s
}

/// Answers the first `k` requests out (at `at`) and polls what they woke.
fn answer(s: &mut Scheduler, pending: &mut Vec<RequestKey>, k: usize, at: Time) {
    pending.extend(std::iter::from_fn(|| s.poll_request()).map(|r| r.key));
    for key in pending.drain(..k.min(pending.len())) {
        let _ = s.handle_response(at, Response::ok(key, json!("ok")));
    }
    while s.step(at).is_some() {}
}

/// The state `journal` replays to: the clock and every task's row.
fn replayed(journal: &spool_core::Journal) -> (Time, Vec<spool_core::SnapshotRow>) {
    let replay = Scheduler::replay(journal, &registry()).unwrap();
    let snapshot = replay.scheduler.snapshot().unwrap();
    (snapshot.now(), snapshot.rows())
}

/// Opens `name` keeping `history`, on `clock`.
fn open_with(
    backend: &dyn Backend,
    name: &str,
    history: History,
    clock: &WallClock,
) -> Box<dyn DurableStore> {
    let options = Options {
        history: Some(history),
        clock: Some(clock.clone()),
        ..Options::default()
    };
    backend
        .open(name, &options)
        .unwrap_or_else(|e| panic!("{}: cannot open {name}: {e}", backend.kind()))
}

/// A run checkpointed in parts through the sink, history kept: every checkpoint stays,
/// each reads back as the snapshot of its moment, byte for byte (the older ones from
/// the task rows they replaced), the segments tile the journal, and the journal from
/// the oldest replays the whole run to the state recovery replays to. After a reopen
/// the same holds, and `verify` (chunk reference counts included) passes.
pub fn history_in_parts_replays_as_one_journal(backend: &dyn Backend) {
    let name = "history_parts";
    let clock = WallClock::manual(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000));
    let all = History::keep(None, None);
    let store = open_with(backend, name, all, &clock);
    let mut sink = store.sink();
    let mut s = workers(12);
    let start = s.snapshot().unwrap().encode().unwrap();
    sink.start(&start).unwrap();
    sink.checkpoint_parts(s.snapshot_changes().unwrap())
        .unwrap();
    sink.commit().unwrap();
    // The snapshot of each checkpoint's moment, by id: 1 the start, 2 the full parts.
    let mut moments = vec![(1, start.clone()), (2, start)];
    let mut pending = Vec::new();
    for (round, k) in [5, 1, 12, 12, 12].into_iter().enumerate() {
        clock.advance(Duration::from_secs(60));
        answer(
            &mut s,
            &mut pending,
            k,
            Time::from_nanos((round as u64 + 1) * 1000),
        );
        while let Some(entry) = s.poll_journal() {
            sink.record(&entry).unwrap();
        }
        sink.checkpoint_parts(s.snapshot_changes().unwrap())
            .unwrap();
        sink.commit().unwrap();
        moments.push((round as u64 + 3, s.snapshot().unwrap().encode().unwrap()));
    }
    s.handle_timeout(Time::from_nanos(99_000));
    while let Some(entry) = s.poll_journal() {
        sink.record(&entry).unwrap();
    }
    sink.commit().unwrap();
    drop(sink);
    let check = |store: &dyn DurableStore, when: &str| {
        let kind = backend.kind();
        let segments = store.segments().unwrap();
        let ids: Vec<u64> = segments.iter().map(|s| s.checkpoint).collect();
        // History keeps every segment: the start's (whole) and each in parts.
        assert_eq!(ids, [1, 2, 3, 4, 5, 6, 7], "{kind}: {when}");
        for pair in segments.windows(2) {
            assert_eq!(
                pair[0].last_entry + 1,
                pair[1].first_entry,
                "{kind}: {when}"
            );
            assert!(pair[0].at <= pair[1].at, "{kind}: {when}");
        }
        assert_eq!(segments[0].first_entry, 1, "{kind}: {when}");
        let recovered = store.recover().unwrap().unwrap();
        assert_eq!(
            segments.last().unwrap().last_entry,
            segments.last().unwrap().first_entry - 1 + recovered.entries.len() as u64
        );
        for (id, snapshot) in &moments {
            let journal = store.recover_from(*id).unwrap();
            assert_eq!(&journal.start, snapshot, "{kind}: checkpoint {id}, {when}");
        }
        let oldest = store.recover_from(1).unwrap();
        assert_eq!(
            replayed(&oldest),
            replayed(&recovered),
            "{kind}: the whole history replays to the recovered state, {when}"
        );
        store.verify().unwrap();
    };
    check(&*store, "written");
    drop(store);
    let store = open_with(backend, name, all, &clock);
    check(&*store, "reopened");
}

/// Writes whole checkpoints 2..=`count` (a minute apart on `clock`, each after two
/// entries) after the journal's start.
fn whole_checkpoints(store: &dyn DurableStore, clock: &WallClock, count: u64) {
    store.start_journal(&snapshot(2, 300, 1)).unwrap();
    let mut seq = 0;
    for id in 2..=count {
        for _ in 0..2 {
            seq += 1;
            store.append(&tick(seq)).unwrap();
        }
        clock.advance(Duration::from_secs(60));
        assert_eq!(store.write_checkpoint(&snapshot(2, 300, id)).unwrap(), id);
    }
}

/// The kept checkpoints' ids.
fn ids(store: &dyn DurableStore) -> Vec<u64> {
    store
        .segments()
        .unwrap()
        .iter()
        .map(|s| s.checkpoint)
        .collect()
}

/// By age: a segment goes once it ended `max_age` ago, at the next checkpoint; the
/// clock is the store's, moved by hand. By size: the newest segments that fit stay.
/// `off` keeps the latest segment alone (and `keep_checkpoints`' whole ones).
pub fn history_retention_by_age_and_size(backend: &dyn Backend) {
    let kind = backend.kind();
    let clock = WallClock::manual(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000));
    let age = History::keep(Some(Duration::from_secs(150)), None);
    let store = open_with(backend, "history_age", age, &clock);
    whole_checkpoints(&*store, &clock, 6);
    // Checkpoint 6 at +300 s; segment 3 ended at +180 s (120 s ago), 2 at +120 s
    // (180 s ago: gone).
    assert_eq!(ids(&*store), [3, 4, 5, 6], "{kind}: by age");
    clock.advance(Duration::from_secs(600));
    store.append(&tick(100)).unwrap();
    store.write_checkpoint(&snapshot(2, 300, 7)).unwrap();
    // Segment 6 ended now, with checkpoint 7; all before it aged out.
    assert_eq!(ids(&*store), [6, 7], "{kind}: the older ones aged out");
    store.verify().unwrap();
    drop(store);

    let sizes: Vec<u64> = {
        let all = History::keep(None, None);
        let store = open_with(backend, "history_size_all", all, &clock);
        whole_checkpoints(&*store, &clock, 6);
        store.segments().unwrap().iter().map(|s| s.bytes).collect()
    };
    // Room for the latest three segments, not four.
    let room: u64 = sizes[3..].iter().sum();
    let size = History::keep(None, Some(room));
    let store = open_with(backend, "history_size", size, &clock);
    whole_checkpoints(&*store, &clock, 6);
    assert_eq!(ids(&*store), [4, 5, 6], "{kind}: by size");
    store.verify().unwrap();
    drop(store);

    let store = open_with(backend, "history_off", History::off(), &clock);
    whole_checkpoints(&*store, &clock, 6);
    assert_eq!(
        ids(&*store),
        [5, 6],
        "{kind}: off keeps keep_checkpoints' two"
    );
    let mut sink = store.sink();
    let mut s = workers(3);
    sink.checkpoint_parts(s.snapshot_changes().unwrap())
        .unwrap();
    sink.commit().unwrap();
    answer(&mut s, &mut Vec::new(), 3, Time::from_nanos(5));
    sink.checkpoint_parts(s.snapshot_changes().unwrap())
        .unwrap();
    sink.commit().unwrap();
    drop(sink);
    assert_eq!(ids(&*store), [8], "{kind}: off keeps one segment in parts");
    store.verify().unwrap();
}

/// A byte changed in a kept old task row is a typed error naming the row, for the
/// older checkpoint that reads it; recovery, which reads the latest rows, is unchanged.
pub fn a_damaged_kept_row_is_named(backend: &dyn Backend) {
    let name = "history_damage";
    let clock = WallClock::manual(SystemTime::UNIX_EPOCH);
    let all = History::keep(None, None);
    let store = open_with(backend, name, all, &clock);
    let mut sink = store.sink();
    let mut s = workers(2);
    let start = s.snapshot().unwrap().encode().unwrap();
    sink.start(&start).unwrap();
    sink.checkpoint_parts(s.snapshot_changes().unwrap())
        .unwrap();
    sink.commit().unwrap();
    answer(&mut s, &mut Vec::new(), 2, Time::from_nanos(5));
    while let Some(entry) = s.poll_journal() {
        sink.record(&entry).unwrap();
    }
    sink.checkpoint_parts(s.snapshot_changes().unwrap())
        .unwrap();
    sink.commit().unwrap();
    drop(sink);
    drop(store);
    let task = s.snapshot().unwrap().rows()[0].id.get();
    backend.damage(name, Damage::KeptTaskRowByte { task, since: 2 });
    let store = open_with(backend, name, all, &clock);
    let error = store.recover_from(2).unwrap_err();
    let expected = format!("the kept row of task {task} from checkpoint 2");
    assert!(
        matches!(&error, DurableError::Corrupt(m) if m.contains(&expected)),
        "{}: {error}",
        backend.kind()
    );
    assert!(
        store.recover().is_ok(),
        "{}: recovery reads the latest rows",
        backend.kind()
    );
    let error = store.verify().unwrap_err();
    assert!(
        error.to_string().contains(&expected),
        "{}: {error}",
        backend.kind()
    );
}

/// A read-only handle, opened while the writer holds the store, lists the segments and
/// reads the history as the writer does, sees what the writer commits next, and
/// writes nothing.
pub fn a_reader_reads_history_while_the_writer_writes(backend: &dyn Backend) {
    let kind = backend.kind();
    let name = "history_reader";
    let clock = WallClock::manual(SystemTime::UNIX_EPOCH + Duration::from_secs(50));
    let writer = open_with(backend, name, History::keep(None, None), &clock);
    whole_checkpoints(&*writer, &clock, 3);
    let reader = backend
        .open_read_only(name)
        .unwrap_or_else(|e| panic!("{kind}: a reader opens beside the writer: {e}"));
    assert_eq!(
        reader.segments().unwrap(),
        writer.segments().unwrap(),
        "{kind}"
    );
    assert_eq!(ids(&*reader), [1, 2, 3], "{kind}");
    let at: Vec<SystemTime> = reader.segments().unwrap().iter().map(|s| s.at).collect();
    let second = Duration::from_secs(1);
    assert_eq!(
        at,
        [50, 110, 170].map(|s| SystemTime::UNIX_EPOCH + s * second),
        "{kind}: the wall times of the checkpoints"
    );
    assert_eq!(
        reader.recover_from(1).unwrap().entries,
        (1..=4).map(tick).collect::<Vec<_>>(),
        "{kind}"
    );
    writer.append(&tick(5)).unwrap();
    writer.write_checkpoint(&snapshot(2, 300, 4)).unwrap();
    assert_eq!(
        ids(&*reader),
        [1, 2, 3, 4],
        "{kind}: the reader sees the new checkpoint"
    );
    let latest = reader.segments().unwrap().pop().unwrap();
    assert_eq!((latest.first_entry, latest.last_entry), (6, 5), "{kind}");
    assert!(
        reader.append(&tick(6)).is_err(),
        "{kind}: a reader writes nothing"
    );
    assert_eq!(writer.recover().unwrap().unwrap().entries, [], "{kind}");
}

/// A new journal's start (what a runtime that goes on from the store writes) keeps the
/// history before it when history is kept, and the numbering goes on; without history
/// it drops everything before it.
pub fn a_new_journal_keeps_the_history_before_it(backend: &dyn Backend) {
    let kind = backend.kind();
    let clock = WallClock::manual(SystemTime::UNIX_EPOCH + Duration::from_secs(50));
    let all = History::keep(None, None);
    let store = open_with(backend, "history_restart", all, &clock);
    whole_checkpoints(&*store, &clock, 3);
    clock.advance(Duration::from_secs(60));
    assert_eq!(store.start_journal(&snapshot(2, 300, 9)).unwrap(), 4);
    assert_eq!(
        store.append(&tick(5)).unwrap(),
        5,
        "{kind}: entry numbers go on"
    );
    assert_eq!(ids(&*store), [1, 2, 3, 4], "{kind}");
    let segments = store.segments().unwrap();
    let spans: Vec<(u64, u64)> = segments
        .iter()
        .map(|s| (s.first_entry, s.last_entry))
        .collect();
    assert_eq!(spans, [(1, 2), (3, 4), (5, 4), (5, 5)], "{kind}");
    assert_eq!(
        store.recover_from(2).unwrap().entries,
        [tick(3), tick(4), tick(5)]
    );
    assert_eq!(store.recover().unwrap().unwrap().start, snapshot(2, 300, 9));
    store.verify().unwrap();
    drop(store);

    let store = open_with(backend, "history_restart_off", History::off(), &clock);
    whole_checkpoints(&*store, &clock, 3);
    store.start_journal(&snapshot(2, 300, 9)).unwrap();
    assert_eq!(
        ids(&*store),
        [4],
        "{kind}: without history a start drops the rest"
    );
    store.verify().unwrap();
}
