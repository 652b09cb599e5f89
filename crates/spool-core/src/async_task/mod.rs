//! Coroutine-style tasks: an `async` block that awaits spool, run as an [`AgentTask`].
//!
//! The future is polled by spool's own loop with a no-op waker: spool, not the waker,
//! decides when a task is ready — when an answer, a timer or a joined child arrives.
//! During a poll the future reaches its task through a thread-local frame that is
//! active for that poll only; what it asks for is handed to the [`TaskContext`]
//! afterwards, in order, so an async task makes the same requests, with the same
//! numbers, as the same agent written as an explicit state machine.
//!
//! The modules depend one way: this one on all three, [`cx`] (the futures) on
//! [`frame`] (the thread-local and the adapter), [`replay`] (saving by journal replay)
//! on none of them.

mod cx;
mod frame;
mod replay;

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

pub use cx::{AllRequests, ChildHandle, Cx, JoinAll, JoinAny, RequestFuture, Sleep};
pub use replay::Nondeterminism;
pub(crate) use replay::RemakeError;
pub(crate) use replay::log_input;

use frame::Kept;
use replay::ReplayLog;

use crate::id::TaskId;
use crate::saved::{SavedTask, StateError};
use crate::state::Outcome;
use crate::task::{AgentTask, Step, TaskContext};

/// An agent written as `async` code; made by [`async_task`].
pub struct AsyncTask {
    name: &'static str,
    future: Pin<Box<dyn Future<Output = Outcome> + Send>>,
    kept: Kept,
    /// For a task made with [`AsyncTask::replayable`]: its input and what each poll
    /// received, to rebuild it on restore.
    log: Option<Box<ReplayLog>>,
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
        future: Box::pin(f(Cx::new())),
        kept: Kept::default(),
        log: None,
    }
}

impl AgentTask for AsyncTask {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        let AsyncTask {
            future, kept, log, ..
        } = self;
        match log {
            Some(log) => log.record(cx, |cx| frame::poll(future.as_mut(), kept, cx)),
            None => frame::poll(future.as_mut(), kept, cx),
        }
    }

    fn type_name(&self) -> &'static str {
        self.name
    }

    fn save(&self) -> Result<SavedTask, StateError> {
        match &self.log {
            Some(log) => log.save(),
            None => Err(StateError::Unsaveable(format!(
                "async task `{}` was made with `async_task`; make it with \
                 `AsyncTask::replayable` to save it",
                self.name
            ))),
        }
    }
}

impl AsyncTask {
    /// An async task that can be saved in a snapshot: `f` makes its future from its
    /// `input`, and the same `f` is registered under `name` with
    /// [`TaskRegistry::with_async`](crate::TaskRegistry::with_async), so that a restore
    /// can make it again and replay what it received.
    ///
    /// The task keeps a record of every poll — its time, the answers and children's
    /// outcomes it received, and what it asked for — so its memory grows with its
    /// history. The future must be deterministic: the same inputs, the same requests.
    ///
    /// # Example
    /// ```
    /// use serde_json::{json, Value};
    /// use spool_core::{AsyncTask, Cx, Outcome, TaskRegistry};
    ///
    /// async fn summarize(cx: Cx, input: Value) -> Outcome {
    ///     let text = cx.tool("read_file", input.clone()).await?;
    ///     Ok(cx.llm(json!({"summarize": text})).await?)
    /// }
    ///
    /// let task = AsyncTask::replayable("summarize", json!({"path": "notes.txt"}), summarize);
    /// let registry = TaskRegistry::new().with_async("summarize", summarize);
    /// ```
    pub fn replayable<F, Fut>(name: &'static str, input: Value, f: F) -> AsyncTask
    where
        F: FnOnce(Cx, Value) -> Fut,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        let future_input = input.clone();
        let mut task = async_task(name, move |cx| f(cx, future_input));
        task.log = Some(Box::new(ReplayLog::new(input)));
        task
    }

    /// Makes the task again from `bytes` (what [`save`](AgentTask::save) wrote) with
    /// `make`, and replays its polls as task `task`.
    pub(crate) fn rebuild(
        task: TaskId,
        bytes: &[u8],
        make: &dyn Fn(Value) -> AsyncTask,
    ) -> Result<AsyncTask, RemakeError> {
        let log = ReplayLog::decode(bytes)?;
        let mut rebuilt = make(log.input().clone());
        let AsyncTask { future, kept, .. } = &mut rebuilt;
        log.replay(task, |cx| frame::poll(future.as_mut(), kept, cx))?;
        rebuilt.log = Some(Box::new(log));
        Ok(rebuilt)
    }
}
