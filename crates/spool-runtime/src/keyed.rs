//! Submissions with an idempotency key: the key checked and the task submitted in one
//! loop call, so that repeats arriving at once need no lock of their own, and a key
//! reused for a different request is told apart from a repeat.

use spool_core::{KeyedSubmission, NewTask, TaskState};

use crate::error::RuntimeError;
use crate::handle::RuntimeHandle;
use crate::run_loop::Runtime;

/// What a submission with a key came to ([`RuntimeHandle::submit_keyed`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Keyed {
    /// The core's answer: submitted, a repeat of the request that holds the key, or
    /// the key reused for a different request.
    pub outcome: KeyedSubmission,
    /// For a held key, the state now of the task holding it (`None`: that task's
    /// result was forgotten or evicted; the key is kept longer). `None` for a
    /// submission.
    pub holder_state: Option<TaskState>,
}

impl Runtime {
    /// Submits `task` unless its key is held, from the loop's own thread, as
    /// [`Scheduler::submit_keyed`](spool_core::Scheduler::submit_keyed); with a
    /// journal, returns once durable.
    ///
    /// # Errors
    /// As [`Scheduler::submit`](spool_core::Scheduler::submit).
    pub fn submit_keyed(&mut self, task: NewTask) -> Result<Keyed, spool_core::SubmitError> {
        let now = self.clock.now();
        let out = self.submit_keyed_at(now, task);
        self.settle();
        out
    }

    fn submit_keyed_at(
        &mut self,
        now: spool_core::Time,
        task: NewTask,
    ) -> Result<Keyed, spool_core::SubmitError> {
        let outcome = self.core.submit_keyed(now, task)?;
        self.forward_journal();
        let holder_state = match &outcome {
            KeyedSubmission::Existing { record, .. } | KeyedSubmission::Reused { record, .. } => {
                self.core.task_state(record.task)
            }
            _ => None,
        };
        Ok(Keyed {
            outcome,
            holder_state,
        })
    }
}

impl RuntimeHandle {
    /// Submits `task` unless its [key](NewTask::key) is held, in one call to the loop
    /// (see [`Scheduler::submit_keyed`](spool_core::Scheduler::submit_keyed)); returns
    /// once what it journaled is durable. Repeats sent at once from many threads make
    /// one task: the loop takes them one at a time.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`] if the runtime was dropped; [`RuntimeError::Submit`] if
    /// the scheduler refused the task.
    pub fn submit_keyed(&self, task: NewTask) -> Result<Keyed, RuntimeError> {
        self.call_durable(move |runtime, now| runtime.submit_keyed_at(now, task))
    }
}
