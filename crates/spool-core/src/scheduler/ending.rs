//! How a task ends: its requests are canceled or dropped, its slot and its gates' room
//! freed, its parent told; and the tasks it takes with it — its live children, and its
//! dependents if it failed — are canceled in a [`Cascade`] once it is over.

use std::borrow::Cow;
use std::collections::VecDeque;

use super::{Body, Ended, Ending, Scheduler, TaskEntry, TaskPhase, wake};
use crate::id::{AgentId, RequestKey, TaskId};
use crate::journal::JournalEntry;
use crate::pending::Out;
use crate::policy::TaskRef;
use crate::priority::Priority;
use crate::request::CancelSignal;
use crate::state::{CancelReason, Outcome};
use crate::task::Family;
use crate::time::Time;
use crate::trace::{Cause, Phase};

/// What [`Scheduler::end`] keeps of a task it closed, for those it tells.
struct Closed {
    /// The task's type name.
    type_name: &'static str,
    /// Whether it held a slot (a concurrency permit) to give back.
    held_slot: bool,
    /// Its children, dependents, key and parent, if it had any.
    family: Option<Box<Family>>,
    /// Its parent (id and index) and what the parent receives, if it has one.
    parent: Option<((TaskId, u32), Outcome)>,
}

/// The tasks to cancel once the ending under way is over.
#[derive(Debug, Default)]
pub(super) struct Cascade {
    /// `(index, task, reason)`, next first.
    pending: VecDeque<(u32, TaskId, CancelReason)>,
    /// Set while a task ends (and while a batch is submitted): tasks that enter
    /// admission meanwhile only queue, and slots are filled once at the end, so they go
    /// to the best of all the tasks released, not to the first.
    running: bool,
}

impl Cascade {
    /// An ending (or a batch) begins; `true` for the outermost, which drains the
    /// cascade and calls [`leave`](Cascade::leave).
    pub(super) fn enter(&mut self) -> bool {
        !std::mem::replace(&mut self.running, true)
    }

    /// The outermost ending is over.
    pub(super) fn leave(&mut self) {
        self.running = false;
    }

    /// Whether an ending (or a batch) is under way.
    pub(super) fn running(&self) -> bool {
        self.running
    }

    /// Cancels `task` before the others queued: a stack, so a chain is canceled depth
    /// first, in the order pushed in reverse, with no recursion.
    pub(super) fn cancel_next(&mut self, index: u32, task: TaskId, reason: CancelReason) {
        self.pending.push_front((index, task, reason));
    }

    /// The next task to cancel.
    pub(super) fn next(&mut self) -> Option<(u32, TaskId, CancelReason)> {
        self.pending.pop_front()
    }
}

impl Scheduler {
    /// Tells a live parent that its child ended: the outcome waits for it to take, and
    /// if it joined the child it may wake.
    pub(super) fn child_ended(
        &mut self,
        parent_index: u32,
        parent: TaskId,
        child: TaskId,
        outcome: Outcome,
    ) {
        let tracing = self.trace.active();
        let Some(task) = self.tasks.get_mut(parent_index) else {
            return;
        };
        if task.id != parent || task.phase == TaskPhase::Done {
            return;
        }
        let from = (tracing && task.phase == TaskPhase::Waiting).then(|| task.trace_phase());
        let family = task.family.get_or_insert_with(Default::default);
        family.children.retain(|c| *c != child);
        let joined = family
            .joined
            .iter()
            .position(|c| *c == child)
            .map(|i| family.joined.remove(i));
        family.results.push((child, outcome));
        if joined.is_some() && task.phase == TaskPhase::Waiting {
            let (ready, trace, stats) = (&mut self.ready, &mut self.trace, &mut self.stats);
            wake(
                task,
                parent_index,
                Cause::ChildEnded(child),
                from,
                self.now,
                ready,
                trace,
                stats,
            );
        } else if tracing && task.phase == TaskPhase::Ready {
            // Like an answer to a ready task: every child's end is in its parent's trace.
            let cause = Cause::ChildEnded(child);
            self.trace
                .push(self.now, parent, Phase::Ready, Phase::Ready, cause);
        }
    }

    /// Takes back the requests the task just polled put in the outbox: it ended in the
    /// same poll, so they never go out.
    pub(super) fn retract(&mut self, index: u32, issued: u32) {
        // Children spawned in the same poll are never started.
        self.spawned.clear();
        let Some(task) = self.tasks.get_mut(index) else {
            self.outbox.retract(issued);
            return;
        };
        // They never went out: ending the task sends no cancel signal for them.
        for _ in 0..issued {
            if let Some(key) = self.outbox.requests.pop_back()
                && let Some(p) = task.pending.in_flight_mut(key.number())
            {
                self.outbox.set_out(p, Out::Unsent);
            }
        }
        // They were counted on the task as they were made, but never in the global
        // count (that happens after a poll that goes on waiting): take them off the task
        // so that ending it subtracts only what was counted.
        task.in_flight -= issued;
    }

    /// Ends a live task with `outcome`.
    pub(super) fn finish(&mut self, index: u32, outcome: Outcome, cause: Cause) {
        let ok = outcome.is_ok();
        self.end(index, Ending::Completed(outcome), cause, None);
        if ok {
            self.stats.completed += 1;
        } else {
            self.stats.failed += 1;
        }
    }

    /// Ends a live task: each request it has out with an executor gets a cancel
    /// signal; requests still in the outbox are skipped by `poll_request`; its body is
    /// dropped and its final state kept. `from` is its phase before whatever ended it,
    /// if the caller already changed it (taken only when tracing).
    pub(super) fn end(&mut self, index: u32, ending: Ending, cause: Cause, from: Option<Phase>) {
        let tracing = self.trace.active();
        let Some(task) = self.tasks.get_mut(index) else {
            return;
        };
        // The outermost `end` finishes the cascade and fills the freed slots, once.
        let outermost = self.cascade.enter();
        let from = if tracing {
            Some(from.unwrap_or_else(|| task.trace_phase()))
        } else {
            None
        };
        let (id, agent, priority, phase) = (task.id, task.agent, task.priority, task.phase);
        self.unqueue(TaskRef { task: id, index }, agent, priority, phase);
        let agent_freed = self.settle_requests(index);
        self.budget_task_ended(id);
        let ok = matches!(ending, Ending::Completed(Ok(_)));
        let Closed {
            type_name,
            held_slot,
            family,
            parent,
        } = self.close(index, ending, cause, from);
        if !self.schedules.runs.is_empty() {
            self.schedule_run_ended(id, index);
        }
        if let Some(((parent, parent_index), outcome)) = parent {
            self.child_ended(parent_index, parent, id, outcome);
        }
        if held_slot {
            self.release_slot(id, agent, type_name);
        }
        if agent_freed {
            self.unpark_requests(agent);
        }
        if let Some(family) = family {
            self.family_ended(id, &family, ok);
        }
        if outermost {
            self.drain_cascade();
        }
    }

    /// Takes an ending task out of the queue its `phase` has it in: the run queue, the
    /// slot queue, or the count of tasks blocked on dependencies.
    fn unqueue(&mut self, queued: TaskRef, agent: AgentId, priority: Priority, phase: TaskPhase) {
        match phase {
            TaskPhase::Ready => {
                self.ready.len -= 1;
                self.ready.policy.forget(queued);
            }
            TaskPhase::Queued => {
                if let Some(queue) = self.slots.queue.as_mut() {
                    queue.forget_queued(queued.task);
                    queue.order.policy.forget(queued);
                }
                self.slots.uncount_queued(agent, priority);
                // It may be the task its cap let back into the queue: the next one the
                // cap holds back takes its place, or none would come back until a task
                // under the cap ends.
                let entries = self.tasks.entries();
                let type_name = entries
                    .get(queued.index as usize)
                    .map_or("", |t| t.live_type_name());
                self.unpark_first(agent, type_name);
            }
            TaskPhase::Blocked => {
                self.slots.uncount_blocked(agent);
            }
            _ => {}
        }
    }

    /// Settles every request the ending task at `index` has in flight: one still to be
    /// sent is not sent again after a back-off, the room it held at its gate is freed,
    /// and one an executor took gets a cancel signal. Returns whether its agent got
    /// room at a gate back (its parked requests may go).
    fn settle_requests(&mut self, index: u32) -> bool {
        // Noted as changed by `end`, which found it.
        let task = self.tasks.entry_mut_noted(index);
        let agent = task.agent;
        let mut agent_freed = false;
        for p in task.pending.take_all() {
            if !p.in_flight() {
                continue;
            }
            self.outbox.settle(&p);
            // A request that ended mid-back-off is not sent again.
            self.requests
                .settled(&RequestKey::new(task.id, p.number, index));
            if p.counted() {
                self.requests.release(&p.kind, agent);
                agent_freed = true;
            }
            if p.taken() {
                self.outbox.cancel(CancelSignal {
                    key: RequestKey::new(task.id, p.number, index),
                    kind: p.kind,
                });
            }
        }
        self.outbox.in_flight -= task.in_flight as usize;
        task.in_flight = 0;
        agent_freed
    }

    /// Closes the ending task at `index`: no timer, `Done`, its body dropped and its
    /// final state (of `ending`) kept; the trace hears of it (from `from`, if tracing),
    /// and its result is retained. Returns what the others it concerns are told.
    fn close(&mut self, index: u32, ending: Ending, cause: Cause, from: Option<Phase>) -> Closed {
        // Noted as changed by `end`, which found it.
        let task = self
            .tasks
            .transition_noted(index, TaskEntry::transition_to_done);
        task.timer = Time::MAX;
        let held_slot = std::mem::take(&mut task.holds_slot);
        let type_name = task.live_type_name();
        let depth = task.depth();
        let family = task.family.take();
        let id = task.id;
        // What its parent, if it has one, receives.
        let parent = family
            .as_ref()
            .and_then(|f| f.parent)
            .map(|parent| (parent, ending.parent_outcome(id)));
        let state = ending.into_state();
        if let Some(recorder) = self.journal.as_deref_mut()
            && let Some((digest, preview)) = crate::tape::ending_digest(&state)
        {
            recorder.push_output(JournalEntry::Ended {
                task: id,
                digest,
                preview,
            });
        }
        task.body = Body::Ended(Box::new(Ended {
            state,
            type_name: Cow::Borrowed(type_name),
            depth,
            fork: family.as_ref().and_then(|f| f.fork.clone()),
        }));
        if let Some(from) = from {
            let to = task.trace_phase();
            self.trace.push(self.now, id, from, to, cause);
        }
        self.tasks.ended();
        self.timers.retain(id, self.now);
        Closed {
            type_name,
            held_slot,
            family,
            parent,
        }
    }

    /// Task `id` ended with its `family`, well if `ok`: its key's window begins, its
    /// live children are to be canceled, and its dependents go on — or, if it failed,
    /// are to be canceled too (by [`drain_cascade`](Scheduler::drain_cascade)).
    fn family_ended(&mut self, id: TaskId, family: &Family, ok: bool) {
        if let Some(key) = &family.key {
            self.key_ended(key, id);
        }
        // A child never outlives its parent: cancel the live ones, transitively —
        // depth first, in spawn order (a stack, so long chains need no recursion).
        for child in family.children.iter().rev() {
            if let Some(&child_index) = self.tasks.by_id.get(child) {
                let reason = CancelReason::ParentEnded(id);
                self.cascade.cancel_next(child_index, *child, reason);
            }
        }
        // Its dependents go on if it completed well; otherwise they never can.
        if ok {
            for (dependent, dependent_index) in &family.dependents {
                self.dependency_done(*dependent_index, *dependent, id);
            }
        } else {
            for (dependent, dependent_index) in family.dependents.iter().rev() {
                let reason = CancelReason::DependencyFailed(id);
                self.cascade
                    .cancel_next(*dependent_index, *dependent, reason);
            }
        }
    }

    /// The outermost ending is over: cancels the tasks the cascade holds (each may add
    /// more), then gives the slots freed to queued tasks, once.
    fn drain_cascade(&mut self) {
        while let Some((index, id, reason)) = self.cascade.next() {
            let live = self
                .tasks
                .entries()
                .get(index as usize)
                .is_some_and(|t| t.id == id && t.phase != TaskPhase::Done);
            if live {
                self.cancel_at_index(index, reason);
            }
        }
        self.cascade.leave();
        self.fill_slots();
    }

    /// Ends a live task `Canceled` for `reason`, and counts it.
    pub(super) fn cancel_at_index(&mut self, index: u32, reason: CancelReason) {
        let cause = Cause::Canceled(reason.clone());
        self.end(index, Ending::Canceled(reason), cause, None);
        self.stats.canceled += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_outermost_ending_drains_and_the_last_pushed_goes_first() {
        let mut cascade = Cascade::default();
        assert!(cascade.enter());
        assert!(!cascade.enter());
        assert!(cascade.running());
        cascade.cancel_next(0, TaskId(1), CancelReason::ParentEnded(TaskId(9)));
        cascade.cancel_next(1, TaskId(2), CancelReason::ParentEnded(TaskId(9)));
        assert_eq!(cascade.next().map(|(_, id, _)| id), Some(TaskId(2)));
        assert_eq!(cascade.next().map(|(_, id, _)| id), Some(TaskId(1)));
        assert_eq!(cascade.next(), None);
        cascade.leave();
        assert!(!cascade.running());
        assert!(cascade.enter());
    }
}
