//! Executors: where requests of a kind are served, each on its own thread(s).
//!
//! The runtime sends an executor its requests in batches; the executor answers through
//! [`Replies`], at once (batched back to the loop after the batch) or later from any
//! thread through a [`Replier`].

use std::fmt;
use std::time::Instant;

use crossbeam_channel::Sender;
use spool_core::{CancelSignal, OutboundRequest, RequestError, Response, Value};

use crate::runtime::Inbound;

/// Serves requests of one kind (or of every tool, see `RuntimeBuilder::tools`).
///
/// A few lines are enough for most: answer in [`execute`](Executor::execute) with
/// `replies.send(..)`. An executor whose work takes time hands a [`Replier`] to whatever
/// will finish it, or keeps the work and finishes it in [`poll`](Executor::poll).
///
/// # Example
/// ```
/// use spool_core::{OutboundRequest, Response, Value};
/// use spool_runtime::{Executor, Replies};
///
/// /// Answers every request with its own payload.
/// struct Echo;
///
/// impl Executor for Echo {
///     fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
///         replies.send(Response::ok(request.key, request.request.payload));
///     }
/// }
/// ```
pub trait Executor: Send + 'static {
    /// Takes one request. Answer it now with `replies.send`, or later (see above).
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>);

    /// The request's task no longer wants it (canceled or ended): stop the work if
    /// possible. An answer sent anyway is dropped by the scheduler.
    fn cancel(&mut self, signal: CancelSignal, replies: &mut Replies<'_>) {
        let _ = (signal, replies);
    }

    /// Called after each batch and whenever the instant it last returned has come:
    /// finish due work and say when to be called next (`None`: only on new requests).
    fn poll(&mut self, now: Instant, replies: &mut Replies<'_>) -> Option<Instant> {
        let _ = (now, replies);
        None
    }
}

/// Answers from an executor to the loop: batched within one call of the executor.
pub struct Replies<'a> {
    pub(crate) batch: &'a mut Vec<Response>,
    pub(crate) inbound: &'a Sender<Inbound>,
}

impl fmt::Debug for Replies<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replies")
            .field("batched", &self.batch.len())
            .finish()
    }
}

impl Replies<'_> {
    /// Answers a request; the answer goes back with the rest of this batch.
    pub fn send(&mut self, response: Response) {
        self.batch.push(response);
    }

    /// A handle to answer later, from any thread.
    pub fn replier(&self) -> Replier {
        Replier {
            inbound: self.inbound.clone(),
        }
    }
}

/// Sends answers to the loop from any thread, one at a time.
#[derive(Clone)]
pub struct Replier {
    inbound: Sender<Inbound>,
}

impl fmt::Debug for Replier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Replier")
    }
}

impl Replier {
    /// Sends an answer. Returns `false` if the runtime is gone.
    pub fn send(&self, response: Response) -> bool {
        self.inbound
            .send(Inbound::Answers(vec![response], Vec::new()))
            .is_ok()
    }
}

/// An executor from a closure that answers each request at once.
///
/// # Example
/// ```
/// use serde_json::json;
/// let ls = spool_runtime::from_fn(|_req| Ok(json!(["a.txt", "b.txt"])));
/// ```
pub fn from_fn<F>(f: F) -> FnExecutor<F>
where
    F: FnMut(&OutboundRequest) -> Result<Value, RequestError> + Send + 'static,
{
    FnExecutor { f }
}

/// A closure as an [`Executor`]; made by [`from_fn`].
pub struct FnExecutor<F> {
    f: F,
}

impl<F> fmt::Debug for FnExecutor<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnExecutor")
    }
}

impl<F> Executor for FnExecutor<F>
where
    F: FnMut(&OutboundRequest) -> Result<Value, RequestError> + Send + 'static,
{
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        let result = (self.f)(&request);
        replies.send(Response::new(request.key, result));
    }
}
