//! The task table: every task in a slab entry, the map from ids to indexes, the id
//! counter, the count of live tasks and the agents' names. An entry holds the hot part
//! of a task; what an ended task keeps is boxed out of line.

mod lifecycle;
mod record;

use std::borrow::Cow;
use std::collections::BTreeMap;

use slab::Slab;

use super::changes::Changes;
use crate::id::{AgentId, TaskId};
use crate::pending::PendingSet;
use crate::policy::{QueueEntry, TaskRef};
use crate::priority::Priority;
use crate::state::{CancelReason, Outcome, TaskError, TaskState, WaitReason};
use crate::task::Family;
use crate::time::Time;
use crate::trace::Phase;

/// The tasks, live and ended, and the agents they run for.
#[derive(Debug)]
pub(super) struct TaskTable {
    /// The tasks by index. Changed only through [`get_mut`](TaskTable::get_mut) and the
    /// methods here, so that every task changed is noted when changes are tracked.
    pub(super) slab: Slab<TaskEntry>,
    /// Where each task is (ids are never reused, indexes are).
    pub(super) by_id: BTreeMap<TaskId, u32>,
    /// The next task id to give (lent to a task's poll, to number the children it
    /// spawns).
    pub(super) next_id: u64,
    /// Tasks that have not ended.
    live: usize,
    agents: Vec<Cow<'static, str>>,
    /// The agents' ids by name.
    agent_ids: BTreeMap<Cow<'static, str>, AgentId>,
    /// What changed since changes were last taken, when they are tracked (boxed: the
    /// untracked test is of a pointer).
    pub(super) changes: Option<Box<Changes>>,
    /// The ids of the tasks removed since they were last taken, while a reader asks
    /// for them ([`Scheduler::log_removals`](super::Scheduler::log_removals)).
    pub(super) removals: Option<Vec<TaskId>>,
    /// Checked phase transitions refused (see `lifecycle`): nonzero only in a release
    /// build whose scheduler has a bug.
    refused: u64,
}

impl TaskTable {
    /// An empty table whose first task gets id `first_id`.
    pub(super) fn new(first_id: u64) -> TaskTable {
        let default_agent: Cow<'static, str> = Cow::Borrowed("default");
        TaskTable {
            slab: Slab::new(),
            by_id: BTreeMap::new(),
            next_id: first_id,
            live: 0,
            agents: vec![default_agent.clone()],
            agent_ids: BTreeMap::from([(default_agent, AgentId::DEFAULT)]),
            changes: None,
            removals: None,
            refused: 0,
        }
    }

    /// The tasks by index, to read.
    #[inline(always)]
    pub(super) fn entries(&self) -> &Slab<TaskEntry> {
        &self.slab
    }

    /// The task at `index`, to change: noted as changed if changes are tracked.
    #[inline(always)]
    pub(super) fn get_mut(&mut self, index: u32) -> Option<&mut TaskEntry> {
        self.get_mut_hot::<true>(index)
    }

    /// The task at `index`, to change, on a hot path that tested once whether changes
    /// are tracked: noted as changed if `TRACKED` and they are. `TRACKED = false` only
    /// where they are known not to be (see `Scheduler::observed`).
    #[inline(always)]
    pub(super) fn get_mut_hot<const TRACKED: bool>(
        &mut self,
        index: u32,
    ) -> Option<&mut TaskEntry> {
        debug_assert!(TRACKED || self.changes.is_none(), "a change not noted");
        let task = self.slab.get_mut(index as usize)?;
        if let (true, Some(changes)) = (TRACKED, self.changes.as_deref_mut()) {
            changes.mark(index);
        }
        Some(task)
    }

    /// The task at `index`, to change in a way its record does not show (the driver
    /// taking one of its requests): not noted as changed.
    #[inline(always)]
    pub(super) fn get_mut_unrecorded(&mut self, index: u32) -> Option<&mut TaskEntry> {
        self.slab.get_mut(index as usize)
    }

    /// The task at `index`, to change, with the id counter (a poll numbers the children
    /// it spawns): noted as changed as by [`get_mut_hot`](TaskTable::get_mut_hot).
    #[inline(always)]
    pub(super) fn get_mut_with_ids<const TRACKED: bool>(
        &mut self,
        index: u32,
    ) -> Option<(&mut TaskEntry, &mut u64)> {
        debug_assert!(TRACKED || self.changes.is_none(), "a change not noted");
        let task = self.slab.get_mut(index as usize)?;
        if let (true, Some(changes)) = (TRACKED, self.changes.as_deref_mut()) {
            changes.mark(index);
        }
        Some((task, &mut self.next_id))
    }

    /// The task at `index`, to change (it must be there): noted as changed if changes
    /// are tracked.
    #[inline(always)]
    #[track_caller]
    pub(super) fn entry_mut(&mut self, index: u32) -> &mut TaskEntry {
        match self.get_mut(index) {
            Some(task) => task,
            None => panic!("no task at index {index}"),
        }
    }

    /// The task at `index`, to change (it must be there), when this same input already
    /// noted it as changed (a checkpoint comes only between inputs), or changes are not
    /// tracked: not noted again.
    #[inline(always)]
    #[track_caller]
    pub(super) fn entry_mut_noted(&mut self, index: u32) -> &mut TaskEntry {
        match self.slab.get_mut(index as usize) {
            Some(task) => task,
            None => panic!("no task at index {index}"),
        }
    }

    /// Takes `count` fresh task ids; returns the first.
    pub(super) fn take_ids(&mut self, count: u64) -> u64 {
        let first = self.next_id;
        self.next_id += count;
        first
    }

    /// Puts `task` in a free entry (growing the slab by a quarter when full) and
    /// notes its index by id; returns the index.
    pub(super) fn add(&mut self, task: TaskEntry) -> u32 {
        if self.slab.len() == self.slab.capacity() {
            // Grow by a quarter, not by doubling: a table just past a doubling would
            // otherwise hold nearly as many empty entries as tasks.
            self.slab.reserve_exact((self.slab.capacity() / 4).max(64));
        }
        let id = task.id;
        if task.phase != TaskPhase::Done {
            self.live += 1;
        }
        let index = self.slab.insert(task) as u32;
        self.by_id.insert(id, index);
        // New: noted as changed.
        self.note(index);
        index
    }

    /// The next task id to give.
    pub(super) fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Fills the table from a snapshot: `tasks` in id order, task `i` at index `i`.
    pub(super) fn restore(&mut self, tasks: Vec<TaskEntry>, next_id: u64) {
        self.by_id = tasks
            .iter()
            .enumerate()
            .map(|(i, task)| (task.id, i as u32))
            .collect();
        self.live = tasks.iter().filter(|t| t.phase != TaskPhase::Done).count();
        self.slab = Slab::from_iter(tasks.into_iter().enumerate());
        self.next_id = next_id;
    }

    /// A live task ended.
    pub(super) fn ended(&mut self) {
        self.live -= 1;
    }

    /// Removes an ended task; its index is reused, its id never is. A live task stays.
    pub(super) fn remove_ended(&mut self, id: TaskId) -> Option<TaskEntry> {
        let index = *self.by_id.get(&id)?;
        if self.slab[index as usize].phase != TaskPhase::Done {
            return None;
        }
        self.by_id.remove(&id);
        let task = self.slab.remove(index as usize);
        self.note_removed(id);
        if let Some(removals) = self.removals.as_mut() {
            removals.push(id);
        }
        Some(task)
    }

    /// Tasks that have not ended.
    pub(super) fn live(&self) -> usize {
        self.live
    }

    /// The task with `id` and its index, if it is in the table.
    pub(super) fn find(&self, id: TaskId) -> Option<(u32, &TaskEntry)> {
        let index = *self.by_id.get(&id)?;
        Some((index, &self.slab[index as usize]))
    }

    /// The agent named `name` (`None`: the default agent), registered if new.
    pub(super) fn agent(&mut self, name: Option<Cow<'static, str>>) -> AgentId {
        let Some(name) = name else {
            return AgentId::DEFAULT;
        };
        if let Some(id) = self.agent_ids.get(name.as_ref()) {
            return *id;
        }
        let id = AgentId(self.agents.len() as u32);
        self.agents.push(name.clone());
        self.agent_ids.insert(name, id);
        id
    }

    /// How many agents have an id.
    pub(super) fn agent_count(&self) -> usize {
        self.agents.len()
    }

    /// An agent's name (`?` for an id never given).
    pub(super) fn agent_name(&self, agent: AgentId) -> &str {
        self.agents
            .get(agent.0 as usize)
            .map_or("?", |name| name.as_ref())
    }

    /// The agents' names, by id.
    pub(super) fn agents(&self) -> impl Iterator<Item = &str> {
        self.agents.iter().map(|name| name.as_ref())
    }

    /// Notes the task at `index` as changed, if changes are tracked. Untracked, this is
    /// one test of a pointer.
    #[inline(always)]
    pub(super) fn note(&mut self, index: u32) {
        if let Some(changes) = self.changes.as_deref_mut() {
            changes.mark(index);
        }
    }

    /// Notes the task with `id` as removed from the table, if changes are tracked.
    #[inline(always)]
    pub(super) fn note_removed(&mut self, id: TaskId) {
        if let Some(changes) = self.changes.as_deref_mut() {
            changes.mark_removed(id);
        }
    }

    /// Starts tracking changes from now (`true`), or stops (`false`).
    pub(super) fn track_changes(&mut self, on: bool) {
        self.changes = on.then(Box::default);
    }

    /// The changes noted so far, if changes are tracked.
    pub(super) fn changes(&self) -> Option<&Changes> {
        self.changes.as_deref()
    }

    /// Whether changes are tracked.
    pub(super) fn tracking(&self) -> bool {
        self.changes.is_some()
    }

    /// The changes since tracking started or changes were last taken; tracking goes
    /// on from now. `None` when changes are not tracked.
    pub(super) fn take_changes(&mut self) -> Option<Changes> {
        self.changes.as_deref_mut().map(Changes::take)
    }
}

/// Where a task is in its life. It changes only through the transitions of
/// `lifecycle` (see its table).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum TaskPhase {
    Ready,
    Running,
    Waiting,
    /// Waiting for a slot (in the slot queue, or parked behind a per-agent or
    /// per-type cap).
    Queued,
    /// Waiting for dependencies.
    Blocked,
    Done,
}

#[derive(Debug)]
pub(super) enum Body {
    Live(Box<dyn crate::task::AgentTask>),
    Ended(Box<Ended>),
}

/// What is left of a task that ended: its final state, and its type for listings.
#[derive(Debug)]
pub(super) struct Ended {
    pub(super) state: TaskState,
    /// Its body's name, or, restored from a snapshot, the registered spelling or (for a
    /// type the registry does not know) the name read, owned by this task.
    pub(super) type_name: Cow<'static, str>,
    /// Its depth, for tasks submitted under it later.
    pub(super) depth: u32,
    /// Where it was forked from and how its playback went, if it is a fork.
    pub(super) fork: Option<Box<crate::tape::ForkState>>,
}

/// How a live task ends: the two terminal states, and nothing else.
#[derive(Debug)]
pub(super) enum Ending {
    Completed(Outcome),
    Canceled(CancelReason),
}

impl Ending {
    /// What the task's parent receives.
    pub(super) fn parent_outcome(&self, task: TaskId) -> Outcome {
        match self {
            Ending::Completed(outcome) => outcome.clone(),
            Ending::Canceled(reason) => Err(TaskError::Canceled {
                task,
                reason: reason.clone(),
            }),
        }
    }

    pub(super) fn into_state(self) -> TaskState {
        match self {
            Ending::Completed(outcome) => TaskState::Completed(outcome),
            Ending::Canceled(reason) => TaskState::Canceled(reason),
        }
    }
}

/// The hot part of a task: what every step and every answer touches, kept small
/// (see `entry_stays_small`). What an ended task keeps is boxed out of line.
#[derive(Debug)]
pub(super) struct TaskEntry {
    pub(super) id: TaskId,
    pub(super) body: Body,
    /// `Time::MAX` when no timer is set.
    pub(super) timer: Time,
    pub(super) created_at: Time,
    pub(super) next_request: u32,
    /// Requests made and not answered (sent or still in the outbox).
    pub(super) in_flight: u32,
    pub(super) agent: AgentId,
    /// Changed only through the transition methods of `lifecycle`.
    pub(super) phase: TaskPhase,
    pub(super) wait_any: bool,
    pub(super) timer_fired: bool,
    /// Whether the task was admitted as a task of its own (not a spawned child): it
    /// counts as running for limits and fair share until it ends.
    pub(super) holds_slot: bool,
    pub(super) priority: Priority,
    pub(super) pending: PendingSet,
    /// Parent, children, joins: cold, allocated only in task graphs.
    pub(super) family: Option<Box<Family>>,
}

impl TaskEntry {
    pub(super) fn wait_reason(&self) -> WaitReason {
        match self.phase {
            TaskPhase::Queued => return WaitReason::Slot,
            TaskPhase::Blocked => {
                return WaitReason::Dependencies(self.family.as_ref().map_or(0, |f| f.unmet));
            }
            _ => {}
        }
        let mut in_flight = self.pending.as_slice().iter().filter(|p| p.in_flight());
        match (in_flight.next(), self.in_flight) {
            (None, _) if self.joined() > 0 => WaitReason::Children(self.joined()),
            (None, _) => WaitReason::Timer,
            (Some(p), 1) => WaitReason::Request(p.kind.clone()),
            (Some(_), n) => WaitReason::Requests(n),
        }
    }

    /// The task's phase as traces and views show it (a wait with its reason).
    pub(super) fn trace_phase(&self) -> Phase {
        match self.phase {
            TaskPhase::Ready => Phase::Ready,
            TaskPhase::Running => Phase::Running,
            TaskPhase::Waiting | TaskPhase::Queued | TaskPhase::Blocked => {
                Phase::Waiting(self.wait_reason())
            }
            TaskPhase::Done => match &self.body {
                Body::Ended(ended) => match &ended.state {
                    TaskState::Completed(Ok(_)) => Phase::Completed,
                    TaskState::Canceled(_) => Phase::Canceled,
                    _ => Phase::Failed,
                },
                Body::Live(_) => Phase::Running,
            },
        }
    }

    pub(super) fn state(&self) -> TaskState {
        match self.phase {
            TaskPhase::Ready => TaskState::Ready,
            TaskPhase::Running => TaskState::Running,
            TaskPhase::Waiting | TaskPhase::Queued | TaskPhase::Blocked => {
                TaskState::Waiting(self.wait_reason())
            }
            TaskPhase::Done => match &self.body {
                Body::Ended(ended) => ended.state.clone(),
                Body::Live(_) => TaskState::Running,
            },
        }
    }

    /// The task's type name, live or ended.
    pub(super) fn type_name(&self) -> &str {
        match &self.body {
            Body::Live(body) => body.type_name(),
            Body::Ended(ended) => &ended.type_name,
        }
    }

    /// The type name of a live task — the only kind that is queued, holds a slot or is
    /// parked behind a cap — as its body spells it. An ended task restored with a type
    /// the registry does not know has no `'static` name: the empty string then.
    pub(super) fn live_type_name(&self) -> &'static str {
        match &self.body {
            Body::Live(body) => body.type_name(),
            Body::Ended(ended) => match ended.type_name {
                Cow::Borrowed(name) => name,
                Cow::Owned(_) => "",
            },
        }
    }

    /// Whether what the task waits for has all arrived.
    #[inline]
    pub(super) fn should_wake(&self) -> bool {
        self.wait_any || (self.in_flight == 0 && self.timer == Time::MAX && self.joined() == 0)
    }

    /// How many children the task waits for.
    #[inline]
    pub(super) fn joined(&self) -> u32 {
        self.family.as_ref().map_or(0, |f| f.joined.len() as u32)
    }

    pub(super) fn depth(&self) -> u32 {
        match (&self.family, &self.body) {
            (Some(family), _) => family.depth,
            (None, Body::Ended(ended)) => ended.depth,
            (None, Body::Live(_)) => 0,
        }
    }

    pub(super) fn iteration(&self) -> u32 {
        self.family
            .as_ref()
            .map_or(1, |f| f.retries.saturating_add(1))
    }

    /// The task as a queue entry.
    pub(super) fn queue_entry(&self, index: u32, seq: u64, now: Time, weight: u32) -> QueueEntry {
        QueueEntry {
            task: TaskRef {
                task: self.id,
                index,
            },
            seq,
            priority: self.priority,
            agent: self.agent,
            weight,
            enqueued_at: now,
            created_at: self.created_at,
            type_name: self.live_type_name(),
            depth: self.depth(),
            iteration: self.iteration(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u64, phase: TaskPhase) -> TaskEntry {
        TaskEntry {
            id: TaskId(id),
            body: Body::Live(Box::new(crate::task_fn("t", |_| crate::Step::Wait))),
            timer: Time::MAX,
            created_at: Time::ZERO,
            next_request: 1,
            in_flight: 0,
            agent: AgentId::DEFAULT,
            phase,
            wait_any: false,
            timer_fired: false,
            holds_slot: false,
            priority: Priority::Normal,
            pending: PendingSet::Empty,
            family: None,
        }
    }

    #[test]
    fn ids_are_never_reused_and_indexes_are() {
        let mut table = TaskTable::new(1);
        assert_eq!(table.take_ids(2), 1);
        assert_eq!(table.take_ids(1), 3);
        let first = table.add(entry(1, TaskPhase::Ready));
        let second = table.add(entry(2, TaskPhase::Done));
        assert_eq!(table.live(), 1);
        assert_eq!(
            table.find(TaskId(2)).map(|(s, t)| (s, t.id)),
            Some((second, TaskId(2)))
        );
        // A live task is not removed; an ended one is, and its index goes to the next.
        assert!(table.remove_ended(TaskId(1)).is_none());
        assert!(table.remove_ended(TaskId(2)).is_some());
        assert!(table.find(TaskId(2)).is_none());
        assert_eq!(table.add(entry(3, TaskPhase::Ready)), second);
        assert_ne!(first, second);
        assert_eq!(table.live(), 2);
        table.ended();
        assert_eq!((table.live(), table.next_id), (1, 4));
    }

    #[test]
    fn agents_are_numbered_as_they_come_and_the_default_is_zero() {
        let mut table = TaskTable::new(1);
        assert_eq!(table.agent(None), AgentId::DEFAULT);
        let a = table.agent(Some("a".into()));
        let b = table.agent(Some(Cow::Owned("b".to_owned())));
        assert_eq!((a, b), (AgentId(1), AgentId(2)));
        assert_eq!(table.agent(Some("a".into())), a);
        assert_eq!(table.agent_name(b), "b");
        assert_eq!(table.agent_name(AgentId(9)), "?");
        assert_eq!(table.agents().collect::<Vec<_>>(), ["default", "a", "b"]);
    }

    #[test]
    fn a_restored_table_puts_task_i_at_index_i_and_counts_the_live() {
        let mut table = TaskTable::new(1);
        table.restore(
            vec![entry(4, TaskPhase::Done), entry(7, TaskPhase::Waiting)],
            8,
        );
        assert_eq!(table.find(TaskId(7)).map(|(s, _)| s), Some(1));
        assert_eq!((table.live(), table.next_id), (1, 8));
    }

    #[test]
    fn an_index_is_listed_once_until_taken_and_untracked_notes_nothing() {
        let mut table = TaskTable::new(1);
        table.note(3);
        assert!(table.changes().is_none());
        table.track_changes(true);
        for index in [3, 70, 3, 0, 70, 200] {
            table.note(index);
        }
        table.note_removed(TaskId(9));
        let taken = table.take_changes().expect("tracked");
        assert_eq!(taken.indexes, [3, 70, 0, 200]);
        assert_eq!(taken.removed, [TaskId(9)]);
        // Taken: every mark is cleared, tracking goes on.
        table.note(70);
        table.note(3);
        let taken = table.take_changes().expect("tracked");
        assert_eq!((taken.indexes, taken.removed), (vec![70, 3], vec![]));
        table.track_changes(false);
        table.note(1);
        assert!(table.take_changes().is_none());
    }
}
