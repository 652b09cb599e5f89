//! Which tasks changed since the last checkpoint in parts: the task table notes every
//! task it hands out to change, and every task it removes, while changes are tracked
//! (see `Scheduler::snapshot_changes`).
//!
//! The marks live here, not in the task slots: a scheduler that does not track (the
//! hot loop, a run with no store) pays nothing in the slot, one test of a pointer per
//! task changed off the hot path, and, on it, none: `step` and `handle_response` test
//! once per input whether anything observes them (`Scheduler::observed`) and run a copy
//! that notes nothing when nothing does.

use super::table::TaskTable;
use crate::TaskId;

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

impl TaskTable {
    /// Notes the task in `slot` as changed, if changes are tracked. Untracked, this is
    /// one test of a pointer.
    #[inline(always)]
    pub(super) fn note(&mut self, slot: u32) {
        if let Some(changes) = self.changes.as_deref_mut() {
            changes.mark(slot);
        }
    }

    /// Notes the task with `id` as removed from the table, if changes are tracked.
    #[inline(always)]
    pub(super) fn note_removed(&mut self, id: TaskId) {
        if let Some(changes) = self.changes.as_deref_mut() {
            changes.removed.push(id);
        }
    }

    /// Starts tracking changes from now (`true`), or stops (`false`).
    pub(super) fn track_changes(&mut self, on: bool) {
        self.changes = on.then(Box::default);
    }

    /// The changes noted so far, if changes are tracked.
    pub(super) fn changes(&self) -> Option<&Changes> {
        self.changes.as_deref()
    }

    /// Whether changes are tracked.
    pub(super) fn tracking(&self) -> bool {
        self.changes.is_some()
    }

    /// The changes since tracking started or changes were last taken; tracking goes
    /// on from now. `None` when changes are not tracked.
    pub(super) fn take_changes(&mut self) -> Option<Changes> {
        let changes = self.changes.as_deref_mut()?;
        changes.unmark();
        Some(Changes {
            slots: std::mem::take(&mut changes.slots),
            removed: std::mem::take(&mut changes.removed),
            marked: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_listed_once_until_taken_and_untracked_notes_nothing() {
        let mut table = TaskTable::new();
        table.note(3);
        assert!(table.changes().is_none());
        table.track_changes(true);
        for slot in [3, 70, 3, 0, 70, 200] {
            table.note(slot);
        }
        table.note_removed(TaskId(9));
        let taken = table.take_changes().expect("tracked");
        assert_eq!(taken.slots, [3, 70, 0, 200]);
        assert_eq!(taken.removed, [TaskId(9)]);
        // Taken: every mark is cleared, tracking goes on.
        table.note(70);
        table.note(3);
        let taken = table.take_changes().expect("tracked");
        assert_eq!((taken.slots, taken.removed), (vec![70, 3], vec![]));
        table.track_changes(false);
        table.note(1);
        assert!(table.take_changes().is_none());
    }
}
