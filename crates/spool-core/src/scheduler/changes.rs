//! Which tasks changed since the last checkpoint in parts: the task table notes every
//! task it hands out to change, and every task it removes, while changes are tracked
//! (see `Scheduler::snapshot_changes`).

use slab::Slab;

use super::table::{TaskSlot, TaskTable};
use crate::TaskId;

/// The tasks changed since a point: slots whose task was changed or added (each once),
/// and the ids of tasks removed from the table.
#[derive(Debug, Default)]
pub(super) struct Changes {
    pub(super) slots: Vec<u32>,
    pub(super) removed: Vec<TaskId>,
}

impl Changes {
    /// Notes `task`, in `slot`, as changed, once, if changes are tracked.
    #[inline(always)]
    pub(super) fn note(changes: &mut Option<Changes>, task: &mut TaskSlot, slot: u32) {
        if let Some(changes) = changes {
            if !task.changed {
                task.changed = true;
                changes.slots.push(slot);
            }
        }
    }
}

/// Clears the changed mark of the tasks in `slots`.
fn unmark(slab: &mut Slab<TaskSlot>, slots: &[u32]) {
    for slot in slots {
        if let Some(task) = slab.get_mut(*slot as usize) {
            task.changed = false;
        }
    }
}

impl TaskTable {
    /// Starts tracking changes from now (`true`), or stops (`false`).
    pub(super) fn track_changes(&mut self, on: bool) {
        if let Some(changes) = self.changes.take() {
            unmark(&mut self.slab, &changes.slots);
        }
        if on {
            self.changes = Some(Changes::default());
        }
    }

    /// The changes noted so far, if changes are tracked.
    pub(super) fn changes(&self) -> Option<&Changes> {
        self.changes.as_ref()
    }

    /// Whether changes are tracked.
    pub(super) fn tracking(&self) -> bool {
        self.changes.is_some()
    }

    /// The changes since tracking started or changes were last taken; tracking goes
    /// on from now. `None` when changes are not tracked.
    pub(super) fn take_changes(&mut self) -> Option<Changes> {
        let changes = std::mem::take(self.changes.as_mut()?);
        unmark(&mut self.slab, &changes.slots);
        Some(changes)
    }
}
