//! Which tasks changed since the last checkpoint in parts: the task table notes every
//! task it hands out to change, and every task it removes, while changes are tracked
//! (see `Scheduler::snapshot_changes`).
//!
//! The marks live here, not in the task entries: a scheduler that does not track (the
//! hot loop, a run with no store) pays nothing in the entry, one test of a pointer per
//! task changed off the hot path, and, on it, none: `step` and `handle_response` test
//! once per input whether anything observes them (`Scheduler::observed`) and run a copy
//! that notes nothing when nothing does.

use crate::id::TaskId;

/// The tasks changed since a point: indexes whose task was changed or added (each once),
/// and the ids of tasks removed from the table.
#[derive(Debug, Default)]
pub(super) struct Changes {
    pub(super) indexes: Vec<u32>,
    pub(super) removed: Vec<TaskId>,
    /// Bit `s % 64` of word `s / 64` is set while index `s` is in `indexes`: an index is
    /// listed once, even when its task is removed and a new one takes the index.
    marked: Vec<u64>,
}

impl Changes {
    /// Notes `index` as changed, once.
    #[inline(never)]
    pub(super) fn mark(&mut self, index: u32) {
        let (word, bit) = ((index / 64) as usize, 1u64 << (index % 64));
        if word >= self.marked.len() {
            self.marked.resize(word + 1, 0);
        }
        if self.marked[word] & bit == 0 {
            self.marked[word] |= bit;
            self.indexes.push(index);
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
            indexes: std::mem::take(&mut self.indexes),
            removed: std::mem::take(&mut self.removed),
            marked: Vec::new(),
        }
    }

    /// Clears the marks of the indexes listed (not the others: in time that follows
    /// what changed).
    fn unmark(&mut self) {
        for index in &self.indexes {
            if let Some(word) = self.marked.get_mut((*index / 64) as usize) {
                *word &= !(1u64 << (*index % 64));
            }
        }
    }
}
