//! A run through the runtime, journaled by the backend's sink, recovered after the
//! handle is dropped and reopened: the recovered runtime finishes every task with its
//! one right result, and the idempotency keys still name the tasks they named.

use spool_core::{Admission, NewTask, RejectReason, TaskId, TaskState};
use spool_runtime::Runtime;

use super::tasks::{Worker, builder, expected_result, finish, registry};
use super::{Backend, open};

/// The workers: `(name, steps, confirm_at)`; ann and cy stop for a human.
const WORKERS: [(&str, u32, Option<u32>); 4] = [
    ("ann", 7, Some(3)),
    ("bob", 5, None),
    ("cy", 9, Some(6)),
    ("dee", 4, None),
];

/// A worker of [`WORKERS`], with the key `key-NAME`.
fn keyed((name, steps, confirm_at): (&'static str, u32, Option<u32>)) -> NewTask {
    NewTask::new(Worker::new(name, steps, confirm_at))
        .agent(name)
        .key(format!("key-{name}"))
}

/// A runtime on the store `name` of `backend`, recovered from what it holds (it must
/// hold a journal), checkpointing every 4 entries.
fn recovered(backend: &dyn Backend, name: &str) -> Runtime {
    let store = open(backend, name);
    let journal = store
        .recover()
        .unwrap()
        .unwrap_or_else(|| panic!("{}: no journal after a run", backend.kind()));
    builder()
        .checkpoint_every(4)
        .recover(&journal, &registry())
        .unwrap()
        .journal(store.sink())
        .build()
}

/// Life 1 submits four keyed workers and runs until two wait for a human, one of which
/// (bob, dee) ended; the handle is dropped. Life 2 recovers: the keys name the same
/// tasks (a second submission with a key is refused naming the first task: `Duplicate`
/// for a live one, `AlreadyEnded` for an ended one), the ended tasks kept their
/// results, and answering the humans finishes every task with its one right result.
/// Life 3 recovers life 2's end: the same tasks in the same states, at the same time.
pub fn a_run_recovers_with_its_keys(backend: &dyn Backend) {
    let name = "recovery_run";
    let store = open(backend, name);
    let mut runtime = builder().checkpoint_every(4).journal(store.sink()).build();
    let ids: Vec<TaskId> = WORKERS[..3]
        .iter()
        .map(|w| runtime.submit(keyed(*w)).unwrap().id)
        .collect();
    runtime.run_until_idle();
    let mut ids = ids;
    ids.push(runtime.submit(keyed(WORKERS[3])).unwrap().id);
    runtime.run_until_idle();
    assert_eq!(runtime.pending_confirmations().len(), 2);
    let first_life: Vec<Option<TaskState>> = ids.iter().map(|id| runtime.task_state(*id)).collect();
    assert_eq!(runtime.journal_error(), None);
    drop(runtime);
    drop(store);

    let mut runtime = recovered(backend, name);
    for (i, (worker, id)) in WORKERS.iter().zip(&ids).enumerate() {
        let key = format!("key-{}", worker.0);
        let record = runtime.scheduler().key(&key).expect("the key is kept");
        assert_eq!(record.task, *id, "{}: {key}", backend.kind());
        assert_eq!(runtime.task_state(*id), first_life[i], "{}", worker.0);
        let ended = worker.2.is_none();
        assert_eq!(record.ended_at.is_some(), ended, "{key}");
        let again = runtime.submit(keyed(*worker)).unwrap();
        let expected = if ended {
            RejectReason::AlreadyEnded {
                key: key.clone(),
                original: *id,
                ended_at: record.ended_at.unwrap(),
            }
        } else {
            RejectReason::Duplicate {
                key: key.clone(),
                existing: *id,
            }
        };
        assert_eq!(again.admission, Admission::Rejected { reason: expected });
    }
    assert!(finish(&mut runtime), "{}: work left", backend.kind());
    for (worker, id) in WORKERS.iter().zip(&ids) {
        assert_eq!(
            runtime.task_state(*id),
            Some(TaskState::Completed(Ok(expected_result(
                worker.0, worker.1, worker.2
            )))),
            "{}: {}",
            backend.kind(),
            worker.0
        );
    }
    let end = runtime.scheduler().snapshot().unwrap();
    let scheduler_now = runtime.scheduler().now();
    let states: Vec<Option<TaskState>> = ids.iter().map(|id| runtime.task_state(*id)).collect();
    assert_eq!(runtime.journal_error(), None);
    drop(runtime);

    let store = open(backend, name);
    store.verify().unwrap();
    let journal = store.recover().unwrap().unwrap();
    let runtime = builder().recover(&journal, &registry()).unwrap().build();
    // The same tasks, each in the same state at the same time (the trace's own
    // bookkeeping is the runtime's, not the journal's: a recovered runtime records none).
    let snapshot = runtime.scheduler().snapshot().unwrap();
    assert_eq!(snapshot.rows(), end.rows(), "{}", backend.kind());
    assert_eq!(runtime.scheduler().now(), scheduler_now);
    let recovered: Vec<Option<TaskState>> = ids.iter().map(|id| runtime.task_state(*id)).collect();
    assert_eq!(recovered, states);
}
