//! The outbox: the requests tasks made, waiting for the driver to take them in the
//! order they were made, and the cancel signals for requests whose task ended while an
//! executor had them; and the scheduler's output side, where the driver takes them.

use std::collections::VecDeque;

use super::{Scheduler, TaskPhase};
use crate::id::RequestKey;
use crate::pending::{Out, PendingRequest};
use crate::request::{CancelSignal, OutboundRequest};

/// Capacity the request queue keeps when it drains, so a burst does not pin its memory.
const OUTBOX_KEEP: usize = 4096;

/// Requests to send and cancel signals to deliver, in order.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    /// Keys of requests made and not yet taken by the driver. The key's task id guards
    /// against an index reused after its task ended and was forgotten. Lent to a task
    /// while it is polled, which pushes the requests it makes.
    pub(super) requests: VecDeque<RequestKey>,
    cancels: VecDeque<CancelSignal>,
    /// Requests made and not yet answered, in this queue or with an executor (a
    /// snapshot does not keep it: a restore adds up its tasks').
    pub(super) in_flight: usize,
    /// Of those, the ones held back by a limit (at a gate or behind an agent's cap,
    /// not sent yet): `in_flight - held` are sent and not answered. Kept exact at every
    /// move into or out of held, so the peak of requests sent costs no walk; never
    /// more than `in_flight` (a snapshot does not keep it: a restore counts it).
    pub(super) held: usize,
}

impl Outbox {
    /// The next request key, oldest first; a drained queue gives back what a burst
    /// grew it by.
    #[inline(always)]
    pub(super) fn pop_request(&mut self) -> Option<RequestKey> {
        let key = self.requests.pop_front();
        if key.is_none() && self.requests.capacity() > OUTBOX_KEEP {
            self.requests.shrink_to(OUTBOX_KEEP);
        }
        key
    }

    /// A poll made `count` requests that go out; returns how many are in flight now.
    #[inline]
    pub(super) fn issued(&mut self, count: u32) -> usize {
        self.in_flight += count as usize;
        self.in_flight
    }

    /// Requests sent and not answered: made, less those held back by a limit.
    #[inline(always)]
    pub(super) fn sent(&self) -> usize {
        self.in_flight.saturating_sub(self.held)
    }

    /// Moves in-flight request `p` to `out`, counting it in or out of the held ones.
    #[inline(always)]
    pub(super) fn set_out(&mut self, p: &mut PendingRequest, out: Out) {
        let Some(was) = p.out() else {
            return;
        };
        match (was == Out::Unsent, out == Out::Unsent) {
            (false, true) => self.held = self.held.saturating_add(1),
            (true, false) => self.held = self.held.saturating_sub(1),
            _ => {}
        }
        p.set_out(out);
    }

    /// Request `p` leaves the task's in-flight ones (answered, or its task ended):
    /// held, it is held no more.
    #[inline(always)]
    pub(super) fn settle(&mut self, p: &PendingRequest) {
        if p.unsent() {
            self.held = self.held.saturating_sub(1);
        }
    }

    /// Takes back the last `count` requests: their task ended in the poll that made
    /// them, so they never go out.
    pub(super) fn retract(&mut self, count: u32) {
        for _ in 0..count {
            self.requests.pop_back();
        }
    }

    /// Queues a cancel signal for a request an executor has.
    pub(super) fn cancel(&mut self, signal: CancelSignal) {
        self.cancels.push_back(signal);
    }

    /// The next cancel signal, oldest first.
    pub(super) fn pop_cancel(&mut self) -> Option<CancelSignal> {
        self.cancels.pop_front()
    }

    /// Whether requests or cancel signals wait to be taken.
    pub(super) fn has_outbound(&self) -> bool {
        !self.requests.is_empty() || !self.cancels.is_empty()
    }

    /// The cancel signals waiting, oldest first (for a snapshot).
    pub(super) fn cancels(&self) -> impl Iterator<Item = &CancelSignal> {
        self.cancels.iter()
    }

    /// Puts back the `requests` and `cancels` a snapshot recorded, in that order.
    pub(super) fn restore(
        &mut self,
        requests: impl IntoIterator<Item = RequestKey>,
        cancels: impl IntoIterator<Item = CancelSignal>,
    ) {
        self.requests = requests.into_iter().collect();
        self.cancels = cancels.into_iter().collect();
    }
}

impl Scheduler {
    /// Takes the next request to send to an executor: in the order they went out —
    /// the order tasks made them, except that requests of a kind with limits wait at
    /// its gate and go in the order of their tasks' priority when the limits let them.
    ///
    /// Taking changes nothing in the scheduler: a request is out from the end of the
    /// input that let it go (the poll that made it, or the answer, time or ending that
    /// made room at its gate), whenever the driver takes it. A request whose task
    /// ended before the driver took it is skipped, and gets no cancel signal.
    #[must_use]
    pub fn poll_request(&mut self) -> Option<OutboundRequest> {
        if self.requests.gating {
            return self.poll_gated();
        }
        loop {
            let key = self.outbox.pop_request()?;
            if let Some(out) = self.send(key) {
                return Some(out);
            }
        }
    }

    /// `poll_request` when requests go through gates: the queue of requests out.
    #[inline(never)]
    fn poll_gated(&mut self) -> Option<OutboundRequest> {
        loop {
            let key = self.requests.direct.pop_front()?;
            if let Some(out) = self.send(key) {
                return Some(out);
            }
        }
    }

    /// Request `key` as the driver takes it, unless its task ended before.
    #[inline(always)]
    fn send(&mut self, key: RequestKey) -> Option<OutboundRequest> {
        // Taking a request changes nothing a task's record shows.
        let task = self.tasks.get_mut_unrecorded(key.index())?;
        if task.id != key.task() || task.phase == TaskPhase::Done {
            return None;
        }
        let request = task.pending.send(key.number())?;
        Some(OutboundRequest { key, request })
    }

    /// Takes the next cancel signal for an executor: a request the driver took and
    /// whose task ended before its answer came.
    #[must_use]
    pub fn poll_cancel(&mut self) -> Option<CancelSignal> {
        self.outbox.pop_cancel()
    }

    /// Ends an input: with gates, sorts the requests it let out to their gates and lets
    /// go every held request the limits allow now. Called at the end of every input
    /// method, so what goes out, and when, never depends on when the driver drains.
    #[inline(always)]
    pub(super) fn end_input(&mut self) {
        if self.requests.gating {
            if self.budgets.on() {
                self.check_budgets();
            }
            self.release_gated();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Kind, TaskId};

    fn key(n: u32) -> RequestKey {
        RequestKey::new(TaskId(1), n, 0)
    }

    #[test]
    fn requests_go_in_order_and_a_retract_takes_the_newest() {
        let mut outbox = Outbox::default();
        outbox.requests.extend([key(1), key(2), key(3)]);
        outbox.retract(2);
        assert!(outbox.has_outbound());
        assert_eq!(outbox.pop_request(), Some(key(1)));
        assert_eq!(outbox.pop_request(), None);
        assert!(!outbox.has_outbound());
    }

    #[test]
    fn a_drained_burst_gives_its_memory_back() {
        let mut outbox = Outbox::default();
        outbox.requests.extend((0..3 * OUTBOX_KEEP as u32).map(key));
        while outbox.pop_request().is_some() {}
        assert!(outbox.requests.capacity() <= 2 * OUTBOX_KEEP);
    }

    #[test]
    fn cancel_signals_are_kept_apart_in_order() {
        let signal = |n| CancelSignal {
            key: key(n),
            kind: Kind::Llm,
        };
        let mut outbox = Outbox::default();
        outbox.restore([], [signal(1)]);
        outbox.cancel(signal(2));
        assert_eq!(outbox.issued(2), 2);
        assert!(outbox.has_outbound());
        assert_eq!(outbox.pop_request(), None);
        assert_eq!(outbox.cancels().count(), 2);
        assert_eq!(outbox.pop_cancel(), Some(signal(1)));
        assert_eq!(outbox.pop_cancel(), Some(signal(2)));
        assert!(!outbox.has_outbound());
    }
}
