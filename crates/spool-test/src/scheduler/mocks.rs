//! How a test scheduler answers requests: fixed answers, scripted LLM replies, answers
//! computed from the request, with latencies, real executors on virtual time, or held
//! for the test to answer.

use std::time::Duration;

use spool_core::{Executor, Kind, OutboundRequest, RequestError, Value};

use super::TestScheduler;
use crate::mock::{KindMock, Latency, Mock};

impl TestScheduler {
    /// Serves the tool `name` with a fixed answer.
    pub fn inject_mock_tool(&mut self, name: &str, result: impl Into<Value>) {
        self.mock(Kind::tool(name.to_owned()), Mock::Fixed(result.into()));
    }

    /// Serves LLM requests from a script of answers, in order.
    pub fn mock_llm<I>(&mut self, answers: I)
    where
        I: IntoIterator,
        I::Item: Into<Value>,
    {
        let script = answers.into_iter().map(|a| Ok(a.into())).collect();
        self.mock(Kind::Llm, Mock::Script(script));
    }

    /// Serves LLM requests with a closure of the request.
    pub fn mock_llm_fn<F>(&mut self, f: F)
    where
        F: FnMut(&OutboundRequest) -> Result<Value, RequestError> + Send + 'static,
    {
        self.mock(Kind::Llm, Mock::Fn(Box::new(f)));
    }

    /// Serves `kind` with `mock` (replacing any mock for it), answering at once.
    pub fn mock(&mut self, kind: Kind, mock: Mock) {
        self.mock_with_latency(kind, mock, Duration::ZERO);
    }

    /// Serves `kind` with `mock`, each answer arriving `latency` after the request in
    /// virtual time.
    pub fn mock_with_latency(&mut self, kind: Kind, mock: Mock, latency: Duration) {
        self.executors.remove(&kind);
        let latency = Latency::Fixed(latency);
        self.mocks.insert(kind, KindMock { mock, latency });
    }

    /// Serves `kind` with `mock`, the answer to each request arriving after the virtual
    /// time `latency` gives for that request (zero: at once). Answers due at the same
    /// time arrive in the order their requests went out.
    ///
    /// # Example
    /// ```
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use spool_core::{Kind, Request, Step, Time, task_fn};
    /// use spool_test::{Mock, TestScheduler};
    ///
    /// let mut scheduler = TestScheduler::new();
    /// // A search takes as many seconds as its query has words.
    /// scheduler.mock_with_latency_fn(Kind::tool("search"), Mock::Fixed(json!("hits")), |out| {
    ///     let query = out.request.payload.as_str().unwrap_or_default();
    ///     Duration::from_secs(query.split(' ').count() as u64)
    /// });
    /// for query in ["a b c", "a"] {
    ///     let mut asked = false;
    ///     scheduler.spawn(task_fn("searcher", move |cx| {
    ///         if !asked {
    ///             asked = true;
    ///             cx.request(Request::new(Kind::tool("search"), json!(query)));
    ///             return Step::Wait;
    ///         }
    ///         Step::done("found")
    ///     }));
    /// }
    /// scheduler.run_until_quiet();
    /// let times: Vec<Time> = scheduler.delivered_answers().iter().map(|a| a.at).collect();
    /// assert_eq!(format!("{times:?}"), "[1.000s, 3.000s]");
    /// ```
    pub fn mock_with_latency_fn<F>(&mut self, kind: Kind, mock: Mock, latency: F)
    where
        F: FnMut(&OutboundRequest) -> Duration + Send + 'static,
    {
        self.executors.remove(&kind);
        let latency = Latency::Fn(Box::new(latency));
        self.mocks.insert(kind, KindMock { mock, latency });
    }

    /// Serves `kind` with a real executor (replacing any mock for it), on virtual time:
    /// each request goes to [`Executor::execute`] as it leaves the scheduler; answers
    /// it sends through its `Replies` arrive at once, and answers it sends later
    /// through a `Replier` arrive at the next step, at the virtual time then.
    /// [`Executor::poll`] is called with the virtual time after each routing that gave
    /// it work, and when the wake-up it returned comes: [`advance`](TestScheduler::advance)
    /// and [`run_until_quiet`](TestScheduler::run_until_quiet) stop there.
    ///
    /// # Example
    /// ```
    /// use serde_json::json;
    /// use spool_core::{Kind, TaskState, async_task, from_fn};
    /// use spool_test::TestScheduler;
    ///
    /// let mut scheduler = TestScheduler::new();
    /// scheduler.executor(Kind::tool("len"), from_fn(|req| {
    ///     Ok(json!(req.request.payload.value().as_str().map_or(0, str::len)))
    /// }));
    /// let id = scheduler.spawn(async_task("measure", |cx| async move {
    ///     Ok(cx.tool("len", json!("four")).await?)
    /// }));
    /// scheduler.step_until_idle();
    /// assert_eq!(scheduler.task_state(id), TaskState::Completed(Ok(json!(4))));
    /// ```
    pub fn executor(&mut self, kind: Kind, executor: impl Executor) {
        self.mocks.remove(&kind);
        self.executors.insert(kind, Box::new(executor));
    }

    /// Holds every request of `kind` for the test to answer with
    /// [`answer`](TestScheduler::answer) or [`respond`](TestScheduler::respond).
    pub fn hold(&mut self, kind: Kind) {
        self.mock(kind, Mock::Held);
    }
}
