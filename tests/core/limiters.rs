//! Request gates (rate-limit coordination and graceful degradation): caps on requests
//! in flight, sliding windows of requests and of tokens, the per-agent cap across
//! kinds, and the 429 back-off — global per kind, exponential over consecutive hits,
//! reset by a success, bounded by `max_retries` — up to a storm of 429s. Every expected
//! order and time below was worked out by hand from the documented rules, then checked
//! against the run.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use spool::{
    AgentTask, BackoffBound, BackoffConfig, Cause, Config, Delivery, Kind, Mock, NewTask, Phase,
    Priority, Request, RequestError, RequestKey, RequestLimits, Scheduler, SeededRng, Step,
    TaskError, TaskId, TaskState, TestScheduler, Time, WaitReason, async_task, task_fn,
};

use crate::support::{ask_once, assert_trace_continuous, held_keys};

fn t(n: u64) -> TaskId {
    TaskId::from_raw(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn at(n: u64) -> Time {
    Time::from_duration(secs(n))
}

/// A task that makes one LLM request and finishes with its answer.
fn one_llm() -> impl AgentTask {
    ask_once("asker", Request::llm(json!("question")))
}

/// A task that calls the tool `name` once and finishes with its answer.
fn one_tool(name: &'static str) -> impl AgentTask {
    ask_once("caller", Request::tool(name, json!({})))
}

/// A test scheduler with these request limits, recording its trace.
fn gated(limits: RequestLimits) -> TestScheduler {
    TestScheduler::with_scheduler(Scheduler::new(
        Config::new().record_trace(true).requests(limits),
    ))
}

/// Every request sent, as `(time, task, request number, kind)`.
fn sent(ts: &TestScheduler) -> Vec<(Time, TaskId, u32, String)> {
    ts.sent_requests()
        .iter()
        .map(|s| (s.at, s.key.task(), s.key.number(), s.kind.to_string()))
        .collect()
}

/// The tasks whose requests were sent, in order.
fn sent_tasks(ts: &TestScheduler) -> Vec<TaskId> {
    ts.sent_requests().iter().map(|s| s.key.task()).collect()
}

/// When `task` completed, from the trace.
fn completed_at(ts: &TestScheduler, task: TaskId) -> Option<Time> {
    ts.trace_events()
        .iter()
        .find(|e| e.task == task && e.to == Phase::Completed)
        .map(|e| e.time)
}

/// Each back-off in the trace: `(time of the 429, task, request number, until)`.
fn backoffs(ts: &TestScheduler) -> Vec<(Time, TaskId, u32, Time)> {
    ts.trace_events()
        .iter()
        .filter_map(|e| match e.cause {
            Cause::BackedOff { number, until } => Some((e.time, e.task, number, until)),
            _ => None,
        })
        .collect()
}

fn rate_limited(seconds: u64) -> Result<Value, RequestError> {
    Err(RequestError::RateLimited {
        retry_after: Some(secs(seconds)),
    })
}

// ---------------------------------------------------------------------------------
// 1. A cap on requests in flight, served in task-priority order.
// ---------------------------------------------------------------------------------

/// At most two LLM requests in flight; the LLM answers in 1 s. Seven tasks made in the
/// order Normal, Low, High, Normal, Low, High, Normal each make one request: the first
/// two polled go at once, and as answers free room the waiting ones go by their task's
/// priority — High, High, then Normal, Normal, then Low — FIFO within a level, two a
/// second, never more than two out.
#[test]
fn max_in_flight_caps_llm_requests_and_serves_waiting_ones_by_priority() {
    let mut ts = gated(RequestLimits::new().max_in_flight(Kind::Llm, 2));
    ts.mock_with_latency(Kind::Llm, Mock::Fixed(json!("answer")), secs(1));
    let levels = [
        Priority::Normal,
        Priority::Low,
        Priority::High,
        Priority::Normal,
        Priority::Low,
        Priority::High,
        Priority::Normal,
    ];
    for level in levels {
        ts.submit(NewTask::new(one_llm()).priority(level));
    }
    ts.step_until_idle();
    // Two in flight (the cap), five held: held requests are not in flight.
    let state = ts.queue_state();
    assert_eq!((state.in_flight, state.held_requests), (2, 5));
    assert_eq!(sent_tasks(&ts), [t(1), t(2)]);

    let end = ts.run_until_quiet();

    assert_eq!(end, at(4));
    let llm = Kind::Llm.to_string();
    assert_eq!(
        sent(&ts),
        [
            (at(0), t(1), 1, llm.clone()),
            (at(0), t(2), 1, llm.clone()),
            (at(1), t(3), 1, llm.clone()),
            (at(1), t(6), 1, llm.clone()),
            (at(2), t(4), 1, llm.clone()),
            (at(2), t(7), 1, llm.clone()),
            (at(3), t(5), 1, llm.clone()),
        ]
    );
    // Never more than two out: at every instant, the requests sent within the last
    // second (each is answered one second after it went) number at most two.
    for s in ts.sent_requests() {
        let out = ts
            .sent_requests()
            .iter()
            .filter(|o| o.at <= s.at && s.at < o.at + secs(1))
            .count();
        assert!(out <= 2, "{out} requests out at {}", s.at);
    }
    // The peak counts requests sent and not answered: never more than the cap, though
    // all seven were made at once.
    assert_eq!(ts.stats().peak_in_flight, 2, "the cap, not the seven made");
    let done: Vec<Option<Time>> = (1..=7).map(|n| completed_at(&ts, t(n))).collect();
    let expected: Vec<Option<Time>> = [1, 1, 2, 3, 4, 2, 3].map(|s| Some(at(s))).to_vec();
    assert_eq!(done, expected);
    for n in 1..=7 {
        assert_eq!(
            ts.task_state(t(n)),
            TaskState::Completed(Ok(json!("answer")))
        );
    }
    assert_trace_continuous(&ts);
}

/// A task that makes `n` requests at once in its first poll (`make(i)` the `i`th) and
/// completes when all are answered.
fn burst(n: u32, make: fn(u32) -> Request) -> NewTask {
    let mut asked = false;
    NewTask::new(task_fn("burst", move |cx| {
        if asked {
            return Step::done(json!("answered"));
        }
        asked = true;
        for i in 0..n {
            cx.request(make(i));
        }
        Step::Wait
    }))
}

/// Drains the requests out, answering each in turn and taking what its answer let go;
/// returns `(peak in flight, requests in flight)` after each answer.
fn answer_one_by_one(s: &mut Scheduler) -> Vec<(u64, usize)> {
    let mut out: VecDeque<RequestKey> = std::iter::from_fn(|| s.poll_request())
        .map(|r| r.key)
        .collect();
    let mut after = Vec::new();
    while let Some(key) = out.pop_front() {
        let delivery = s.handle_response(Time::ZERO, spool::Response::ok(key, json!("a")));
        assert_eq!(delivery, Delivery::Delivered);
        out.extend(std::iter::from_fn(|| s.poll_request()).map(|r| r.key));
        after.push((s.stats().peak_in_flight, s.queue_state().in_flight));
    }
    after
}

/// The peak of requests in flight counts requests sent and not answered, not those
/// held back by a limit. Six LLM requests made at once under a cap of four: four go,
/// the peak is four. Answers let the two held go one at a time: the peak stays four as
/// the requests in flight go 4, 4, 3, 2, 1, 0. Six calls of a tool with no limit, made
/// at once beside the capped kind, all go: the peak is six; so it is without any limit.
#[test]
fn the_peak_in_flight_counts_requests_sent_not_requests_held() {
    let llm = |i: u32| Request::llm(json!(i));
    let mut s =
        Scheduler::new(Config::new().requests(RequestLimits::new().max_in_flight(Kind::Llm, 4)));
    let capped = s.submit(Time::ZERO, burst(6, llm)).unwrap().id;
    while s.step(Time::ZERO).is_some() {}
    let state = s.queue_state();
    assert_eq!((state.in_flight, state.held_requests), (4, 2));
    assert_eq!(s.stats().peak_in_flight, 4);
    assert_eq!(
        answer_one_by_one(&mut s),
        [(4, 4), (4, 4), (4, 3), (4, 2), (4, 1), (4, 0)]
    );
    while s.step(Time::ZERO).is_some() {}
    assert_eq!(
        s.task_state(capped),
        Some(TaskState::Completed(Ok(json!("answered"))))
    );
    assert_eq!(s.stats().requests, 6);

    // A kind with no limit, with gates on for another: every request made goes at once.
    s.submit(Time::ZERO, burst(6, |i| Request::tool("ls", json!(i))))
        .unwrap();
    while s.step(Time::ZERO).is_some() {}
    assert_eq!(s.queue_state().in_flight, 6);
    assert_eq!(s.stats().peak_in_flight, 6);

    // No limit at all.
    let mut s = Scheduler::new(Config::new());
    s.submit(Time::ZERO, burst(6, llm)).unwrap();
    while s.step(Time::ZERO).is_some() {}
    assert_eq!(s.stats().peak_in_flight, 6);
    assert_eq!(
        answer_one_by_one(&mut s),
        [(6, 5), (6, 4), (6, 3), (6, 2), (6, 1), (6, 0)]
    );
}

// ---------------------------------------------------------------------------------
// 2. Graceful degradation: one kind at its limit never holds another back.
// ---------------------------------------------------------------------------------

/// One LLM request at a time, held by the test; `tool:grep` may have two in flight,
/// `tool:ls` has no limit. While two LLM requests wait at their gate, the tool calls
/// made after them go out at once and their tasks complete; the LLM requests go one by
/// one as the test answers.
#[test]
fn tool_requests_go_out_while_llm_requests_wait_at_their_gate() {
    let mut ts = gated(
        RequestLimits::new()
            .max_in_flight(Kind::Llm, 1)
            .max_in_flight(Kind::tool("grep"), 2),
    );
    ts.hold(Kind::Llm);
    ts.inject_mock_tool("ls", json!(["a.txt"]));
    ts.inject_mock_tool("grep", json!("a.txt:1: match"));
    let llm1 = ts.spawn(one_llm());
    let llm2 = ts.spawn(one_llm());
    let ls = ts.spawn(one_tool("ls"));
    let llm3 = ts.spawn(one_llm());
    let grep = ts.spawn(one_tool("grep"));
    ts.step_until_idle();

    assert_eq!(sent_tasks(&ts), [llm1, ls, grep]);
    assert_eq!(
        ts.task_state(ls),
        TaskState::Completed(Ok(json!(["a.txt"])))
    );
    assert_eq!(
        ts.task_state(grep),
        TaskState::Completed(Ok(json!("a.txt:1: match")))
    );
    for waiting in [llm2, llm3] {
        assert_eq!(
            ts.task_state(waiting),
            TaskState::Waiting(WaitReason::Request(Kind::Llm))
        );
    }
    let state = ts.queue_state();
    assert_eq!(
        (state.in_flight, state.held_requests, state.backoff_until),
        (1, 2, None)
    );

    // A tool call made now still goes at once.
    let ls2 = ts.spawn(one_tool("ls"));
    ts.step_until_idle();
    assert_eq!(sent_tasks(&ts), [llm1, ls, grep, ls2]);

    while let Some(key) = held_keys(&ts).first().copied() {
        let _ = ts.answer(key, "llm answer");
        ts.step_until_idle();
        assert!(held_keys(&ts).len() <= 1);
    }
    assert_eq!(sent_tasks(&ts), [llm1, ls, grep, ls2, llm2, llm3]);
    for id in [llm1, llm2, llm3] {
        assert_eq!(
            ts.task_state(id),
            TaskState::Completed(Ok(json!("llm answer")))
        );
    }
    assert_eq!(ts.now(), Time::ZERO);
}

// ---------------------------------------------------------------------------------
// 3. A sliding window of requests.
// ---------------------------------------------------------------------------------

/// At most three LLM requests in any 60 s (answered at once). Three go at t = 0; the
/// fourth waits, `poll_timeout` names t = 60 s, and `run_until_quiet` moves there and
/// sends it at exactly 60 s.
#[test]
fn window_sends_the_fourth_request_when_the_first_leaves_the_window() {
    let mut ts = gated(RequestLimits::new().window(Kind::Llm, 3, secs(60)));
    ts.mock(Kind::Llm, Mock::Fixed(json!("answer")));
    for _ in 0..4 {
        ts.spawn(one_llm());
    }
    ts.step_until_idle();
    assert_eq!(sent_tasks(&ts), [t(1), t(2), t(3)]);
    assert_eq!(
        ts.task_state(t(4)),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );
    let state = ts.queue_state();
    assert_eq!(
        (state.held_requests, state.rate_limited, state.backoff_until),
        (1, true, None)
    );
    assert_eq!(ts.core_mut().poll_timeout(), Some(at(60)));

    ts.advance(secs(59));
    assert_eq!(ts.sent_requests().len(), 3);

    let end = ts.run_until_quiet();
    assert_eq!(end, at(60));
    let last = ts.sent_requests().last().unwrap().clone();
    assert_eq!((last.at, last.key.task()), (at(60), t(4)));
    assert_eq!(
        ts.task_state(t(4)),
        TaskState::Completed(Ok(json!("answer")))
    );
    assert_eq!(completed_at(&ts, t(4)), Some(at(60)));
    assert!(!ts.queue_state().rate_limited);
}

/// The window slides: three requests in any 60 s. Requests made at 0, 0, 20, 30, 30
/// and 61 s go at 0, 0, 20, 60, 60 (the two sent at 0 leave the window at 60) and 80
/// (the one sent at 20 leaves it at 80).
#[test]
fn window_slides_with_each_send() {
    let mut ts = gated(RequestLimits::new().window(Kind::Llm, 3, secs(60)));
    ts.mock(Kind::Llm, Mock::Fixed(json!("answer")));
    ts.spawn(one_llm());
    ts.spawn(one_llm());
    ts.advance(secs(20));
    ts.spawn(one_llm());
    ts.advance(secs(10));
    ts.spawn(one_llm());
    ts.spawn(one_llm());
    ts.step_until_idle();
    assert_eq!(ts.core_mut().poll_timeout(), Some(at(60)));
    ts.advance(secs(31));
    assert_eq!(ts.now(), at(61));
    ts.spawn(one_llm());
    ts.step_until_idle();
    assert_eq!(ts.core_mut().poll_timeout(), Some(at(80)));
    let end = ts.run_until_quiet();

    assert_eq!(end, at(80));
    let times: Vec<(Time, TaskId)> = ts
        .sent_requests()
        .iter()
        .map(|s| (s.at, s.key.task()))
        .collect();
    assert_eq!(
        times,
        [
            (at(0), t(1)),
            (at(0), t(2)),
            (at(20), t(3)),
            (at(60), t(4)),
            (at(60), t(5)),
            (at(80), t(6)),
        ]
    );
}

// ---------------------------------------------------------------------------------
// 4. A window of estimated tokens.
// ---------------------------------------------------------------------------------

/// At most 1,000 estimated tokens of LLM requests in any 60 s; three requests of 400
/// tokens each. Two go at t = 0 (800 tokens); the third would make 1,200, so it waits
/// until the first two leave the window at 60 s.
#[test]
fn token_window_holds_the_request_that_would_overflow_it() {
    let mut ts = gated(RequestLimits::new().tokens(Kind::Llm, 1000, secs(60)));
    ts.mock(Kind::Llm, Mock::Fixed(json!("answer")));
    for _ in 0..3 {
        ts.spawn(ask_once(
            "asker",
            Request::llm(json!("question")).with_tokens(400),
        ));
    }
    ts.step_until_idle();
    assert_eq!(sent_tasks(&ts), [t(1), t(2)]);
    assert!(ts.queue_state().rate_limited);
    assert_eq!(ts.core_mut().poll_timeout(), Some(at(60)));
    // The gate as dashboards see it: 800 of 1,000 tokens used in the window.
    let tokens = |ts: &TestScheduler| {
        ts.core()
            .gates()
            .into_iter()
            .map(|g| g.tokens)
            .collect::<Vec<_>>()
    };
    assert_eq!(tokens(&ts), [Some((800, 1000, secs(60)))]);

    let end = ts.run_until_quiet();
    assert_eq!(end, at(60));
    // The first two left the window; the third is in it.
    assert_eq!(tokens(&ts), [Some((400, 1000, secs(60)))]);
    let times: Vec<(Time, TaskId)> = ts
        .sent_requests()
        .iter()
        .map(|s| (s.at, s.key.task()))
        .collect();
    assert_eq!(times, [(at(0), t(1)), (at(0), t(2)), (at(60), t(3))]);
    assert_eq!(
        ts.task_state(t(3)),
        TaskState::Completed(Ok(json!("answer")))
    );
}

// ---------------------------------------------------------------------------------
// 5. The per-agent cap on requests in flight, across kinds.
// ---------------------------------------------------------------------------------

/// One request in flight per agent, whatever its kind (LLM and `tool:ls` both held by
/// the test). Agent a's LLM request goes; its tool call waits although the tool kind
/// has no limit of its own; agent b's requests go beside a's. As each answer frees an
/// agent, its next request goes, in the order the agent made them.
#[test]
fn per_agent_cap_counts_requests_of_every_kind() {
    let mut ts = gated(RequestLimits::new().per_agent_in_flight(1));
    ts.hold(Kind::Llm);
    ts.hold(Kind::tool("ls"));
    let a1 = ts.submit(NewTask::new(one_llm()).agent("a"));
    let a2 = ts.submit(NewTask::new(one_tool("ls")).agent("a"));
    let b1 = ts.submit(NewTask::new(one_llm()).agent("b"));
    let a3 = ts.submit(NewTask::new(one_llm()).agent("a"));
    let b2 = ts.submit(NewTask::new(one_tool("ls")).agent("b"));
    ts.step_until_idle();
    assert_eq!(sent_tasks(&ts), [a1, b1]);
    assert_eq!(ts.queue_state().held_requests, 3);

    let answer_task = |ts: &mut TestScheduler, task: TaskId| {
        let key = *held_keys(ts).iter().find(|k| k.task() == task).unwrap();
        let _ = ts.answer(key, "done");
        ts.step_until_idle();
    };
    answer_task(&mut ts, a1);
    assert_eq!(sent_tasks(&ts), [a1, b1, a2]);
    answer_task(&mut ts, b1);
    assert_eq!(sent_tasks(&ts), [a1, b1, a2, b2]);
    answer_task(&mut ts, a2);
    assert_eq!(sent_tasks(&ts), [a1, b1, a2, b2, a3]);
    answer_task(&mut ts, b2);
    answer_task(&mut ts, a3);
    for id in [a1, a2, a3, b1, b2] {
        assert_eq!(ts.task_state(id), TaskState::Completed(Ok(json!("done"))));
    }
    assert_eq!(ts.queue_state().held_requests, 0);
}

// ---------------------------------------------------------------------------------
// 6. A 429: the kind backs off, tools go on, the request goes again.
// ---------------------------------------------------------------------------------

/// Two LLM requests go at t = 0 (held by the test). At t = 1 s the first is answered
/// 429 with `Retry-After: 5s`: the LLM kind backs off until 6 s (the larger of 5 s and
/// the first hit's 2 s). An LLM request made at 2 s waits; a tool call made then goes
/// at once; the second request, already with the executor, is answered at 3 s and
/// delivered (the back-off stays). At 6 s the rate-limited request goes again with the
/// same key, then the one that waited, and both succeed.
#[test]
fn a_429_backs_the_llm_off_while_tools_go_on_and_the_request_goes_again() {
    let mut ts = TestScheduler::new();
    ts.hold(Kind::Llm);
    ts.inject_mock_tool("ls", json!(["a.txt"]));
    let first = ts.spawn(one_llm());
    let second = ts.spawn(one_llm());
    ts.step_until_idle();
    let keys = held_keys(&ts);
    assert_eq!(keys.len(), 2);

    ts.advance(secs(1));
    assert_eq!(ts.respond(keys[0], rate_limited(5)), Delivery::BackedOff);
    let state = ts.queue_state();
    assert_eq!(
        (
            state.rate_limited,
            state.backoff_until,
            state.held_requests,
            state.in_flight
        ),
        (true, Some(at(6)), 1, 1)
    );
    assert_eq!(
        ts.task_state(first),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );

    ts.advance(secs(1));
    let third = ts.spawn(one_llm());
    let tool = ts.spawn(one_tool("ls"));
    ts.step_until_idle();
    assert_eq!(
        ts.task_state(tool),
        TaskState::Completed(Ok(json!(["a.txt"])))
    );
    assert_eq!(ts.core_mut().poll_timeout(), Some(at(6)));

    ts.advance(secs(1));
    assert_eq!(ts.answer(keys[1], "second"), Delivery::Delivered);
    ts.step_until_idle();
    assert_eq!(
        ts.task_state(second),
        TaskState::Completed(Ok(json!("second")))
    );
    let state = ts.queue_state();
    assert_eq!(
        (state.rate_limited, state.backoff_until, state.held_requests),
        (true, Some(at(6)), 2)
    );

    ts.advance(secs(2));
    assert_eq!(ts.now(), at(5));
    assert_eq!(ts.sent_requests().len(), 3, "nothing more went before 6 s");

    assert_eq!(ts.run_until_quiet(), at(6));
    let state = ts.queue_state();
    assert_eq!((state.rate_limited, state.backoff_until), (false, None));
    let llm = Kind::Llm.to_string();
    let ls = Kind::tool("ls").to_string();
    assert_eq!(
        sent(&ts),
        [
            (at(0), first, 1, llm.clone()),
            (at(0), second, 1, llm.clone()),
            (at(2), tool, 1, ls),
            (at(6), first, 1, llm.clone()),
            (at(6), third, 1, llm),
        ]
    );
    // The same key went again.
    let held = held_keys(&ts);
    assert_eq!(held.len(), 2);
    assert_eq!(held[0], keys[0]);
    assert_eq!((held[1].task(), held[1].number()), (third, 1));

    ts.advance(secs(1));
    for key in held_keys(&ts) {
        let value = format!("answer to {key}");
        assert_eq!(ts.answer(key, value), Delivery::Delivered);
    }
    ts.step_until_idle();
    assert_eq!(
        ts.task_state(first),
        TaskState::Completed(Ok(json!("answer to 1:1")))
    );
    assert_eq!(
        ts.task_state(third),
        TaskState::Completed(Ok(json!("answer to 3:1")))
    );
    assert_eq!(ts.stats().rate_limited, 1);
    assert_trace_continuous(&ts);
    insta::assert_snapshot!(ts.trace());
}

// ---------------------------------------------------------------------------------
// 7. Exponential back-off over consecutive 429s, reset by a success.
// ---------------------------------------------------------------------------------

/// One request answered 429 three times in a row with `Retry-After: 1s`: the back-offs
/// are 2 s, 4 s and 8 s (the larger of 1 s and 2 s × 2^(hits − 1)), so it goes at 0,
/// 2, 6 and 14 s, and succeeds. A success resets the count: the next task's request,
/// sent at 14 s and answered 429 with `Retry-After: 1s`, backs off 2 s again and goes
/// at 16 s.
#[test]
fn consecutive_429s_back_off_exponentially_and_a_success_resets_the_count() {
    let mut ts = TestScheduler::new();
    ts.hold(Kind::Llm);
    let first = ts.spawn(one_llm());
    ts.step_until_idle();
    for _ in 0..3 {
        let key = held_keys(&ts)[0];
        assert_eq!(ts.respond(key, rate_limited(1)), Delivery::BackedOff);
        ts.run_until_quiet();
    }
    assert_eq!(ts.now(), at(14));
    let key = held_keys(&ts)[0];
    assert_eq!(ts.answer(key, "finally"), Delivery::Delivered);
    ts.step_until_idle();
    assert_eq!(
        ts.task_state(first),
        TaskState::Completed(Ok(json!("finally")))
    );

    let second = ts.spawn(one_llm());
    ts.step_until_idle();
    let key = held_keys(&ts)[0];
    assert_eq!(key.task(), second);
    assert_eq!(ts.respond(key, rate_limited(1)), Delivery::BackedOff);
    assert_eq!(ts.queue_state().backoff_until, Some(at(16)));
    ts.run_until_quiet();
    assert_eq!(ts.now(), at(16));
    let key = held_keys(&ts)[0];
    assert_eq!(ts.answer(key, "at once"), Delivery::Delivered);
    ts.step_until_idle();

    assert_eq!(
        backoffs(&ts),
        [
            (at(0), first, 1, at(2)),
            (at(2), first, 1, at(6)),
            (at(6), first, 1, at(14)),
            (at(14), second, 1, at(16)),
        ]
    );
    let times: Vec<(Time, TaskId)> = ts
        .sent_requests()
        .iter()
        .map(|s| (s.at, s.key.task()))
        .collect();
    assert_eq!(
        times,
        [
            (at(0), first),
            (at(2), first),
            (at(6), first),
            (at(14), first),
            (at(14), second),
            (at(16), second),
        ]
    );
    assert_eq!(
        ts.task_state(second),
        TaskState::Completed(Ok(json!("at once")))
    );
    assert_eq!(ts.stats().rate_limited, 4);
}

// ---------------------------------------------------------------------------------
// 8. `max_retries`.
// ---------------------------------------------------------------------------------

/// With `max_retries = 2`, a request the provider always answers 429
/// (`Retry-After: 1s`) goes three times — at 0, 2 and 6 s — and the third 429 reaches
/// the task as the error it passes on.
#[test]
fn after_max_retries_the_rate_limited_error_reaches_the_task() {
    let mut backoff = BackoffConfig::default();
    backoff.max_retries = 2;
    let mut ts = gated(RequestLimits::new().backoff(backoff));
    ts.mock_llm_fn(|_| rate_limited(1));
    let id = ts.spawn(async_task("asker", |cx| async move {
        let answer = cx.llm(json!("question")).await?;
        Ok(answer)
    }));

    let end = ts.run_until_quiet();

    assert_eq!(end, at(6));
    assert_eq!(
        ts.task_state(id),
        TaskState::Completed(Err(TaskError::RequestFailed {
            error: RequestError::RateLimited {
                retry_after: Some(secs(1)),
            },
        }))
    );
    let times: Vec<Time> = ts.sent_requests().iter().map(|s| s.at).collect();
    assert_eq!(times, [at(0), at(2), at(6)]);
    assert_eq!(
        backoffs(&ts),
        [(at(0), id, 1, at(2)), (at(2), id, 1, at(6))]
    );
    assert_eq!(ts.stats().rate_limited, 2);
    assert_eq!(completed_at(&ts, id), None, "it failed");
    assert_trace_continuous(&ts);
    // Two 429s went back to the gate; the third reached the task as its error.
    let counts = ts.core().trace().answers()[&Kind::Llm];
    assert_eq!((counts.ok, counts.error, counts.backed_off), (0, 1, 2));
}

// ---------------------------------------------------------------------------------
// 8b. Bounded back-off.
// ---------------------------------------------------------------------------------

/// A task that asks the LLM once and finishes with its answer, or fails with its error.
fn llm_or_error() -> impl AgentTask {
    async_task("asker", |cx| async move {
        let answer = cx.llm(json!("question")).await?;
        Ok(answer)
    })
}

fn rate_limited_for(retry_after: Duration) -> Result<Value, RequestError> {
    Err(RequestError::RateLimited {
        retry_after: Some(retry_after),
    })
}

/// 32 LLM requests go together at 0 s and are all answered 429 with
/// `Retry-After: 1s` at 1 s: they were all sent before the back-off began, so they are
/// one hit — every one backs off to 3 s (1 s + 2 s), not to 1 s + 64 s as when each
/// doubled the back-off again. Sent again together at 3 s and refused again at 4 s,
/// they are the second hit: 4 s more, to 8 s.
#[test]
fn answers_to_requests_sent_together_are_one_hit_not_one_each() {
    let mut ts = TestScheduler::new();
    ts.hold(Kind::Llm);
    let tasks: Vec<TaskId> = (0..32).map(|_| ts.spawn(one_llm())).collect();
    ts.step_until_idle();
    assert_eq!(held_keys(&ts).len(), 32);

    ts.advance(secs(1));
    for key in held_keys(&ts) {
        assert_eq!(ts.respond(key, rate_limited(1)), Delivery::BackedOff);
    }
    let state = ts.queue_state();
    assert_eq!(
        (state.backoff_until, state.backoffs, state.held_requests),
        (Some(at(3)), vec![(Kind::Llm, at(3))], 32)
    );
    assert_eq!(ts.run_until_quiet(), at(3));
    assert_eq!(held_keys(&ts).len(), 32);

    ts.advance(secs(1));
    for key in held_keys(&ts) {
        assert_eq!(ts.respond(key, rate_limited(1)), Delivery::BackedOff);
    }
    assert_eq!(ts.queue_state().backoff_until, Some(at(8)));
    assert_eq!(ts.run_until_quiet(), at(8));
    for key in held_keys(&ts) {
        assert_eq!(ts.answer(key, "ok"), Delivery::Delivered);
    }
    ts.step_until_idle();

    let mut expected: Vec<(Time, TaskId, u32, Time)> =
        tasks.iter().map(|id| (at(1), *id, 1, at(3))).collect();
    expected.extend(tasks.iter().map(|id| (at(4), *id, 1, at(8))));
    assert_eq!(backoffs(&ts), expected);
    let sends: Vec<Time> = ts.sent_requests().iter().map(|s| s.at).collect();
    let mut expected_sends = vec![at(0); 32];
    expected_sends.extend([at(3); 32]);
    expected_sends.extend([at(8); 32]);
    assert_eq!(sends, expected_sends);
    assert!(
        tasks
            .iter()
            .all(|id| ts.task_state(*id) == TaskState::Completed(Ok(json!("ok"))))
    );
    assert_eq!(ts.stats().rate_limited, 64);
    assert_trace_continuous(&ts);
}

/// A provider that answers 429 (`Retry-After: 1s`) to everything, 1 s after each
/// request, eight requests at a time: they back off together 2, 4, 8, 16, 32, 64, 64
/// and 64 s — 254 s in all — and the ninth 429 would take them 64 s more, past the
/// default budget of 300 s: at 263 s each task gets `RateLimitExceeded`, after 9 sends,
/// not after 21 sends and some 22 minutes of back-offs compounded eightfold.
#[test]
fn a_provider_refusing_everything_fails_each_request_when_its_back_off_budget_is_spent() {
    let mut ts = gated(RequestLimits::new());
    ts.mock_with_latency(Kind::Llm, Mock::Fn(Box::new(|_| rate_limited(1))), secs(1));
    let tasks: Vec<TaskId> = (0..8).map(|_| ts.spawn(llm_or_error())).collect();

    let end = ts.run_until_quiet();

    assert_eq!(end, at(263));
    for id in &tasks {
        assert_eq!(
            ts.task_state(*id),
            TaskState::Completed(Err(TaskError::RequestFailed {
                error: RequestError::RateLimitExceeded {
                    retry_after: Some(secs(1)),
                    waited: secs(254),
                    bound: BackoffBound::Budget(secs(300)),
                },
            }))
        );
    }
    let rounds = [0, 3, 8, 17, 34, 67, 132, 197, 262];
    let sends: Vec<Time> = ts.sent_requests().iter().map(|s| s.at).collect();
    let expected: Vec<Time> = rounds.iter().flat_map(|t| [at(*t); 8]).collect();
    assert_eq!(sends, expected);
    // Eight 429s a round, each round one hit; the last round's are given up.
    assert_eq!(ts.stats().rate_limited, 8 * 8);
    assert_eq!(ts.queue_state().backoff_until, Some(at(263 + 64)));
    assert_trace_continuous(&ts);
    assert_eq!(
        RequestError::RateLimitExceeded {
            retry_after: Some(secs(1)),
            waited: secs(254),
            bound: BackoffBound::Budget(secs(300)),
        }
        .to_string(),
        "rate limited by the provider (it asked to retry after 1s), given up after 254s of \
         back-off: backing off again would take it past its back-off budget of 300s"
    );
}

/// `Retry-After` longer than `max_wait` (5 minutes by default) is not waited out: a
/// day, `u64::MAX` seconds and the largest duration (what a date in year 9999 comes
/// to, saturated) each fail their request at once with `RateLimitExceeded` carrying
/// the provider's value. The kind backs off `max_wait` from each such 429 — other LLM
/// requests wait 5 minutes, not a day — and `queue_state` shows it; tools go on.
#[test]
fn a_retry_after_past_max_wait_fails_its_request_at_once_and_holds_the_kind_max_wait() {
    let mut ts = TestScheduler::new();
    ts.hold(Kind::Llm);
    ts.inject_mock_tool("ls", json!(["a.txt"]));
    let first = ts.spawn(llm_or_error());
    let second = ts.spawn(llm_or_error());
    ts.step_until_idle();
    let keys = held_keys(&ts);

    ts.advance(secs(1));
    let day = secs(86_400);
    assert_eq!(
        ts.respond(keys[0], rate_limited_for(day)),
        Delivery::Delivered
    );
    ts.step_until_idle();
    let given_up = |retry_after: Duration, waited: Duration| {
        TaskState::Completed(Err(TaskError::RequestFailed {
            error: RequestError::RateLimitExceeded {
                retry_after: Some(retry_after),
                waited,
                bound: BackoffBound::MaxWait(secs(300)),
            },
        }))
    };
    assert_eq!(ts.task_state(first), given_up(day, Duration::ZERO));
    let state = ts.queue_state();
    assert_eq!(
        (state.rate_limited, state.backoff_until, state.backoffs),
        (true, Some(at(301)), vec![(Kind::Llm, at(301))])
    );

    // A request made now waits the five minutes, not the day; a tool call goes.
    ts.advance(secs(1));
    let third = ts.spawn(llm_or_error());
    let tool = ts.spawn(one_tool("ls"));
    ts.step_until_idle();
    assert_eq!(
        ts.task_state(tool),
        TaskState::Completed(Ok(json!(["a.txt"])))
    );
    // The second request, sent with the first, is refused for `u64::MAX` seconds.
    ts.advance(secs(1));
    assert_eq!(
        ts.respond(keys[1], rate_limited_for(secs(u64::MAX))),
        Delivery::Delivered
    );
    ts.step_until_idle();
    assert_eq!(
        ts.task_state(second),
        given_up(secs(u64::MAX), Duration::ZERO)
    );
    assert_eq!(ts.queue_state().backoff_until, Some(at(303)));

    assert_eq!(ts.run_until_quiet(), at(303));
    let key = held_keys(&ts)[0];
    assert_eq!(key.task(), third);
    ts.advance(secs(1));
    assert_eq!(
        ts.respond(key, rate_limited_for(Duration::MAX)),
        Delivery::Delivered
    );
    ts.step_until_idle();
    assert_eq!(
        ts.task_state(third),
        given_up(Duration::MAX, Duration::ZERO)
    );
    assert_eq!(ts.queue_state().backoff_until, Some(at(604)));

    let llm = Kind::Llm.to_string();
    assert_eq!(
        sent(&ts),
        [
            (at(0), first, 1, llm.clone()),
            (at(0), second, 1, llm.clone()),
            (at(2), tool, 1, Kind::tool("ls").to_string()),
            (at(303), third, 1, llm),
        ]
    );
    let answered: Vec<(TaskId, Cause)> = ts
        .trace_events()
        .iter()
        .filter(|e| matches!(e.cause, Cause::Answered(_) | Cause::BackedOff { .. }))
        .filter(|e| e.task != tool)
        .map(|e| (e.task, e.cause.clone()))
        .collect();
    assert_eq!(
        answered,
        [
            (first, Cause::Answered(1)),
            (second, Cause::Answered(1)),
            (third, Cause::Answered(1)),
        ]
    );
    assert_eq!(ts.stats().rate_limited, 0);
    assert_eq!(
        RequestError::RateLimitExceeded {
            retry_after: Some(day),
            waited: Duration::ZERO,
            bound: BackoffBound::MaxWait(secs(300)),
        }
        .to_string(),
        "rate limited by the provider (it asked to retry after 86400s): that is longer than \
         the longest wait of 300s"
    );
    assert_trace_continuous(&ts);
}

// ---------------------------------------------------------------------------------
// 9. A storm of 429s.
// ---------------------------------------------------------------------------------

const STORM_TASKS: u64 = 200;
const STORM_STEPS: u64 = 10;

/// What the storm's LLM answers to `(task, step)`.
fn storm_answer(task: u64, step: u64) -> String {
    format!("t{task}s{step}")
}

/// 2,000 LLM requests — 200 tasks making 10 requests each, one after another, with a
/// seeded think time of 0–299 ms before each — against a provider that answers 429
/// with a random `Retry-After` of 1–3 s to 30% of requests (seeded) and otherwise
/// succeeds, 200 ms after the request. With `max_retries` unbounded:
/// - every request finally succeeds, exactly once, and every task completes with its
///   ten answers in order;
/// - no LLM request is sent during a back-off window (from each 429's arrival to the
///   `until` of its `BackedOff` trace event; requests already with the provider then
///   are not "sent during" it);
/// - each window ends at max(the window already running, arrival + max(Retry-After,
///   2 s × 2^(consecutive hits − 1))), where a delivered success resets the hits: so
///   the first 429 after a success backs off max(Retry-After, 2 s);
/// - a 429 to a request sent before the back-off running began (before the last hit
///   that counted) is part of that hit: it does not double the delay, and only its own
///   Retry-After can lengthen the window.
#[test]
fn a_429_storm_ends_with_every_request_answered_and_no_send_during_a_back_off() {
    let mut backoff = BackoffConfig::default();
    backoff.max_retries = u32::MAX;
    let mut ts = gated(RequestLimits::new().backoff(backoff));

    // The provider: the Retry-After it gave to each key, in order, and the keys it
    // answered well.
    let limited: Arc<Mutex<BTreeMap<RequestKey, VecDeque<Duration>>>> = Arc::default();
    let answered: Arc<Mutex<Vec<RequestKey>>> = Arc::default();
    let (limited_log, answered_log) = (Arc::clone(&limited), Arc::clone(&answered));
    let mut provider = SeededRng::new(0x429);
    ts.mock_with_latency(
        Kind::Llm,
        Mock::Fn(Box::new(move |out| {
            if provider.chance(30) {
                let retry_after = secs(1 + provider.below(3));
                limited_log
                    .lock()
                    .unwrap()
                    .entry(out.key)
                    .or_default()
                    .push_back(retry_after);
                return Err(RequestError::RateLimited {
                    retry_after: Some(retry_after),
                });
            }
            answered_log.lock().unwrap().push(out.key);
            let payload = out.request.payload.value();
            let (task, step) = (payload["task"].as_u64(), payload["step"].as_u64());
            match (task, step) {
                (Some(task), Some(step)) => Ok(json!(storm_answer(task, step))),
                _ => Err(RequestError::failed("no task or step in the payload")),
            }
        })),
        ms(200),
    );

    let mut tasks = Vec::new();
    for i in 0..STORM_TASKS {
        let mut think = SeededRng::new(1000 + i);
        tasks.push(ts.spawn(async_task("storm", move |cx| async move {
            let mut answers = Vec::new();
            for step in 0..STORM_STEPS {
                let pause = think.below(300);
                if pause > 0 {
                    cx.sleep(ms(pause)).await;
                }
                answers.push(cx.llm(json!({"task": i, "step": step})).await?);
            }
            Ok(json!(answers))
        })));
    }

    let end = ts.run_until_quiet();

    // Every task completed with its ten answers, in order.
    for (i, id) in tasks.iter().enumerate() {
        let expected: Vec<String> = (0..STORM_STEPS)
            .map(|step| storm_answer(i as u64, step))
            .collect();
        assert_eq!(
            ts.task_state(*id),
            TaskState::Completed(Ok(json!(expected)))
        );
    }
    // Every request succeeded exactly once; every 429 sent it again.
    let answered = answered.lock().unwrap().clone();
    let unique: BTreeSet<RequestKey> = answered.iter().copied().collect();
    assert_eq!((answered.len(), unique.len()), (2000, 2000));
    let limited = limited.lock().unwrap().clone();
    let hits: usize = limited.values().map(VecDeque::len).sum();
    let stats = ts.stats().clone();
    assert_eq!(stats.rate_limited, hits as u64);
    assert_eq!(ts.sent_requests().len(), 2000 + hits);
    assert!(ts.sent_requests().iter().all(|s| s.kind == Kind::Llm));
    assert_eq!(
        (stats.completed, stats.failed, stats.answers),
        (200, 0, 2000)
    );

    // The back-off windows, and the model of how long each should be.
    let mut retry_afters = limited;
    let mut windows: Vec<(Time, Time)> = Vec::new();
    let mut running_until = Time::ZERO;
    let mut consecutive = 0u32;
    let mut last_counted = Time::ZERO;
    let mut after_success = 0;
    let mut doubled = 0;
    let mut same_hit = 0;
    for event in ts.trace_events() {
        match event.cause {
            Cause::Answered(_) => consecutive = 0,
            Cause::BackedOff { number, until } => {
                // The latest send of the request before this 429.
                let sent = ts
                    .sent_requests()
                    .iter()
                    .rev()
                    .find(|s| {
                        s.key.task() == event.task && s.key.number() == number && s.at < event.time
                    })
                    .unwrap();
                let key = sent.key;
                let retry_after = retry_afters
                    .get_mut(&key)
                    .and_then(VecDeque::pop_front)
                    .unwrap();
                let delay = if consecutive == 0 || sent.at > last_counted {
                    consecutive += 1;
                    last_counted = event.time;
                    let exponential = (secs(2) * (1 << (consecutive - 1).min(30))).min(secs(64));
                    retry_after.max(exponential)
                } else {
                    same_hit += 1;
                    retry_after
                };
                let expected = running_until.max(event.time + delay);
                assert_eq!(
                    until, expected,
                    "429 number {consecutive} in a row at {} for {key} with Retry-After \
                     {retry_after:?}, the back-off running until {running_until}",
                    event.time
                );
                if last_counted != event.time {
                    // Part of the hit that began the back-off running.
                } else if consecutive == 1 && running_until <= event.time {
                    // The first 429 after a success, with no back-off running.
                    assert_eq!(until - event.time, retry_after.max(secs(2)));
                    after_success += 1;
                } else if consecutive > 1 {
                    doubled += 1;
                }
                running_until = until;
                windows.push((event.time, until));
            }
            _ => {}
        }
    }
    assert_eq!(windows.len(), hits);
    assert!(retry_afters.values().all(VecDeque::is_empty));
    // No LLM request went during a back-off window.
    for s in ts.sent_requests() {
        if let Some((start, until)) = windows
            .iter()
            .find(|(start, until)| *start <= s.at && s.at < *until)
        {
            panic!(
                "request {} went at {} during the back-off from {start} to {until}",
                s.key, s.at
            );
        }
    }
    // The storm as this seed plays it: how many 429s, how many came first after a
    // success with no back-off running, how many were second or later in a row, how
    // many were part of a hit already counted, and when the last answer came. (Before
    // 429s to requests sent together counted as one hit, 270 of them doubled the
    // back-off and the storm ended at 405.746 s.)
    assert_eq!(
        (hits, after_success, doubled, same_hit, end),
        (860, 21, 2, 269, Time::from_duration(ms(70_800)))
    );
}

/// What a gate lets go, and when, does not depend on when the driver takes requests
/// out: a free gate lets a request go at the end of the step that made it, and the
/// ones it holds go by priority as answers make room. One driver takes each request
/// as soon as it is out; the other only after every task has been polled. Both see
/// the same requests at the same moments, and the same trace.
#[test]
fn when_the_driver_drains_changes_nothing_behind_a_gate() {
    let run = |drain_each_step: bool| {
        let limits = RequestLimits::new().max_in_flight(Kind::Llm, 1);
        let mut core = Scheduler::new(Config::new().record_trace(true).requests(limits));
        let now = Time::ZERO;
        let low = core
            .submit(now, NewTask::new(one_llm()).priority(Priority::Low))
            .unwrap()
            .id;
        let normal = core.submit(now, NewTask::new(one_llm())).unwrap().id;
        let high = core
            .submit(now, NewTask::new(one_llm()).priority(Priority::High))
            .unwrap()
            .id;
        let mut taken = Vec::new();
        let mut clock = 0;
        loop {
            let mut polled = false;
            while core.step(at(clock)).is_some() {
                polled = true;
                if drain_each_step {
                    taken
                        .extend(std::iter::from_fn(|| core.poll_request()).map(|r| (clock, r.key)));
                }
            }
            taken.extend(std::iter::from_fn(|| core.poll_request()).map(|r| (clock, r.key)));
            let Some(&(_, key)) = taken.iter().rev().find(|(c, _)| *c == clock) else {
                if !polled {
                    break;
                }
                continue;
            };
            // Each request is answered a second after it went out.
            clock += 1;
            let _ = core.handle_response(at(clock), spool::Response::ok(key, json!(clock)));
        }
        let order: Vec<(u64, TaskId)> = taken.iter().map(|(c, k)| (*c, k.task())).collect();
        let trace = spool::Trace::render(core.trace().events());
        (order, trace, [low, normal, high])
    };
    let (eager, eager_trace, [low, normal, high]) = run(true);
    let (late, late_trace, _) = run(false);
    // The gate was free when the first-made request (the low task's, submitted first and
    // polled first by FIFO) went out; the rest waited and went by priority.
    assert_eq!(eager, [(0, low), (1, high), (2, normal)]);
    assert_eq!(late, eager);
    assert_eq!(late_trace, eager_trace);
}

// ---------------------------------------------------------------------------------
// 9. What a dashboard shows of the gates (`spool top`, `GET /v1/queue`).
// ---------------------------------------------------------------------------------

/// `Scheduler::gates` shows each gate as `spool top` draws it. A cap of two LLM
/// requests and three a minute; three tasks ask at t = 0: two go, one is held, the
/// window counts two of three. At 1 s the first is answered 429 with `Retry-After: 5s`:
/// the kind backs off until 6 s after one hit, the request is held again at the gate
/// (two held, one out), and the window still counts both sends.
#[test]
fn gates_show_in_flight_held_window_and_back_off() {
    let mut ts = gated(RequestLimits::new().max_in_flight(Kind::Llm, 2).window(
        Kind::Llm,
        3,
        secs(60),
    ));
    ts.hold(Kind::Llm);
    for _ in 0..3 {
        ts.spawn(one_llm());
    }
    ts.step_until_idle();
    let row = |ts: &TestScheduler| {
        ts.core()
            .gates()
            .into_iter()
            .map(|g| {
                (
                    g.kind.to_string(),
                    g.in_flight,
                    g.max_in_flight,
                    g.held,
                    g.window,
                    g.tokens,
                    g.backoff_until,
                    g.backoff_hits,
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row(&ts),
        [(
            "llm".to_owned(),
            2,
            Some(2),
            1,
            Some((2, 3, secs(60))),
            None,
            None,
            0
        )]
    );

    ts.advance(secs(1));
    let keys = held_keys(&ts);
    assert_eq!(ts.respond(keys[0], rate_limited(5)), Delivery::BackedOff);
    assert_eq!(
        row(&ts),
        [(
            "llm".to_owned(),
            1,
            Some(2),
            2,
            Some((2, 3, secs(60))),
            None,
            Some(at(6)),
            1
        )]
    );
}
