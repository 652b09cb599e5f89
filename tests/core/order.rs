//! Exact orders: FIFO across tasks, and one poll per step.

use std::sync::{Arc, Mutex};

use serde_json::json;
use spool::{Kind, Mock, Step, TaskId, TaskState, TestScheduler, Time, task_fn};

fn ids(raw: &[u64]) -> Vec<TaskId> {
    raw.iter().copied().map(TaskId::from_raw).collect()
}

/// Five tasks that each yield twice: the core's `step` returns the task it polled,
/// one per call, in FIFO order, then `None`.
#[test]
fn core_step_polls_one_task_per_call_in_fifo_order() {
    let mut scheduler = TestScheduler::new();
    for _ in 0..5 {
        let mut polls = 0;
        scheduler.spawn(task_fn("yielder", move |_cx| {
            polls += 1;
            if polls == 3 {
                Step::done(polls)
            } else {
                Step::Yield
            }
        }));
    }
    let core = scheduler.core_mut();
    let mut order = Vec::new();
    while let Some(id) = core.step(Time::ZERO) {
        order.push(id);
        assert_eq!(core.stats().polls, order.len() as u64, "one poll per step");
    }
    assert_eq!(order, ids(&[1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5]));
    assert_eq!(core.step(Time::ZERO), None);
    let stats = core.stats();
    assert_eq!((stats.polls, stats.yields, stats.completed), (15, 10, 5));
    for id in ids(&[1, 2, 3, 4, 5]) {
        assert_eq!(scheduler.task_state(id), TaskState::Completed(Ok(json!(3))));
    }
}

/// Five tasks that each make two requests answered at once: `TestScheduler::step`
/// polls exactly one task per call, and a task whose answer came back goes to the back
/// of the queue.
#[test]
fn test_scheduler_step_polls_one_task_per_call_in_fifo_order() {
    let mut scheduler = TestScheduler::new();
    scheduler.mock(
        Kind::Llm,
        Mock::Fn(Box::new(|out| Ok(json!(out.key.to_string())))),
    );
    let log: Arc<Mutex<Vec<TaskId>>> = Arc::default();
    for _ in 0..5 {
        let log = Arc::clone(&log);
        let mut answers = Vec::new();
        scheduler.spawn(task_fn("asker", move |cx| {
            log.lock().unwrap().push(cx.task_id());
            if let Some(answer) = cx.take_answer() {
                answers.push(answer.result.unwrap_or_default());
            }
            if answers.len() == 2 {
                return Step::done(answers.clone());
            }
            cx.llm(json!(null));
            Step::Wait
        }));
    }

    let mut steps = 0;
    while scheduler.step() {
        steps += 1;
        assert_eq!(
            log.lock().unwrap().len(),
            steps,
            "step {steps} polled more or less than one task"
        );
    }
    assert_eq!(steps, 15);
    assert_eq!(
        *log.lock().unwrap(),
        ids(&[1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5])
    );
    for n in 1..=5u64 {
        assert_eq!(
            scheduler.task_state(TaskId::from_raw(n)),
            TaskState::Completed(Ok(json!([format!("{n}:1"), format!("{n}:2")])))
        );
    }
}

/// A task submitted while others run joins the back of the queue.
#[test]
fn task_submitted_later_runs_after_those_already_ready() {
    let mut scheduler = TestScheduler::new();
    let log: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let logger = |name: &'static str, yields: u32| {
        let log = Arc::clone(&log);
        let mut left = yields;
        task_fn(name, move |_cx| {
            log.lock().unwrap().push(name);
            if left == 0 {
                return Step::done(name);
            }
            left -= 1;
            Step::Yield
        })
    };
    scheduler.spawn(logger("a", 2));
    scheduler.spawn(logger("b", 1));
    assert!(scheduler.step());
    assert!(scheduler.step());
    scheduler.spawn(logger("c", 0));
    scheduler.step_until_idle();
    assert_eq!(*log.lock().unwrap(), ["a", "b", "a", "b", "c", "a"]);
}
