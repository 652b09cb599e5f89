//! Timers on the wall clock.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use spool::{NewTask, Runtime, Step, TaskState, task_fn};

use crate::support::{LIMIT, within};

#[test]
fn sleep_lasts_at_least_its_duration() {
    let mut runtime = Runtime::builder().build();
    let mut slept_at = None;
    let id = runtime
        .submit(NewTask::new(task_fn("sleeper", move |cx| match slept_at {
            None => {
                slept_at = Some(cx.now());
                cx.sleep(Duration::from_millis(50));
                Step::Wait
            }
            Some(at) => Step::done(json!({
                "fired": cx.take_timer_fired(),
                "slept_ms": (cx.now() - at).as_millis() as u64,
            })),
        })))
        .unwrap()
        .id;

    let started = Instant::now();
    let runtime = within(LIMIT, "run_until_idle", move || {
        runtime.run_until_idle();
        runtime
    });
    let wall = started.elapsed();

    assert!(wall >= Duration::from_millis(50), "finished after {wall:?}");
    assert!(wall < Duration::from_secs(5), "finished after {wall:?}");
    let Some(TaskState::Completed(Ok(value))) = runtime.task_state(id) else {
        panic!("not completed: {:?}", runtime.task_state(id));
    };
    assert_eq!(value["fired"], json!(true));
    let slept = value["slept_ms"].as_u64().unwrap();
    assert!(
        (50..5000).contains(&slept),
        "the task's clock says it slept {slept} ms"
    );
}

#[test]
fn timers_fire_in_deadline_order() {
    let mut runtime = Runtime::builder().build();
    let woke: Arc<Mutex<Vec<u64>>> = Arc::default();
    for ms in [30, 10, 20] {
        let woke = Arc::clone(&woke);
        let mut slept = false;
        let task = task_fn("sleeper", move |cx| {
            if slept {
                woke.lock().unwrap().push(ms);
                return Step::done(ms);
            }
            slept = true;
            cx.sleep(Duration::from_millis(ms));
            Step::Wait
        });
        runtime.submit(NewTask::new(task)).unwrap();
    }
    within(LIMIT, "run_until_idle", move || {
        runtime.run_until_idle();
    });
    assert_eq!(*woke.lock().unwrap(), [10, 20, 30]);
}

/// A run with a deadline returns by it while a task sleeps for an hour (which
/// `run_until_idle` would wait out), leaves the task waiting, and the next run goes on
/// from there: a submission after it runs to its end.
#[test]
fn a_run_with_a_deadline_returns_while_a_timer_is_set() {
    let mut runtime = Runtime::builder().build();
    let mut slept = false;
    let sleeper = runtime
        .submit(NewTask::new(task_fn("sleeper", move |cx| {
            if !slept {
                slept = true;
                cx.sleep(Duration::from_secs(3600));
                return Step::Wait;
            }
            Step::done("woke")
        })))
        .unwrap()
        .id;
    let runtime = within(LIMIT, "run_until_idle_by", move || {
        runtime.run_until_idle_by(Instant::now() + Duration::from_millis(20));
        runtime
    });
    assert!(
        matches!(runtime.task_state(sleeper), Some(TaskState::Waiting(_))),
        "{:?}",
        runtime.task_state(sleeper)
    );
    let mut runtime = runtime;
    let quick = runtime
        .submit(NewTask::new(task_fn("quick", |_cx| Step::done("done"))))
        .unwrap()
        .id;
    let runtime = within(LIMIT, "run_until", move || {
        runtime.run_until(Instant::now() + Duration::from_millis(20));
        runtime
    });
    assert_eq!(
        runtime.task_state(quick),
        Some(TaskState::Completed(Ok(json!("done"))))
    );
}
