//! Request limiters in the scheduler: requests of a gated kind wait at its gate and go
//! out in task-priority order when its limits let them; answers free room; a 429 backs
//! the kind off and sends the request again.

use std::cmp::Reverse;

use slab::Slab;

use super::{Cause, Scheduler, SlotPhase, TaskSlot};
use crate::limiter::{Gate, Held, Hit, Retried};
use crate::pending::Out;
use crate::{AgentId, Delivery, OutboundRequest, RequestError, RequestKey, Response, Time};

impl Scheduler {
    /// `poll_request` when some kind is gated.
    pub(super) fn poll_gated(&mut self) -> Option<OutboundRequest> {
        // Sort what tasks asked for: a gated kind's requests wait at its gate, so that
        // they go in priority order, whatever order they were made in.
        while let Some(key) = self.outbox.pop_front() {
            self.hold_or_pass(key);
        }
        while let Some(key) = self.direct.pop_front() {
            if let Some(out) = self.send(key) {
                return Some(out);
            }
        }
        let now = self.now;
        let agent_cap = self.request_limits.per_agent_in_flight;
        loop {
            // The best head among the gates that may send now: highest task priority,
            // then the order the requests were made. A gate at its limit is passed over,
            // so one kind never holds another back.
            let mut best: Option<(usize, Held, u32, AgentId)> = None;
            for (index, gate) in self.gates.values_mut().enumerate() {
                let Some((head, tokens, agent)) = live_head(gate, &self.tasks) else {
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
            let gate = self.gates.values_mut().nth(index)?;
            gate.held.pop();
            let key = held.2;
            let a = agent.0 as usize;
            // A cap of none would hold every request back forever: it is taken as one.
            if agent_cap.is_some_and(|cap| self.agent_in_flight[a] >= cap.max(1)) {
                // Parked as it was held, so it keeps its place when it comes back.
                self.parked_requests
                    .entry(agent)
                    .or_default()
                    .push_back(held);
                continue;
            }
            gate.record_send(now, key, tokens);
            let epoch = gate.backoff.epoch;
            self.agent_in_flight[a] += 1;
            let out = self.send(key);
            let task = &mut self.tasks[key.slot() as usize];
            if let Some(p) = task.pending.in_flight_mut(key.number()) {
                p.set_out(Out::Counted(epoch));
            }
            return out;
        }
    }

    /// Puts a request just made at its kind's gate, or in the queue of ungated ones.
    fn hold_or_pass(&mut self, key: RequestKey) {
        let Some(task) = self.tasks.get(key.slot() as usize) else {
            return;
        };
        if task.id != key.task() || task.phase == SlotPhase::Done {
            return;
        }
        let Some(pending) = task
            .pending
            .as_slice()
            .iter()
            .find(|p| p.number == key.number() && p.unsent())
        else {
            return;
        };
        let gated = self.gates.contains_key(&pending.kind)
            || self.request_limits.per_agent_in_flight.is_some();
        if !gated {
            self.direct.push_back(key);
            return;
        }
        let priority = task.priority;
        self.hold_seq += 1;
        let seq = self.hold_seq;
        self.gates
            .entry(pending.kind.clone())
            .or_insert_with(|| Gate::new(None))
            .held
            .push((priority, Reverse(seq), key));
    }

    /// Requests an agent's cap held back go back to their gates, in their old places:
    /// the agent has room again.
    pub(super) fn unpark_requests(&mut self, agent: AgentId) {
        let Some(parked) = self.parked_requests.remove(&agent) else {
            return;
        };
        for held in parked {
            let key = held.2;
            let kind = self
                .tasks
                .get(key.slot() as usize)
                .filter(|t| t.id == key.task() && t.phase != SlotPhase::Done)
                .and_then(|t| {
                    t.pending
                        .as_slice()
                        .iter()
                        .find(|p| p.number == key.number() && p.unsent())
                })
                .map(|p| &p.kind);
            if let Some(gate) = kind.and_then(|kind| self.gates.get_mut(kind)) {
                gate.held.push(held);
            }
        }
    }

    /// When time alone lets a held request go, the earliest over all gates.
    pub(super) fn gates_free_at(&mut self) -> Option<Time> {
        let now = self.now;
        let mut next: Option<Time> = None;
        for gate in self.gates.values_mut() {
            let Some(&(_, _, key)) = gate.held.peek() else {
                continue;
            };
            let tokens = estimated_tokens(&self.tasks, key);
            if let Some(at) = gate.free_at(now, tokens) {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        next
    }

    /// The gate's side of an answer: frees the room the request held, and on a 429
    /// backs its kind off and holds the request to go again (returns `BackedOff`).
    /// `None`: deliver the answer — `response`'s, or the error of a 429 given up
    /// (returned beside it, to deliver instead).
    pub(super) fn gate_answer(
        &mut self,
        key: RequestKey,
        response: &Response,
    ) -> Result<Option<RequestError>, Delivery> {
        let now = self.now;
        let tracing = self.trace.active();
        let backoff = &self.request_limits.backoff;
        let retried = self.retries.get(&key).copied().unwrap_or_default();
        let retry_after = match &response.result {
            Err(RequestError::RateLimited { retry_after }) if backoff.enabled => {
                (retried.tries < backoff.max_retries).then_some(*retry_after)
            }
            _ => None,
        };
        let Some(task) = self.tasks.get_mut(key.slot() as usize) else {
            return Ok(None);
        };
        let (agent, priority, id) = (task.agent, task.priority, task.id);
        let from = tracing.then(|| task.phase());
        let Some(pending) = task.pending.in_flight_mut(key.number()) else {
            return Ok(None);
        };
        let kind = pending.kind.clone();
        let counted = pending.counted();
        let epoch = pending.sent_epoch();
        pending.set_out(Out::Sent);
        if counted {
            if let Some(gate) = self.gates.get_mut(&kind) {
                gate.in_flight -= 1;
                if let Some(used) = response.tokens_used {
                    gate.settle_tokens(key, used);
                }
            }
            self.agent_in_flight[agent.0 as usize] -= 1;
        }
        let done = |s: &mut Scheduler, error: Option<RequestError>| {
            if !s.retries.is_empty() {
                s.retries.remove(&key);
            }
            if counted {
                s.unpark_requests(agent);
            }
            Ok(error)
        };
        let Some(retry_after) = retry_after else {
            if response.result.is_ok() {
                if let Some(gate) = self.gates.get_mut(&kind) {
                    gate.backoff.success();
                }
            }
            return done(self, None);
        };
        let config = &self.request_limits.backoff;
        let gate = self.gates.entry(kind).or_insert_with(|| Gate::new(None));
        // Even a 429 given up backs the kind off (for at most `max_wait`): the provider
        // is refusing, and the other requests would only be refused too.
        self.gating = true;
        let until = match gate
            .backoff
            .hit(config, now, retry_after, epoch, retried.waited)
        {
            Hit::Resend { until, waited } => {
                self.retries.insert(
                    key,
                    Retried {
                        tries: retried.tries + 1,
                        waited,
                    },
                );
                until
            }
            Hit::GiveUp { bound } => {
                let error = RequestError::RateLimitExceeded {
                    retry_after,
                    waited: retried.waited,
                    bound,
                };
                return done(self, Some(error));
            }
        };
        self.hold_seq += 1;
        gate.held.push((priority, Reverse(self.hold_seq), key));
        if let Some(pending) = self.tasks[key.slot() as usize]
            .pending
            .in_flight_mut(key.number())
        {
            pending.set_out(Out::Unsent);
        }
        self.stats.rate_limited += 1;
        if let Some(from) = from {
            let cause = Cause::BackedOff {
                number: key.number(),
                until,
            };
            self.trace.push(now, id, from.clone(), from, cause);
        }
        if counted {
            self.unpark_requests(agent);
        }
        Err(Delivery::BackedOff)
    }
}

/// The estimated tokens of request `key` (0 if it is gone).
pub(super) fn estimated_tokens(tasks: &Slab<TaskSlot>, key: RequestKey) -> u32 {
    tasks
        .get(key.slot() as usize)
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
fn live_head(gate: &mut Gate, tasks: &Slab<TaskSlot>) -> Option<(Held, u32, AgentId)> {
    loop {
        let head = *gate.held.peek()?;
        let key = head.2;
        let live = tasks
            .get(key.slot() as usize)
            .filter(|t| t.id == key.task() && t.phase != SlotPhase::Done)
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
            }
        }
    }
}
