//! The views' tests: rows shared across publications, the queue over live tasks, large
//! results kept out, rows found by id across chunks.

use std::time::Instant;

use spool_core::{Config, NewTask, Step, task_fn};
use spool_runtime::Runtime;

use super::*;

fn quick(name: &'static str) -> NewTask {
    NewTask::new(task_fn(name, |_cx| Step::done(1)))
}

/// Rows come and go with the tasks: an evicted task's row leaves the views (the
/// removal comes with the publication, not the trace).
#[test]
fn rows_follow_the_table_and_unchanged_rows_are_shared() {
    let config = Config::new().retention(Duration::from_millis(1));
    let (builder, views) = publish_views(Runtime::builder().config(config), Duration::ZERO, 16);
    let mut runtime = builder.build();
    let first = runtime.submit(quick("first")).map(|s| s.id);
    let Ok(first) = first else {
        panic!("the first task was refused: {first:?}");
    };
    runtime.run_until_idle();
    let before = views.latest();
    let row = before.tasks.get(&first).cloned();
    assert_eq!(
        row.as_ref().map(|r| (&r.type_name[..], r.state.clone())),
        Some(("first", TaskState::Completed(Ok(Value::from(1)))))
    );
    assert_eq!(row.map(|r| r.timeline.ended().is_some()), Some(true));
    // Past the retention, the next input's clock move evicts it.
    let deadline = Instant::now() + Duration::from_secs(5);
    let due = runtime.clock().now() + Duration::from_millis(2);
    while runtime.clock().now() < due {
        assert!(Instant::now() < deadline, "the clock does not move");
        std::hint::spin_loop();
    }
    let second = runtime.submit(quick("second")).map(|s| s.id);
    let Ok(second) = second else {
        panic!("the second task was refused: {second:?}");
    };
    runtime.run_until_idle();
    let after = views.latest();
    assert!(after.generation > before.generation);
    assert_eq!(
        after.tasks.values().map(|r| r.id).collect::<Vec<_>>(),
        [second]
    );
    assert_eq!(after.tasks.len(), 1);
    assert_eq!(after.tasks.last_id(), Some(second));
    assert!(after.tasks.get(&first).is_none());
    assert_eq!(after.in_flight, BTreeMap::new());
}

/// The queue taken over the live tasks only is the core's whole-table one: a task
/// waiting for a person among ended ones.
#[test]
fn the_queue_over_live_tasks_is_the_core_s() {
    let (builder, views) = publish_views(Runtime::builder(), Duration::ZERO, 16);
    let mut runtime = builder.build();
    let mut asked = false;
    let asker = NewTask::new(task_fn("asker", move |cx| {
        if !asked {
            asked = true;
            cx.confirm(Value::from("go on?"));
            return Step::Wait;
        }
        Step::done(1)
    }));
    for task in [quick("a"), asker, quick("b")] {
        assert!(runtime.submit(task).is_ok());
    }
    runtime.run_until_idle();
    let latest = views.latest();
    let core = runtime.scheduler();
    assert_eq!(latest.queue.as_ref(), Some(&core.queue_state()));
    assert_eq!(latest.queue.as_ref().map(|q| q.waiting.requests), Some(1));
    let details: Vec<_> = latest.details.iter().map(|(d, _)| d.clone()).collect();
    assert_eq!(details, core.queue_details());
    assert_eq!(details.len(), 1);
    assert_eq!(
        latest.in_flight,
        BTreeMap::from([("confirm".to_owned(), 1)])
    );
}

/// A result over 64 KiB is not copied into the views: the row has its size, and
/// `null` in its place; a smaller one is there whole.
#[test]
fn large_results_stay_out_of_the_views() {
    let (builder, views) = publish_views(Runtime::builder(), Duration::ZERO, 16);
    let mut runtime = builder.build();
    let large = "x".repeat(100_000);
    let big = large.clone();
    let ids: Vec<TaskId> = [
        NewTask::new(task_fn("large", move |_cx| Step::done(big.clone()))),
        quick("small"),
    ]
    .into_iter()
    .filter_map(|task| runtime.submit(task).ok().map(|s| s.id))
    .collect();
    runtime.run_until_idle();
    let latest = views.latest();
    let row = |i: usize| {
        latest
            .tasks
            .get(&ids[i])
            .map(|r| (r.state.clone(), r.result_bytes, r.result_elided))
    };
    assert_eq!(
        row(0),
        Some((TaskState::Completed(Ok(Value::Null)), Some(100_002), true))
    );
    assert_eq!(
        row(1),
        Some((TaskState::Completed(Ok(Value::from(1))), Some(1), false))
    );
    // The loop's table has the whole result.
    assert_eq!(
        runtime.scheduler().task(ids[0]).map(|t| t.state),
        Some(TaskState::Completed(Ok(Value::String(large))))
    );
}

#[test]
fn rows_are_found_by_id_and_listed_after_an_id_across_chunks() {
    let mut rows = TaskRows::default();
    let row = |id: u64| TaskRow {
        id: TaskId::from_raw(id),
        type_name: "t".to_owned(),
        agent: "default".to_owned(),
        priority: spool_core::Priority::Normal,
        state: TaskState::Ready,
        created_at: Time::ZERO,
        in_flight: 0,
        requests: Vec::new(),
        timeline: Timeline::new(),
        result_bytes: None,
        result_elided: false,
        forked_from: None,
        spend: None,
    };
    for id in [1, 255, 256, 257, 600, 1_000] {
        assert!(rows.insert(row(id)).is_none());
    }
    let shared = rows.clone();
    assert!(rows.insert(row(256)).is_some());
    assert!(rows.remove(TaskId::from_raw(600)).is_some());
    assert!(rows.remove(TaskId::from_raw(600)).is_none());
    let ids = |r: &TaskRows, after: u64| -> Vec<u64> {
        r.after(TaskId::from_raw(after))
            .map(|r| r.id.get())
            .collect()
    };
    assert_eq!(ids(&rows, 0), [1, 255, 256, 257, 1_000]);
    assert_eq!(ids(&rows, 255), [256, 257, 1_000]);
    assert_eq!(ids(&rows, 700), [1_000]);
    assert_eq!(ids(&rows, 1_000), Vec::<u64>::new());
    assert_eq!(
        (rows.len(), rows.last_id()),
        (5, Some(TaskId::from_raw(1_000)))
    );
    // The clone taken before is untouched.
    assert_eq!(ids(&shared, 0), [1, 255, 256, 257, 600, 1_000]);
    assert_eq!(shared.len(), 6);
    assert!(rows.get(&TaskId::from_raw(2)).is_none());
}
