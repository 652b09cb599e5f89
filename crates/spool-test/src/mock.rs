//! Scripted stand-ins for executors: the test plays the LLM and the tools.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use spool_core::{OutboundRequest, RequestError, Value};

/// A mock's closure: the answer to a request.
pub type MockFn = Box<dyn FnMut(&OutboundRequest) -> Result<Value, RequestError> + Send>;

/// A latency closure: how long the answer to a request takes, in virtual time.
pub(crate) type LatencyFn = Box<dyn FnMut(&OutboundRequest) -> Duration + Send>;

/// How a mocked kind answers.
pub enum Mock {
    /// Always the same value.
    Fixed(Value),
    /// The next answer of a script, in order; a request after the script ran out gets
    /// a `Failed` error saying so.
    Script(VecDeque<Result<Value, RequestError>>),
    /// Whatever the closure makes of the request.
    Fn(MockFn),
    /// Not answered: the request is held until the test answers it
    /// (`TestScheduler::answer`), in any order.
    Held,
}

impl fmt::Debug for Mock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mock::Fixed(v) => f.debug_tuple("Fixed").field(v).finish(),
            Mock::Script(s) => f.debug_tuple("Script").field(&s.len()).finish(),
            Mock::Fn(_) => f.write_str("Fn(..)"),
            Mock::Held => f.write_str("Held"),
        }
    }
}

impl Mock {
    /// The answer to `request`, or `None` to hold it.
    pub(crate) fn answer(
        &mut self,
        request: &OutboundRequest,
    ) -> Option<Result<Value, RequestError>> {
        match self {
            Mock::Fixed(v) => Some(Ok(v.clone())),
            Mock::Script(script) => Some(script.pop_front().unwrap_or_else(|| {
                Err(RequestError::failed(format!(
                    "the mock script for `{}` ran out at request {}",
                    request.request.kind, request.key
                )))
            })),
            Mock::Fn(f) => Some(f(request)),
            Mock::Held => None,
        }
    }
}

/// How long a mock's answers take: the same for every request, or per request.
pub(crate) enum Latency {
    Fixed(Duration),
    Fn(LatencyFn),
}

impl Latency {
    pub(crate) fn of(&mut self, request: &OutboundRequest) -> Duration {
        match self {
            Latency::Fixed(d) => *d,
            Latency::Fn(f) => f(request),
        }
    }
}

impl fmt::Debug for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Latency::Fixed(d) => f.debug_tuple("Fixed").field(d).finish(),
            Latency::Fn(_) => f.write_str("Fn(..)"),
        }
    }
}

/// How one kind's requests are mocked: the answer and the latency.
#[derive(Debug)]
pub(crate) struct KindMock {
    pub(crate) mock: Mock,
    pub(crate) latency: Latency,
}
