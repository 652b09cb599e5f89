//! Tests of `Config::first_task_id`: a scheduler numbers its tasks from it, and a
//! snapshot, a restore and a journal replay go on from where the numbering was.

#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};

use super::Scheduler;
use super::config::Config;
use crate::async_task::{AsyncTask, Cx};
use crate::id::{RequestKey, TaskId};
use crate::journal::Journal;
use crate::registry::TaskRegistry;
use crate::request::Response;
use crate::snapshot::Snapshot;
use crate::state::Outcome;
use crate::task::NewTask;
use crate::time::Time;

/// The first id of shard 1 of a cluster.
const FIRST: u64 = 1 << 44;

/// Asks the LLM once and gives the answer.
async fn child(cx: Cx, input: Value) -> Outcome {
    Ok(cx.llm(input).await?)
}

/// Spawns two children and gives their answers.
async fn parent(cx: Cx, _input: Value) -> Outcome {
    let children = (0..2)
        .map(|i| {
            cx.spawn(NewTask::new(AsyncTask::replayable(
                "child",
                json!(i),
                child,
            )))
        })
        .collect();
    let outcomes = cx.join_all(children).await;
    let answers: Result<Vec<Value>, _> = outcomes.into_iter().collect();
    Ok(json!(answers?))
}

fn registry() -> TaskRegistry {
    TaskRegistry::new()
        .with_async("parent", parent)
        .with_async("child", child)
}

fn parent_task() -> NewTask {
    NewTask::new(AsyncTask::replayable("parent", Value::Null, parent))
}

/// Submits the parent and steps until its children have asked their questions;
/// gives the ids of the tasks whose requests went out, in order.
fn start(scheduler: &mut Scheduler) -> (TaskId, Vec<RequestKey>) {
    let id = scheduler.submit(Time::ZERO, parent_task()).unwrap().id;
    while scheduler.step(Time::ZERO).is_some() {}
    let keys = std::iter::from_fn(|| scheduler.poll_request())
        .map(|out| out.key)
        .collect();
    (id, keys)
}

/// Answers every request with its task's id, and runs until nothing is ready.
fn finish(scheduler: &mut Scheduler, keys: &[RequestKey]) {
    for key in keys {
        let _ = scheduler.handle_response(Time::ZERO, Response::new(*key, Ok(json!(key.task().0))));
        while scheduler.step(Time::ZERO).is_some() {}
    }
}

fn state(scheduler: &Scheduler, id: TaskId) -> String {
    scheduler
        .task_state(id)
        .map(|s| s.to_string())
        .unwrap_or_default()
}

#[test]
fn tasks_are_numbered_from_the_first_id() {
    let mut scheduler = Scheduler::new(Config::new().first_task_id(FIRST));
    let one = scheduler.submit(Time::ZERO, parent_task()).unwrap().id;
    let group = scheduler
        .submit_all(Time::ZERO, vec![parent_task(), parent_task()])
        .unwrap();
    let group: Vec<TaskId> = group.iter().map(|s| s.id).collect();
    assert_eq!(one, TaskId(FIRST));
    assert_eq!(group, [TaskId(FIRST + 1), TaskId(FIRST + 2)]);
    // Each parent's two children follow, in the order the parents ran.
    while scheduler.step(Time::ZERO).is_some() {}
    let asking: Vec<u64> = std::iter::from_fn(|| scheduler.poll_request())
        .map(|out| out.key.task().0)
        .collect();
    assert_eq!(asking, (FIRST + 3..FIRST + 9).collect::<Vec<u64>>());
}

#[test]
fn the_default_first_id_is_one_and_zero_is_taken_as_one() {
    let mut zero = Config::new();
    zero.first_task_id = 0;
    for config in [Config::new(), Config::new().first_task_id(0), zero] {
        let mut scheduler = Scheduler::new(config);
        assert_eq!(
            scheduler.submit(Time::ZERO, parent_task()).unwrap().id,
            TaskId(1)
        );
    }
}

#[test]
fn a_snapshot_keeps_the_numbering() {
    // Restored before any task was made: the first task still gets the first id.
    let fresh = Scheduler::new(Config::new().first_task_id(FIRST));
    let bytes = fresh.snapshot().unwrap().encode().unwrap();
    let mut restored = Scheduler::restore(&Snapshot::decode(&bytes).unwrap(), &registry()).unwrap();
    assert_eq!(
        restored.submit(Time::ZERO, parent_task()).unwrap().id,
        TaskId(FIRST)
    );

    // Restored with the children waiting: they keep their ids, and finish there.
    let mut scheduler = Scheduler::new(Config::new().first_task_id(FIRST));
    let (id, keys) = start(&mut scheduler);
    let bytes = scheduler.snapshot().unwrap().encode().unwrap();
    let mut restored = Scheduler::restore(&Snapshot::decode(&bytes).unwrap(), &registry()).unwrap();
    restored.resend_in_flight();
    let resent: Vec<_> = std::iter::from_fn(|| restored.poll_request())
        .map(|out| out.key)
        .collect();
    assert_eq!(resent, keys);
    finish(&mut restored, &keys);
    assert_eq!(
        state(&restored, id),
        format!("Completed(ok: [{},{}])", FIRST + 1, FIRST + 2)
    );
    let next = restored.submit(Time::ZERO, parent_task()).unwrap().id;
    assert_eq!(next, TaskId(FIRST + 3));
}

#[test]
fn a_replayed_journal_keeps_the_numbering() {
    let mut scheduler = Scheduler::new(Config::new().first_task_id(FIRST));
    let mut journal = Journal::starting_from(&scheduler).unwrap();
    scheduler.record_journal(true);
    let (id, keys) = start(&mut scheduler);
    let tasks: Vec<u64> = keys.iter().map(|k| k.task().0).collect();
    assert_eq!(tasks, [FIRST + 1, FIRST + 2]);
    finish(&mut scheduler, &keys);
    let next = scheduler.submit(Time::ZERO, parent_task()).unwrap().id;
    journal
        .entries
        .extend(std::iter::from_fn(|| scheduler.poll_journal()));

    let replay = Scheduler::replay(&journal, &registry()).unwrap();
    assert_eq!(replay.divergence, None);
    let replayed = replay.scheduler;
    for task in [id, TaskId(FIRST + 1), TaskId(FIRST + 2), next] {
        assert_eq!(
            state(&replayed, task),
            state(&scheduler, task),
            "task {task}"
        );
    }
    assert_eq!(
        state(&replayed, id),
        format!("Completed(ok: [{},{}])", FIRST + 1, FIRST + 2)
    );
    assert_eq!(next, TaskId(FIRST + 3));
}

/// Sessions made without a name are numbered from the first task id, as tasks are: two
/// shards never name a session alike. A scheduler numbering from 1 names them `s-1`,
/// `s-2`, as it always has.
#[test]
fn sessions_are_numbered_from_the_first_task_id() {
    let now = jiff::Timestamp::UNIX_EPOCH;
    let mut shard = Scheduler::new(Config::new().first_task_id(FIRST));
    assert_eq!(
        shard.schedules.sessions.make(None, now),
        format!("s-{FIRST}")
    );
    assert_eq!(
        shard.schedules.sessions.make(None, now),
        format!("s-{}", FIRST + 1)
    );
    let mut lone = Scheduler::new(Config::new());
    assert_eq!(lone.schedules.sessions.make(None, now), "s-1");
}
