//! The executor contract: where requests of a kind are served, and how answers come back.
//!
//! The contract is sans-IO like the rest of the core: an executor is handed requests
//! and cancel signals, answers into a [`Replies`] buffer, and is polled with the
//! scheduler's [`Time`]. The driver (the threaded runtime, or `TestScheduler` under
//! virtual time) decides where the executor runs and carries the answers back; the only
//! path out of the buffer is a [`ReplySink`] the driver supplies.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::id::RequestKey;
use crate::request::{CancelSignal, OutboundRequest, RequestError, Response};
use crate::time::Time;

/// Serves requests of one kind (or of every tool).
///
/// A few lines are enough for most: answer in [`execute`](Executor::execute) with
/// `replies.send(..)`. An executor whose work takes time hands a [`Replier`] to whatever
/// will finish it, or keeps the work and finishes it in [`poll`](Executor::poll).
///
/// The driver calls the methods in this order: any number of `execute` and `cancel`
/// calls as requests and signals arrive, then `poll` after each batch, and again once
/// the time `poll` last returned has come.
///
/// # Example
/// ```
/// use spool_core::{Executor, OutboundRequest, Replies, Response};
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

    /// Called after each batch and whenever the time it last returned has come:
    /// finish due work and say when to be called next (`None`: only on new requests).
    /// `now` is the scheduler's time (virtual under `TestScheduler`).
    fn poll(&mut self, now: Time, replies: &mut Replies<'_>) -> Option<Time> {
        let _ = (now, replies);
        None
    }
}

/// Where a [`Replier`]'s answers go: provided by the driver (the runtime's completion
/// channel, `TestScheduler`'s queue), so the core never touches a channel itself.
pub trait ReplySink: Send + Sync {
    /// Hands an answer to the driver. Returns `false` if the driver is gone, so the
    /// answer will never be read.
    fn send(&self, response: Response) -> bool;

    /// Hands progress on the request `key` (a piece of an answer still being made) to
    /// whoever watches the driver. Progress is never an input of the scheduler: it is
    /// not journaled and changes nothing a task sees; the answer sent later with
    /// [`send`](ReplySink::send) is what counts. Returns `true` if it was passed on.
    /// The default drops it (`TestScheduler`, and drivers with no one watching).
    fn progress(&self, key: RequestKey, delta: Delta) -> bool {
        let _ = (key, delta);
        false
    }
}

/// A piece of an answer still being made: text and tool-call fragments that arrived
/// for one request (a model's streamed tokens), in order.
///
/// The pieces of one request are numbered from 0 by `seq`, in the order they were
/// made. When the executor starts the answer over (a retry after a broken
/// connection), the next piece has `restart` set: what came before it is void.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// The piece's number within its request: 0, 1, 2, ...
    pub seq: u64,
    /// Whether the answer starts over with this piece (the pieces before it are void).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restart: bool,
    /// Text added to the answer's content (may be empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// Fragments of tool calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallDelta>,
}

/// A fragment of one tool call in a [`Delta`]: the call's position in the answer,
/// its id and name when they first come, and a piece of its arguments' text.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallDelta {
    /// Which call of the answer (from 0) the fragment belongs to.
    pub index: u32,
    /// The call's id, in the fragment that first gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tool's name, in the fragment that first gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Text added to the call's arguments (a piece of JSON, not JSON on its own).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub arguments: String,
}

impl Delta {
    /// A piece of text, numbered `seq`.
    ///
    /// # Example
    /// ```
    /// let delta = spool_core::Delta::text(0, "Hel");
    /// assert_eq!(serde_json::to_string(&delta).ok().as_deref(), Some(r#"{"seq":0,"text":"Hel"}"#));
    /// ```
    pub fn text(seq: u64, text: impl Into<String>) -> Delta {
        Delta {
            seq,
            text: text.into(),
            ..Delta::default()
        }
    }
}

/// Answers from an executor to the driver, batched within one call of the executor.
///
/// The driver makes one around each call with [`Replies::new`] and takes the batched
/// answers from the buffer it lent afterwards.
pub struct Replies<'a> {
    now: Time,
    batch: &'a mut Vec<Response>,
    sink: &'a Arc<dyn ReplySink>,
}

impl fmt::Debug for Replies<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replies")
            .field("now", &self.now)
            .field("batched", &self.batch.len())
            .finish()
    }
}

impl<'a> Replies<'a> {
    /// A reply buffer for one call of an executor at `now`: answers sent at once go to
    /// `batch`, answers sent later through a [`Replier`] go to `sink`.
    pub fn new(now: Time, batch: &'a mut Vec<Response>, sink: &'a Arc<dyn ReplySink>) -> Self {
        Replies { now, batch, sink }
    }

    /// The scheduler's time when the driver made this call: what an executor that
    /// holds work back measures its delays from.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Answers a request; the answer goes back with the rest of this batch.
    pub fn send(&mut self, response: Response) {
        self.batch.push(response);
    }

    /// A handle to answer later, from any thread.
    pub fn replier(&self) -> Replier {
        Replier {
            sink: Arc::clone(self.sink),
        }
    }
}

/// Sends answers to the driver from any thread, one at a time.
#[derive(Clone)]
pub struct Replier {
    sink: Arc<dyn ReplySink>,
}

impl fmt::Debug for Replier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Replier")
    }
}

impl Replier {
    /// A replier that hands its answers to `sink`.
    pub fn new(sink: Arc<dyn ReplySink>) -> Replier {
        Replier { sink }
    }

    /// Sends an answer. Returns `false` if the driver is gone.
    pub fn send(&self, response: Response) -> bool {
        self.sink.send(response)
    }

    /// Sends progress on request `key` ([`ReplySink::progress`]): not an answer, never
    /// journaled. Send every delta of a request before its answer. Returns `false` if
    /// no one takes it.
    pub fn progress(&self, key: RequestKey, delta: Delta) -> bool {
        self.sink.progress(key, delta)
    }
}

/// An executor from a closure that answers each request at once.
///
/// # Example
/// ```
/// use serde_json::json;
/// let ls = spool_core::from_fn(|_req| Ok(json!(["a.txt", "b.txt"])));
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::id::{RequestKey, TaskId};
    use crate::kind::Kind;
    use crate::request::Request;

    /// A sink that keeps what it is sent.
    #[derive(Default)]
    struct Kept(Mutex<Vec<Response>>);

    impl ReplySink for Kept {
        fn send(&self, response: Response) -> bool {
            self.0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(response);
            true
        }
    }

    /// A sink that keeps the progress it is handed, and takes no answers.
    #[derive(Default)]
    struct Watched(Mutex<Vec<(RequestKey, Delta)>>);

    impl ReplySink for Watched {
        fn send(&self, _response: Response) -> bool {
            false
        }

        fn progress(&self, key: RequestKey, delta: Delta) -> bool {
            self.0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push((key, delta));
            true
        }
    }

    #[test]
    fn progress_reaches_a_sink_that_takes_it_and_the_default_drops_it() {
        let key = request(3).key;
        let watched = Arc::new(Watched::default());
        let replier = Replier::new(watched.clone());
        assert!(replier.progress(key, Delta::text(0, "Hel")));
        assert!(replier.progress(key, Delta::text(1, "lo")));
        let seen = watched.0.lock().map(|v| v.clone()).unwrap_or_default();
        assert_eq!(
            seen,
            vec![(key, Delta::text(0, "Hel")), (key, Delta::text(1, "lo"))]
        );
        // A sink without `progress` of its own drops it and says so.
        let kept = Replier::new(Arc::new(Kept::default()));
        assert!(!kept.progress(key, Delta::text(0, "dropped")));
    }

    fn request(number: u32) -> OutboundRequest {
        OutboundRequest {
            key: RequestKey::new(TaskId::from_raw(1), number, 0),
            request: Request::new(Kind::tool("echo"), serde_json::json!(number)),
        }
    }

    #[test]
    fn answers_now_go_to_the_batch_and_later_ones_to_the_sink() {
        let kept = Arc::new(Kept::default());
        let sink: Arc<dyn ReplySink> = kept.clone();
        let mut batch = Vec::new();
        let mut replies = Replies::new(Time::from_nanos(5), &mut batch, &sink);
        assert_eq!(replies.now(), Time::from_nanos(5));
        let mut echo = from_fn(|req| Ok(req.request.payload.clone().into_value()));
        echo.execute(request(1), &mut replies);
        let replier = replies.replier();
        assert!(replier.send(Response::ok(request(2).key, serde_json::json!("later"))));
        assert_eq!(
            batch,
            vec![Response::ok(request(1).key, serde_json::json!(1))]
        );
        let later = kept.0.lock().map(|v| v.clone()).unwrap_or_default();
        assert_eq!(
            later,
            vec![Response::ok(request(2).key, serde_json::json!("later"))]
        );
    }
}
