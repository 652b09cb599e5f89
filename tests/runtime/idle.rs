//! `run_until_idle` returns only when no request is out with an executor.

use std::thread;
use std::time::Duration;

use serde_json::json;
use spool::{
    Executor, Kind, NewTask, OutboundRequest, Replies, Response, Runtime, Step, TaskState, task_fn,
};

use crate::support::{LIMIT, within};

/// Answers each request 50 ms later from a thread of its own.
struct Later;

impl Executor for Later {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        let replier = replies.replier();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            let _ = replier.send(Response::ok(request.key, json!("late")));
        });
    }
}

/// Bug: a task that makes a request and finishes in the same poll makes the core's
/// `in_flight_len` drop by one too many, so `run_until_idle` sees nothing with the
/// executors and returns while another task's request is still out. (Submitted in the
/// other order, the count underflows: a debug build panics in the loop, a release build
/// blocks forever.)
#[test]
fn run_until_idle_waits_for_requests_after_a_task_requests_and_finishes_in_one_poll() {
    let mut runtime = Runtime::builder().executor(Kind::Llm, Later).build();
    let asker = runtime
        .submit(NewTask::new(crate::support::ask_once(
            "asker",
            spool::Request::llm(json!("q")),
        )))
        .unwrap()
        .id;
    let quitter = runtime
        .submit(NewTask::new(task_fn("quitter", |cx| {
            cx.llm(json!("never sent"));
            Step::done("early")
        })))
        .unwrap()
        .id;

    let runtime = within(LIMIT, "run_until_idle", move || {
        runtime.run_until_idle();
        runtime
    });
    assert_eq!(
        runtime.task_state(quitter),
        Some(TaskState::Completed(Ok(json!("early"))))
    );
    assert_eq!(
        runtime.task_state(asker),
        Some(TaskState::Completed(Ok(json!("late")))),
        "run_until_idle returned while the asker's request was still out"
    );
}
