//! `TestScheduler`: the core scheduler with virtual time and mocks for executors.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

use spool_core::{
    AgentTask, CancelError, CancelReason, CancelSignal, Config, Delivery, Edit, ForkError,
    HistoryError, Journal, JournalEntry, Kind, NewTask, OutboundRequest, QueueDetail, QueueState,
    Replay, ReplayError, RequestError, RequestKey, Response, RestoreError, Scheduler, Snapshot,
    SnapshotError, Stats, Submission, SubmitError, TaskHistory, TaskId, TaskRegistry, TaskState,
    Time, TraceEvent, Value,
};

mod mocks;

use crate::executors::Executors;
use crate::mock::{KindMock, Latency, Mock};

/// Why [`TestScheduler::fork`] made no fork.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TestForkError {
    /// The task's history could not be read.
    #[error(transparent)]
    History(#[from] HistoryError),
    /// The fork could not be made from it.
    #[error(transparent)]
    Fork(#[from] ForkError),
    /// The core refused the fork.
    #[error(transparent)]
    Submit(#[from] SubmitError),
}

/// A held request: asked, and waiting for the test to answer it.
#[derive(Clone, Debug, PartialEq)]
pub struct HeldRequest {
    /// The request and its key.
    pub request: OutboundRequest,
    /// When it was asked.
    pub since: Time,
}

/// The core scheduler driven by a test: virtual time, scripted mocks, one poll per step.
///
/// Kinds are served by mocks registered with `inject_mock_tool`, `mock_llm` and friends.
/// A request of a kind with no mock ends its task with `NoExecutor`, as in the runtime —
/// except confirmations, which are held for the test to answer. Mocks answer at once
/// unless given a latency; held requests wait for [`answer`](TestScheduler::answer).
///
/// # Example
/// ```
/// use serde_json::json;
/// use spool_core::{task_fn, Step, TaskState};
/// use spool_test::TestScheduler;
///
/// let mut scheduler = TestScheduler::new();
/// scheduler.inject_mock_tool("ls", "result");
/// let mut asked = false;
/// let task_id = scheduler.spawn(task_fn("lister", move |cx| {
///     if !asked {
///         asked = true;
///         cx.tool("ls", json!({}));
///         return Step::Wait;
///     }
///     Step::Done(Ok(cx.take_answer().unwrap().result.unwrap()))
/// }));
/// scheduler.step_until_idle();
/// assert_eq!(scheduler.task_state(task_id), TaskState::Completed(Ok(json!("result"))));
/// ```
#[derive(Debug)]
pub struct TestScheduler {
    core: Scheduler,
    now: Time,
    mocks: BTreeMap<Kind, KindMock>,
    /// Real executors, for the kinds they serve instead of a mock.
    executors: Executors,
    held: Vec<HeldRequest>,
    delayed: BinaryHeap<Reverse<(Time, u64, DelayedAnswer)>>,
    delayed_seq: u64,
    cancels: Vec<SentCancel>,
    sent: Vec<SentRequest>,
    answers: Vec<DeliveredAnswer>,
    /// The journal forwarded from the core, and how many trace events came before it.
    journal: Option<(Journal, usize)>,
    /// Whether saved states are checked to round-trip (see
    /// [`check_round_trip`](TestScheduler::check_round_trip)).
    check_round_trip: bool,
}

/// A request the scheduler let go to a mock (or held for the test), and when.
#[derive(Clone, Debug, PartialEq)]
pub struct SentRequest {
    /// When it went out.
    pub at: Time,
    /// Its key.
    pub key: RequestKey,
    /// Its kind.
    pub kind: Kind,
}

/// A cancel signal the scheduler sent to the executor of a request, and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentCancel {
    /// When it went out.
    pub at: Time,
    /// The request to stop.
    pub key: RequestKey,
    /// Its kind.
    pub kind: Kind,
}

impl SentCancel {
    /// The signal itself, without its time.
    pub fn signal(&self) -> CancelSignal {
        CancelSignal {
            key: self.key,
            kind: self.kind.clone(),
        }
    }
}

/// An answer handed to the scheduler — by a mock, or by the test through
/// [`answer`](TestScheduler::answer) and [`respond`](TestScheduler::respond) — and what
/// became of it.
#[derive(Clone, Debug, PartialEq)]
pub struct DeliveredAnswer {
    /// When it arrived.
    pub at: Time,
    /// The key of the request it answers.
    pub key: RequestKey,
    /// The value, or why there is none.
    pub result: Result<Value, RequestError>,
    /// What the scheduler did with it: delivered to its task, dropped (the task had
    /// ended, say), or a 429 that backed its kind off.
    pub delivery: Delivery,
}

#[derive(Debug)]
struct DelayedAnswer(Response);

impl PartialEq for DelayedAnswer {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}
impl Eq for DelayedAnswer {}
impl PartialOrd for DelayedAnswer {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for DelayedAnswer {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.key.cmp(&other.0.key)
    }
}

impl Default for TestScheduler {
    fn default() -> Self {
        TestScheduler::new()
    }
}

impl TestScheduler {
    /// A test scheduler with the FIFO policy, recording its trace, at time zero.
    pub fn new() -> TestScheduler {
        TestScheduler::with_scheduler(Scheduler::new(Config::new().record_trace(true)))
    }

    /// A test scheduler with the test's own configuration (another policy, other
    /// limits), recording its trace whatever `config` says, at time zero.
    ///
    /// # Example
    /// ```
    /// use spool_core::{Config, PolicyChoice};
    /// use spool_test::TestScheduler;
    ///
    /// let scheduler = TestScheduler::with_config(Config::new().policy(PolicyChoice::FairShare));
    /// assert_eq!(scheduler.core().policy_name(), "fair-share");
    /// ```
    pub fn with_config(config: Config) -> TestScheduler {
        TestScheduler::with_scheduler(Scheduler::new(config.record_trace(true)))
    }

    /// A test scheduler around a core scheduler set up by the test (another policy,
    /// other limits). Record its trace to snapshot it.
    pub fn with_scheduler(core: Scheduler) -> TestScheduler {
        let mut mocks = BTreeMap::new();
        mocks.insert(
            Kind::Confirm,
            KindMock {
                mock: Mock::Held,
                latency: Latency::Fixed(Duration::ZERO),
            },
        );
        TestScheduler {
            now: core.now(),
            core,
            mocks,
            executors: Executors::default(),
            held: Vec::new(),
            delayed: BinaryHeap::new(),
            delayed_seq: 0,
            cancels: Vec::new(),
            sent: Vec::new(),
            answers: Vec::new(),
            journal: None,
            check_round_trip: true,
        }
    }

    /// Turns the round-trip check on (the default) or off. While on, every live task
    /// is checked at every snapshot the test scheduler takes
    /// ([`snapshot`](TestScheduler::snapshot),
    /// [`record_journal`](TestScheduler::record_journal)), and the task polled at every
    /// step after its poll: its state saved, restored through the registry
    /// ([`set_registry`](TestScheduler::set_registry), or the one it was restored
    /// with) and saved again must be the same bytes, and must not hold a `Some(null)`
    /// that JSON would read back as `None` (see
    /// [`TaskRegistry::check_round_trip`]). Without a registry only the latter is
    /// checked. Tasks that keep nothing ([`AgentTask::save`]'s default) are not
    /// checked. A task that fails the check panics the test, naming the task, its
    /// type and what differs. Each check costs a save, a restore and a save of one
    /// task (of every task, at a snapshot); an async task's restore replays its polls.
    pub fn check_round_trip(&mut self, on: bool) {
        self.check_round_trip = on;
    }

    /// Checks every live task's state, or the task `only`'s, if the check is on.
    ///
    /// # Panics
    /// On a task whose state does not round-trip, with the check's message.
    fn verify_round_trip(&self, only: Option<TaskId>) {
        if !self.check_round_trip {
            return;
        }
        let registry = self.core.registry();
        let checked = match only {
            Some(id) => self.core.check_task_round_trip(id, registry).map(|_| ()),
            None => self.core.check_round_trip(registry).map(|_| ()),
        };
        if let Err(error) = checked {
            panic!(
                "{error} (TestScheduler checks saved states at every snapshot and step; \
                 TestScheduler::check_round_trip(false) turns it off)"
            );
        }
    }

    /// A test scheduler that goes on from `snapshot` (bodies rebuilt through
    /// `registry`), at the snapshot's time, recording its trace. Requests that were with
    /// executors go out again (same keys) to the mocks the test registers next.
    ///
    /// # Errors
    /// As [`Scheduler::restore`].
    pub fn restore(
        snapshot: &Snapshot,
        registry: &TaskRegistry,
    ) -> Result<TestScheduler, RestoreError> {
        let mut core = Scheduler::restore(snapshot, registry)?;
        core.record_trace(true);
        core.resend_in_flight();
        Ok(TestScheduler::with_scheduler(core))
    }

    /// Replays a recorded run (see [`Scheduler::replay`]): the trace it produces, its
    /// hash, and the first event that differs from the recording, if any.
    ///
    /// # Errors
    /// As [`Scheduler::replay`].
    pub fn replay(journal: &Journal, registry: &TaskRegistry) -> Result<Replay, ReplayError> {
        Scheduler::replay(journal, registry)
    }

    /// Starts recording the run's journal from here: a snapshot of the scheduler now,
    /// then every input the core takes (see [`Scheduler::record_journal`]). From now on
    /// every task submitted must be saveable. Recording again starts a new journal.
    ///
    /// # Errors
    /// As [`Scheduler::snapshot`]: a live task cannot be saved. Nothing is recorded then.
    ///
    /// # Example
    /// ```
    /// use serde_json::json;
    /// use spool_core::{AgentTask, SavedTask, Step, TaskContext, TaskRegistry};
    /// use spool_test::TestScheduler;
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Ask { asked: bool }
    /// impl AgentTask for Ask {
    ///     fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
    ///         if !self.asked {
    ///             self.asked = true;
    ///             cx.llm(json!("?"));
    ///             return Step::Wait;
    ///         }
    ///         Step::Done(Ok(cx.take_answer().unwrap().result.unwrap()))
    ///     }
    ///     fn type_name(&self) -> &'static str { "ask" }
    ///     fn save(&self) -> Result<SavedTask, spool_core::StateError> { SavedTask::serde(self) }
    /// }
    ///
    /// let mut scheduler = TestScheduler::new();
    /// scheduler.record_journal().unwrap();
    /// scheduler.mock_llm(["yes"]);
    /// scheduler.spawn(Ask { asked: false });
    /// scheduler.step_until_idle();
    /// let journal = scheduler.journal().unwrap();
    ///
    /// let registry = TaskRegistry::new().with_serde::<Ask>("ask");
    /// let replay = TestScheduler::replay(&journal, &registry).unwrap();
    /// assert_eq!(replay.divergence, None);
    /// assert_eq!(replay.trace_hash, scheduler.trace_hash());
    /// ```
    pub fn record_journal(&mut self) -> Result<(), SnapshotError> {
        self.verify_round_trip(None);
        let journal = Journal::starting_from(&self.core)?;
        self.core.record_journal(false);
        self.core.record_journal(true);
        self.journal = Some((journal, self.core.trace().events().len()));
        Ok(())
    }

    /// The journal recorded since [`record_journal`](TestScheduler::record_journal)
    /// (`None` if it was not called): its starting snapshot, every input the core took,
    /// and then the trace events the run produced since, so that a replay says where
    /// it first differs. It replays with [`TestScheduler::replay`], or on the runtime
    /// with `RuntimeBuilder::recover`.
    pub fn journal(&mut self) -> Option<Journal> {
        let (journal, _) = self.journal.as_mut()?;
        while let Some(entry) = self.core.poll_journal() {
            journal.entries.push(entry);
        }
        let (journal, events_before) = self.journal.as_ref()?;
        let mut journal = journal.clone();
        let events = self.core.trace().events();
        journal.entries.extend(
            events
                .get(*events_before..)
                .unwrap_or_default()
                .iter()
                .cloned()
                .map(JournalEntry::Event),
        );
        Some(journal)
    }

    /// The whole state now (see [`Scheduler::snapshot`]), every live task's state
    /// checked to round-trip first (see
    /// [`check_round_trip`](TestScheduler::check_round_trip)).
    ///
    /// # Errors
    /// As [`Scheduler::snapshot`].
    ///
    /// # Panics
    /// On a task whose state does not round-trip, while the check is on.
    pub fn snapshot(&self) -> Result<Snapshot, SnapshotError> {
        self.verify_round_trip(None);
        self.core.snapshot()
    }

    /// Submits a task with the default agent and priority; returns its id.
    pub fn spawn(&mut self, task: impl AgentTask) -> TaskId {
        self.submit(NewTask::new(task))
    }

    /// Submits a task; returns its id.
    ///
    /// # Panics
    /// If the core refuses it (its task table is full), which a test does not expect.
    pub fn submit(&mut self, task: NewTask) -> TaskId {
        self.admit(task).id
    }

    /// Submits a task; returns how it was admitted (ready, queued, rate limited,
    /// blocked on dependencies, or rejected).
    ///
    /// # Panics
    /// If the core refuses it outright (a full table, an unknown dependency or parent),
    /// which a test does not expect; call [`core_mut`](TestScheduler::core_mut) to test
    /// those errors.
    pub fn admit(&mut self, task: NewTask) -> Submission {
        let submission = match self.core.submit(self.now, task) {
            Ok(submission) => submission,
            Err(e) => panic!("TestScheduler::submit: {e}"),
        };
        self.route();
        submission
    }

    /// Submits tasks that may depend on each other (see [`Scheduler::submit_all`]).
    ///
    /// # Errors
    /// As `Scheduler::submit_all`: nothing is submitted then.
    pub fn submit_all(&mut self, tasks: Vec<NewTask>) -> Result<Vec<Submission>, SubmitError> {
        let submissions = self.core.submit_all(self.now, tasks)?;
        self.route();
        Ok(submissions)
    }

    /// The history of `task` (each poll: what it received, what it asked for, how it
    /// ended), read from the journal recorded since
    /// [`record_journal`](TestScheduler::record_journal), which must hold the task's
    /// submission. `registry` builds the task types again; nothing is sent to a mock.
    ///
    /// # Errors
    /// [`HistoryError::NotRecorded`] when no journal is recorded, and as
    /// [`TaskHistory::from_journal`].
    pub fn history(
        &mut self,
        task: TaskId,
        registry: &TaskRegistry,
    ) -> Result<TaskHistory, HistoryError> {
        let journal = self.journal().ok_or(HistoryError::NotRecorded)?;
        TaskHistory::from_journal(&journal, task, registry)
    }

    /// Forks `task` at step `at` with `edit` (see [`TaskHistory::fork`]) and submits
    /// the fork; returns its id. The answers the task received before step `at` are
    /// played back to the fork without reaching a mock; from there it runs live.
    ///
    /// # Errors
    /// A [`TestForkError`] when the history cannot be read, the fork cannot be made, or
    /// the core refuses it.
    pub fn fork(
        &mut self,
        task: TaskId,
        at: u32,
        edit: Edit,
        registry: &TaskRegistry,
    ) -> Result<TaskId, TestForkError> {
        let fork = self.history(task, registry)?.fork(at, edit)?;
        let submission = self.core.fork(self.now, fork, registry)?;
        self.route();
        Ok(submission.id)
    }

    /// Does one thing: polls one ready task and routes what it asked for. Timers and
    /// answers due at the current time arrive first. Returns whether anything happened.
    ///
    /// # Panics
    /// If the task polled does not round-trip, while the check is on (see
    /// [`check_round_trip`](TestScheduler::check_round_trip)).
    pub fn step(&mut self) -> bool {
        self.core.handle_timeout(self.now);
        let mut progressed = self.deliver_due();
        if let Some(polled) = self.core.step(self.now) {
            self.verify_round_trip(Some(polled));
            progressed = true;
        }
        if self.route() {
            progressed = true;
        }
        progressed
    }

    /// Steps until no task is ready and no answer is due at the current time. Does not
    /// move time. Returns the number of steps that did something.
    pub fn step_until_idle(&mut self) -> usize {
        let mut n = 0;
        while self.step() {
            n += 1;
        }
        n
    }

    /// Moves virtual time forward by `duration`, stopping at each timer and mock
    /// answer due on the way to run what it wakes, in time order.
    pub fn advance(&mut self, duration: Duration) {
        let target = self.now + duration;
        self.step_until_idle();
        while let Some(next) = self.next_event().filter(|t| *t <= target) {
            self.now = self.now.max(next);
            self.core.handle_timeout(self.now);
            self.step_until_idle();
        }
        self.now = target;
        self.core.handle_timeout(self.now);
        self.step_until_idle();
    }

    /// Runs until nothing more can happen without the test: steps, and moves time to
    /// each next timer or mock answer, until none is left. Returns the time reached.
    pub fn run_until_quiet(&mut self) -> Time {
        self.step_until_idle();
        while let Some(next) = self.next_event() {
            self.now = self.now.max(next);
            self.core.handle_timeout(self.now);
            self.step_until_idle();
        }
        self.now
    }

    fn next_event(&mut self) -> Option<Time> {
        let timer = self.core.poll_timeout();
        let answer = self.delayed.peek().map(|Reverse((t, _, _))| *t);
        let wake = self.executors.next_wake(self.now);
        [timer, answer, wake].into_iter().flatten().min()
    }

    fn deliver_due(&mut self) -> bool {
        let mut any = self.poll_executors();
        while let Some(Reverse((at, _, _))) = self.delayed.peek() {
            if *at > self.now {
                break;
            }
            if let Some(Reverse((_, _, DelayedAnswer(response)))) = self.delayed.pop() {
                let _ = self.deliver(response);
                any = true;
            }
        }
        any
    }

    /// Polls the real executors (those given work, those whose wake-up has come) and
    /// delivers their answers now; returns whether any arrived.
    fn poll_executors(&mut self) -> bool {
        let mut answers = Vec::new();
        self.executors.poll(self.now, &mut answers);
        self.deliver_now(answers)
    }

    /// Hands answers from real executors to the core at the current time.
    fn deliver_now(&mut self, answers: Vec<Response>) -> bool {
        let any = !answers.is_empty();
        for response in answers {
            let _ = self.deliver(response);
        }
        any
    }

    /// Hands an answer to the core now, and records it with what became of it.
    fn deliver(&mut self, response: Response) -> Delivery {
        let (key, result) = (response.key, response.result.clone());
        let delivery = self.core.handle_response(self.now, response);
        self.answers.push(DeliveredAnswer {
            at: self.now,
            key,
            result,
            delivery,
        });
        delivery
    }

    /// Records a cancel signal the core let go: a held request it names is dropped, and
    /// the real executor of its kind, if there is one, is told.
    fn note_cancel(&mut self, signal: CancelSignal) {
        self.held.retain(|h| h.request.key != signal.key);
        if self.executors.serves(&signal.kind) {
            let mut answers = Vec::new();
            self.executors
                .cancel(self.now, signal.clone(), &mut answers);
            self.deliver_now(answers);
        }
        self.cancels.push(SentCancel {
            at: self.now,
            key: signal.key,
            kind: signal.kind,
        });
    }

    /// Routes what the core lets go; returns whether any request went.
    pub(crate) fn route(&mut self) -> bool {
        let mut any = false;
        while let Some(signal) = self.core.poll_cancel() {
            self.note_cancel(signal);
        }
        while let Some(out) = self.core.poll_request() {
            any = true;
            self.sent.push(SentRequest {
                at: self.now,
                key: out.key,
                kind: out.request.kind.clone(),
            });
            if self.executors.serves(&out.request.kind) {
                let mut answers = Vec::new();
                self.executors.execute(self.now, out, &mut answers);
                self.deliver_now(answers);
                continue;
            }
            let Some(slot) = self.mocks.get_mut(&out.request.kind) else {
                let _ = self.core.handle_unroutable(self.now, out.key);
                continue;
            };
            let Some(result) = slot.mock.answer(&out) else {
                self.held.push(HeldRequest {
                    request: out,
                    since: self.now,
                });
                continue;
            };
            match slot.latency.of(&out) {
                latency if latency.is_zero() => {
                    let _ = self.deliver(Response::new(out.key, result));
                }
                latency => {
                    // `delayed_seq` orders answers due at the same time by send order.
                    self.delayed_seq += 1;
                    let at = self.now + latency;
                    let answer = DelayedAnswer(Response::new(out.key, result));
                    self.delayed.push(Reverse((at, self.delayed_seq, answer)));
                }
            }
        }
        // Cancel signals raised by unroutable requests.
        while let Some(signal) = self.core.poll_cancel() {
            self.note_cancel(signal);
        }
        if any {
            // What the executors were given may be finished in their `poll`.
            self.poll_executors();
        }
        any
    }

    /// Every request that went out, in order, with its time.
    pub fn sent_requests(&self) -> &[SentRequest] {
        &self.sent
    }

    /// Every answer handed to the scheduler, in order, with its time and what became
    /// of it: mock answers (at once or after their latency) and the test's own
    /// [`answer`](TestScheduler::answer)s and [`respond`](TestScheduler::respond)s.
    /// A request of a kind with no mock gets no answer here (its task ends with
    /// `NoExecutor`), nor does one handed to [`core_mut`](TestScheduler::core_mut).
    ///
    /// # Example
    /// ```
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use spool_core::{Delivery, Kind, Step, Time, task_fn};
    /// use spool_test::{Mock, TestScheduler};
    ///
    /// let mut scheduler = TestScheduler::new();
    /// let two_seconds = Duration::from_secs(2);
    /// scheduler.mock_with_latency(Kind::Llm, Mock::Fixed(json!("plan")), two_seconds);
    /// let mut asked = false;
    /// scheduler.spawn(task_fn("planner", move |cx| {
    ///     if !asked {
    ///         asked = true;
    ///         cx.llm(json!("plan?"));
    ///         return Step::Wait;
    ///     }
    ///     Step::done("planned")
    /// }));
    /// scheduler.run_until_quiet();
    /// let answer = &scheduler.delivered_answers()[0];
    /// assert_eq!(answer.at, Time::from_duration(two_seconds));
    /// assert_eq!(answer.result, Ok(json!("plan")));
    /// assert_eq!(answer.delivery, Delivery::Delivered);
    /// ```
    pub fn delivered_answers(&self) -> &[DeliveredAnswer] {
        &self.answers
    }

    /// The scheduler at a glance (see [`Scheduler::queue_state`]).
    pub fn queue_state(&self) -> QueueState {
        self.core.queue_state()
    }

    /// One row per live task (see [`Scheduler::queue_details`]).
    pub fn queue_details(&self) -> Vec<QueueDetail> {
        self.core.queue_details()
    }

    /// The `debug scheduler` table (see [`Scheduler::debug_table`]).
    pub fn debug_table(&self) -> String {
        self.core.debug_table()
    }

    /// Requests held for the test to answer (confirmations and held kinds), oldest first.
    pub fn held_requests(&self) -> &[HeldRequest] {
        &self.held
    }

    /// Held confirmations: the human-in-the-loop questions waiting for an answer.
    pub fn pending_confirmations(&self) -> Vec<HeldRequest> {
        self.held
            .iter()
            .filter(|h| h.request.request.kind == Kind::Confirm)
            .cloned()
            .collect()
    }

    /// Answers a held request with a value; it arrives now.
    pub fn answer(&mut self, key: RequestKey, value: impl Into<Value>) -> Delivery {
        self.respond(key, Ok(value.into()))
    }

    /// Answers a held request (or any request: a test may play a late or stray answer)
    /// with a result; it arrives now.
    pub fn respond(&mut self, key: RequestKey, result: Result<Value, RequestError>) -> Delivery {
        self.held.retain(|h| h.request.key != key);
        let delivery = self.deliver(Response::new(key, result));
        self.route();
        delivery
    }

    /// Cancels a task.
    ///
    /// # Errors
    /// As [`Scheduler::cancel`].
    pub fn cancel(&mut self, id: TaskId) -> Result<(), CancelError> {
        let result = self.core.cancel(self.now, id, CancelReason::Requested);
        self.route();
        result
    }

    /// The state of a task.
    ///
    /// # Panics
    /// If no task has that id: a test asking about a task it never made is a bug in
    /// the test.
    pub fn task_state(&self, id: TaskId) -> TaskState {
        match self.core.task_state(id) {
            Some(state) => state,
            None => panic!("TestScheduler::task_state: no task {id}"),
        }
    }

    /// Every task's final state, by id.
    pub fn task_states(&self) -> Vec<(TaskId, TaskState)> {
        self.core.tasks().map(|t| (t.id, t.state)).collect()
    }

    /// The virtual time now.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Cancel signals the scheduler sent to executors, in order, without their times
    /// (see [`sent_cancels`](TestScheduler::sent_cancels)).
    pub fn cancel_signals(&self) -> Vec<CancelSignal> {
        self.cancels.iter().map(SentCancel::signal).collect()
    }

    /// Cancel signals the scheduler sent to executors, in order, each with the virtual
    /// time it went out: "the request was canceled at 3 s" is one assertion.
    ///
    /// # Example
    /// ```
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use spool_core::{Kind, Step, Time, task_fn};
    /// use spool_test::{SentCancel, TestScheduler};
    ///
    /// let mut scheduler = TestScheduler::new();
    /// scheduler.hold(Kind::Llm);
    /// let id = scheduler.spawn(task_fn("asker", |cx| {
    ///     cx.llm(json!("?"));
    ///     Step::Wait
    /// }));
    /// scheduler.advance(Duration::from_secs(3));
    /// scheduler.cancel(id).unwrap();
    /// let key = scheduler.sent_requests()[0].key;
    /// assert_eq!(
    ///     scheduler.sent_cancels(),
    ///     [SentCancel { at: Time::from_duration(Duration::from_secs(3)), key, kind: Kind::Llm }]
    /// );
    /// ```
    pub fn sent_cancels(&self) -> &[SentCancel] {
        &self.cancels
    }

    /// The recorded trace events.
    pub fn trace_events(&self) -> &[TraceEvent] {
        self.core.trace().events()
    }

    /// The recorded trace as text, one event per line, for `insta` snapshots.
    pub fn trace(&self) -> String {
        spool_core::Trace::render(self.core.trace().events())
    }

    /// The hash of the recorded trace (see [`spool_core::Trace::hash`]).
    pub fn trace_hash(&self) -> u64 {
        self.core.trace().hash()
    }

    /// The scheduler's counters.
    pub fn stats(&self) -> &Stats {
        self.core.stats()
    }

    /// The core scheduler, to inspect it.
    pub fn core(&self) -> &Scheduler {
        &self.core
    }

    /// The core scheduler, to drive it by hand.
    pub fn core_mut(&mut self) -> &mut Scheduler {
        &mut self.core
    }
}
