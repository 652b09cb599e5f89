//! Errors of building a runtime and of its handle calls.

use spool_core::{CancelError, JournalError, ScheduleError, SubmitError};

/// Why a call through the runtime failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The runtime was dropped, so nobody will answer.
    #[error("the runtime is gone (dropped or its loop thread ended)")]
    Gone,
    /// The scheduler refused the submission.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The task could not be canceled.
    #[error(transparent)]
    Cancel(#[from] CancelError),
    /// The schedule operation was refused (nothing changed).
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    /// The runtime could not be built: its journal could not start (the sink failed
    /// to write the starting snapshot — a store that is damaged, full or read-only —
    /// or the starting scheduler holds a task that cannot be saved).
    #[error("the runtime's journal could not start: {0}")]
    JournalStart(#[source] JournalError),
    /// The runtime could not be built: the operating system refused to start an
    /// executor thread.
    #[error("the runtime could not start the executor thread `{thread}`: {reason}")]
    Spawn {
        /// The thread's name.
        thread: String,
        /// Why.
        reason: String,
    },
}
