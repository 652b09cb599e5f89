//! An async agent with children on the threaded runtime: an LLM executor, a pool of
//! tool workers, a wall-clock sleep, and a confirmation answered from another thread.

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool::{
    AsyncTask, Kind, NewTask, Priority, Runtime, TaskId, TaskState, Time, WaitReason, async_task,
    from_fn,
};

use crate::support::{LIMIT, ShutdownOnDrop, wait_until, within};

/// Reads `path` with `tool:read`, then counts its words with `tool:wc`, both at once.
fn reader(path: String) -> AsyncTask {
    async_task("reader", move |cx| async move {
        let answers = cx
            .all(vec![
                cx.tool("read", json!({"path": path})),
                cx.tool("wc", json!({"path": path})),
            ])
            .await;
        let mut answers = answers.into_iter();
        let text = answers.next().unwrap_or(Ok(Value::Null))?;
        let words = answers.next().unwrap_or(Ok(Value::Null))?;
        Ok(json!({"path": path, "text": text, "words": words}))
    })
}

#[test]
fn async_agent_with_children_sleep_and_a_confirmation_on_the_threaded_runtime() {
    let prompts: Arc<Mutex<Vec<Value>>> = Arc::default();
    let log = Arc::clone(&prompts);
    let mut runtime = Runtime::builder()
        .executor(
            Kind::Llm,
            from_fn(move |out| {
                let payload = out.request.payload.value().clone();
                log.lock().unwrap().push(payload.clone());
                match payload["prompt"].as_str() {
                    Some("plan") => Ok(json!({"files": ["a.txt", "b.txt", "c.txt"]})),
                    _ => Ok(json!(format!(
                        "{} files summarized",
                        payload["files"].as_array().map_or(0, Vec::len)
                    ))),
                }
            }),
        )
        .pool(Kind::tool("read"), 3, || {
            from_fn(|out| Ok(json!(format!("text of {}", out.request.payload["path"]))))
        })
        .executor(
            Kind::tool("wc"),
            from_fn(|out| {
                Ok(json!(
                    out.request.payload["path"].as_str().map_or(0, str::len)
                ))
            }),
        )
        .build();

    let parent = runtime
        .submit(
            NewTask::new(async_task("planner", |cx| async move {
                let plan = cx.llm(json!({"prompt": "plan"})).await?;
                let files: Vec<String> = plan["files"]
                    .as_array()
                    .map(|files| {
                        files
                            .iter()
                            .filter_map(|f| f.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                let children = files
                    .into_iter()
                    .map(|path| cx.spawn(NewTask::new(reader(path))))
                    .collect();
                let files = cx
                    .join_all(children)
                    .await
                    .into_iter()
                    .collect::<Result<Vec<_>, _>>()?;

                let before = cx.now();
                cx.sleep(Duration::from_millis(20)).await;
                let slept = cx.now() - before;

                let approved = cx
                    .confirm(json!({"question": "publish?", "files": files.len()}))
                    .await?;
                let summary = cx
                    .llm(json!({"prompt": "summarize", "files": files, "approved": approved}))
                    .await?;
                Ok(json!({
                    "files": files,
                    "approved": approved,
                    "summary": summary,
                    "slept_ms": slept.as_millis() as u64,
                }))
            }))
            .agent("rt")
            .priority(Priority::High),
        )
        .unwrap()
        .id;
    let handle = runtime.handle();

    let started = Instant::now();
    let (runtime, final_state, asked_since) = within(LIMIT, "the async agent's run", move || {
        thread::scope(|scope| {
            let human = scope.spawn(|| {
                let _shutdown = ShutdownOnDrop(handle.clone());
                let pending = wait_until("the confirmation", || {
                    handle.pending_confirmations().unwrap().first().cloned()
                });
                assert_eq!(
                    pending.question,
                    json!({"question": "publish?", "files": 3})
                );
                assert_eq!((pending.key.task(), pending.key.number()), (parent, 2));
                assert_eq!(
                    handle.query(move |rt| rt.task_state(parent)).unwrap(),
                    Some(TaskState::Waiting(WaitReason::Request(Kind::Confirm)))
                );
                handle.answer(pending.key, json!(true)).unwrap();
                let state = wait_until("the agent to finish", || {
                    handle
                        .query(move |rt| rt.task_state(parent))
                        .unwrap()
                        .filter(TaskState::is_terminal)
                });
                (state, pending.since)
            });
            runtime.run();
            let (state, since) = human.join().unwrap();
            (runtime, state, since)
        })
    });
    let wall = started.elapsed();

    let files = json!([
        {"path": "a.txt", "text": "text of \"a.txt\"", "words": 5},
        {"path": "b.txt", "text": "text of \"b.txt\"", "words": 5},
        {"path": "c.txt", "text": "text of \"c.txt\"", "words": 5},
    ]);
    let Some(TaskState::Completed(Ok(value))) = runtime.task_state(parent) else {
        panic!("not completed: {:?}", runtime.task_state(parent));
    };
    assert_eq!(final_state, TaskState::Completed(Ok(value.clone())));
    let slept = value["slept_ms"].as_u64().unwrap();
    assert!(
        (20..5000).contains(&slept),
        "the task's clock says it slept {slept} ms"
    );
    assert_eq!(
        value,
        json!({
            "files": files,
            "approved": true,
            "summary": "3 files summarized",
            "slept_ms": slept,
        })
    );
    assert!(wall >= Duration::from_millis(20), "finished after {wall:?}");
    assert!(
        asked_since >= Time::from_duration(Duration::from_millis(20)),
        "the confirmation was asked at {asked_since}, before the sleep ended"
    );
    assert_eq!(
        *prompts.lock().unwrap(),
        [
            json!({"prompt": "plan"}),
            json!({"prompt": "summarize", "files": files, "approved": true}),
        ]
    );

    // The children: done, with the parent's agent and priority.
    let rows: Vec<(TaskId, String, String, Priority, TaskState)> = runtime
        .scheduler()
        .tasks()
        .map(|row| {
            let type_name = row.type_name.into_owned();
            (row.id, type_name, row.agent, row.priority, row.state)
        })
        .collect();
    let child = |n: u64, i: usize| {
        (
            TaskId::from_raw(n),
            "reader".to_owned(),
            "rt".to_owned(),
            Priority::High,
            TaskState::Completed(Ok(files[i].clone())),
        )
    };
    assert_eq!(
        rows,
        [
            (
                parent,
                "planner".to_owned(),
                "rt".to_owned(),
                Priority::High,
                TaskState::Completed(Ok(value.clone())),
            ),
            child(2, 0),
            child(3, 1),
            child(4, 2),
        ]
    );
    let stats = runtime.scheduler().stats();
    // 2 LLM calls, a confirmation, and a read and a wc per child.
    assert_eq!((stats.requests, stats.answers), (9, 9));
    assert_eq!((stats.completed, stats.failed, stats.canceled), (4, 0, 0));
    assert_eq!(runtime.scheduler().in_flight_len(), 0);
    assert!(runtime.pending_confirmations().is_empty());
}

#[test]
fn canceling_an_async_parent_from_a_handle_cancels_its_children_on_the_runtime() {
    let mut runtime = Runtime::builder()
        .executor(Kind::tool("never"), spool::from_fn(|_| Ok(json!("unused"))))
        .build();
    let parent = runtime
        .submit(NewTask::new(async_task("parent", |cx| async move {
            let child = cx.spawn(NewTask::new(async_task("child", |cx| async move {
                // A confirmation nobody answers keeps the child waiting.
                Ok(cx.confirm(json!("child asks")).await?)
            })));
            child.await
        })))
        .unwrap()
        .id;
    let handle = runtime.handle();

    let runtime = within(LIMIT, "cancel through the handle", move || {
        thread::scope(|scope| {
            let canceler = scope.spawn(|| {
                let _shutdown = ShutdownOnDrop(handle.clone());
                let pending = wait_until("the child's confirmation", || {
                    handle.pending_confirmations().unwrap().first().cloned()
                });
                assert_eq!(pending.key.task(), TaskId::from_raw(2));
                handle.cancel(parent).unwrap();
                wait_until("the confirmation to go", || {
                    handle
                        .pending_confirmations()
                        .unwrap()
                        .is_empty()
                        .then_some(())
                });
            });
            runtime.run();
            canceler.join().unwrap();
            runtime
        })
    });

    assert_eq!(
        runtime.task_state(parent),
        Some(TaskState::Canceled(spool::CancelReason::Requested))
    );
    assert_eq!(
        runtime.task_state(TaskId::from_raw(2)),
        Some(TaskState::Canceled(spool::CancelReason::ParentEnded(
            parent
        )))
    );
    assert_eq!(runtime.scheduler().in_flight_len(), 0);
}
