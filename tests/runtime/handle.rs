//! The handle: submit, cancel, query and shut down from other threads while the loop runs.

use std::sync::{Arc, Mutex};
use std::thread;

use serde_json::json;
use spool::{
    CancelError, CancelReason, CancelSignal, Executor, Kind, NewTask, OutboundRequest, Replies,
    RequestError, Response, Runtime, RuntimeError, Step, TaskId, TaskState, WaitReason, from_fn,
    task_fn,
};

use crate::support::{LIMIT, ShutdownOnDrop, wait_until, within};

/// Keeps every request and never answers it, except with `Canceled` when told to stop.
#[derive(Clone, Default)]
struct Holding {
    received: Arc<Mutex<Vec<OutboundRequest>>>,
    canceled: Arc<Mutex<Vec<CancelSignal>>>,
}

impl Executor for Holding {
    fn execute(&mut self, request: OutboundRequest, _replies: &mut Replies<'_>) {
        self.received.lock().unwrap().push(request);
    }

    fn cancel(&mut self, signal: CancelSignal, replies: &mut Replies<'_>) {
        replies.send(Response::err(signal.key, RequestError::Canceled));
        self.canceled.lock().unwrap().push(signal);
    }
}

/// Makes one request of `kind` and finishes with its answer.
fn ask(kind: Kind, payload: serde_json::Value) -> NewTask {
    let mut asked = false;
    NewTask::new(task_fn("ask", move |cx| {
        if !asked {
            asked = true;
            cx.request(spool::Request::new(kind.clone(), payload.clone()));
            return Step::Wait;
        }
        Step::Done(
            cx.take_answer()
                .unwrap()
                .result
                .map_err(|e| e.into_task_error(1)),
        )
    }))
}

fn state(handle: &spool::RuntimeHandle, id: TaskId) -> Option<TaskState> {
    handle.query(move |rt| rt.task_state(id)).unwrap()
}

#[test]
fn submit_and_cancel_from_another_thread_while_run_runs() {
    let holding = Holding::default();
    let mut runtime = Runtime::builder()
        .executor(Kind::tool("slow"), holding.clone())
        .executor(
            Kind::Llm,
            from_fn(|out| Ok(out.request.payload.value().clone())),
        )
        .build();
    let handle = runtime.handle();
    let probe = holding.clone();

    let (runtime, (slow, quick, key)) = within(LIMIT, "run with a handle", move || {
        thread::scope(|scope| {
            let embedder = scope.spawn(|| {
                let _shutdown = ShutdownOnDrop(handle.clone());
                let slow = handle
                    .submit(ask(Kind::tool("slow"), json!("work")))
                    .unwrap()
                    .id;
                let received = &probe.received;
                let request = wait_until("the slow request", || {
                    received.lock().unwrap().first().cloned()
                });
                assert_eq!((request.key.task(), request.key.number()), (slow, 1));
                assert_eq!(request.request.kind, Kind::tool("slow"));
                assert_eq!(request.request.payload, json!("work"));
                assert_eq!(
                    state(&handle, slow),
                    Some(TaskState::Waiting(WaitReason::Request(Kind::tool("slow"))))
                );

                // The loop goes on serving others while one request is held.
                let quick = handle.submit(ask(Kind::Llm, json!("quick"))).unwrap().id;
                let done = wait_until("the quick task", || {
                    state(&handle, quick).filter(TaskState::is_terminal)
                });
                assert_eq!(done, TaskState::Completed(Ok(json!("quick"))));

                handle.cancel(slow).unwrap();
                let canceled = &probe.canceled;
                wait_until("the cancel signal", || {
                    (!canceled.lock().unwrap().is_empty()).then_some(())
                });
                assert_eq!(
                    state(&handle, slow),
                    Some(TaskState::Canceled(CancelReason::Requested))
                );
                // The executor's answer to the canceled request arrives and is dropped.
                wait_until("the dropped answer", || {
                    (handle.stats().unwrap().dropped_answers == 1).then_some(())
                });

                assert_eq!(
                    handle.cancel(slow),
                    Err(RuntimeError::Cancel(CancelError::AlreadyEnded {
                        id: slow,
                        state: TaskState::Canceled(CancelReason::Requested),
                    }))
                );
                let nobody = TaskId::from_raw(999);
                assert_eq!(
                    handle.cancel(nobody),
                    Err(RuntimeError::Cancel(CancelError::UnknownTask(nobody)))
                );
                (slow, quick, request.key)
            });
            runtime.run();
            let ids = embedder.join().unwrap();
            (runtime, ids)
        })
    });

    assert_eq!(
        *holding.canceled.lock().unwrap(),
        [CancelSignal {
            key,
            kind: Kind::tool("slow")
        }]
    );
    assert_eq!(holding.received.lock().unwrap().len(), 1);
    assert_eq!(
        runtime.task_state(slow),
        Some(TaskState::Canceled(CancelReason::Requested))
    );
    assert_eq!(
        runtime.task_state(quick),
        Some(TaskState::Completed(Ok(json!("quick"))))
    );
    let stats = runtime.scheduler().stats();
    assert_eq!(
        (stats.submitted, stats.completed, stats.canceled),
        (2, 1, 1)
    );
    assert_eq!((stats.answers, stats.dropped_answers), (1, 1));
    assert_eq!(runtime.scheduler().in_flight_len(), 0);
}

#[test]
fn handle_calls_after_the_runtime_is_dropped_say_gone() {
    let runtime = Runtime::builder().build();
    let handle = runtime.handle();
    drop(runtime);
    assert_eq!(handle.shutdown(), Err(RuntimeError::Gone));
    assert_eq!(
        handle.submit(ask(Kind::Llm, json!(1))).map(|s| s.id),
        Err(RuntimeError::Gone)
    );
    assert_eq!(handle.cancel(TaskId::from_raw(1)), Err(RuntimeError::Gone));
    assert_eq!(handle.stats().map(|s| s.submitted), Err(RuntimeError::Gone));
    assert_eq!(
        RuntimeError::Gone.to_string(),
        "the runtime is gone (dropped or its loop thread ended)"
    );
}

/// A query sent after the loop's last turn waits in the runtime's inbox: it is answered
/// at the next run, or says `Gone` once the runtime is dropped, never hangs for ever.
/// (`spool run` once joined a thread blocked in such a query before dropping its
/// runtime, and hung on SIGTERM.)
#[test]
fn a_query_left_after_the_last_run_says_gone_when_the_runtime_is_dropped() {
    let mut runtime = Runtime::builder().build();
    let handle = runtime.handle();
    runtime.run_until_idle();
    let (sent, was_sent) = std::sync::mpsc::channel();
    let asking = thread::spawn(move || {
        let _ = sent.send(());
        handle.stats().map(|s| s.submitted)
    });
    was_sent.recv().unwrap();
    drop(runtime);
    assert_eq!(asking.join().unwrap(), Err(RuntimeError::Gone));
}

/// Bug: `run()` clears the shutdown flag when it starts, `run_until_idle()` does not,
/// so after a `run()` ended by `shutdown()` every `run_until_idle()` stops after one
/// turn of the loop: here the task's request goes out but its answer is never taken.
#[test]
fn run_until_idle_after_a_shut_down_run_still_runs_to_idle() {
    let mut runtime = Runtime::builder()
        .executor(
            Kind::Llm,
            from_fn(|out| Ok(out.request.payload.value().clone())),
        )
        .build();
    runtime.handle().shutdown().unwrap();
    let runtime = within(LIMIT, "run, shut down", move || {
        runtime.run();
        runtime
    });

    let mut runtime = runtime;
    let id = runtime.submit(ask(Kind::Llm, json!("after"))).unwrap().id;
    let runtime = within(LIMIT, "run_until_idle", move || {
        runtime.run_until_idle();
        runtime
    });
    assert_eq!(
        runtime.task_state(id),
        Some(TaskState::Completed(Ok(json!("after"))))
    );
}
