//! Slots: the task limits, the counts of tasks waiting for a slot and for
//! dependencies (each kept here and nowhere else), and, when a limit holds back starts, the
//! queue of tasks waiting for a slot with the accounting of the slots held.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::snapshot::queued_entries;
use super::{TaskPhase, TaskQueue, TaskTable};
use crate::admission::{AgentTaskLimits, TaskLimits};
use crate::id::{AgentId, TaskId};
use crate::limiter::SlidingWindow;
use crate::policy::{PolicyChoice, PolicyQueue, TaskRef};
use crate::priority::Priority;
use crate::snapshot::{CapRecord, RestoreError, SlotQueueRecord, SnapshotError};
use crate::time::Time;

/// The estimate of how long a task holds a slot before any has ended.
const DEFAULT_SLOT_TIME: Duration = Duration::from_secs(30);

/// What holds back a task that may otherwise start.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Cap {
    Agent(AgentId),
    Type(&'static str),
}

/// A queue cap a submission would go over.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum QueueCap {
    /// The run-wide cap on queued tasks.
    Run(usize),
    /// The cap on one agent's queued tasks.
    Agent(usize),
}

/// The task limits, the counts of queued and blocked tasks and the slot queue.
#[derive(Debug)]
pub(super) struct Slots {
    limits: TaskLimits,
    /// The slot queue and the accounting of slots held; only when a limit holds back the
    /// start of tasks.
    pub(super) queue: Option<Box<SlotQueue>>,
    /// Tasks waiting for a slot.
    waiting: usize,
    /// Tasks waiting for dependencies.
    blocked: usize,
    /// Tasks waiting for a slot, by priority level (for queue positions).
    waiting_by_level: [usize; 4],
    /// Queued tasks (waiting for a slot or dependencies) by agent.
    queued_per_agent: Vec<u32>,
    /// Limits of agents' own, by agent id (`None`: the limits for every agent).
    agent_limits: Vec<Option<AgentTaskLimits>>,
}

impl Slots {
    pub(super) fn new(limits: TaskLimits, policy: &PolicyChoice) -> Slots {
        let queue = limits
            .limits_starts()
            .then(|| Box::new(SlotQueue::new(&limits, policy.build_slot_queue())));
        Slots {
            limits,
            queue,
            waiting: 0,
            blocked: 0,
            waiting_by_level: [0; 4],
            queued_per_agent: Vec::new(),
            agent_limits: Vec::new(),
        }
    }

    /// Agent `agent` is called `name`: it takes the limits set for that name, if any.
    pub(super) fn name_agent(&mut self, agent: AgentId, name: &str) {
        let Some(limits) = self.limits.agents.get(name) else {
            return;
        };
        let at = agent.0 as usize;
        if self.agent_limits.len() <= at {
            self.agent_limits.resize(at + 1, None);
        }
        self.agent_limits[at] = Some(limits.clone());
    }

    /// The limits on `agent`'s tasks: `(max running, max queued)`, its own where it has
    /// them, else those for every agent.
    pub(super) fn limits_of(&self, agent: AgentId) -> (Option<usize>, Option<usize>) {
        let own = self
            .agent_limits
            .get(agent.0 as usize)
            .and_then(Option::as_ref);
        (
            own.and_then(|l| l.max_running)
                .or(self.limits.max_running_per_agent),
            own.and_then(|l| l.max_queued)
                .or(self.limits.max_queued_per_agent),
        )
    }

    /// The limits on tasks.
    pub(super) fn limits(&self) -> &TaskLimits {
        &self.limits
    }

    /// Tasks waiting for a slot.
    #[inline]
    pub(super) fn waiting(&self) -> usize {
        self.waiting
    }

    /// Tasks waiting for dependencies.
    pub(super) fn blocked(&self) -> usize {
        self.blocked
    }

    /// Tasks waiting for a slot or for dependencies.
    pub(super) fn queued(&self) -> usize {
        self.waiting + self.blocked
    }

    fn agent_count(&mut self, agent: AgentId) -> &mut u32 {
        let at = agent.0 as usize;
        if self.queued_per_agent.len() <= at {
            self.queued_per_agent.resize(at + 1, 0);
        }
        &mut self.queued_per_agent[at]
    }

    /// A task of `agent` at `priority` starts waiting for a slot.
    pub(super) fn count_queued(&mut self, agent: AgentId, priority: Priority) {
        self.waiting += 1;
        self.waiting_by_level[priority as usize] += 1;
        *self.agent_count(agent) += 1;
    }

    /// A task that waited for a slot got one, or ended.
    pub(super) fn uncount_queued(&mut self, agent: AgentId, priority: Priority) {
        self.waiting -= 1;
        self.waiting_by_level[priority as usize] -= 1;
        *self.agent_count(agent) -= 1;
    }

    /// A task of `agent` starts waiting for dependencies.
    pub(super) fn count_blocked(&mut self, agent: AgentId) {
        self.blocked += 1;
        *self.agent_count(agent) += 1;
    }

    /// A task that waited for dependencies has them all, or ended.
    pub(super) fn uncount_blocked(&mut self, agent: AgentId) {
        self.blocked -= 1;
        *self.agent_count(agent) -= 1;
    }

    /// The queue cap a new task of `agent` would go over, if any.
    pub(super) fn queue_full(&self, agent: AgentId) -> Option<QueueCap> {
        if let Some(limit) = self.limits.max_queued
            && self.queued() >= limit
        {
            return Some(QueueCap::Run(limit));
        }
        if let (_, Some(limit)) = self.limits_of(agent) {
            let queued = self
                .queued_per_agent
                .get(agent.0 as usize)
                .copied()
                .unwrap_or(0);
            if queued as usize >= limit {
                return Some(QueueCap::Agent(limit));
            }
        }
        None
    }

    /// How many tasks wait for a slot ahead of or beside one at `priority`: those of
    /// its level and above when the queue orders by level, else all.
    pub(super) fn position(&self, priority: Priority, by_level: bool) -> usize {
        if by_level {
            self.waiting_by_level[priority as usize..].iter().sum()
        } else {
            self.waiting
        }
    }

    /// Whether every slot of the run is taken.
    pub(super) fn full(&self) -> bool {
        self.queue
            .as_ref()
            .is_some_and(|queue| queue.full(&self.limits))
    }

    /// Whether a task may start now as far as the run-wide limits go.
    pub(super) fn has_capacity(&mut self, now: Time) -> bool {
        match self.queue.as_mut() {
            None => true,
            Some(queue) => !queue.full(&self.limits) && queue.window_has_room(now),
        }
    }

    /// Whether the start window holds back a queued task at `now` (for dashboards).
    pub(super) fn start_window_limited(&self, now: Time) -> bool {
        if self.waiting == 0 {
            return false;
        }
        self.queue.as_ref().is_some_and(|queue| {
            !queue.full(&self.limits) && queue.window.as_ref().is_some_and(|w| !w.room_at(now))
        })
    }

    /// When the start window lets a queued task start, if it is what holds one back.
    pub(super) fn start_window_free_at(&mut self, now: Time) -> Option<Time> {
        if self.waiting == 0 {
            return None;
        }
        let queue = self.queue.as_mut()?;
        if queue.full(&self.limits) {
            return None;
        }
        queue.window.as_mut()?.free_at(now)
    }

    /// The next task the slot queue's policy picks.
    pub(super) fn pop_queued(&mut self, now: Time) -> Option<TaskRef> {
        self.queue.as_mut()?.order.policy.pop(now)
    }

    /// The policy picked `next`, a task waiting for a slot: takes it off the queue
    /// (`true`) unless a per-agent or per-type cap holds it back — then it is parked
    /// behind that cap, keeping its place — or it is no longer queued (`false`).
    pub(super) fn take_picked(
        &mut self,
        next: TaskRef,
        agent: AgentId,
        type_name: &'static str,
        priority: Priority,
    ) -> bool {
        let per_agent = self.limits_of(agent).0;
        let Some(queue) = self.queue.as_mut() else {
            return false;
        };
        let Some(seq) = queue.seqs.get(&next.task).copied() else {
            return false;
        };
        if let Some(cap) = queue.capped(&self.limits, per_agent, agent, type_name) {
            queue.parked.entry(cap).or_default().push_back((seq, next));
            return false;
        }
        queue.seqs.remove(&next.task);
        self.uncount_queued(agent, priority);
        true
    }

    /// The per-agent or per-type cap that holds back a task, if one does.
    pub(super) fn capped(&self, agent: AgentId, type_name: &'static str) -> Option<Cap> {
        let per_agent = self.limits_of(agent).0;
        self.queue
            .as_ref()?
            .capped(&self.limits, per_agent, agent, type_name)
    }
}

/// The slot queue: the queue of tasks waiting for a slot and the accounting of slots held.
#[derive(Debug)]
pub(super) struct SlotQueue {
    /// The tasks waiting for a slot, in the policy's order.
    pub(super) order: TaskQueue,
    pub(super) running: usize,
    pub(super) per_agent: Vec<u32>,
    pub(super) per_type: BTreeMap<&'static str, usize>,
    pub(super) window: Option<SlidingWindow>,
    /// Queue sequence numbers of the tasks waiting for a slot, to put a parked one
    /// back in its place.
    pub(super) seqs: BTreeMap<TaskId, u64>,
    /// Tasks the policy picked but a per-agent or per-type cap held back, in the order
    /// picked.
    pub(super) parked: BTreeMap<Cap, VecDeque<(u64, TaskRef)>>,
    /// When each running task got its slot.
    pub(super) started: BTreeMap<TaskId, Time>,
    pub(super) slot_time_total: Duration,
    pub(super) slots_ended: u32,
}

impl SlotQueue {
    fn new(limits: &TaskLimits, policy: PolicyQueue) -> SlotQueue {
        SlotQueue {
            order: TaskQueue::new(policy),
            running: 0,
            per_agent: Vec::new(),
            per_type: BTreeMap::new(),
            window: limits
                .start_window
                .map(|(max, per)| SlidingWindow::new(max, per)),
            seqs: BTreeMap::new(),
            parked: BTreeMap::new(),
            started: BTreeMap::new(),
            slot_time_total: Duration::ZERO,
            slots_ended: 0,
        }
    }

    fn full(&self, limits: &TaskLimits) -> bool {
        limits
            .max_running
            .is_some_and(|max| self.running >= max.max(1))
    }

    fn window_has_room(&mut self, now: Time) -> bool {
        self.window.as_mut().is_none_or(|w| w.has_room(now))
    }

    /// The cap that holds back a task of `agent` (which may run `per_agent` at once)
    /// and of type `type_name`, if one does.
    fn capped(
        &self,
        limits: &TaskLimits,
        per_agent: Option<usize>,
        agent: AgentId,
        type_name: &'static str,
    ) -> Option<Cap> {
        if let Some(max) = per_agent {
            let running = self.per_agent.get(agent.0 as usize).copied().unwrap_or(0);
            if running as usize >= max.max(1) {
                return Some(Cap::Agent(agent));
            }
        }
        if let Some(max) = limits.max_running_per_type.get(type_name)
            && self.per_type.get(type_name).copied().unwrap_or(0) >= (*max).max(1)
        {
            return Some(Cap::Type(type_name));
        }
        None
    }

    /// A queued task ended: its queue entry is skipped when it comes out.
    pub(super) fn forget_queued(&mut self, id: TaskId) {
        self.seqs.remove(&id);
    }

    /// The average time a task held its slot, or a default before any gave one back.
    pub(super) fn average_slot_time(&self) -> Duration {
        if self.slots_ended == 0 {
            DEFAULT_SLOT_TIME
        } else {
            self.slot_time_total / self.slots_ended
        }
    }

    /// The slot queue as a snapshot records it. Queue sequence numbers are kept as
    /// ranks: only their order matters, and a queue with skipped entries in it
    /// snapshots like the same queue without them.
    pub(super) fn record(&self, tasks: &TaskTable) -> Result<SlotQueueRecord, SnapshotError> {
        let live_in = |index: u32, id: TaskId, phase: TaskPhase| {
            tasks
                .entries()
                .get(index as usize)
                .is_some_and(|t| t.id == id && t.phase == phase)
        };
        let mut queue = queued_entries(&self.order.policy, &live_in, TaskPhase::Queued)?;
        queue.sort_unstable();
        let queued = |id: &TaskId| {
            tasks
                .by_id
                .get(id)
                .is_some_and(|index| live_in(*index, *id, TaskPhase::Queued))
        };
        let seqs: Vec<(TaskId, u64)> = self
            .seqs
            .iter()
            .filter(|(id, _)| queued(id))
            .map(|(id, seq)| (*id, *seq))
            .collect();
        let mut parked: Vec<(CapRecord, Vec<(u64, TaskId)>)> = self
            .parked
            .iter()
            .map(|(cap, entries)| {
                let cap = match cap {
                    Cap::Agent(agent) => CapRecord::Agent(agent.0),
                    Cap::Type(name) => CapRecord::Type((*name).to_owned()),
                };
                let entries = entries
                    .iter()
                    .filter(|(_, t)| live_in(t.index, t.task, TaskPhase::Queued))
                    .map(|(seq, t)| (*seq, t.task))
                    .collect();
                (cap, entries)
            })
            .filter(|(_, entries): &(CapRecord, Vec<_>)| !entries.is_empty())
            .collect();
        // Ranks for every sequence number in use, in the same order.
        let mut used: Vec<u64> = queue
            .iter()
            .map(|(seq, _)| *seq)
            .chain(seqs.iter().map(|(_, seq)| *seq))
            .chain(
                parked
                    .iter()
                    .flat_map(|(_, e)| e.iter().map(|(seq, _)| *seq)),
            )
            .collect();
        used.sort_unstable();
        used.dedup();
        let rank = |seq: u64| used.binary_search(&seq).unwrap_or(0) as u64;
        let queue = queue.into_iter().map(|(seq, id)| (rank(seq), id)).collect();
        let seqs = seqs.into_iter().map(|(id, seq)| (id, rank(seq))).collect();
        for (_, entries) in &mut parked {
            for entry in entries.iter_mut() {
                entry.0 = rank(entry.0);
            }
        }
        Ok(SlotQueueRecord {
            seq: self.order.seq,
            queue,
            seqs,
            parked,
            window: self
                .window
                .as_ref()
                .map(|w| w.times().collect())
                .unwrap_or_default(),
            started: self.started.iter().map(|(id, t)| (*id, *t)).collect(),
            slot_time_total: self.slot_time_total,
            slots_ended: self.slots_ended,
        })
    }

    /// Puts back the slot queue a snapshot recorded, its tasks already in `tasks`.
    pub(super) fn restore(
        &mut self,
        record: &SlotQueueRecord,
        tasks: &TaskTable,
        now: Time,
    ) -> Result<(), RestoreError> {
        let index_of = |id: &TaskId| tasks.by_id.get(id).copied();
        self.order.seq = record.seq;
        for (seq, id) in &record.queue {
            if let Some(index) = index_of(id) {
                let task = &tasks.entries()[index as usize];
                if task.phase == TaskPhase::Queued {
                    self.order.seq_push(now, index, task, *seq);
                }
            }
        }
        self.seqs = record.seqs.iter().copied().collect();
        for (cap, entries) in &record.parked {
            let cap = match cap {
                CapRecord::Agent(agent) => Cap::Agent(AgentId(*agent)),
                // The tasks parked behind a type's cap are live tasks of that type:
                // the cap takes its name from their bodies.
                CapRecord::Type(name) => entries
                    .iter()
                    .filter_map(|(_, id)| index_of(id))
                    .map(|index| tasks.entries()[index as usize].live_type_name())
                    .find(|parked| parked == name)
                    .map(Cap::Type)
                    .ok_or_else(|| {
                        RestoreError::Invalid(format!(
                            "no task parked behind the cap on type `{name}` is of that type"
                        ))
                    })?,
            };
            let entries = entries
                .iter()
                .filter_map(|(seq, id)| {
                    let index = index_of(id)?;
                    Some((*seq, crate::policy::TaskRef { task: *id, index }))
                })
                .collect();
            self.parked.insert(cap, entries);
        }
        if let Some(window) = self.window.as_mut() {
            window.restore(record.window.iter().copied());
        }
        self.started = record.started.iter().copied().collect();
        self.slot_time_total = record.slot_time_total;
        self.slots_ended = record.slots_ended;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: AgentId = AgentId(1);

    fn slot_queue(slots: &mut Slots) -> &mut SlotQueue {
        slots
            .queue
            .as_deref_mut()
            .expect("a start limit makes a slot queue")
    }

    #[test]
    fn queued_and_blocked_counts_move_together_per_agent_and_level() {
        let mut slots = Slots::new(TaskLimits::new(), &PolicyChoice::Fifo);
        slots.count_queued(A, Priority::High);
        slots.count_queued(AgentId::DEFAULT, Priority::Low);
        slots.count_blocked(A);
        assert_eq!(
            (slots.waiting(), slots.blocked(), slots.queued()),
            (2, 1, 3)
        );
        assert_eq!(slots.position(Priority::High, true), 1);
        assert_eq!(slots.position(Priority::Low, true), 2);
        assert_eq!(slots.position(Priority::High, false), 2);
        slots.uncount_queued(A, Priority::High);
        slots.uncount_blocked(A);
        assert_eq!((slots.waiting(), slots.blocked()), (1, 0));
        assert_eq!(slots.position(Priority::High, true), 0);
    }

    #[test]
    fn queue_caps_count_slot_and_dependency_waits_run_wide_and_per_agent() {
        let limits = TaskLimits::new().max_queued(3).max_queued_per_agent(2);
        let mut slots = Slots::new(limits, &PolicyChoice::Fifo);
        slots.count_queued(A, Priority::Normal);
        assert_eq!(slots.queue_full(A), None);
        slots.count_blocked(A);
        assert_eq!(slots.queue_full(A), Some(QueueCap::Agent(2)));
        assert_eq!(slots.queue_full(AgentId::DEFAULT), None);
        slots.count_queued(AgentId::DEFAULT, Priority::Normal);
        assert_eq!(slots.queue_full(AgentId::DEFAULT), Some(QueueCap::Run(3)));
    }

    #[test]
    fn without_a_start_limit_there_is_no_slot_queue_and_always_room() {
        let mut slots = Slots::new(TaskLimits::new().max_queued(1), &PolicyChoice::Fifo);
        assert!(slots.queue.is_none());
        assert!(slots.has_capacity(Time::ZERO));
        assert!(!slots.full());
        assert_eq!(slots.capped(A, "t"), None);
    }

    #[test]
    fn running_caps_hold_back_by_run_agent_and_type() {
        let limits = TaskLimits::new()
            .max_running(2)
            .max_running_per_agent(1)
            .max_running_per_type("t", 1);
        let mut slots = Slots::new(limits, &PolicyChoice::Fifo);
        let queue = slot_queue(&mut slots);
        queue.running = 1;
        queue.per_agent = vec![0, 1];
        assert_eq!(slots.capped(A, "u"), Some(Cap::Agent(A)));
        assert_eq!(slots.capped(AgentId::DEFAULT, "u"), None);
        slot_queue(&mut slots).per_type.insert("t", 1);
        assert_eq!(slots.capped(AgentId::DEFAULT, "t"), Some(Cap::Type("t")));
        assert!(slots.has_capacity(Time::ZERO));
        slot_queue(&mut slots).running = 2;
        assert!(slots.full());
        assert!(!slots.has_capacity(Time::ZERO));
    }

    #[test]
    fn an_agent_of_its_own_limits_is_held_to_them_and_the_others_to_the_common_ones() {
        let b = AgentId(2);
        let limits = TaskLimits::new()
            .max_running_per_agent(2)
            .max_queued_per_agent(5)
            .agent("a", AgentTaskLimits::new().max_running(1))
            .agent("b", AgentTaskLimits::new().max_queued(1));
        let mut slots = Slots::new(limits, &PolicyChoice::Fifo);
        slots.name_agent(A, "a");
        slots.name_agent(b, "b");
        slots.name_agent(AgentId(3), "c");
        slot_queue(&mut slots).per_agent = vec![1, 1, 1, 1];
        assert_eq!(slots.capped(A, "t"), Some(Cap::Agent(A)));
        assert_eq!(slots.capped(b, "t"), None);
        assert_eq!(slots.capped(AgentId(3), "t"), None);
        slots.count_queued(b, Priority::Normal);
        slots.count_queued(A, Priority::Normal);
        assert_eq!(slots.queue_full(b), Some(QueueCap::Agent(1)));
        assert_eq!(slots.queue_full(A), None);
    }

    #[test]
    fn the_slot_time_estimate_starts_at_the_default_then_averages() {
        let mut slots = Slots::new(TaskLimits::new().max_running(1), &PolicyChoice::Fifo);
        let queue = slot_queue(&mut slots);
        assert_eq!(queue.average_slot_time(), DEFAULT_SLOT_TIME);
        queue.slot_time_total = Duration::from_secs(30);
        queue.slots_ended = 3;
        assert_eq!(queue.average_slot_time(), Duration::from_secs(10));
    }
}
