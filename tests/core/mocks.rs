//! Mocks: scripts that run out, and answers that take virtual time.

use std::time::Duration;

use serde_json::json;
use spool::{
    Kind, Mock, RequestError, Step, TaskError, TaskState, TestScheduler, Time, WaitReason, task_fn,
};

use crate::support::assert_trace_continuous;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A task that makes `count` LLM requests one after the other and finishes with the
/// answers, or with the first error passed on.
fn asks_llm(count: u32) -> impl spool::AgentTask {
    let mut answers = Vec::new();
    task_fn("asks-llm", move |cx| {
        if let Some(answer) = cx.take_answer() {
            match answer.result {
                Ok(v) => answers.push(v),
                Err(e) => return Step::Done(Err(e.into_task_error(answer.number))),
            }
        }
        if answers.len() as u32 == count {
            return Step::done(answers.clone());
        }
        cx.llm(json!({"turn": answers.len()}));
        Step::Wait
    })
}

#[test]
fn script_running_out_fails_the_request_naming_it() {
    let mut scheduler = TestScheduler::new();
    scheduler.mock_llm(["first"]);
    let id = scheduler.spawn(asks_llm(2));
    scheduler.step_until_idle();

    let error = RequestError::Failed {
        message: "the mock script for `llm` ran out at request 1:2".into(),
    };
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Err(TaskError::Request {
            number: 2,
            error: error.clone()
        }))
    );
    assert_eq!(
        error.into_task_error(2).to_string(),
        "request 2 failed: the executor failed: the mock script for `llm` ran out at request 1:2"
    );
}

#[test]
fn script_answers_in_order_across_tasks() {
    let mut scheduler = TestScheduler::new();
    scheduler.mock_llm(["a", "b", "c", "d"]);
    let first = scheduler.spawn(asks_llm(2));
    let second = scheduler.spawn(asks_llm(2));
    scheduler.step_until_idle();
    // FIFO: first asks, second asks, first asks again, second asks again.
    assert_eq!(
        scheduler.task_state(first),
        TaskState::Completed(Ok(json!(["a", "c"])))
    );
    assert_eq!(
        scheduler.task_state(second),
        TaskState::Completed(Ok(json!(["b", "d"])))
    );
}

#[test]
fn latency_delivers_at_the_right_virtual_time() {
    let mut scheduler = TestScheduler::new();
    scheduler.mock_with_latency(Kind::Llm, Mock::Fixed(json!("plan")), ms(250));
    scheduler.mock_with_latency(
        Kind::tool("ls"),
        Mock::Fn(Box::new(|out| {
            Ok(json!(format!("listed at request {}", out.key)))
        })),
        ms(100),
    );
    let mut polls = 0;
    let id = scheduler.spawn(task_fn("timed", move |cx| {
        polls += 1;
        match polls {
            1 => {
                cx.llm(json!("go"));
                Step::Wait
            }
            2 => {
                let _ = cx.take_answer();
                cx.tool("ls", json!({}));
                Step::Wait
            }
            _ => Step::done(json!({
                "answer": cx.take_answer().and_then(|a| a.result.ok()),
                "at": cx.now().to_string(),
            })),
        }
    }));

    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );

    scheduler.advance(ms(200));
    assert_eq!(scheduler.now(), Time::from_duration(ms(200)));
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );

    // The LLM answers at 0.250s; the tool call it leads to would answer at 0.350s.
    scheduler.advance(ms(100));
    assert_eq!(scheduler.now(), Time::from_duration(ms(300)));
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Waiting(WaitReason::Request(Kind::tool("ls")))
    );

    assert_eq!(scheduler.run_until_quiet(), Time::from_duration(ms(350)));
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Ok(
            json!({"answer": "listed at request 1:2", "at": "0.350s"})
        ))
    );
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace(), @r"
    #1 0.000s task 1: New -> Ready (submitted)
    #2 0.000s task 1: Ready -> Running (scheduled)
    #3 0.000s task 1: Running -> Waiting(llm) (1 request)
    #4 0.250s task 1: Waiting(llm) -> Ready (answer to request 1)
    #5 0.250s task 1: Ready -> Running (scheduled)
    #6 0.250s task 1: Running -> Waiting(tool:ls) (1 request)
    #7 0.350s task 1: Waiting(tool:ls) -> Ready (answer to request 2)
    #8 0.350s task 1: Ready -> Running (scheduled)
    #9 0.350s task 1: Running -> Completed(ok) (returned)
    ");
}

/// Answers and timers due on the way are run in time order, whichever kind they are.
#[test]
fn run_until_quiet_interleaves_answers_and_timers_by_time() {
    let mut scheduler = TestScheduler::new();
    scheduler.mock_with_latency(Kind::tool("slow"), Mock::Fixed(json!("slow")), ms(30));
    scheduler.mock_with_latency(Kind::tool("fast"), Mock::Fixed(json!("fast")), ms(10));
    let mut asked = false;
    let tools = scheduler.spawn(task_fn("tools", move |cx| {
        if !asked {
            asked = true;
            cx.tool("slow", json!(null));
            cx.tool("fast", json!(null));
            return Step::Wait;
        }
        let mut got = Vec::new();
        while let Some(a) = cx.take_answer() {
            got.push(a.result.unwrap_or_default());
        }
        Step::done(got)
    }));
    let mut slept = false;
    let sleeper = scheduler.spawn(task_fn("sleeper", move |cx| {
        if !slept {
            slept = true;
            cx.sleep(ms(20));
            return Step::Wait;
        }
        Step::done(cx.now().to_string())
    }));

    assert_eq!(scheduler.run_until_quiet(), Time::from_duration(ms(30)));
    assert_eq!(
        scheduler.task_state(tools),
        TaskState::Completed(Ok(json!(["slow", "fast"])))
    );
    assert_eq!(
        scheduler.task_state(sleeper),
        TaskState::Completed(Ok(json!("0.020s")))
    );
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace(), @r"
    #1 0.000s task 1: New -> Ready (submitted)
    #2 0.000s task 2: New -> Ready (submitted)
    #3 0.000s task 1: Ready -> Running (scheduled)
    #4 0.000s task 1: Running -> Waiting(2 requests) (2 requests)
    #5 0.000s task 2: Ready -> Running (scheduled)
    #6 0.000s task 2: Running -> Waiting(timer) (sleeping)
    #7 0.010s task 1: Waiting(2 requests) -> Waiting(tool:slow) (answer to request 2)
    #8 0.020s task 2: Waiting(timer) -> Ready (timer fired)
    #9 0.020s task 2: Ready -> Running (scheduled)
    #10 0.020s task 2: Running -> Completed(ok) (returned)
    #11 0.030s task 1: Waiting(tool:slow) -> Ready (answer to request 1)
    #12 0.030s task 1: Ready -> Running (scheduled)
    #13 0.030s task 1: Running -> Completed(ok) (returned)
    ");
}
