//! Submission and admission: dependencies, queue caps and duplicate keys, table entries
//! (concurrency per run, agent and type, and the start window), deadlines, retention.

mod links;

use std::borrow::Cow;
use std::time::Duration;

use super::slots::{Cap, QueueCap};
use super::timers::{self, Timer, TimerKind};
use super::{
    Body, Cause, Ended, Ending, Family, Phase, Scheduler, Submission, SubmitError, TaskEntry,
    TaskPhase,
};
use crate::admission::{Admission, RejectReason};
use crate::fingerprint::Fingerprint;
use crate::id::{AgentId, TaskId};
use crate::journal::JournalEntry;
use crate::pending::PendingSet;
use crate::policy::PolicyQueue;
use crate::priority::Priority;
use crate::state::{CancelReason, TaskError, TaskState};
use crate::task::{AgentTask, Deadline, Dep, Extra, NewTask};
use crate::time::Time;
use links::{Rejected, dependency_ids, dependency_order, family_of, find_cycle, fingerprints_of};

impl Scheduler {
    /// Adds a task. Without limits it is ready at once; with them it may be queued,
    /// rate limited, blocked on its dependencies, or rejected (and kept as a result).
    ///
    /// # Errors
    /// [`SubmitError::TableFull`] when 2³² tasks are in the table; a dependency or
    /// parent not in the table; a dependency on the task itself. Nothing is added then.
    pub fn submit(&mut self, now: Time, task: NewTask) -> Result<Submission, SubmitError> {
        let out = self.submit_one(now, task);
        self.end_input();
        out
    }

    fn submit_one(&mut self, now: Time, task: NewTask) -> Result<Submission, SubmitError> {
        let saved = self.journal_save(&task)?;
        self.advance(now);
        self.check_room(1)?;
        if let Some(extra) = &task.extra {
            self.check_links(0, extra, 1)?;
            if let Some(cycle) = find_cycle(std::slice::from_ref(&task)) {
                return Err(SubmitError::Cycle { cycle });
            }
        }
        let id = TaskId(self.tasks.take_ids(1));
        let fingerprints = fingerprints_of(std::slice::from_ref(&task));
        let submission = self.insert(id, task, None, &[]);
        self.journal_fingerprints(fingerprints, saved.is_some());
        self.journal_submit(now, id, saved);
        Ok(submission)
    }

    /// Adds several tasks at once; they may depend on each other with
    /// [`Dep::Batch`] (by index in `tasks`). The batch is checked as a whole first —
    /// a cycle, a bad index or an unknown task rejects all of it — then each task is
    /// admitted as by [`submit`](Scheduler::submit), dependencies first. Ids follow the
    /// order of `tasks`; so do the submissions returned.
    ///
    /// # Errors
    /// As `submit`, and [`SubmitError::Cycle`] naming the entries on a cycle.
    pub fn submit_all(
        &mut self,
        now: Time,
        tasks: Vec<NewTask>,
    ) -> Result<Vec<Submission>, SubmitError> {
        let out = self.submit_many(now, tasks);
        self.end_input();
        out
    }

    fn submit_many(
        &mut self,
        now: Time,
        tasks: Vec<NewTask>,
    ) -> Result<Vec<Submission>, SubmitError> {
        let saved = self.journal_save_all(&tasks)?;
        self.advance(now);
        self.check_room(tasks.len())?;
        for (index, task) in tasks.iter().enumerate() {
            if let Some(extra) = &task.extra {
                self.check_links(index, extra, tasks.len())?;
            }
        }
        if let Some(cycle) = find_cycle(&tasks) {
            return Err(SubmitError::Cycle { cycle });
        }
        let order = dependency_order(&tasks);
        let fingerprints = fingerprints_of(&tasks);
        let first = self.tasks.take_ids(tasks.len() as u64);
        let ids: Vec<TaskId> = (0..tasks.len() as u64).map(|i| TaskId(first + i)).collect();
        let mut tasks: Vec<Option<NewTask>> = tasks.into_iter().map(Some).collect();
        let mut out: Vec<Option<Submission>> = vec![None; tasks.len()];
        // The whole batch enters before any slot is given, so that free slots go to the
        // best of it by the policy, not to the first entries.
        self.cascade.enter();
        for index in order {
            if let Some(task) = tasks[index].take() {
                out[index] = Some(self.insert(ids[index], task, None, &ids));
            }
        }
        self.cascade.leave();
        self.fill_slots();
        let mut submissions: Vec<Submission> = out.into_iter().flatten().collect();
        for submission in &mut submissions {
            if matches!(submission.admission, Admission::Queued { .. })
                && let Some(&index) = self.tasks.by_id.get(&submission.id)
            {
                submission.admission = self.admission_of(index);
            }
        }
        self.journal_fingerprints(fingerprints, saved.is_some());
        self.journal_submit_all(now, TaskId(first), saved);
        Ok(submissions)
    }

    /// Journals the fingerprints of the submission whose entry comes next (`saved`:
    /// it is journaled), if any task of it has one: a replay gives them to the tasks
    /// it submits again, so their keys are kept with them as they were.
    fn journal_fingerprints(
        &mut self,
        fingerprints: Option<Vec<Option<Fingerprint>>>,
        saved: bool,
    ) {
        if let (Some(recorder), Some(fingerprints), true) =
            (self.journal.as_deref_mut(), fingerprints, saved)
        {
            recorder.push(JournalEntry::Fingerprints(fingerprints));
        }
    }

    pub(super) fn check_room(&self, more: usize) -> Result<(), SubmitError> {
        if self.tasks.entries().len().saturating_add(more) > u32::MAX as usize {
            return Err(SubmitError::TableFull {
                live: self.tasks.entries().len(),
            });
        }
        Ok(())
    }

    fn check_links(&self, index: usize, extra: &Extra, len: usize) -> Result<(), SubmitError> {
        if let Some(parent) = extra.parent
            && !self.tasks.by_id.contains_key(&parent)
        {
            return Err(SubmitError::UnknownParent { index, parent });
        }
        for dep in &extra.deps {
            match *dep {
                Dep::Task(dependency) if !self.tasks.by_id.contains_key(&dependency) => {
                    return Err(SubmitError::UnknownDependency { index, dependency });
                }
                Dep::Batch(dependency) if dependency >= len => {
                    return Err(SubmitError::BadBatchIndex {
                        index,
                        dependency,
                        len,
                    });
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Why a submission of `agent` with `key` (and the request's `fingerprint`) is
    /// turned away, if it is.
    fn rejection(
        &self,
        agent: AgentId,
        key: Option<&str>,
        fingerprint: Option<Fingerprint>,
    ) -> Option<RejectReason> {
        if let Some(key) = key
            && let Some(held) = self.keys.get(key)
        {
            return Some(match held.ended_at {
                _ if !held.matches(fingerprint) => RejectReason::KeyReused {
                    key: key.to_owned(),
                    original: held.task,
                },
                None => RejectReason::Duplicate {
                    key: key.to_owned(),
                    existing: held.task,
                },
                Some(ended_at) => RejectReason::AlreadyEnded {
                    key: key.to_owned(),
                    original: held.task,
                    ended_at,
                },
            });
        }
        match self.slots.queue_full(agent)? {
            QueueCap::Run(limit) => Some(RejectReason::QueueFull { limit }),
            QueueCap::Agent(limit) => Some(RejectReason::AgentQueueFull {
                agent: self.agent_name(agent).to_owned(),
                limit,
            }),
        }
    }

    /// Puts a task in the table: submitted (`spawner` is `None`) or spawned. A
    /// submission may be rejected (and kept as a result); a task then waits for its
    /// dependencies, or enters (a spawned child, whose dependency failed, ends at once).
    pub(super) fn insert(
        &mut self,
        id: TaskId,
        task: NewTask,
        spawner: Option<(TaskId, u32)>,
        batch: &[TaskId],
    ) -> Submission {
        let NewTask {
            body,
            agent: agent_name,
            priority,
            extra,
        } = task;
        let extra = extra.map(|e| *e).unwrap_or_default();
        let (agent, priority, depth) = self.lineage(spawner, extra.parent, agent_name, priority);
        let deps = dependency_ids(&extra, batch);
        let failed = self.failed_dependency(&deps);
        if spawner.is_none() {
            let reason = match failed {
                Some(dependency) => Some(RejectReason::DependencyFailed { dependency }),
                None => self.rejection(agent, extra.key.as_deref(), extra.fingerprint),
            };
            if let Some(reason) = reason {
                return self.reject(id, body, agent, priority, reason);
            }
        }
        let deadline = extra.deadline.map(|d| match d {
            Deadline::After(within) => self.now + within,
            Deadline::At(at) => at,
        });
        let family = family_of(spawner, depth, &extra, deadline, !deps.is_empty());
        let index = self.insert_entry(id, body, agent, priority, family);
        if let Some(key) = extra.key {
            // A submission with a live task's key was rejected above; a spawned child
            // does not take over another task's key.
            self.keys.claim_with(key, id, extra.fingerprint);
        }
        if let Some(deadline) = deadline {
            self.timers.set(TimerKind::Deadline, deadline, index, id);
        }
        if let Some(dependency) = failed {
            // Only a spawned child gets here: a submission was rejected above.
            self.cancel_unstarted(index, dependency);
            // The parent that spawned it does not read this.
            return Submission {
                id,
                admission: Admission::Ready,
            };
        }
        let cause = spawner.map_or(Cause::Submitted, |(parent, _)| Cause::Spawned(parent));
        let unmet = self.wait_for(index, id, deps);
        let admission = if unmet > 0 {
            self.block(index, unmet, cause)
        } else {
            self.enter(index, Phase::New, cause, spawner.is_none())
        };
        Submission { id, admission }
    }

    /// A new task's agent, priority and depth: those given, or else inherited from its
    /// spawner, or from the `parent` it was submitted under (a parent's agent only when
    /// no agent is named). The agent named is numbered if it is new.
    fn lineage(
        &mut self,
        spawner: Option<(TaskId, u32)>,
        parent: Option<TaskId>,
        agent: Option<Cow<'static, str>>,
        priority: Option<Priority>,
    ) -> (AgentId, Priority, u32) {
        let parent_index = spawner
            .map(|(_, index)| index)
            .or_else(|| parent.and_then(|p| self.tasks.by_id.get(&p).copied()));
        let inherited = parent_index
            .and_then(|index| self.tasks.entries().get(index as usize))
            .map(|p| (p.agent, p.priority, p.depth()));
        let agent = match (agent, inherited) {
            (None, Some((agent, _, _))) => agent,
            (name, _) => self.agent_id(name),
        };
        let priority = priority.or(inherited.map(|i| i.1)).unwrap_or_default();
        let depth = inherited.map_or(0, |i| i.2 + 1);
        (agent, priority, depth)
    }

    /// The first of `deps` that can never complete: one that failed, or that is not in
    /// the table.
    fn failed_dependency(&self, deps: &[TaskId]) -> Option<TaskId> {
        deps.iter().copied().find(|dep| {
            self.tasks
                .by_id
                .get(dep)
                .map(|index| &self.tasks.entries()[*index as usize])
                .is_none_or(|t| t.phase == TaskPhase::Done && !t.state().is_ok())
        })
    }

    /// A spawned child at `index` whose `dependency` failed: it exists, so its parent
    /// hears how it ended, and it ends at once, canceled.
    fn cancel_unstarted(&mut self, index: u32, dependency: TaskId) {
        // `Waiting` carries no queue counts for `end` to take back.
        self.tasks
            .transition(index, TaskEntry::transition_to_waiting_unstarted);
        let reason = CancelReason::DependencyFailed(dependency);
        self.end(
            index,
            Ending::Canceled(reason.clone()),
            Cause::Canceled(reason),
            Some(Phase::New),
        );
        self.stats.canceled += 1;
    }

    /// Has the new task `id` at `index` wait for those of `deps` that have not completed
    /// (each lists it as a dependent). Returns how many it waits for.
    fn wait_for(&mut self, index: u32, id: TaskId, deps: Vec<TaskId>) -> u32 {
        let mut unmet = 0;
        for dep in deps {
            let Some(&dep_index) = self.tasks.by_id.get(&dep) else {
                continue;
            };
            let d = self.tasks.entry_mut(dep_index);
            if d.phase == TaskPhase::Done {
                // Completed well: a failed one was handled before.
                continue;
            }
            d.family
                .get_or_insert_with(Default::default)
                .dependents
                .push((id, index));
            unmet += 1;
        }
        unmet
    }

    /// The new task at `index` is blocked on `unmet` dependencies.
    fn block(&mut self, index: u32, unmet: u32, cause: Cause) -> Admission {
        let task = self
            .tasks
            .transition(index, TaskEntry::transition_to_blocked);
        if let Some(family) = task.family.as_mut() {
            family.unmet = unmet;
        }
        let agent = task.agent;
        if self.trace.active() {
            let to = task.trace_phase();
            self.trace.push(self.now, task.id, Phase::New, to, cause);
        }
        self.slots.count_blocked(agent);
        self.note_queue_depth();
        Admission::Blocked {
            dependencies: unmet,
        }
    }

    /// Adds an entry to the table (growing it by a quarter when full).
    fn insert_entry(
        &mut self,
        id: TaskId,
        body: Box<dyn AgentTask>,
        agent: AgentId,
        priority: Priority,
        family: Option<Box<Family>>,
    ) -> u32 {
        let index = self.tasks.add(TaskEntry {
            id,
            body: Body::Live(body),
            timer: Time::MAX,
            created_at: self.now,
            next_request: 1,
            in_flight: 0,
            agent,
            phase: TaskPhase::Blocked,
            wait_any: false,
            timer_fired: false,
            holds_slot: false,
            priority,
            pending: PendingSet::Empty,
            family,
        });
        self.stats.submitted += 1;
        index
    }

    /// Keeps a rejected submission as a result.
    fn reject(
        &mut self,
        id: TaskId,
        body: Box<dyn AgentTask>,
        agent: AgentId,
        priority: Priority,
        reason: RejectReason,
    ) -> Submission {
        let type_name = body.type_name();
        drop(body);
        let error = TaskError::Rejected {
            task: id,
            reason: reason.clone(),
        };
        let index = self.insert_entry(id, Box::new(Rejected), agent, priority, None);
        let task = self.tasks.transition(index, TaskEntry::transition_to_done);
        task.body = Body::Ended(Box::new(Ended {
            state: TaskState::Completed(Err(error)),
            type_name: type_name.into(),
            depth: 0,
            fork: None,
        }));
        self.tasks.ended();
        self.stats.rejected += 1;
        if self.trace.active() {
            self.trace
                .push(self.now, id, Phase::New, Phase::Failed, Cause::Rejected);
        }
        self.timers.retain(id, self.now);
        Submission {
            id,
            admission: Admission::Rejected { reason },
        }
    }

    /// A task whose dependencies are met goes on: a spawned child straight to the run
    /// queue, a task of its own through admission.
    fn enter(&mut self, index: u32, from: Phase, cause: Cause, own: bool) -> Admission {
        let now = self.now;
        let tracing = self.trace.active();
        if !own {
            let task = self.tasks.transition(index, TaskEntry::admit);
            if tracing {
                self.trace.push(now, task.id, from, Phase::Ready, cause);
            }
            self.ready.push(&mut self.stats, now, index, task);
            return Admission::Ready;
        }
        if self.slots.queue.is_none() {
            self.grant(index, from, cause);
            return Admission::Ready;
        }
        let task = &self.tasks.entries()[index as usize];
        let (agent, type_name) = (task.agent, task.live_type_name());
        // While a task ends, the tasks it releases queue first, so that its slot goes
        // to the best of them and of those already queued, not to the first released.
        if !self.cascade.running()
            && self.slots.waiting() == 0
            && self.slots.has_capacity(now)
            && self.slots.capped(agent, type_name).is_none()
        {
            self.grant(index, from, cause);
            return Admission::Ready;
        }
        let task = self
            .tasks
            .transition(index, TaskEntry::transition_to_queued);
        let id = task.id;
        let priority = task.priority;
        self.slots.count_queued(agent, priority);
        self.note_queue_depth();
        if tracing {
            self.trace.push(
                now,
                id,
                from,
                Phase::Waiting(crate::state::WaitReason::Slot),
                cause,
            );
        }
        if let Some(queue) = self.slots.queue.as_mut() {
            queue
                .order
                .enqueue(now, index, &self.tasks.entries()[index as usize]);
            queue.seqs.insert(id, queue.order.seq);
        }
        if self.cascade.running() {
            // Whoever set the cascade running fills the slots once every task has entered, and
            // tells the admission then.
            return Admission::Queued {
                position: self.slots.waiting(),
                estimated_wait: Duration::ZERO,
            };
        }
        self.fill_slots();
        self.admission_of(index)
    }

    /// How a task that entered admission stands now: ready, or queued (where, and for
    /// how long), or held back by the start window.
    fn admission_of(&mut self, index: u32) -> Admission {
        let now = self.now;
        let task = &self.tasks.entries()[index as usize];
        if task.phase != TaskPhase::Queued {
            return Admission::Ready;
        }
        let priority = task.priority;
        let full = self.slots.full();
        let Some(queue) = self.slots.queue.as_mut() else {
            return Admission::Ready;
        };
        let window_full = queue.window.as_mut().and_then(|w| w.free_at(now));
        match window_full {
            Some(at) if !full => {
                self.stats.rate_limited += 1;
                Admission::RateLimited {
                    retry_after: at - now,
                }
            }
            _ => {
                let by_level = matches!(queue.order.policy, PolicyQueue::Levels(_));
                let average = queue.average_slot_time();
                let position = self.slots.position(priority, by_level);
                let slots = self.slots.limits().max_running.unwrap_or(1).max(1) as u32;
                let ahead = u32::try_from(position).unwrap_or(u32::MAX);
                let estimated_wait = average
                    .checked_mul(ahead)
                    .map_or(Duration::MAX, |total| total / slots);
                Admission::Queued {
                    position,
                    estimated_wait,
                }
            }
        }
    }

    /// Keeps the peak of queued tasks (waiting for a slot or for dependencies).
    fn note_queue_depth(&mut self) {
        let queued = self.slots.queued() as u64;
        if queued > self.stats.peak_queued {
            self.stats.peak_queued = queued;
        }
    }

    /// Gives a task its slot: it is ready and counts as running.
    fn grant(&mut self, index: u32, from: Phase, cause: Cause) {
        let now = self.now;
        let task = self.tasks.transition(index, TaskEntry::admit);
        task.holds_slot = true;
        let (id, agent, type_name) = (task.id, task.agent, task.live_type_name());
        let waited = now - task.created_at;
        if self.trace.active() {
            self.trace.push(now, id, from, Phase::Ready, cause);
        }
        self.ready.push(&mut self.stats, now, index, task);
        self.ready.policy.task_started(agent);
        self.stats.scheduled += 1;
        self.stats.total_wait += waited;
        if let Some(queue) = self.slots.queue.as_mut() {
            queue.running += 1;
            let at = agent.0 as usize;
            if queue.per_agent.len() <= at {
                queue.per_agent.resize(at + 1, 0);
            }
            queue.per_agent[at] += 1;
            *queue.per_type.entry(type_name).or_default() += 1;
            if let Some(window) = queue.window.as_mut() {
                window.record(now);
            }
            queue.started.insert(id, now);
            queue.order.policy.task_started(agent);
            if queue.running as u64 > self.stats.peak_running {
                self.stats.peak_running = queue.running as u64;
            }
        } else {
            let running = self.tasks.live() - self.slots.queued();
            if running as u64 > self.stats.peak_running {
                self.stats.peak_running = running as u64;
            }
        }
    }

    /// Gives free slots to queued tasks, in policy order.
    pub(super) fn fill_slots(&mut self) {
        let now = self.now;
        loop {
            if self.slots.waiting() == 0 || !self.slots.has_capacity(now) {
                return;
            }
            let Some(next) = self.slots.pop_queued(now) else {
                return;
            };
            let Some(task) = self.tasks.entries().get(next.index as usize) else {
                continue;
            };
            if task.id != next.task || task.phase != TaskPhase::Queued {
                // Ended while queued: skipped here rather than searched for there.
                continue;
            }
            let (agent, type_name, priority) = (task.agent, task.live_type_name(), task.priority);
            if !self.slots.take_picked(next, agent, type_name, priority) {
                continue;
            }
            self.grant(
                next.index,
                Phase::Waiting(crate::state::WaitReason::Slot),
                Cause::Admitted,
            );
        }
    }

    /// A task that counted as running ended: its slot is free.
    pub(super) fn release_slot(&mut self, id: TaskId, agent: AgentId, type_name: &'static str) {
        self.ready.policy.task_ended(agent);
        let now = self.now;
        let Some(queue) = self.slots.queue.as_mut() else {
            return;
        };
        queue.order.policy.task_ended(agent);
        queue.running -= 1;
        if let Some(n) = queue.per_agent.get_mut(agent.0 as usize) {
            *n -= 1;
        }
        if let Some(n) = queue.per_type.get_mut(type_name) {
            *n -= 1;
        }
        if let Some(started) = queue.started.remove(&id) {
            queue.slot_time_total += now - started;
            queue.slots_ended += 1;
        }
        self.unpark_first(agent, type_name);
    }

    /// The first task each cap of `agent` and `type_name` held back goes back to its
    /// place in the queue: the cap has room (a task under it ended), or the task it let
    /// back before ended while queued.
    pub(super) fn unpark_first(&mut self, agent: AgentId, type_name: &'static str) {
        let now = self.now;
        let Some(queue) = self.slots.queue.as_mut() else {
            return;
        };
        for cap in [Cap::Agent(agent), Cap::Type(type_name)] {
            let Some(parked) = queue.parked.get_mut(&cap) else {
                continue;
            };
            // Entries of tasks that ended while parked are dropped on the way.
            while let Some((seq, task)) = parked.pop_front() {
                if let Some(t) = self.tasks.entries().get(task.index as usize)
                    && t.id == task.task
                    && t.phase == TaskPhase::Queued
                {
                    queue.order.seq_push(now, task.index, t, seq);
                    break;
                }
            }
            if parked.is_empty() {
                queue.parked.remove(&cap);
            }
        }
    }

    /// A dependency of the task at `index` completed well.
    pub(super) fn dependency_done(&mut self, index: u32, id: TaskId, dependency: TaskId) {
        let Some(task) = self.tasks.get_mut(index) else {
            return;
        };
        if task.id != id || task.phase != TaskPhase::Blocked {
            return;
        }
        let from = self.trace.active().then(|| task.trace_phase());
        let Some(family) = task.family.as_mut() else {
            return;
        };
        family.unmet -= 1;
        let cause = Cause::DependencyDone(dependency);
        if family.unmet > 0 {
            if let Some(from) = from {
                let to = task.trace_phase();
                self.trace.push(self.now, id, from, to, cause);
            }
            return;
        }
        let own = family.parent.is_none();
        self.slots.uncount_blocked(task.agent);
        let from = from.unwrap_or(Phase::Waiting(crate::state::WaitReason::Dependencies(1)));
        let _ = self.enter(index, from, cause, own);
    }

    /// Fails the task of deadline `timer`, if it still stands.
    pub(super) fn fire_deadline(&mut self, timer: &Timer) {
        if !self.stands(timer) {
            return;
        }
        let (index, id, deadline) = (timer.index, timer.task, timer.at);
        let phase = self.tasks.entries()[index as usize].phase;
        let while_queued = matches!(phase, TaskPhase::Queued | TaskPhase::Blocked);
        let error = TaskError::DeadlineExceeded {
            task: id,
            deadline,
            while_queued,
        };
        self.end(
            index,
            Ending::Completed(Err(error)),
            Cause::DeadlineExceeded,
            None,
        );
        self.stats.failed += 1;
        self.stats.deadlines_exceeded += 1;
    }

    /// Acts on every expiry due by now, in `(time, seq)` order: evicts ended tasks whose
    /// retention has run out (in the order they ended), lets go of keys whose window
    /// has.
    pub(super) fn expire_due(&mut self) {
        while let Some(timer) = self.timers.expired(self.now) {
            if !self.stands(&timer) {
                continue;
            }
            match timer.kind {
                TimerKind::Retention => {
                    if self.forget(timer.task).is_some() {
                        self.stats.evicted += 1;
                    }
                }
                TimerKind::Key => self.keys.expire(timer.task),
                TimerKind::Sleep
                | TimerKind::Deadline
                | TimerKind::Backoff
                | TimerKind::Schedule => {}
            }
        }
    }

    /// Task `id`, which may hold `key`, ended: the key is kept for the idempotency
    /// window, and let go by a timer.
    pub(super) fn key_ended(&mut self, key: &str, id: TaskId) {
        if let Some(until) = self.keys.ended(key, id, self.now) {
            self.timers.set(TimerKind::Key, until, timers::NO_INDEX, id);
        }
    }

    /// Sets `task`'s deadline (scheduler time), replacing any deadline it had.
    ///
    /// # Errors
    /// [`CancelError`](crate::CancelError)s for a task not in the table or ended.
    pub fn set_deadline(&mut self, task: TaskId, deadline: Time) -> Result<(), super::CancelError> {
        let index = *self
            .tasks
            .by_id
            .get(&task)
            .ok_or(super::CancelError::UnknownTask(task))?;
        let t = self.tasks.entry_mut(index);
        if t.phase == TaskPhase::Done {
            return Err(super::CancelError::AlreadyEnded {
                id: task,
                state: t.state(),
            });
        }
        t.family.get_or_insert_with(Default::default).deadline = Some(deadline);
        self.timers.set(TimerKind::Deadline, deadline, index, task);
        self.journal_deadline(task, deadline);
        Ok(())
    }
}
