//! Requests a task yields, the answers that resume it, and the signals that cancel them.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::id::RequestKey;
use crate::kind::Kind;
use crate::payload::Payload;

/// What a task asks of the outside world: a kind and a JSON payload.
///
/// # Example
/// ```
/// use serde_json::json;
/// use spool_core::{Kind, Request};
///
/// let r = Request::tool("ls", json!({"path": "/tmp"}));
/// assert_eq!(r.kind, Kind::tool("ls"));
/// let r = Request::llm(json!({"messages": []})).with_tokens(1200);
/// assert_eq!(r.tokens, 1200);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// What is asked for; decides the executor.
    pub kind: Kind,
    /// The arguments, prompt or question.
    pub payload: Payload,
    /// The estimated size in tokens (LLM requests), for token-rate limits; 0 if unknown.
    pub tokens: u32,
}

impl Request {
    /// A request of any kind.
    pub fn new(kind: Kind, payload: impl Into<Payload>) -> Request {
        Request {
            kind,
            payload: payload.into(),
            tokens: 0,
        }
    }

    /// An LLM completion request.
    pub fn llm(payload: impl Into<Payload>) -> Request {
        Request::new(Kind::Llm, payload)
    }

    /// A call of the tool `name` with `args`.
    pub fn tool(
        name: impl Into<std::borrow::Cow<'static, str>>,
        args: impl Into<Payload>,
    ) -> Request {
        Request::new(Kind::tool(name), args)
    }

    /// A question for a human, answered by the embedder.
    pub fn confirm(question: impl Into<Payload>) -> Request {
        Request::new(Kind::Confirm, question)
    }

    /// Sets the estimated size in tokens.
    #[must_use]
    pub fn with_tokens(mut self, tokens: u32) -> Request {
        self.tokens = tokens;
        self
    }
}

/// A request on its way to an executor, with its idempotency key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutboundRequest {
    /// `(task, request number)`: answer with it, de-duplicate by it.
    pub key: RequestKey,
    /// The request itself.
    pub request: Request,
}

/// Tells the executor of `kind` that the request `key` is no longer wanted: its task
/// was canceled or finished. The executor may stop the work; an answer that still
/// arrives is counted and dropped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelSignal {
    /// The request to stop.
    pub key: RequestKey,
    /// Its kind, to route the signal.
    pub kind: Kind,
}

/// Why a request failed, as reported by its executor. The task receives it as the
/// answer and decides what to do (retry, correct itself, fail).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[non_exhaustive]
pub enum RequestError {
    /// The executor tried and failed.
    #[error("the executor failed: {message}")]
    Failed {
        /// What went wrong, in the executor's words.
        message: String,
    },
    /// The provider refused for rate (HTTP 429).
    #[error("rate limited by the provider{}", retry_after.map(|d| format!(", retry after {d:?}")).unwrap_or_default())]
    RateLimited {
        /// The provider's `Retry-After`, if it gave one.
        retry_after: Option<Duration>,
    },
    /// The executor gave up waiting.
    #[error("timed out after {after:?}")]
    Timeout {
        /// How long it waited.
        after: Duration,
    },
    /// The arguments did not fit what the executor takes; the task can correct them.
    #[error("invalid arguments: {message}")]
    InvalidArguments {
        /// What did not fit.
        message: String,
    },
    /// The executor's answer could not be understood.
    #[error("malformed answer: {message}")]
    Malformed {
        /// What was wrong, with a (truncated) quote of what was received.
        message: String,
    },
    /// The executor's thread died before answering.
    #[error("the executor for `{kind}` died: {message}")]
    ExecutorDied {
        /// The executor's kind.
        kind: String,
        /// Why it died (a panic message, if there was one).
        message: String,
    },
    /// The work was canceled before it finished.
    #[error("canceled")]
    Canceled,
    /// The provider refused for rate (HTTP 429) and the scheduler gave the request up
    /// instead of waiting: the provider asked for longer than
    /// [`BackoffConfig::max_wait`](crate::BackoffConfig::max_wait), or waiting again
    /// would take the request's back-off past its
    /// [`BackoffConfig::budget`](crate::BackoffConfig::budget). The task can try later
    /// or fail.
    #[error(
        "rate limited by the provider{}{}: {bound}",
        retry_after.map(|d| format!(" (it asked to retry after {d:?})")).unwrap_or_default(),
        if waited.is_zero() { String::new() } else { format!(", given up after {waited:?} of back-off") }
    )]
    RateLimitExceeded {
        /// The provider's `Retry-After` on the last 429, if it gave one, as it gave it.
        retry_after: Option<Duration>,
        /// How long the request had been held back by earlier 429s.
        waited: Duration,
        /// Which bound it would have passed.
        bound: BackoffBound,
    },
    /// A budget of the task's was spent before this LLM request went (see
    /// [`Budgets`](crate::Budgets)): the request was not sent. The task can end with it,
    /// or go on without the model.
    #[error("the {scope}'s budget is spent: {spent} of {budget}")]
    BudgetSpent {
        /// Whose budget: the task's, its agent's, or the day's.
        scope: crate::budget::BudgetScope,
        /// What was spent.
        spent: crate::budget::Amount,
        /// The budget.
        budget: crate::budget::Amount,
    },
}

/// The bound on waiting out 429s that a request would have passed
/// ([`RequestError::RateLimitExceeded`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[non_exhaustive]
pub enum BackoffBound {
    /// The provider's `Retry-After` was longer than the longest wait.
    #[error("that is longer than the longest wait of {0:?}")]
    MaxWait(Duration),
    /// Backing off again would take the request past its back-off budget.
    #[error("backing off again would take it past its back-off budget of {0:?}")]
    Budget(Duration),
}

impl RequestError {
    /// A plain failure with a message.
    pub fn failed(message: impl Into<String>) -> RequestError {
        RequestError::Failed {
            message: message.into(),
        }
    }
}

/// An executor's answer to a request.
///
/// # Example
/// ```
/// # use spool_core::{Response, RequestError};
/// # fn demo(key: spool_core::RequestKey) {
/// let ok = Response::ok(key, serde_json::json!("result"));
/// let err = Response::err(key, RequestError::failed("disk full"));
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Response {
    /// The key of the request answered.
    pub key: RequestKey,
    /// The value, or why there is none.
    pub result: Result<Value, RequestError>,
    /// Tokens the provider says the request used, for token-rate limits.
    pub tokens_used: Option<u32>,
    /// What the provider says an LLM answer used, for budgets (journaled with the
    /// answer).
    #[serde(default)]
    pub usage: Option<crate::budget::Usage>,
}

impl Response {
    /// A successful answer.
    pub fn ok(key: RequestKey, value: impl Into<Value>) -> Response {
        Response {
            key,
            result: Ok(value.into()),
            tokens_used: None,
            usage: None,
        }
    }

    /// A failed answer.
    pub fn err(key: RequestKey, error: RequestError) -> Response {
        Response {
            key,
            result: Err(error),
            tokens_used: None,
            usage: None,
        }
    }

    /// An answer with any result.
    pub fn new(key: RequestKey, result: Result<Value, RequestError>) -> Response {
        Response {
            key,
            result,
            tokens_used: None,
            usage: None,
        }
    }

    /// Records the tokens the provider reports as used.
    #[must_use]
    pub fn with_tokens_used(mut self, tokens: u32) -> Response {
        self.tokens_used = Some(tokens);
        self
    }

    /// Records what the provider reports the answer used, for budgets.
    #[must_use]
    pub fn with_usage(mut self, usage: crate::budget::Usage) -> Response {
        self.usage = Some(usage);
        self
    }
}

/// An answer as the task sees it: which of its requests, and the result.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The request's number within the task.
    pub number: u32,
    /// The value, or the executor's error.
    pub result: Result<Value, RequestError>,
}

/// What became of an answer handed to the scheduler.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[must_use = "a dropped answer may point at a bug in an executor"]
pub enum Delivery {
    /// The answer reached its task.
    Delivered,
    /// The answer was counted and dropped, for the reason given.
    Dropped(DropReason),
    /// The answer was a 429: the request's kind backs off, and the request waits at its
    /// gate to go again with the same key.
    BackedOff,
}

/// Why an answer was dropped.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// No live or retained task has that id.
    UnknownTask,
    /// The task has finished or was canceled.
    TaskFinished,
    /// The task has no such request in flight (never made, or already answered).
    UnknownRequest,
}
