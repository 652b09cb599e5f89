//! Putting a scheduler together again from a [`Snapshot`](crate::snapshot::Snapshot):
//! the tasks, then what follows from them, then the queues, keys, gates and schedules,
//! and last a check that they all agree.

use std::collections::BTreeSet;

use crate::id::{AgentId, RequestKey, TaskId};
use crate::kind::Kind;
use crate::pending::Out;
use crate::policy::PolicyChoice;
use crate::registry::TaskRegistry;
use crate::schedule::Schedules;
use crate::scheduler::Scheduler;
use crate::scheduler::config::Config;
use crate::scheduler::table::{TaskEntry, TaskPhase};
use crate::scheduler::timers::{NO_INDEX, NO_TASK, Timer, TimerKind};
use crate::snapshot::{PolicyRecord, RestoreError, Snapshot, SnapshotData};
use crate::time::Time;
use crate::trace::Trace;

impl Scheduler {
    /// A scheduler that goes on from `snapshot`, rebuilding live tasks' bodies through
    /// `registry`. It is exactly the scheduler that was snapshotted — requests that
    /// were with executors are still marked sent; call
    /// [`resend_in_flight`](Scheduler::resend_in_flight) to send them again in a new
    /// process. A snapshot may be restored any number of times (forks).
    ///
    /// # Errors
    /// [`RestoreError`]: a task type or policy the registry does not know, a body its
    /// decoder refuses, or a snapshot that does not hang together.
    pub fn restore(
        snapshot: &Snapshot,
        registry: &TaskRegistry,
    ) -> Result<Scheduler, RestoreError> {
        let d = &snapshot.data;
        d.check().map_err(RestoreError::Invalid)?;
        let mut s = Scheduler::new(restored_config(d, registry)?);
        s.restore_agents(d)?;
        // Task `i` at index `i`.
        let ids: Vec<TaskId> = d.tasks.iter().map(|t| t.id).collect();
        let index_of = |id: &TaskId| ids.binary_search(id).ok().map(|i| i as u32);
        s.restore_tasks(d, registry, &index_of)?;
        s.count_from_tasks();
        s.restore_run_queue(d, &index_of);
        // Queues of requests and signals.
        s.outbox
            .restore(d.outbox.iter().copied(), d.cancels.iter().cloned());
        s.requests.direct = d.direct.iter().copied().collect();
        s.restore_timers(d, &index_of);
        s.restore_keys(d)?;
        // The slot queue, with the tasks parked behind a cap and the start window.
        if let (Some(record), Some(queue)) = (&d.slot_queue, s.slots.queue.as_mut()) {
            queue.restore(record, &s.tasks, d.now)?;
        }
        s.restore_gates(d);
        s.restore_schedules(d)?;
        s.restore_forks(&d.addenda.forks)?;
        s.restore_patches(&d.addenda.patches)?;
        s.restore_budgets(d, &index_of)
            .map_err(RestoreError::Invalid)?;
        s.registry = Some(registry.clone());
        s.timers.rebuilt();
        consistent(d, &s).map_err(RestoreError::Invalid)?;
        s.mark_requests_out(d);
        s.count_held();
        // A snapshot is taken between inputs, so this lets nothing new go; it sorts
        // what a snapshot of an older version left unsorted.
        s.end_input();
        Ok(s)
    }

    /// Registers the snapshot's agents, each under its own id, with their weights.
    ///
    /// # Errors
    /// [`RestoreError::Invalid`] for an agent listed twice.
    fn restore_agents(&mut self, d: &SnapshotData) -> Result<(), RestoreError> {
        for (i, (name, weight)) in d.agents.iter().enumerate() {
            let agent = if i == 0 {
                AgentId::DEFAULT
            } else {
                self.agent_id(Some(name.clone().into()))
            };
            if agent.0 as usize != i {
                return Err(RestoreError::Invalid(format!(
                    "agent `{name}` is listed twice"
                )));
            }
            if *weight != 1 {
                self.set_weight(agent, *weight);
            }
        }
        Ok(())
    }

    /// Rebuilds every task, task `i` of the snapshot at index `i` (`index_of` finds the
    /// indexes of the tasks one names), and sets the time, the id and sequence counters,
    /// the statistics and the trace as they were.
    ///
    /// # Errors
    /// The first task's that cannot be rebuilt, in id order (see `TaskEntry::restore`).
    fn restore_tasks(
        &mut self,
        d: &SnapshotData,
        registry: &TaskRegistry,
        index_of: &impl Fn(&TaskId) -> Option<u32>,
    ) -> Result<(), RestoreError> {
        let mut entries = Vec::with_capacity(d.tasks.len());
        for record in &d.tasks {
            entries.push(TaskEntry::restore(record, registry, index_of)?);
        }
        self.tasks.restore(entries, d.next_task);
        self.now = d.now;
        self.timers.restore_seq(d.next_seq);
        self.ready.seq = d.ready_seq;
        self.stats = d.stats.clone();
        self.trace = Trace::resume(d.trace.record, d.trace.next_seq, d.trace.hash);
        Ok(())
    }

    /// Recomputes what follows from the live tasks and is not stored: requests in
    /// flight, tasks waiting for a slot or for dependencies, live keys, tasks holding a
    /// slot (by agent and type), requests counted at their gates.
    fn count_from_tasks(&mut self) {
        for (_, task) in self.tasks.entries().iter() {
            if task.phase == TaskPhase::Done {
                continue;
            }
            self.outbox.in_flight += task.in_flight as usize;
            let agent = task.agent.0 as usize;
            match task.phase {
                TaskPhase::Queued => {
                    self.slots.count_queued(task.agent, task.priority);
                }
                TaskPhase::Blocked => {
                    self.slots.count_blocked(task.agent);
                }
                _ => {}
            }
            if let Some(key) = task.family.as_ref().and_then(|f| f.key.clone()) {
                self.keys.claim_with(key, task.id, None);
            }
            if task.holds_slot {
                self.ready.policy.task_started(task.agent);
                if let Some(queue) = self.slots.queue.as_mut() {
                    queue.order.policy.task_started(task.agent);
                    queue.running += 1;
                    if queue.per_agent.len() <= agent {
                        queue.per_agent.resize(agent + 1, 0);
                    }
                    queue.per_agent[agent] += 1;
                    *queue.per_type.entry(task.live_type_name()).or_default() += 1;
                }
            }
            for p in task.pending.as_slice() {
                if p.counted() {
                    self.requests.count(&p.kind, task.agent);
                }
            }
        }
    }

    /// Puts the ready tasks of the snapshot's run queue back in it, in its order.
    fn restore_run_queue(&mut self, d: &SnapshotData, index_of: &impl Fn(&TaskId) -> Option<u32>) {
        for (seq, id) in &d.ready {
            if let Some(index) = index_of(id) {
                let task = &self.tasks.entries()[index as usize];
                if task.phase == TaskPhase::Ready {
                    self.ready.seq_push(d.now, index, task, *seq);
                    self.ready.len += 1;
                }
            }
        }
    }

    /// Sets the sleeps and deadlines again with their numbers, then the results to
    /// evict, in the order recorded (a timer a snapshot does not record is rebuilt from
    /// its owner).
    fn restore_timers(&mut self, d: &SnapshotData, index_of: &impl Fn(&TaskId) -> Option<u32>) {
        let kinds = [
            (&d.timers, TimerKind::Sleep),
            (&d.deadlines, TimerKind::Deadline),
        ];
        for (entries, kind) in kinds {
            for &(at, seq, task) in entries {
                if let Some(index) = index_of(&task) {
                    self.timers.restore(Timer {
                        at,
                        seq,
                        index,
                        task,
                        kind,
                    });
                }
            }
        }
        for &(at, task) in &d.expiry {
            self.timers
                .restore_derived(TimerKind::Retention, at, NO_INDEX, task);
        }
    }

    /// Takes back the keys of ended tasks still in their window, with the timers that
    /// let them go, then every key's fingerprint (live and ended keys alike, by key).
    /// An ended key whose window ran out by the snapshot's time is not kept, and
    /// neither is its fingerprint.
    ///
    /// # Errors
    /// [`RestoreError::Invalid`] for a key held by two tasks, then for a fingerprint of
    /// a key no task holds.
    fn restore_keys(&mut self, d: &SnapshotData) -> Result<(), RestoreError> {
        let mut key_expiries = Vec::new();
        let mut let_go = BTreeSet::new();
        for (key, task, ended_at) in &d.ended_keys {
            if self.keys.get(key).is_some() || let_go.contains(key) {
                return Err(RestoreError::Invalid(format!(
                    "the key `{key}` is held by two tasks"
                )));
            }
            match self
                .keys
                .restore_ended(key.clone(), *task, *ended_at, d.now)
            {
                Some(until) => key_expiries.push((until, *task)),
                None if self.keys.get(key).is_none() => {
                    let_go.insert(key);
                }
                None => {}
            }
        }
        for (key, fingerprint) in &d.addenda.key_fingerprints {
            if let_go.contains(key) {
                continue;
            }
            if self.keys.get(key).is_none() {
                return Err(RestoreError::Invalid(format!(
                    "the key `{key}` has a fingerprint but no task holds it"
                )));
            }
            self.keys.set_fingerprint(key, *fingerprint);
        }
        key_expiries.sort_unstable();
        for (until, task) in key_expiries {
            self.timers
                .restore_derived(TimerKind::Key, until, NO_INDEX, task);
        }
        Ok(())
    }

    /// Puts the request gates back as they were, with the timers that end the
    /// back-offs still going at the snapshot's time.
    fn restore_gates(&mut self, d: &SnapshotData) {
        self.requests.restore(d);
        for gate in &d.gates {
            if gate.backoff_until > d.now {
                let number = self.requests.gate_number(&gate.kind);
                self.timers.restore_derived(
                    TimerKind::Backoff,
                    gate.backoff_until,
                    number,
                    NO_TASK,
                );
            }
        }
    }

    /// Puts the schedule table and the sessions back, with each schedule's timer under
    /// its number.
    ///
    /// # Errors
    /// [`RestoreError::Invalid`] for a schedule table that does not hang together, then
    /// for a schedule whose timer's number the snapshot never gave.
    fn restore_schedules(&mut self, d: &SnapshotData) -> Result<(), RestoreError> {
        self.schedules = Schedules::restore(&d.schedules).map_err(RestoreError::Invalid)?;
        self.schedules.limits = d.addenda.session_limits;
        for (index, entry) in &d.schedules.entries {
            if entry.timer != Time::MAX {
                if entry.timer_seq == 0 || entry.timer_seq > d.next_seq {
                    return Err(RestoreError::Invalid(format!(
                        "schedule {:?}'s timer has number {}, not in 1..={}",
                        entry.def.slug, entry.timer_seq, d.next_seq
                    )));
                }
                self.timers.restore(Timer {
                    at: entry.timer,
                    seq: entry.timer_seq,
                    index: *index,
                    task: TaskId(entry.uid),
                    kind: TimerKind::Schedule,
                });
            }
        }
        Ok(())
    }

    /// Marks the requests in the queues out as out and not taken by the driver yet. (A
    /// snapshot written before requests went out at the end of their input marked
    /// those as held.) A request held at its gate or parked behind its agent's cap
    /// waits there, whatever key is queued: a replay by an earlier version left the key
    /// of a request answered 429 before it was taken in the queue, and marked out, the
    /// request went at once, past its back-off and uncounted by its gate.
    fn mark_requests_out(&mut self, d: &SnapshotData) {
        let waiting: BTreeSet<(TaskId, u32)> = if d.direct.is_empty() {
            BTreeSet::new()
        } else {
            d.waiting_requests()
        };
        for key in d.outbox.iter().chain(&d.direct) {
            if let Some(p) = self
                .tasks
                .get_mut(key.index())
                .filter(|t| t.id == key.task())
                .and_then(|t| t.pending.in_flight_mut(key.number()))
            {
                let out = match p.out() {
                    Some(Out::Unsent) if waiting.contains(&(key.task(), key.number())) => {
                        continue;
                    }
                    Some(Out::Unsent) => Out::Sent,
                    Some(out) => out.untaken(),
                    None => continue,
                };
                p.set_out(out);
            }
        }
    }

    /// Counts the requests in flight still held back by a limit. A request is held only
    /// with gates (an answer to it goes through them, which lets it out of the held
    /// ones): a snapshot that holds one without them takes the gates' path, which sends
    /// what goes at once in the same order.
    fn count_held(&mut self) {
        self.outbox.held = self
            .tasks
            .entries()
            .iter()
            .filter(|(_, t)| t.phase != TaskPhase::Done)
            .flat_map(|(_, t)| t.pending.as_slice())
            .filter(|p| p.unsent())
            .count();
        if self.outbox.held > 0 {
            self.requests.gating = true;
        }
    }
}

/// The configuration a snapshot was taken under, its policy made through `registry`
/// if it is a custom one.
///
/// # Errors
/// [`RestoreError::UnknownPolicy`] for a custom policy the registry does not know.
fn restored_config(d: &SnapshotData, registry: &TaskRegistry) -> Result<Config, RestoreError> {
    let policy = match &d.config.policy {
        PolicyRecord::Fifo => PolicyChoice::Fifo,
        PolicyRecord::Priority => PolicyChoice::Priority,
        PolicyRecord::Computed(config) => PolicyChoice::Computed(config.clone()),
        PolicyRecord::FairShare => PolicyChoice::FairShare,
        PolicyRecord::Custom(name) => PolicyChoice::Custom(
            registry
                .policy_factory(name)
                .ok_or_else(|| RestoreError::UnknownPolicy(name.clone()))?,
        ),
    };
    let mut config = Config::new()
        .record_trace(d.trace.record)
        .policy(policy)
        .limits(d.config.limits.clone())
        .requests(d.config.requests.clone());
    config.retention = d.config.retention;
    config.idempotency_window = d.config.idempotency_window;
    config.budgets = d.addenda.v6.budgets.budgets.clone();
    // Agents' limits on kinds travel apart from the rest of the request limits.
    config.requests.agent_kinds = d.addenda.v6.agent_limits.common.clone();
    config.requests.agent_kinds_for = d.addenda.v6.agent_limits.own.clone();
    Ok(config)
}

/// Checks what the format cannot: that every queue holds exactly the tasks in the
/// state that puts them there, and every held request waits at its own kind's gate.
/// A snapshot that passed its checksum but says otherwise was written wrong or made by
/// hand; going on with it would break the scheduler's counts.
pub(in crate::scheduler) fn consistent(d: &SnapshotData, s: &Scheduler) -> Result<(), String> {
    queues_hold_their_tasks(d, s)?;
    held_requests_wait_at_their_gates(d, s)
}

/// The ids of the tasks of `s` in `phase`, in order.
fn tasks_in(s: &Scheduler, phase: TaskPhase) -> Vec<TaskId> {
    s.tasks
        .by_id
        .iter()
        .filter(|(_, index)| s.tasks.entries()[**index as usize].phase == phase)
        .map(|(id, _)| *id)
        .collect()
}

/// Whether the run queue holds exactly the ready tasks and the slot queue exactly the
/// tasks waiting for a slot, and every task waiting for dependencies has some.
fn queues_hold_their_tasks(d: &SnapshotData, s: &Scheduler) -> Result<(), String> {
    let mut ready: Vec<TaskId> = d.ready.iter().map(|(_, id)| *id).collect();
    ready.sort_unstable();
    if ready != tasks_in(s, TaskPhase::Ready) {
        return Err("the run queue does not hold exactly the ready tasks".to_owned());
    }
    let mut queued: Vec<TaskId> = d
        .slot_queue
        .iter()
        .flat_map(|a| {
            a.queue.iter().map(|(_, id)| *id).chain(
                a.parked
                    .iter()
                    .flat_map(|(_, e)| e.iter().map(|(_, id)| *id)),
            )
        })
        .collect();
    queued.sort_unstable();
    if queued != tasks_in(s, TaskPhase::Queued) || (!queued.is_empty() && s.slots.queue.is_none()) {
        return Err("the slot queue does not hold exactly the tasks waiting for a slot".to_owned());
    }
    for (id, index) in &s.tasks.by_id {
        let task = &s.tasks.entries()[*index as usize];
        if task.phase == TaskPhase::Blocked && task.family.as_ref().is_none_or(|f| f.unmet == 0) {
            return Err(format!("task {id} waits for dependencies but has none"));
        }
    }
    Ok(())
}

/// Whether every request held at a gate that still waits is of the gate's kind (a held
/// request may be stale: its task ended, or it was answered).
fn held_requests_wait_at_their_gates(d: &SnapshotData, s: &Scheduler) -> Result<(), String> {
    let phase_of = |id: &TaskId| -> Option<TaskPhase> {
        let index = s.tasks.by_id.get(id)?;
        Some(s.tasks.entries()[*index as usize].phase)
    };
    let waits_at = |key: &RequestKey, kind: Option<&Kind>| -> bool {
        phase_of(&key.task()).is_some_and(|p| p != TaskPhase::Done)
            && s.tasks.entries()[key.index() as usize]
                .pending
                .as_slice()
                .iter()
                .any(|p| {
                    p.number == key.number() && p.unsent() && kind.is_none_or(|k| *k == p.kind)
                })
    };
    let shares = d.addenda.v6.agent_limits.shares.iter();
    let held = d.gates.iter().map(|g| (&g.kind, &g.held));
    for (kind, held) in held.chain(shares.map(|s| (&s.kind, &s.parked))) {
        if let Some((_, _, key)) = held
            .iter()
            .find(|(_, _, k)| waits_at(k, None) && !waits_at(k, Some(kind)))
        {
            return Err(format!(
                "request {} of task {} is held at the `{}` gate but is of another kind",
                key.number(),
                key.task(),
                kind
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use crate::snapshot::{PhaseRecord, PolicyRecord, SnapshotData, StatusRecord};
    use crate::{
        Config, Fingerprint, NewTask, Response, RestoreError, Scheduler, Snapshot, TaskId,
        TaskRegistry, Time,
    };

    use super::super::tests::Ask;

    fn registry() -> TaskRegistry {
        TaskRegistry::new().with_serde::<Ask>("ask")
    }

    /// Agents `default` and `a`; task 1 (agent `a`, key `k`) ended, task 2 waiting for
    /// its answer, task 3 ready.
    fn fixture() -> Snapshot {
        let mut s = Scheduler::new(Config::new());
        let ask = || NewTask::new(Ask { asked: false });
        s.submit(Time::ZERO, ask().agent("a").key("k")).unwrap();
        while s.step(Time::ZERO).is_some() {}
        let key = s.poll_request().unwrap().key;
        let _ = s.handle_response(Time::ZERO, Response::new(key, Ok(json!(1))));
        while s.step(Time::ZERO).is_some() {}
        s.submit(Time::ZERO, ask()).unwrap();
        while s.step(Time::ZERO).is_some() {}
        s.submit(Time::ZERO, ask()).unwrap();
        s.snapshot().unwrap()
    }

    fn restore(snapshot: &Snapshot) -> Option<RestoreError> {
        Scheduler::restore(snapshot, &registry()).err()
    }

    fn invalid(reason: &str) -> RestoreError {
        RestoreError::Invalid(reason.to_owned())
    }

    type Fault = fn(&mut SnapshotData);

    #[test]
    fn the_fixture_restores() {
        let snapshot = fixture();
        let d = &snapshot.data;
        assert_eq!(d.tasks.len(), 3);
        assert_eq!(d.ended_keys.len(), 1);
        assert_eq!(d.ready.len(), 1);
        assert_eq!(restore(&snapshot), None);
    }

    /// Every way a snapshot can fail to hang together that the restore itself finds
    /// (past the format's own checks), by name, with its exact error.
    fn faults() -> Vec<(&'static str, Fault, RestoreError)> {
        let bad_json = serde_json::from_str::<serde_json::Value>("{")
            .unwrap_err()
            .to_string();
        vec![
            (
                "policy",
                |d| d.config.policy = PolicyRecord::Custom("mine".into()),
                RestoreError::UnknownPolicy("mine".into()),
            ),
            (
                "agent twice",
                |d| d.agents.push(("a".into(), 1)),
                invalid("agent `a` is listed twice"),
            ),
            (
                "unknown type",
                |d| d.tasks[1].type_name = "nope".into(),
                RestoreError::UnknownType {
                    task: TaskId(2),
                    type_name: "nope".into(),
                },
            ),
            (
                "done but live",
                |d| d.tasks[1].phase = PhaseRecord::Done,
                invalid("task 2 is done but its body is live"),
            ),
            (
                "live but result",
                |d| d.tasks[0].phase = PhaseRecord::Waiting,
                invalid("task 1 is live but its body is a result"),
            ),
            (
                "request state",
                |d| {
                    if let StatusRecord::InFlight { out, .. } = &mut d.tasks[1].pending[0].status {
                        *out = 3;
                    }
                },
                invalid("task 2's request 1 has an unknown state 3"),
            ),
            (
                "bad json",
                |d| {
                    if let StatusRecord::InFlight { payload, .. } =
                        &mut d.tasks[1].pending[0].status
                    {
                        *payload = "{".into();
                    }
                },
                invalid(&format!(
                    "task 2 holds JSON that does not parse: {bad_json}"
                )),
            ),
            (
                "key twice",
                |d| {
                    let key = d.ended_keys[0].clone();
                    d.ended_keys.push(key);
                },
                invalid("the key `k` is held by two tasks"),
            ),
            (
                "orphan fingerprint",
                |d| {
                    d.addenda
                        .key_fingerprints
                        .push(("nobody".into(), Fingerprint([0; 16])))
                },
                invalid("the key `nobody` has a fingerprint but no task holds it"),
            ),
            (
                "run queue",
                |d| d.ready.clear(),
                invalid("the run queue does not hold exactly the ready tasks"),
            ),
            (
                "slot queue",
                |d| d.tasks[1].phase = PhaseRecord::Queued,
                invalid("the slot queue does not hold exactly the tasks waiting for a slot"),
            ),
            (
                "blocked",
                |d| d.tasks[1].phase = PhaseRecord::Blocked,
                invalid("task 2 waits for dependencies but has none"),
            ),
        ]
    }

    /// Each fault alone is its exact error.
    #[test]
    fn each_inconsistency_is_its_exact_error() {
        for (name, fault, error) in faults() {
            let mut snapshot = fixture();
            fault(&mut snapshot.data);
            assert_eq!(restore(&snapshot), Some(error), "{name}");
        }
    }

    /// With several faults at once, the restore reports the one it meets first: the
    /// policy, the agents, the tasks (in id order), the keys, their fingerprints, and
    /// last the queues checked against the tasks.
    #[test]
    fn the_first_fault_in_restore_order_is_reported() {
        let all = faults();
        let order = [
            "policy",
            "agent twice",
            "live but result",
            "done but live",
            "key twice",
            "orphan fingerprint",
            "run queue",
        ];
        let faults: Vec<&(&str, Fault, RestoreError)> = order
            .iter()
            .map(|name| all.iter().find(|f| f.0 == *name).expect("a named fault"))
            .collect();
        for first in 0..faults.len() {
            let mut snapshot = fixture();
            for (_, fault, _) in &faults[first..] {
                fault(&mut snapshot.data);
            }
            assert_eq!(
                restore(&snapshot),
                Some(faults[first].2.clone()),
                "{}",
                order[first]
            );
        }
    }
}
