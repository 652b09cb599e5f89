//! Coroutine-style tasks: an `async` block that awaits spool, run as an [`AgentTask`].
//!
//! The future is polled by spool's own loop with a no-op waker: spool, not the waker,
//! decides when a task is ready — when an answer, a timer or a joined child arrives.
//! During a poll the future reaches its task through a thread-local frame that is
//! active for that poll only; what it asks for is handed to the [`TaskContext`]
//! afterwards, in order, so an async task makes the same requests, with the same
//! numbers, as the same agent written as an explicit state machine.

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use serde_json::Value;

use std::collections::VecDeque;

use crate::pending::PendingSet;
use crate::task::record_request;
use crate::{
    AgentTask, Answer, NewTask, Outcome, Payload, Request, RequestError, RequestKey, Step,
    TaskContext, TaskId, Time,
};

thread_local! {
    /// One per thread, reused by every async task polled on it: only a task's own
    /// answers and child outcomes are swapped in and out, never the whole frame.
    static FRAME: RefCell<Frame> = const { RefCell::new(Frame::EMPTY) };
}

/// What the future sees and produces during one poll.
#[derive(Debug)]
struct Frame {
    /// Whether a task is being polled on this thread.
    active: bool,
    task: Option<TaskId>,
    slot: u32,
    now: Time,
    next_request: u32,
    next_task: u64,
    in_flight: u32,
    issued: u32,
    /// The task's pending requests and the scheduler's outbox, lent for the poll:
    /// requests go straight in and answers straight out, as through `TaskContext`.
    pending: PendingSet,
    outbox: VecDeque<RequestKey>,
    /// Answers that arrived in an earlier poll and were not taken then.
    answers: Vec<Answer>,
    /// Requests whose futures were dropped before their answer was taken.
    abandoned: Vec<u32>,
    /// Deadlines of the sleeps still pending after this poll.
    deadlines: Vec<Time>,
    /// Children spawned in this poll.
    spawns: Vec<NewTask>,
    /// Children awaited in this poll.
    joins: Vec<TaskId>,
    /// Outcomes of children that ended and were not taken yet.
    results: Vec<(TaskId, Outcome)>,
    /// Requests an `all` group still waits for, polled in this poll.
    all_pending: Vec<u32>,
    /// Children a `join_all` still waits for, polled in this poll.
    all_children_pending: Vec<TaskId>,
    /// Wakers that combinators (such as `FuturesUnordered`) handed to the futures
    /// inside them, by what each waits for: woken before the poll in which it arrived,
    /// so such combinators poll the right inner future. The task's own top-level
    /// waker is a no-op and never registered.
    wakers: Vec<(Wake, Waker)>,
}

/// What a registered waker waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    Answer(u32),
    Deadline(Time),
    Child(TaskId),
}

impl Frame {
    /// Remembers `waker` for `what`, unless it is the no-op top-level waker.
    fn register(&mut self, what: Wake, waker: &Waker) {
        if waker.will_wake(Waker::noop()) {
            return;
        }
        match self.wakers.iter_mut().find(|(w, _)| *w == what) {
            Some((_, old)) => old.clone_from(waker),
            None => self.wakers.push((what, waker.clone())),
        }
    }

    /// Wakes the registered wakers whose event has arrived.
    fn wake_arrived(&mut self) {
        if self.wakers.is_empty() {
            return;
        }
        let mut i = 0;
        while i < self.wakers.len() {
            let arrived = match self.wakers[i].0 {
                Wake::Answer(n) => {
                    self.pending.has_answer(n) || self.answers.iter().any(|a| a.number == n)
                }
                Wake::Deadline(t) => self.now >= t,
                Wake::Child(id) => self.results.iter().any(|(c, _)| *c == id),
            };
            if arrived {
                self.wakers.swap_remove(i).1.wake();
            } else {
                i += 1;
            }
        }
    }
}

impl Frame {
    const EMPTY: Frame = Frame {
        active: false,
        task: None,
        slot: 0,
        now: Time::ZERO,
        next_request: 0,
        next_task: 0,
        in_flight: 0,
        issued: 0,
        pending: PendingSet::Empty,
        outbox: VecDeque::new(),
        answers: Vec::new(),
        abandoned: Vec::new(),
        deadlines: Vec::new(),
        spawns: Vec::new(),
        joins: Vec::new(),
        results: Vec::new(),
        all_pending: Vec::new(),
        all_children_pending: Vec::new(),
        wakers: Vec::new(),
    };
}

fn with_frame<R>(f: impl FnOnce(&mut Frame) -> R) -> R {
    FRAME.with_borrow_mut(|frame| {
        assert!(
            frame.active,
            "a spool future was polled outside a spool task: `Cx` futures only work inside \
             an `async_task` polled by a spool scheduler, not on another executor"
        );
        f(frame)
    })
}

/// If the future panics: gives back what the poll lent the frame — the task's pending
/// set and the scheduler's outbox, which holds every task's requests — and leaves the
/// frame clean for the next task polled on this thread. The normal path forgets the
/// guard and does the same work itself, so no `catch_unwind` is needed here (the
/// scheduler catches the panic and ends the task `Panicked`).
struct Unwind<'a> {
    pending: &'a mut PendingSet,
    outbox: &'a mut VecDeque<RequestKey>,
}

impl Drop for Unwind<'_> {
    fn drop(&mut self) {
        FRAME.with_borrow_mut(|frame| {
            std::mem::swap(&mut frame.pending, self.pending);
            std::mem::swap(&mut frame.outbox, self.outbox);
            frame.active = false;
            frame.task = None;
            frame.answers.clear();
            frame.abandoned.clear();
            frame.deadlines.clear();
            frame.spawns.clear();
            frame.joins.clear();
            frame.results.clear();
            frame.all_pending.clear();
            frame.all_children_pending.clear();
            frame.wakers.clear();
        });
    }
}

/// What an async task keeps between polls: what arrived and was not taken yet.
#[derive(Debug, Default)]
struct Kept {
    answers: Vec<Answer>,
    abandoned: Vec<u32>,
    results: Vec<(TaskId, Outcome)>,
    wakers: Vec<(Wake, Waker)>,
}

impl Kept {
    /// Lends what the task kept to the frame. Usually nothing: then nothing moves.
    fn lend(&mut self, frame: &mut Frame) {
        if !self.answers.is_empty() {
            std::mem::swap(&mut self.answers, &mut frame.answers);
        }
        if !self.abandoned.is_empty() {
            std::mem::swap(&mut self.abandoned, &mut frame.abandoned);
        }
        if !self.results.is_empty() {
            std::mem::swap(&mut self.results, &mut frame.results);
        }
        if !self.wakers.is_empty() {
            std::mem::swap(&mut self.wakers, &mut frame.wakers);
        }
    }

    /// Takes back what the task keeps, leaving the frame's buffers empty for the next
    /// task. Whatever is empty stays where it is.
    fn take_back(&mut self, frame: &mut Frame) {
        if !frame.answers.is_empty() {
            std::mem::swap(&mut self.answers, &mut frame.answers);
        }
        if !frame.abandoned.is_empty() {
            std::mem::swap(&mut self.abandoned, &mut frame.abandoned);
        }
        if !frame.results.is_empty() {
            std::mem::swap(&mut self.results, &mut frame.results);
        }
        if !frame.wakers.is_empty() {
            std::mem::swap(&mut self.wakers, &mut frame.wakers);
        }
    }
}

/// An agent written as `async` code; made by [`async_task`].
pub struct AsyncTask {
    pub(crate) name: &'static str,
    future: Pin<Box<dyn Future<Output = Outcome> + Send>>,
    kept: Kept,
    /// For a task made with [`AsyncTask::replayable`]: its input and what each poll
    /// received, to rebuild it on restore.
    pub(crate) log: Option<Box<crate::async_replay::ReplayLog>>,
}

impl fmt::Debug for AsyncTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncTask")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// An agent written as an `async` block or `async fn`: `f` receives the task's [`Cx`]
/// and returns the future spool runs.
///
/// An async agent must only await spool: its requests, sleeps and children. It must
/// not do real I/O, read real clocks, start threads or await another runtime's
/// futures: spool could neither see nor replay them, and a future that waits on
/// something spool does not know would never be woken — such a task ends with
/// [`TaskError::Stalled`](crate::TaskError::Stalled) naming it, rather than hang.
///
/// # Example
/// ```
/// use serde_json::json;
/// use spool_core::{async_task, TaskError};
///
/// let agent = async_task("summarize", |cx| async move {
///     let text = cx.tool("read_file", json!({"path": "notes.txt"})).await?;
///     let summary = cx.llm(json!({"prompt": format!("Summarize: {text}")})).await?;
///     Ok::<_, TaskError>(summary)
/// });
/// ```
pub fn async_task<F, Fut>(name: &'static str, f: F) -> AsyncTask
where
    F: FnOnce(Cx) -> Fut,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    AsyncTask {
        name,
        future: Box::pin(f(Cx { _private: () })),
        kept: Kept::default(),
        log: None,
    }
}

impl AgentTask for AsyncTask {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if self.log.is_some() {
            return self.poll_recording(cx);
        }
        self.poll_future(cx)
    }

    fn type_name(&self) -> &'static str {
        self.name
    }

    fn save(&self) -> Result<crate::SavedTask, crate::StateError> {
        self.save_log()
    }
}

impl AsyncTask {
    /// Polls the future once, lending it the task's context through the frame.
    pub(crate) fn poll_future(&mut self, cx: &mut TaskContext<'_>) -> Step {
        FRAME.with_borrow_mut(|frame| {
            frame.active = true;
            frame.task = Some(cx.task);
            frame.slot = cx.slot;
            frame.now = cx.now;
            frame.next_request = *cx.next_request;
            frame.next_task = *cx.next_task;
            frame.in_flight = *cx.in_flight;
            frame.issued = 0;
            std::mem::swap(&mut frame.pending, cx.pending);
            std::mem::swap(&mut frame.outbox, cx.outbox);
            self.kept.lend(frame);
            while let Some(result) = cx.take_any_child_result() {
                frame.results.push(result);
            }
            frame.wake_arrived();
        });

        let unwind = Unwind {
            pending: &mut *cx.pending,
            outbox: &mut *cx.outbox,
        };
        let poll = self
            .future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        // Not unwinding: what was lent goes back below, with the rest.
        std::mem::forget(unwind);

        let group_only = FRAME.with_borrow_mut(|frame| {
            std::mem::swap(&mut frame.pending, cx.pending);
            std::mem::swap(&mut frame.outbox, cx.outbox);
            *cx.next_request = frame.next_request;
            *cx.in_flight = frame.in_flight;
            cx.issued += frame.issued;
            if !frame.spawns.is_empty() {
                for child in frame.spawns.drain(..) {
                    cx.spawn(child);
                }
            }
            // The task waits for exactly the children its future awaited in this poll:
            // a child no future awaits any more (the loser of a `join_any`) is let go.
            if let Some(family) = cx.family.as_mut() {
                family.joined.clear();
                for child in frame.joins.drain(..) {
                    cx.join(child);
                }
            } else {
                frame.joins.clear();
            }
            // Answers the future did not take in this poll are kept for a later one
            // (the scheduler drops what a task leaves), except those nobody awaits.
            while let Some(answer) = cx.take_answer() {
                match frame.abandoned.iter().position(|n| *n == answer.number) {
                    Some(i) => {
                        frame.abandoned.swap_remove(i);
                    }
                    None => frame.answers.push(answer),
                }
            }
            match frame.deadlines.iter().min() {
                Some(deadline) => cx.sleep_until(*deadline),
                None => cx.cancel_timer(),
            }
            self.kept.take_back(frame);
            frame.active = false;
            frame.task = None;
            // When all the future waits on is covered by `Cx::all` and `Cx::join_all`
            // groups — every request in flight in one, every joined child in one, no
            // sleep — it needs all of them: resume once, when the last arrives.
            let joined = cx.family.as_ref().map_or(0, |f| f.joined.len());
            // As sets: a child or request awaited by two groups counts once.
            if frame.all_pending.len() > 1 {
                frame.all_pending.sort_unstable();
                frame.all_pending.dedup();
            }
            if frame.all_children_pending.len() > 1 {
                frame.all_children_pending.sort_unstable();
                frame.all_children_pending.dedup();
            }
            let groups_only = (!frame.all_pending.is_empty()
                || !frame.all_children_pending.is_empty())
                && frame.deadlines.is_empty()
                && frame.all_pending.len() as u32 == cx.in_flight()
                && frame.all_children_pending.len() == joined;
            frame.deadlines.clear();
            frame.all_pending.clear();
            frame.all_children_pending.clear();
            groups_only
        });
        match poll {
            Poll::Ready(outcome) => Step::Done(outcome),
            Poll::Pending if group_only => Step::Wait,
            // Otherwise spool cannot see which combination the future waits for, so any
            // answer, timer or joined child wakes it and the future decides.
            Poll::Pending => Step::WaitAny,
        }
    }
}

/// An async task's handle on spool: make requests, sleep, spawn and join children.
/// Cheap to copy; usable only inside the task's own future.
///
/// # Panics
/// Its futures panic if polled anywhere but inside a spool task's poll.
#[derive(Clone, Copy, Debug)]
pub struct Cx {
    _private: (),
}

impl Cx {
    /// Asks for anything; resolves to the executor's answer.
    pub fn request(&self, request: Request) -> RequestFuture {
        RequestFuture {
            state: RequestState::Unsent(Some(request)),
        }
    }

    /// Asks the LLM.
    pub fn llm(&self, payload: impl Into<Payload>) -> RequestFuture {
        self.request(Request::llm(payload))
    }

    /// Calls the tool `name`.
    pub fn tool(
        &self,
        name: impl Into<std::borrow::Cow<'static, str>>,
        args: impl Into<Payload>,
    ) -> RequestFuture {
        self.request(Request::tool(name, args))
    }

    /// Asks a human; resolves to the embedder's answer.
    pub fn confirm(&self, question: impl Into<Payload>) -> RequestFuture {
        self.request(Request::confirm(question))
    }

    /// Resolves after `duration` of the scheduler's time (virtual in tests).
    pub fn sleep(&self, duration: Duration) -> Sleep {
        Sleep {
            duration,
            deadline: None,
        }
    }

    /// Spawns a child task; await the handle (or [`join_all`](Cx::join_all) /
    /// [`join_any`](Cx::join_any)) for its outcome.
    ///
    /// # Panics
    /// Outside a spool task's poll.
    pub fn spawn(&self, task: NewTask) -> ChildHandle {
        with_frame(|f| {
            let id = TaskId(f.next_task);
            f.next_task += 1;
            f.spawns.push(task);
            ChildHandle { id }
        })
    }

    /// The scheduler's time at this poll.
    ///
    /// # Panics
    /// Outside a spool task's poll.
    pub fn now(&self) -> Time {
        with_frame(|f| f.now)
    }

    /// The task's id.
    ///
    /// # Panics
    /// Outside a spool task's poll.
    pub fn task_id(&self) -> TaskId {
        with_frame(|f| f.task.unwrap_or(TaskId(0)))
    }

    /// Resolves when every request has been answered, to their answers in the order
    /// given, whatever order they arrived in. The requests go out together; unlike a
    /// generic `join_all`, spool knows the task needs them all, so it resumes the task
    /// once, when the last answer arrives.
    pub fn all(&self, requests: Vec<RequestFuture>) -> AllRequests {
        let answers = requests.iter().map(|_| None).collect();
        AllRequests { requests, answers }
    }

    /// Resolves when every child has ended, to their outcomes in the order given. Like
    /// [`all`](Cx::all) for requests: when these children are all the future waits for,
    /// the task resumes once, when the last one ends.
    pub fn join_all(&self, children: Vec<ChildHandle>) -> JoinAll {
        let outcomes = children.iter().map(|_| None).collect();
        JoinAll { children, outcomes }
    }

    /// Resolves when the first of `children` ends, to its id and outcome; the others go
    /// on (and end with this task if it does not join them).
    pub fn join_any(&self, children: Vec<ChildHandle>) -> JoinAny {
        JoinAny { children }
    }
}

enum RequestState {
    Unsent(Option<Request>),
    Sent(u32),
    Done,
}

/// A request in flight; resolves to the answer. Made by [`Cx::request`] and friends.
/// The request goes out when the future is first polled, so several created and polled
/// together (a `join_all`) go out in the same step.
pub struct RequestFuture {
    state: RequestState,
}

impl fmt::Debug for RequestFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            RequestState::Unsent(_) => "unsent".to_owned(),
            RequestState::Sent(n) => format!("sent as request {n}"),
            RequestState::Done => "done".to_owned(),
        };
        f.debug_struct("RequestFuture")
            .field("state", &state)
            .finish()
    }
}

impl Future for RequestFuture {
    type Output = Result<Value, RequestError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let state = &mut self.state;
        with_frame(|f| match state {
            RequestState::Unsent(request) => {
                let Some(request) = request.take() else {
                    panic!("a spool request future lost its request before it was sent")
                };
                let counters = (&mut f.next_request, &mut f.in_flight, &mut f.issued);
                let at = (f.task.unwrap_or(TaskId(0)), f.slot);
                let number =
                    record_request(&mut f.pending, &mut f.outbox, counters, at, request).number();
                *state = RequestState::Sent(number);
                f.register(Wake::Answer(number), cx.waker());
                Poll::Pending
            }
            RequestState::Sent(number) => {
                let answer = match f.pending.take_answer(*number) {
                    Some(answer) => answer,
                    None => match f.answers.iter().position(|a| a.number == *number) {
                        Some(i) => f.answers.remove(i),
                        None => {
                            f.register(Wake::Answer(*number), cx.waker());
                            return Poll::Pending;
                        }
                    },
                };
                *state = RequestState::Done;
                Poll::Ready(answer.result)
            }
            RequestState::Done => panic!("a spool request future was polled after it completed"),
        })
    }
}

impl Drop for RequestFuture {
    fn drop(&mut self) {
        // Dropped before its answer was taken (a `select` that chose another branch):
        // its answer, now or later, is discarded rather than kept forever.
        if let RequestState::Sent(number) = self.state {
            let _ = FRAME.try_with(|frame| {
                if let Ok(mut frame) = frame.try_borrow_mut() {
                    if frame.active {
                        if frame.pending.take_answer(number).is_some() {
                            return;
                        }
                        match frame.answers.iter().position(|a| a.number == number) {
                            Some(i) => {
                                frame.answers.remove(i);
                            }
                            None => frame.abandoned.push(number),
                        }
                    }
                }
            });
        }
    }
}

/// A sleep; resolves when the scheduler's time passes its deadline.
#[derive(Debug)]
pub struct Sleep {
    duration: Duration,
    deadline: Option<Time>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let duration = self.duration;
        let deadline = *self
            .deadline
            .get_or_insert_with(|| with_frame(|f| f.now) + duration);
        with_frame(|f| {
            if f.now >= deadline {
                Poll::Ready(())
            } else {
                f.deadlines.push(deadline);
                f.register(Wake::Deadline(deadline), cx.waker());
                Poll::Pending
            }
        })
    }
}

/// A spawned child; resolves to its outcome when it ends. A child's failure or
/// cancellation is an `Err` to handle, not a panic.
#[derive(Debug)]
pub struct ChildHandle {
    id: TaskId,
}

impl ChildHandle {
    /// The child's task id.
    pub fn id(&self) -> TaskId {
        self.id
    }

    fn poll_outcome(&self, waker: &Waker) -> Poll<Outcome> {
        let id = self.id;
        with_frame(
            |f| match f.results.iter().position(|(child, _)| *child == id) {
                Some(i) => Poll::Ready(f.results.remove(i).1),
                None => {
                    f.joins.push(id);
                    f.register(Wake::Child(id), waker);
                    Poll::Pending
                }
            },
        )
    }
}

impl Future for ChildHandle {
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        self.poll_outcome(cx.waker())
    }
}

/// Waits for every child; made by [`Cx::join_all`].
#[derive(Debug)]
pub struct JoinAll {
    children: Vec<ChildHandle>,
    outcomes: Vec<Option<Outcome>>,
}

impl Future for JoinAll {
    type Output = Vec<Outcome>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<Outcome>> {
        let this = &mut *self;
        for (child, outcome) in this.children.iter().zip(this.outcomes.iter_mut()) {
            if outcome.is_none() {
                if let Poll::Ready(result) = child.poll_outcome(cx.waker()) {
                    *outcome = Some(result);
                }
            }
        }
        if this.outcomes.iter().all(Option::is_some) {
            return Poll::Ready(this.outcomes.drain(..).flatten().collect());
        }
        let pending = this
            .children
            .iter()
            .zip(&this.outcomes)
            .filter(|(_, o)| o.is_none());
        let pending: Vec<TaskId> = pending.map(|(child, _)| child.id).collect();
        with_frame(|f| f.all_children_pending.extend(pending));
        Poll::Pending
    }
}

/// Waits for the first child to end; made by [`Cx::join_any`].
#[derive(Debug)]
pub struct JoinAny {
    children: Vec<ChildHandle>,
}

impl Future for JoinAny {
    type Output = Option<(TaskId, Outcome)>;

    /// `None` only for an empty list of children.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.children.is_empty() {
            return Poll::Ready(None);
        }
        // The first that has ended, in the order they ended; only if none has are the
        // others awaited (so a child that lost is never left joined).
        let ended = with_frame(|f| {
            let first = f
                .results
                .iter()
                .position(|(id, _)| self.children.iter().any(|c| c.id == *id))?;
            Some(f.results.remove(first))
        });
        if let Some((id, outcome)) = ended {
            return Poll::Ready(Some((id, outcome)));
        }
        for child in &self.children {
            if let Poll::Ready(outcome) = child.poll_outcome(cx.waker()) {
                return Poll::Ready(Some((child.id, outcome)));
            }
        }
        Poll::Pending
    }
}

/// Waits for every request of a group; made by [`Cx::all`].
#[derive(Debug)]
pub struct AllRequests {
    requests: Vec<RequestFuture>,
    answers: Vec<Option<Result<Value, RequestError>>>,
}

impl Future for AllRequests {
    type Output = Vec<Result<Value, RequestError>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        for (request, answer) in this.requests.iter_mut().zip(this.answers.iter_mut()) {
            if answer.is_none() {
                if let Poll::Ready(result) = Pin::new(&mut *request).poll(cx) {
                    *answer = Some(result);
                }
            }
        }
        if this.answers.iter().all(Option::is_some) {
            return Poll::Ready(this.answers.drain(..).flatten().collect());
        }
        let pending =
            this.requests
                .iter()
                .zip(&this.answers)
                .filter_map(|(request, answer)| match (answer, &request.state) {
                    (None, RequestState::Sent(number)) => Some(*number),
                    _ => None,
                });
        let pending: Vec<u32> = pending.collect();
        with_frame(|f| f.all_pending.extend(pending));
        Poll::Pending
    }
}
