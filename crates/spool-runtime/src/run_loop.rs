//! The loop: `Runtime` owns the core scheduler and the clock, takes answers and calls
//! from its mailbox, polls tasks, and hands requests to the executor adapter
//! ([`crate::worker`]), which never calls back into it.

use std::fmt;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use spool_core::{
    CancelError, CancelReason, CancelSignal, JournalEntry, JournalError, JournalSink, Kind,
    NewTask, OutboundRequest, RequestError, RequestKey, Response, Scheduler, Stats, Submission,
    SubmitError, TaskId, TaskState, Time, Value,
};

use crate::Clock;
use crate::worker::{Executors, WorkerReport};

/// Messages to the loop thread: answers from executors, calls from handles.
pub(crate) enum Inbound {
    /// Answers, and an emptied request batch for the loop to reuse.
    Answers(Vec<Response>, Vec<OutboundRequest>),
    Died {
        executor: usize,
        message: String,
    },
    Submit(NewTask, Sender<Result<Submission, SubmitError>>),
    Cancel(TaskId, Sender<Result<(), CancelError>>),
    Query(Box<dyn FnOnce(&Runtime) + Send>),
    Shutdown,
}

impl From<WorkerReport> for Inbound {
    fn from(report: WorkerReport) -> Inbound {
        match report {
            WorkerReport::Answers(answers, emptied) => Inbound::Answers(answers, emptied),
            WorkerReport::Died { executor, message } => Inbound::Died { executor, message },
        }
    }
}

/// A confirmation waiting for the embedder's answer (`answer(key, value)`).
#[derive(Clone, Debug, PartialEq)]
pub struct PendingConfirmation {
    /// The request's key: answer with it.
    pub key: RequestKey,
    /// The question the task asked.
    pub question: Value,
    /// When it was asked.
    pub since: Time,
}

/// What a run of the loop did.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RunReport {
    /// Task polls during the run.
    pub steps: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// The scheduler's counters at the end.
    pub stats: Stats,
}

impl RunReport {
    /// Task polls per second of wall time.
    pub fn steps_per_second(&self) -> f64 {
        self.steps as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The threaded runtime: the core scheduler, the real clock, executor threads.
///
/// The loop runs on the thread that calls [`run_until_idle`](Runtime::run_until_idle)
/// or [`run`](Runtime::run); between runs the runtime can be inspected and fed directly.
/// A kind with no executor ends the requesting task with `NoExecutor`, except
/// confirmations, which wait for [`answer`](crate::RuntimeHandle::answer).
///
/// # Example
/// ```
/// use serde_json::json;
/// use spool_core::{task_fn, Kind, NewTask, Step, TaskState};
/// use spool_runtime::{Runtime, from_fn};
///
/// let mut runtime = Runtime::builder()
///     .executor(Kind::Llm, from_fn(|req| Ok(json!({"echo": req.request.payload}))))
///     .build();
/// let mut asked = false;
/// let id = runtime.submit(NewTask::new(task_fn("ask", move |cx| {
///     if !asked {
///         asked = true;
///         cx.llm(json!("hi"));
///         return Step::Wait;
///     }
///     Step::Done(Ok(cx.take_answer().unwrap().result.unwrap()))
/// }))).unwrap().id;
/// runtime.run_until_idle();
/// assert_eq!(runtime.task_state(id), Some(TaskState::Completed(Ok(json!({"echo": "hi"})))));
/// ```
pub struct Runtime {
    /// The executor adapter: threads, routes, buffered requests. First, so that it is
    /// dropped first: its threads stop and are joined while the rest still stands.
    pub(crate) executors: Executors,
    pub(crate) core: Scheduler,
    pub(crate) clock: Clock,
    pub(crate) journal: Option<Box<dyn JournalSink>>,
    pub(crate) journal_trace: bool,
    /// The first journal write that failed: journaling stopped and the loop shut down.
    pub(crate) journal_error: Option<JournalError>,
    pub(crate) checkpoint_every: Option<u64>,
    /// Entries written since the last checkpoint.
    pub(crate) since_checkpoint: u64,
    pub(crate) inbound_tx: Sender<Inbound>,
    pub(crate) inbound_rx: Receiver<Inbound>,
    pub(crate) held: Vec<PendingConfirmation>,
    pub(crate) flush_at: usize,
    pub(crate) shutdown: bool,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("executors", &self.executors)
            .field("live", &self.core.live_len())
            .field("in_flight", &self.core.in_flight_len())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Submits a task from the loop's own thread.
    ///
    /// # Errors
    /// As [`Scheduler::submit`].
    pub fn submit(&mut self, task: NewTask) -> Result<Submission, SubmitError> {
        let now = self.clock.now();
        self.submit_at(now, task)
    }

    /// Submits; the core journals the task (refusing one it cannot save), and the
    /// entry is written before the id is reported.
    fn submit_at(&mut self, now: Time, task: NewTask) -> Result<Submission, SubmitError> {
        let submission = self.core.submit(now, task);
        self.forward_journal();
        submission
    }

    /// Writes the entries the core journaled since the last call to the sink, if there
    /// is one: the runtime only forwards, the core decides what is an entry.
    fn forward_journal(&mut self) {
        while let Some(entry) = self.core.poll_journal() {
            self.write(&entry);
        }
    }

    /// Writes `entry` to the journal, if there is one. A failed write stops journaling
    /// and shuts the loop down: what it takes in from then on could be lost.
    fn write(&mut self, entry: &JournalEntry) {
        let Some(sink) = self.journal.as_mut() else {
            return;
        };
        match sink.record(entry) {
            Ok(()) => self.since_checkpoint += 1,
            Err(error) => self.journal_failed(error),
        }
    }

    fn journal_failed(&mut self, error: JournalError) {
        tracing::error!(%error, "journal write failed; shutting down");
        self.journal = None;
        self.core.record_journal(false);
        self.journal_error = Some(error);
        self.shutdown = true;
    }

    /// Hands the journal a snapshot of the scheduler now, between two steps. A store
    /// recovers from the latest checkpoint and the entries after it.
    ///
    /// # Errors
    /// [`JournalError::Snapshot`] if the scheduler cannot be snapshotted (a task that
    /// cannot be saved; the journal goes on), or the sink's error (journaling then
    /// stops and the loop shuts down).
    pub fn checkpoint(&mut self) -> Result<(), JournalError> {
        // Every entry whose effect the snapshot holds goes before it, or a recovery
        // would apply it twice.
        self.forward_journal();
        let Some(sink) = self.journal.as_mut() else {
            return Ok(());
        };
        let bytes = self.core.snapshot().and_then(|s| s.encode())?;
        match sink.checkpoint(&bytes) {
            Ok(()) => {
                self.since_checkpoint = 0;
                Ok(())
            }
            Err(error) => {
                self.journal_failed(error.clone());
                Err(error)
            }
        }
    }

    /// Checkpoints if `checkpoint_every` entries were written since the last one.
    fn checkpoint_if_due(&mut self) {
        if self
            .checkpoint_every
            .is_some_and(|every| self.since_checkpoint >= every)
        {
            if let Err(error) = self.checkpoint() {
                tracing::error!(%error, "checkpoint failed");
            }
        }
    }

    /// Writes the trace events since the last call to the journal, if asked to.
    fn record_events(&mut self) {
        if self.journal.is_none() || !self.journal_trace {
            return;
        }
        for event in self.core.trace_mut().take_events() {
            self.write(&JournalEntry::Event(event));
        }
    }

    /// Why journaling stopped, if a write failed.
    pub fn journal_error(&self) -> Option<&JournalError> {
        self.journal_error.as_ref()
    }

    /// Cancels a task from the loop's own thread.
    ///
    /// # Errors
    /// As [`Scheduler::cancel`].
    pub fn cancel(&mut self, id: TaskId) -> Result<(), CancelError> {
        let now = self.clock.now();
        let result = self.cancel_at(now, id);
        self.route();
        self.flush();
        result
    }

    /// A task's state.
    pub fn task_state(&self, id: TaskId) -> Option<TaskState> {
        self.core.task_state(id)
    }

    /// The core scheduler, to inspect it.
    pub fn scheduler(&self) -> &Scheduler {
        &self.core
    }

    /// The clock the loop reads.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Confirmations waiting for an answer, oldest first.
    pub fn pending_confirmations(&self) -> &[PendingConfirmation] {
        &self.held
    }

    /// Runs until nothing is ready, no request is out with an executor and no timer is
    /// set (confirmations may still wait for a human), or until shutdown.
    pub fn run_until_idle(&mut self) -> RunReport {
        self.run_loop(true)
    }

    /// Runs until a handle calls [`shutdown`](crate::RuntimeHandle::shutdown).
    pub fn run(&mut self) -> RunReport {
        self.run_loop(false)
    }

    fn run_loop(&mut self, until_idle: bool) -> RunReport {
        let started = Instant::now();
        let polls_before = self.core.stats().polls;
        loop {
            let now = self.clock.now();
            self.drain_inbound();
            self.core.handle_timeout(now);
            // Write-ahead: the answers taken are journaled before the tasks they wake
            // are polled, ...
            self.forward_journal();
            // Poll a batch of tasks, send what they asked for, and go round: executors
            // start on the first batch while the loop polls the next.
            let mut polled = 0;
            while polled < self.flush_at && self.core.step(now).is_some() {
                polled += 1;
            }
            // ... and the steps before the requests they made are routed.
            self.forward_journal();
            self.route();
            self.flush();
            self.record_events();
            self.checkpoint_if_due();
            if self.shutdown {
                // Consumed: the next run goes on normally.
                self.shutdown = false;
                break;
            }
            if self.core.ready_len() > 0 {
                continue;
            }
            let timeout = self.core.poll_timeout();
            let with_executors = self.core.in_flight_len().saturating_sub(self.held.len());
            if until_idle && with_executors == 0 && timeout.is_none() {
                break;
            }
            let msg = match timeout {
                // A timeout means the timer is due; the next turn fires it.
                Some(at) => self.inbound_rx.recv_deadline(self.clock.instant(at)).ok(),
                None => self.inbound_rx.recv().ok(),
            };
            if let Some(msg) = msg {
                self.handle_inbound(msg);
            }
        }
        RunReport {
            steps: self.core.stats().polls - polls_before,
            elapsed: started.elapsed(),
            stats: self.core.stats().clone(),
        }
    }

    fn drain_inbound(&mut self) {
        loop {
            match self.inbound_rx.try_recv() {
                Ok(msg) => self.handle_inbound(msg),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
            }
        }
    }

    fn handle_inbound(&mut self, msg: Inbound) {
        let now = self.clock.now();
        match msg {
            Inbound::Answers(mut batch, emptied) => {
                for response in batch.drain(..) {
                    if !self.held.is_empty() {
                        self.held.retain(|h| h.key != response.key);
                    }
                    self.answer_at(now, response);
                }
                self.executors.recycle(batch, emptied);
            }
            Inbound::Died { executor, message } => self.executor_died(executor, message),
            Inbound::Submit(task, reply) => {
                let _ = reply.send(self.submit_at(now, task));
            }
            Inbound::Cancel(id, reply) => {
                let _ = reply.send(self.cancel_at(now, id));
            }
            Inbound::Query(f) => f(self),
            Inbound::Shutdown => self.shutdown = true,
        }
    }

    /// Hands an answer to the core (which journals it), and writes the entry.
    fn answer_at(&mut self, now: Time, response: Response) {
        let _ = self.core.handle_response(now, response);
        self.forward_journal();
    }

    /// Cancels a task (the core journals it), and writes the entry.
    fn cancel_at(&mut self, now: Time, id: TaskId) -> Result<(), CancelError> {
        let result = self.core.cancel(now, id, CancelReason::Requested);
        self.forward_journal();
        result
    }

    /// Moves requests and cancel signals from the core to executor buffers.
    fn route(&mut self) {
        let now = self.clock.now();
        while let Some(signal) = self.core.poll_cancel() {
            self.send_cancel(signal);
        }
        // Requests no executor can take are answered after every request is out, as
        // the runtime always did (the core's journal records either order exactly).
        let mut failed: Vec<(RequestKey, Option<RequestError>)> = Vec::new();
        while let Some(out) = self.core.poll_request() {
            match self.executors.route(&out.request.kind) {
                Some(index) => match self.executors.died(index) {
                    Some(error) => failed.push((out.key, Some(error))),
                    None => self.executors.push(index, out),
                },
                None if out.request.kind == Kind::Confirm => {
                    self.held.push(PendingConfirmation {
                        key: out.key,
                        question: out.request.payload.into_value(),
                        since: now,
                    });
                }
                None => failed.push((out.key, None)),
            }
        }
        for (key, error) in failed {
            match error {
                Some(error) => self.answer_at(now, Response::err(key, error)),
                None => {
                    let _ = self.core.handle_unroutable(now, key);
                }
            }
        }
        // Ending a task above may have raised more cancel signals.
        while let Some(signal) = self.core.poll_cancel() {
            self.send_cancel(signal);
        }
        self.forward_journal();
    }

    fn send_cancel(&mut self, signal: CancelSignal) {
        match self.executors.route(&signal.kind) {
            Some(index) => self.executors.cancel(index, signal),
            None => self.held.retain(|h| h.key != signal.key),
        }
    }

    fn flush(&mut self) {
        self.executors.flush();
    }

    fn executor_died(&mut self, index: usize, message: String) {
        let Some(name) = self.executors.mark_dead(index, &message) else {
            return;
        };
        tracing::error!(executor = %name, %message, "executor thread died; failing its requests");
        let now = self.clock.now();
        for pending in self.core.in_flight() {
            if self.executors.route(&pending.request.kind) == Some(index) {
                let error = RequestError::ExecutorDied {
                    kind: name.clone(),
                    message: message.clone(),
                };
                self.answer_at(now, Response::err(pending.key, error));
            }
        }
    }
}
