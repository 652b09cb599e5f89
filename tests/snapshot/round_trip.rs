//! Snapshot, restore, snapshot again: the same bytes.

use std::time::Duration;

use serde_json::json;
use spool::{
    Config, Kind, NewTask, PolicyChoice, RequestLimits, Response, Scheduler, Snapshot, TaskLimits,
    Time,
};

use crate::tasks::{Asker, registry};

fn secs(n: u64) -> Time {
    Time::from_duration(Duration::from_secs(n))
}

/// A scheduler with tasks in many states: done, waiting on a request sent, waiting at
/// a gate, queued for a slot, ready.
fn busy() -> Scheduler {
    let mut s = Scheduler::new(
        Config::new()
            .record_trace(true)
            .policy(PolicyChoice::Priority)
            .limits(TaskLimits::new().max_running(3))
            .requests(RequestLimits::new().max_in_flight(Kind::Llm, 1)),
    );
    for n in [1, 2, 3, 2, 1] {
        s.submit(
            Time::ZERO,
            NewTask::new(Asker::new(n)).agent(format!("a{n}")),
        )
        .unwrap();
    }
    while s.step(Time::ZERO).is_some() {}
    let out = s.poll_request().unwrap();
    let _ = s.handle_response(secs(1), Response::ok(out.key, json!(5)));
    while s.step(secs(1)).is_some() {}
    let _ = s.poll_request();
    s
}

/// Snapshot → encode → decode → restore → snapshot → encode gives identical bytes.
#[test]
fn snapshot_restore_snapshot_gives_identical_bytes() {
    let s = busy();
    let bytes = s.snapshot().unwrap().encode().unwrap();
    let decoded = Snapshot::decode(&bytes).unwrap();
    let restored = Scheduler::restore(&decoded, &registry()).unwrap();
    let again = restored.snapshot().unwrap().encode().unwrap();
    assert_eq!(bytes, again);
    assert_eq!(
        format!("{:?}", s.tasks().collect::<Vec<_>>()),
        format!("{:?}", restored.tasks().collect::<Vec<_>>())
    );
}
