//! Confirmations: a task asks a human; the embedder answers through the handle.

use std::thread;

use serde_json::{Value, json};
use spool::{
    CancelReason, Kind, NewTask, Runtime, Step, TaskId, TaskState, WaitReason, from_fn, task_fn,
};

use crate::support::{LIMIT, ShutdownOnDrop, wait_until, within};

/// Asks `deploy?` and finishes with `deployed` or `skipped`.
fn deployer() -> impl spool::AgentTask {
    let mut asked = false;
    task_fn("deployer", move |cx| {
        if !asked {
            asked = true;
            cx.confirm(json!("deploy?"));
            return Step::Wait;
        }
        match cx.take_answer().map(|a| a.result) {
            Some(Ok(Value::Bool(true))) => Step::done("deployed"),
            Some(Ok(Value::Bool(false))) => Step::done("skipped"),
            other => Step::fail(format!("unexpected answer {other:?}")),
        }
    })
}

#[test]
fn confirmation_answered_from_another_thread_while_run_runs() {
    let mut runtime = Runtime::builder().build();
    let id = runtime.submit(NewTask::new(deployer())).unwrap().id;
    let handle = runtime.handle();

    let (runtime, final_state) = within(LIMIT, "run with a confirmation", move || {
        thread::scope(|scope| {
            let human = scope.spawn(|| {
                let _shutdown = ShutdownOnDrop(handle.clone());
                let pending = wait_until("the confirmation", || {
                    handle.pending_confirmations().unwrap().first().cloned()
                });
                assert_eq!(pending.question, json!("deploy?"));
                assert_eq!((pending.key.task(), pending.key.number()), (id, 1));
                assert_eq!(
                    handle.query(move |rt| rt.task_state(id)).unwrap(),
                    Some(TaskState::Waiting(WaitReason::Request(Kind::Confirm)))
                );
                handle.answer(pending.key, json!(true)).unwrap();
                wait_until("the task to finish", || {
                    handle
                        .query(move |rt| rt.task_state(id))
                        .unwrap()
                        .filter(TaskState::is_terminal)
                })
            });
            runtime.run();
            let state = human.join().unwrap();
            (runtime, state)
        })
    });

    assert_eq!(final_state, TaskState::Completed(Ok(json!("deployed"))));
    assert_eq!(
        runtime.task_state(id),
        Some(TaskState::Completed(Ok(json!("deployed"))))
    );
    assert!(runtime.pending_confirmations().is_empty());
    assert_eq!(runtime.scheduler().in_flight_len(), 0);
}

#[test]
fn run_until_idle_returns_with_only_confirmations_pending() {
    let mut runtime = Runtime::builder()
        .executor(Kind::Llm, from_fn(|_| Ok(json!("ok"))))
        .build();
    let busy = runtime
        .submit(NewTask::new(crate::support::ask_once(
            "busy",
            spool::Request::llm(json!(null)),
        )))
        .unwrap()
        .id;
    let deploy = runtime.submit(NewTask::new(deployer())).unwrap().id;
    let canceled = runtime.submit(NewTask::new(deployer())).unwrap().id;

    let mut runtime = within(LIMIT, "run_until_idle", move || {
        runtime.run_until_idle();
        runtime
    });
    assert_eq!(
        runtime.task_state(busy),
        Some(TaskState::Completed(Ok(json!("ok"))))
    );
    let waiting = Some(TaskState::Waiting(WaitReason::Request(Kind::Confirm)));
    assert_eq!(runtime.task_state(deploy), waiting);
    assert_eq!(runtime.task_state(canceled), waiting);
    let pending: Vec<(TaskId, u32)> = runtime
        .pending_confirmations()
        .iter()
        .map(|p| (p.key.task(), p.key.number()))
        .collect();
    assert_eq!(pending, [(deploy, 1), (canceled, 1)]);
    let deploy_key = runtime.pending_confirmations()[0].key;

    // Canceling a task takes its question off the list.
    runtime.cancel(canceled).unwrap();
    assert_eq!(runtime.pending_confirmations().len(), 1);
    assert_eq!(runtime.pending_confirmations()[0].key, deploy_key);

    runtime.handle().answer(deploy_key, json!(false)).unwrap();
    let runtime = within(LIMIT, "run_until_idle", move || {
        runtime.run_until_idle();
        runtime
    });
    assert_eq!(
        runtime.task_state(deploy),
        Some(TaskState::Completed(Ok(json!("skipped"))))
    );
    assert_eq!(
        runtime.task_state(canceled),
        Some(TaskState::Canceled(CancelReason::Requested))
    );
    assert!(runtime.pending_confirmations().is_empty());
}
