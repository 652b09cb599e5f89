//! The demo's executors: a scripted LLM and simulated `search`, `read_file` and `calc`
//! tools. Each answers at once but holds the answer back for a seeded latency in a
//! due-time heap, so one thread serves any number of requests without sleeping. The
//! tools are function tools ([`crate::agent::tools::function_tools`]): their arguments are checked against
//! their schemas, and the same schemas are offered to the LLM.

use std::cmp::Ordering;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::time::Duration;

use serde_json::{Value, json};
use spool_core::{
    CancelSignal, Executor, OutboundRequest, Replies, RequestError, RequestKey, Response,
    SeededRng, Time,
};

use super::script::Script;
use crate::agent::conversation::agent_named_in;
use crate::agent::seed::{fnv1a, mix};

/// An answer held back until its due time; ordered by `(due, seq)`.
#[derive(Debug)]
struct Due {
    at: Time,
    seq: u64,
    response: Response,
}

impl PartialEq for Due {
    fn eq(&self, other: &Due) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Due) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Due) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// An executor that computes each answer with `answer` when the request arrives, and
/// sends it once a latency drawn from `latency_us` (microseconds, seeded by the run's
/// seed and the request key) has passed.
pub(crate) struct Simulated<F> {
    answer: F,
    salt: u64,
    latency_us: RangeInclusive<u64>,
    queue: BinaryHeap<Reverse<Due>>,
    next_seq: u64,
    served: Arc<AtomicU64>,
    /// The most requests it held at once (answers not yet due).
    peak: Arc<AtomicU64>,
}

impl<F> std::fmt::Debug for Simulated<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulated")
            .field("latency_us", &self.latency_us)
            .field("queued", &self.queue.len())
            .finish_non_exhaustive()
    }
}

impl<F> Simulated<F>
where
    F: FnMut(&OutboundRequest) -> Result<Value, RequestError> + Send + 'static,
{
    /// An executor answering with `answer` after `latency_ms` (inclusive range), seeded
    /// by `seed` and `kind` so that each kind draws its own latencies; `served` counts
    /// the requests it takes.
    pub(crate) fn new(
        seed: u64,
        kind: &str,
        latency_ms: RangeInclusive<u64>,
        served: Arc<AtomicU64>,
        answer: F,
    ) -> Simulated<F> {
        let latency_us = latency_ms.start() * 1000..=latency_ms.end() * 1000;
        Simulated {
            answer,
            salt: mix(seed, fnv1a(kind)),
            latency_us,
            queue: BinaryHeap::new(),
            next_seq: 0,
            served,
            peak: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Counts into `peak` the most requests it holds at once.
    pub(crate) fn with_peak(mut self, peak: Arc<AtomicU64>) -> Simulated<F> {
        self.peak = peak;
        self
    }

    /// The latency of the request `key`: fixed by the seed, the kind and the key, not by
    /// the order in which requests reach the executor.
    fn latency(&self, key: RequestKey) -> Duration {
        let (low, high) = (*self.latency_us.start(), *self.latency_us.end());
        let mut rng = SeededRng::new(mix(
            mix(self.salt, key.task().get()),
            u64::from(key.number()),
        ));
        Duration::from_micros(low + rng.below(high.saturating_sub(low) + 1))
    }
}

impl<F> Executor for Simulated<F>
where
    F: FnMut(&OutboundRequest) -> Result<Value, RequestError> + Send + 'static,
{
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        self.served.fetch_add(1, AtomicOrdering::Relaxed);
        let response = Response::new(request.key, (self.answer)(&request));
        let latency = self.latency(request.key);
        if latency.is_zero() {
            replies.send(response);
            return;
        }
        self.next_seq += 1;
        self.queue.push(Reverse(Due {
            at: replies.now() + latency,
            seq: self.next_seq,
            response,
        }));
        self.peak
            .fetch_max(self.queue.len() as u64, AtomicOrdering::Relaxed);
    }

    fn cancel(&mut self, signal: CancelSignal, _replies: &mut Replies<'_>) {
        self.queue
            .retain(|Reverse(due)| due.response.key != signal.key);
    }

    fn poll(&mut self, now: Time, replies: &mut Replies<'_>) -> Option<Time> {
        while let Some(Reverse(due)) = self.queue.peek() {
            if due.at > now {
                return Some(due.at);
            }
            if let Some(Reverse(due)) = self.queue.pop() {
                replies.send(due.response);
            }
        }
        None
    }
}

/// The scripted LLM: reads the agent's name from the system prompt and its
/// observations so far from the conversation, and answers as the agent's [`Script`]
/// says, in the executor-normalized format a real endpoint's answers come in.
pub(crate) fn scripted_llm(
    seed: u64,
) -> impl FnMut(&OutboundRequest) -> Result<Value, RequestError> + Send {
    move |request| {
        let payload = &request.request.payload;
        let messages = payload["messages"]
            .as_array()
            .ok_or_else(|| invalid("the request has no `messages` list".to_owned()))?;
        let system = messages
            .first()
            .filter(|m| m["role"] == "system")
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default();
        let index = agent_named_in(system)
            .and_then(|name| name.strip_prefix("agent-"))
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| invalid(format!("the system prompt names no agent-<n>: {system:?}")))?;
        let observations = observations(messages)?;
        Script::new(seed, index).reply(&observations)
    }
}

/// The rounds of tool use in a conversation, as the script reads them: one array per
/// assistant message with tool calls, of `{"tool", "args", "result" | "error"}` per
/// call, matched to the tool messages by call id.
fn observations(messages: &[Value]) -> Result<Vec<Value>, RequestError> {
    let mut rounds = Vec::new();
    for message in messages {
        let Some(calls) = message["tool_calls"].as_array() else {
            continue;
        };
        let mut round = Vec::with_capacity(calls.len());
        for call in calls {
            let id = &call["id"];
            let answer = messages
                .iter()
                .find(|m| m["role"] == "tool" && m["tool_call_id"] == *id)
                .and_then(|m| m["content"].as_str())
                .ok_or_else(|| invalid(format!("no tool message answers the call {id}")))?;
            let args = call["function"]["arguments"]
                .as_str()
                .and_then(|text| serde_json::from_str::<Value>(text).ok())
                .unwrap_or(Value::Null);
            let tool = &call["function"]["name"];
            let content = serde_json::from_str::<Value>(answer)
                .unwrap_or_else(|_| Value::String(answer.to_owned()));
            round.push(match content.get("error") {
                Some(error) => json!({"tool": tool, "args": args, "error": error}),
                None => json!({"tool": tool, "args": args, "result": content}),
            });
        }
        rounds.push(Value::Array(round));
    }
    Ok(rounds)
}

/// Counts the requests an executor takes into `served`; everything else is `inner`'s.
#[derive(Debug)]
pub(crate) struct Counted<E> {
    inner: E,
    served: Arc<AtomicU64>,
}

impl<E> Counted<E> {
    /// `inner`, counted into `served`.
    pub(crate) fn new(inner: E, served: Arc<AtomicU64>) -> Counted<E> {
        Counted { inner, served }
    }
}

impl<E: Executor> Executor for Counted<E> {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        self.served.fetch_add(1, AtomicOrdering::Relaxed);
        self.inner.execute(request, replies);
    }

    fn cancel(&mut self, signal: CancelSignal, replies: &mut Replies<'_>) {
        self.inner.cancel(signal, replies);
    }

    fn poll(&mut self, now: Time, replies: &mut Replies<'_>) -> Option<Time> {
        self.inner.poll(now, replies)
    }
}

/// A provider that is sometimes over its rate: the first attempt of about one request
/// in `one_in` (fixed by the seed and the key) is answered 429 with `Retry-After:
/// retry_after`; the attempt after that goes through to `answer`. `rate_limited` counts
/// the 429s.
pub(crate) fn rate_limited(
    seed: u64,
    one_in: u64,
    retry_after: Duration,
    rate_limited: Arc<AtomicU64>,
    mut answer: impl FnMut(&OutboundRequest) -> Result<Value, RequestError> + Send,
) -> impl FnMut(&OutboundRequest) -> Result<Value, RequestError> + Send {
    let mut refused = std::collections::BTreeSet::new();
    move |request| {
        let key = request.key;
        let draw = mix(mix(seed ^ 0x429, key.task().get()), u64::from(key.number()));
        if one_in > 0 && draw.is_multiple_of(one_in) && refused.insert(key) {
            rate_limited.fetch_add(1, AtomicOrdering::Relaxed);
            return Err(RequestError::RateLimited {
                retry_after: Some(retry_after),
            });
        }
        answer(request)
    }
}

fn invalid(message: String) -> RequestError {
    RequestError::InvalidArguments { message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conversation_is_read_back_into_rounds() {
        let messages = [
            json!({"role": "system", "content": "You are agent-3, a research agent."}),
            json!({"role": "user", "content": "What is 2 + 2?"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "calc", "arguments": "{\"expr\":\"2 + 2\"}"}},
                {"id": "b", "type": "function", "function": {"name": "search", "arguments": "{}"}},
            ]}),
            json!({"role": "tool", "tool_call_id": "b", "content": "{\"error\":\"no\"}"}),
            json!({"role": "tool", "tool_call_id": "a", "content": "{\"expr\":\"2 + 2\",\"value\":4}"}),
        ];
        assert_eq!(
            observations(&messages),
            Ok(vec![json!([
                {"tool": "calc", "args": {"expr": "2 + 2"}, "result": {"expr": "2 + 2", "value": 4}},
                {"tool": "search", "args": {}, "error": "no"},
            ])])
        );
        assert!(observations(&messages[..4]).is_err());
    }
}
