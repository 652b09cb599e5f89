//! A closed store changed behind its back — a byte of an entry, of a task row, of a
//! checkpoint; the head row; an entry renumbered, two swapped, one deleted — is a
//! typed error naming the row when it is read back (`recover`) and when it is checked
//! (`verify`), never a different journal.

use serde_json::json;
use spool_core::{Config, JournalSink, NewTask, Response, Scheduler, Time};
use spool_durable::{DurableError, DurableStore};

use super::tasks::{Worker, prose};
use super::{Backend, Damage, Options, answer, tick};

/// Writes the store `name`: a journal started at a scheduler of 6 workers, entries 1
/// to 3, a checkpoint in parts (task rows of the 6 workers), then entries 4 to 6
/// after it (5 large, the others small); 2 answers and one task of the scheduler
/// changed between the two. Returns the task ids of the rows in the latest checkpoint.
fn write(backend: &dyn Backend, name: &str) -> Vec<u64> {
    let store = backend.open(name, &Options::default()).unwrap();
    let mut s = Scheduler::new(Config::new());
    for i in 0..6 {
        s.submit(
            Time::ZERO,
            NewTask::new(Worker::new(&format!("w{i}"), 4, None)),
        )
        .unwrap();
    }
    while s.step(Time::ZERO).is_some() {}
    let mut sink = store.sink();
    sink.start(&s.snapshot().unwrap().encode().unwrap())
        .unwrap();
    assert_eq!(store.append(&tick(1)).unwrap(), 1);
    assert_eq!(store.append(&answer(&prose(1, 300))).unwrap(), 2);
    assert_eq!(store.append(&tick(2)).unwrap(), 3);
    let request = s.poll_request().unwrap();
    let _ = s.handle_response(Time::ZERO, Response::ok(request.key, json!("ok")));
    while s.step(Time::ZERO).is_some() {}
    let tasks: Vec<u64> = s
        .snapshot()
        .unwrap()
        .rows()
        .iter()
        .map(|r| r.id.get())
        .collect();
    sink.checkpoint_parts(s.snapshot_changes().unwrap())
        .unwrap();
    sink.commit().unwrap();
    assert_eq!(store.append(&tick(3)).unwrap(), 4);
    assert_eq!(store.append(&answer(&prose(2, 30_000))).unwrap(), 5);
    assert_eq!(store.append(&tick(4)).unwrap(), 6);
    let journal = store.recover().unwrap().unwrap();
    assert_eq!(
        journal.entries,
        [tick(3), answer(&prose(2, 30_000)), tick(4)]
    );
    store.verify().unwrap();
    tasks
}

/// What reading the store `name` gives: `recover`, then `verify` (each an error if
/// the store does not open at all: a backend may check its head row when it opens).
fn read(backend: &dyn Backend, name: &str) -> [Result<(), DurableError>; 2] {
    match backend.open(name, &Options::default()) {
        Ok(store) => {
            let recovered = store.recover().map(|journal| {
                panic!(
                    "{}: {name} recovered a journal of {:?} entries",
                    backend.kind(),
                    journal.map(|j| j.entries.len())
                )
            });
            [recovered, store.verify()]
        }
        Err(error) => {
            let again = backend
                .open(name, &Options::default())
                .map(|store: Box<dyn DurableStore>| drop(store));
            [Err(error), again]
        }
    }
}

/// Every kind of damage, each on a store of its own: `recover` and `verify` are each
/// `Corrupt` with a message naming the damaged row (the renumbered or swapped entry
/// is found under either of its numbers).
pub fn every_damage_is_a_typed_error(backend: &dyn Backend) {
    let cases: [(&str, Damage, &[&str]); 10] = [
        ("small_entry", Damage::EntryByte(4), &["journal entry 4"]),
        ("large_entry", Damage::EntryByte(5), &["journal entry 5"]),
        ("task_row", Damage::TaskRowByte(0), &[]),
        ("checkpoint", Damage::CheckpointByte(2), &["checkpoint 2"]),
        ("head", Damage::HeadByte, &["head row"]),
        (
            "renumbered",
            Damage::RenumberEntry { from: 5, to: 9 },
            &["journal entry 5", "journal entry 9"],
        ),
        (
            "renumbered_last",
            Damage::RenumberEntry { from: 6, to: 7 },
            &["journal entry 6", "journal entry 7"],
        ),
        (
            "swapped",
            Damage::SwapEntries(4, 6),
            &["journal entry 4", "journal entry 6"],
        ),
        // `verify` may name the gap as the span of entries kept around it.
        (
            "deleted",
            Damage::DeleteEntry(4),
            &["journal entry 4", "journal entries are missing"],
        ),
        ("deleted_last", Damage::DeleteEntry(6), &["journal entry 6"]),
    ];
    for (case, damage, names) in cases {
        let name = format!("damage_{case}");
        let tasks = write(backend, &name);
        // The task row: the third task of the checkpoint.
        let (damage, named): (Damage, Vec<String>) = match damage {
            Damage::TaskRowByte(_) => (
                Damage::TaskRowByte(tasks[2]),
                vec![format!("task {}", tasks[2])],
            ),
            other => (other, names.iter().map(|n| (*n).to_owned()).collect()),
        };
        backend.damage(&name, damage);
        for (what, result) in ["recover", "verify"].into_iter().zip(read(backend, &name)) {
            match result {
                Err(DurableError::Corrupt(message)) => assert!(
                    named.iter().any(|n| message.contains(n.as_str())),
                    "{}: {case}: {what} says {message:?}, naming none of {named:?}",
                    backend.kind()
                ),
                other => panic!(
                    "{}: {case} ({damage:?}): {what} gave {other:?}, not Corrupt",
                    backend.kind()
                ),
            }
        }
    }
}
