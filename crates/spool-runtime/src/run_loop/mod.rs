//! The loop: `Runtime` owns the core scheduler and the clock, takes answers and calls
//! from its mailbox, polls tasks, and hands requests to the executor adapter
//! ([`crate::worker`]), which never calls back into it.

pub(crate) mod journaling;
pub(crate) mod observe;
pub(crate) mod publish;

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use spool_core::{
    CancelError, CancelReason, CancelSignal, DurableNotice, JournalError, Kind, NewTask,
    OutboundRequest, RequestError, RequestKey, Response, Scheduler, Stats, Submission, SubmitError,
    TaskId, TaskState, Time, Value,
};

use crate::clock::{Clock, WallClock};
use crate::worker::{Executors, WorkerReport};
use journaling::Journaling;
use publish::Publisher;

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
    /// A call that changes the scheduler (a schedule operation): it runs at the
    /// loop's time and returns its reply, let out once its entries are durable.
    Call(Call),
    Shutdown,
    /// The journal's sink says groups are durable (or that writing failed).
    Durable(DurableNotice),
}

/// A handle's call that changes the scheduler, made at the loop's time; it returns
/// the reply to send once what it journaled is durable.
pub(crate) type Call = Box<dyn FnOnce(&mut Runtime, Time) -> Reply + Send>;

/// A reply to a handle's [`Call`].
pub(crate) type Reply = Box<dyn FnOnce() + Send>;

/// What the loop lets out only once the group holding the entries that caused it is
/// durable (write-ahead).
pub(crate) enum Out {
    /// A request for an executor (or a confirmation for the embedder).
    Request(OutboundRequest),
    /// A cancel signal for an executor.
    Cancel(CancelSignal),
    /// A handle's submission, acknowledged.
    Submitted(
        Sender<Result<Submission, SubmitError>>,
        Result<Submission, SubmitError>,
    ),
    /// A handle's cancel, acknowledged.
    Canceled(Sender<Result<(), CancelError>>, Result<(), CancelError>),
    /// A confirmation answered: it leaves the pending list.
    Answered(RequestKey),
    /// A handle's call, answered.
    Replied(Reply),
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
    /// The journal and what waits for it to be durable: the one owner of durability.
    pub(crate) journaling: Journaling,
    pub(crate) inbound_tx: Sender<Inbound>,
    pub(crate) inbound_rx: Receiver<Inbound>,
    pub(crate) held: Vec<PendingConfirmation>,
    pub(crate) flush_at: usize,
    pub(crate) shutdown: bool,
    /// Messages taken while a direct call waited for durability, handled first next.
    pub(crate) deferred: VecDeque<Inbound>,
    /// Messages handled since the last turn began: inputs, and durability notices.
    pub(crate) turn_inputs: u32,
    pub(crate) turn_notices: u32,
    /// When the wall clock was last compared with the monotonic one.
    pub(crate) wall_checked: Instant,
    /// The loop woke only to compare the clocks (no timer was due).
    pub(crate) clock_wake: bool,
    /// Where the wall clock is read.
    pub(crate) wall_clock: WallClock,
    /// Who the loop publishes views to, if anyone ([`publish`]).
    pub(crate) publisher: Option<Publisher>,
    /// The loop woke only to publish (nothing was due): it journals nothing.
    pub(crate) publish_wake: bool,
    /// Where tasks' histories are read, if the runtime has a store for them.
    pub(crate) history: Option<std::sync::Arc<crate::store_history::StoreHistory>>,
    /// Who watches the loop, if anyone ([`observe`]).
    pub(crate) observing: Option<observe::Observing>,
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
    /// Submits a task from the loop's own thread; with a journal, returns once the
    /// submission is durable (if the journal fails meanwhile, [`journal_error`]
    /// says so and the submission may be lost).
    ///
    /// [`journal_error`]: Runtime::journal_error
    ///
    /// # Errors
    /// As [`Scheduler::submit`].
    pub fn submit(&mut self, task: NewTask) -> Result<Submission, SubmitError> {
        let now = self.clock.now();
        let submission = self.submit_at(now, task);
        self.settle();
        submission
    }

    /// Submits tasks from the loop's own thread, in order, as one group: with a
    /// journal, returns once all of them are durable (one commit rather than one per
    /// task). Each result is as [`submit`](Runtime::submit)'s.
    pub fn submit_all(
        &mut self,
        tasks: impl IntoIterator<Item = NewTask>,
    ) -> Vec<Result<Submission, SubmitError>> {
        let submissions = tasks
            .into_iter()
            .map(|task| {
                let now = self.clock.now();
                self.submit_at(now, task)
            })
            .collect();
        self.settle();
        submissions
    }

    /// Submits; the core journals the task (refusing one it cannot save), and the
    /// entry is recorded (the caller reports the id once it is durable).
    fn submit_at(&mut self, now: Time, task: NewTask) -> Result<Submission, SubmitError> {
        let submission = self.core.submit(now, task);
        self.forward_journal();
        submission
    }

    /// Writes the entries the core journaled since the last call to the journal (see
    /// [`Journaling::forward`]).
    pub(crate) fn forward_journal(&mut self) {
        self.journaling.forward(&mut self.core);
    }

    /// Keeps `out` until its group is durable ([`route`](Runtime::route) lets it out).
    pub(crate) fn hold(&mut self, out: Out) {
        self.journaling.hold(out);
    }

    /// Commits the open group and waits until every group is durable, then lets out
    /// what they held: for calls on the loop's own thread, which acknowledge by
    /// returning. Messages that come meanwhile are handled next.
    pub(crate) fn settle(&mut self) {
        self.journaling.end_group(&mut self.core);
        while self.journaling.awaits_notice() {
            match self.inbound_rx.recv() {
                Ok(Inbound::Durable(notice)) => self.journaling.on_notice(&mut self.core, notice),
                Ok(other) => self.deferred.push_back(other),
                Err(_) => break,
            }
        }
        self.route();
        self.flush();
    }

    /// The scheduler's counters as of the last group the journal made durable: what
    /// can be acknowledged (a crash loses nothing they count). Without a journal, the
    /// counters now.
    pub fn durable_stats(&self) -> &Stats {
        self.journaling.durable_stats(&self.core)
    }

    /// Hands the journal a snapshot of the scheduler now, between two steps. A store
    /// recovers from the latest checkpoint and the entries after it.
    ///
    /// # Errors
    /// [`JournalError::Snapshot`] if the scheduler cannot be snapshotted (a task that
    /// cannot be saved; the journal goes on), or the sink's error (journaling then
    /// stops and the loop shuts down).
    pub fn checkpoint(&mut self) -> Result<(), JournalError> {
        let failed_before = self.journaling.failed();
        self.journaling.queue_checkpoint(&mut self.core)?;
        self.settle();
        match self.journaling.error() {
            Some(error) if !failed_before => Err(error.clone()),
            _ => Ok(()),
        }
    }

    /// Writes the trace events since the last call to the journal, if asked to, and
    /// keeps them for the publisher.
    fn record_events(&mut self) {
        let events = match self.journaling.record_events(&mut self.core) {
            Some(events) => events,
            // An observer sees each turn's events (a publisher, after, keeps them).
            None if self.observes() => self.core.trace_mut().take_events(),
            None => return,
        };
        self.observe_events(&events);
        self.keep_for_publisher(&events);
    }

    /// Why journaling stopped, if a write failed.
    pub fn journal_error(&self) -> Option<&JournalError> {
        self.journaling.error()
    }

    /// Cancels a task from the loop's own thread; with a journal, returns once the
    /// cancel is durable.
    ///
    /// # Errors
    /// As [`Scheduler::cancel`].
    pub fn cancel(&mut self, id: TaskId) -> Result<(), CancelError> {
        let now = self.clock.now();
        let result = self.cancel_at(now, id);
        self.route();
        self.settle();
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

    /// Confirmations waiting for an answer, oldest first. A confirmation shows once
    /// the request is durable, and leaves once its answer is.
    pub fn pending_confirmations(&self) -> &[PendingConfirmation] {
        &self.held
    }

    /// Runs until nothing is ready, no request is out with an executor and no timer is
    /// set (confirmations may still wait for a human), or until shutdown.
    pub fn run_until_idle(&mut self) -> RunReport {
        self.run_loop(true, None)
    }

    /// Runs until a handle calls [`shutdown`](crate::RuntimeHandle::shutdown).
    pub fn run(&mut self) -> RunReport {
        self.run_loop(false, None)
    }

    /// As [`run_until_idle`](Runtime::run_until_idle), but returns by `deadline` at the
    /// latest (a task sleeping past it, or a schedule, would otherwise keep it running).
    /// What was acknowledged by then is let out before it returns, as at a shutdown;
    /// the next run goes on from there.
    pub fn run_until_idle_by(&mut self, deadline: Instant) -> RunReport {
        self.run_loop(true, Some(deadline))
    }

    /// As [`run`](Runtime::run), but returns at `deadline` at the latest: timers and
    /// schedules fire in real time until then.
    pub fn run_until(&mut self, deadline: Instant) -> RunReport {
        self.run_loop(false, Some(deadline))
    }

    fn run_loop(&mut self, until_idle: bool, stop_at: Option<Instant>) -> RunReport {
        let started = Instant::now();
        let polls_before = self.core.stats().polls;
        // A journal that failed stopped the runtime for good: what it would take in
        // could not be made durable.
        while !self.journaling.failed() {
            let now = self.clock.now();
            let turn_started = self.measures_turns().then(Instant::now);
            self.drain_inbound();
            // Schedules fire by the wall clock: a drift from the monotonic clock (a
            // suspend, a clock step) is told to the core (journaled) before timers fire.
            let drifted = self.check_wall_clock(now);
            // A turn woken only to hear that groups are durable, or only to compare the
            // clocks, lets out what they held and journals nothing: a timeout call (an
            // entry) would make a group of its own whose notice wakes the loop again,
            // for ever.
            // (So does a turn woken only to publish.)
            let clock_only = std::mem::take(&mut self.clock_wake) && !drifted;
            let publish_only = std::mem::take(&mut self.publish_wake);
            let durability_only =
                self.turn_inputs == 0 && (self.turn_notices > 0 || clock_only || publish_only);
            let changed = self.turn_inputs > 0 || self.turn_notices > 0 || drifted;
            (self.turn_inputs, self.turn_notices) = (0, 0);
            let due = self.core.poll_timeout().is_some_and(|at| at <= now);
            if due || !durability_only {
                self.core.handle_timeout(now);
            }
            // Write-ahead: the answers taken are journaled before the tasks they wake
            // are polled, ...
            self.forward_journal();
            // Poll a batch of tasks, send what they asked for, and go round: executors
            // start on the first batch while the loop polls the next.
            let mut polled = 0;
            // (A step with nothing ready only moves the clock: an entry, which a
            // durability-only turn leaves out for the same reason.)
            let step = due || !durability_only || self.core.ready_len() > 0;
            while step && polled < self.flush_at && self.core.step(now).is_some() {
                polled += 1;
            }
            // ... and the steps are journaled before the requests they made are
            // taken: those wait for the group to be durable.
            self.route();
            self.record_events();
            self.journaling.checkpoint_if_due(&mut self.core);
            // The turn's entries go to the journal as one group; what it let out goes
            // when the group is durable (now, for a sink that writes as it records).
            self.journaling.end_group(&mut self.core);
            self.route();
            self.flush();
            self.end_turn_publish(turn_started, changed || due || polled > 0);
            // A journal that failed shuts the loop down as a handle's shutdown does.
            if self.shutdown || self.journaling.failed() {
                // Consumed: the next run goes on normally. What was acknowledged
                // within the run is let out before it returns, and published.
                self.shutdown = false;
                self.settle();
                // After a journal that failed (a writer fenced by a newer owner, say),
                // nothing more is published: what the loop holds now may never be
                // committed, and readers must not see it.
                if !self.journaling.failed() {
                    self.publish_now();
                }
                break;
            }
            if stop_at.is_some_and(|at| Instant::now() >= at) {
                self.settle();
                if !self.journaling.failed() {
                    self.publish_now();
                }
                break;
            }
            if self.core.ready_len() > 0 || self.journaling.dirty() {
                continue;
            }
            let timeout = self.core.poll_timeout();
            let with_executors = self.core.in_flight_len().saturating_sub(self.held.len());
            let not_durable = self.journaling.not_durable();
            if until_idle && with_executors == 0 && timeout.is_none() && !not_durable {
                self.publish_now();
                break;
            }
            // With a wall clock to watch, the wait ends in time to compare the clocks;
            // with a publication owed, in time to publish.
            let watch = self.wall_clock_deadline();
            let deadline = match (timeout.and_then(|at| self.clock.try_instant(at)), watch) {
                (Some(at), Some(check)) if check < at => Some((check, Wake::Clock)),
                (Some(at), _) => Some((at, Wake::Timer)),
                (None, Some(check)) => Some((check, Wake::Clock)),
                (None, None) => None,
            };
            let deadline = match (deadline, self.publish_deadline()) {
                (Some((at, _)), Some(publish)) if publish < at => Some((publish, Wake::Publish)),
                (None, Some(publish)) => Some((publish, Wake::Publish)),
                (deadline, _) => deadline,
            };
            // A run with a deadline wakes for it, to end at the check above.
            let deadline = match (deadline, stop_at) {
                (Some((at, _)), Some(stop)) if stop < at => Some((stop, Wake::Stop)),
                (None, Some(stop)) => Some((stop, Wake::Stop)),
                (deadline, _) => deadline,
            };
            let msg = match deadline {
                // A timeout means the timer is due (the next turn fires it), or the
                // clocks are to be compared, or views to be published.
                Some((at, wake)) => match self.inbound_rx.recv_deadline(at) {
                    Ok(msg) => Some(msg),
                    Err(_) => {
                        // The deadline's wake is a turn that only lets out, as the
                        // clocks' is: it fires no timer and journals nothing.
                        self.clock_wake = matches!(wake, Wake::Clock | Wake::Stop);
                        self.publish_wake = wake == Wake::Publish;
                        None
                    }
                },
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
        while let Some(msg) = self.deferred.pop_front() {
            self.handle_inbound(msg);
        }
        loop {
            match self.inbound_rx.try_recv() {
                Ok(msg) => self.handle_inbound(msg),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
            }
        }
    }

    fn handle_inbound(&mut self, msg: Inbound) {
        let now = self.clock.now();
        if matches!(msg, Inbound::Durable(_)) {
            self.turn_notices += 1;
        } else {
            self.turn_inputs += 1;
        }
        match msg {
            Inbound::Answers(mut batch, emptied) => {
                for response in batch.drain(..) {
                    let key = response.key;
                    self.answer_at(now, response);
                    if self.held.iter().any(|h| h.key == key) {
                        self.hold(Out::Answered(key));
                    }
                }
                self.executors.recycle(batch, emptied);
            }
            Inbound::Died { executor, message } => self.executor_died(executor, message),
            Inbound::Submit(task, reply) => {
                let result = self.submit_at(now, task);
                self.hold(Out::Submitted(reply, result));
            }
            Inbound::Cancel(id, reply) => {
                let result = self.cancel_at(now, id);
                self.hold(Out::Canceled(reply, result));
            }
            Inbound::Query(f) => f(self),
            Inbound::Call(call) => {
                let reply = call(self, now);
                self.forward_journal();
                self.hold(Out::Replied(reply));
            }
            Inbound::Shutdown => self.shutdown = true,
            Inbound::Durable(notice) => self.journaling.on_notice(&mut self.core, notice),
        }
    }

    /// Hands an answer to the core (which journals it), and writes the entry.
    fn answer_at(&mut self, now: Time, response: Response) {
        self.observe_answer(now, &response);
        let _ = self.core.handle_response(now, response);
        self.forward_journal();
    }

    /// Cancels a task (the core journals it), and writes the entry.
    fn cancel_at(&mut self, now: Time, id: TaskId) -> Result<(), CancelError> {
        let result = self.core.cancel(now, id, CancelReason::Requested);
        self.forward_journal();
        result
    }

    /// Takes requests and cancel signals from the core (after journaling what caused
    /// them) and holds them with their group; lets out, in order, everything whose
    /// group is durable: requests and cancel signals to executor buffers,
    /// confirmations to the pending list, acknowledgments to handles.
    pub(crate) fn route(&mut self) {
        loop {
            self.forward_journal();
            while let Some(signal) = self.core.poll_cancel() {
                self.hold(Out::Cancel(signal));
            }
            while let Some(out) = self.core.poll_request() {
                self.hold(Out::Request(out));
            }
            // Failing a request no executor can take ends or wakes its task, which
            // may raise more cancel signals: go round (each request fails once).
            if !self.release() {
                self.forward_journal();
                return;
            }
        }
    }

    /// Lets out what the durable groups held; returns whether a request failed (no
    /// executor could take it), which the core was told.
    fn release(&mut self) -> bool {
        let now = self.clock.now();
        // Requests no executor can take are answered after every request is out, as
        // the runtime always did (the core's journal records either order exactly).
        let mut failed: Vec<(RequestKey, Option<RequestError>)> = Vec::new();
        while let Some(out) = self.journaling.next_released() {
            match out {
                Out::Request(out) => match self.executors.route(&out.request.kind) {
                    Some(index) => match self.executors.died(index) {
                        Some(error) => failed.push((out.key, Some(error))),
                        None => {
                            self.observe_request(&out);
                            self.executors.push(index, out);
                        }
                    },
                    None if out.request.kind == Kind::Confirm => {
                        self.observe_request(&out);
                        self.held.push(PendingConfirmation {
                            key: out.key,
                            question: out.request.payload.into_value(),
                            since: now,
                        });
                    }
                    None => failed.push((out.key, None)),
                },
                Out::Cancel(signal) => self.send_cancel(signal),
                Out::Submitted(reply, result) => {
                    let _ = reply.send(result);
                }
                Out::Canceled(reply, result) => {
                    let _ = reply.send(result);
                }
                Out::Answered(key) => self.held.retain(|h| h.key != key),
                Out::Replied(reply) => reply(),
            }
        }
        let any = !failed.is_empty();
        for (key, error) in failed {
            match error {
                Some(error) => self.answer_at(now, Response::err(key, error)),
                None => {
                    let _ = self.core.handle_unroutable(now, key);
                }
            }
        }
        any
    }

    fn send_cancel(&mut self, signal: CancelSignal) {
        self.executors.ended(signal.key);
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
                self.executors.ended(pending.key);
                self.answer_at(now, Response::err(pending.key, error));
            }
        }
    }
}

/// Why a loop waiting with a deadline woke at it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Wake {
    /// A timer is due.
    Timer,
    /// The wall clock is to be compared with the monotonic one.
    Clock,
    /// Views are to be published.
    Publish,
    /// The run's deadline has come.
    Stop,
}
