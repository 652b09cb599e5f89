//! What an async task's future holds: [`Cx`], its handle on spool, and the futures it
//! makes — requests, sleeps, children and groups of them. Each reaches its task
//! through the thread-local [`frame`] of the poll it runs in.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use serde_json::Value;

use super::frame::{self, Wake, with_frame};
use crate::id::TaskId;
use crate::payload::Payload;
use crate::request::{Request, RequestError};
use crate::state::Outcome;
use crate::task::NewTask;
use crate::time::Time;

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
    /// The handle given to a new task's future.
    pub(super) fn new() -> Cx {
        Cx { _private: () }
    }

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

    /// Calls the tool `name`: a `&'static str` (no allocation) or a `String` made at
    /// run time, such as a name read from the model's answer
    /// (`cx.tool(call["name"].as_str().unwrap_or_default().to_owned(), args)`).
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

    /// Whether this run takes the new branch of the code change `name`: see
    /// [`TaskContext::patched`](crate::TaskContext::patched). `true` in a run started
    /// by code that has the change; `false` in one replayed from a recording made
    /// before it. The first answer for a name sticks for the task's life.
    ///
    /// ```
    /// # use serde_json::{json, Value};
    /// # use spool_core::{Cx, Outcome};
    /// async fn agent(cx: Cx, topic: Value) -> Outcome {
    ///     let prompt = if cx.patched("brief-prompts") {
    ///         json!({"topic": topic, "style": "brief"})
    ///     } else {
    ///         json!({"topic": topic})
    ///     };
    ///     Ok(cx.llm(prompt).await?)
    /// }
    /// ```
    ///
    /// # Panics
    /// Outside a spool task's poll.
    pub fn patched(&self, name: &str) -> bool {
        with_frame(|f| {
            let task = f.task.unwrap_or(TaskId(0));
            let tape = f
                .tape_patches
                .as_ref()
                .map(|names| names.iter().any(|n| n == name));
            f.patches.decide(task, name, tape)
        })
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
                let number = f.stage(request);
                *state = RequestState::Sent(number);
                f.register(Wake::Answer(number), cx.waker());
                Poll::Pending
            }
            RequestState::Sent(number) => match f.take_answer(*number) {
                Some(answer) => {
                    *state = RequestState::Done;
                    Poll::Ready(answer.result)
                }
                None => {
                    f.register(Wake::Answer(*number), cx.waker());
                    Poll::Pending
                }
            },
            RequestState::Done => panic!("a spool request future was polled after it completed"),
        })
    }
}

impl Drop for RequestFuture {
    fn drop(&mut self) {
        // Dropped before its answer was taken (a `select` that chose another branch):
        // its answer, now or later, is discarded rather than kept forever.
        if let RequestState::Sent(number) = self.state {
            frame::abandon(number);
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
            if outcome.is_none()
                && let Poll::Ready(result) = child.poll_outcome(cx.waker())
            {
                *outcome = Some(result);
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

impl JoinAny {
    /// The handles it waited on, to wait again for the children that had not ended
    /// when it resolved (await it by `&mut`, then take them back; drop the one that
    /// ended, whose result was taken).
    pub fn into_children(self) -> Vec<ChildHandle> {
        self.children
    }
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
            if answer.is_none()
                && let Poll::Ready(result) = Pin::new(&mut *request).poll(cx)
            {
                *answer = Some(result);
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
