//! Async tasks in snapshots: made again from their constructor and replayed against
//! what they received; a changed constructor is caught as nondeterminism.

use std::time::Duration;

use serde_json::{Value, json};
use spool::{
    AsyncTask, Cx, Kind, NewTask, Outcome, RestoreError, Scheduler, TaskRegistry, TaskState,
    TestScheduler,
};

/// Reads a file, asks the LLM three times with a growing conversation (sleeping a
/// second between turns), fans out to two tools, spawns a child, and answers with a
/// summary of it all.
async fn researcher(cx: Cx, input: Value) -> Outcome {
    let notes = cx.tool("read_file", input.clone()).await?;
    let mut conversation = vec![notes];
    for turn in 0..3 {
        let reply = cx
            .llm(json!({"turn": turn, "conversation": conversation}))
            .await?;
        conversation.push(reply);
        cx.sleep(Duration::from_secs(1)).await;
    }
    let both = cx
        .all(vec![
            cx.tool("search", json!("a")),
            cx.tool("search", json!("b")),
        ])
        .await;
    let child = cx.spawn(NewTask::new(AsyncTask::replayable(
        "helper",
        json!("child input"),
        helper,
    )));
    let from_child = child.await?;
    Ok(json!({
        "conversation": conversation,
        "searches": both.into_iter().map(|r| r.unwrap_or(Value::Null)).collect::<Vec<_>>(),
        "child": from_child,
    }))
}

async fn helper(cx: Cx, input: Value) -> Outcome {
    Ok(cx.llm(json!({"helper": input})).await?)
}

/// The same as `researcher`, but its second LLM turn asks something else.
async fn changed_researcher(cx: Cx, input: Value) -> Outcome {
    let notes = cx.tool("read_file", input.clone()).await?;
    let first = cx
        .llm(json!({"turn": 0, "conversation": [notes.clone()]}))
        .await?;
    cx.sleep(Duration::from_secs(1)).await;
    let second = cx
        .llm(json!({"turn": 1, "a different question": true}))
        .await?;
    Ok(json!([notes, first, second]))
}

fn registry() -> TaskRegistry {
    TaskRegistry::new()
        .with_async("researcher", researcher)
        .with_async("helper", helper)
}

fn mocked(mut ts: TestScheduler) -> TestScheduler {
    ts.inject_mock_tool("read_file", json!("the notes"));
    ts.inject_mock_tool("search", json!("a hit"));
    let mut n = 0;
    ts.mock_llm_fn(move |request| {
        n += 1;
        Ok(json!(format!("reply {n} to {}", request.request.payload)))
    });
    ts
}

fn start() -> (TestScheduler, spool::TaskId) {
    let mut ts = mocked(TestScheduler::new());
    let id = ts.spawn(AsyncTask::replayable(
        "researcher",
        json!({"path": "n.txt"}),
        researcher,
    ));
    (ts, id)
}

/// Snapshotted in the middle of its run, restored (its future made again and replayed),
/// the async task goes on to the same result, with the same trace, as straight through.
#[test]
fn an_async_task_restored_mid_run_ends_as_it_would_have() {
    let (mut straight, id) = start();
    straight.run_until_quiet();
    let expected = straight.task_state(id);
    assert!(expected.is_ok(), "{expected}");

    for stop_after in [1, 2, 3] {
        let (mut ts, id) = start();
        ts.step_until_idle();
        ts.advance(Duration::from_secs(stop_after));
        let snapshot = ts.snapshot().unwrap();
        let bytes = snapshot.encode().unwrap();
        let decoded = spool::Snapshot::decode(&bytes).unwrap();
        // The restored copy replaces the core; the mocks stay (the LLM mock's counter
        // too, so answers go on numbering as in the straight run).
        *ts.core_mut() = Scheduler::restore(&decoded, &registry()).unwrap();
        ts.core_mut().record_trace(true);
        ts.run_until_quiet();
        assert_eq!(ts.task_state(id), expected, "restored after {stop_after}s");
        assert_eq!(
            ts.core().snapshot().unwrap().encode().unwrap(),
            straight.core().snapshot().unwrap().encode().unwrap(),
            "the same final state after {stop_after}s"
        );
    }
}

/// Restored against a constructor that asks something else at its second LLM turn,
/// the restore fails with `Nondeterminism`, naming the task, the poll, and both
/// requests side by side.
#[test]
fn a_changed_async_task_fails_to_restore_with_both_requests_shown() {
    let (mut ts, id) = start();
    ts.step_until_idle();
    // At 1.5 s it has asked its second LLM question and sleeps after it.
    ts.advance(Duration::from_millis(1500));
    let snapshot = ts.snapshot().unwrap();
    let changed = TaskRegistry::new()
        .with_async("researcher", changed_researcher)
        .with_async("helper", helper);
    let error = Scheduler::restore(&snapshot, &changed).unwrap_err();
    let RestoreError::Nondeterminism(n) = &error else {
        panic!("not nondeterminism: {error}");
    };
    assert_eq!(n.task, id);
    assert_eq!(n.recorded.len(), 1);
    assert_eq!(n.got.len(), 1);
    assert!(
        n.recorded[0].starts_with("request 3 llm {\"conversation\":"),
        "{}",
        n.recorded[0]
    );
    assert!(
        n.got[0].starts_with("request 3 llm {\"a different question\":true"),
        "{}",
        n.got[0]
    );
    let text = error.to_string();
    assert!(
        text.contains(&format!("task {id} does not replay: at poll {}", n.step)),
        "{text}"
    );
    assert!(text.contains("recorded: request 3 llm"), "{text}");
    assert!(text.contains("now:      request 3 llm"), "{text}");
}

/// An async task made with `async_task` cannot be saved: the snapshot says which and
/// how to fix it.
#[test]
fn a_plain_async_task_cannot_be_snapshotted() {
    let mut ts = mocked(TestScheduler::new());
    let id = ts.spawn(spool::async_task("plain", |cx| async move {
        Ok(cx.llm(json!("q")).await?)
    }));
    ts.hold(Kind::Llm);
    ts.step_until_idle();
    let error = ts.snapshot().unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "task {id} (type `plain`) cannot be saved: async task `plain` was made with \
             `async_task`; make it with `AsyncTask::replayable` to save it"
        )
    );
    assert!(matches!(ts.task_state(id), TaskState::Waiting(_)));
}

/// A graph of async tasks (a parent mid-conversation with a child) snapshots, restores
/// (replaying both futures) and snapshots again to the very same bytes.
#[test]
fn async_tasks_round_trip_to_identical_bytes() {
    let (mut ts, _) = start();
    ts.hold(Kind::Llm);
    ts.step_until_idle();
    let bytes = ts.snapshot().unwrap().encode().unwrap();
    let restored =
        Scheduler::restore(&spool::Snapshot::decode(&bytes).unwrap(), &registry()).unwrap();
    assert_eq!(restored.snapshot().unwrap().encode().unwrap(), bytes);
}

/// The threaded runtime restores a snapshot taken under `TestScheduler` and goes on:
/// the request that was out is sent again with its key, answered by a real executor,
/// and the async task finishes.
#[test]
fn the_runtime_goes_on_from_a_snapshot() {
    let mut ts = TestScheduler::new();
    ts.hold(Kind::Llm);
    let id = ts.spawn(AsyncTask::replayable(
        "helper",
        json!("from a snapshot"),
        helper,
    ));
    ts.step_until_idle();
    let held = ts.held_requests()[0].request.key;
    let snapshot = ts.snapshot().unwrap();
    let mut runtime = spool::Runtime::builder()
        .restore(&snapshot, &registry())
        .unwrap()
        .executor(
            Kind::Llm,
            spool::from_fn(move |request| {
                assert_eq!(request.key, held, "sent again with the same key");
                Ok(json!("answered after the restore"))
            }),
        )
        .build();
    runtime.run_until_idle();
    assert_eq!(
        runtime.task_state(id),
        Some(TaskState::Completed(Ok(json!(
            "answered after the restore"
        ))))
    );
}
