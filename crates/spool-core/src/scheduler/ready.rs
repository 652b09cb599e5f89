//! The run queue and the way into it: a task whose wait is over is made ready
//! ([`wake`]), an answer reaches its task ([`record_answer`]); the inputs that bring
//! answers (`handle_response`, `handle_unroutable`).

use super::gates::Gated;
use super::table::{Ending, TaskTable};
use super::{Scheduler, TaskEntry, TaskPhase};
use crate::id::{AgentId, RequestKey};
use crate::pending::Status;
use crate::policy::{PolicyQueue, TaskRef};
use crate::request::{Delivery, DropReason, Response};
use crate::state::TaskError;
use crate::stats::Stats;
use crate::time::Time;
use crate::trace::{AnswerOutcome, Cause, Phase, Trace};

/// A queue of tasks in a policy's order, with its bookkeeping: the policy, the sequence
/// number that breaks ties, and, for the run queue ([`push`](TaskQueue::push)), how many
/// tasks are ready (the policy may hold skipped entries too). The scheduler has two: the
/// run queue of ready tasks, and the slot queue's order of tasks waiting for a slot.
#[derive(Debug)]
pub(super) struct TaskQueue {
    pub(super) policy: PolicyQueue,
    pub(super) seq: u64,
    pub(super) len: usize,
    /// Fair-share weights by agent id.
    pub(super) weights: Vec<u32>,
}

impl TaskQueue {
    pub(super) fn new(policy: PolicyQueue) -> TaskQueue {
        TaskQueue {
            policy,
            seq: 0,
            len: 0,
            weights: vec![1],
        }
    }

    /// `agent`'s fair-share weight (1 unless set).
    #[inline]
    pub(super) fn weight(&self, agent: AgentId) -> u32 {
        self.weights.get(agent.0 as usize).copied().unwrap_or(1)
    }

    /// Hands a task to the policy: just its reference to the simple ones.
    #[inline(always)]
    pub(super) fn enqueue(&mut self, now: Time, index: u32, task: &TaskEntry) {
        self.seq += 1;
        if self.policy.needs_entry() {
            self.enqueue_entry(now, index, task);
        } else {
            let task_ref = TaskRef {
                task: task.id,
                index,
            };
            self.policy.push_ref(task_ref, self.seq, task.priority);
        }
    }

    /// Hands the whole entry to a policy that orders by more than the level.
    #[inline(never)]
    pub(super) fn enqueue_entry(&mut self, now: Time, index: u32, task: &TaskEntry) {
        let weight = self.weight(task.agent);
        self.policy
            .push(&task.queue_entry(index, self.seq, now, weight));
    }

    /// Puts a task back in the queue under the sequence number it had.
    pub(super) fn seq_push(&mut self, now: Time, index: u32, task: &TaskEntry, seq: u64) {
        if self.policy.needs_entry() {
            let weight = self.weight(task.agent);
            self.policy.push(&task.queue_entry(index, seq, now, weight));
        } else {
            let task_ref = TaskRef {
                task: task.id,
                index,
            };
            self.policy.push_ref(task_ref, seq, task.priority);
        }
    }

    /// Puts a task in the run queue.
    #[inline(always)]
    pub(super) fn push(&mut self, stats: &mut Stats, now: Time, index: u32, task: &TaskEntry) {
        self.enqueue(now, index, task);
        self.len += 1;
        if self.len as u64 > stats.peak_ready {
            stats.peak_ready = self.len as u64;
        }
    }
}

/// Makes a waiting task ready if all it waits for has come, and traces what changed.
/// `from` is its phase before the answer or timer (taken only when tracing). A free
/// function so that callers holding the task's index can call it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn wake(
    task: &mut TaskEntry,
    index: u32,
    cause: Cause,
    from: Option<Phase>,
    now: Time,
    ready: &mut TaskQueue,
    trace: &mut Trace,
    stats: &mut Stats,
) {
    if task.should_wake() {
        task.transition_to_ready();
        if let Some(from) = from {
            trace.push(now, task.id, from, Phase::Ready, cause);
        }
        ready.push(stats, now, index, task);
    } else if let Some(from) = from {
        let to = task.trace_phase();
        trace.push(now, task.id, from, to, cause);
    }
}

/// Where an answer's effects go: requests in flight overall, the run queue, the trace
/// and the counters.
pub(super) type Sinks<'a> = (
    &'a mut usize,
    &'a mut TaskQueue,
    &'a mut Trace,
    &'a mut Stats,
);

/// Records an answer in the task waiting for it (its request `key` is in flight) and
/// wakes the task if that was all it waited for. `from` is its phase (when tracing).
#[inline(always)]
pub(super) fn record_answer(
    task: &mut TaskEntry,
    key: RequestKey,
    result: Result<serde_json::Value, crate::request::RequestError>,
    from: Option<Phase>,
    waiting: bool,
    now: Time,
    (in_flight, ready, trace, stats): Sinks<'_>,
) -> Delivery {
    let Some(pending) = task.pending.in_flight_mut(key.number()) else {
        stats.dropped_answers += 1;
        return Delivery::Dropped(DropReason::UnknownRequest);
    };
    if from.is_some() {
        let outcome = match result {
            Ok(_) => AnswerOutcome::Ok,
            Err(_) => AnswerOutcome::Error,
        };
        trace.count_answer(&pending.kind, outcome);
    }
    // Never a held one: with gates, the gates' side of the answer let it out first;
    // without, no request is held. So the count of held requests stands.
    debug_assert!(!pending.unsent(), "an answer recorded for a held request");
    pending.status = Status::Answered(result.map_err(Box::new));
    task.in_flight -= 1;
    *in_flight -= 1;
    stats.answers += 1;
    let cause = Cause::Answered(key.number());
    if waiting {
        wake(task, key.index(), cause, from, now, ready, trace, stats);
    } else if let Some(from) = from {
        trace.push(now, key.task(), from, Phase::Ready, cause);
    }
    Delivery::Delivered
}

impl Scheduler {
    /// Takes an executor's answer. It reaches its task if the task is alive and the
    /// request is in flight; otherwise it is counted in [`Stats::dropped_answers`] and
    /// dropped — a late answer never resurrects a task.
    pub fn handle_response(&mut self, now: Time, response: Response) -> Delivery {
        let out = if self.observed() {
            self.answer_observed(now, response)
        } else {
            self.answer::<false>(now, response)
        };
        self.end_input();
        out
    }

    /// `handle_response` with a journal recorded or changes tracked.
    #[inline(never)]
    fn answer_observed(&mut self, now: Time, response: Response) -> Delivery {
        self.answer::<true>(now, response)
    }

    /// An answer; with `OBSERVED` false only when neither a journal is recorded nor
    /// changes are tracked.
    #[inline(always)]
    fn answer<const OBSERVED: bool>(&mut self, now: Time, response: Response) -> Delivery {
        if OBSERVED {
            self.journal_answer(now, &response);
        }
        self.advance(now);
        let key = self.locate(response.key);
        let task = match answered_task::<OBSERVED>(&mut self.tasks, key) {
            Ok(task) => task,
            Err(reason) => {
                if self.budgets.on() {
                    self.charge_answer(key, &response);
                }
                return self.drop_answer(reason);
            }
        };
        let waiting = task.phase == TaskPhase::Waiting;
        // Every delivered answer is in the trace, in arrival order: a waiting task's
        // through `wake`, a ready one's (it yielded with requests out) as Ready -> Ready.
        let from = self.trace.active().then(|| task.trace_phase());
        if self.requests.gating || response.result.is_err() {
            if task.pending.in_flight_mut(key.number()).is_none() {
                return self.drop_answer(DropReason::UnknownRequest);
            }
            // Budgets put every answer on this path: what it used is counted.
            if self.budgets.on() {
                self.charge_answer(key, &response);
            }
            // The gates' side first: a 429 goes back to its gate instead of the task, or
            // reaches it as the error of a back-off given up.
            let result = match self.gate_answer(key, &response) {
                Gated::BackedOff => return Delivery::BackedOff,
                Gated::GaveUp(error) => Err(error),
                Gated::Deliver => response.result,
            };
            let Some(task) = self.tasks.get_mut_hot::<OBSERVED>(key.index()) else {
                return self.drop_answer(DropReason::UnknownTask);
            };
            let (ready, trace, stats) = (&mut self.ready, &mut self.trace, &mut self.stats);
            let sinks = (&mut self.outbox.in_flight, ready, trace, stats);
            return record_answer(task, key, result, from, waiting, self.now, sinks);
        }
        let (ready, trace, stats) = (&mut self.ready, &mut self.trace, &mut self.stats);
        let sinks = (&mut self.outbox.in_flight, ready, trace, stats);
        record_answer(task, key, response.result, from, waiting, self.now, sinks)
    }

    /// `key` with its task's index now. Keys carry the index their task had when they were
    /// made; after a restore (indexes are renumbered) an answer to a request sent before
    /// it finds its task by id instead.
    #[inline]
    pub(super) fn locate(&self, key: RequestKey) -> RequestKey {
        match self.tasks.entries().get(key.index() as usize) {
            Some(task) if task.id == key.task() => key,
            _ => match self.tasks.by_id.get(&key.task()) {
                Some(index) => RequestKey::new(key.task(), key.number(), *index),
                None => key,
            },
        }
    }

    fn drop_answer(&mut self, reason: DropReason) -> Delivery {
        self.stats.dropped_answers += 1;
        Delivery::Dropped(reason)
    }

    /// Ends the task whose request `key` no executor serves, with
    /// [`TaskError::NoExecutor`]. Drivers call it when routing finds no executor.
    pub fn handle_unroutable(&mut self, now: Time, key: RequestKey) -> Delivery {
        let out = self.unroutable(now, key);
        self.end_input();
        out
    }

    fn unroutable(&mut self, now: Time, key: RequestKey) -> Delivery {
        self.journal_unroutable(now, key);
        self.advance(now);
        let key = self.locate(key);
        let task = match answered_task::<true>(&mut self.tasks, key) {
            Ok(task) => task,
            Err(reason) => return self.drop_answer(reason),
        };
        let from = self.trace.active().then(|| task.trace_phase());
        let Some(pending) = task.pending.in_flight_mut(key.number()) else {
            return self.drop_answer(DropReason::UnknownRequest);
        };
        let kind = pending.kind.clone();
        let agent = task.agent;
        let counted = pending.counted();
        if counted {
            // It was counted against its gate and agent when taken: give the room back.
            self.requests.release(&kind, agent);
        }
        // The request never reached an executor: it is no longer in flight, so ending the
        // task sends no cancel signal for it (its other sent requests still get theirs).
        self.outbox.settle(pending);
        pending.status = Status::Answered(Err(Box::new(crate::request::RequestError::Canceled)));
        task.in_flight -= 1;
        self.outbox.in_flight -= 1;
        let error = TaskError::NoExecutor {
            task: key.task(),
            kind,
        };
        self.end(
            key.index(),
            Ending::Completed(Err(error)),
            Cause::NoExecutor,
            from,
        );
        self.stats.failed += 1;
        if counted {
            // Requests its agent's cap held back can go now.
            self.unpark_requests(agent);
        }
        Delivery::Delivered
    }
}

/// The live task an answer for `key` is for, or why there is none; noted as changed
/// as by [`TaskTable::get_mut_hot`].
#[inline]
fn answered_task<const TRACKED: bool>(
    tasks: &mut TaskTable,
    key: RequestKey,
) -> Result<&mut TaskEntry, DropReason> {
    let task = tasks
        .get_mut_hot::<TRACKED>(key.index())
        .filter(|t| t.id == key.task())
        .ok_or(DropReason::UnknownTask)?;
    if task.phase == TaskPhase::Done {
        return Err(DropReason::TaskFinished);
    }
    Ok(task)
}
