//! What the harness saw, with times: requests sent, answers delivered, cancel signals
//! sent — and mocks whose latency depends on the request.

use std::time::Duration;

use serde_json::json;
use spool::{
    CancelSignal, DeliveredAnswer, Delivery, DropReason, Kind, Mock, Request, RequestError,
    SentCancel, SentRequest, Step, TaskState, TestScheduler, Time, task_fn,
};

use crate::support::{ask_once, assert_trace_continuous, held_keys};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn at_ms(n: u64) -> Time {
    Time::from_duration(ms(n))
}

/// The milliseconds a `tool:wait` request asks to take: its payload.
fn asked_ms(out: &spool::OutboundRequest) -> Duration {
    ms(out.request.payload.as_u64().unwrap_or(0))
}

#[test]
fn a_cancel_is_seen_at_the_time_it_went_out() {
    let mut ts = TestScheduler::new();
    ts.hold(Kind::Llm);
    let id = ts.spawn(ask_once("asker", Request::llm(json!("?"))));
    ts.advance(ms(3000));
    ts.cancel(id).unwrap();
    ts.advance(ms(500));

    let key = only_key(&ts);
    assert_eq!(
        ts.sent_requests(),
        [SentRequest {
            at: Time::ZERO,
            key,
            kind: Kind::Llm
        }]
    );
    assert_eq!(
        ts.sent_cancels(),
        [SentCancel {
            at: at_ms(3000),
            key,
            kind: Kind::Llm
        }]
    );
    assert_eq!(format!("{:?}", ts.sent_cancels()[0].at), "3.000s");
    // The untimed view says the same, for tests that do not care when.
    assert_eq!(
        ts.cancel_signals(),
        [CancelSignal {
            key,
            kind: Kind::Llm
        }]
    );
    assert!(
        ts.held_requests().is_empty(),
        "the cancel took the held request away"
    );
    assert!(ts.delivered_answers().is_empty());
}

/// The key of the only request the test scheduler sent.
fn only_key(ts: &TestScheduler) -> spool::RequestKey {
    assert_eq!(ts.sent_requests().len(), 1);
    ts.sent_requests()[0].key
}

#[test]
fn answers_are_recorded_with_their_time_and_what_became_of_them() {
    let mut ts = TestScheduler::new();
    ts.mock_with_latency(Kind::Llm, Mock::Fixed(json!("late")), ms(250));
    ts.hold(Kind::tool("ls"));
    let slow = ts.spawn(ask_once("slow", Request::llm(json!("?"))));
    let lister = ts.spawn(ask_once("lister", Request::tool("ls", json!({}))));
    ts.advance(ms(100));
    let ls_key = held_keys(&ts)[0];
    assert_eq!(ts.answer(ls_key, "files"), Delivery::Delivered);
    ts.cancel(slow).unwrap();
    // The LLM's answer still comes at 250 ms, for a task that has ended.
    ts.run_until_quiet();

    let llm_key = ts.sent_requests()[0].key;
    assert_eq!(
        ts.delivered_answers(),
        [
            DeliveredAnswer {
                at: at_ms(100),
                key: ls_key,
                result: Ok(json!("files")),
                delivery: Delivery::Delivered,
            },
            DeliveredAnswer {
                at: at_ms(250),
                key: llm_key,
                result: Ok(json!("late")),
                delivery: Delivery::Dropped(DropReason::TaskFinished),
            },
        ]
    );
    assert_eq!(
        ts.sent_cancels(),
        [SentCancel {
            at: at_ms(100),
            key: llm_key,
            kind: Kind::Llm
        }]
    );
    assert_eq!(
        ts.task_state(lister),
        TaskState::Completed(Ok(json!("files")))
    );
    assert_trace_continuous(&ts);
}

#[test]
fn a_failed_answer_is_recorded_with_its_error() {
    let mut ts = TestScheduler::new();
    ts.mock_llm(Vec::<serde_json::Value>::new());
    let id = ts.spawn(ask_once("asker", Request::llm(json!("?"))));
    ts.step_until_idle();

    let key = ts.sent_requests()[0].key;
    let error = RequestError::failed(format!(
        "the mock script for `llm` ran out at request {key}"
    ));
    assert_eq!(
        ts.delivered_answers(),
        [DeliveredAnswer {
            at: Time::ZERO,
            key,
            result: Err(error),
            delivery: Delivery::Delivered,
        }]
    );
    // ask_once finishes with null when its request failed.
    assert_eq!(ts.task_state(id), TaskState::Completed(Ok(json!(null))));
}

/// Each request says how long it takes; the mock's latency closure reads it. Answers
/// arrive in order of their due time, and two due at the same time arrive in the
/// order their requests went out — not in key order or task order.
#[test]
fn per_request_latency_gives_an_exact_delivery_order_and_times() {
    let mut ts = TestScheduler::new();
    ts.mock_with_latency_fn(
        Kind::tool("wait"),
        Mock::Fn(Box::new(|out| Ok(out.request.payload.clone().into_value()))),
        asked_ms,
    );
    // Task 1 asks for 30 ms, task 2 for 10, task 3 for 0 (answered at once), task 4
    // for 30 again.
    let mut ids = Vec::new();
    for wait in [30, 10, 0, 30] {
        ids.push(ts.spawn(ask_once("waiter", Request::tool("wait", json!(wait)))));
    }
    ts.run_until_quiet();

    let sent: Vec<(Time, spool::TaskId)> = ts
        .sent_requests()
        .iter()
        .map(|s| (s.at, s.key.task()))
        .collect();
    assert_eq!(
        sent,
        [
            (Time::ZERO, ids[0]),
            (Time::ZERO, ids[1]),
            (Time::ZERO, ids[2]),
            (Time::ZERO, ids[3])
        ]
    );
    let delivered: Vec<(Time, spool::TaskId, Delivery)> = ts
        .delivered_answers()
        .iter()
        .map(|a| (a.at, a.key.task(), a.delivery))
        .collect();
    assert_eq!(
        delivered,
        [
            (Time::ZERO, ids[2], Delivery::Delivered),
            (at_ms(10), ids[1], Delivery::Delivered),
            (at_ms(30), ids[0], Delivery::Delivered),
            (at_ms(30), ids[3], Delivery::Delivered),
        ]
    );
    for (id, wait) in ids.iter().zip([30, 10, 0, 30]) {
        assert_eq!(ts.task_state(*id), TaskState::Completed(Ok(json!(wait))));
    }
    assert_eq!(ts.now(), at_ms(30));
    assert_trace_continuous(&ts);
}

/// Two tasks due at the same time, sent in the reverse order of their ids: the
/// answer to the one sent first arrives first.
#[test]
fn answers_due_together_arrive_in_send_order() {
    let mut ts = TestScheduler::new();
    ts.mock_with_latency_fn(Kind::tool("wait"), Mock::Fixed(json!("done")), asked_ms);
    // Task 1 sleeps 5 ms then asks for 20 ms (due at 25); task 2 asks for 25 ms at
    // once (due at 25, sent first).
    let mut slept = false;
    let mut asked = false;
    let late = ts.spawn(task_fn("late", move |cx| {
        if !slept {
            slept = true;
            cx.sleep(ms(5));
            return Step::Wait;
        }
        if !asked {
            asked = true;
            cx.tool("wait", json!(20));
            return Step::Wait;
        }
        Step::done("late")
    }));
    let early = ts.spawn(ask_once("early", Request::tool("wait", json!(25))));
    ts.run_until_quiet();

    let sent: Vec<(Time, spool::TaskId)> = ts
        .sent_requests()
        .iter()
        .map(|s| (s.at, s.key.task()))
        .collect();
    assert_eq!(sent, [(Time::ZERO, early), (at_ms(5), late)]);
    let delivered: Vec<(Time, spool::TaskId)> = ts
        .delivered_answers()
        .iter()
        .map(|a| (a.at, a.key.task()))
        .collect();
    assert_eq!(delivered, [(at_ms(25), early), (at_ms(25), late)]);
    assert_eq!(ts.task_state(late), TaskState::Completed(Ok(json!("late"))));
}

/// The latency closure is asked once per answered request, in send order, and not for
/// a request the mock holds.
#[test]
fn the_latency_closure_sees_each_answered_request_once() {
    use std::sync::{Arc, Mutex};

    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let mut ts = TestScheduler::new();
    ts.mock_with_latency_fn(Kind::Llm, Mock::Fixed(json!("ok")), move |out| {
        log.lock().unwrap().push(out.key);
        ms(7)
    });
    ts.mock_with_latency_fn(Kind::tool("held"), Mock::Held, |_| {
        panic!("a held request has no latency")
    });
    let a = ts.spawn(ask_once("a", Request::llm(json!(1))));
    let held = ts.spawn(ask_once("held", Request::tool("held", json!(2))));
    let b = ts.spawn(ask_once("b", Request::llm(json!(3))));
    ts.run_until_quiet();

    let keys: Vec<spool::TaskId> = seen.lock().unwrap().iter().map(|k| k.task()).collect();
    assert_eq!(keys, [a, b]);
    assert_eq!(ts.now(), at_ms(7));
    assert_eq!(held_keys(&ts).len(), 1);
    assert_eq!(held_keys(&ts)[0].task(), held);
    assert!(matches!(ts.task_state(a), TaskState::Completed(Ok(_))));
}
