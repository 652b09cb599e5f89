//! Task graphs: children spawned and joined from async agents (`Cx::spawn`, `join_all`,
//! `join_any`) and from explicit state machines (`TaskContext::spawn`, `join`,
//! `Step::Wait` / `Step::WaitAny`, `take_child_result`); outcomes as values; what a
//! child inherits; cancel cascades. Every snapshot was checked by hand.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use spool::{
    AsyncTask, CancelError, CancelReason, CancelSignal, Delivery, DropReason, Kind, Mock, NewTask,
    Outcome, Priority, RequestError, Step, TaskError, TaskId, TaskState, TestScheduler, Time,
    WaitReason, async_task, task_fn,
};

use crate::support::{assert_trace_continuous, held_keys};

fn t(n: u64) -> TaskId {
    TaskId::from_raw(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Reads `path` with `tool:read`, passing a failure on with `?`.
fn reader(path: &'static str) -> AsyncTask {
    async_task("reader", move |cx| async move {
        let text = cx.tool("read", json!({"path": path})).await?;
        Ok(text)
    })
}

/// Sleeps `millis` of virtual time, then finishes with `millis`.
fn sleeper(millis: u64) -> AsyncTask {
    async_task("sleeper", move |cx| async move {
        cx.sleep(ms(millis)).await;
        Ok(json!(millis))
    })
}

fn read_mock() -> Mock {
    Mock::Fn(Box::new(|out| match out.request.payload["path"].as_str() {
        Some("missing.txt") => Err(RequestError::failed("no such file: missing.txt")),
        Some(path) => Ok(json!(format!("contents of {path}"))),
        None => Err(RequestError::InvalidArguments {
            message: "no path".into(),
        }),
    }))
}

// ---------------------------------------------------------------------------------
// 2b. A failing child is a value for its parent.
// ---------------------------------------------------------------------------------

#[test]
fn parent_joins_two_children_and_handles_the_one_that_failed() {
    let mut scheduler = TestScheduler::new();
    scheduler.mock(Kind::tool("read"), read_mock());
    let seen: Arc<Mutex<Option<Vec<Outcome>>>> = Arc::default();
    let report = Arc::clone(&seen);
    let parent = scheduler.spawn(async_task("parent", move |cx| async move {
        let a = cx.spawn(NewTask::new(reader("a.txt")));
        let b = cx.spawn(NewTask::new(reader("missing.txt")));
        let ids = [a.id(), b.id()];
        let outcomes = cx.join_all(vec![a, b]).await;
        *report.lock().unwrap() = Some(outcomes.clone());
        let summary: Vec<Value> = ids
            .iter()
            .zip(outcomes)
            .map(|(id, outcome)| match outcome {
                Ok(text) => json!({"task": id.get(), "text": text}),
                Err(error) => json!({"task": id.get(), "error": error.to_string()}),
            })
            .collect();
        Ok(json!(summary))
    }));

    scheduler.run_until_quiet();

    let failure = TaskError::RequestFailed {
        error: RequestError::failed("no such file: missing.txt"),
    };
    assert_eq!(
        *seen.lock().unwrap(),
        Some(vec![Ok(json!("contents of a.txt")), Err(failure.clone())])
    );
    assert_eq!(
        failure.to_string(),
        "a request failed: the executor failed: no such file: missing.txt"
    );
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Completed(Ok(json!([
            {"task": 2, "text": "contents of a.txt"},
            {"task": 3, "error": "a request failed: the executor failed: no such file: missing.txt"},
        ])))
    );
    assert_eq!(
        scheduler.task_state(t(2)),
        TaskState::Completed(Ok(json!("contents of a.txt")))
    );
    assert_eq!(
        scheduler.task_state(t(3)),
        TaskState::Completed(Err(failure))
    );
    let stats = scheduler.stats();
    assert_eq!(
        (
            stats.submitted,
            stats.completed,
            stats.failed,
            stats.canceled
        ),
        (3, 2, 1, 0)
    );
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}

#[test]
fn children_that_panic_stall_have_no_executor_or_are_canceled_are_errors_to_handle() {
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::tool("x"));
    let seen: Arc<Mutex<Vec<Outcome>>> = Arc::default();
    let report = Arc::clone(&seen);
    let parent = scheduler.spawn(async_task("parent", move |cx| async move {
        let panics = cx.spawn(NewTask::new(async_task("panics", |_cx| async move {
            panic!("child gave up")
        })));
        let stalls = cx.spawn(NewTask::new(async_task("stalls", |_cx| async move {
            futures::future::pending::<()>().await;
            Ok(Value::Null)
        })));
        let unserved = cx.spawn(NewTask::new(async_task("unserved", |cx| async move {
            Ok(cx.tool("nobody", json!(null)).await?)
        })));
        let waits = cx.spawn(NewTask::new(async_task("waits", |cx| async move {
            Ok(cx.tool("x", json!(null)).await?)
        })));
        let outcomes = cx.join_all(vec![panics, stalls, unserved, waits]).await;
        let failed = outcomes.iter().filter(|o| o.is_err()).count();
        *report.lock().unwrap() = outcomes;
        Ok(json!({"failed": failed}))
    }));

    scheduler.step_until_idle();
    let key = held_keys(&scheduler)[0];
    assert_eq!((key.task(), key.number()), (t(5), 1));
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Waiting(WaitReason::Children(1))
    );
    scheduler.cancel(t(5)).unwrap();
    scheduler.step_until_idle();

    let hint = "it waits with no request in flight, no timer set and no child \
                joined (an async task that awaits something other than a spool request \
                does this)";
    let expected = vec![
        Err(TaskError::Panicked {
            task: t(2),
            message: "child gave up".into(),
        }),
        Err(TaskError::Stalled {
            task: t(3),
            hint: hint.into(),
        }),
        Err(TaskError::NoExecutor {
            task: t(4),
            kind: Kind::tool("nobody"),
        }),
        Err(TaskError::Canceled {
            task: t(5),
            reason: CancelReason::Requested,
        }),
    ];
    assert_eq!(*seen.lock().unwrap(), expected);
    let messages: Vec<String> = expected
        .iter()
        .map(|o| o.clone().unwrap_err().to_string())
        .collect();
    assert_eq!(
        messages,
        [
            "task 2 panicked: child gave up".to_owned(),
            format!("task 3 waits with nothing to wake it: {hint}"),
            "task 4 made a `tool:nobody` request, and no executor serves that kind".to_owned(),
            "task 5 was canceled: canceled on request".to_owned(),
        ]
    );
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Completed(Ok(json!({"failed": 4})))
    );
    assert_eq!(
        scheduler.cancel_signals(),
        [CancelSignal {
            key,
            kind: Kind::tool("x"),
        }]
    );
    assert_trace_continuous(&scheduler);
}

// ---------------------------------------------------------------------------------
// 2c. Canceling a parent cancels its children, transitively.
// ---------------------------------------------------------------------------------

#[test]
fn canceling_a_parent_cancels_child_and_grandchild_and_their_requests() {
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::Llm);
    scheduler.hold(Kind::tool("x"));
    scheduler.hold(Kind::tool("y"));
    let parent = scheduler.spawn(async_task("parent", |cx| async move {
        let child = cx.spawn(NewTask::new(async_task("child", |cx| async move {
            let grandchild = cx.spawn(NewTask::new(async_task("grandchild", |cx| async move {
                Ok(cx.tool("y", json!("deep")).await?)
            })));
            let (x, deep) = futures::join!(cx.tool("x", json!("mid")), grandchild);
            Ok(json!([x?, deep?]))
        })));
        let (plan, child) = futures::join!(cx.llm(json!("top")), child);
        Ok(json!([plan?, child?]))
    }));

    scheduler.step_until_idle();
    let keys = held_keys(&scheduler);
    let numbers: Vec<(TaskId, u32)> = keys.iter().map(|k| (k.task(), k.number())).collect();
    assert_eq!(numbers, [(parent, 1), (t(2), 1), (t(3), 1)]);
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );

    scheduler.cancel(parent).unwrap();

    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Canceled(CancelReason::Requested)
    );
    assert_eq!(
        scheduler.task_state(t(2)),
        TaskState::Canceled(CancelReason::ParentEnded(parent))
    );
    assert_eq!(
        scheduler.task_state(t(3)),
        TaskState::Canceled(CancelReason::ParentEnded(t(2)))
    );
    assert_eq!(
        scheduler.task_state(t(3)).to_string(),
        "Canceled(canceled with its parent, task 2)"
    );
    assert_eq!(
        scheduler.cancel_signals(),
        [
            CancelSignal {
                key: keys[0],
                kind: Kind::Llm,
            },
            CancelSignal {
                key: keys[1],
                kind: Kind::tool("x"),
            },
            CancelSignal {
                key: keys[2],
                kind: Kind::tool("y"),
            },
        ]
    );
    assert!(scheduler.held_requests().is_empty());
    assert_eq!(scheduler.core().live_len(), 0);
    assert_eq!(scheduler.core().in_flight_len(), 0);
    assert_eq!(scheduler.stats().canceled, 3);

    // Late answers never resurrect anything; canceling again says how they ended.
    for key in keys {
        assert_eq!(
            scheduler.answer(key, "late"),
            Delivery::Dropped(DropReason::TaskFinished)
        );
    }
    assert_eq!(
        scheduler.cancel(t(2)),
        Err(CancelError::AlreadyEnded {
            id: t(2),
            state: TaskState::Canceled(CancelReason::ParentEnded(parent)),
        })
    );
    assert_eq!(
        scheduler.cancel(t(2)).unwrap_err().to_string(),
        "task 2 has already ended: Canceled(canceled with its parent, task 1)"
    );
    assert_eq!(scheduler.step_until_idle(), 0);
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}

#[test]
fn a_child_that_ends_cancels_its_own_children_but_not_its_parent() {
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::tool("forever"));
    scheduler.inject_mock_tool("quick", "fine");
    let parent = scheduler.spawn(async_task("parent", |cx| async move {
        let child = cx.spawn(NewTask::new(async_task("child", |cx| async move {
            // Spawned, never joined: it ends with the child.
            let _grandchild = cx.spawn(NewTask::new(async_task("grandchild", |cx| async move {
                Ok(cx.tool("forever", json!(null)).await?)
            })));
            Ok(cx.tool("quick", json!(null)).await?)
        })));
        let value = child.await?;
        Ok(json!({"child said": value}))
    }));

    scheduler.run_until_quiet();

    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Completed(Ok(json!({"child said": "fine"})))
    );
    assert_eq!(
        scheduler.task_state(t(2)),
        TaskState::Completed(Ok(json!("fine")))
    );
    assert_eq!(
        scheduler.task_state(t(3)),
        TaskState::Canceled(CancelReason::ParentEnded(t(2)))
    );
    let signals: Vec<(TaskId, u32)> = scheduler
        .cancel_signals()
        .iter()
        .map(|s| (s.key.task(), s.key.number()))
        .collect();
    assert_eq!(signals, [(t(3), 1)]);
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}

#[test]
fn canceling_a_parent_before_its_children_ran_cancels_them_from_the_run_queue() {
    let mut scheduler = TestScheduler::new();
    let parent = scheduler.spawn(async_task("parent", |cx| async move {
        let a = cx.spawn(NewTask::new(sleeper(5)));
        let b = cx.spawn(NewTask::new(sleeper(5)));
        Ok(json!(cx.join_all(vec![a, b]).await.len()))
    }));
    assert!(scheduler.step(), "the parent's first poll");
    assert_eq!(scheduler.core().ready_len(), 2);
    assert_eq!(scheduler.task_state(t(2)), TaskState::Ready);

    scheduler.cancel(parent).unwrap();
    assert_eq!(scheduler.core().ready_len(), 0);
    for child in [t(2), t(3)] {
        assert_eq!(
            scheduler.task_state(child),
            TaskState::Canceled(CancelReason::ParentEnded(parent))
        );
    }
    // Their queue entries are skipped: nothing runs.
    assert_eq!(scheduler.step_until_idle(), 0);
    scheduler.run_until_quiet();
    assert_eq!(scheduler.now(), Time::ZERO);
    assert_eq!(scheduler.stats().polls, 1);
    assert!(scheduler.cancel_signals().is_empty());
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}

#[test]
fn children_spawned_in_the_poll_that_finishes_the_parent_never_start() {
    let mut scheduler = TestScheduler::new();
    let parent = scheduler.spawn(async_task("hasty", |cx| async move {
        let child = cx.spawn(NewTask::new(sleeper(5)));
        Ok(json!(child.id().get()))
    }));
    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Completed(Ok(json!(2)))
    );
    assert_eq!(scheduler.core().task_state(t(2)), None);
    assert_eq!(scheduler.core().len(), 1);
    // Its id was taken all the same: ids are never reused.
    assert_eq!(scheduler.spawn(sleeper(1)), t(3));
    assert_eq!(scheduler.stats().submitted, 2);
}

#[test]
fn a_child_that_ends_while_the_parent_awaits_something_else_is_not_lost() {
    let mut scheduler = TestScheduler::new();
    let parent = scheduler.spawn(async_task("parent", |cx| async move {
        let slow = cx.spawn(NewTask::new(sleeper(20)));
        let quick = cx.spawn(NewTask::new(sleeper(5)));
        // Awaited in spawn order: the quick one ends first, while nobody awaits it.
        let first = slow.await?;
        let first_at = cx.now().to_string();
        let second = quick.await?;
        Ok(json!([first, second, first_at, cx.now().to_string()]))
    }));
    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Completed(Ok(json!([20, 5, "0.020s", "0.020s"])))
    );
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}

// ---------------------------------------------------------------------------------
// 4. What a child inherits.
// ---------------------------------------------------------------------------------

/// `(id, type, agent, priority)` of every task in the table.
fn rows(scheduler: &TestScheduler) -> Vec<(u64, String, String, Priority)> {
    scheduler
        .core()
        .tasks()
        .map(|row| {
            (
                row.id.get(),
                row.type_name.into_owned(),
                row.agent,
                row.priority,
            )
        })
        .collect()
}

/// Waits for its held `tool:x` call, then finishes with its task id.
fn waiter(name: &'static str) -> AsyncTask {
    async_task(name, |cx| async move {
        cx.tool("x", json!(null)).await?;
        Ok(json!(cx.task_id().get()))
    })
}

#[test]
fn children_inherit_agent_and_priority_unless_given_their_own() {
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::tool("x"));
    let parent = scheduler.submit(
        NewTask::new(async_task("parent", |cx| async move {
            let plain = cx.spawn(NewTask::new(waiter("plain")));
            let low = cx.spawn(
                NewTask::new(async_task("low", |cx| async move {
                    let grandchild = cx.spawn(NewTask::new(waiter("grandchild")));
                    grandchild.await
                }))
                .priority(Priority::Low),
            );
            let other = cx.spawn(NewTask::new(waiter("other-agent")).agent("b"));
            let both = cx.spawn(
                NewTask::new(waiter("both"))
                    .agent("c")
                    .priority(Priority::Critical),
            );
            let outcomes = cx.join_all(vec![plain, low, other, both]).await;
            Ok(json!(outcomes.into_iter().collect::<Result<Vec<_>, _>>()?))
        }))
        .agent("a")
        .priority(Priority::High),
    );
    let plain_top = scheduler.spawn(waiter("top-level"));

    scheduler.step_until_idle();
    let expected = vec![
        (1, "parent".to_owned(), "a".to_owned(), Priority::High),
        (
            2,
            "top-level".to_owned(),
            "default".to_owned(),
            Priority::Normal,
        ),
        (3, "plain".to_owned(), "a".to_owned(), Priority::High),
        (4, "low".to_owned(), "a".to_owned(), Priority::Low),
        (5, "other-agent".to_owned(), "b".to_owned(), Priority::High),
        (6, "both".to_owned(), "c".to_owned(), Priority::Critical),
        (7, "grandchild".to_owned(), "a".to_owned(), Priority::Low),
    ];
    assert_eq!(rows(&scheduler), expected);
    assert_eq!((parent, plain_top), (t(1), t(2)));

    for key in held_keys(&scheduler) {
        assert_eq!(scheduler.answer(key, "go"), Delivery::Delivered);
    }
    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Completed(Ok(json!([3, 7, 5, 6])))
    );
    // Rows keep agent and priority after the tasks ended.
    assert_eq!(rows(&scheduler), expected);
    assert!(scheduler.core().tasks().all(|row| row.state.is_ok()));
}

#[test]
fn children_of_an_explicit_state_machine_inherit_too() {
    let mut scheduler = TestScheduler::new();
    let mut child = None;
    let parent = scheduler.submit(
        NewTask::new(task_fn("parent", move |cx| match child {
            None => {
                let id = cx.spawn(NewTask::new(task_fn("child", |_cx| Step::done("hi"))));
                child = Some(id);
                assert!(cx.join(id));
                Step::Wait
            }
            Some(id) => Step::Done(
                cx.take_child_result(id)
                    .unwrap_or_else(|| Err(TaskError::failed("no result"))),
            ),
        }))
        .agent("ops")
        .priority(Priority::Low),
    );
    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Completed(Ok(json!("hi")))
    );
    assert_eq!(
        rows(&scheduler),
        [
            (1, "parent".to_owned(), "ops".to_owned(), Priority::Low),
            (2, "child".to_owned(), "ops".to_owned(), Priority::Low),
        ]
    );
}

// ---------------------------------------------------------------------------------
// 5. join_any.
// ---------------------------------------------------------------------------------

#[test]
fn join_any_returns_the_first_child_and_the_other_is_canceled_with_the_parent() {
    let mut scheduler = TestScheduler::new();
    scheduler.mock_with_latency(Kind::tool("crawl"), Mock::Fixed(json!("crawled")), ms(30));
    let parent = scheduler.spawn(async_task("racer", |cx| async move {
        let slow = cx.spawn(NewTask::new(async_task("crawler", |cx| async move {
            Ok(cx.tool("crawl", json!(null)).await?)
        })));
        let quick = cx.spawn(NewTask::new(sleeper(10)));
        let Some((first, outcome)) = cx.join_any(vec![slow, quick]).await else {
            return Err(TaskError::failed("no children"));
        };
        Ok(json!({"first": first.get(), "value": outcome?, "at": cx.now().to_string()}))
    }));

    scheduler.run_until_quiet();

    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Completed(Ok(json!({"first": 3, "value": 10, "at": "0.010s"})))
    );
    assert_eq!(
        scheduler.task_state(t(3)),
        TaskState::Completed(Ok(json!(10)))
    );
    assert_eq!(
        scheduler.task_state(t(2)),
        TaskState::Canceled(CancelReason::ParentEnded(parent))
    );
    let signals: Vec<(TaskId, u32, Kind)> = scheduler
        .cancel_signals()
        .iter()
        .map(|s| (s.key.task(), s.key.number(), s.kind.clone()))
        .collect();
    assert_eq!(signals, [(t(2), 1, Kind::tool("crawl"))]);
    // The crawler's answer still came at 30 ms, and was dropped.
    assert_eq!(scheduler.now(), Time::from_duration(ms(30)));
    assert_eq!(scheduler.stats().dropped_answers, 1);
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}

#[test]
fn after_join_any_the_other_child_keeps_running_while_the_parent_lives() {
    let mut scheduler = TestScheduler::new();
    let parent = scheduler.spawn(async_task("patient", |cx| async move {
        let slow = cx.spawn(NewTask::new(sleeper(30)));
        let quick = cx.spawn(NewTask::new(sleeper(10)));
        let first = cx.join_any(vec![slow, quick]).await;
        let first = first.map(|(id, _)| id.get());
        cx.sleep(ms(50)).await;
        Ok(json!({"first": first, "at": cx.now().to_string()}))
    }));

    scheduler.run_until_quiet();

    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Completed(Ok(json!({"first": 3, "at": "0.060s"})))
    );
    assert_eq!(
        scheduler.task_state(t(2)),
        TaskState::Completed(Ok(json!(30)))
    );
    assert_eq!(
        scheduler.task_state(t(3)),
        TaskState::Completed(Ok(json!(10)))
    );
    assert_eq!(scheduler.stats().canceled, 0);
    assert_trace_continuous(&scheduler);
}

#[test]
fn join_any_of_no_children_is_none() {
    let mut scheduler = TestScheduler::new();
    let id = scheduler.spawn(async_task("alone", |cx| async move {
        Ok(json!(cx.join_any(Vec::new()).await.is_none()))
    }));
    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Ok(json!(true)))
    );
}

/// `join_any` takes the handles, so the losers cannot be awaited afterwards; a generic
/// `select` over two `ChildHandle`s hands the other one back.
#[test]
fn select_over_child_handles_gives_the_first_and_the_other_handle_to_await() {
    let mut scheduler = TestScheduler::new();
    let parent = scheduler.spawn(async_task("both", |cx| async move {
        let slow = cx.spawn(NewTask::new(sleeper(30)));
        let quick = cx.spawn(NewTask::new(sleeper(10)));
        let (first, rest) = match futures::future::select(slow, quick).await {
            futures::future::Either::Left((outcome, rest)) => (outcome?, rest),
            futures::future::Either::Right((outcome, rest)) => (outcome?, rest),
        };
        let first_at = cx.now().to_string();
        let second = rest.await?;
        Ok(json!([first, first_at, second, cx.now().to_string()]))
    }));
    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Completed(Ok(json!([10, "0.010s", 30, "0.030s"])))
    );
}

// ---------------------------------------------------------------------------------
// 6. The explicit API: spawn, join, Wait / WaitAny, take_child_result.
// ---------------------------------------------------------------------------------

/// A state-machine child: sleeps `millis`, then finishes with `millis`.
fn explicit_sleeper(millis: u64) -> NewTask {
    let mut slept = false;
    NewTask::new(task_fn("explicit-sleeper", move |cx| {
        if slept {
            return Step::done(millis);
        }
        slept = true;
        cx.sleep(ms(millis));
        Step::Wait
    }))
}

#[test]
fn explicit_spawn_join_and_wait_resume_when_the_child_ends() {
    let mut scheduler = TestScheduler::new();
    scheduler.mock_with_latency(Kind::tool("ls"), Mock::Fixed(json!(["a", "b"])), ms(5));
    let mut child = None;
    let parent = scheduler.spawn(task_fn("parent", move |cx| match child {
        None => {
            let mut asked = false;
            let id = cx.spawn(NewTask::new(task_fn("lister", move |cx| {
                if !asked {
                    asked = true;
                    cx.tool("ls", json!({}));
                    return Step::Wait;
                }
                match cx.take_answer() {
                    Some(answer) => {
                        Step::Done(answer.result.map_err(|e| e.into_task_error(answer.number)))
                    }
                    None => Step::fail("no answer"),
                }
            })));
            child = Some(id);
            assert_eq!(cx.live_children(), [id]);
            assert!(cx.join(id));
            assert!(!cx.join(cx.task_id()), "a task is not its own child");
            assert!(!cx.join(TaskId::from_raw(99)), "not a child");
            // Nothing ended yet.
            assert_eq!(cx.take_child_result(id), None);
            assert_eq!(cx.take_any_child_result(), None);
            Step::Wait
        }
        Some(id) => {
            assert!(cx.live_children().is_empty());
            let Some(outcome) = cx.take_child_result(id) else {
                return Step::fail("resumed without the child's outcome");
            };
            // Taken: gone, and no longer joinable.
            assert_eq!(cx.take_child_result(id), None);
            assert!(!cx.join(id));
            Step::Done(outcome.map(|files| json!({"child": id.get(), "files": files})))
        }
    }));

    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Waiting(WaitReason::Children(1))
    );
    assert_eq!(scheduler.task_state(parent).to_string(), "Waiting(1 child)");
    scheduler.run_until_quiet();

    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Completed(Ok(json!({"child": 2, "files": ["a", "b"]})))
    );
    assert_eq!(scheduler.stats().polls, 4);
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}

#[test]
fn explicit_wait_any_resumes_on_the_first_of_two_joined_children() {
    let mut scheduler = TestScheduler::new();
    let resumed: Arc<Mutex<Vec<(Time, TaskId, Outcome)>>> = Arc::default();
    let log = Arc::clone(&resumed);
    let mut polls = 0;
    let parent = scheduler.spawn(task_fn("parent", move |cx| {
        polls += 1;
        if polls == 1 {
            let slow = cx.spawn(explicit_sleeper(20));
            let quick = cx.spawn(explicit_sleeper(5));
            assert!(cx.join(slow) && cx.join(quick));
            return Step::WaitAny;
        }
        while let Some((id, outcome)) = cx.take_any_child_result() {
            log.lock().unwrap().push((cx.now(), id, outcome));
        }
        if cx.live_children().is_empty() {
            return Step::done(polls);
        }
        // Still joined: a plain Wait now resumes when the other child ends.
        Step::Wait
    }));

    scheduler.advance(ms(5));
    assert_eq!(
        *resumed.lock().unwrap(),
        [(Time::from_duration(ms(5)), t(3), Ok(json!(5)))]
    );
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Waiting(WaitReason::Children(1))
    );
    scheduler.run_until_quiet();
    assert_eq!(
        *resumed.lock().unwrap(),
        [
            (Time::from_duration(ms(5)), t(3), Ok(json!(5))),
            (Time::from_duration(ms(20)), t(2), Ok(json!(20))),
        ]
    );
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Completed(Ok(json!(3)))
    );
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}

#[test]
fn explicit_take_child_result_gives_errors_for_failed_panicked_and_canceled_children() {
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::tool("x"));
    type Taken = Vec<(TaskId, Option<Outcome>)>;
    let outcomes: Arc<Mutex<Taken>> = Arc::default();
    let log = Arc::clone(&outcomes);
    let mut children = Vec::new();
    let parent = scheduler.spawn(task_fn("parent", move |cx| {
        if children.is_empty() {
            children.push(cx.spawn(NewTask::new(task_fn("fails", |_cx| {
                Step::fail("bad input")
            }))));
            children.push(cx.spawn(NewTask::new(task_fn("panics", |_cx| -> Step {
                panic!("index out of range")
            }))));
            let mut asked = false;
            children.push(cx.spawn(NewTask::new(task_fn("waits", move |cx| {
                if asked {
                    return Step::done("answered");
                }
                asked = true;
                cx.tool("x", json!(null));
                Step::Wait
            }))));
            cx.join_all();
            return Step::Wait;
        }
        let mut log = log.lock().unwrap();
        for id in &children {
            log.push((*id, cx.take_child_result(*id)));
        }
        // Each outcome is taken once.
        for id in &children {
            log.push((*id, cx.take_child_result(*id)));
        }
        Step::done(children.len())
    }));

    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Waiting(WaitReason::Children(1))
    );
    scheduler.cancel(t(4)).unwrap();
    scheduler.step_until_idle();

    assert_eq!(
        *outcomes.lock().unwrap(),
        [
            (t(2), Some(Err(TaskError::failed("bad input")))),
            (
                t(3),
                Some(Err(TaskError::Panicked {
                    task: t(3),
                    message: "index out of range".into(),
                }))
            ),
            (
                t(4),
                Some(Err(TaskError::Canceled {
                    task: t(4),
                    reason: CancelReason::Requested,
                }))
            ),
            (t(2), None),
            (t(3), None),
            (t(4), None),
        ]
    );
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Completed(Ok(json!(3)))
    );
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}

#[test]
fn explicit_wait_with_a_request_and_a_child_resumes_when_both_are_done() {
    let mut scheduler = TestScheduler::new();
    scheduler.mock_with_latency(Kind::Llm, Mock::Fixed(json!("thought")), ms(10));
    let mut child = None;
    let parent = scheduler.spawn(task_fn("parent", move |cx| match child {
        None => {
            let id = cx.spawn(explicit_sleeper(25));
            child = Some(id);
            cx.join(id);
            cx.llm(json!("think"));
            Step::Wait
        }
        Some(id) => {
            let llm = cx.take_answer().map(|a| a.result);
            let slept = cx.take_child_result(id);
            Step::done(json!({
                "llm": llm.and_then(Result::ok),
                "child": slept.and_then(Result::ok),
                "at": cx.now().to_string(),
            }))
        }
    }));
    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Completed(Ok(json!({"llm": "thought", "child": 25, "at": "0.025s"})))
    );
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}

/// A child that ended before its parent joined it: `join` says yes, so `Wait` should
/// resume the parent (everything it waits for has come), as `WaitAny` and the async
/// `ChildHandle` do.
#[test]
fn explicit_join_of_a_child_that_already_ended_then_wait_resumes() {
    let mut scheduler = TestScheduler::new();
    scheduler.mock_with_latency(Kind::tool("ls"), Mock::Fixed(json!("files")), ms(5));
    let mut polls = 0;
    let mut child = None;
    let parent = scheduler.spawn(task_fn("parent", move |cx| {
        polls += 1;
        match polls {
            1 => {
                // The child ends at 0 ms; the parent, waiting only for its tool, at 5 ms.
                child = Some(cx.spawn(NewTask::new(task_fn("quick", |_cx| Step::done(7)))));
                cx.tool("ls", json!({}));
                Step::Wait
            }
            2 => {
                let Some(id) = child else {
                    return Step::fail("no child");
                };
                assert!(cx.take_answer().is_some());
                assert!(cx.live_children().is_empty());
                assert!(cx.join(id), "join says the child can be waited for");
                Step::Wait
            }
            _ => match child.and_then(|id| cx.take_child_result(id)) {
                Some(outcome) => Step::Done(outcome),
                None => Step::fail("resumed without the child's outcome"),
            },
        }
    }));
    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.task_state(t(2)),
        TaskState::Completed(Ok(json!(7)))
    );
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Completed(Ok(json!(7)))
    );
}

/// `Cx::all` promises one resume when the task waits only for the group. A child left
/// running by an earlier `join_any` is no longer awaited by anything, but it stays
/// joined, so the group is woken per answer.
#[test]
fn cx_all_after_join_any_still_resumes_once() {
    let mut scheduler = TestScheduler::new();
    scheduler.hold(Kind::tool("x"));
    let parent = scheduler.spawn(async_task("parent", |cx| async move {
        let slow = cx.spawn(NewTask::new(sleeper(1000)));
        let quick = cx.spawn(NewTask::new(sleeper(10)));
        cx.join_any(vec![slow, quick]).await;
        let answers = cx
            .all(vec![cx.tool("x", json!(1)), cx.tool("x", json!(2))])
            .await;
        Ok(json!(answers.into_iter().collect::<Result<Vec<_>, _>>()?))
    }));
    scheduler.advance(ms(10));
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Waiting(WaitReason::Requests(2))
    );
    let polls_before = scheduler.stats().polls;
    let keys = held_keys(&scheduler);
    assert_eq!(scheduler.answer(keys[1], "two"), Delivery::Delivered);
    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Waiting(WaitReason::Request(Kind::tool("x"))),
    );
    assert_eq!(
        scheduler.stats().polls,
        polls_before,
        "the first answer of the group resumed the task"
    );
    assert_eq!(scheduler.answer(keys[0], "one"), Delivery::Delivered);
    scheduler.step_until_idle();
    assert_eq!(
        scheduler.task_state(parent),
        TaskState::Completed(Ok(json!(["one", "two"])))
    );
}
