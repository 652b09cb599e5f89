//! Regression tests for what the schedules benchmark's review found wrong in the
//! schedule code: a snapshot with a schedule in a high slot after deletions, the order
//! of same-time fires after a restore, and the clock an operation reads.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use spool::core::{
    AgentTask, CronSpec, SavedTask, ScheduleDef, SessionMode, Spec, StateError, Step, TaskContext,
    TaskRegistry, TaskState,
};
use spool_test::TestScheduler;

/// A run that completes at once with its schedule's slug.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Tick {
    #[serde(default)]
    schedule: Value,
}

impl AgentTask for Tick {
    fn poll(&mut self, _cx: &mut TaskContext<'_>) -> Step {
        Step::done(self.schedule["slug"].clone())
    }

    fn type_name(&self) -> &'static str {
        "tick"
    }

    fn save(&self) -> Result<SavedTask, StateError> {
        SavedTask::serde(self)
    }
}

fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<Tick>("tick")
}

fn at(wall: &str) -> TestScheduler {
    let mut t = TestScheduler::new();
    t.set_registry(registry());
    t.set_wall_clock(wall.parse().unwrap());
    t
}

fn every_five(slug: &str) -> ScheduleDef {
    let spec = Spec::Cron(CronSpec::parse("*/5 * * * *", "UTC").unwrap());
    ScheduleDef::new(slug, spec, "tick", json!({})).session(SessionMode::Fresh)
}

/// The slug each completed run ran for, in task order.
fn runs(t: &TestScheduler) -> Vec<(u64, Value)> {
    t.task_states()
        .into_iter()
        .filter_map(|(id, state)| match state {
            TaskState::Completed(Ok(slug)) => Some((id.get(), slug)),
            _ => None,
        })
        .collect()
}

/// `Schedules::restore` refuses a slot past `2 × entries + 16`, but a table whose
/// early schedules were deleted legitimately keeps a schedule in a high slot (slots are
/// reused, never compacted): 100 schedules made, the first 99 deleted, leaves one in
/// slot 99, and the snapshot of that scheduler does not restore ("schedule slot 99 is
/// out of range").
#[test]
fn a_scheduler_whose_early_schedules_were_deleted_restores() {
    let mut t = at("2027-01-01T00:00:00Z");
    for i in 0..100 {
        t.put_schedule(every_five(&format!("s-{i}"))).unwrap();
    }
    for i in 0..99 {
        t.delete_schedule(&format!("s-{i}")).unwrap();
    }
    let snapshot = t.snapshot().unwrap();
    let restored = TestScheduler::restore(&snapshot, &registry());
    assert!(
        restored.is_ok(),
        "the snapshot restores: {:?}",
        restored.err()
    );
}

/// Two schedules due at the same instant fire in the order of their timers' sequence
/// numbers; a restored scheduler rebuilds the schedules' timers in slot order instead
/// (`Timers::restore_derived`), so when the two orders differ — here "z" was made after
/// "y" but took the slot "x" left free, before "y"'s — the restored scheduler gives the
/// runs other task ids than the scheduler it was taken from, and a journal recorded
/// after the snapshot no longer replays on it.
#[test]
fn a_restored_scheduler_fires_same_time_schedules_in_the_same_order() {
    let mut t = at("2027-01-01T00:00:00Z");
    t.put_schedule(every_five("x")).unwrap();
    t.put_schedule(every_five("y")).unwrap();
    t.delete_schedule("x").unwrap();
    t.put_schedule(every_five("z")).unwrap();
    let snapshot = t.snapshot().unwrap();
    let mut restored = TestScheduler::restore(&snapshot, &registry()).unwrap();

    t.advance(Duration::from_secs(300));
    restored.advance(Duration::from_secs(300));
    assert_eq!(runs(&t), [(1, json!("y")), (2, json!("z"))]);
    assert_eq!(runs(&restored), runs(&t));
}

/// `Scheduler::put_schedule(now, def)` works out the new schedule's first fire (and its
/// `created_at`) from the wall clock of the scheduler's time *before* it moves to `now`
/// (`check_schedule` reads `anchor.wall(self.now)` ahead of `advance(now)`), so on a
/// scheduler whose last input was a while ago a schedule is timed from then: here an
/// `Every(5 min)` made at 00:01:30 is due at 00:05:00, not 00:06:30, and says it was
/// made at 00:00:00. (`TestScheduler` moves the core's clock as it advances, so it
/// hides this; a driver that calls the core at the time an operation comes does not.)
/// `patch_schedule` takes the same path.
#[test]
fn a_schedule_made_at_now_is_timed_from_now() {
    use spool::core::{Config, Scheduler, Time};
    let mut core = Scheduler::new(Config::new());
    core.set_registry(registry());
    core.set_wall_clock(Time::ZERO, "2027-01-01T00:00:00Z".parse().unwrap());
    let every = ScheduleDef::new(
        "every",
        Spec::Every(Duration::from_secs(300)),
        "tick",
        json!({}),
    )
    .session(SessionMode::Fresh);
    let now = Time::ZERO + Duration::from_secs(90);
    core.put_schedule(now, every).unwrap();
    let info = core.schedule("every").unwrap();
    assert_eq!(info.created_at.to_string(), "2027-01-01T00:01:30Z");
    assert_eq!(
        info.status.next_run.unwrap().to_string(),
        "2027-01-01T00:06:30Z"
    );
}
