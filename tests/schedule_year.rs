//! A year of a schedule in virtual time: one `*/5 * * * *` UTC schedule on a
//! `TestScheduler`, driven through 2027, fires exactly once at each of 2027's 105,120
//! five-minute marks and misses none.
//!
//! A schedule's first fire is the first one strictly after it is made (a schedule made at
//! 2027-01-01T00:00:00Z first fires at 00:05), so to have 2027-01-01T00:00:00Z fire the
//! schedule is made a minute before, at 2026-12-31T23:59:00Z, and time stops a minute
//! before 2028-01-01T00:00:00Z, whose fire is then the next one.
//!
//! `docs/performance.md` ("Schedules") has its time in a debug and a release build.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;
use spool::core::{
    AgentTask, CronSpec, RunResult, SavedTask, ScheduleDef, Spec, StateError, Step, TaskContext,
    TaskRegistry,
};
use spool_test::TestScheduler;

/// A run that completes at once, with nothing for its session.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Tick {}

impl AgentTask for Tick {
    fn poll(&mut self, _cx: &mut TaskContext<'_>) -> Step {
        Step::done(json!("tick"))
    }

    fn type_name(&self) -> &'static str {
        "tick"
    }

    fn save(&self) -> Result<SavedTask, StateError> {
        SavedTask::serde(self)
    }
}

/// Runs in a year of `*/5 * * * *`: 365 days of 288.
const RUNS: u64 = 365 * 288;

#[test]
fn a_year_of_every_five_minutes_is_105_120_runs() {
    assert_eq!(RUNS, 105_120);
    let mut t = TestScheduler::new();
    t.set_registry(TaskRegistry::new().with_serde::<Tick>("tick"));
    t.set_wall_clock("2026-12-31T23:59:00Z".parse().unwrap());
    let spec = Spec::Cron(CronSpec::parse("*/5 * * * *", "UTC").unwrap());
    assert_eq!(
        t.put_schedule(ScheduleDef::new("tick", spec, "tick", json!({}))),
        Ok(true)
    );
    let next = t.schedule("tick").unwrap().status.next_run.unwrap();
    assert_eq!(next.to_string(), "2027-01-01T00:00:00Z");

    let started = Instant::now();
    // 2026-12-31T23:59:00Z + 365 days = 2027-12-31T23:59:00Z.
    t.advance(Duration::from_secs(365 * 24 * 3600));
    let took = started.elapsed();
    eprintln!("a virtual year of */5 * * * *: {took:.2?}");

    assert_eq!(t.wall_clock().unwrap().to_string(), "2027-12-31T23:59:00Z");
    let status = t.schedule("tick").unwrap().status;
    assert_eq!(status.runs, RUNS);
    assert_eq!(status.missed, 0);
    assert_eq!(status.consecutive_failures, 0);
    assert_eq!(status.last_result, Some(RunResult::Success));
    assert!(status.running.is_empty());
    assert_eq!(
        status.last_fire.unwrap().to_string(),
        "2027-12-31T23:55:00Z"
    );
    // Each run started on its fire: no fire was late.
    assert_eq!(status.last_run, status.last_fire);
    assert_eq!(status.next_run.unwrap().to_string(), "2028-01-01T00:00:00Z");
    assert_eq!(t.stats().completed, RUNS);
    assert_eq!(t.stats().failed, 0);
}
