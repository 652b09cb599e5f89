//! A snapshot under other limits (`Snapshot::with_limits`, for a driver started again
//! with new ones): refused while a task is live; once none is, the restored scheduler
//! gates by the new limits.

use std::time::Duration;

use serde_json::json;
use spool::{
    Config, Kind, Mock, NewTask, RequestLimits, Scheduler, TaskLimits, TestScheduler, Time,
};

use crate::tasks::{Asker, registry};

/// Every LLM question answered 1 after 1 s.
fn answering(ts: &mut TestScheduler) {
    ts.mock_with_latency(
        Kind::Llm,
        Mock::Fn(Box::new(|_: &_| Ok(json!(1)))),
        Duration::from_secs(1),
    );
}

#[test]
fn limits_change_in_a_snapshot_only_with_no_live_task() {
    let mut ts = TestScheduler::with_scheduler(Scheduler::new(Config::new()));
    answering(&mut ts);
    for _ in 0..3 {
        ts.submit(NewTask::new(Asker::new(1)));
    }
    ts.advance(Duration::from_millis(500));
    let live = ts.snapshot().unwrap();
    let tasks = TaskLimits::new().max_running(2);
    let requests = RequestLimits::new().max_in_flight(Kind::Llm, 1);
    assert_eq!(live.with_limits(tasks.clone(), requests.clone()), None);
    // Unlimited, the three questions go together.
    ts.run_until_quiet();
    let at = |s: u64| Time::from_duration(Duration::from_secs(s));
    let sends: Vec<Time> = ts.sent_requests().iter().map(|s| s.at).collect();
    assert_eq!(sends, [at(0); 3]);

    // No task live: the limits change, and three more questions go one at a time.
    let ended = ts.snapshot().unwrap();
    let changed = ended.with_limits(tasks.clone(), requests.clone()).unwrap();
    let mut ts = TestScheduler::restore(&changed, &registry()).unwrap();
    assert_eq!(
        (ts.core().task_limits(), ts.core().request_limits()),
        (&tasks, &requests)
    );
    answering(&mut ts);
    let start = ts.now();
    for _ in 0..3 {
        ts.submit(NewTask::new(Asker::new(1)));
    }
    ts.run_until_quiet();
    let sends: Vec<Duration> = ts
        .sent_requests()
        .iter()
        .map(|s| s.at.saturating_since(start))
        .collect();
    assert_eq!(
        sends,
        [0, 1, 2].map(Duration::from_secs),
        "one LLM question in flight at a time"
    );
}
