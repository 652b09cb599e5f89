//! Recovery through the threaded runtime: a run journaled to a store, dropped
//! mid-way, recovered from the reopened store and run to the end, ends exactly as the
//! same run straight through — whether the store holds only the journal's start and
//! entries, only a checkpoint, or checkpoints and the entries after the last.

use std::path::Path;

use spool_core::{
    Commit, DurableNotifier, Journal, JournalEntry, JournalError, JournalSink, MemoryJournal,
    Scheduler, Snapshot, TaskId, TaskState,
};
use spool_store::{Store, StoreOptions};

use crate::api::open_without_history;
use crate::tasks::{
    Stopper, Worker, builder, finish, late_worker, registry, states, straight_run, workers,
};

/// Writes to a store and to a memory journal at once, so the test can compare what
/// the store gives back with everything the runtime wrote.
struct Tee(Store, MemoryJournal);

impl JournalSink for Tee {
    fn start(&mut self, snapshot: &[u8]) -> Result<(), JournalError> {
        self.0.start(snapshot)?;
        self.1.start(snapshot)
    }

    fn record(&mut self, entry: &JournalEntry) -> Result<(), JournalError> {
        self.0.record(entry)?;
        self.1.record(entry)
    }

    fn checkpoint(&mut self, snapshot: &[u8]) -> Result<(), JournalError> {
        self.0.checkpoint(snapshot)
    }

    // The memory journal is durable as it records; the store's group is when the
    // store says so.
    fn commit(&mut self) -> Result<Commit, JournalError> {
        self.1.commit()?;
        self.0.commit()
    }

    fn notify_with(&mut self, notifier: DurableNotifier) {
        self.0.notify_with(notifier);
    }
}

#[derive(Copy, Clone, Debug)]
enum Checkpoints {
    /// None but the journal's start.
    None,
    /// One more, on demand, as the last thing before the runtime is dropped.
    AtTheEnd,
    /// One every this many entries.
    Every(u64),
}

/// The first half of the run on a store at `path`: the workers run until they wait for
/// a human, the late worker is submitted, and the runtime is dropped. Returns the
/// task ids and everything the runtime journaled.
fn first_half(path: &Path, checkpoints: Checkpoints) -> (Vec<TaskId>, Journal) {
    let store = open_without_history(path);
    let memory = MemoryJournal::new();
    let mut builder = builder(&Stopper::default(), 200, false).journal(Tee(store, memory.clone()));
    if let Checkpoints::Every(entries) = checkpoints {
        builder = builder.checkpoint_every(entries);
    }
    let mut runtime = builder.build();
    let mut ids: Vec<TaskId> = workers()
        .into_iter()
        .map(|task| runtime.submit(task).unwrap().id)
        .collect();
    runtime.run_until_idle();
    assert_eq!(runtime.pending_confirmations().len(), 2);
    ids.push(runtime.submit(late_worker()).unwrap().id);
    if let Checkpoints::AtTheEnd = checkpoints {
        runtime.checkpoint().unwrap();
    }
    assert_eq!(runtime.journal_error(), None);
    drop(runtime);
    (ids, memory.journal().unwrap())
}

/// The second half: reopens the store, recovers, and runs to the end on the same
/// store. Returns what `recover` gave and the tasks' final states.
fn second_half(path: &Path, ids: &[TaskId]) -> (Journal, Vec<(TaskId, TaskState)>) {
    let store = open_without_history(path);
    let journal = store.recover().unwrap().expect("the store has a journal");
    let mut runtime = builder(&Stopper::default(), 200, false)
        .recover(&journal, &registry())
        .unwrap()
        .journal(store.clone())
        .build();
    // The answers a replay counts are the recorded run's: the recovered runtime
    // counts from zero.
    let answers = journal
        .entries
        .iter()
        .filter(|e| {
            matches!(
                e,
                JournalEntry::Answer { .. } | JournalEntry::Answered { .. }
            )
        })
        .count();
    let replay = Scheduler::replay(&journal, &registry()).unwrap();
    let replayed: u64 = (replay.scheduler.trace().answers().values())
        .map(|c| c.ok + c.error + c.backed_off)
        .sum();
    assert_eq!(replayed, answers as u64);
    assert!(runtime.scheduler().trace().answers().is_empty());
    assert!(finish(&mut runtime));
    assert_eq!(runtime.journal_error(), None);
    let states = states(&runtime, ids);
    drop(runtime);
    store.verify().unwrap();
    (journal, states)
}

/// Every task ended with the same result as in the straight run.
fn assert_same_as_straight(states: &[(TaskId, TaskState)]) {
    let straight = straight_run();
    assert_eq!(states, straight.as_slice());
    assert!(
        states
            .iter()
            .all(|(_, s)| matches!(s, TaskState::Completed(Ok(_))))
    );
}

/// The final states a journal replays to.
fn replayed(journal: &Journal, ids: &[TaskId]) -> Vec<Option<TaskState>> {
    let replay = Scheduler::replay(journal, &registry()).unwrap();
    ids.iter()
        .map(|id| replay.scheduler.task_state(*id))
        .collect()
}

/// With no checkpoint but the start, the store gives back exactly the journal the
/// runtime wrote — the starting snapshot and every entry, byte for byte — and the
/// recovered run ends as the straight run. The second runtime's journal starts anew
/// on the same store, and recovering it again gives the finished run.
#[test]
fn recovers_from_the_start_and_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.spool");
    let (ids, written) = first_half(&path, Checkpoints::None);
    {
        let store = open_without_history(&path);
        let checkpoints = store.checkpoints().unwrap();
        assert_eq!(checkpoints.len(), 1);
        assert_eq!(checkpoints[0].after_entry, 0);
        assert_eq!(checkpoints[0].entries_after, written.entries.len() as u64);
        assert_eq!(store.recover().unwrap(), Some(written.clone()));
    }
    let (recovered, states) = second_half(&path, &ids);
    assert_eq!(recovered, written);
    assert_same_as_straight(&states);

    let store = open_without_history(&path);
    let again = store.recover().unwrap().unwrap();
    let finished: Vec<Option<TaskState>> = states.into_iter().map(|(_, s)| Some(s)).collect();
    assert_eq!(replayed(&again, &ids), finished);
}

/// A checkpoint as the last thing written: the store recovers from it alone (no
/// entry after it), to the same scheduler the whole journal replays to, and the run
/// ends as the straight run.
#[test]
fn recovers_from_a_checkpoint_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.spool");
    let (ids, written) = first_half(&path, Checkpoints::AtTheEnd);
    let store = open_without_history(&path);
    let journal = store.recover().unwrap().unwrap();
    assert_eq!(journal.entries, Vec::new());
    let checkpoints = store.checkpoints().unwrap();
    assert_eq!(checkpoints.len(), 2, "the start and the last");
    assert_eq!(checkpoints[1].after_entry, written.entries.len() as u64);
    let from_store = Snapshot::decode(&journal.start).unwrap();
    let whole = Scheduler::replay(&written, &registry()).unwrap().scheduler;
    assert_eq!(from_store.rows(), whole.snapshot().unwrap().rows());
    assert_eq!(store.latest_snapshot().unwrap(), Some(from_store));
    assert_eq!(replayed(&journal, &ids), replayed(&written, &ids));
    drop(store);

    let (_, states) = second_half(&path, &ids);
    assert_same_as_straight(&states);
}

/// Checkpoints every few entries and entries after the last: the store keeps the last
/// two checkpoints; what it recovers is the last snapshot and exactly the entries the
/// runtime wrote after it; recovering from the older checkpoint (and the entries
/// after it) reaches the same state; and the run ends as the straight run.
#[test]
fn recovers_from_a_checkpoint_and_the_entries_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.spool");
    let (ids, written) = first_half(&path, Checkpoints::Every(5));
    let store = open_without_history(&path);
    let checkpoints = store.checkpoints().unwrap();
    assert_eq!(checkpoints.len(), 2);
    assert!(checkpoints[0].after_entry > 0);
    let journal = store.recover().unwrap().unwrap();
    let tail = written.entries.len() - journal.entries.len();
    assert!(
        !journal.entries.is_empty(),
        "the late submission is after it"
    );
    assert!(matches!(
        journal.entries.last(),
        Some(JournalEntry::Submit { .. })
    ));
    assert_eq!(journal.entries, written.entries[tail..]);
    assert_eq!(tail as u64, checkpoints[1].after_entry);
    let older = store.recover_from(checkpoints[0].id).unwrap();
    assert_eq!(
        older.entries.len() as u64,
        written.entries.len() as u64 - checkpoints[0].after_entry
    );
    assert_eq!(replayed(&older, &ids), replayed(&journal, &ids));
    assert_eq!(replayed(&journal, &ids), replayed(&written, &ids));
    store.verify().unwrap();
    drop(store);

    let (_, states) = second_half(&path, &ids);
    assert_same_as_straight(&states);
}

/// A run shut down every few LLM answers — with answers still on their way, lost as
/// in a crash — and recovered from its store each time, many times over, ends with
/// the same results as the same run straight through.
#[test]
fn a_run_stopped_again_and_again_ends_as_a_straight_run() {
    let tasks = || {
        ["eve", "fay", "gus", "hal"]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                spool_core::NewTask::new(Worker::new(name, 6 + i as u32 * 2, None)).agent(*name)
            })
            .collect::<Vec<_>>()
    };
    let straight = {
        let mut runtime = builder(&Stopper::default(), 200, false).build();
        let ids: Vec<TaskId> = tasks()
            .into_iter()
            .map(|t| runtime.submit(t).unwrap().id)
            .collect();
        runtime.run_until_idle();
        states(&runtime, &ids)
    };

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.spool");
    let mut ids = Vec::new();
    let mut restarts = 0;
    let finished = loop {
        let store = Store::open_with(&path, StoreOptions::new().keep_checkpoints(1)).unwrap();
        let stopper = Stopper::default();
        let builder = builder(&stopper, 200, true).checkpoint_every(4);
        let mut runtime = match store.recover().unwrap() {
            Some(journal) => {
                restarts += 1;
                builder
                    .recover(&journal, &registry())
                    .unwrap()
                    .journal(store.clone())
                    .build()
            }
            None => {
                let mut runtime = builder.journal(store.clone()).build();
                ids = tasks()
                    .into_iter()
                    .map(|t| runtime.submit(t).unwrap().id)
                    .collect();
                runtime
            }
        };
        stopper.arm(runtime.handle(), 3);
        runtime.run_until_idle();
        assert_eq!(runtime.journal_error(), None);
        let now = states(&runtime, &ids);
        drop(runtime);
        store.verify().unwrap();
        if now.iter().all(|(_, s)| s.is_terminal()) {
            break now;
        }
        assert!(restarts < 100, "no progress");
    };
    println!("{restarts} restarts");
    assert!(restarts >= 5, "{restarts} restarts");
    assert_eq!(finished, straight);
}
