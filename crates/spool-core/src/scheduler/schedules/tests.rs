#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::json;

use super::*;
use crate::saved::{SavedTask, StateError};
use crate::scheduler::Config;
use crate::spec::Spec;
use crate::task::{AgentTask, Step, TaskContext};

/// A run's task: done at its first poll.
#[derive(Debug)]
struct Done;

impl AgentTask for Done {
    fn poll(&mut self, _cx: &mut TaskContext<'_>) -> Step {
        Step::done(json!({}))
    }
    fn type_name(&self) -> &'static str {
        "job"
    }
    fn save(&self) -> Result<SavedTask, StateError> {
        SavedTask::serde(&())
    }
}

/// A scheduler with a daily schedule `daily` of `job`, in its own session.
fn daily() -> Scheduler {
    let mut scheduler = Scheduler::new(Config::new());
    scheduler.set_registry(TaskRegistry::new().with_input("job", |_| Ok(Box::new(Done))));
    let wall = "2027-01-01T00:00:00Z".parse().unwrap();
    scheduler.set_wall_clock(Time::ZERO, wall);
    let every_day = Spec::Every(Duration::from_secs(24 * 3600));
    let def = ScheduleDef::new("daily", every_day, "job", json!({}));
    scheduler.put_schedule(Time::ZERO, def).unwrap();
    scheduler
}

/// A run whose task cannot be made is a failed run, which says why; the session
/// was made before the task, and stays.
#[test]
fn a_run_whose_task_cannot_be_made_is_a_failed_run() {
    let mut scheduler = daily();
    scheduler.set_registry(TaskRegistry::new());
    let outcome = scheduler.trigger_schedule(Time::ZERO, "daily").unwrap();
    let reason = "the task type \"job\" is not registered";
    assert_eq!(outcome, FireOutcome::Failed(reason.to_owned()));
    let status = scheduler.schedule("daily").unwrap().status;
    assert_eq!(
        status.last_error,
        Some(format!("the run could not start: {reason}"))
    );
    assert_eq!(
        (status.runs, status.last_result, status.running),
        (0, Some(RunResult::Error), Vec::new())
    );
    assert_eq!(scheduler.sessions().len(), 1);
}

/// A persistent session deleted between runs is made again at the next run, and
/// the schedule's status says so.
#[test]
fn a_deleted_session_is_made_again_and_said() {
    let mut scheduler = daily();
    let outcome = scheduler.trigger_schedule(Time::ZERO, "daily").unwrap();
    assert!(matches!(outcome, FireOutcome::Started(_)), "{outcome:?}");
    while scheduler.step(Time::ZERO).is_some() {}
    let first = scheduler.schedule("daily").unwrap().status.session.unwrap();
    scheduler.delete_session(Time::ZERO, &first).unwrap();
    let outcome = scheduler.trigger_schedule(Time::ZERO, "daily").unwrap();
    let FireOutcome::Started(id) = outcome else {
        panic!("{outcome:?}");
    };
    let status = scheduler.schedule("daily").unwrap().status;
    let second = status.session.clone().unwrap();
    assert_ne!(first, second);
    assert_eq!(
        status.last_error,
        Some(format!("session {first} was gone; made session {second}"))
    );
    assert_eq!((status.runs, status.running), (2, vec![id]));
    assert_eq!(scheduler.session(&second).unwrap().holder, Some(id));
}
