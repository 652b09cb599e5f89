//! The task model: the `AgentTask` poll trait, the context it is polled with, and
//! how a task is described at submission.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use serde_json::Value;

use crate::id::{RequestKey, TaskId};
use crate::payload::Payload;
use crate::pending::{Out, PendingRequest, PendingSet, Status};
use crate::priority::Priority;
use crate::request::{Answer, Request};
use crate::saved::{SavedTask, StateError};
use crate::state::{Outcome, TaskError};
use crate::time::Time;

/// An agent written as an explicit state machine: its fields are its state.
///
/// The scheduler calls [`poll`](AgentTask::poll) when the task is ready: first after
/// submission, then each time what it waited for has arrived. Each poll runs until the
/// task yields — it makes requests through the context and returns
/// [`Step::Wait`], gives way with [`Step::Yield`], or finishes with [`Step::Done`].
/// A poll must not block, read a real clock or do I/O: everything from outside comes
/// in through the context, which is what makes runs reproducible.
///
/// # Example
/// ```
/// use serde_json::json;
/// use spool_core::{AgentTask, Step, TaskContext};
///
/// /// Lists a directory, then finishes with what the tool said.
/// struct ListDir { asked: bool }
///
/// impl AgentTask for ListDir {
///     fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
///         if !self.asked {
///             self.asked = true;
///             cx.tool("ls", json!({"path": "."}));
///             return Step::Wait;
///         }
///         match cx.take_answer() {
///             Some(answer) => Step::Done(answer.result.map_err(|e| e.into_task_error(answer.number))),
///             None => Step::fail("resumed without an answer"),
///         }
///     }
/// }
/// ```
pub trait AgentTask: Send + 'static {
    /// Runs the task until its next yield point.
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step;

    /// The task's type, shown in tables and used to find its constructor on restore.
    fn type_name(&self) -> &'static str {
        std::any::type_name::<Self>()
    }

    /// The task's state for a snapshot, rebuilt on restore by the decoder registered
    /// for its [`type_name`](AgentTask::type_name) in a [`TaskRegistry`](crate::TaskRegistry).
    /// For a serde type: `SavedTask::binary(self)` (compact) if its fields are plain
    /// data, `SavedTask::serde(self)` (JSON) if they hold `serde_json::Value`s.
    ///
    /// # Errors
    /// By default every task refuses ([`StateError::Unsaveable`]),
    /// saying so: a scheduler holding a live task that cannot be saved cannot be
    /// snapshotted.
    fn save(&self) -> Result<SavedTask, StateError> {
        Err(StateError::Unsaveable(format!(
            "`{}` does not implement AgentTask::save",
            self.type_name()
        )))
    }
}

impl fmt::Debug for dyn AgentTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AgentTask({})", self.type_name())
    }
}

/// What a poll ends with.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Resume when every request in flight has been answered and the timer, if one is
    /// set, has fired. Waiting with nothing in flight and no timer fails the task with
    /// [`TaskError::Stalled`].
    Wait,
    /// Resume as soon as any one answer arrives or the timer fires.
    WaitAny,
    /// Give way to other ready tasks and be polled again.
    Yield,
    /// Finish with this outcome.
    Done(Outcome),
}

impl Step {
    /// Finish successfully with `value`.
    pub fn done(value: impl Into<Value>) -> Step {
        Step::Done(Ok(value.into()))
    }

    /// Finish with a failure described by `message`.
    pub fn fail(message: impl Into<String>) -> Step {
        Step::Done(Err(TaskError::failed(message)))
    }
}

impl crate::request::RequestError {
    /// This error as the failure of request `number`, for a task that passes it on.
    pub fn into_task_error(self, number: u32) -> TaskError {
        TaskError::Request {
            number,
            error: self,
        }
    }
}

/// A task's view of the scheduler during one poll: the answers it was resumed with,
/// and the means to yield requests and set a timer.
#[derive(Debug)]
pub struct TaskContext<'a> {
    pub(crate) task: TaskId,
    pub(crate) index: u32,
    pub(crate) now: Time,
    pub(crate) pending: &'a mut PendingSet,
    pub(crate) next_request: &'a mut u32,
    pub(crate) in_flight: &'a mut u32,
    /// `Time::MAX` when no timer is set.
    pub(crate) timer: &'a mut Time,
    pub(crate) timer_fired: &'a mut bool,
    /// The key of each request made, in order; the request itself lives once, in the
    /// task's pending set.
    pub(crate) outbox: &'a mut VecDeque<RequestKey>,
    pub(crate) issued: u32,
    /// Parent, children, joins and child results; allocated on first use.
    pub(crate) family: &'a mut Option<Box<Family>>,
    /// Children spawned in this poll, inserted after it.
    pub(crate) spawned: &'a mut Vec<(TaskId, NewTask)>,
    pub(crate) next_task: &'a mut u64,
}

/// Records a request a task makes: its number, its pending entry, its key in the
/// outbox. What `TaskContext::request` does, and the async adapter after a poll for the
/// requests its future staged.
/// `counters` are the task's next request number, requests in flight, and requests made
/// in this poll; `at` is the task and its index.
#[inline]
pub(crate) fn record_request(
    pending: &mut PendingSet,
    outbox: &mut VecDeque<RequestKey>,
    counters: (&mut u32, &mut u32, &mut u32),
    at: (TaskId, u32),
    request: Request,
) -> RequestKey {
    let (next_request, in_flight, issued) = counters;
    let number = *next_request;
    *next_request += 1;
    *in_flight += 1;
    *issued += 1;
    pending.push(PendingRequest {
        number,
        kind: request.kind,
        tokens: request.tokens,
        // Out when the poll ends (gating, if any, holds it at its gate then).
        status: Status::InFlight(request.payload, Out::Sent),
    });
    let key = RequestKey::new(at.0, number, at.1);
    outbox.push_back(key);
    key
}

/// A task's place in a task graph: kept out of the hot entry, allocated only for tasks
/// that have a parent or children.
#[derive(Debug, Default)]
pub(crate) struct Family {
    /// The parent's id and index.
    pub(crate) parent: Option<(TaskId, u32)>,
    /// Children that have not ended, in spawn order.
    pub(crate) children: Vec<TaskId>,
    /// Live children the task waits for.
    pub(crate) joined: Vec<TaskId>,
    /// Outcomes of children that ended, in the order they ended, until taken.
    pub(crate) results: Vec<(TaskId, Outcome)>,
    /// A child joined in this poll had already ended: waiting must not wait for it.
    pub(crate) joined_ended: Option<TaskId>,
    /// Ancestors: spawning parents, or the `parent` it was submitted under.
    pub(crate) depth: u32,
    /// Iterations after the first: retries.
    pub(crate) retries: u32,
    /// When the task fails with `DeadlineExceeded` if it has not ended.
    pub(crate) deadline: Option<Time>,
    /// The caller's key, for duplicate detection while the task is live.
    pub(crate) key: Option<String>,
    /// Dependencies that have not completed yet.
    pub(crate) unmet: u32,
    /// Tasks that depend on this one: id and index.
    pub(crate) dependents: Vec<(TaskId, u32)>,
    /// A fork's origin and the recorded answers left to play back to it.
    pub(crate) fork: Option<Box<crate::tape::ForkState>>,
    /// Code-version decisions (see [`TaskContext::patched`]).
    pub(crate) patches: Patches,
}

/// A task's [`patched`](TaskContext::patched) decisions: each name once, with the
/// branch taken, and how many at the end are not journaled yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Patches {
    pub(crate) decided: Vec<(String, bool)>,
    pub(crate) unjournaled: u32,
}

impl Patches {
    /// The branch task `task` takes for `name`: the one decided before; else, for a
    /// fork whose tape plays, the one its origin took (`tape`); else, while a recorded
    /// run is replayed on this thread, the one the recording says it took (the old one
    /// for a name it never asked about); else the new one. Noted.
    pub(crate) fn decide(&mut self, task: TaskId, name: &str, tape: Option<bool>) -> bool {
        if let Some((_, taken)) = self.decided.iter().find(|(n, _)| n == name) {
            return *taken;
        }
        let taken = tape
            .or_else(|| crate::replaying::recorded_branch(task, name))
            .unwrap_or(true);
        self.decided.push((name.to_owned(), taken));
        self.unjournaled += 1;
        taken
    }
}

impl TaskContext<'_> {
    /// The task being polled.
    pub fn task_id(&self) -> TaskId {
        self.task
    }

    /// The scheduler's time at this poll.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Yields a request. It goes out when the poll returns; its answer comes back to
    /// this task under the returned key. Several requests in one poll go out together
    /// (a parallel fan-out).
    pub fn request(&mut self, request: Request) -> RequestKey {
        let counters = (
            &mut *self.next_request,
            &mut *self.in_flight,
            &mut self.issued,
        );
        record_request(
            self.pending,
            self.outbox,
            counters,
            (self.task, self.index),
            request,
        )
    }

    /// Yields an LLM request.
    pub fn llm(&mut self, payload: impl Into<Payload>) -> RequestKey {
        self.request(Request::llm(payload))
    }

    /// Yields a call of the tool `name`.
    pub fn tool(
        &mut self,
        name: impl Into<Cow<'static, str>>,
        args: impl Into<Payload>,
    ) -> RequestKey {
        self.request(Request::tool(name, args))
    }

    /// Yields a question for a human.
    pub fn confirm(&mut self, question: impl Into<Payload>) -> RequestKey {
        self.request(Request::confirm(question))
    }

    /// Takes the answer with the lowest request number among those that have arrived.
    /// Answers not taken during the poll they arrive for are dropped.
    pub fn take_answer(&mut self) -> Option<Answer> {
        self.pending.take_first_answer()
    }

    /// Takes the answer to request `number`, if it has arrived.
    pub fn take_answer_for(&mut self, number: u32) -> Option<Answer> {
        self.pending.take_answer(number)
    }

    /// How many of this task's requests are still in flight.
    pub fn in_flight(&self) -> u32 {
        *self.in_flight
    }

    /// Sets the task's timer to fire `duration` from now (replacing any timer set before).
    pub fn sleep(&mut self, duration: Duration) {
        // `Time::MAX` means "no timer"; a timer that far away never fires anyway.
        *self.timer = (self.now + duration).min(Time::from_nanos(u64::MAX - 1));
        *self.timer_fired = false;
    }

    /// Whether the timer has fired since it was set; reading clears the flag.
    pub fn take_timer_fired(&mut self) -> bool {
        std::mem::take(self.timer_fired)
    }

    /// Whether a timer is set and has not fired yet.
    pub fn timer_pending(&self) -> bool {
        *self.timer != Time::MAX
    }

    /// Sets the task's timer to fire at `deadline` (replacing any timer set before).
    pub fn sleep_until(&mut self, deadline: Time) {
        *self.timer = deadline.min(Time::from_nanos(u64::MAX - 1));
        *self.timer_fired = false;
    }

    /// Clears the task's timer.
    pub fn cancel_timer(&mut self) {
        *self.timer = Time::MAX;
    }

    /// Spawns a child task and returns its id. The child becomes ready when this poll
    /// returns (unless the task finishes in it, then the child is never started). It
    /// inherits this task's agent and priority unless `task` sets its own, and it never
    /// outlives this task: when this task ends, its live children are canceled.
    pub fn spawn(&mut self, task: NewTask) -> TaskId {
        let id = TaskId(*self.next_task);
        *self.next_task += 1;
        self.spawned.push((id, task));
        self.family
            .get_or_insert_with(Default::default)
            .children
            .push(id);
        id
    }

    /// Waits for the child `id` too: `Step::Wait` resumes only once it has ended (and
    /// `Step::WaitAny` resumes when it does). Returns `false` if `id` is not a child of
    /// this task, or has ended and its outcome was taken.
    pub fn join(&mut self, id: TaskId) -> bool {
        let Some(family) = self.family.as_mut() else {
            return false;
        };
        if family.results.iter().any(|(child, _)| *child == id) {
            // Already ended: a `Wait` after this resumes at once.
            family.joined_ended = Some(id);
            return true;
        }
        if !family.children.contains(&id) {
            return false;
        }
        if !family.joined.contains(&id) {
            family.joined.push(id);
        }
        true
    }

    /// Joins every child that has not ended.
    pub fn join_all(&mut self) {
        if let Some(family) = self.family.as_mut() {
            family.joined = family.children.clone();
        }
    }

    /// Takes the outcome of the child `id`, if it has ended. A child's failure or
    /// cancellation arrives here as an `Err` to handle, never as a panic.
    pub fn take_child_result(&mut self, id: TaskId) -> Option<Outcome> {
        let family = self.family.as_mut()?;
        let index = family.results.iter().position(|(child, _)| *child == id)?;
        Some(family.results.remove(index).1)
    }

    /// Takes the outcome of the child that ended first among those not taken yet.
    pub fn take_any_child_result(&mut self) -> Option<(TaskId, Outcome)> {
        let family = self.family.as_mut()?;
        (!family.results.is_empty()).then(|| family.results.remove(0))
    }

    /// Whether this run of the task takes the new branch of a code change named
    /// `name`: `true` for a task started by code that has the change, `false` for one
    /// being replayed from a recording made before it (a journal, or a restored async
    /// task's record, where the task never asked about `name`). The first answer for a
    /// name sticks for the rest of the task's life, and is journaled, so a replay of
    /// this run takes the same branch.
    ///
    /// Wrap a change to what a task asks for in `if cx.patched("name") { new } else
    /// { old }`: runs in flight when the change is deployed replay clean and go on with
    /// the old code; runs started after take the new. Remove the old branch once no
    /// run that started before the change is kept.
    pub fn patched(&mut self, name: &str) -> bool {
        let task = self.task;
        let family = self.family.get_or_insert_with(Default::default);
        let tape = family.fork.as_ref().and_then(|f| f.tape.branch(name));
        family.patches.decide(task, name, tape)
    }

    /// The children of this task that have not ended, in spawn order.
    pub fn live_children(&self) -> &[TaskId] {
        self.family.as_ref().map_or(&[], |f| &f.children)
    }

    /// The task's iteration, from 1 (each retry adds one; the computed
    /// priority takes points off per retry).
    pub fn iteration(&self) -> u32 {
        self.family
            .as_ref()
            .map_or(1, |f| f.retries.saturating_add(1))
    }

    /// Sets the task's iteration (from 1): a task that starts over calls it so the
    /// computed priority counts the retry when it is queued again.
    pub fn set_iteration(&mut self, iteration: u32) {
        let retries = iteration.saturating_sub(1);
        if retries > 0 || self.family.is_some() {
            self.family.get_or_insert_with(Default::default).retries = retries;
        }
    }
}

/// A task written as a closure, with a name for tables and traces.
///
/// # Example
/// ```
/// use spool_core::{task_fn, Step};
/// let t = task_fn("hello", |_cx| Step::done("hi"));
/// ```
pub fn task_fn<F>(name: &'static str, f: F) -> FnTask<F>
where
    F: FnMut(&mut TaskContext<'_>) -> Step + Send + 'static,
{
    FnTask { name, f }
}

/// A closure as an [`AgentTask`]; made by [`task_fn`].
pub struct FnTask<F> {
    name: &'static str,
    f: F,
}

impl<F> fmt::Debug for FnTask<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTask")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<F> AgentTask for FnTask<F>
where
    F: FnMut(&mut TaskContext<'_>) -> Step + Send + 'static,
{
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        (self.f)(cx)
    }

    fn type_name(&self) -> &'static str {
        self.name
    }
}

/// A task to submit: its body and how to schedule it.
///
/// # Example
/// ```
/// use spool_core::{task_fn, NewTask, Priority, Step};
/// let t = NewTask::new(task_fn("hello", |_cx| Step::done("hi")))
///     .agent("alice")
///     .priority(Priority::High);
/// ```
#[derive(Debug)]
pub struct NewTask {
    pub(crate) body: Box<dyn AgentTask>,
    pub(crate) agent: Option<Cow<'static, str>>,
    /// `None`: the parent's for a child, `Normal` for a top-level task.
    pub(crate) priority: Option<Priority>,
    /// What it depends on, its deadline, key, parent: rare, so boxed.
    pub(crate) extra: Option<Box<Extra>>,
}

/// A dependency of a task being submitted.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Dep {
    /// A task already submitted.
    Task(TaskId),
    /// The task at this index of the same [`Scheduler::submit_all`](crate::Scheduler::submit_all) batch.
    Batch(usize),
}

impl From<TaskId> for Dep {
    fn from(id: TaskId) -> Dep {
        Dep::Task(id)
    }
}

/// When a task's deadline falls.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Deadline {
    After(Duration),
    At(Time),
}

#[derive(Debug, Default)]
pub(crate) struct Extra {
    pub(crate) deps: Vec<Dep>,
    pub(crate) parent: Option<TaskId>,
    pub(crate) deadline: Option<Deadline>,
    pub(crate) key: Option<String>,
    /// What the key is kept with, to tell a repeat from a different request.
    pub(crate) fingerprint: Option<crate::fingerprint::Fingerprint>,
    pub(crate) iteration: u32,
}

impl NewTask {
    /// A task with the default agent and [`Priority::Normal`] (a child: its parent's).
    pub fn new(task: impl AgentTask) -> NewTask {
        NewTask::boxed(Box::new(task))
    }

    /// A task from a boxed body.
    pub fn boxed(body: Box<dyn AgentTask>) -> NewTask {
        NewTask {
            body,
            agent: None,
            priority: None,
            extra: None,
        }
    }

    /// The task's type name.
    pub fn type_name(&self) -> &'static str {
        self.body.type_name()
    }

    fn extra(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Default::default)
    }

    /// The task runs only after `dependency` completed successfully; if it fails or is
    /// canceled, this task is canceled with [`CancelReason::DependencyFailed`](crate::CancelReason::DependencyFailed).
    #[must_use]
    pub fn after(mut self, dependency: impl Into<Dep>) -> NewTask {
        self.extra().deps.push(dependency.into());
        self
    }

    /// The task belongs under `parent`: it runs only after the
    /// parent completed successfully, is one level deeper, and inherits its agent and
    /// priority unless it sets its own. Unlike a spawned child, it is not canceled when
    /// the parent ends well — it starts then.
    #[must_use]
    pub fn parent(mut self, parent: TaskId) -> NewTask {
        self.extra().parent = Some(parent);
        self
    }

    /// The task must end within `within` of its submission: past it, it fails with
    /// [`TaskError::DeadlineExceeded`], queued or running, and its requests in flight
    /// are canceled.
    #[must_use]
    pub fn deadline(mut self, within: Duration) -> NewTask {
        self.extra().deadline = Some(Deadline::After(within));
        self
    }

    /// The task must end by `at` (scheduler time).
    #[must_use]
    pub fn deadline_at(mut self, at: Time) -> NewTask {
        self.extra().deadline = Some(Deadline::At(at));
        self
    }

    /// A key for duplicate detection: a submission with the key of a live task is
    /// rejected.
    #[must_use]
    pub fn key(mut self, key: impl Into<String>) -> NewTask {
        self.extra().key = Some(key.into());
        self
    }

    /// What defines the request its [key](NewTask::key) stands for (see
    /// [`Fingerprint`](crate::Fingerprint)): kept with the key, so that a later
    /// submission with the key and another fingerprint is rejected
    /// ([`RejectReason::KeyReused`](crate::RejectReason::KeyReused)) rather than taken
    /// for a repeat. Without one, any submission with the key is a repeat.
    #[must_use]
    pub fn fingerprint(mut self, fingerprint: crate::fingerprint::Fingerprint) -> NewTask {
        self.extra().fingerprint = Some(fingerprint);
        self
    }

    /// The task's iteration, from 1 (later iterations are retries, and the
    /// computed priority takes points off for them).
    #[must_use]
    pub fn iteration(mut self, iteration: u32) -> NewTask {
        self.extra().iteration = iteration;
        self
    }

    /// The agent the task belongs to (for fairness and per-agent limits).
    #[must_use]
    pub fn agent(mut self, agent: impl Into<Cow<'static, str>>) -> NewTask {
        self.agent = Some(agent.into());
        self
    }

    /// The task's priority level.
    #[must_use]
    pub fn priority(mut self, priority: Priority) -> NewTask {
        self.priority = Some(priority);
        self
    }
}
