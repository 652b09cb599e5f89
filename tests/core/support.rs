//! Helpers shared by the core tests: held-request keys and a trace continuity check.

#[path = "../common/ask_once.rs"]
mod ask_once;
pub(crate) use ask_once::ask_once;

use std::collections::BTreeMap;

use spool::{Phase, RequestKey, TaskId, TestScheduler};

/// The keys of the requests held for the test, oldest first.
pub(crate) fn held_keys(scheduler: &TestScheduler) -> Vec<RequestKey> {
    scheduler
        .held_requests()
        .iter()
        .map(|h| h.request.key)
        .collect()
}

/// Checks that every task's trace is one unbroken path: it starts at `New`, and each
/// event starts in the state the task's previous event ended in.
pub(crate) fn assert_trace_continuous(scheduler: &TestScheduler) {
    let mut last: BTreeMap<TaskId, Phase> = BTreeMap::new();
    for event in scheduler.trace_events() {
        let expected = last.get(&event.task).cloned().unwrap_or(Phase::New);
        assert_eq!(
            event.from, expected,
            "event `{event}` starts in {} but task {} was in {expected}",
            event.from, event.task
        );
        last.insert(event.task, event.to.clone());
    }
}
