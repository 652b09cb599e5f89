//! Bookkeeping the embedder and drivers rely on: the in-flight count when a task ends in
//! the poll that made requests, and cancel signals for requests a driver has taken.

use serde_json::json;
use spool::{
    CancelSignal, Config, Delivery, Kind, NewTask, Scheduler, Step, TaskError, TaskState, Time,
    task_fn,
};

/// A task that makes one `tool:x` request, waits, and finishes with its answer.
fn one_request() -> impl spool::AgentTask {
    crate::support::ask_once("one-request", spool::Request::tool("x", json!(1)))
}

/// Bug: a request made in the poll that returns `Done` is counted in the task's
/// `in_flight` but not yet in the scheduler's; `end` subtracts the task's count from the
/// scheduler's anyway, so another task's request disappears from `in_flight_len` (and
/// with nothing else in flight the subtraction underflows).
#[test]
fn request_then_done_in_the_same_poll_leaves_in_flight_exact() {
    let now = Time::ZERO;
    let mut core = Scheduler::new(Config::new());
    let waiter = core.submit(now, NewTask::new(one_request())).unwrap().id;
    let quitter = core
        .submit(
            now,
            NewTask::new(task_fn("quitter", |cx| {
                cx.tool("x", json!("never sent"));
                Step::done("early")
            })),
        )
        .unwrap()
        .id;
    while core.step(now).is_some() {}
    assert_eq!(
        core.task_state(quitter),
        Some(TaskState::Completed(Ok(json!("early"))))
    );
    assert_eq!(
        core.in_flight_len(),
        1,
        "the waiter's request is still in flight"
    );
    let out = core.poll_request().unwrap();
    assert_eq!(out.key.task(), waiter);
    assert!(
        core.poll_request().is_none(),
        "the quitter's request never goes out"
    );
    // Answering the waiter's request then underflows the count.
    assert_eq!(
        core.handle_response(now, spool::Response::ok(out.key, json!("v"))),
        Delivery::Delivered
    );
    assert_eq!(core.in_flight_len(), 0);
}

/// Bug: the same for a poll that panics after making a request: the scheduler's
/// `in_flight -= task.in_flight` underflows (a debug build panics inside `step`, so the
/// loop does not "go on" as docs/semantics.md promises; a release build wraps).
#[test]
fn request_then_panic_in_the_same_poll_fails_only_the_task() {
    let now = Time::ZERO;
    let mut core = Scheduler::new(Config::new());
    let panicker = core
        .submit(
            now,
            NewTask::new(task_fn("panicker", |cx| {
                cx.tool("x", json!("never sent"));
                panic!("after a request");
            })),
        )
        .unwrap()
        .id;
    while core.step(now).is_some() {}
    assert_eq!(
        core.task_state(panicker),
        Some(TaskState::Completed(Err(TaskError::Panicked {
            task: panicker,
            message: "after a request".into()
        })))
    );
    assert_eq!(core.in_flight_len(), 0);
    assert!(core.poll_request().is_none());
}

/// Bug: a driver that takes a task's requests from the outbox before routing them (the
/// calling order in docs/architecture.md allows it) and then finds no executor for the
/// first one gets no cancel signal for the second, which it has taken and will send:
/// `handle_unroutable` lowers `sent_through` to the unroutable number minus one, which
/// also "un-sends" every later request already taken. (The bundled drivers route each
/// request as they take it, so they do not hit this.)
#[test]
fn unroutable_request_cancels_later_requests_already_taken() {
    let now = Time::ZERO;
    let mut core = Scheduler::new(Config::new());
    let id = core
        .submit(
            now,
            NewTask::new(task_fn("two-kinds", |cx| {
                cx.tool("nope", json!(1));
                cx.llm(json!(2));
                Step::Wait
            })),
        )
        .unwrap()
        .id;
    while core.step(now).is_some() {}
    let taken: Vec<_> = std::iter::from_fn(|| core.poll_request()).collect();
    assert_eq!(taken.len(), 2);
    assert_eq!(
        core.handle_unroutable(now, taken[0].key),
        Delivery::Delivered
    );
    assert_eq!(
        core.task_state(id),
        Some(TaskState::Completed(Err(TaskError::NoExecutor {
            task: id,
            kind: Kind::tool("nope")
        })))
    );
    let cancels: Vec<_> = std::iter::from_fn(|| core.poll_cancel()).collect();
    assert_eq!(
        cancels,
        [CancelSignal {
            key: taken[1].key,
            kind: Kind::Llm
        }],
        "the llm request left the outbox and goes to its executor"
    );
}
