//! Whether a recorded run is being replayed on this thread, and the new branches of
//! code changes its tasks took: what [`TaskContext::patched`](crate::TaskContext::patched)
//! answers while it is.
//!
//! A replay is synchronous — it applies a recording's inputs one after another on the
//! caller's thread — so the recording's decisions are lent to the thread for its
//! length (a guard puts back whatever was there before), and a task asks only when
//! it calls `patched`: no poll pays for it.

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::id::TaskId;

thread_local! {
    static REPLAYING: RefCell<Option<Recorded>> = const { RefCell::new(None) };
}

/// The new branches each task took in a recorded run, by task.
#[derive(Clone, Debug, Default)]
pub(crate) struct Recorded {
    taken: BTreeMap<TaskId, Vec<String>>,
}

impl Recorded {
    /// Notes that task `task` took the new branch of `name`.
    pub(crate) fn took(&mut self, task: TaskId, name: &str) {
        self.taken.entry(task).or_default().push(name.to_owned());
    }
}

/// While a replay is on: whether the recorded task `task` took the new branch of
/// `name` (`false` for a name it never asked about). `None` when no replay is on.
pub(crate) fn recorded_branch(task: TaskId, name: &str) -> Option<bool> {
    REPLAYING.with_borrow(|replaying| {
        let recorded = replaying.as_ref()?;
        Some(
            recorded
                .taken
                .get(&task)
                .is_some_and(|names| names.iter().any(|n| n == name)),
        )
    })
}

/// A replay on this thread, until dropped.
pub(crate) struct ReplayGuard {
    before: Option<Recorded>,
}

impl ReplayGuard {
    /// Starts a replay of a run that took `recorded`'s branches.
    pub(crate) fn begin(recorded: Recorded) -> ReplayGuard {
        let before = REPLAYING.with_borrow_mut(|r| r.replace(recorded));
        ReplayGuard { before }
    }
}

impl Drop for ReplayGuard {
    fn drop(&mut self) {
        let before = self.before.take();
        REPLAYING.with_borrow_mut(|r| *r = before);
    }
}
