//! Request gates: requests of a gated kind wait at its gate and go out in
//! task-priority order when its limits let them; an agent's cap parks them; answers
//! free room; a 429 backs the kind off and sends the request again.
//!
//! [`RequestGates`] owns all of it — the gates, the per-agent counts, the parked
//! requests and the retries — and derives each count in one place (`count`/`release`).

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use slab::Slab;

use super::outbox::Outbox;
use super::timers::{NO_TASK, TimerKind};
use super::{Cause, Scheduler, TaskEntry, TaskPhase, TaskTable};
use crate::id::{AgentId, RequestKey, TaskId};
use crate::kind::Kind;
use crate::limiter::{Gate, Held, Hit, RequestLimits, Retried};
use crate::pending::{Out, PendingRequest};
use crate::priority::Priority;
use crate::request::{RequestError, Response};
use crate::time::Time;
use crate::trace::{AnswerOutcome, Phase};

/// The request side of the limits: every gate with what it holds, and what each agent
/// has in flight through them.
#[derive(Debug)]
pub(super) struct RequestGates {
    pub(super) limits: RequestLimits,
    /// Whether requests go through gates (some kind has one, or agents are capped, or a
    /// 429 backed a kind off).
    pub(super) gating: bool,
    pub(super) gates: BTreeMap<Kind, Gate>,
    /// Requests out, for the driver to take: ungated kinds' as they were sorted, gated
    /// ones as their gates let them go.
    pub(super) direct: VecDeque<RequestKey>,
    /// Requests sent through gates and not answered, by agent (grown as agents come).
    agent_in_flight: Vec<u32>,
    /// Agents' own caps on requests in flight, by agent id (`None`: the cap for every
    /// agent).
    agent_caps: Vec<Option<u32>>,
    /// Requests held back by their agent's cap, by agent, as they were held.
    pub(super) parked: BTreeMap<AgentId, VecDeque<Held>>,
    /// The order requests were held in (ties within a priority level).
    pub(super) hold_seq: u64,
    /// How many times each request was sent again after a 429, and how long it waited.
    pub(super) retries: BTreeMap<RequestKey, Retried>,
    /// The kinds whose back-off ends are timers, by the number the timers name them by
    /// (given as they first back off; not kept in snapshots, which renumber them).
    numbered: Vec<Kind>,
}

/// What the gates made of an answer ([`Scheduler::gate_answer`]).
#[derive(Debug, PartialEq)]
#[must_use]
pub(super) enum Gated {
    /// The task takes the answer as it came.
    Deliver,
    /// A 429 whose back-off gave up: the task takes this error instead of the answer.
    GaveUp(RequestError),
    /// A 429 backed its kind off: the request is held to go again, and its task hears
    /// nothing yet.
    BackedOff,
}

/// An answered request as the gates see it: its kind and how it was sent, and what
/// of its task a back-off needs.
struct Answered {
    kind: Kind,
    /// Counted at its gate and its agent's cap: the answer frees room.
    counted: bool,
    /// Taken by the driver (not only queued to go).
    taken: bool,
    /// The back-off epoch it was sent in.
    epoch: u32,
    agent: AgentId,
    priority: Priority,
    id: TaskId,
    /// The task's phase, for the trace (`None`: not tracing).
    from: Option<Phase>,
}

/// The request held key `key` stands for, if its task is live and the request still
/// waits to be let go: a gate or an agent's queue drops the keys of ended tasks and of
/// settled requests only when it comes to them.
pub(super) fn held_request(tasks: &Slab<TaskEntry>, key: RequestKey) -> Option<&PendingRequest> {
    tasks
        .get(key.index() as usize)
        .filter(|t| t.id == key.task() && t.phase != TaskPhase::Done)
        .and_then(|t| {
            t.pending
                .as_slice()
                .iter()
                .find(|p| p.number == key.number() && p.unsent())
        })
}

impl RequestGates {
    pub(super) fn new(limits: RequestLimits) -> RequestGates {
        let gating = limits.gates_requests();
        let mut gates: BTreeMap<Kind, Gate> = limits
            .kinds
            .iter()
            .map(|(kind, kind_limits)| (kind.clone(), Gate::new(Some(kind_limits))))
            .collect();
        quotas::add_quotas(&mut gates, &limits);
        RequestGates {
            limits,
            gating,
            gates,
            direct: VecDeque::new(),
            agent_in_flight: Vec::new(),
            agent_caps: Vec::new(),
            parked: BTreeMap::new(),
            hold_seq: 0,
            retries: BTreeMap::new(),
            numbered: Vec::new(),
        }
    }

    /// Agent `agent` is called `name`: it takes the cap set for that name, if any.
    pub(super) fn name_agent(&mut self, agent: AgentId, name: &str) {
        self.name_agent_quotas(agent, name);
        let Some(&cap) = self.limits.agents.get(name) else {
            return;
        };
        let at = agent.0 as usize;
        if self.agent_caps.len() <= at {
            self.agent_caps.resize(at + 1, None);
        }
        self.agent_caps[at] = Some(cap);
    }

    /// The cap on `agent`'s requests in flight: its own, else the one for every agent.
    pub(super) fn agent_cap(&self, agent: AgentId) -> Option<u32> {
        self.agent_caps
            .get(agent.0 as usize)
            .copied()
            .flatten()
            .or(self.limits.per_agent_in_flight)
    }

    /// Holds request `key` of `kind` at its gate (made if the kind has none), behind
    /// the requests of its task's level held before it.
    pub(super) fn hold(&mut self, kind: &Kind, priority: Priority, key: RequestKey) {
        self.hold_seq += 1;
        let seq = self.hold_seq;
        let gate = match self.gates.get_mut(kind) {
            Some(gate) => gate,
            None => self
                .gates
                .entry(kind.clone())
                .or_insert_with(|| Gate::new(None)),
        };
        gate.held.push((priority, Reverse(seq), key));
    }

    /// Counts a request of `kind` sent by `agent`'s task against its gate and agent.
    pub(super) fn count(&mut self, kind: &Kind, agent: AgentId) {
        let limits = self.limits.kinds.get(kind);
        let gate = self
            .gates
            .entry(kind.clone())
            .or_insert_with(|| Gate::new(limits));
        gate.in_flight += 1;
        if let Some(quotas) = gate.quotas.as_deref_mut() {
            quotas.count(agent);
        }
        let at = agent.0 as usize;
        if self.agent_in_flight.len() <= at {
            self.agent_in_flight.resize(at + 1, 0);
        }
        self.agent_in_flight[at] += 1;
    }

    /// A counted request of `kind` is no longer with an executor: its gate and its
    /// agent have room again (and the agent's share of the kind, whose best parked
    /// request goes back to the gate's queue).
    pub(super) fn release(&mut self, kind: &Kind, agent: AgentId) {
        if let Some(gate) = self.gates.get_mut(kind) {
            gate.in_flight -= 1;
            if let Some(quotas) = gate.quotas.as_deref_mut() {
                quotas.release(agent, &mut gate.held);
            }
        }
        if let Some(n) = self.agent_in_flight.get_mut(agent.0 as usize) {
            *n -= 1;
        }
    }

    /// Requests `agent` has out through the gates.
    pub(super) fn agent_in_flight(&self, agent: AgentId) -> u32 {
        self.agent_in_flight
            .get(agent.0 as usize)
            .copied()
            .unwrap_or(0)
    }

    /// Request `key` is settled (answered, given up, or its task ended): it is not
    /// sent again after a 429.
    #[inline]
    pub(super) fn settled(&mut self, key: &RequestKey) {
        if !self.retries.is_empty() {
            self.retries.remove(key);
        }
    }

    /// Requests held at gates or parked behind an agent's cap (keys of ended tasks
    /// included, until they reach a gate's head).
    #[cfg(test)]
    pub(super) fn held_len(&self) -> usize {
        self.parked.values().map(VecDeque::len).sum::<usize>()
            + self.gates.values().map(|g| g.held.len()).sum::<usize>()
            + self.quota_parked_len()
    }

    /// Puts the requests an input let out at their kinds' gates (held), or in the queue
    /// of requests out: a gated kind's requests then go in priority order, whatever
    /// order they were made in.
    ///
    /// With `fresh`, the keys held are noted there (for the trace).
    fn sort(
        &mut self,
        outbox: &mut Outbox,
        tasks: &mut TaskTable,
        mut fresh: Option<&mut Vec<RequestKey>>,
    ) {
        while let Some(key) = outbox.requests.pop_front() {
            let Some(task) = tasks.get_mut(key.index()) else {
                continue;
            };
            if task.id != key.task() || task.phase == TaskPhase::Done {
                continue;
            }
            let priority = task.priority;
            let Some(pending) = task
                .pending
                .as_mut_slice()
                .iter_mut()
                .find(|p| p.number == key.number() && p.sent() && !p.counted())
            else {
                continue;
            };
            let gated = self.gates.contains_key(&pending.kind) || self.limits.caps_agents();
            if gated {
                outbox.set_out(pending, Out::Unsent);
                let kind = pending.kind.clone();
                self.hold(&kind, priority, key);
                if let Some(fresh) = fresh.as_deref_mut() {
                    fresh.push(key);
                }
            } else {
                self.direct.push_back(key);
            }
        }
    }

    /// The next held request that may go now, counted against its gate and agent, with
    /// the back-off epoch it goes in: the best head among the gates that may send —
    /// highest task priority, then the order the requests were made. A gate at its
    /// limit is passed over, so one kind never holds another back; a head whose agent
    /// has no room in its share of the kind, or is at its cap, is parked.
    fn next_gated(&mut self, now: Time, tasks: &Slab<TaskEntry>) -> Option<(RequestKey, u32)> {
        loop {
            let mut best: Option<(usize, Held, u32, AgentId)> = None;
            for (index, gate) in self.gates.values_mut().enumerate() {
                let Some((head, tokens, agent)) = live_head(gate, tasks, now) else {
                    continue;
                };
                if !gate.can_send(now, tokens) {
                    continue;
                }
                if best.is_none_or(|(_, b, _, _)| (head.0, head.1) > (b.0, b.1)) {
                    best = Some((index, head, tokens, agent));
                }
            }
            let (index, held, tokens, agent) = best?;
            let in_flight = self.agent_in_flight(agent);
            let agent_cap = self.agent_cap(agent);
            let gate = self.gates.values_mut().nth(index)?;
            gate.held.pop();
            let key = held.2;
            if let Some(quotas) = gate.quotas.as_deref_mut()
                && quotas.park_if_blocked(agent, held, now)
            {
                continue;
            }
            // A cap of none would hold every request back forever: it is taken as one.
            if agent_cap.is_some_and(|cap| in_flight >= cap.max(1)) {
                // Parked as it was held, so it keeps its place when it comes back.
                self.parked.entry(agent).or_default().push_back(held);
                continue;
            }
            gate.record_send(now, key, tokens);
            if let Some(quotas) = gate.quotas.as_deref_mut() {
                quotas.sent(agent, now, &mut gate.held);
            }
            let epoch = gate.backoff.epoch;
            let at = agent.0 as usize;
            if self.agent_in_flight.len() <= at {
                self.agent_in_flight.resize(at + 1, 0);
            }
            self.agent_in_flight[at] += 1;
            return Some((key, epoch));
        }
    }

    /// Requests an agent's cap held back go back to their gates, in their old places:
    /// the agent has room again.
    pub(super) fn unpark(&mut self, agent: AgentId, tasks: &Slab<TaskEntry>) {
        let Some(parked) = self.parked.remove(&agent) else {
            return;
        };
        // A request that went back may have been the one the agent's share of its
        // kind had in the gate's queue: the best parked one of each share goes too.
        self.unpark_quotas(agent);
        for held in parked {
            let kind = held_request(tasks, held.2).map(|p| &p.kind);
            if let Some(gate) = kind.and_then(|kind| self.gates.get_mut(kind)) {
                gate.held.push(held);
            }
        }
    }

    /// When time alone lets a held request go through a rate window, the earliest over
    /// all gates. The windows' moments are derived here rather than queued as timers:
    /// they move with every request sent. A back-off's end is a timer
    /// ([`TimerKind::Backoff`](super::timers::TimerKind)), which decides for its gate
    /// unless a window holds the gate's next request longer (then the window's moment
    /// is given here, and the timer waits: [`backoff_decides`](Self::backoff_decides)).
    pub(super) fn free_at(&mut self, now: Time, tasks: &Slab<TaskEntry>) -> Option<Time> {
        let mut next: Option<Time> = None;
        for gate in self.gates.values_mut() {
            let Some(&(_, _, key)) = gate.held.peek() else {
                continue;
            };
            let tokens = estimated_tokens(tasks, key);
            let free = gate.window_free_at(now, tokens);
            if let Some(at) = free.filter(|at| *at > gate.backoff.until) {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        earliest(next, self.quota_free_at())
    }

    /// The number back-off timers name `kind`'s gate by.
    pub(super) fn gate_number(&mut self, kind: &Kind) -> u32 {
        let number = match self.numbered.iter().position(|k| k == kind) {
            Some(number) => number,
            None => {
                self.numbered.push(kind.clone());
                self.numbered.len() - 1
            }
        };
        number as u32
    }

    /// Until when the gate numbered `number` backs off (a time already past once its
    /// back-off has ended).
    pub(super) fn backoff_until(&self, number: u32) -> Option<Time> {
        let kind = self.numbered.get(number as usize)?;
        Some(self.gates.get(kind)?.backoff.until)
    }

    /// Whether the end, at `at`, of the back-off of the gate numbered `number` is when
    /// the gate may next send: it holds a request, is not at its cap of requests in
    /// flight (then only an answer frees room), and its rate windows let the request go
    /// by then (else [`free_at`](Self::free_at) gives their later moment).
    pub(super) fn backoff_decides(
        &mut self,
        number: u32,
        at: Time,
        now: Time,
        tasks: &Slab<TaskEntry>,
    ) -> bool {
        let Some(gate) = self
            .numbered
            .get(number as usize)
            .and_then(|kind| self.gates.get_mut(kind))
        else {
            return false;
        };
        let Some(&(_, _, key)) = gate.held.peek() else {
            return false;
        };
        if gate.at_cap() {
            return false;
        }
        let tokens = estimated_tokens(tasks, key);
        gate.window_free_at(now, tokens)
            .is_none_or(|free| free <= at)
    }
}

impl Scheduler {
    /// Sorts the requests just let out to their gates, then lets go every held request
    /// the limits allow now, best first, counted against its gate and agent in the
    /// gate's back-off epoch: they join the queue of requests out.
    ///
    /// Traced, a request that does not go in the input that made it shows as
    /// [`Cause::Held`] at the end of that input, and as [`Cause::Released`] when its
    /// gate lets it go (so does one sent again after a 429): a timeline tells the time
    /// a request waited at its gate from the time its executor took. A request let go at
    /// once shows neither, so traces of runs where no gate holds anything back are
    /// those of ungated runs.
    pub(super) fn release_gated(&mut self) {
        let tracing = self.trace.active();
        let mut fresh = Vec::new();
        self.requests.sort(
            &mut self.outbox,
            &mut self.tasks,
            tracing.then_some(&mut fresh),
        );
        self.requests.wake_quotas(self.now);
        while let Some((key, epoch)) = self.requests.next_gated(self.now, self.tasks.entries()) {
            let task = self.tasks.entry_mut(key.index());
            let mut released = None;
            if let Some(p) = task.pending.in_flight_mut(key.number()) {
                self.outbox.set_out(p, Out::Counted(epoch));
                if tracing && !fresh.contains(&key) {
                    released = Some(p.kind.clone());
                }
            }
            if let Some(kind) = released {
                let (id, phase) = (task.id, task.trace_phase());
                let cause = Cause::Released {
                    number: key.number(),
                    kind,
                };
                self.trace.push(self.now, id, phase.clone(), phase, cause);
            }
            self.requests.direct.push_back(key);
        }
        // With gates, requests go out here only (those of a kind without limits as
        // they are sorted): the most sent at once is taken once they are out.
        let sent = self.outbox.sent() as u64;
        if sent > self.stats.peak_in_flight {
            self.stats.peak_in_flight = sent;
        }
        for key in fresh {
            let Some(task) = self.tasks.entries().get(key.index() as usize) else {
                continue;
            };
            if task.id != key.task() || task.phase == TaskPhase::Done {
                continue;
            }
            let Some(kind) = task
                .pending
                .as_slice()
                .iter()
                .find(|p| p.number == key.number() && p.unsent())
                .map(|p| p.kind.clone())
            else {
                continue;
            };
            let phase = task.trace_phase();
            let cause = Cause::Held {
                number: key.number(),
                kind,
            };
            self.trace
                .push(self.now, key.task(), phase.clone(), phase, cause);
        }
    }

    /// Requests an agent's cap held back go back to their gates: it has room again.
    pub(super) fn unpark_requests(&mut self, agent: AgentId) {
        self.requests.unpark(agent, self.tasks.entries());
    }

    /// The gate's side of an answer: frees the room the request held, and on a 429
    /// backs its kind off and holds the request to go again ([`Gated::BackedOff`]), or,
    /// when the back-off gives up, has the task take the error ([`Gated::GaveUp`]).
    /// Otherwise the task takes the answer as it came ([`Gated::Deliver`]).
    pub(super) fn gate_answer(&mut self, key: RequestKey, response: &Response) -> Gated {
        let retried = self.requests.retries.get(&key).copied().unwrap_or_default();
        let retry_after = self.retry_after(&retried, response);
        let Some(sent) = self.settle_sent(key) else {
            return Gated::Deliver;
        };
        if sent.counted {
            self.free_room(key, &sent.kind, sent.agent, response.tokens_used);
        }
        let Some(retry_after) = retry_after else {
            if response.result.is_ok()
                && let Some(gate) = self.requests.gates.get_mut(&sent.kind)
            {
                gate.backoff.success();
            }
            return self.answer_settled(key, &sent, Gated::Deliver);
        };
        match self.back_off(&sent.kind, retry_after, sent.epoch, retried.waited) {
            Hit::Resend { until, waited } => {
                let tries = retried.tries + 1;
                self.requests.retries.insert(key, Retried { tries, waited });
                self.resend_later(key, sent, until);
                Gated::BackedOff
            }
            Hit::GiveUp { bound } => {
                let error = RequestError::RateLimitExceeded {
                    retry_after,
                    waited: retried.waited,
                    bound,
                };
                self.answer_settled(key, &sent, Gated::GaveUp(error))
            }
        }
    }

    /// The `retry_after` of a 429 the back-off will try again (`None`: the answer goes
    /// to the task), for a request sent again `retried` times so far.
    #[inline]
    fn retry_after(&self, retried: &Retried, response: &Response) -> Option<Option<Duration>> {
        let backoff = &self.requests.limits.backoff;
        match &response.result {
            Err(RequestError::RateLimited { retry_after }) if backoff.enabled => {
                (retried.tries < backoff.max_retries).then_some(*retry_after)
            }
            _ => None,
        }
    }

    /// The request `key` answered, marked sent and no longer with the scheduler: what
    /// the gates need of it and its task. `None`: no live task has it in flight.
    #[inline]
    fn settle_sent(&mut self, key: RequestKey) -> Option<Answered> {
        let tracing = self.trace.active();
        let task = self.tasks.get_mut(key.index())?;
        let (agent, priority, id) = (task.agent, task.priority, task.id);
        let from = tracing.then(|| task.trace_phase());
        let pending = task.pending.in_flight_mut(key.number())?;
        let sent = Answered {
            kind: pending.kind.clone(),
            counted: pending.counted(),
            taken: pending.taken(),
            epoch: pending.sent_epoch(),
            agent,
            priority,
            id,
            from,
        };
        self.outbox.set_out(pending, Out::Sent);
        Some(sent)
    }

    /// Frees the room request `key`, counted at its gate, held: its tokens settled to
    /// `used`, if the provider said, and its place in `kind`'s and `agent`'s counts.
    #[inline]
    fn free_room(&mut self, key: RequestKey, kind: &Kind, agent: AgentId, used: Option<u32>) {
        if let (Some(used), Some(gate)) = (used, self.requests.gates.get_mut(kind)) {
            gate.settle_tokens(key, used);
        }
        self.requests.release(kind, agent);
    }

    /// The answer to `key` goes to the task as `gated`: the request is settled, and
    /// its agent, if it had room freed, lets parked requests go.
    #[inline]
    fn answer_settled(&mut self, key: RequestKey, sent: &Answered, gated: Gated) -> Gated {
        self.requests.settled(&key);
        if sent.counted {
            self.unpark_requests(sent.agent);
        }
        gated
    }

    /// Request `key`, refused with a 429, waits at its gate to go again when its kind's
    /// back-off ends at `until`: held again, counted and traced; its agent, if it had
    /// room freed, lets parked requests go.
    fn resend_later(&mut self, key: RequestKey, sent: Answered, until: Time) {
        self.hold_again(key, &sent.kind, sent.priority, sent.taken);
        self.stats.rate_limited += 1;
        self.trace
            .count_answer(&sent.kind, AnswerOutcome::BackedOff);
        if let Some(from) = sent.from {
            let cause = Cause::BackedOff {
                number: key.number(),
                until,
            };
            self.trace
                .push(self.now, sent.id, from.clone(), from, cause);
        }
        if sent.counted {
            self.unpark_requests(sent.agent);
        }
    }

    /// Backs `kind` off after a 429 asking for `retry_after`, to a request sent in
    /// back-off `epoch` and held back `waited` so far: the gate (made if the kind had
    /// none) decides whether the request is sent again, and until when the kind waits.
    /// Even a 429 given up backs the kind off (for at most `max_wait`): the provider is
    /// refusing, and the other requests would only be refused too.
    fn back_off(
        &mut self,
        kind: &Kind,
        retry_after: Option<Duration>,
        epoch: u32,
        waited: Duration,
    ) -> Hit {
        let now = self.now;
        let config = &self.requests.limits.backoff;
        let gate = self
            .requests
            .gates
            .entry(kind.clone())
            .or_insert_with(|| Gate::new(None));
        if !self.requests.gating {
            // Requests let out before the gates were on are out, whenever the driver
            // takes them: they join the queue of requests out as they are, rather than
            // be held at the new gate by the end of this input.
            self.requests.direct.extend(self.outbox.requests.drain(..));
        }
        self.requests.gating = true;
        let before = gate.backoff.until;
        let hit = gate.backoff.hit(config, now, retry_after, epoch, waited);
        let after = gate.backoff.until;
        if after > before && after > now {
            // The gate may send again then: a timer, beside the tasks' own.
            let number = self.requests.gate_number(kind);
            self.timers.set(TimerKind::Backoff, after, number, NO_TASK);
        }
        hit
    }

    /// Holds request `key` of `kind` (its task's `priority`) at its gate to go again
    /// after a back-off; `taken`: the driver had taken it.
    fn hold_again(&mut self, key: RequestKey, kind: &Kind, priority: Priority, taken: bool) {
        // A request answered before the driver took it (a replay, where nothing is
        // taken) still has its key in the queue of requests out: taken out of it, the
        // key is queued once when the gate lets the request go again, so the request
        // goes once, as it did in the run the replay follows.
        if !taken {
            self.requests
                .direct
                .retain(|queued| (queued.task(), queued.number()) != (key.task(), key.number()));
        }
        self.requests.hold(kind, priority, key);
        if let Some(pending) = self
            .tasks
            .entry_mut(key.index())
            .pending
            .in_flight_mut(key.number())
        {
            self.outbox.set_out(pending, Out::Unsent);
        }
    }
}

/// The estimated tokens of request `key` (0 if it is gone).
pub(super) fn estimated_tokens(tasks: &Slab<TaskEntry>, key: RequestKey) -> u32 {
    tasks
        .get(key.index() as usize)
        .and_then(|t| {
            t.pending
                .as_slice()
                .iter()
                .find(|p| p.number == key.number())
        })
        .map_or(0, |p| p.tokens)
}

/// The head of `gate` if its request still waits (dropping heads whose task ended or
/// that were answered), with its estimated tokens and its task's agent.
fn live_head(gate: &mut Gate, tasks: &Slab<TaskEntry>, now: Time) -> Option<(Held, u32, AgentId)> {
    loop {
        let head = *gate.held.peek()?;
        let key = head.2;
        let live = tasks
            .get(key.index() as usize)
            .filter(|t| t.id == key.task() && t.phase != TaskPhase::Done)
            .and_then(|t| {
                let p = t
                    .pending
                    .as_slice()
                    .iter()
                    .find(|p| p.number == key.number() && p.unsent())?;
                Some((p.tokens, t.agent))
            });
        match live {
            Some((tokens, agent)) => return Some((head, tokens, agent)),
            None => {
                gate.held.pop();
                if let Some(quotas) = gate.quotas.as_deref_mut() {
                    quotas.dropped(now, &mut gate.held);
                }
            }
        }
    }
}

/// The earlier of two moments, if any.
fn earliest(a: Option<Time>, b: Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

mod quotas;
mod records;
#[cfg(test)]
mod tests;
