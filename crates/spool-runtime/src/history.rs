//! Histories and forks on the runtime: a task's history read from the store the
//! runtime journals to, on the caller's thread — never on the loop's — and forks of it,
//! built off the loop and submitted through it.

use std::sync::Arc;

use spool_core::{Edit, TaskHistory, TaskId};
use spool_durable::DurableStore;

use crate::builder::RuntimeBuilder;
use crate::handle::RuntimeHandle;
use crate::run_loop::Runtime;
use crate::store_history::TaskHistoryError;

impl RuntimeBuilder {
    /// Reads tasks' histories from `store` ([`RuntimeHandle::history`],
    /// [`RuntimeHandle::fork`]): the store the runtime journals to
    /// ([`journal`](RuntimeBuilder::journal)`(store.sink())`), which keeps segments of
    /// history under its retention. The task types are the runtime's
    /// ([`registry`](RuntimeBuilder::registry), or the one it was restored or
    /// recovered with). Give it a read-only handle of that store where the backend has
    /// one (`Store::open_read_only`, `PgStore::connect_read_only`): reads then never
    /// hold up the writer's commits; the writer's own handle works too.
    #[must_use]
    pub fn history(mut self, store: Arc<dyn DurableStore>) -> Self {
        self.history_store = Some(store);
        self
    }
}

impl RuntimeHandle {
    /// The history of task `task` as the runtime's store keeps it: each of its polls
    /// with what it received, what it asked for and how the poll ended. Read and
    /// replayed on the calling thread (a blocking read; the loop goes on meanwhile).
    /// What is not yet durable is not in it.
    ///
    /// # Errors
    /// [`TaskHistoryError::NotKept`] for a runtime without a store,
    /// [`TaskHistoryError::UnknownTask`] for a task the history does not submit,
    /// [`TaskHistoryError::Dropped`] for one submitted before the oldest checkpoint
    /// kept, [`TaskHistoryError::History`] for a spawned task or a journal that does
    /// not replay, [`TaskHistoryError::Store`] when the store cannot be read.
    pub fn history(&self, task: TaskId) -> Result<TaskHistory, TaskHistoryError> {
        self.history
            .as_ref()
            .ok_or(TaskHistoryError::NotKept)?
            .history(task)
    }

    /// Forks task `task` at step `at` with `edit` (see [`TaskHistory::fork`]) and
    /// submits the fork through the loop; returns its id once its submission is
    /// durable. The answers the task had received before step `at` are played back to
    /// the fork without reaching an executor; from there it runs live.
    ///
    /// # Errors
    /// As [`history`](RuntimeHandle::history); [`TaskHistoryError::Fork`] when the
    /// fork cannot be made from the history, [`TaskHistoryError::Submit`] when the
    /// scheduler refuses it, [`TaskHistoryError::Gone`] if the runtime was dropped.
    pub fn fork(&self, task: TaskId, at: u32, edit: Edit) -> Result<TaskId, TaskHistoryError> {
        let reader = Arc::clone(self.history.as_ref().ok_or(TaskHistoryError::NotKept)?);
        let fork = reader
            .history(task)?
            .fork(at, edit)
            .map_err(TaskHistoryError::Fork)?;
        let submission =
            self.call_durable(move |runtime, now| runtime.core.fork(now, fork, reader.registry()))?;
        Ok(submission.id)
    }
}

impl Runtime {
    /// [`RuntimeHandle::history`] on the loop's own thread, between runs.
    ///
    /// # Errors
    /// As [`RuntimeHandle::history`].
    pub fn history(&self, task: TaskId) -> Result<TaskHistory, TaskHistoryError> {
        self.history
            .as_ref()
            .ok_or(TaskHistoryError::NotKept)?
            .history(task)
    }

    /// [`RuntimeHandle::fork`] on the loop's own thread, between runs: returns once
    /// the fork's submission is durable; [`run_until_idle`](Runtime::run_until_idle)
    /// or [`run`](Runtime::run) runs it.
    ///
    /// # Errors
    /// As [`RuntimeHandle::fork`].
    pub fn fork(&mut self, task: TaskId, at: u32, edit: Edit) -> Result<TaskId, TaskHistoryError> {
        let reader = Arc::clone(self.history.as_ref().ok_or(TaskHistoryError::NotKept)?);
        let fork = reader
            .history(task)?
            .fork(at, edit)
            .map_err(TaskHistoryError::Fork)?;
        let now = self.clock.now();
        let submitted = self.core.fork(now, fork, reader.registry());
        self.forward_journal();
        self.settle();
        Ok(submitted.map_err(TaskHistoryError::Submit)?.id)
    }
}
