//! Executors that answer later: from another thread through a `Replier`, or from
//! their own `poll` when a deadline comes.

use std::collections::VecDeque;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;
use spool::{
    Executor, Kind, NewTask, OutboundRequest, Replies, Response, Runtime, Step, TaskState, Time,
    task_fn,
};

use crate::support::{LIMIT, within};

/// Answers each request 5 ms later from a thread of its own.
struct FromAnotherThread;

impl Executor for FromAnotherThread {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        let replier = replies.replier();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(5));
            let answer = json!({"late": request.request.payload});
            assert!(
                replier.send(Response::ok(request.key, answer)),
                "the runtime is gone"
            );
        });
    }
}

/// Keeps each request for 20 ms and answers it from `poll`.
#[derive(Default)]
struct AnswersFromPoll {
    due: VecDeque<(Time, OutboundRequest)>,
}

impl Executor for AnswersFromPoll {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        self.due
            .push_back((replies.now() + Duration::from_millis(20), request));
    }

    fn poll(&mut self, now: Time, replies: &mut Replies<'_>) -> Option<Time> {
        while let Some((at, _)) = self.due.front() {
            if *at > now {
                return Some(*at);
            }
            if let Some((_, request)) = self.due.pop_front() {
                replies.send(Response::ok(
                    request.key,
                    json!({"polled": request.request.payload}),
                ));
            }
        }
        None
    }
}

/// Submits `count` tasks that each make one request of `kind` with their index as
/// payload and finish with the answer.
fn submit_askers(runtime: &mut Runtime, kind: &Kind, count: u64) -> Vec<spool::TaskId> {
    (0..count)
        .map(|n| {
            let mut asked = false;
            let kind = kind.clone();
            let task = task_fn("asker", move |cx| {
                if !asked {
                    asked = true;
                    cx.request(spool::Request::new(kind.clone(), json!(n)));
                    return Step::Wait;
                }
                Step::Done(
                    cx.take_answer()
                        .unwrap()
                        .result
                        .map_err(|e| e.into_task_error(1)),
                )
            });
            runtime.submit(NewTask::new(task)).unwrap().id
        })
        .collect()
}

#[test]
fn replier_answers_later_from_another_thread() {
    let kind = Kind::tool("later");
    let mut runtime = Runtime::builder()
        .executor(kind.clone(), FromAnotherThread)
        .build();
    let ids = submit_askers(&mut runtime, &kind, 20);

    let runtime = within(LIMIT, "run_until_idle", move || {
        runtime.run_until_idle();
        runtime
    });

    for (n, id) in (0..).zip(&ids) {
        assert_eq!(
            runtime.task_state(*id),
            Some(TaskState::Completed(Ok(json!({"late": n})))),
            "task {id}"
        );
    }
    assert_eq!(runtime.scheduler().stats().answers, 20);
}

#[test]
fn executor_poll_answers_when_its_deadline_comes() {
    let kind = Kind::custom("queued");
    let mut runtime = Runtime::builder()
        .executor(kind.clone(), AnswersFromPoll::default())
        .build();
    let ids = submit_askers(&mut runtime, &kind, 10);

    let started = Instant::now();
    let runtime = within(LIMIT, "run_until_idle", move || {
        runtime.run_until_idle();
        runtime
    });
    assert!(
        started.elapsed() >= Duration::from_millis(20),
        "answered before the executor's deadline"
    );

    for (n, id) in (0..).zip(&ids) {
        assert_eq!(
            runtime.task_state(*id),
            Some(TaskState::Completed(Ok(json!({"polled": n})))),
            "task {id}"
        );
    }
}
