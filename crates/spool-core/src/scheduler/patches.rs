//! Code-version decisions ([`TaskContext::patched`](crate::TaskContext::patched)):
//! journaled as tasks make them, given back to the tasks a replay makes again, and kept
//! in snapshots.

use super::{Body, Scheduler};
use crate::id::TaskId;
use crate::journal::{Journal, JournalEntry};
use crate::replaying::Recorded;
use crate::snapshot::RestoreError;

/// The new branches each task took in `journal`'s recorded run.
pub(super) fn recorded_in(journal: &Journal) -> Recorded {
    let mut recorded = Recorded::default();
    for entry in &journal.entries {
        if let JournalEntry::Patched { task, name } = entry {
            recorded.took(*task, name);
        }
    }
    recorded
}

impl Scheduler {
    /// Journals the new branches the task at `index` took in the poll that just ended.
    pub(super) fn journal_patches(&mut self, index: u32) {
        let Some(recorder) = self.journal.as_deref_mut() else {
            return;
        };
        let Some(task) = self.tasks.get_mut(index) else {
            return;
        };
        let Some(family) = task.family.as_mut() else {
            return;
        };
        let patches = &mut family.patches;
        if patches.unjournaled == 0 {
            return;
        }
        let from = patches.decided.len() - patches.unjournaled as usize;
        for (name, taken) in &patches.decided[from..] {
            if *taken {
                recorder.push_output(JournalEntry::Patched {
                    task: task.id,
                    name: name.clone(),
                });
            }
        }
        patches.unjournaled = 0;
    }

    /// The snapshot's record of the live tasks' decisions, by task id.
    pub(super) fn patch_records(&self) -> Vec<(TaskId, Vec<(String, bool)>)> {
        let mut records: Vec<_> = self
            .tasks
            .entries()
            .iter()
            .filter_map(|(_, task)| {
                let family = task.family.as_ref()?;
                (!family.patches.decided.is_empty())
                    .then(|| (task.id, family.patches.decided.clone()))
            })
            .collect();
        records.sort_by_key(|(id, _)| *id);
        records
    }

    /// Gives the restored tasks their decisions.
    ///
    /// # Errors
    /// [`RestoreError::Invalid`] for a record of a task not live in the table.
    pub(super) fn restore_patches(
        &mut self,
        records: &[(TaskId, Vec<(String, bool)>)],
    ) -> Result<(), RestoreError> {
        for (id, decided) in records {
            let task = self
                .tasks
                .by_id
                .get(id)
                .copied()
                .and_then(|index| self.tasks.get_mut(index))
                .filter(|task| matches!(task.body, Body::Live(_)));
            let Some(task) = task else {
                return Err(RestoreError::Invalid(format!(
                    "code-version decisions are recorded for task {id}, which is not live in the table"
                )));
            };
            task.family
                .get_or_insert_with(Default::default)
                .patches
                .decided = decided.clone();
        }
        Ok(())
    }
}
