//! The smallest task with a request: it calls a mocked tool and finishes with its answer.

use serde_json::json;
use spool::{Step, TaskState, TestScheduler, task_fn};

#[test]
fn tool_call_answered_by_mock_completes_the_task() {
    let mut scheduler = TestScheduler::new();
    scheduler.inject_mock_tool("ls", "result");
    let mut asked = false;
    let task_id = scheduler.spawn(task_fn("lister", move |cx| {
        if !asked {
            asked = true;
            cx.tool("ls", json!({"path": "."}));
            return Step::Wait;
        }
        match cx.take_answer() {
            Some(answer) => Step::Done(answer.result.map_err(|e| e.into_task_error(answer.number))),
            None => Step::fail("resumed without an answer"),
        }
    }));

    // One step asks (and the mock answers at once), one step finishes.
    assert_eq!(scheduler.step_until_idle(), 2);

    assert_eq!(
        scheduler.task_state(task_id),
        TaskState::Completed(Ok(json!("result")))
    );
    let stats = scheduler.stats();
    assert_eq!(
        (
            stats.submitted,
            stats.polls,
            stats.requests,
            stats.answers,
            stats.completed
        ),
        (1, 2, 1, 1, 1)
    );
    assert_eq!((stats.failed, stats.dropped_answers), (0, 0));
}
