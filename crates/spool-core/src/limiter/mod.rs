//! Request limiters: applied between a task's yield and its executor.
//!
//! Each request kind that has a limit (or has been answered with a 429) gets a gate:
//! its requests wait there, in the order of their task's priority (then the order they
//! were made), until every limit of the kind lets the next one go — a cap on requests
//! in flight, a sliding window of requests, a window of estimated tokens, and the
//! back-off after a 429. One kind at its limit never holds back another: tool calls go
//! on while LLM calls wait. A per-agent cap on requests in flight applies across kinds;
//! each agent's share of one kind (its requests of the kind in flight and in a window)
//! is held at the kind's gate too (`quota`).

mod backoff;
mod quota;
mod tokens;
mod window;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

pub use backoff::BackoffConfig;
pub(crate) use backoff::{Backoff, Hit};
pub use quota::AgentKindLimits;
pub(crate) use quota::{QuotaRecord, Quotas, QuotasRecord};
pub(crate) use tokens::TokenWindow;
pub(crate) use window::SlidingWindow;

use crate::id::RequestKey;
use crate::kind::Kind;
use crate::priority::Priority;
use crate::time::Time;

/// The limits on one request kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct KindLimits {
    /// At most this many requests of the kind with executors at once.
    pub max_in_flight: Option<u32>,
    /// At most `.0` requests sent in any window of `.1`.
    pub window: Option<(u32, Duration)>,
    /// At most `.0` estimated tokens ([`Request::tokens`](crate::Request::tokens)) sent
    /// in any window of `.1`.
    pub tokens: Option<(u64, Duration)>,
}

/// The request limiters of a scheduler.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use spool_core::{Kind, RequestLimits};
///
/// let limits = RequestLimits::new()
///     .max_in_flight(Kind::Llm, 10)                              // 10 API calls
///     .window(Kind::Llm, 50, Duration::from_secs(60))            // 50 calls a minute
///     .tokens(Kind::Llm, 200_000, Duration::from_secs(60))       // 200k tokens a minute
///     .per_agent_in_flight(4);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct RequestLimits {
    /// Limits by kind.
    pub kinds: BTreeMap<Kind, KindLimits>,
    /// At most this many requests in flight per agent, across kinds.
    pub per_agent_in_flight: Option<u32>,
    /// At most this many requests in flight for one agent, by name, across kinds, in
    /// place of `per_agent_in_flight`.
    pub agents: BTreeMap<String, u32>,
    /// What a 429 does.
    pub backoff: BackoffConfig,
    /// Each agent's limits on requests of a kind, by kind, beside the kind's own.
    /// (Snapshots carry these apart from the rest, so this field is not serialized.)
    #[serde(skip)]
    pub agent_kinds: BTreeMap<Kind, AgentKindLimits>,
    /// One agent's own limits on requests of a kind, by agent name then kind, in place
    /// of `agent_kinds`' (a limit left unset is the common one). Not serialized, as
    /// `agent_kinds`.
    #[serde(skip)]
    pub agent_kinds_for: BTreeMap<String, BTreeMap<Kind, AgentKindLimits>>,
}

impl RequestLimits {
    /// No limits; 429s back off with the default settings.
    pub fn new() -> RequestLimits {
        RequestLimits::default()
    }

    fn kind(&mut self, kind: Kind) -> &mut KindLimits {
        self.kinds.entry(kind).or_default()
    }

    /// At most `max` requests of `kind` with executors at once.
    #[must_use]
    pub fn max_in_flight(mut self, kind: Kind, max: u32) -> RequestLimits {
        self.kind(kind).max_in_flight = Some(max);
        self
    }

    /// At most `max` requests of `kind` sent in any window of `per`.
    #[must_use]
    pub fn window(mut self, kind: Kind, max: u32, per: Duration) -> RequestLimits {
        self.kind(kind).window = Some((max, per));
        self
    }

    /// At most `max` estimated tokens of `kind` sent in any window of `per`.
    #[must_use]
    pub fn tokens(mut self, kind: Kind, max: u64, per: Duration) -> RequestLimits {
        self.kind(kind).tokens = Some((max, per));
        self
    }

    /// At most `max` requests in flight per agent.
    #[must_use]
    pub fn per_agent_in_flight(mut self, max: u32) -> RequestLimits {
        self.per_agent_in_flight = Some(max);
        self
    }

    /// At most `max` requests in flight for the agent named `agent`, across kinds, in
    /// place of [`per_agent_in_flight`](RequestLimits::per_agent_in_flight).
    ///
    /// # Example
    /// ```
    /// use spool_core::RequestLimits;
    ///
    /// // Every agent may have 4 requests out; "interactive" 16.
    /// let limits = RequestLimits::new().per_agent_in_flight(4).agent("interactive", 16);
    /// assert_eq!(limits.agents["interactive"], 16);
    /// ```
    #[must_use]
    pub fn agent(mut self, agent: impl Into<String>, max_in_flight: u32) -> RequestLimits {
        self.agents.insert(agent.into(), max_in_flight);
        self
    }

    /// Each agent may have at most `limits` of its requests of `kind` in flight and in
    /// a window, beside the kind's own limits: a request goes when both have room.
    /// Requests an agent has no room for wait apart, so they never hold back another
    /// agent's requests of the kind; those that wait still go in task-priority order.
    ///
    /// # Example
    /// ```
    /// use std::time::Duration;
    /// use spool_core::{AgentKindLimits, Kind, RequestLimits};
    ///
    /// // `--limit llm=4,60/min --agent-limit llm=1,10/min`
    /// let minute = Duration::from_secs(60);
    /// let limits = RequestLimits::new()
    ///     .max_in_flight(Kind::Llm, 4)
    ///     .window(Kind::Llm, 60, minute)
    ///     .agent_limit(Kind::Llm, AgentKindLimits::new().max_in_flight(1).window(10, minute));
    /// ```
    #[must_use]
    pub fn agent_limit(mut self, kind: Kind, limits: AgentKindLimits) -> RequestLimits {
        self.agent_kinds.insert(kind, limits);
        self
    }

    /// The agent named `agent` may have at most `limits` of its requests of `kind` in
    /// flight and in a window, in place of [`agent_limit`](RequestLimits::agent_limit)'s
    /// (a limit it leaves unset is the common one).
    #[must_use]
    pub fn agent_limit_for(
        mut self,
        agent: impl Into<String>,
        kind: Kind,
        limits: AgentKindLimits,
    ) -> RequestLimits {
        self.agent_kinds_for
            .entry(agent.into())
            .or_default()
            .insert(kind, limits);
        self
    }

    /// Whether some agent's requests in flight are capped.
    pub(crate) fn caps_agents(&self) -> bool {
        self.per_agent_in_flight.is_some() || !self.agents.is_empty()
    }

    /// Whether requests go through gates: some kind is limited, or some agent.
    pub(crate) fn gates_requests(&self) -> bool {
        !self.kinds.is_empty()
            || self.caps_agents()
            || !self.agent_kinds.is_empty()
            || !self.agent_kinds_for.is_empty()
    }

    /// The kinds each agent has a share of, the common ones and agents' own alike.
    pub(crate) fn agent_limited_kinds(&self) -> impl Iterator<Item = &Kind> {
        self.agent_kinds
            .keys()
            .chain(self.agent_kinds_for.values().flat_map(BTreeMap::keys))
    }

    /// How 429s are handled.
    #[must_use]
    pub fn backoff(mut self, backoff: BackoffConfig) -> RequestLimits {
        self.backoff = backoff;
        self
    }
}

/// What 429s have done to one request so far: how many times it was sent again, and
/// how long it was held back in all.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Retried {
    pub(crate) tries: u32,
    pub(crate) waited: Duration,
}

/// A held request: its task's priority, the order it was held in, and its key.
pub(crate) type Held = (Priority, Reverse<u64>, RequestKey);

/// Requests a gate lets past its cap of requests in flight: none, except under the
/// `planted-bug` feature, a deliberate fault that shows the simulation
/// (`spool_test::simulate`) catches a limit exceeded.
#[cfg(not(feature = "planted-bug"))]
const PLANTED_SLACK: u32 = 0;
#[cfg(feature = "planted-bug")]
const PLANTED_SLACK: u32 = 1;

/// One kind's limits and the requests waiting on them.
#[derive(Debug)]
pub(crate) struct Gate {
    max_in_flight: Option<u32>,
    pub(crate) in_flight: u32,
    pub(crate) window: Option<SlidingWindow>,
    pub(crate) tokens: Option<TokenWindow>,
    pub(crate) backoff: Backoff,
    pub(crate) held: BinaryHeap<Held>,
    /// Each agent's share of the kind, if agents are limited in it.
    pub(crate) quotas: Option<Box<Quotas>>,
}

impl Gate {
    pub(crate) fn new(limits: Option<&KindLimits>) -> Gate {
        let limits = limits.cloned().unwrap_or_default();
        Gate {
            // A cap of none would hold the kind back forever: it is taken as one.
            max_in_flight: limits.max_in_flight.map(|max| max.max(1)),
            in_flight: 0,
            window: limits.window.map(|(max, per)| SlidingWindow::new(max, per)),
            tokens: limits.tokens.map(|(max, per)| TokenWindow::new(max, per)),
            backoff: Backoff::default(),
            held: BinaryHeap::new(),
            quotas: None,
        }
    }

    /// Whether a request of `tokens` may go now.
    pub(crate) fn can_send(&mut self, now: Time, tokens: u32) -> bool {
        if self.backoff.active(now) {
            return false;
        }
        if self
            .max_in_flight
            .is_some_and(|max| self.in_flight >= max + PLANTED_SLACK)
        {
            return false;
        }
        if let Some(window) = &mut self.window
            && !window.has_room(now)
        {
            return false;
        }
        if let Some(window) = &mut self.tokens
            && !window.has_room(now, tokens)
        {
            return false;
        }
        true
    }

    /// When the rate windows alone will let a request of `tokens` go: `None` if they
    /// let it go now, or if the gate is at its cap of requests in flight (only an answer
    /// frees room). A back-off is not counted: when it ends is a timer of the
    /// scheduler's; the caller weighs the two.
    pub(crate) fn window_free_at(&mut self, now: Time, tokens: u32) -> Option<Time> {
        if self.at_cap() {
            return None;
        }
        let mut at: Option<Time> = None;
        if let Some(t) = self.window.as_mut().and_then(|w| w.free_at(now)) {
            at = Some(t);
        }
        if let Some(t) = self.tokens.as_mut().and_then(|w| w.free_at(now, tokens)) {
            at = Some(at.map_or(t, |a| a.max(t)));
        }
        at
    }

    /// Its cap on requests in flight, if it has one.
    pub(crate) fn max_in_flight(&self) -> Option<u32> {
        self.max_in_flight
    }

    /// Whether the gate has as many requests in flight as its cap lets it.
    pub(crate) fn at_cap(&self) -> bool {
        self.max_in_flight.is_some_and(|max| self.in_flight >= max)
    }

    pub(crate) fn record_send(&mut self, now: Time, key: RequestKey, tokens: u32) {
        self.in_flight += 1;
        if let Some(window) = &mut self.window {
            window.record(now);
        }
        if let Some(window) = &mut self.tokens {
            window.record(now, key, tokens);
        }
    }

    /// The provider reported the tokens request `key` used.
    pub(crate) fn settle_tokens(&mut self, key: RequestKey, used: u32) {
        if let Some(window) = &mut self.tokens {
            window.settle(key, used);
        }
    }

    /// Whether a rate limit — the back-off, the request window or the token window —
    /// holds back a request of `tokens` now (a full in-flight cap is not a rate limit).
    pub(crate) fn rate_limited(&self, now: Time, tokens: u32) -> bool {
        self.backoff.active(now)
            || self.window.as_ref().is_some_and(|w| !w.room_at(now))
            || self
                .tokens
                .as_ref()
                .is_some_and(|w| !w.room_at(now, tokens))
    }
}
