//! Errors of the runtime's handle calls.

use spool_core::{CancelError, SubmitError};

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
}
