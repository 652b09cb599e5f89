//! Each agent's share of one request kind: a cap on its requests of the kind in flight
//! and a sliding window of them, beside the kind's own limits.
//!
//! A request whose agent has no room is parked in that agent's own queue, out of the
//! gate's, so it never holds back another agent's requests of the kind. The gate's
//! queue keeps, for every agent with room and parked requests, one of them at least as
//! good as the best parked one: when the agent has room again (an answer, or its window
//! moving on) or sends one, its best parked request goes back — one, not all, so a
//! request costs O(log n) each time it moves, never a scan of the agent's queue.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::time::Duration;

use super::Held;
use super::window::SlidingWindow;
use crate::id::{AgentId, RequestKey};
use crate::kind::Kind;
use crate::priority::Priority;
use crate::time::Time;

/// An agent's limits on requests of one kind.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use spool_core::{AgentKindLimits, Kind, RequestLimits};
///
/// // Each agent: 1 LLM call at a time, 10 a minute; "acme" 4 at a time (and 10 a minute).
/// let limits = RequestLimits::new()
///     .max_in_flight(Kind::Llm, 4)
///     .agent_limit(
///         Kind::Llm,
///         AgentKindLimits::new().max_in_flight(1).window(10, Duration::from_secs(60)),
///     )
///     .agent_limit_for("acme", Kind::Llm, AgentKindLimits::new().max_in_flight(4));
/// assert_eq!(limits.agent_kinds[&Kind::Llm].max_in_flight, Some(1));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct AgentKindLimits {
    /// At most this many of the agent's requests of the kind with executors at once.
    pub max_in_flight: Option<u32>,
    /// At most `.0` of the agent's requests of the kind sent in any window of `.1`.
    pub window: Option<(u32, Duration)>,
}

impl AgentKindLimits {
    /// No limits.
    pub fn new() -> AgentKindLimits {
        AgentKindLimits::default()
    }

    /// At most `max` requests in flight (0 is taken as 1: none would hold the agent's
    /// requests back forever).
    #[must_use]
    pub fn max_in_flight(mut self, max: u32) -> AgentKindLimits {
        self.max_in_flight = Some(max);
        self
    }

    /// At most `max` requests sent in any window of `per` (0 is taken as 1).
    #[must_use]
    pub fn window(mut self, max: u32, per: Duration) -> AgentKindLimits {
        self.window = Some((max, per));
        self
    }

    /// These limits where set, `common`'s where not.
    pub(crate) fn or(self, common: AgentKindLimits) -> AgentKindLimits {
        AgentKindLimits {
            max_in_flight: self.max_in_flight.or(common.max_in_flight),
            window: self.window.or(common.window),
        }
    }
}

/// One agent's share of a kind: its limits, its requests in flight and in the window,
/// and its requests parked while it has no room.
#[derive(Debug, Default)]
pub(crate) struct Quota {
    /// Its own limits, in place of the common ones (`None`: the common ones).
    own: Option<AgentKindLimits>,
    pub(crate) in_flight: u32,
    /// Made as the agent first sends.
    pub(crate) window: Option<SlidingWindow>,
    pub(crate) parked: BinaryHeap<Held>,
    /// When its window lets one more go, while requests wait for it.
    pub(crate) wake: Option<Time>,
}

/// Every agent's share of one kind.
#[derive(Debug, Default)]
pub(crate) struct Quotas {
    common: AgentKindLimits,
    /// By agent id, grown as agents come.
    by_agent: Vec<Quota>,
    /// The wakes of agents whose window is full, in time order (ties by agent id).
    wakes: BTreeSet<(Time, u32)>,
}

impl Quotas {
    pub(crate) fn new(common: AgentKindLimits) -> Quotas {
        Quotas {
            common,
            ..Quotas::default()
        }
    }

    fn quota(&mut self, agent: AgentId) -> &mut Quota {
        let at = agent.0 as usize;
        if self.by_agent.len() <= at {
            self.by_agent.resize_with(at + 1, Quota::default);
        }
        &mut self.by_agent[at]
    }

    /// Every agent's limits, where it has none of its own.
    pub(crate) fn common(&self) -> AgentKindLimits {
        self.common
    }

    /// Agent `agent`'s share, if it has had one.
    pub(crate) fn get(&self, agent: AgentId) -> Option<&Quota> {
        self.by_agent.get(agent.0 as usize)
    }

    /// Every agent's share that has had one, with its agent.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (AgentId, &Quota)> {
        self.by_agent
            .iter()
            .enumerate()
            .map(|(at, quota)| (AgentId(at as u32), quota))
    }

    /// Agent `agent` takes limits of its own.
    pub(crate) fn set_own(&mut self, agent: AgentId, own: AgentKindLimits) {
        self.quota(agent).own = Some(own);
    }

    /// The limits `agent` is held to.
    pub(crate) fn limits_of(&self, agent: AgentId) -> AgentKindLimits {
        self.get(agent)
            .and_then(|q| q.own)
            .map_or(self.common, |own| own.or(self.common))
    }

    /// Whether `agent` is held back now: `None` if it has room, else when its window
    /// next lets one go (`Some(None)`: only an answer frees room).
    fn blocked(&mut self, agent: AgentId, now: Time) -> Option<Option<Time>> {
        let limits = self.limits_of(agent);
        let quota = self.quota(agent);
        let window_until = quota.window.as_mut().and_then(|w| w.free_at(now));
        let at_cap = limits
            .max_in_flight
            .is_some_and(|max| quota.in_flight >= max.max(1));
        (at_cap || window_until.is_some()).then_some(window_until)
    }

    /// Parks `held`, the head just taken from the gate's queue, if its agent has no
    /// room now: `true` if parked (with a wake when the agent's window frees).
    pub(crate) fn park_if_blocked(&mut self, agent: AgentId, held: Held, now: Time) -> bool {
        let Some(window_until) = self.blocked(agent, now) else {
            return false;
        };
        self.quota(agent).parked.push(held);
        if let Some(at) = window_until {
            self.set_wake(agent, at);
        }
        true
    }

    /// Agent `agent` sent a request of the kind at `now`; its best parked request goes
    /// back to `queue` if it still has room.
    pub(crate) fn sent(&mut self, agent: AgentId, now: Time, queue: &mut BinaryHeap<Held>) {
        let limits = self.limits_of(agent);
        let quota = self.quota(agent);
        quota.in_flight += 1;
        if let Some((max, per)) = limits.window {
            quota
                .window
                .get_or_insert_with(|| SlidingWindow::new(max, per))
                .record(now);
        }
        if self.quota(agent).parked.is_empty() {
            return;
        }
        match self.blocked(agent, now) {
            None => self.unpark_one(agent, queue),
            Some(Some(at)) => self.set_wake(agent, at),
            // At its cap: an answer frees room.
            Some(None) => {}
        }
    }

    /// Agent `agent`'s parked requests wait for its window, which frees at `at`.
    fn set_wake(&mut self, agent: AgentId, at: Time) {
        let quota = self.quota(agent);
        if quota.wake.is_none() {
            quota.wake = Some(at);
            self.wakes.insert((at, agent.0));
        }
    }

    /// Counts a request of `agent` in flight (a restore rebuilding its counts).
    pub(crate) fn count(&mut self, agent: AgentId) {
        self.quota(agent).in_flight += 1;
    }

    /// A request of `agent` is no longer in flight: its best parked request goes back
    /// to `queue`.
    pub(crate) fn release(&mut self, agent: AgentId, queue: &mut BinaryHeap<Held>) {
        let quota = self.quota(agent);
        quota.in_flight = quota.in_flight.saturating_sub(1);
        self.unpark_one(agent, queue);
    }

    /// Agent `agent` may have room: its best parked request goes back to `queue` (where
    /// it is parked again if not).
    pub(crate) fn unpark_one(&mut self, agent: AgentId, queue: &mut BinaryHeap<Held>) {
        let Some(quota) = self.by_agent.get_mut(agent.0 as usize) else {
            return;
        };
        if let Some(held) = quota.parked.pop() {
            queue.push(held);
        }
        // Nothing left to wake for.
        if quota.parked.is_empty()
            && let Some(at) = quota.wake.take()
        {
            self.wakes.remove(&(at, agent.0));
        }
    }

    /// The agents whose windows have moved on by `now` get their best parked request
    /// back in `queue`.
    pub(crate) fn wake(&mut self, now: Time, queue: &mut BinaryHeap<Held>) {
        while let Some(&(at, agent)) = self.wakes.first() {
            if at > now {
                break;
            }
            self.wakes.pop_first();
            self.quota(AgentId(agent)).wake = None;
            self.unpark_one(AgentId(agent), queue);
        }
    }

    /// A request that no longer waits was dropped from the head of the gate's queue:
    /// it may have been the one an agent with room had there, so every such agent's
    /// best parked request goes back (rare: a task that ended with requests held).
    pub(crate) fn dropped(&mut self, now: Time, queue: &mut BinaryHeap<Held>) {
        for at in 0..self.by_agent.len() {
            let agent = AgentId(at as u32);
            if !self.by_agent[at].parked.is_empty() && self.blocked(agent, now).is_none() {
                self.unpark_one(agent, queue);
            }
        }
    }

    /// The earliest wake, if any.
    pub(crate) fn next_wake(&self) -> Option<Time> {
        self.wakes.first().map(|(at, _)| *at)
    }

    /// Puts back agent `agent`'s share as a snapshot had it: its window, parked
    /// requests and wake (its count in flight follows from the tasks).
    pub(crate) fn restore(
        &mut self,
        agent: AgentId,
        window: &[Time],
        parked: impl IntoIterator<Item = Held>,
        wake: Option<Time>,
    ) {
        let limits = self.limits_of(agent);
        let quota = self.quota(agent);
        if let Some((max, per)) = limits.window {
            let mut restored = SlidingWindow::new(max, per);
            restored.restore(window.iter().copied());
            quota.window = Some(restored);
        }
        quota.parked.extend(parked);
        quota.wake = wake;
        if let Some(at) = wake {
            self.wakes.insert((at, agent.0));
        }
    }
}

/// Agents' shares of kinds as a snapshot records them (format version 6): the limits
/// (which [`RequestLimits`](super::RequestLimits) does not serialize) and each share's
/// state. Empty when no agent is limited in a kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct QuotasRecord {
    /// Each agent's limits, by kind.
    pub(crate) common: BTreeMap<Kind, AgentKindLimits>,
    /// Agents' own limits, by name then kind.
    pub(crate) own: BTreeMap<String, BTreeMap<Kind, AgentKindLimits>>,
    /// Every share with something in its window, parked or a wake, by kind then agent.
    pub(crate) shares: Vec<QuotaRecord>,
}

impl QuotasRecord {
    /// Whether it records nothing (then a snapshot is written as before version 6).
    pub(crate) fn is_empty(&self) -> bool {
        self.common.is_empty() && self.own.is_empty() && self.shares.is_empty()
    }
}

/// One agent's share of one kind in a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct QuotaRecord {
    pub(crate) kind: Kind,
    pub(crate) agent: u32,
    /// Its window's send times, oldest first.
    pub(crate) window: Vec<Time>,
    /// Its parked requests: `(priority, order held, key)`, best first.
    pub(crate) parked: Vec<(Priority, u64, RequestKey)>,
    pub(crate) wake: Option<Time>,
}

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;

    use super::*;
    use crate::id::TaskId;

    fn held(n: u32, priority: Priority) -> Held {
        (
            priority,
            Reverse(u64::from(n)),
            RequestKey::new(TaskId(u64::from(n)), 1, n),
        )
    }

    fn at(secs: u64) -> Time {
        Time::from_duration(Duration::from_secs(secs))
    }

    #[test]
    fn an_agents_own_limits_stand_in_for_the_common_ones_where_set() {
        let common = AgentKindLimits::new()
            .max_in_flight(1)
            .window(10, Duration::from_secs(60));
        let mut quotas = Quotas::new(common);
        quotas.set_own(AgentId(2), AgentKindLimits::new().max_in_flight(4));
        assert_eq!(quotas.limits_of(AgentId(1)), common);
        assert_eq!(
            quotas.limits_of(AgentId(2)),
            AgentKindLimits::new()
                .max_in_flight(4)
                .window(10, Duration::from_secs(60))
        );
    }

    /// At its cap, an agent's requests are parked; an answer sends only the best one
    /// back to the gate's queue, and the next answer the next.
    #[test]
    fn an_answer_sends_back_the_best_parked_request_only() {
        let mut quotas = Quotas::new(AgentKindLimits::new().max_in_flight(1));
        let mut queue = BinaryHeap::new();
        let a = AgentId(1);
        quotas.sent(a, at(0), &mut queue);
        assert!(quotas.park_if_blocked(a, held(2, Priority::Normal), at(0)));
        assert!(quotas.park_if_blocked(a, held(3, Priority::High), at(0)));
        assert!(!quotas.park_if_blocked(AgentId(2), held(4, Priority::Low), at(0)));
        assert_eq!(quotas.next_wake(), None);
        quotas.release(a, &mut queue);
        assert_eq!(queue.pop().map(|h| h.2.task()), Some(TaskId(3)));
        assert!(queue.is_empty());
        quotas.release(a, &mut queue);
        assert_eq!(queue.pop().map(|h| h.2.task()), Some(TaskId(2)));
    }

    /// A full window parks the agent's requests with a wake when its first send leaves
    /// it; at the wake the best one goes back, and with none left the wake is dropped.
    #[test]
    fn a_full_window_wakes_its_agent_when_it_frees() {
        let window = AgentKindLimits::new().window(1, Duration::from_secs(10));
        let mut quotas = Quotas::new(window);
        let mut queue = BinaryHeap::new();
        let a = AgentId(1);
        quotas.sent(a, at(0), &mut queue);
        quotas.release(a, &mut queue);
        assert!(quotas.park_if_blocked(a, held(2, Priority::Normal), at(3)));
        assert_eq!(quotas.next_wake(), Some(at(10)));
        quotas.wake(at(9), &mut queue);
        assert!(queue.is_empty());
        quotas.wake(at(10), &mut queue);
        assert_eq!(queue.pop().map(|h| h.2.task()), Some(TaskId(2)));
        assert_eq!(quotas.next_wake(), None);
        assert!(!quotas.park_if_blocked(a, held(2, Priority::Normal), at(10)));
    }
}
