//! A 429 back-off survives a snapshot: the hits that double it, the epoch that makes
//! 429s to requests sent together one hit, and the back-off each request has spent of
//! its budget.

use std::time::Duration;

use serde_json::Value;
use spool::{
    BackoffBound, Config, Kind, Mock, NewTask, RequestError, RequestLimits, Scheduler, TaskError,
    TaskId, TaskState, TestScheduler, Time,
};

use crate::tasks::{Asker, registry};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A provider that answers every LLM request 429 (`Retry-After: 1s`) 1 s after it.
fn refusing(ts: &mut TestScheduler) {
    let refuse = |_: &_| -> Result<Value, RequestError> {
        Err(RequestError::RateLimited {
            retry_after: Some(secs(1)),
        })
    };
    ts.mock_with_latency(Kind::Llm, Mock::Fn(Box::new(refuse)), secs(1));
}

/// Three askers whose requests go together to a provider refusing everything, run to
/// the end — straight through, or snapshotted and restored at `stop` (mid-back-off) —
/// give `(when it ended, each task's state, the sends)`.
fn refused_run(stop: Option<Duration>) -> (Time, Vec<(TaskId, TaskState)>, Vec<Time>) {
    let scheduler = Scheduler::new(
        Config::new()
            .record_trace(true)
            .requests(RequestLimits::new()),
    );
    let mut ts = TestScheduler::with_scheduler(scheduler);
    refusing(&mut ts);
    for _ in 0..3 {
        ts.submit(NewTask::new(Asker::new(1)));
    }
    let mut sends: Vec<Time> = Vec::new();
    if let Some(stop) = stop {
        ts.advance(stop);
        sends.extend(ts.sent_requests().iter().map(|s| s.at));
        let snapshot = ts.snapshot().unwrap();
        ts = TestScheduler::restore(&snapshot, &registry()).unwrap();
        refusing(&mut ts);
    }
    let end = ts.run_until_quiet();
    sends.extend(ts.sent_requests().iter().map(|s| s.at));
    (end, ts.task_states(), sends)
}

/// Straight through, the three requests back off together 2, 4, … 64 s (254 s in
/// all) and fail on their ninth 429, at 263 s. Restored from a snapshot at 100 s,
/// while they back off until 132 s, they do exactly the same: the restored scheduler
/// knows the kind's six hits and each request's 126 s of back-off.
#[test]
fn a_back_off_and_each_request_s_budget_survive_a_restore() {
    let straight = refused_run(None);
    let t = |n: u64| Time::from_duration(secs(n));
    let expected_sends: Vec<Time> = [0, 3, 8, 17, 34, 67, 132, 197, 262]
        .iter()
        .flat_map(|n| [t(*n); 3])
        .collect();
    assert_eq!(straight.0, t(263));
    assert_eq!(straight.2, expected_sends);
    for (_, state) in &straight.1 {
        assert_eq!(
            *state,
            TaskState::Completed(Err(TaskError::Request {
                number: 1,
                error: RequestError::RateLimitExceeded {
                    retry_after: Some(secs(1)),
                    waited: secs(254),
                    bound: BackoffBound::Budget(secs(300)),
                },
            }))
        );
    }
    assert_eq!(refused_run(Some(secs(100))), straight);
}
