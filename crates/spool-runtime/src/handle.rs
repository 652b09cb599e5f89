//! `RuntimeHandle`: the runtime's mailbox seen from other threads.

use std::fmt;

use crossbeam_channel::Sender;
use spool_core::{
    NewTask, QueueDetail, QueueState, RequestKey, Response, Stats, Submission, TaskId, Value,
};

use crate::error::RuntimeError;
use crate::run_loop::{Call, Inbound, PendingConfirmation, Runtime};

impl Runtime {
    /// A handle for other threads: submit, cancel, answer, query, shut down.
    pub fn handle(&self) -> RuntimeHandle {
        RuntimeHandle {
            inbound: self.inbound_tx.clone(),
            history: self.history.clone(),
        }
    }
}

/// Talks to a [`Runtime`] from any thread. Calls that return a value wait for the loop
/// to take them, so they answer while the runtime is running (or is next run).
#[derive(Clone)]
pub struct RuntimeHandle {
    pub(crate) inbound: Sender<Inbound>,
    /// Where tasks' histories are read, if the runtime has a store for them.
    pub(crate) history: Option<std::sync::Arc<crate::store_history::StoreHistory>>,
}

impl fmt::Debug for RuntimeHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RuntimeHandle")
    }
}

impl RuntimeHandle {
    /// Submits a task and waits for its id.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`] if the runtime was dropped; [`RuntimeError::Submit`] if
    /// the scheduler refused the task.
    pub fn submit(&self, task: NewTask) -> Result<Submission, RuntimeError> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.inbound
            .send(Inbound::Submit(task, tx))
            .map_err(|_| RuntimeError::Gone)?;
        Ok(rx.recv().map_err(|_| RuntimeError::Gone)??)
    }

    /// Cancels a task and waits for the result.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`]; [`RuntimeError::Cancel`] for an unknown or ended task.
    pub fn cancel(&self, id: TaskId) -> Result<(), RuntimeError> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.inbound
            .send(Inbound::Cancel(id, tx))
            .map_err(|_| RuntimeError::Gone)?;
        Ok(rx.recv().map_err(|_| RuntimeError::Gone)??)
    }

    /// Answers a confirmation (or any request) with a value. Does not wait.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`] if the runtime was dropped.
    pub fn answer(&self, key: RequestKey, value: Value) -> Result<(), RuntimeError> {
        self.respond(Response::ok(key, value))
    }

    /// Answers a request with any result. Does not wait.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`] if the runtime was dropped.
    pub fn respond(&self, response: Response) -> Result<(), RuntimeError> {
        self.inbound
            .send(Inbound::Answers(vec![response], Vec::new()))
            .map_err(|_| RuntimeError::Gone)
    }

    /// Runs `f` on the loop thread with the runtime, and returns what it returns.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`] if the runtime was dropped.
    pub fn query<T, F>(&self, f: F) -> Result<T, RuntimeError>
    where
        T: Send + 'static,
        F: FnOnce(&Runtime) -> T + Send + 'static,
    {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let call = Box::new(move |runtime: &Runtime| {
            let _ = tx.send(f(runtime));
        });
        self.inbound
            .send(Inbound::Query(call))
            .map_err(|_| RuntimeError::Gone)?;
        rx.recv().map_err(|_| RuntimeError::Gone)
    }

    /// Runs `f` on the loop's thread with the time of its turn, and waits for what it
    /// gave, which the loop sends once what `f` journaled is durable.
    pub(crate) fn call_durable<T, E, F>(&self, f: F) -> Result<T, RuntimeError>
    where
        T: Send + 'static,
        E: Send + 'static,
        RuntimeError: From<E>,
        F: FnOnce(&mut Runtime, spool_core::Time) -> Result<T, E> + Send + 'static,
    {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let call: Call = Box::new(move |runtime: &mut Runtime, now| {
            let out = f(runtime, now);
            Box::new(move || {
                let _ = tx.send(out);
            })
        });
        self.inbound
            .send(Inbound::Call(call))
            .map_err(|_| RuntimeError::Gone)?;
        Ok(rx.recv().map_err(|_| RuntimeError::Gone)??)
    }

    /// The scheduler's counters.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`] if the runtime was dropped.
    pub fn stats(&self) -> Result<Stats, RuntimeError> {
        self.query(|runtime| runtime.scheduler().stats().clone())
    }

    /// The scheduler at a glance: running, queued, waiting, rate limited, counters.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`] if the runtime was dropped.
    pub fn queue_state(&self) -> Result<QueueState, RuntimeError> {
        self.query(|runtime| runtime.scheduler().queue_state())
    }

    /// One row per live task, in the policy's order (see
    /// [`Scheduler::queue_details`](spool_core::Scheduler::queue_details)).
    ///
    /// # Errors
    /// [`RuntimeError::Gone`] if the runtime was dropped.
    pub fn queue_details(&self) -> Result<Vec<QueueDetail>, RuntimeError> {
        self.query(|runtime| runtime.scheduler().queue_details())
    }

    /// The `debug scheduler` table: every live task, its priority, age, depth,
    /// iteration and whether it can run.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`] if the runtime was dropped.
    pub fn debug_table(&self) -> Result<String, RuntimeError> {
        self.query(|runtime| runtime.scheduler().debug_table())
    }

    /// Confirmations waiting for an answer.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`] if the runtime was dropped.
    pub fn pending_confirmations(&self) -> Result<Vec<PendingConfirmation>, RuntimeError> {
        self.query(|runtime| runtime.pending_confirmations().to_vec())
    }

    /// Asks the loop to stop after its current turn; `run` and `run_until_idle` return.
    ///
    /// # Errors
    /// [`RuntimeError::Gone`] if the runtime was dropped.
    pub fn shutdown(&self) -> Result<(), RuntimeError> {
        self.inbound
            .send(Inbound::Shutdown)
            .map_err(|_| RuntimeError::Gone)
    }
}
