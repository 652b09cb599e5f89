//! Every task type registered in the project's tests and example runs through
//! `TestScheduler` with the round-trip check on — after every step for the task polled,
//! and at a snapshot after every step for every live task — from its first poll to its
//! end; each test also asserts that every type of its registry was live at a snapshot,
//! so a type added to a registry and left out of the workload fails it.
//!
//! The registries checked elsewhere: the schedule tests' (`tests/schedules`,
//! `schedule-year`, `schedule-findings`) and the async replay tests' run on
//! `TestScheduler` with their registry, so the check runs there; the built-in agent's
//! (`spool run`, `spool serve`, the demo) is checked at every stage in `spool-cli`'s
//! `demo::agent` tests.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;
use spool::{Kind, Mock, NewTask, TaskRegistry, TaskState, TestScheduler};

#[allow(dead_code, unreachable_pub)]
#[path = "../snapshot/tasks.rs"]
mod snapshot_tasks;

#[allow(dead_code, unreachable_pub)]
#[path = "../store/tasks.rs"]
mod store_tasks;

/// Runs `tasks` to their ends on `scheduler` (its registry and mocks set), taking a
/// snapshot — which checks every live task — after every step, and returns the types
/// that were live at a snapshot.
fn run_checked(
    mut scheduler: TestScheduler,
    registry: &TaskRegistry,
    tasks: Vec<NewTask>,
) -> BTreeSet<String> {
    scheduler.set_registry(registry.clone());
    let ids: Vec<_> = tasks.into_iter().map(|t| scheduler.submit(t)).collect();
    let mut seen = BTreeSet::new();
    let ended = |s: &TestScheduler| {
        s.task_states()
            .iter()
            .all(|(_, state)| matches!(state, TaskState::Completed(_) | TaskState::Canceled(_)))
    };
    for _ in 0..100_000 {
        if scheduler.step() {
            scheduler.snapshot().expect("saveable");
            for info in scheduler.core().tasks() {
                if !matches!(info.state, TaskState::Completed(_) | TaskState::Canceled(_)) {
                    seen.insert(info.type_name.into_owned());
                }
            }
        } else if ended(&scheduler) {
            break;
        } else {
            scheduler.advance(Duration::from_millis(1));
        }
    }
    assert!(ended(&scheduler), "{:?}", scheduler.task_states());
    assert!(
        ids.iter()
            .all(|id| scheduler.task_state(*id) != TaskState::Ready)
    );
    seen
}

fn names(registry: &TaskRegistry) -> BTreeSet<String> {
    registry
        .type_names()
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// The snapshot tests' types: askers, sleepers, failers, callers, parents of every
/// kind of child, workers running every op, a scorer holding a float.
#[test]
fn the_snapshot_tests_types_round_trip() {
    use snapshot_tasks::{Asker, Caller, Failer, Kid, Op, Parent, Scorer, Sleeper, Worker};
    let registry = snapshot_tasks::registry();
    let mut scheduler = TestScheduler::new();
    scheduler.mock_llm_fn(|_| Ok(json!(2)));
    scheduler.mock(Kind::tool("search".to_owned()), Mock::Fixed(json!(3)));
    let tasks = vec![
        NewTask::new(Asker::new(3)),
        NewTask::new(Sleeper::new(&[2, 5])),
        NewTask::new(Failer::new(2)),
        NewTask::new(Caller::new("llm", json!({"q": null})).tokens(5)),
        NewTask::new(Caller::new("tool:search", json!("x"))),
        NewTask::new(Parent::new(vec![
            Kid::Ask(1),
            Kid::Sleep(3),
            Kid::Fail(1),
            Kid::Call("llm".to_owned()),
            Kid::Parent(vec![Kid::Ask(2)]),
        ])),
        NewTask::new(Parent::first_only(vec![Kid::Sleep(4), Kid::Ask(1)])),
        NewTask::new(Worker::new(vec![
            Op::Llm(10),
            Op::Tool("search".to_owned()),
            Op::FanOut(3),
            Op::Race(2),
            Op::Sleep(2),
            Op::Yield,
            Op::Spawn(vec![vec![Op::Llm(1)], vec![Op::Yield, Op::Fail]]),
        ])),
        NewTask::new(Scorer {
            score: 0.1,
            asked: false,
        }),
    ];
    let seen = run_checked(scheduler, &registry, tasks);
    assert_eq!(seen, names(&registry));
}

/// The store tests' types: workers asking the LLM, a tool and a human, and chats.
#[test]
fn the_store_tests_types_round_trip() {
    use store_tasks::{Chat, Worker, confirm_answer, llm_answer, tool_answer};
    let registry = store_tasks::registry();
    let mut scheduler = TestScheduler::new();
    scheduler.mock_llm_fn(|r| Ok(llm_answer(r.request.payload.value(), 40)));
    scheduler.mock(
        Kind::tool("count".to_owned()),
        Mock::Fn(Box::new(|r| Ok(tool_answer(r.request.payload.value())))),
    );
    scheduler.mock(
        Kind::Confirm,
        Mock::Fn(Box::new(|r| Ok(confirm_answer(r.request.payload.value())))),
    );
    let tasks = vec![
        NewTask::new(Worker::new("w1", 7, Some(2))),
        NewTask::new(Worker::new("w2", 4, None)),
        NewTask::new(Chat::new(3)),
    ];
    let seen = run_checked(scheduler, &registry, tasks);
    assert_eq!(seen, names(&registry));
}
