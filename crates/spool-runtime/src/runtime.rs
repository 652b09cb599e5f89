//! `Runtime`: the blocking poll loop around the core, its executors and its handle.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use spool_core::{
    CancelError, CancelReason, CancelSignal, Config, Journal, JournalEntry, Kind, NewTask,
    OutboundRequest, PolicyChoice, QueueDetail, QueueState, ReplayError, RequestError, RequestKey,
    Response, RestoreError, Scheduler, Snapshot, Stats, Submission, SubmitError, TaskId,
    TaskRegistry, TaskState, Time, Value,
};

use crate::JournalSink;

use crate::executor::{Executor, Replies};
use crate::{Clock, RuntimeError};

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

/// Messages to an executor thread.
enum ExecMsg {
    /// Requests, and an emptied answer batch for the executor to reuse.
    Batch(Vec<OutboundRequest>, Vec<Response>),
    Cancel(CancelSignal),
    Stop,
}

#[derive(Clone, Debug)]
enum Route {
    Exact(Kind),
    AllTools,
}

struct ExecutorEntry {
    name: String,
    sender: Sender<ExecMsg>,
    workers: usize,
    buffer: Vec<OutboundRequest>,
    dead: Option<String>,
}

type Factory = Box<dyn FnMut() -> Box<dyn Executor>>;

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

/// How long a runtime keeps an ended task's result unless configured otherwise.
pub const DEFAULT_RETENTION: std::time::Duration = std::time::Duration::from_secs(600);

/// Sets up a [`Runtime`]: its configuration, policy and executors.
///
/// # Example
/// ```
/// use serde_json::json;
/// use spool_core::Kind;
/// use spool_runtime::{Runtime, from_fn};
///
/// let runtime = Runtime::builder()
///     .executor(Kind::Llm, from_fn(|_req| Ok(json!("hello"))))
///     .executor(Kind::tool("ls"), from_fn(|_req| Ok(json!(["a.txt"]))))
///     .build();
/// ```
pub struct RuntimeBuilder {
    config: Config,
    start: Option<Scheduler>,
    journal: Option<Box<dyn JournalSink>>,
    journal_trace: bool,
    checkpoint_every: Option<u64>,
    executors: Vec<(Route, String, usize, Factory)>,
    flush_at: usize,
}

impl fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("config", &self.config)
            .field(
                "executors",
                &self.executors.iter().map(|e| &e.1).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl RuntimeBuilder {
    /// The scheduler's configuration.
    #[must_use]
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// The run-queue policy (FIFO if not set); the same as setting it in the
    /// [`config`](RuntimeBuilder::config).
    #[must_use]
    pub fn policy(mut self, policy: PolicyChoice) -> Self {
        self.config.policy = policy;
        self
    }

    /// Serves `kind` with `executor` on a thread of its own.
    #[must_use]
    pub fn executor(self, kind: Kind, executor: impl Executor) -> Self {
        let mut once = Some(executor);
        self.add(Route::Exact(kind.clone()), kind.to_string(), 1, move || {
            let executor = once.take().expect("a one-thread executor is made once");
            Box::new(executor) as Box<dyn Executor>
        })
    }

    /// Serves `kind` with a pool of `workers` threads, each with an executor made by
    /// `make`; a batch of requests is split across the pool.
    #[must_use]
    pub fn pool<E, F>(self, kind: Kind, workers: usize, mut make: F) -> Self
    where
        E: Executor,
        F: FnMut() -> E + 'static,
    {
        self.add(
            Route::Exact(kind.clone()),
            kind.to_string(),
            workers.max(1),
            move || Box::new(make()) as Box<dyn Executor>,
        )
    }

    /// Serves every tool that has no executor of its own with `executor`.
    #[must_use]
    pub fn tools(self, executor: impl Executor) -> Self {
        let mut once = Some(executor);
        self.add(Route::AllTools, "tool:*".to_owned(), 1, move || {
            let executor = once.take().expect("a one-thread executor is made once");
            Box::new(executor) as Box<dyn Executor>
        })
    }

    fn add(
        mut self,
        route: Route,
        name: String,
        workers: usize,
        factory: impl FnMut() -> Box<dyn Executor> + 'static,
    ) -> Self {
        self.executors
            .push((route, name, workers, Box::new(factory)));
        self
    }

    /// How many requests for one executor are batched before they are sent while the
    /// loop is still polling tasks (default 256). Smaller sends sooner; larger sends fewer
    /// messages.
    #[must_use]
    pub fn flush_at(mut self, requests: usize) -> Self {
        self.flush_at = requests.max(1);
        self
    }

    /// Goes on from `snapshot` (tasks rebuilt through `registry`) instead of an empty
    /// scheduler; requests that were with executors are sent again with the same keys.
    /// The snapshot's configuration replaces [`config`](RuntimeBuilder::config).
    ///
    /// # Errors
    /// As [`Scheduler::restore`].
    pub fn restore(
        mut self,
        snapshot: &Snapshot,
        registry: &TaskRegistry,
    ) -> Result<Self, RestoreError> {
        let mut core = Scheduler::restore(snapshot, registry)?;
        core.resend_in_flight();
        self.start = Some(core);
        Ok(self)
    }

    /// Goes on from where a recorded run stopped: restores the journal's starting
    /// snapshot and applies every entry (the runtime's own journal, or a store's last
    /// checkpoint and the journal since), then sends again what was with executors.
    ///
    /// # Errors
    /// As [`Scheduler::replay`].
    pub fn recover(
        mut self,
        journal: &Journal,
        registry: &TaskRegistry,
    ) -> Result<Self, ReplayError> {
        let replay = Scheduler::replay(journal, registry)?;
        let mut core = replay.scheduler;
        core.record_trace(false);
        core.trace_mut().take_events();
        core.resend_in_flight();
        self.start = Some(core);
        Ok(self)
    }

    /// Writes every input the runtime takes to `sink`, starting with a snapshot of
    /// where it starts: a journal to replay the run in `TestScheduler`, or a store's
    /// write-ahead log. Every task submitted must then be saveable
    /// ([`AgentTask::save`](spool_core::AgentTask::save)); one that is not is refused.
    #[must_use]
    pub fn journal(mut self, sink: impl JournalSink) -> Self {
        self.journal = Some(Box::new(sink));
        self
    }

    /// Also writes the trace events the run produces to the journal, so that a replay
    /// can say where it first differs.
    #[must_use]
    pub fn journal_trace(mut self, on: bool) -> Self {
        self.journal_trace = on;
        self
    }

    /// Hands the journal a checkpoint (a snapshot) at the end of the first loop turn
    /// after every `entries` entries, so a store can recover from it and forget what
    /// came before.
    #[must_use]
    pub fn checkpoint_every(mut self, entries: u64) -> Self {
        self.checkpoint_every = Some(entries.max(1));
        self
    }

    /// Starts the executor threads and returns the runtime; for a runtime without a
    /// [`journal`](RuntimeBuilder::journal), whose start cannot fail. With a journal
    /// (a store on disk), use [`try_build`](RuntimeBuilder::try_build).
    ///
    /// # Panics
    /// Where [`try_build`](RuntimeBuilder::try_build) returns an error.
    pub fn build(self) -> Runtime {
        match self.try_build() {
            Ok(runtime) => runtime,
            Err(error) => panic!("{error}"),
        }
    }

    /// Starts the journal (writing its starting snapshot) and the executor threads,
    /// and returns the runtime.
    ///
    /// # Errors
    /// [`RuntimeError::JournalStart`] if the journal cannot start: its sink fails (a
    /// store that is damaged, full or read-only), or the starting scheduler holds a
    /// task that cannot be saved. [`RuntimeError::Spawn`] if the operating system
    /// refuses to start an executor thread. Nothing keeps running after an error.
    pub fn try_build(self) -> Result<Runtime, RuntimeError> {
        let (inbound_tx, inbound_rx) = crossbeam_channel::unbounded();
        let mut core = match self.start {
            Some(core) => core,
            None => Scheduler::new(self.config),
        };
        let mut journal = self.journal;
        if let Some(sink) = journal.as_mut() {
            if self.journal_trace {
                core.record_trace(true);
            }
            let start = core
                .snapshot()
                .and_then(|s| s.encode())
                .map_err(|e| e.to_string())
                .and_then(|bytes| sink.start(&bytes));
            start.map_err(RuntimeError::JournalStart)?;
        }
        let mut runtime = Runtime {
            clock: Clock::starting_at(core.now()),
            core,
            journal,
            journal_trace: self.journal_trace,
            journal_error: None,
            checkpoint_every: self.checkpoint_every,
            since_checkpoint: 0,
            inbound_tx,
            inbound_rx,
            executors: Vec::new(),
            routes: Vec::new(),
            held: Vec::new(),
            spare_requests: Vec::new(),
            spare_answers: Vec::new(),
            threads: Vec::new(),
            flush_at: self.flush_at,
            shutdown: false,
        };
        for (route, name, workers, mut factory) in self.executors {
            let index = runtime.executors.len();
            let (sender, receiver) = crossbeam_channel::unbounded();
            for worker in 0..workers {
                let executor = factory();
                let receiver = receiver.clone();
                let inbound = runtime.inbound_tx.clone();
                let thread_name = format!("spool-{name}-{worker}");
                let thread = thread::Builder::new()
                    .name(thread_name.clone())
                    .spawn(move || worker_thread(index, executor, receiver, inbound))
                    .map_err(|error| RuntimeError::Spawn {
                        thread: thread_name,
                        reason: error.to_string(),
                    })?;
                runtime.threads.push(thread);
            }
            runtime.executors.push(ExecutorEntry {
                name,
                sender,
                workers,
                buffer: Vec::new(),
                dead: None,
            });
            runtime.routes.push((route, index));
        }
        Ok(runtime)
    }
}

fn worker_thread(
    index: usize,
    mut executor: Box<dyn Executor>,
    rx: Receiver<ExecMsg>,
    inbound: Sender<Inbound>,
) {
    let result = catch_unwind(AssertUnwindSafe(|| {
        worker_loop(executor.as_mut(), &rx, &inbound)
    }));
    if let Err(panic) = result {
        let message = if let Some(s) = panic.downcast_ref::<&str>() {
            (*s).to_owned()
        } else if let Some(s) = panic.downcast_ref::<String>() {
            s.clone()
        } else {
            "a panic with a payload that is not text".to_owned()
        };
        let _ = inbound.send(Inbound::Died {
            executor: index,
            message,
        });
    }
}

fn worker_loop(executor: &mut dyn Executor, rx: &Receiver<ExecMsg>, inbound: &Sender<Inbound>) {
    let mut batch = Vec::new();
    let mut emptied = Vec::new();
    let mut next_poll: Option<Instant> = None;
    loop {
        let msg = match next_poll {
            Some(at) => match rx.recv_deadline(at) {
                Ok(msg) => Some(msg),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            },
            None => match rx.recv() {
                Ok(msg) => Some(msg),
                Err(_) => return,
            },
        };
        let mut replies = Replies {
            batch: &mut batch,
            inbound,
        };
        match msg {
            Some(ExecMsg::Batch(mut requests, spare)) => {
                if replies.batch.capacity() == 0 {
                    *replies.batch = spare;
                }
                for request in requests.drain(..) {
                    executor.execute(request, &mut replies);
                }
                emptied = requests;
            }
            Some(ExecMsg::Cancel(signal)) => executor.cancel(signal, &mut replies),
            Some(ExecMsg::Stop) => return,
            None => {}
        }
        next_poll = executor.poll(Instant::now(), &mut replies);
        if !batch.is_empty() {
            let answers =
                Inbound::Answers(std::mem::take(&mut batch), std::mem::take(&mut emptied));
            if inbound.send(answers).is_err() {
                return;
            }
        }
    }
}

/// The threaded runtime: the core scheduler, the real clock, executor threads.
///
/// The loop runs on the thread that calls [`run_until_idle`](Runtime::run_until_idle)
/// or [`run`](Runtime::run); between runs the runtime can be inspected and fed directly.
/// A kind with no executor ends the requesting task with `NoExecutor`, except
/// confirmations, which wait for [`answer`](RuntimeHandle::answer).
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
    core: Scheduler,
    clock: Clock,
    journal: Option<Box<dyn JournalSink>>,
    journal_trace: bool,
    /// The first journal write that failed: journaling stopped and the loop shut down.
    journal_error: Option<String>,
    checkpoint_every: Option<u64>,
    /// Entries written since the last checkpoint.
    since_checkpoint: u64,
    inbound_tx: Sender<Inbound>,
    inbound_rx: Receiver<Inbound>,
    executors: Vec<ExecutorEntry>,
    routes: Vec<(Route, usize)>,
    held: Vec<PendingConfirmation>,
    /// Emptied batches coming back from executors, reused so that steady batching
    /// allocates nothing.
    spare_requests: Vec<Vec<OutboundRequest>>,
    spare_answers: Vec<Vec<Response>>,
    threads: Vec<JoinHandle<()>>,
    flush_at: usize,
    shutdown: bool,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field(
                "executors",
                &self.executors.iter().map(|e| &e.name).collect::<Vec<_>>(),
            )
            .field("live", &self.core.live_len())
            .field("in_flight", &self.core.in_flight_len())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Starts setting up a runtime. Its scheduler starts from [`DEFAULT_RETENTION`]
    /// rather than keeping every result forever, so a long run has bounded memory;
    /// [`RuntimeBuilder::config`] replaces the whole configuration.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder {
            config: Config::new().retention(DEFAULT_RETENTION),
            start: None,
            journal: None,
            journal_trace: false,
            checkpoint_every: None,
            executors: Vec::new(),
            flush_at: 256,
        }
    }

    /// A handle for other threads: submit, cancel, answer, query, shut down.
    pub fn handle(&self) -> RuntimeHandle {
        RuntimeHandle {
            inbound: self.inbound_tx.clone(),
        }
    }

    /// Submits a task from the loop's own thread.
    ///
    /// # Errors
    /// As [`Scheduler::submit`].
    pub fn submit(&mut self, task: NewTask) -> Result<Submission, SubmitError> {
        let now = self.clock.now();
        self.submit_at(now, task)
    }

    /// Submits, journaling the task first if there is a journal.
    fn submit_at(&mut self, now: Time, task: NewTask) -> Result<Submission, SubmitError> {
        let saved = match self.journal {
            None => None,
            Some(_) => Some(task.save().map_err(|reason| SubmitError::NotSaveable {
                type_name: task_type(&task),
                reason,
            })?),
        };
        let submission = self.core.submit(now, task)?;
        if let Some(task) = saved {
            self.record(JournalEntry::Submit {
                at: now,
                id: submission.id,
                task,
            });
        }
        Ok(submission)
    }

    /// Writes `entry` to the journal, if there is one. A failed write stops journaling
    /// and shuts the loop down: what it takes in from then on could be lost.
    fn record(&mut self, entry: JournalEntry) {
        let Some(sink) = self.journal.as_mut() else {
            return;
        };
        match sink.record(&entry) {
            Ok(()) => self.since_checkpoint += 1,
            Err(error) => self.journal_failed(error),
        }
    }

    fn journal_failed(&mut self, error: String) {
        tracing::error!(%error, "journal write failed; shutting down");
        self.journal = None;
        self.journal_error = Some(error);
        self.shutdown = true;
    }

    /// Hands the journal a snapshot of the scheduler now, between two steps. A store
    /// recovers from the latest checkpoint and the entries after it.
    ///
    /// # Errors
    /// The scheduler cannot be snapshotted (a task that cannot be saved), or the sink
    /// failed (journaling then stops and the loop shuts down).
    pub fn checkpoint(&mut self) -> Result<(), String> {
        let Some(sink) = self.journal.as_mut() else {
            return Ok(());
        };
        let bytes = self
            .core
            .snapshot()
            .and_then(|s| s.encode())
            .map_err(|e| e.to_string())?;
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
            self.record(JournalEntry::Event(event));
        }
    }

    /// Why journaling stopped, if a write failed.
    pub fn journal_error(&self) -> Option<&str> {
        self.journal_error.as_deref()
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

    /// Runs until a handle calls [`shutdown`](RuntimeHandle::shutdown).
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
            self.record(JournalEntry::Timeout { at: now });
            // Poll a batch of tasks, send what they asked for, and go round: executors
            // start on the first batch while the loop polls the next.
            let mut polled = 0;
            while polled < self.flush_at && self.core.step(now).is_some() {
                polled += 1;
            }
            if polled > 0 {
                self.record(JournalEntry::Steps {
                    at: now,
                    count: polled as u32,
                });
            }
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
                if self.spare_answers.len() < SPARE_BATCHES {
                    self.spare_answers.push(batch);
                }
                if emptied.capacity() > 0 && self.spare_requests.len() < SPARE_BATCHES {
                    self.spare_requests.push(emptied);
                }
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

    fn executor_for(&self, kind: &Kind) -> Option<usize> {
        for (route, index) in &self.routes {
            if let Route::Exact(k) = route {
                if k == kind {
                    return Some(*index);
                }
            }
        }
        if matches!(kind, Kind::Tool(_)) {
            for (route, index) in &self.routes {
                if matches!(route, Route::AllTools) {
                    return Some(*index);
                }
            }
        }
        None
    }

    /// Hands an answer to the core, journaling it first.
    fn answer_at(&mut self, now: Time, response: Response) {
        if self.journal.is_some() {
            self.record(JournalEntry::answer(now, &response));
        }
        let _ = self.core.handle_response(now, response);
    }

    /// Cancels a task, journaling it.
    fn cancel_at(&mut self, now: Time, id: TaskId) -> Result<(), CancelError> {
        let result = self.core.cancel(now, id, CancelReason::Requested);
        if result.is_ok() {
            self.record(JournalEntry::Cancel {
                at: now,
                task: id,
                reason: CancelReason::Requested,
            });
        }
        result
    }

    /// Moves requests and cancel signals from the core to executor buffers.
    fn route(&mut self) {
        let now = self.clock.now();
        while let Some(signal) = self.core.poll_cancel() {
            self.send_cancel(signal);
        }
        // Requests no executor can take are answered after every request is out, so
        // that the journal's `Route` (take everything out) comes before their answers,
        // as a replay applies them.
        let mut failed: Vec<(RequestKey, Option<RequestError>)> = Vec::new();
        while let Some(out) = self.core.poll_request() {
            match self.executor_for(&out.request.kind) {
                Some(index) => {
                    let entry = &mut self.executors[index];
                    if let Some(message) = &entry.dead {
                        let error = RequestError::ExecutorDied {
                            kind: entry.name.clone(),
                            message: message.clone(),
                        };
                        failed.push((out.key, Some(error)));
                        continue;
                    }
                    entry.buffer.push(out);
                    if entry.buffer.len() >= self.flush_at {
                        flush_entry(entry, &mut self.spare_requests, &mut self.spare_answers);
                    }
                }
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
        if self.journal.is_some() {
            self.record(JournalEntry::Route);
        }
        for (key, error) in failed {
            match error {
                Some(error) => self.answer_at(now, Response::err(key, error)),
                None => {
                    self.record(JournalEntry::Unroutable { at: now, key });
                    let _ = self.core.handle_unroutable(now, key);
                }
            }
        }
        // Ending a task above may have raised more cancel signals.
        while let Some(signal) = self.core.poll_cancel() {
            self.send_cancel(signal);
        }
    }

    fn send_cancel(&mut self, signal: CancelSignal) {
        match self.executor_for(&signal.kind) {
            Some(index) => {
                let entry = &mut self.executors[index];
                if entry.dead.is_none() {
                    flush_entry(entry, &mut self.spare_requests, &mut self.spare_answers);
                    let _ = entry.sender.send(ExecMsg::Cancel(signal));
                }
            }
            None => self.held.retain(|h| h.key != signal.key),
        }
    }

    fn flush(&mut self) {
        for entry in &mut self.executors {
            flush_entry(entry, &mut self.spare_requests, &mut self.spare_answers);
        }
    }

    fn executor_died(&mut self, index: usize, message: String) {
        let Some(entry) = self.executors.get_mut(index) else {
            return;
        };
        if entry.dead.is_some() {
            return;
        }
        tracing::error!(executor = %entry.name, %message, "executor thread died; failing its requests");
        entry.dead = Some(message.clone());
        entry.buffer.clear();
        for _ in 0..entry.workers {
            let _ = entry.sender.send(ExecMsg::Stop);
        }
        let name = entry.name.clone();
        let now = self.clock.now();
        for pending in self.core.in_flight() {
            if self.executor_for(&pending.request.kind) == Some(index) {
                let error = RequestError::ExecutorDied {
                    kind: name.clone(),
                    message: message.clone(),
                };
                self.answer_at(now, Response::err(pending.key, error));
            }
        }
    }
}

/// A task's type name, for errors about it.
fn task_type(task: &NewTask) -> String {
    task.type_name().to_owned()
}

/// How many emptied batches of each kind the loop keeps for reuse.
const SPARE_BATCHES: usize = 16;

fn flush_entry(
    entry: &mut ExecutorEntry,
    spare_requests: &mut Vec<Vec<OutboundRequest>>,
    spare_answers: &mut Vec<Vec<Response>>,
) {
    if entry.buffer.is_empty() || entry.dead.is_some() {
        return;
    }
    if entry.workers <= 1 {
        let next = spare_requests.pop().unwrap_or_default();
        let batch = std::mem::replace(&mut entry.buffer, next);
        let spare = spare_answers.pop().unwrap_or_default();
        let _ = entry.sender.send(ExecMsg::Batch(batch, spare));
        return;
    }
    // Split across the pool so every worker gets a share.
    let chunk = entry.buffer.len().div_ceil(entry.workers);
    let mut rest = std::mem::take(&mut entry.buffer);
    while !rest.is_empty() {
        let tail = rest.split_off(chunk.min(rest.len()));
        let spare = spare_answers.pop().unwrap_or_default();
        let _ = entry.sender.send(ExecMsg::Batch(rest, spare));
        rest = tail;
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        for entry in &self.executors {
            for _ in 0..entry.workers {
                let _ = entry.sender.send(ExecMsg::Stop);
            }
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Talks to a [`Runtime`] from any thread. Calls that return a value wait for the loop
/// to take them, so they answer while the runtime is running (or is next run).
#[derive(Clone)]
pub struct RuntimeHandle {
    inbound: Sender<Inbound>,
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

    /// One row per live task, highest priority first.
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
