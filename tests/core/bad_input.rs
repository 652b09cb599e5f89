//! Bad input: stray answers, kinds with no executor, panics, stalls and cancels, each
//! with its exact outcome.

use std::time::Duration;

use serde_json::json;
use spool::{
    CancelError, CancelReason, CancelSignal, Delivery, DropReason, Kind, RequestKey, Step,
    TaskError, TaskId, TaskState, TestScheduler, WaitReason, task_fn,
};

use crate::support::{assert_trace_continuous, held_keys};

/// A task that makes `fan_out` held `tool:x` requests in its first poll and finishes
/// with the answers, in request order.
fn fan_out(scheduler: &mut TestScheduler, fan_out: u32) -> TaskId {
    let mut asked = false;
    scheduler.spawn(task_fn("fan-out", move |cx| {
        if !asked {
            asked = true;
            for n in 0..fan_out {
                cx.tool("x", json!(n));
            }
            return Step::Wait;
        }
        let mut answers = Vec::new();
        while let Some(answer) = cx.take_answer() {
            answers.push(answer.result.unwrap_or_default());
        }
        Step::done(answers)
    }))
}

/// A request key as an embedder would read it back from a journal or an API.
fn key_from_parts(task: u64, number: u32, index: u32) -> RequestKey {
    serde_json::from_value(json!({"task": task, "number": number, "slot": index})).unwrap()
}

#[test]
fn stray_answers_are_dropped_counted_and_harmless() {
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::tool("x"));
    let pair = fan_out(&mut scheduler, 2);
    let single = fan_out(&mut scheduler, 1);
    scheduler.step_until_idle();
    let keys = held_keys(&scheduler);
    assert_eq!(keys.len(), 3);
    let (pair_1, pair_2, single_1) = (keys[0], keys[1], keys[2]);
    assert_eq!(
        (pair_1.task(), pair_2.task(), single_1.task()),
        (pair, pair, single)
    );

    // An unknown task: an id never submitted, at an index that exists and at one that does not.
    assert_eq!(
        scheduler.answer(key_from_parts(99, 1, 0), "stray"),
        Delivery::Dropped(DropReason::UnknownTask)
    );
    assert_eq!(
        scheduler.answer(key_from_parts(99, 1, 4000), "stray"),
        Delivery::Dropped(DropReason::UnknownTask)
    );
    // A request the task never made.
    assert_eq!(
        scheduler.answer(key_from_parts(pair.get(), 7, 0), "stray"),
        Delivery::Dropped(DropReason::UnknownRequest)
    );
    // An answer twice: the second is dropped while the task still waits for the other.
    assert_eq!(scheduler.answer(pair_1, "one"), Delivery::Delivered);
    assert_eq!(
        scheduler.answer(pair_1, "one again"),
        Delivery::Dropped(DropReason::UnknownRequest)
    );
    assert_eq!(
        scheduler.task_state(pair),
        TaskState::Waiting(WaitReason::Request(Kind::tool("x")))
    );
    // A finished task.
    assert_eq!(scheduler.answer(single_1, "only"), Delivery::Delivered);
    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(single),
        TaskState::Completed(Ok(json!(["only"])))
    );
    assert_eq!(
        scheduler.answer(single_1, "late"),
        Delivery::Dropped(DropReason::TaskFinished)
    );

    // The other task is unaffected: it still completes with its own answers.
    assert_eq!(scheduler.answer(pair_2, "two"), Delivery::Delivered);
    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(pair),
        TaskState::Completed(Ok(json!(["one", "two"])))
    );

    let stats = scheduler.stats();
    assert_eq!((stats.answers, stats.dropped_answers), (3, 5));
    assert_eq!((stats.completed, stats.failed, stats.canceled), (2, 0, 0));
    assert!(scheduler.cancel_signals().is_empty());
    assert_trace_continuous(&scheduler);
}

#[test]
fn request_without_mock_fails_the_task_with_no_executor() {
    let mut scheduler = TestScheduler::new();
    scheduler.inject_mock_tool("ls", "files");
    let lost = scheduler.spawn(task_fn("lost", |cx| {
        if cx.take_answer().is_some() {
            return Step::fail("resumed after a request nobody serves");
        }
        cx.tool("nope", json!({"x": 1}));
        Step::Wait
    }));
    let fine = scheduler.spawn(crate::support::ask_once(
        "fine",
        spool::Request::tool("ls", json!({})),
    ));

    scheduler.step_until_idle();

    let error = TaskError::NoExecutor {
        task: lost,
        kind: Kind::tool("nope"),
    };
    assert_eq!(
        error.to_string(),
        "task 1 made a `tool:nope` request, and no executor serves that kind"
    );
    assert_eq!(scheduler.task_state(lost), TaskState::Completed(Err(error)));
    assert_eq!(
        scheduler.task_state(fine),
        TaskState::Completed(Ok(json!("files")))
    );
    // The request never reached an executor: no cancel signal, nothing in flight.
    assert!(scheduler.cancel_signals().is_empty());
    assert_eq!(scheduler.core().in_flight_len(), 0);
    let stats = scheduler.stats();
    assert_eq!(
        (stats.requests, stats.answers, stats.dropped_answers),
        (2, 1, 0)
    );
    assert_eq!((stats.completed, stats.failed), (1, 1));
}

/// Bug: when one request of a fan-out has no executor, the task ends while its other
/// requests still sit in the scheduler's outbox; they are then handed to their
/// executor anyway (after their cancel signal was raised), and the executor's answer
/// is counted as a dropped answer — which `Delivery` says "may point at a bug in an
/// executor". A request that never left should not go out (nor need a cancel signal),
/// as `handle_unroutable` itself does for the unroutable request.
#[test]
fn no_executor_in_a_fan_out_sends_nothing_more() {
    let mut scheduler = TestScheduler::new();
    scheduler.inject_mock_tool("x", "v");
    let id = scheduler.spawn(task_fn("half-lost", |cx| {
        cx.tool("nope", json!(1));
        cx.tool("x", json!(2));
        Step::Wait
    }));
    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Err(TaskError::NoExecutor {
            task: id,
            kind: Kind::tool("nope")
        }))
    );
    assert_eq!(
        scheduler.stats().dropped_answers,
        0,
        "the `tool:x` request went out after its task ended"
    );
    assert_eq!(scheduler.cancel_signals(), &[]);
}

#[test]
fn panicking_task_fails_and_the_loop_goes_on() {
    let mut scheduler = TestScheduler::new();
    let before = scheduler.spawn(task_fn("before", |_cx| Step::done(1)));
    let mut polls = 0;
    let str_panic = scheduler.spawn(task_fn("str-panic", move |_cx| {
        polls += 1;
        if polls == 2 {
            panic!("boom");
        }
        Step::Yield
    }));
    let string_panic = scheduler.spawn(task_fn("string-panic", |cx| {
        panic!("boom in task {}", cx.task_id());
    }));
    let other_panic = scheduler.spawn(task_fn("other-panic", |_cx| std::panic::panic_any(42_u32)));
    let after = scheduler.spawn(task_fn("after", |_cx| Step::done(2)));

    scheduler.step_until_idle();

    let panicked = |task: TaskId, message: &str| {
        TaskState::Completed(Err(TaskError::Panicked {
            task,
            message: message.into(),
        }))
    };
    assert_eq!(
        scheduler.task_state(before),
        TaskState::Completed(Ok(json!(1)))
    );
    assert_eq!(scheduler.task_state(str_panic), panicked(str_panic, "boom"));
    assert_eq!(
        scheduler.task_state(string_panic),
        panicked(string_panic, "boom in task 3")
    );
    assert_eq!(
        scheduler.task_state(other_panic),
        panicked(other_panic, "a panic with a payload that is not text")
    );
    assert_eq!(
        scheduler.task_state(after),
        TaskState::Completed(Ok(json!(2)))
    );
    assert_eq!(
        TaskError::Panicked {
            task: str_panic,
            message: "boom".into()
        }
        .to_string(),
        "task 2 panicked: boom"
    );
    let stats = scheduler.stats();
    assert_eq!((stats.polls, stats.completed, stats.failed), (6, 2, 3));
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}

#[test]
fn waiting_with_nothing_in_flight_stalls() {
    let mut scheduler = TestScheduler::new();
    let id = scheduler.spawn(task_fn("stuck", |_cx| Step::Wait));
    let other = scheduler.spawn(task_fn("other", |_cx| Step::done("ok")));
    scheduler.step_until_idle();

    let state = scheduler.task_state(id);
    let TaskState::Completed(Err(error @ TaskError::Stalled { .. })) = &state else {
        panic!("expected a stall, got {state:?}");
    };
    assert_eq!(
        error.to_string(),
        "task 1 waits with nothing to wake it: it waits with no request in flight, no \
         timer set and no child joined (an async task that awaits something other than a spool \
         request does this)"
    );
    assert_eq!(
        scheduler.task_state(other),
        TaskState::Completed(Ok(json!("ok")))
    );
    assert_eq!(scheduler.stats().failed, 1);
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace(), @r"
    #1 0.000s task 1: New -> Ready (submitted)
    #2 0.000s task 2: New -> Ready (submitted)
    #3 0.000s task 1: Ready -> Running (scheduled)
    #4 0.000s task 1: Running -> Completed(error) (stalled)
    #5 0.000s task 2: Ready -> Running (scheduled)
    #6 0.000s task 2: Running -> Completed(ok) (returned)
    ");
}

#[test]
fn cancel_waiting_task_signals_its_request_and_drops_the_late_answer() {
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::tool("x"));
    let victim = fan_out(&mut scheduler, 2);
    let bystander = fan_out(&mut scheduler, 1);
    scheduler.step_until_idle();
    let keys = held_keys(&scheduler);
    assert_eq!(keys.len(), 3);
    // One of the victim's two requests is answered before the cancel.
    assert_eq!(scheduler.answer(keys[0], "early"), Delivery::Delivered);

    scheduler.cancel(victim).unwrap();

    assert_eq!(
        scheduler.task_state(victim),
        TaskState::Canceled(CancelReason::Requested)
    );
    assert_eq!(
        scheduler.cancel_signals(),
        &[CancelSignal {
            key: keys[1],
            kind: Kind::tool("x")
        }],
        "exactly the request still in flight is signalled"
    );
    assert_eq!(
        held_keys(&scheduler),
        [keys[2]],
        "the canceled request is no longer held"
    );
    assert_eq!(
        scheduler.answer(keys[1], "late"),
        Delivery::Dropped(DropReason::TaskFinished)
    );
    assert_eq!(
        scheduler.task_state(victim),
        TaskState::Canceled(CancelReason::Requested)
    );

    // Canceling it again, or a task that does not exist.
    let again = scheduler.cancel(victim).unwrap_err();
    assert_eq!(
        again,
        CancelError::AlreadyEnded {
            id: victim,
            state: TaskState::Canceled(CancelReason::Requested)
        }
    );
    assert_eq!(
        again.to_string(),
        "task 1 has already ended: Canceled(canceled on request)"
    );
    let unknown = scheduler.cancel(TaskId::from_raw(42)).unwrap_err();
    assert_eq!(unknown, CancelError::UnknownTask(TaskId::from_raw(42)));
    assert_eq!(unknown.to_string(), "no task 42");

    // The other task is unaffected.
    assert_eq!(scheduler.answer(keys[2], "fine"), Delivery::Delivered);
    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(bystander),
        TaskState::Completed(Ok(json!(["fine"])))
    );
    let stats = scheduler.stats();
    assert_eq!(
        (stats.canceled, stats.completed, stats.dropped_answers),
        (1, 1, 1)
    );
    assert_eq!(scheduler.core().in_flight_len(), 0);
    assert_eq!(scheduler.core().live_len(), 0);
}

#[test]
fn cancel_of_a_completed_or_stalled_task_is_already_ended() {
    let mut scheduler = TestScheduler::new();
    let done = scheduler.spawn(task_fn("done", |_cx| Step::done("v")));
    let stuck = scheduler.spawn(task_fn("stuck", |_cx| Step::Wait));
    scheduler.step_until_idle();
    assert_eq!(
        scheduler.cancel(done),
        Err(CancelError::AlreadyEnded {
            id: done,
            state: TaskState::Completed(Ok(json!("v")))
        })
    );
    assert!(matches!(
        scheduler.cancel(stuck),
        Err(CancelError::AlreadyEnded {
            id,
            state: TaskState::Completed(Err(TaskError::Stalled { .. })),
        }) if id == stuck
    ));
    assert_eq!(scheduler.stats().canceled, 0);
}

#[test]
fn cancel_of_a_ready_or_sleeping_task() {
    let mut scheduler = TestScheduler::new();
    let ready = scheduler.spawn(task_fn("never-polled", |_cx| Step::fail("must not run")));
    let mut slept = false;
    let sleeper = scheduler.spawn(task_fn("sleeper", move |cx| {
        if slept {
            return Step::fail("must not wake");
        }
        slept = true;
        cx.sleep(Duration::from_secs(1));
        Step::Wait
    }));
    scheduler.cancel(ready).unwrap();
    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(sleeper),
        TaskState::Waiting(WaitReason::Timer)
    );
    scheduler.cancel(sleeper).unwrap();
    scheduler.advance(Duration::from_secs(2));

    assert_eq!(
        scheduler.task_state(ready),
        TaskState::Canceled(CancelReason::Requested)
    );
    assert_eq!(
        scheduler.task_state(sleeper),
        TaskState::Canceled(CancelReason::Requested)
    );
    assert!(
        scheduler.cancel_signals().is_empty(),
        "neither had a request in flight"
    );
    assert_eq!(
        scheduler.core_mut().poll_timeout(),
        None,
        "the canceled timer is gone"
    );
    assert_eq!(scheduler.stats().polls, 1);
    assert_trace_continuous(&scheduler);
}
