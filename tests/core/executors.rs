//! Real executors under virtual time: `TestScheduler::executor` drives the core's
//! `Executor` contract without threads. A real `FunctionTools` answers as it would in
//! the runtime; an executor that holds answers back is polled at exactly the virtual
//! times it asks for; answers sent later through a `Replier` arrive at the next step;
//! cancel signals reach the executor.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use spool::{
    CancelSignal, Executor, Kind, OutboundRequest, Replier, Replies, RequestError, RequestKey,
    Response, TaskId, TaskState, TestScheduler, Time, async_task,
};
use spool_exec::FunctionTools;

fn secs(n: u64) -> Time {
    Time::from_duration(Duration::from_secs(n))
}

/// `add` over two integers, its arguments checked against a schema.
fn add_tool() -> FunctionTools {
    FunctionTools::new()
        .register(
            "add",
            json!({
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
                "additionalProperties": false,
            }),
            |args| {
                let (a, b) = (args["a"].as_i64(), args["b"].as_i64());
                match (a, b) {
                    (Some(a), Some(b)) => Ok(json!(a + b)),
                    _ => Err("a and b must fit in 64 bits".to_owned()),
                }
            },
        )
        .unwrap()
}

/// The answer of a tool call as a value: the result, or `{"error": <the error>}`.
fn shown(answer: Result<Value, RequestError>) -> Value {
    match answer {
        Ok(value) => value,
        Err(error) => json!({"error": error.to_string()}),
    }
}

#[test]
fn function_tools_answer_at_the_virtual_time_of_the_request() {
    let mut scheduler = TestScheduler::new();
    scheduler.executor(Kind::tool("add"), add_tool());
    let id = scheduler.spawn(async_task("adder", |cx| async move {
        cx.sleep(Duration::from_secs(5)).await;
        let sum = cx.tool("add", json!({"a": 2, "b": 3})).await;
        cx.sleep(Duration::from_secs(2)).await;
        let wrong = cx.tool("add", json!({"a": "two"})).await;
        Ok(json!([shown(sum), shown(wrong)]))
    }));
    assert_eq!(scheduler.run_until_quiet(), secs(7));
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Ok(json!([
            5,
            {"error": "invalid arguments: arguments of `add` do not fit its schema: \
                       /a: expected an integer, got \"two\"; /b: required property is missing"}
        ])))
    );
    let sent: Vec<(Time, String)> = scheduler
        .sent_requests()
        .iter()
        .map(|s| (s.at, s.kind.to_string()))
        .collect();
    assert_eq!(
        sent,
        vec![
            (secs(5), "tool:add".to_owned()),
            (secs(7), "tool:add".to_owned())
        ]
    );
}

#[test]
fn a_real_executor_runs_the_same_twice() {
    let run = || {
        let mut scheduler = TestScheduler::new();
        scheduler.executor(Kind::tool("add"), add_tool());
        for n in 0..4_i64 {
            scheduler.spawn(async_task("adder", move |cx| async move {
                cx.sleep(Duration::from_millis(10 * n as u64)).await;
                Ok(cx.tool("add", json!({"a": n, "b": n})).await?)
            }));
        }
        scheduler.run_until_quiet();
        (scheduler.trace_hash(), scheduler.task_states())
    };
    let (hash, states) = run();
    assert_eq!(run(), (hash, states.clone()));
    let results: Vec<TaskState> = states.into_iter().map(|(_, state)| state).collect();
    assert_eq!(
        results,
        (0..4)
            .map(|n| TaskState::Completed(Ok(json!(2 * n))))
            .collect::<Vec<_>>()
    );
}

/// Holds each answer back for as many seconds as the request's payload says, and
/// finishes it in `poll`; logs the time of every `poll`.
struct Delayed {
    due: Vec<(Time, Response)>,
    polls: Arc<Mutex<Vec<Time>>>,
}

impl Executor for Delayed {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        let delay = request.request.payload.value().as_u64().unwrap_or(0);
        let answer = Response::ok(request.key, json!({"after": delay}));
        self.due
            .push((replies.now() + Duration::from_secs(delay), answer));
    }

    fn poll(&mut self, now: Time, replies: &mut Replies<'_>) -> Option<Time> {
        self.polls.lock().unwrap().push(now);
        let (ready, later): (Vec<_>, Vec<_>) = self.due.drain(..).partition(|(at, _)| *at <= now);
        self.due = later;
        for (_, response) in ready {
            replies.send(response);
        }
        self.due.iter().map(|(at, _)| *at).min()
    }
}

/// A task that asks the `slow` tool once, with `delay` as the payload.
fn ask_slow(scheduler: &mut TestScheduler, delay: u64) -> TaskId {
    scheduler.spawn(async_task("ask", move |cx| async move {
        Ok(cx.tool("slow", json!(delay)).await?)
    }))
}

#[test]
fn an_executor_is_polled_at_the_virtual_time_it_asks_for() {
    let polls = Arc::new(Mutex::new(Vec::new()));
    let mut scheduler = TestScheduler::new();
    scheduler.executor(
        Kind::tool("slow"),
        Delayed {
            due: Vec::new(),
            polls: Arc::clone(&polls),
        },
    );
    let late = ask_slow(&mut scheduler, 3);
    let soon = ask_slow(&mut scheduler, 1);
    scheduler.step_until_idle();
    // Polled after each routing that gave it work, at time zero.
    assert_eq!(*polls.lock().unwrap(), vec![Time::ZERO, Time::ZERO]);
    // `advance` stops at the executor's wake-up on the way.
    scheduler.advance(Duration::from_secs(2));
    assert_eq!(scheduler.now(), secs(2));
    assert_eq!(
        scheduler.task_state(soon),
        TaskState::Completed(Ok(json!({"after": 1})))
    );
    assert!(matches!(scheduler.task_state(late), TaskState::Waiting(_)));
    assert_eq!(scheduler.run_until_quiet(), secs(3));
    assert_eq!(
        scheduler.task_state(late),
        TaskState::Completed(Ok(json!({"after": 3})))
    );
    assert_eq!(
        *polls.lock().unwrap(),
        vec![Time::ZERO, Time::ZERO, secs(1), secs(3)]
    );
    // The tasks ended when the answers came, at the executor's virtual times.
    let ended: Vec<(u64, Time)> = scheduler
        .trace_events()
        .iter()
        .filter(|e| e.to == spool::Phase::Completed)
        .map(|e| (e.task.get(), e.time))
        .collect();
    assert_eq!(ended, vec![(soon.get(), secs(1)), (late.get(), secs(3))]);
}

/// Hands out a `Replier` for each request, for the test to answer with later; logs
/// the cancel signals it gets.
#[derive(Default)]
struct Later {
    waiting: Arc<Mutex<Vec<(RequestKey, Replier)>>>,
    canceled: Arc<Mutex<Vec<CancelSignal>>>,
}

impl Executor for Later {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        self.waiting
            .lock()
            .unwrap()
            .push((request.key, replies.replier()));
    }

    fn cancel(&mut self, signal: CancelSignal, _replies: &mut Replies<'_>) {
        self.canceled.lock().unwrap().push(signal);
    }
}

#[test]
fn a_replier_answers_at_the_next_step_and_cancel_signals_reach_the_executor() {
    let later = Later::default();
    let (waiting, canceled) = (Arc::clone(&later.waiting), Arc::clone(&later.canceled));
    let mut scheduler = TestScheduler::new();
    scheduler.executor(Kind::tool("later"), later);
    let answered = scheduler.spawn(async_task("ask", |cx| async move {
        Ok(cx.tool("later", json!("a")).await?)
    }));
    let dropped = scheduler.spawn(async_task("ask", |cx| async move {
        Ok(cx.tool("later", json!("b")).await?)
    }));
    scheduler.step_until_idle();
    let keys: Vec<RequestKey> = waiting.lock().unwrap().iter().map(|(k, _)| *k).collect();
    assert_eq!(
        keys.iter().map(|k| k.task()).collect::<Vec<_>>(),
        vec![answered, dropped]
    );

    scheduler.advance(Duration::from_secs(4));
    let (key, replier) = waiting.lock().unwrap().remove(0);
    assert!(replier.send(Response::ok(key, json!("late"))));
    // Sent from outside the scheduler: it arrives when the test next steps.
    assert!(matches!(
        scheduler.task_state(answered),
        TaskState::Waiting(_)
    ));
    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(answered),
        TaskState::Completed(Ok(json!("late")))
    );
    let ended_at = scheduler
        .trace_events()
        .iter()
        .find(|e| e.task == answered && e.to == spool::Phase::Completed)
        .map(|e| e.time);
    assert_eq!(ended_at, Some(secs(4)));

    scheduler.cancel(dropped).unwrap();
    let other = waiting.lock().unwrap()[0].0;
    assert_eq!(
        *canceled.lock().unwrap(),
        vec![CancelSignal {
            key: other,
            kind: Kind::tool("later"),
        }]
    );
    assert_eq!(
        scheduler.task_state(dropped),
        TaskState::Canceled(spool::CancelReason::Requested)
    );
}
