//! Many tasks on real executor threads: every answer reaches the task that asked.

use serde_json::json;
use spool::{AgentTask, Answer, Kind, NewTask, Runtime, Step, TaskState, from_fn, task_fn};

use crate::support::{LIMIT, payload, within};

const TASKS: u64 = 1000;
const REQUESTS: u64 = 10;

/// The answer to the request with `payload`: the LLM doubles it, `tool:t` adds 7.
fn answer_for(payload: u64, step: u64) -> u64 {
    if step.is_multiple_of(2) {
        payload * 2
    } else {
        payload + 7
    }
}

/// Makes ten requests with payloads unique to task `index`, alternating LLM and
/// `tool:t`, checks each answer, and finishes with their sum.
fn worker(index: u64) -> impl AgentTask {
    let mut step = 0u64;
    let mut sum = 0u64;
    task_fn("worker", move |cx| {
        if step > 0 {
            let want = answer_for(index * 1000 + step - 1, step - 1);
            match cx.take_answer() {
                Some(Answer {
                    number,
                    result: Ok(value),
                }) if u64::from(number) == step && value == json!(want) => {
                    sum += want;
                }
                other => {
                    return Step::fail(format!(
                        "task {index} request {step}: wanted {want}, got {other:?}"
                    ));
                }
            }
        }
        if step == REQUESTS {
            return Step::done(sum);
        }
        let payload = index * 1000 + step;
        if step.is_multiple_of(2) {
            cx.llm(json!(payload));
        } else {
            cx.tool("t", json!(payload));
        }
        step += 1;
        Step::Wait
    })
}

#[test]
fn thousand_tasks_get_their_own_answers() {
    let mut runtime = Runtime::builder()
        .executor(Kind::Llm, from_fn(|out| Ok(json!(payload(out) * 2))))
        .pool(Kind::tool("t"), 2, || {
            from_fn(|out| Ok(json!(payload(out) + 7)))
        })
        .build();
    let ids: Vec<_> = (0..TASKS)
        .map(|i| runtime.submit(NewTask::new(worker(i))).unwrap().id)
        .collect();

    let (runtime, report) = within(LIMIT, "run_until_idle", move || {
        let report = runtime.run_until_idle();
        (runtime, report)
    });

    for (index, id) in (0..TASKS).zip(&ids) {
        let expected: u64 = (0..REQUESTS).map(|s| answer_for(index * 1000 + s, s)).sum();
        assert_eq!(
            runtime.task_state(*id),
            Some(TaskState::Completed(Ok(json!(expected)))),
            "task {id} (index {index})"
        );
    }
    assert_eq!(report.steps, TASKS * (REQUESTS + 1));
    let stats = &report.stats;
    assert_eq!(
        (stats.submitted, stats.completed, stats.failed),
        (TASKS, TASKS, 0)
    );
    assert_eq!(
        (stats.requests, stats.answers),
        (TASKS * REQUESTS, TASKS * REQUESTS)
    );
    assert_eq!(stats.dropped_answers, 0);
    assert_eq!(runtime.scheduler().in_flight_len(), 0);
    assert_eq!(runtime.scheduler().live_len(), 0);
}
