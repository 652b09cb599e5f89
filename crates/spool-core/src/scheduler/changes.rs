//! Which tasks changed since the last checkpoint in parts: the task table notes every
//! task it hands out to change, and every task it removes, while changes are tracked
//! (see `Scheduler::snapshot_changes`).
//!
//! The marks live here, not in the task slots: a scheduler that does not track (the
//! hot loop, a run with no store) pays nothing in the slot, one test of a pointer per
//! task changed off the hot path, and, on it, none: `step` and `handle_response` test
//! once per input whether anything observes them (`Scheduler::observed`) and run a copy
//! that notes nothing when nothing does.

use crate::id::TaskId;

/// The tasks changed since a point: slots whose task was changed or added (each once),
/// and the ids of tasks removed from the table.
#[derive(Debug, Default)]
pub(super) struct Changes {
    pub(super) slots: Vec<u32>,
    pub(super) removed: Vec<TaskId>,
    /// Bit `s % 64` of word `s / 64` is set while slot `s` is in `slots`: a slot is
    /// listed once, even when its task is removed and a new one takes the slot.
    marked: Vec<u64>,
}

impl Changes {
    /// Notes `slot` as changed, once.
    #[inline(never)]
    pub(super) fn mark(&mut self, slot: u32) {
        let (word, bit) = ((slot / 64) as usize, 1u64 << (slot % 64));
        if word >= self.marked.len() {
            self.marked.resize(word + 1, 0);
        }
        if self.marked[word] & bit == 0 {
            self.marked[word] |= bit;
            self.slots.push(slot);
        }
    }

    /// Notes the task `id` as removed from the table.
    pub(super) fn mark_removed(&mut self, id: TaskId) {
        self.removed.push(id);
    }

    /// The changes noted so far, taken: the marks are cleared and noting starts again
    /// from nothing.
    pub(super) fn take(&mut self) -> Changes {
        self.unmark();
        Changes {
            slots: std::mem::take(&mut self.slots),
            removed: std::mem::take(&mut self.removed),
            marked: Vec::new(),
        }
    }

    /// Clears the marks of the slots listed (not the others: in time that follows
    /// what changed).
    fn unmark(&mut self) {
        for slot in &self.slots {
            if let Some(word) = self.marked.get_mut((*slot / 64) as usize) {
                *word &= !(1u64 << (*slot % 64));
            }
        }
    }
}
