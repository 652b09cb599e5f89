//! Recovery at scale: 100,000 live tasks, each waiting for a human's answer that never
//! comes, journaled through the runtime, recovered after the handle is dropped.

use std::time::Instant;

use spool_core::{NewTask, TaskId};

use super::tasks::{Worker, builder, registry};
use super::{Backend, open};

/// How many live tasks.
const TASKS: usize = 100_000;

/// 100,000 workers submitted to a runtime journaling to the backend (in groups of
/// 1,000), each asking a human at its first step (so it stays live), checkpointed every 20,000 entries; the
/// handle is dropped; the store reopened recovers a runtime with all 100,000 live, by
/// their ids, each waiting for its human, and nothing else. Prints the time of each
/// phase.
pub fn a_hundred_thousand_live_tasks_recover(backend: &dyn Backend) {
    let name = "many_live";
    let began = Instant::now();
    let store = open(backend, name);
    let mut runtime = builder()
        .checkpoint_every(20_000)
        .journal(store.sink())
        .build();
    // In groups of 1,000: each `submit_all` returns once its group is durable.
    let mut ids: Vec<TaskId> = Vec::with_capacity(TASKS);
    for batch in 0..TASKS / 1000 {
        let tasks = (batch * 1000..(batch + 1) * 1000)
            .map(|i| NewTask::new(Worker::new(&format!("p{i}"), 1, Some(0))));
        ids.extend(runtime.submit_all(tasks).into_iter().map(|s| s.unwrap().id));
        runtime.run_until_idle();
    }
    runtime.run_until_idle();
    assert_eq!(runtime.pending_confirmations().len(), TASKS);
    assert_eq!(runtime.journal_error(), None);
    drop(runtime);
    let checkpoints = store.checkpoints().unwrap();
    assert!(
        checkpoints.last().is_some_and(|c| c.after_entry > 0),
        "{}: a checkpoint after the submissions: {checkpoints:?}",
        backend.kind()
    );
    drop(store);
    let written = began.elapsed();

    let began = Instant::now();
    let store = open(backend, name);
    let journal = store.recover().unwrap().expect("a journal");
    let read = began.elapsed();
    let mut runtime = builder().recover(&journal, &registry()).unwrap().build();
    let recovered = began.elapsed();
    let scheduler = runtime.scheduler();
    assert_eq!(scheduler.live_len(), TASKS, "{}", backend.kind());
    let rows = scheduler.snapshot().unwrap().rows();
    let row_ids: Vec<TaskId> = rows.iter().map(|r| r.id).collect();
    assert_eq!(row_ids, ids, "{}: the same tasks, by id", backend.kind());
    assert!(
        rows.iter().all(|r| r.state == rows[0].state),
        "every task in one state"
    );
    // Run, the recovered runtime asks every human again.
    runtime.run_until_idle();
    assert_eq!(runtime.pending_confirmations().len(), TASKS);
    assert_eq!(runtime.scheduler().live_len(), TASKS);
    println!(
        "{}: {TASKS} live tasks written in {written:?}, read back in {read:?}, recovered \
         in {recovered:?} ({} entries after the latest checkpoint; each waits: {})",
        backend.kind(),
        journal.entries.len(),
        rows[0].state
    );
}
