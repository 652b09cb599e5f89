//! Async agents (`async_task` and `Cx`) under `TestScheduler`: the same agent written
//! as a state machine and as `async` code makes the same requests; fan-outs; timed
//! confirmations; panics and stalls; request futures dropped before their answer.
//! Every snapshot was checked by hand against docs/semantics.md.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{Either, select};
use serde_json::{Value, json};
use spool::{
    AgentTask, CancelSignal, Delivery, DropReason, Kind, Mock, NewTask, RequestError, Step,
    TaskContext, TaskError, TaskId, TaskState, TestScheduler, Time, WaitReason, async_task,
};

use crate::support::{assert_trace_continuous, held_keys};

/// A request as an executor (or the test, for held kinds) saw it.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    kind: String,
    payload: Value,
    task: u64,
    number: u32,
}

type Log = Arc<Mutex<Vec<Seen>>>;

fn seen(out: &spool::OutboundRequest) -> Seen {
    Seen {
        kind: out.request.kind.to_string(),
        payload: out.request.payload.value().clone(),
        task: out.key.task().get(),
        number: out.key.number(),
    }
}

/// A mock that records each request in `log`, then answers with `answer(payload)`.
fn recording<F>(log: &Log, answer: F) -> Mock
where
    F: Fn(&Value) -> Result<Value, RequestError> + Send + 'static,
{
    let log = Arc::clone(log);
    Mock::Fn(Box::new(move |out| {
        log.lock().unwrap().push(seen(out));
        answer(out.request.payload.value())
    }))
}

fn t(n: u64) -> TaskId {
    TaskId::from_raw(n)
}

// ---------------------------------------------------------------------------------
// 1. One agent, written twice.
// ---------------------------------------------------------------------------------

/// The researcher's first prompt.
fn plan_prompt() -> Value {
    json!({"prompt": "plan", "topic": "spool"})
}

/// The three tool calls the plan asks for, in the order the agent makes them.
fn tool_calls(plan: &Value) -> [(&'static str, Value); 3] {
    [
        ("search", json!({"q": plan["search"]})),
        ("fetch", json!({"url": plan["fetch"]})),
        ("calc", json!({"expr": plan["calc"]})),
    ]
}

fn question(facts: &[Value]) -> Value {
    json!({"question": "publish the report?", "facts": facts})
}

fn write_prompt(facts: &[Value], approved: &Value) -> Value {
    json!({"prompt": "write", "facts": facts, "approved": approved})
}

fn report(report: Value, facts: Vec<Value>) -> Value {
    json!({"report": report, "facts": facts})
}

/// Where the explicit researcher is.
#[derive(Debug)]
enum Stage {
    Start,
    Planning,
    Researching,
    Confirming,
    Writing,
}

/// The researcher as an explicit state machine: plan with the LLM, call three tools
/// at once, ask a human, write the report with the LLM.
#[derive(Debug)]
struct Researcher {
    stage: Stage,
    facts: Vec<Value>,
}

impl Researcher {
    fn new() -> Researcher {
        Researcher {
            stage: Stage::Start,
            facts: Vec::new(),
        }
    }

    fn take(cx: &mut TaskContext<'_>) -> Result<Value, TaskError> {
        let answer = cx
            .take_answer()
            .ok_or_else(|| TaskError::failed("resumed without an answer"))?;
        answer.result.map_err(|e| e.into_task_error(answer.number))
    }

    fn resume(&mut self, cx: &mut TaskContext<'_>) -> Result<Step, TaskError> {
        match self.stage {
            Stage::Start => {
                cx.llm(plan_prompt());
                self.stage = Stage::Planning;
            }
            Stage::Planning => {
                let plan = Self::take(cx)?;
                for (tool, args) in tool_calls(&plan) {
                    cx.tool(tool, args);
                }
                self.stage = Stage::Researching;
            }
            Stage::Researching => {
                // `take_answer` gives the lowest request number first, whatever
                // order the answers arrived in.
                self.facts = (0..3).map(|_| Self::take(cx)).collect::<Result<_, _>>()?;
                cx.confirm(question(&self.facts));
                self.stage = Stage::Confirming;
            }
            Stage::Confirming => {
                let approved = Self::take(cx)?;
                cx.llm(write_prompt(&self.facts, &approved));
                self.stage = Stage::Writing;
            }
            Stage::Writing => {
                let text = Self::take(cx)?;
                return Ok(Step::done(report(text, std::mem::take(&mut self.facts))));
            }
        }
        Ok(Step::Wait)
    }
}

impl AgentTask for Researcher {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        self.resume(cx).unwrap_or_else(|e| Step::Done(Err(e)))
    }

    fn type_name(&self) -> &'static str {
        "researcher"
    }
}

/// The same researcher as `async` code.
fn async_researcher() -> spool::AsyncTask {
    async_task("researcher", |cx| async move {
        let plan = cx.llm(plan_prompt()).await?;
        let calls = tool_calls(&plan)
            .into_iter()
            .map(|(tool, args)| cx.tool(tool, args))
            .collect();
        let facts = cx
            .all(calls)
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        let approved = cx.confirm(question(&facts)).await?;
        let text = cx.llm(write_prompt(&facts, &approved)).await?;
        Ok(report(text, facts))
    })
}

/// What one run of a researcher shows.
#[derive(Debug)]
struct Run {
    requests: Vec<Seen>,
    confirmation_since: Time,
    state: TaskState,
    trace: String,
    polls: u64,
}

/// Runs a researcher: the LLM answers at once; the tools answer after 30, 10 and 20 ms,
/// so their answers arrive in the order fetch, calc, search; the test approves the
/// confirmation a second after it was asked.
fn run_researcher(task: impl AgentTask) -> Run {
    let log = Log::default();
    let mut scheduler = TestScheduler::new();
    let llm_log = Arc::clone(&log);
    scheduler.mock_llm_fn(move |out| {
        llm_log.lock().unwrap().push(seen(out));
        let payload = out.request.payload.value();
        match payload["prompt"].as_str() {
            Some("plan") => Ok(json!({"search": "spool", "fetch": "docs.rs/spool", "calc": "6*7"})),
            _ => Ok(json!(format!(
                "{} facts, approved: {}",
                payload["facts"].as_array().map_or(0, Vec::len),
                payload["approved"]
            ))),
        }
    });
    let latencies = [("search", 30), ("fetch", 10), ("calc", 20)];
    for (tool, ms) in latencies {
        scheduler.mock_with_latency(
            Kind::tool(tool),
            recording(&log, move |args| Ok(json!(format!("{tool}({args})")))),
            Duration::from_millis(ms),
        );
    }
    let id = scheduler.submit(NewTask::new(task));
    assert_eq!(id, t(1));

    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.now(),
        Time::from_duration(Duration::from_millis(30))
    );
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Waiting(WaitReason::Request(Kind::Confirm))
    );
    let pending = scheduler.pending_confirmations();
    assert_eq!(pending.len(), 1);
    log.lock().unwrap().push(seen(&pending[0].request));

    scheduler.advance(Duration::from_secs(1));
    assert_eq!(
        scheduler.answer(pending[0].request.key, true),
        Delivery::Delivered
    );
    scheduler.run_until_quiet();
    assert_trace_continuous(&scheduler);

    let requests = log.lock().unwrap().clone();
    Run {
        requests,
        confirmation_since: pending[0].since,
        state: scheduler.task_state(id),
        trace: scheduler.trace(),
        polls: scheduler.stats().polls,
    }
}

#[test]
fn the_same_agent_as_a_state_machine_and_as_async_code_makes_the_same_requests() {
    let explicit = run_researcher(Researcher::new());
    let coroutine = run_researcher(async_researcher());

    let facts = json!([
        "search({\"q\":\"spool\"})",
        "fetch({\"url\":\"docs.rs/spool\"})",
        "calc({\"expr\":\"6*7\"})",
    ]);
    let expected = vec![
        Seen {
            kind: "llm".into(),
            payload: plan_prompt(),
            task: 1,
            number: 1,
        },
        Seen {
            kind: "tool:search".into(),
            payload: json!({"q": "spool"}),
            task: 1,
            number: 2,
        },
        Seen {
            kind: "tool:fetch".into(),
            payload: json!({"url": "docs.rs/spool"}),
            task: 1,
            number: 3,
        },
        Seen {
            kind: "tool:calc".into(),
            payload: json!({"expr": "6*7"}),
            task: 1,
            number: 4,
        },
        Seen {
            kind: "confirm".into(),
            payload: json!({"question": "publish the report?", "facts": facts}),
            task: 1,
            number: 5,
        },
        Seen {
            kind: "llm".into(),
            payload: json!({"prompt": "write", "facts": facts, "approved": true}),
            task: 1,
            number: 6,
        },
    ];
    assert_eq!(explicit.requests, expected);
    assert_eq!(coroutine.requests, expected);

    let done = TaskState::Completed(Ok(json!({
        "report": "3 facts, approved: true",
        "facts": facts,
    })));
    assert_eq!(explicit.state, done);
    assert_eq!(coroutine.state, done);

    let asked_at = Time::from_duration(Duration::from_millis(30));
    assert_eq!(explicit.confirmation_since, asked_at);
    assert_eq!(coroutine.confirmation_since, asked_at);

    // One poll per stage in both: the fan-out resumes the async agent once, not per answer.
    assert_eq!((explicit.polls, coroutine.polls), (5, 5));
    assert_eq!(explicit.trace, coroutine.trace);
    insta::assert_snapshot!(coroutine.trace);
}

// ---------------------------------------------------------------------------------
// 2a. Fan-outs answered out of order.
// ---------------------------------------------------------------------------------

/// Three held `tool:x` calls made together, answered in the order 3, 1, 2 with a step
/// after each answer. Returns the scheduler and the states the task went through.
fn answer_three_out_of_order(task: spool::AsyncTask) -> (TestScheduler, Vec<TaskState>) {
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::tool("x"));
    let id = scheduler.spawn(task);
    scheduler.step_until_idle();
    let keys = held_keys(&scheduler);
    let numbers: Vec<(TaskId, u32)> = keys.iter().map(|k| (k.task(), k.number())).collect();
    assert_eq!(numbers, [(id, 1), (id, 2), (id, 3)]);
    let payloads: Vec<Value> = scheduler
        .held_requests()
        .iter()
        .map(|h| h.request.request.payload.value().clone())
        .collect();
    assert_eq!(payloads, [json!("a"), json!("b"), json!("c")]);

    let mut states = vec![scheduler.task_state(id)];
    for (arrival, key) in ["1st", "2nd", "3rd"]
        .into_iter()
        .zip([keys[2], keys[0], keys[1]])
    {
        let value = format!("request {}, arrived {arrival}", key.number());
        assert_eq!(scheduler.answer(key, value), Delivery::Delivered);
        scheduler.step_until_idle();
        states.push(scheduler.task_state(id));
    }
    assert_trace_continuous(&scheduler);
    (scheduler, states)
}

fn in_request_order() -> TaskState {
    TaskState::Completed(Ok(json!([
        "request 1, arrived 2nd",
        "request 2, arrived 3rd",
        "request 3, arrived 1st",
    ])))
}

#[test]
fn cx_all_fan_out_answered_3_1_2_resumes_once_with_answers_in_request_order() {
    let task = async_task("fan-out", |cx| async move {
        let answers = cx
            .all(vec![
                cx.tool("x", json!("a")),
                cx.tool("x", json!("b")),
                cx.tool("x", json!("c")),
            ])
            .await;
        Ok(json!(answers.into_iter().collect::<Result<Vec<_>, _>>()?))
    });
    let (scheduler, states) = answer_three_out_of_order(task);

    assert_eq!(
        states,
        [
            TaskState::Waiting(WaitReason::Requests(3)),
            TaskState::Waiting(WaitReason::Requests(2)),
            TaskState::Waiting(WaitReason::Request(Kind::tool("x"))),
            in_request_order(),
        ]
    );
    assert_eq!(scheduler.stats().polls, 2, "one poll to ask, one to finish");
    insta::assert_snapshot!(scheduler.trace());
}

#[test]
fn futures_join_all_fan_out_is_woken_per_answer_and_still_sees_request_order() {
    let task = async_task("join-all", |cx| async move {
        let answers = futures::future::join_all(vec![
            cx.tool("x", json!("a")),
            cx.tool("x", json!("b")),
            cx.tool("x", json!("c")),
        ])
        .await;
        Ok(json!(answers.into_iter().collect::<Result<Vec<_>, _>>()?))
    });
    let (scheduler, states) = answer_three_out_of_order(task);

    assert_eq!(
        states,
        [
            TaskState::Waiting(WaitReason::Requests(3)),
            TaskState::Waiting(WaitReason::Requests(2)),
            TaskState::Waiting(WaitReason::Request(Kind::tool("x"))),
            in_request_order(),
        ]
    );
    // Spool cannot see that a generic `join_all` needs every answer: each one wakes it.
    assert_eq!(scheduler.stats().polls, 4);
    insta::assert_snapshot!(scheduler.trace());
}

/// An async agent that finishes with the sum of `n` `tool:echo` calls made with
/// `futures::future::join_all`.
fn generic_join_all_of(scheduler: &mut TestScheduler, n: u64) -> TaskId {
    scheduler.mock(
        Kind::tool("echo"),
        Mock::Fn(Box::new(|out| Ok(out.request.payload.value().clone()))),
    );
    scheduler.spawn(async_task("wide", move |cx| async move {
        let answers = futures::future::join_all((0..n).map(|i| cx.tool("echo", json!(i)))).await;
        let mut sum = 0;
        for answer in answers {
            sum += answer?.as_u64().unwrap_or(0);
        }
        Ok(json!(sum))
    }))
}

#[test]
fn futures_join_all_of_30_requests_completes() {
    let mut scheduler = TestScheduler::new();
    let id = generic_join_all_of(&mut scheduler, 30);
    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Ok(json!((0..30).sum::<u64>())))
    );
}

/// Above 30 futures, `futures::future::join_all` switches to `FuturesOrdered`, which
/// polls a future again only after that future woke its waker: spool's request futures
/// register the combinator's waker and spool wakes it when the answer arrives, so the
/// combinator sees every answer and the task completes (before that fix it ended
/// `Stalled`).
#[test]
fn futures_join_all_of_31_requests_completes() {
    let mut scheduler = TestScheduler::new();
    let id = generic_join_all_of(&mut scheduler, 31);
    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Ok(json!((0..31).sum::<u64>())))
    );
}

// ---------------------------------------------------------------------------------
// 2d. A confirmation answered after 30 s of virtual time.
// ---------------------------------------------------------------------------------

#[test]
fn confirmation_answered_after_thirty_virtual_seconds() {
    let mut scheduler = TestScheduler::new();
    scheduler.mock_llm(["rm -rf build/"]);
    let id = scheduler.spawn(async_task("deployer", |cx| async move {
        let plan = cx.llm(json!({"prompt": "clean up?"})).await?;
        cx.sleep(Duration::from_secs(5)).await;
        let asked = cx.now();
        let approved = cx.confirm(json!({"run": plan})).await?;
        Ok(json!({
            "approved": approved,
            "asked_at": asked.to_string(),
            "answered_at": cx.now().to_string(),
        }))
    }));

    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Waiting(WaitReason::Timer)
    );
    assert!(scheduler.pending_confirmations().is_empty());

    scheduler.advance(Duration::from_secs(5));
    let pending = scheduler.pending_confirmations();
    assert_eq!(pending.len(), 1);
    let confirmation = &pending[0];
    assert_eq!(
        confirmation.since,
        Time::from_duration(Duration::from_secs(5))
    );
    assert_eq!(
        (
            confirmation.request.key.task(),
            confirmation.request.key.number()
        ),
        (id, 2)
    );
    assert_eq!(confirmation.request.request.kind, Kind::Confirm);
    assert_eq!(
        confirmation.request.request.payload,
        json!({"run": "rm -rf build/"})
    );

    scheduler.advance(Duration::from_secs(30));
    assert_eq!(
        scheduler.now(),
        Time::from_duration(Duration::from_secs(35))
    );
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Waiting(WaitReason::Request(Kind::Confirm))
    );
    // Still listed, still with the time it was asked.
    assert_eq!(scheduler.pending_confirmations(), pending);

    assert_eq!(
        scheduler.answer(confirmation.request.key, true),
        Delivery::Delivered
    );
    assert!(scheduler.pending_confirmations().is_empty());
    scheduler.step_until_idle();

    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Ok(json!({
            "approved": true,
            "asked_at": "5.000s",
            "answered_at": "35.000s",
        })))
    );
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}

// ---------------------------------------------------------------------------------
// 3. Panics and stalls.
// ---------------------------------------------------------------------------------

#[test]
fn an_async_task_that_panics_fails_and_the_others_finish() {
    let mut scheduler = TestScheduler::new();
    scheduler.inject_mock_tool("ls", json!(["a.txt"]));
    let steady = |name: &'static str| {
        async_task(name, |cx| async move {
            let files = cx.tool("ls", json!({})).await?;
            Ok(json!({"files": files}))
        })
    };
    let before = scheduler.spawn(steady("before"));
    let panicker = scheduler.spawn(async_task("panicker", |cx| async move {
        let files = cx.tool("ls", json!({})).await?;
        if files.is_array() {
            panic!("cannot handle {files}");
        }
        Ok(files)
    }));
    let after = scheduler.spawn(steady("after"));

    scheduler.run_until_quiet();

    let error = TaskError::Panicked {
        task: panicker,
        message: "cannot handle [\"a.txt\"]".into(),
    };
    assert_eq!(
        error.to_string(),
        "task 2 panicked: cannot handle [\"a.txt\"]"
    );
    assert_eq!(
        scheduler.task_state(panicker),
        TaskState::Completed(Err(error))
    );
    let ok = TaskState::Completed(Ok(json!({"files": ["a.txt"]})));
    assert_eq!(scheduler.task_state(before), ok);
    assert_eq!(scheduler.task_state(after), ok);

    // A task submitted after the panic runs normally: the panic left no frame behind.
    let later = scheduler.spawn(steady("later"));
    scheduler.run_until_quiet();
    assert_eq!(scheduler.task_state(later), ok);
    let stats = scheduler.stats();
    assert_eq!((stats.completed, stats.failed), (3, 1));
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}

const STALL_HINT: &str = "it waits with no request in flight, no timer set and no \
                          child joined (an async task that awaits something other than a \
                          spool request does this)";

fn stalled(task: TaskId) -> TaskState {
    TaskState::Completed(Err(TaskError::Stalled {
        task,
        hint: STALL_HINT.into(),
    }))
}

#[test]
fn an_async_task_that_awaits_something_spool_does_not_know_ends_stalled() {
    let mut scheduler = TestScheduler::new();
    scheduler.mock_with_latency(
        Kind::tool("slow"),
        Mock::Fixed(json!("done")),
        Duration::from_millis(10),
    );
    let worker = |name: &'static str| {
        async_task(name, |cx| async move {
            cx.sleep(Duration::from_millis(5)).await;
            let answer = cx.tool("slow", json!(null)).await?;
            Ok(json!({"answer": answer, "at": cx.now().to_string()}))
        })
    };
    let first = scheduler.spawn(worker("worker"));
    let forever = scheduler.spawn(async_task("pending-forever", |_cx| async move {
        futures::future::pending::<()>().await;
        Ok(json!("unreachable"))
    }));
    // The sender stays alive (held by the test), so the receiver never resolves.
    let (sender, receiver) = futures::channel::oneshot::channel::<Value>();
    let channel = scheduler.spawn(async_task("oneshot-never-sent", |_cx| async move {
        match receiver.await {
            Ok(value) => Ok(value),
            Err(_) => Err(TaskError::failed("the sender was dropped")),
        }
    }));
    let late = scheduler.spawn(async_task("stalls-after-a-request", |cx| async move {
        let answer = cx.tool("slow", json!(null)).await?;
        futures::future::pending::<()>().await;
        Ok(answer)
    }));
    let second = scheduler.spawn(worker("worker"));

    scheduler.step_until_idle();
    // The two that await nothing spool knows end in their first poll; the others wait.
    assert_eq!(scheduler.task_state(forever), stalled(forever));
    assert_eq!(scheduler.task_state(channel), stalled(channel));
    assert_eq!(
        scheduler.task_state(late),
        TaskState::Waiting(WaitReason::Request(Kind::tool("slow")))
    );

    scheduler.run_until_quiet();
    // The stalled task's body, and the receiver in it, was dropped when it ended.
    assert!(sender.is_canceled());
    drop(sender);

    assert_eq!(scheduler.task_state(late), stalled(late));
    let worked = TaskState::Completed(Ok(json!({"answer": "done", "at": "0.015s"})));
    assert_eq!(scheduler.task_state(first), worked);
    assert_eq!(scheduler.task_state(second), worked);

    let TaskState::Completed(Err(error)) = scheduler.task_state(channel) else {
        panic!("not failed");
    };
    assert_eq!(
        error.to_string(),
        "task 3 waits with nothing to wake it: it waits with no request in flight, \
         no timer set and no child joined (an async task that awaits something other than \
         a spool request does this)"
    );
    assert_eq!(
        scheduler.task_state(late).to_string(),
        format!("Completed(error: task 4 waits with nothing to wake it: {STALL_HINT})")
    );
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}

// ---------------------------------------------------------------------------------
// 8. Request futures dropped before their answer.
// ---------------------------------------------------------------------------------

#[test]
fn a_request_that_loses_a_select_has_its_late_answer_discarded() {
    let log = Log::default();
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::tool("slow"));
    scheduler.mock_with_latency(
        Kind::tool("fast"),
        recording(&log, |args| Ok(json!({"fast": args}))),
        Duration::from_millis(200),
    );
    let id = scheduler.spawn(async_task("impatient", |cx| async move {
        let slow = cx.tool("slow", json!("first"));
        let timeout = cx.sleep(Duration::from_millis(50));
        let first = match select(slow, timeout).await {
            Either::Left((answer, _)) => json!({"answered": answer?}),
            Either::Right(((), slow)) => {
                drop(slow);
                json!("timed out")
            }
        };
        let second = cx.tool("fast", json!("second")).await?;
        Ok(json!({"first": first, "second": second}))
    }));

    scheduler.step_until_idle();
    let slow_key = held_keys(&scheduler)[0];
    assert_eq!((slow_key.task(), slow_key.number()), (id, 1));

    scheduler.advance(Duration::from_millis(100));
    // The sleep won at 50 ms; the next request got the next number.
    assert_eq!(
        *log.lock().unwrap(),
        [Seen {
            kind: "tool:fast".into(),
            payload: json!("second"),
            task: 1,
            number: 2,
        }]
    );
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Waiting(WaitReason::Requests(2))
    );

    // The late answer still reaches the task (its request is in flight) and the task
    // discards it: it resumes, finds nothing for its future, and waits on.
    assert_eq!(scheduler.answer(slow_key, "too late"), Delivery::Delivered);
    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Waiting(WaitReason::Request(Kind::tool("fast")))
    );

    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Ok(
            json!({"first": "timed out", "second": {"fast": "second"}})
        ))
    );
    assert_eq!(
        scheduler.now(),
        Time::from_duration(Duration::from_millis(250))
    );
    let stats = scheduler.stats();
    assert_eq!(
        (stats.requests, stats.answers, stats.dropped_answers),
        (2, 2, 0)
    );
    assert!(scheduler.cancel_signals().is_empty());
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}

#[test]
fn a_dropped_request_still_in_flight_when_the_task_ends_is_canceled() {
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::tool("slow"));
    scheduler.inject_mock_tool("fast", "quick");
    let id = scheduler.spawn(async_task("gives-up", |cx| async move {
        let slow = cx.tool("slow", json!(1));
        let outcome = match select(slow, cx.sleep(Duration::from_millis(10))).await {
            Either::Left(_) => "answered",
            Either::Right(_) => "timed out",
        };
        let fast = cx.tool("fast", json!(2)).await?;
        Ok(json!([outcome, fast]))
    }));

    scheduler.step_until_idle();
    let slow_key = held_keys(&scheduler)[0];
    assert_eq!((slow_key.task(), slow_key.number()), (id, 1));

    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Ok(json!(["timed out", "quick"])))
    );
    // The task ended with its abandoned request still out: the executor is told.
    assert_eq!(
        scheduler.cancel_signals(),
        [CancelSignal {
            key: slow_key,
            kind: Kind::tool("slow"),
        }]
    );
    assert!(scheduler.held_requests().is_empty());
    assert_eq!(
        scheduler.answer(slow_key, "way too late"),
        Delivery::Dropped(DropReason::TaskFinished)
    );
    assert_eq!(scheduler.stats().dropped_answers, 1);
}

// ---------------------------------------------------------------------------------
// `Cx` futures belong to spool.
// ---------------------------------------------------------------------------------

/// A `Cx` taken out of `async_task`'s closure (which runs when the task is made).
fn smuggled_cx() -> spool::Cx {
    let mut slot = None;
    let _task = async_task("smuggler", |cx| {
        slot = Some(cx);
        async { Ok(Value::Null) }
    });
    slot.unwrap()
}

#[test]
#[should_panic(
    expected = "a spool future was polled outside a spool task: `Cx` futures only work inside an `async_task` polled by a spool scheduler, not on another executor"
)]
fn a_request_future_polled_on_another_executor_panics_saying_so() {
    let mut request = std::pin::pin!(smuggled_cx().tool("ls", json!({})));
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    let _ = request.as_mut().poll(&mut context);
}

#[test]
#[should_panic(expected = "a spool future was polled outside a spool task")]
fn cx_now_outside_a_poll_panics_saying_so() {
    let _ = smuggled_cx().now();
}

#[test]
fn a_spool_future_polled_after_it_completed_fails_its_task_with_the_panic_message() {
    let mut scheduler = TestScheduler::new();
    scheduler.inject_mock_tool("ls", "files");
    let id = scheduler.spawn(async_task("repoller", |cx| async move {
        let mut request = std::pin::pin!(cx.tool("ls", json!({})));
        let first = request.as_mut().await?;
        // Polling a finished request future again is a bug in the agent.
        let again = futures::future::poll_fn(|context| request.as_mut().poll(context)).await;
        Ok(json!([first, again.ok()]))
    }));
    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Err(TaskError::Panicked {
            task: id,
            message: "a spool request future was polled after it completed".into(),
        }))
    );
}

// ---------------------------------------------------------------------------------
// Requests made in a poll that ends the task; answers kept until awaited.
// ---------------------------------------------------------------------------------

#[test]
fn requests_and_children_made_in_the_poll_that_panics_never_go_out() {
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::tool("x"));
    let id = scheduler.spawn(async_task("asks-then-panics", |cx| async move {
        let request = std::pin::pin!(cx.tool("x", json!("never sent")));
        // Polled once: the request is made...
        let _ = futures::poll!(request);
        let _child = cx.spawn(NewTask::new(async_task(
            "never-started",
            |_cx| async move { Ok(Value::Null) },
        )));
        // ...and the same poll panics.
        panic!("after asking");
    }));
    scheduler.run_until_quiet();

    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Err(TaskError::Panicked {
            task: id,
            message: "after asking".into(),
        }))
    );
    assert!(scheduler.held_requests().is_empty());
    assert!(scheduler.cancel_signals().is_empty());
    assert_eq!(scheduler.core().len(), 1, "the child never started");
    assert_eq!(scheduler.core().in_flight_len(), 0);
    assert_eq!(scheduler.stats().requests, 0);
    assert!(!scheduler.core().has_outbound());
}

#[test]
fn an_answer_left_by_a_poll_that_panics_never_reaches_the_next_task() {
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::tool("x"));
    let first = scheduler.spawn(async_task("woken-then-panics", |cx| async move {
        let mut request = Box::pin(cx.tool("x", json!("a")));
        let _ = futures::poll!(request.as_mut());
        // Neither awaited nor dropped: its answer is not abandoned either.
        std::mem::forget(request);
        futures::pending!();
        // Resumed with the answer to its request 1, which nobody takes.
        panic!("left its answer");
    }));
    scheduler.step_until_idle();
    let [key] = held_keys(&scheduler)[..] else {
        panic!("one request held")
    };
    let _ = scheduler.answer(key, json!("for the first"));
    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(first),
        TaskState::Completed(Err(TaskError::Panicked {
            task: first,
            message: "left its answer".into(),
        }))
    );

    // The next task's request is its request 1 too: polled again in the poll that
    // made it, it has no answer yet, and then it gets its own.
    let second = scheduler.spawn(async_task("asks", |cx| async move {
        let mut request = std::pin::pin!(cx.tool("x", json!("b")));
        let _ = futures::poll!(request.as_mut());
        if let std::task::Poll::Ready(early) = futures::poll!(request.as_mut()) {
            return Ok(json!({"answered in the poll that asked": early?}));
        }
        Ok(request.await?)
    }));
    scheduler.step_until_idle();
    let [key] = held_keys(&scheduler)[..] else {
        panic!("one request held")
    };
    assert_eq!((key.task(), key.number()), (second, 1));
    let _ = scheduler.answer(key, json!("for the second"));
    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(second),
        TaskState::Completed(Ok(json!("for the second")))
    );
}

#[test]
fn a_request_made_in_the_poll_that_returns_never_goes_out() {
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::tool("x"));
    let id = scheduler.spawn(async_task("asks-then-returns", |cx| async move {
        let request = std::pin::pin!(cx.tool("x", json!("never sent")));
        let _ = futures::poll!(request);
        Ok(json!("done without waiting"))
    }));
    let other = scheduler.spawn(async_task("asks-and-waits", |cx| async move {
        Ok(cx.tool("x", json!("sent")).await?)
    }));
    scheduler.step_until_idle();

    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Ok(json!("done without waiting")))
    );
    // Only the other task's request went out, as its request 1.
    let held: Vec<(TaskId, u32, Value)> = scheduler
        .held_requests()
        .iter()
        .map(|h| {
            (
                h.request.key.task(),
                h.request.key.number(),
                h.request.request.payload.value().clone(),
            )
        })
        .collect();
    assert_eq!(held, [(other, 1, json!("sent"))]);
    assert_eq!(scheduler.stats().requests, 1);
    assert!(scheduler.cancel_signals().is_empty());
}

#[test]
fn an_answer_that_arrives_while_the_future_awaits_something_else_is_kept_for_it() {
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::tool("x"));
    // Two tasks, so that what one keeps between polls must survive the other's polls.
    let agent = |name: &'static str, payload: &'static str| {
        async_task(name, move |cx| async move {
            let mut early = std::pin::pin!(cx.tool("x", json!(payload)));
            // Sent now, awaited only after the sleep.
            let _ = futures::poll!(early.as_mut());
            cx.sleep(Duration::from_millis(10)).await;
            let answer = early.await?;
            Ok(json!({"answer": answer, "at": cx.now().to_string()}))
        })
    };
    let a = scheduler.spawn(agent("a", "for a"));
    let b = scheduler.spawn(agent("b", "for b"));
    scheduler.step_until_idle();
    let keys = held_keys(&scheduler);
    assert_eq!(keys.len(), 2);

    scheduler.advance(Duration::from_millis(2));
    assert_eq!(scheduler.answer(keys[1], "answer b"), Delivery::Delivered);
    scheduler.step_until_idle();
    assert_eq!(scheduler.answer(keys[0], "answer a"), Delivery::Delivered);
    scheduler.step_until_idle();
    // Each woke, found its sleep not over, and kept its answer.
    assert_eq!(
        scheduler.task_state(a),
        TaskState::Waiting(WaitReason::Timer)
    );
    assert_eq!(
        scheduler.task_state(b),
        TaskState::Waiting(WaitReason::Timer)
    );

    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.task_state(a),
        TaskState::Completed(Ok(json!({"answer": "answer a", "at": "0.010s"})))
    );
    assert_eq!(
        scheduler.task_state(b),
        TaskState::Completed(Ok(json!({"answer": "answer b", "at": "0.010s"})))
    );
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}
