//! The run queue and the way into it: a task whose wait is over is made ready
//! ([`wake`]), an answer reaches its task ([`record_answer`]).

use super::{SlotPhase, TaskSlot};
use crate::pending::Status;
use crate::policy::{RunQueue, TaskRef};
use crate::trace::{Cause, Phase, Trace};
use crate::{Delivery, DropReason, RequestKey, Stats, Time};

/// The run queue with its bookkeeping: the policy, the sequence number that breaks
/// ties, and how many tasks are ready (the policy may hold skipped entries too).
#[derive(Debug)]
pub(super) struct ReadyQueue {
    pub(super) policy: RunQueue,
    pub(super) seq: u64,
    pub(super) len: usize,
    /// Fair-share weights by agent id.
    pub(super) weights: Vec<u32>,
}

impl ReadyQueue {
    pub(super) fn new(policy: RunQueue) -> ReadyQueue {
        ReadyQueue {
            policy,
            seq: 0,
            len: 0,
            weights: vec![1],
        }
    }

    /// Hands a task to the policy: just its reference to the simple ones.
    #[inline(always)]
    pub(super) fn enqueue(&mut self, now: Time, slot: u32, task: &TaskSlot) {
        self.seq += 1;
        if self.policy.needs_entry() {
            self.enqueue_entry(now, slot, task);
        } else {
            let task_ref = TaskRef {
                task: task.id,
                slot,
            };
            self.policy.push_ref(task_ref, self.seq, task.priority);
        }
    }

    /// Hands the whole entry to a policy that orders by more than the level.
    #[inline(never)]
    pub(super) fn enqueue_entry(&mut self, now: Time, slot: u32, task: &TaskSlot) {
        let weight = self
            .weights
            .get(task.agent.0 as usize)
            .copied()
            .unwrap_or(1);
        self.policy.push(&task.entry(slot, self.seq, now, weight));
    }

    /// Puts a task back in the queue under the sequence number it had.
    pub(super) fn seq_push(&mut self, now: Time, slot: u32, task: &TaskSlot, seq: u64) {
        if self.policy.needs_entry() {
            let weight = self
                .weights
                .get(task.agent.0 as usize)
                .copied()
                .unwrap_or(1);
            self.policy.push(&task.entry(slot, seq, now, weight));
        } else {
            let task_ref = TaskRef {
                task: task.id,
                slot,
            };
            self.policy.push_ref(task_ref, seq, task.priority);
        }
    }

    /// Puts a task in the run queue.
    #[inline(always)]
    pub(super) fn push(&mut self, stats: &mut Stats, now: Time, slot: u32, task: &TaskSlot) {
        self.enqueue(now, slot, task);
        self.len += 1;
        if self.len as u64 > stats.peak_ready {
            stats.peak_ready = self.len as u64;
        }
    }
}

/// Makes a waiting task ready if all it waits for has come, and traces what changed.
/// `from` is its phase before the answer or timer (taken only when tracing). A free
/// function so that callers holding the task's slot can call it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn wake(
    task: &mut TaskSlot,
    slot: u32,
    cause: Cause,
    from: Option<Phase>,
    now: Time,
    ready: &mut ReadyQueue,
    trace: &mut Trace,
    stats: &mut Stats,
) {
    if task.should_wake() {
        task.phase = SlotPhase::Ready;
        if let Some(from) = from {
            trace.push(now, task.id, from, Phase::Ready, cause);
        }
        ready.push(stats, now, slot, task);
    } else if let Some(from) = from {
        let to = task.phase();
        trace.push(now, task.id, from, to, cause);
    }
}

/// Where an answer's effects go: requests in flight overall, the run queue, the trace
/// and the counters.
pub(super) type Sinks<'a> = (
    &'a mut usize,
    &'a mut ReadyQueue,
    &'a mut Trace,
    &'a mut Stats,
);

/// Records an answer in the task waiting for it (its request `key` is in flight) and
/// wakes the task if that was all it waited for. `from` is its phase (when tracing).
#[inline(always)]
pub(super) fn record_answer(
    task: &mut TaskSlot,
    key: RequestKey,
    result: Result<serde_json::Value, crate::RequestError>,
    from: Option<Phase>,
    waiting: bool,
    now: Time,
    (in_flight, ready, trace, stats): Sinks<'_>,
) -> Delivery {
    let Some(pending) = task.pending.in_flight_mut(key.number()) else {
        stats.dropped_answers += 1;
        return Delivery::Dropped(DropReason::UnknownRequest);
    };
    pending.status = Status::Answered(result.map_err(Box::new));
    task.in_flight -= 1;
    *in_flight -= 1;
    stats.answers += 1;
    let cause = Cause::Answered(key.number());
    if waiting {
        wake(task, key.slot(), cause, from, now, ready, trace, stats);
    } else if let Some(from) = from {
        trace.push(now, key.task(), from, Phase::Ready, cause);
    }
    Delivery::Delivered
}
