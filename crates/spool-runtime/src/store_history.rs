//! A task's history read back from a store ([`StoreHistory`]), and what can go wrong
//! reading it or forking from it ([`TaskHistoryError`]).
//!
//! The store keeps segments of history (a checkpoint and the journal entries after it);
//! a task's history is read by replaying the journal from the newest kept checkpoint
//! taken before the task was submitted.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use spool_core::{
    ForkError, HistoryError, Journal, Snapshot, SubmitError, TaskHistory, TaskId, TaskRegistry,
};
use spool_durable::{DurableError, DurableStore};

use crate::error::RuntimeError;

/// Why a task's history could not be read, or a fork of it made.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TaskHistoryError {
    /// The runtime reads no history: it was built without a store to read it from
    /// ([`RuntimeBuilder::history`](crate::RuntimeBuilder::history)).
    #[error(
        "no history is kept: this runtime has no store to read it from (run it on a store that keeps history)"
    )]
    NotKept,
    /// No task of this id was submitted in the history kept, and none after it.
    #[error("no task {task} in the history kept (never submitted, or spawned by another task)")]
    UnknownTask {
        /// The task.
        task: TaskId,
    },
    /// The task was submitted before the oldest checkpoint the store keeps: its
    /// history was dropped by the store's retention.
    #[error(
        "the history of task {task} is no longer kept: it was submitted before the oldest kept checkpoint, which the store's retention dropped"
    )]
    Dropped {
        /// The task.
        task: TaskId,
    },
    /// The history kept could not be read back as a task's history (a task spawned
    /// by another task, a journal that does not replay).
    #[error(transparent)]
    History(HistoryError),
    /// The fork could not be made: a step past the history, an edited request not
    /// made before it, a new input the task's type refuses.
    #[error(transparent)]
    Fork(ForkError),
    /// The scheduler refused the fork's submission.
    #[error("the fork could not be submitted: {0}")]
    Submit(SubmitError),
    /// The store could not be read.
    #[error("cannot read the history from the store {store}: {reason}")]
    Store {
        /// The store's name.
        store: String,
        /// What it said.
        reason: String,
    },
    /// The runtime was dropped, so nobody submits the fork.
    #[error("the runtime is gone (dropped or its loop thread ended)")]
    Gone,
}

impl From<RuntimeError> for TaskHistoryError {
    fn from(error: RuntimeError) -> TaskHistoryError {
        match error {
            RuntimeError::Submit(error) => TaskHistoryError::Submit(error),
            _ => TaskHistoryError::Gone,
        }
    }
}

impl From<HistoryError> for TaskHistoryError {
    fn from(error: HistoryError) -> TaskHistoryError {
        match error {
            HistoryError::NotFound { task } => TaskHistoryError::UnknownTask { task },
            other => TaskHistoryError::History(other),
        }
    }
}

/// Reads tasks' histories from a store that keeps history: a task's history is the
/// journal from the newest kept checkpoint taken before its submission, replayed with
/// the task types of `registry` (nothing is sent anywhere). A runtime built with
/// [`RuntimeBuilder::history`](crate::RuntimeBuilder::history) holds one; a tool that reads a store without running
/// it makes its own.
///
/// # Example
/// ```
/// use std::sync::Arc;
/// use spool_core::{TaskId, TaskRegistry};
/// use spool_durable::DurableStore;
/// use spool_runtime::{StoreHistory, TaskHistoryError};
///
/// fn steps(store: Arc<dyn DurableStore>, task: TaskId) -> Result<usize, TaskHistoryError> {
///     let history = StoreHistory::new(store, TaskRegistry::new()).history(task)?;
///     Ok(history.steps.len())
/// }
/// # let _ = steps;
/// ```
pub struct StoreHistory {
    store: Arc<dyn DurableStore>,
    registry: TaskRegistry,
    /// The next task id of each kept checkpoint read so far, by checkpoint id: a
    /// checkpoint never changes, so each is decoded once.
    starts: Mutex<BTreeMap<u64, TaskId>>,
}

impl fmt::Debug for StoreHistory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreHistory")
            .field("store", &self.store.name())
            .finish_non_exhaustive()
    }
}

/// What looking at one kept checkpoint found: its next task id, and the journal read
/// from it (kept, in case it is the one to replay).
struct Probe {
    next_task: TaskId,
    journal: Option<Journal>,
}

impl StoreHistory {
    /// Reads `store`, rebuilding tasks with `registry`'s types.
    pub fn new(store: Arc<dyn DurableStore>, registry: TaskRegistry) -> StoreHistory {
        StoreHistory {
            store,
            registry,
            starts: Mutex::new(BTreeMap::new()),
        }
    }

    /// The registry the runtime's tasks are rebuilt with.
    pub(crate) fn registry(&self) -> &TaskRegistry {
        &self.registry
    }

    /// The history of `task`: the journal from the newest kept checkpoint taken
    /// before its submission, replayed with the task watched. A checkpoint the store
    /// dropped meanwhile (retention runs at each checkpoint) makes it look again, once.
    /// A blocking read of the store.
    ///
    /// # Errors
    /// [`TaskHistoryError::UnknownTask`] for a task the history does not submit,
    /// [`TaskHistoryError::Dropped`] for one submitted before the oldest checkpoint
    /// kept, [`TaskHistoryError::History`] for a spawned task or a journal that does
    /// not replay, [`TaskHistoryError::Store`] when the store cannot be read.
    pub fn history(&self, task: TaskId) -> Result<TaskHistory, TaskHistoryError> {
        match self.try_history(task) {
            Err(Retry::Dropped) => self.try_history(task).map_err(|e| match e {
                Retry::Dropped => TaskHistoryError::Dropped { task },
                Retry::Failed(error) => error,
            }),
            Err(Retry::Failed(error)) => Err(error),
            Ok(history) => Ok(history),
        }
    }

    fn try_history(&self, task: TaskId) -> Result<TaskHistory, Retry> {
        let segments = self.store.segments().map_err(|e| self.store_error(&e))?;
        let checkpoints: Vec<u64> = segments.iter().map(|s| s.checkpoint).collect();
        let Some(found) = self.newest_before(&checkpoints, task)? else {
            // Nothing kept starts before it: dropped, or (with no checkpoint at all)
            // never submitted.
            return Err(Retry::Failed(if checkpoints.is_empty() {
                TaskHistoryError::UnknownTask { task }
            } else {
                TaskHistoryError::Dropped { task }
            }));
        };
        let journal = match found.journal {
            Some(journal) => journal,
            None => self.read(found.checkpoint)?.0,
        };
        TaskHistory::from_journal(&journal, task, &self.registry)
            .map_err(|e| Retry::Failed(e.into()))
    }

    /// The newest of `checkpoints` (oldest first) whose snapshot was taken before
    /// `task` was submitted (its next task id is at most `task`), with the journal
    /// read from it if one was read; `None` if none was. Looks from the newest back,
    /// doubling the stride, then halves the gap: a recent task costs one or two reads,
    /// an old one a few.
    fn newest_before(&self, checkpoints: &[u64], task: TaskId) -> Result<Option<Found>, Retry> {
        let Some(last) = checkpoints.len().checked_sub(1) else {
            return Ok(None);
        };
        // `after`: the oldest index known to start after the task.
        let mut after = checkpoints.len();
        let mut stride = 1;
        let mut at = last;
        let (mut low, mut probe) = loop {
            let probe = self.probe(checkpoints[at])?;
            if probe.next_task <= task {
                break (at, probe);
            }
            after = at;
            if at == 0 {
                return Ok(None);
            }
            at = at.saturating_sub(stride);
            stride *= 2;
        };
        // `low` starts before the task and `after` after it: the newest is in between.
        while after - low > 1 {
            let mid = low + (after - low) / 2;
            let candidate = self.probe(checkpoints[mid])?;
            if candidate.next_task <= task {
                (low, probe) = (mid, candidate);
            } else {
                after = mid;
            }
        }
        Ok(Some(Found {
            checkpoint: checkpoints[low],
            journal: probe.journal,
        }))
    }

    /// The next task id of kept checkpoint `checkpoint`, from what was read before or
    /// from the store (the journal read then is kept in the answer).
    fn probe(&self, checkpoint: u64) -> Result<Probe, Retry> {
        let known = self
            .starts
            .lock()
            .ok()
            .and_then(|starts| starts.get(&checkpoint).copied());
        if let Some(next_task) = known {
            return Ok(Probe {
                next_task,
                journal: None,
            });
        }
        let (journal, next_task) = self.read(checkpoint)?;
        if let Ok(mut starts) = self.starts.lock() {
            starts.insert(checkpoint, next_task);
        }
        Ok(Probe {
            next_task,
            journal: Some(journal),
        })
    }

    /// The journal from kept checkpoint `checkpoint` and the next task id of its
    /// snapshot.
    fn read(&self, checkpoint: u64) -> Result<(Journal, TaskId), Retry> {
        let journal = match self.store.recover_from(checkpoint) {
            Ok(journal) => journal,
            Err(DurableError::NoCheckpoint(_)) => return Err(Retry::Dropped),
            Err(error) => return Err(self.store_error(&error)),
        };
        let start = Snapshot::decode(&journal.start).map_err(|e| self.store_error(&e))?;
        Ok((journal, start.next_task_id()))
    }

    fn store_error(&self, error: &dyn fmt::Display) -> Retry {
        Retry::Failed(TaskHistoryError::Store {
            store: self.store.name(),
            reason: error.to_string(),
        })
    }
}

/// The kept checkpoint a history is read from.
struct Found {
    checkpoint: u64,
    journal: Option<Journal>,
}

/// Why a read stopped: a checkpoint dropped while it looked (worth one more look), or
/// an error to give.
enum Retry {
    Dropped,
    Failed(TaskHistoryError),
}
