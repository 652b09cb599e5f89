//! A server that goes on from a journal (a store's, here in memory) after the process
//! was down for five minutes (less than the ten minutes an ended
//! task is kept), by a wall clock the test moves: a task submitted before keeps
//! its wall-clock submission, its age and total count the five minutes it was down (not 0,
//! not from the restart), and a deadline that passed while it was down reads in
//! wall-clock time and from the submission.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use spool_core::{MemoryJournal, NewTask, TaskId, TaskState};
use spool_http::{AppState, Server};
use spool_runtime::Runtime;

use crate::support::{Script, TOKEN, registry, request};

/// The system's wall clock moved `offset` seconds ahead.
fn moved(offset: &Arc<AtomicI64>) -> impl Fn() -> Timestamp + Send + Sync + 'static {
    let offset = Arc::clone(offset);
    move || {
        let now = Timestamp::now();
        now.checked_add(SignedDuration::from_secs(offset.load(Ordering::SeqCst)))
            .unwrap_or(now)
    }
}

fn script(input: Value) -> NewTask {
    NewTask::new(serde_json::from_value::<Script>(input).unwrap())
}

/// Parses an RFC 3339 instant the server gave.
fn instant(value: &Value) -> Timestamp {
    value.as_str().unwrap().parse().unwrap()
}

#[test]
fn a_task_restored_after_the_server_was_down_keeps_its_submission_and_age() {
    let offset = Arc::new(AtomicI64::new(0));
    let journal = MemoryJournal::new();
    // The first process: a task that ends at once, one that sleeps two hours, and one
    // that sleeps half an hour with a deadline two minutes after its submission.
    let mut first = Runtime::builder()
        .registry(registry())
        .wall_clock(moved(&offset))
        .journal(journal.clone())
        .try_build()
        .unwrap();
    let tasks = [
        script(json!({"steps": 0})),
        script(json!({"steps": 0, "sleep_ms": 7_200_000})),
        script(json!({"steps": 0, "sleep_ms": 1_800_000})).deadline(Duration::from_secs(120)),
    ];
    let ids: Vec<TaskId> = tasks
        .into_iter()
        .map(|task| first.submit(task).unwrap().id)
        .collect();
    let handle = first.handle();
    let loop_thread = thread::spawn(move || {
        first.run();
        first
    });
    // Until the first has ended and the two others sleep.
    let deadline = Instant::now() + Duration::from_secs(20);
    let submitted: Vec<Timestamp> = loop {
        let ids = ids.clone();
        let read = handle
            .query(move |rt| {
                let asleep = ids[1..].iter().all(|id| {
                    matches!(
                        rt.task_state(*id),
                        Some(TaskState::Waiting(spool_core::WaitReason::Timer))
                    )
                });
                let ended = rt.task_state(ids[0]).is_some_and(|s| s.is_terminal());
                (asleep && ended).then(|| {
                    ids.iter()
                        .map(|id| {
                            let info = rt.scheduler().task(*id).unwrap();
                            rt.wall_time(info.created_at).unwrap()
                        })
                        .collect()
                })
            })
            .unwrap();
        if let Some(submitted) = read {
            break submitted;
        }
        assert!(Instant::now() < deadline, "the tasks did not settle");
        thread::sleep(Duration::from_millis(5));
    };
    handle.shutdown().unwrap();
    drop(loop_thread.join().unwrap());

    // The second process, five minutes later by the wall clock.
    offset.store(300, Ordering::SeqCst);
    let recorded = journal.journal().unwrap();
    let builder = Runtime::builder()
        .wall_clock(moved(&offset))
        .recover(&recorded, &registry())
        .unwrap();
    let (builder, views) = spool_http::publish_views(builder, Duration::from_millis(5), 1024);
    let mut second = builder.try_build().unwrap();
    let handle = second.handle();
    let state = AppState::new(handle.clone(), registry(), views, TOKEN).unwrap();
    let server = Server::builder()
        .addr(([127, 0, 0, 1], 0).into())
        .start(state)
        .unwrap();
    let base = format!("http://{}", server.addr());
    let loop_thread = thread::spawn(move || {
        second.run();
    });
    let get = |id: TaskId| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let answer = request(
                "GET",
                &format!("{base}/v1/tasks/{id}"),
                Some(TOKEN),
                &[],
                None,
            );
            // The deadline that passed while the server was down fails the third.
            if answer.status == 200 && (id != ids[2] || answer.json["state"] == "failed") {
                return answer.json;
            }
            assert!(Instant::now() < deadline, "no answer for {id}: {answer:?}");
            thread::sleep(Duration::from_millis(5));
        }
    };
    let down = 300_000;
    for (i, id) in ids.iter().enumerate() {
        let task = get(*id);
        // The submission's instant is the first process's, to the millisecond.
        let gap = instant(&task["submitted_at"]).duration_since(submitted[i]);
        assert!(gap.abs() <= SignedDuration::from_millis(2), "{task}");
        let age = task["age_ms"].as_u64().unwrap();
        assert!((down..down + 60_000).contains(&age), "{task}");
        match i {
            // Ended before the restart: when it ended is not kept.
            0 => assert_eq!(task["total_ms"], Value::Null, "{task}"),
            // Still asleep: its whole life so far, the five minutes down included.
            1 => assert_eq!(task["total_ms"], task["age_ms"], "{task}"),
            // Failed at the restart, its deadline long past: it lived from its
            // submission to the restart.
            _ => {
                let total = task["total_ms"].as_u64().unwrap();
                assert!((down..down + 60_000).contains(&total), "{task}");
                let due = submitted[2]
                    .checked_add(SignedDuration::from_secs(120))
                    .unwrap()
                    .round(jiff::Unit::Second)
                    .unwrap();
                assert_eq!(
                    task["error"],
                    format!(
                        "task {id} missed its deadline ({due}, 120 s after it was submitted) \
                         while running"
                    ),
                    "{task}"
                );
            }
        }
    }
    handle.shutdown().unwrap();
    server.shutdown();
    loop_thread.join().unwrap();
}
