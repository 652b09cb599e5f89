//! Taking a scheduler apart into a [`Snapshot`] and putting one together again.
//!
//! Counters that follow from the tasks (how many are live, queued, in flight, running
//! per agent and type, counted at each gate) are not stored: a restore recomputes them,
//! so a snapshot cannot carry counts that disagree with its tasks.

mod restore;

use super::timers::{NO_SLOT, NO_TASK, Timer, TimerKind};
use super::{Config, Scheduler, SlotPhase, TaskSlot};
use crate::pending::Out;
use crate::policy::PolicyChoice;
use crate::registry::TaskRegistry;
use crate::snapshot::{
    ConfigRecord, PolicyRecord, RestoreError, Snapshot, SnapshotData, SnapshotError, SnapshotParts,
    TraceRecord,
};
use crate::trace::Trace;
use crate::{AgentId, RequestKey, TaskId};

impl Scheduler {
    /// The whole state, between two steps: configuration, time, id counters, every task
    /// in the table (live ones with their saved bodies, ended ones with their results),
    /// the run queue and the slot queue, limiter state, queued and in-flight requests,
    /// timers, deadlines, retained results and the counters. The scheduler is not
    /// changed.
    ///
    /// # Errors
    /// [`SnapshotError::Unsaveable`] for a live task whose [`AgentTask::save`](crate::AgentTask::save)
    /// refuses; [`SnapshotError::Policy`] for a custom policy that cannot list its queue.
    pub fn snapshot(&self) -> Result<Snapshot, SnapshotError> {
        let mut data = self.header()?;
        data.tasks = Vec::with_capacity(self.tasks.index.len());
        for slot in self.tasks.index.values() {
            data.tasks
                .push(self.tasks.record(&self.tasks.slots()[*slot as usize])?);
        }
        // A restored scheduler puts task `i` in slot `i`, and snapshots to the same bytes.
        data.resolve_slots();
        Ok(Snapshot { data })
    }

    /// Every live task's id and body, by id: what the round-trip check saves and
    /// restores ([`Scheduler::check_round_trip`]).
    pub(crate) fn live_bodies(&self) -> impl Iterator<Item = (TaskId, &dyn crate::AgentTask)> {
        self.tasks
            .index
            .keys()
            .filter_map(|id| self.live_body(*id).map(|body| (*id, body)))
    }

    /// The body of the task `id`, if it is live.
    pub(crate) fn live_body(&self, id: TaskId) -> Option<&dyn crate::AgentTask> {
        match &self.tasks.find(id)?.1.body {
            super::table::Body::Live(body) => Some(body.as_ref()),
            super::table::Body::Ended(_) => None,
        }
    }

    /// Starts (`true`) or stops (`false`) noting which tasks change, for
    /// [`snapshot_changes`](Scheduler::snapshot_changes). A driver that writes
    /// checkpoints as parts turns it on when it writes its first; a restored scheduler
    /// starts with it off.
    pub fn track_changes(&mut self, on: bool) {
        self.tasks.track_changes(on);
        self.set_observed();
    }

    /// Whether the scheduler notes which tasks change.
    pub fn is_tracking_changes(&self) -> bool {
        self.tasks.tracking()
    }

    /// The scheduler as [`SnapshotParts`]: its header, and a row for every task that
    /// changed (was added, polled, answered, woken, ended, …) since the last call or
    /// since [`track_changes`](Scheduler::track_changes) started, with the ids of the
    /// tasks removed from the table since. A store writes these over the last
    /// checkpoint's and has the whole scheduler, in time that follows what changed,
    /// not how many tasks there are. If changes were not tracked, every task has a row
    /// (`full`), and tracking starts.
    ///
    /// # Errors
    /// As [`snapshot`](Scheduler::snapshot); nothing is taken then, so the next call
    /// still has every change.
    pub fn snapshot_changes(&mut self) -> Result<SnapshotParts, SnapshotError> {
        let mut header = self.header()?;
        let row = |task: &TaskSlot| -> Result<(TaskId, Vec<u8>), SnapshotError> {
            let record = self.tasks.record(task)?;
            let bytes = record.to_row().map_err(SnapshotError::Encode)?;
            Ok((task.id, bytes))
        };
        let (mut rows, removed, full) = match self.tasks.changes() {
            Some(changes) => {
                let mut rows = Vec::with_capacity(changes.slots.len());
                for slot in &changes.slots {
                    if let Some(task) = self.tasks.slots().get(*slot as usize) {
                        rows.push(row(task)?);
                    }
                }
                let mut removed = changes.removed.clone();
                removed.sort_unstable();
                removed.dedup();
                (rows, removed, false)
            }
            None => {
                let mut rows = Vec::with_capacity(self.tasks.index.len());
                for slot in self.tasks.index.values() {
                    rows.push(row(&self.tasks.slots()[*slot as usize])?);
                }
                (rows, Vec::new(), true)
            }
        };
        rows.sort_unstable_by_key(|(id, _)| *id);
        // A task removed and a new one in its slot: the row is the new task's; an id
        // removed is never given again, so no row names a removed task.
        header.tasks.clear();
        let header = crate::snapshot::encode_header(header, self.tasks.index.len())?;
        if full {
            self.tasks.track_changes(true);
            self.set_observed();
        } else {
            let _ = self.tasks.take_changes();
        }
        Ok(SnapshotParts {
            header,
            rows,
            removed,
            full,
        })
    }

    /// Everything but the tasks: a snapshot's data with no task records, its request
    /// keys naming no slot (`u32::MAX`; [`SnapshotData::resolve_slots`] gives them the
    /// slots a restore puts their tasks in).
    fn header(&self) -> Result<SnapshotData, SnapshotError> {
        let key = |k: &RequestKey| -> Option<RequestKey> {
            let task = self.tasks.slots().get(k.slot() as usize)?;
            (task.id == k.task()).then_some(())?;
            Some(RequestKey::new(k.task(), k.number(), u32::MAX))
        };
        let live_in = |slot: u32, id: TaskId, phase: SlotPhase| {
            self.tasks
                .slots()
                .get(slot as usize)
                .is_some_and(|t| t.id == id && t.phase == phase)
        };
        let tasks = Vec::new();

        // Queue sequence numbers are kept as ranks: only their order matters, and a
        // queue with skipped entries in it snapshots like the same queue without them.
        let mut ready = queued_entries(&self.ready.policy, &live_in, SlotPhase::Ready)?;
        ready.sort_unstable();
        let ready = ready
            .into_iter()
            .zip(0u64..)
            .map(|((_, id), rank)| (rank, id))
            .collect();

        let admit = match &self.slots.gate {
            None => None,
            Some(admit) => Some(admit.record(&self.tasks)?),
        };

        // Sleeps and deadlines are recorded with their numbers, and the retention queue
        // in its order; the other timers follow from their owners' records (keys from
        // theirs, back-off ends from the gates') and are rebuilt on restore.
        let standing = |kind| self.timers.standing(kind, |t| self.stands(t));
        let timers = |kind| {
            standing(kind)
                .into_iter()
                .map(|t| (t.at, t.seq, t.task))
                .collect()
        };
        let data = SnapshotData {
            config: self.config_record()?,
            now: self.now,
            next_task: self.tasks.next_id(),
            next_seq: self.timers.seq(),
            ready_seq: self.ready.seq,
            ready,
            agents: self
                .tasks
                .agents()
                .enumerate()
                .map(|(i, name)| {
                    let weight = self.ready.weights.get(i).copied().unwrap_or(1);
                    (name.to_string(), weight)
                })
                .collect(),
            tasks,
            outbox: self.outbox.requests.iter().filter_map(key).collect(),
            direct: self.requests.direct.iter().filter_map(key).collect(),
            cancels: self.outbox.cancels().cloned().collect(),
            timers: timers(TimerKind::Sleep),
            deadlines: timers(TimerKind::Deadline),
            expiry: standing(TimerKind::Retention)
                .into_iter()
                .map(|t| (t.at, t.task))
                .collect(),
            trace: TraceRecord {
                record: self.trace.recording(),
                next_seq: self.trace.next_seq(),
                hash: self.trace.hash(),
            },
            stats: self.stats.clone(),
            admit,
            gates: self.requests.gate_records(&key),
            parked_requests: self.requests.parked_records(&key),
            hold_seq: self.requests.hold_seq,
            retries: self.requests.retry_records(&key),
            gating: self.requests.gating,
            ended_keys: self.keys.ended_records(),
            schedules: self.schedules.record(),
            addenda: crate::snapshot::codec::Addenda {
                key_fingerprints: self.keys.fingerprints(),
                session_limits: self.schedules.limits,
            },
        };
        Ok(data)
    }

    fn config_record(&self) -> Result<ConfigRecord, SnapshotError> {
        let policy = match &self.policy {
            PolicyChoice::Fifo => PolicyRecord::Fifo,
            PolicyChoice::Priority => PolicyRecord::Priority,
            PolicyChoice::Computed(config) => PolicyRecord::Computed(config.clone()),
            PolicyChoice::FairShare => PolicyRecord::FairShare,
            PolicyChoice::Custom(_) => PolicyRecord::Custom(self.ready.policy.name().to_owned()),
        };
        Ok(ConfigRecord {
            policy,
            limits: self.slots.limits().clone(),
            requests: self.requests.limits.clone(),
            retention: self.timers.retention(),
            idempotency_window: self.keys.window(),
        })
    }

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
        let mut s = Scheduler::new(config);

        // Agents, with their weights.
        for (i, (name, weight)) in d.agents.iter().enumerate() {
            let agent = if i == 0 {
                AgentId::DEFAULT
            } else {
                s.agent_id(Some(name.clone().into()))
            };
            if agent.0 as usize != i {
                return Err(RestoreError::Invalid(format!(
                    "agent `{name}` is listed twice"
                )));
            }
            if *weight != 1 {
                s.set_weight(agent, *weight);
            }
        }

        // Tasks, task `i` in slot `i`.
        let ids: Vec<TaskId> = d.tasks.iter().map(|t| t.id).collect();
        let slot_of = |id: &TaskId| ids.binary_search(id).ok().map(|i| i as u32);
        let mut slots = Vec::with_capacity(d.tasks.len());
        for record in &d.tasks {
            slots.push(TaskSlot::restore(record, registry, &slot_of)?);
        }
        s.tasks.restore(slots, d.next_task);
        s.now = d.now;
        s.timers.restore_seq(d.next_seq);
        s.ready.seq = d.ready_seq;
        s.stats = d.stats.clone();
        s.trace = Trace::resume(d.trace.record, d.trace.next_seq, d.trace.hash);

        // What follows from the tasks.
        for (slot, task) in s.tasks.slots().iter() {
            if task.phase == SlotPhase::Done {
                continue;
            }
            s.outbox.in_flight += task.in_flight as usize;
            let agent = task.agent.0 as usize;
            match task.phase {
                SlotPhase::Queued => {
                    s.slots.queue(task.agent, task.priority);
                }
                SlotPhase::Blocked => {
                    s.slots.block(task.agent);
                }
                _ => {}
            }
            if let Some(key) = task.family.as_ref().and_then(|f| f.key.clone()) {
                s.keys.claim_with(key, task.id, None);
            }
            if task.holds_slot {
                s.ready.policy.task_started(task.agent);
                if let Some(admit) = s.slots.gate.as_mut() {
                    admit.queue.policy.task_started(task.agent);
                    admit.running += 1;
                    if admit.per_agent.len() <= agent {
                        admit.per_agent.resize(agent + 1, 0);
                    }
                    admit.per_agent[agent] += 1;
                    *admit.per_type.entry(task.live_type_name()).or_default() += 1;
                }
            }
            for p in task.pending.as_slice() {
                if p.counted() {
                    s.requests.count(&p.kind, task.agent);
                }
            }
            let _ = slot;
        }

        // The run queue, in its order.
        for (seq, id) in &d.ready {
            if let Some(slot) = slot_of(id) {
                let task = &s.tasks.slots()[slot as usize];
                if task.phase == SlotPhase::Ready {
                    s.ready.seq_push(d.now, slot, task, *seq);
                    s.ready.len += 1;
                }
            }
        }

        // Queues of requests and signals, timers, deadlines, retention.
        s.outbox
            .restore(d.outbox.iter().copied(), d.cancels.iter().cloned());
        s.requests.direct = d.direct.iter().copied().collect();
        let kinds = [
            (&d.timers, TimerKind::Sleep),
            (&d.deadlines, TimerKind::Deadline),
        ];
        for (entries, kind) in kinds {
            for &(at, seq, task) in entries {
                if let Some(slot) = slot_of(&task) {
                    s.timers.restore(Timer {
                        at,
                        seq,
                        slot,
                        task,
                        kind,
                    });
                }
            }
        }
        // The timers a snapshot does not record, rebuilt from their owners: results to
        // evict in the order recorded, keys by when they are let go, back-off ends.
        for &(at, task) in &d.expiry {
            s.timers
                .restore_derived(TimerKind::Retention, at, NO_SLOT, task);
        }
        let mut key_expiries = Vec::new();
        // The ended keys whose window ran out by the snapshot's time: not kept, and
        // neither are their fingerprints.
        let mut let_go = std::collections::BTreeSet::new();
        for (key, task, ended_at) in &d.ended_keys {
            if s.keys.get(key).is_some() || let_go.contains(key) {
                return Err(RestoreError::Invalid(format!(
                    "the key `{key}` is held by two tasks"
                )));
            }
            match s.keys.restore_ended(key.clone(), *task, *ended_at, d.now) {
                Some(until) => key_expiries.push((until, *task)),
                None if s.keys.get(key).is_none() => {
                    let_go.insert(key);
                }
                None => {}
            }
        }
        // Each key's fingerprint (live and ended keys alike), by key.
        for (key, fingerprint) in &d.addenda.key_fingerprints {
            if let_go.contains(key) {
                continue;
            }
            if s.keys.get(key).is_none() {
                return Err(RestoreError::Invalid(format!(
                    "the key `{key}` has a fingerprint but no task holds it"
                )));
            }
            s.keys.set_fingerprint(key, *fingerprint);
        }
        key_expiries.sort_unstable();
        for (until, task) in key_expiries {
            s.timers
                .restore_derived(TimerKind::Key, until, NO_SLOT, task);
        }

        // The slot queue.
        if let (Some(record), Some(admit)) = (&d.admit, s.slots.gate.as_mut()) {
            admit.restore(record, &s.tasks, d.now)?;
        }

        s.requests.restore(d);
        for gate in &d.gates {
            if gate.backoff_until > d.now {
                let number = s.requests.gate_number(&gate.kind);
                s.timers
                    .restore_derived(TimerKind::Backoff, gate.backoff_until, number, NO_TASK);
            }
        }
        s.schedules =
            crate::schedule::Schedules::restore(&d.schedules).map_err(RestoreError::Invalid)?;
        s.schedules.limits = d.addenda.session_limits;
        for (slot, entry) in &d.schedules.entries {
            if entry.timer != crate::Time::MAX {
                if entry.timer_seq == 0 || entry.timer_seq > d.next_seq {
                    return Err(RestoreError::Invalid(format!(
                        "schedule {:?}'s timer has number {}, not in 1..={}",
                        entry.def.slug, entry.timer_seq, d.next_seq
                    )));
                }
                s.timers.restore(Timer {
                    at: entry.timer,
                    seq: entry.timer_seq,
                    slot: *slot,
                    task: TaskId(entry.uid),
                    kind: TimerKind::Schedule,
                });
            }
        }
        s.registry = Some(registry.clone());
        s.timers.rebuilt();
        consistent(d, &s).map_err(RestoreError::Invalid)?;
        // Requests in the queues out are out and not taken by the driver yet. (A
        // snapshot written before requests went out at the end of their input marked
        // those as held.) A request held at its gate or parked behind its agent's cap
        // waits there, whatever key is queued: a replay by an earlier version left the
        // key of a request answered 429 before it was taken in the queue, and marked
        // out, the request went at once, past its back-off and uncounted by its gate.
        let waiting: std::collections::BTreeSet<(TaskId, u32)> = if d.direct.is_empty() {
            std::collections::BTreeSet::new()
        } else {
            d.gates
                .iter()
                .flat_map(|gate| &gate.held)
                .chain(d.parked_requests.iter().flat_map(|(_, held)| held))
                .map(|(_, _, key)| (key.task(), key.number()))
                .collect()
        };
        for key in d.outbox.iter().chain(&d.direct) {
            if let Some(p) = s
                .tasks
                .get_mut(key.slot())
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
        // Of the requests in flight, those still held back by a limit.
        s.outbox.held = s
            .tasks
            .slots()
            .iter()
            .filter(|(_, t)| t.phase != SlotPhase::Done)
            .flat_map(|(_, t)| t.pending.as_slice())
            .filter(|p| p.unsent())
            .count();
        // A request is held only with gates (an answer to it goes through them, which
        // lets it out of the held ones): a snapshot that holds one without them takes
        // the gates' path, which sends what goes at once in the same order.
        if s.outbox.held > 0 {
            s.requests.gating = true;
        }
        // A snapshot is taken between inputs, so this lets nothing new go; it sorts
        // what a snapshot of an older version left unsorted.
        s.end_input();
        Ok(s)
    }

    /// Puts every request the driver had taken back in the queue of requests to send
    /// (after those not taken yet; by task id, then request number), to go again with
    /// the same key (through its gate, if its kind has one): what a new process does
    /// after a restore, since its executors never got them. Returns how many. An executor that cannot de-duplicate by key makes them at least once.
    pub fn resend_in_flight(&mut self) -> usize {
        self.journal_resend();
        let mut resent = 0;
        let live: Vec<(TaskId, u32)> = self.tasks.index.iter().map(|(i, s)| (*i, *s)).collect();
        for (id, slot) in &live {
            let task = self.tasks.slot_mut(*slot);
            if task.phase == SlotPhase::Done {
                continue;
            }
            let agent = task.agent;
            for p in task.pending.as_mut_slice() {
                if !p.taken() {
                    continue;
                }
                if p.counted() {
                    self.requests.release(&p.kind, agent);
                }
                // Out, and not taken by this process's driver yet.
                self.outbox.set_out(p, Out::Sent);
                self.outbox
                    .requests
                    .push_back(RequestKey::new(*id, p.number, *slot));
                resent += 1;
            }
        }
        self.end_input();
        resent
    }
}

/// Checks what the format cannot: that every queue holds exactly the tasks in the
/// state that puts them there, and every held request waits at its own kind's gate.
/// A snapshot that passed its checksum but says otherwise was written wrong or made by
/// hand; going on with it would break the scheduler's counts.
fn consistent(d: &SnapshotData, s: &Scheduler) -> Result<(), String> {
    let phase_of = |id: &TaskId| -> Option<SlotPhase> {
        let slot = s.tasks.index.get(id)?;
        Some(s.tasks.slots()[*slot as usize].phase)
    };
    let mut ready: Vec<TaskId> = d.ready.iter().map(|(_, id)| *id).collect();
    ready.sort_unstable();
    let ready_tasks: Vec<TaskId> = s
        .tasks
        .index
        .iter()
        .filter(|(_, slot)| s.tasks.slots()[**slot as usize].phase == SlotPhase::Ready)
        .map(|(id, _)| *id)
        .collect();
    if ready != ready_tasks {
        return Err("the run queue does not hold exactly the ready tasks".to_owned());
    }
    let mut queued: Vec<TaskId> = d
        .admit
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
    let queued_tasks: Vec<TaskId> = s
        .tasks
        .index
        .iter()
        .filter(|(_, slot)| s.tasks.slots()[**slot as usize].phase == SlotPhase::Queued)
        .map(|(id, _)| *id)
        .collect();
    if queued != queued_tasks || (!queued.is_empty() && s.slots.gate.is_none()) {
        return Err("the slot queue does not hold exactly the tasks waiting for a slot".to_owned());
    }
    for (id, slot) in &s.tasks.index {
        let task = &s.tasks.slots()[*slot as usize];
        if task.phase == SlotPhase::Blocked && task.family.as_ref().is_none_or(|f| f.unmet == 0) {
            return Err(format!("task {id} waits for dependencies but has none"));
        }
    }
    let waits_at = |key: &RequestKey, kind: Option<&crate::Kind>| -> bool {
        phase_of(&key.task()).is_some_and(|p| p != SlotPhase::Done)
            && s.tasks.slots()[key.slot() as usize]
                .pending
                .as_slice()
                .iter()
                .any(|p| {
                    p.number == key.number() && p.unsent() && kind.is_none_or(|k| *k == p.kind)
                })
    };
    for gate in &d.gates {
        if let Some((_, _, key)) = gate.held.iter().find(|(_, _, k)| {
            // A held request may be stale (its task ended, or it was answered); one that
            // still waits must be of the gate's kind.
            waits_at(k, None) && !waits_at(k, Some(&gate.kind))
        }) {
            return Err(format!(
                "request {} of task {} is held at the `{}` gate but is of another kind",
                key.number(),
                key.task(),
                gate.kind
            ));
        }
    }
    Ok(())
}

/// The queued entries of `policy` whose tasks are still in `phase`.
pub(super) fn queued_entries(
    policy: &crate::policy::RunQueue,
    live_in: &impl Fn(u32, TaskId, SlotPhase) -> bool,
    phase: SlotPhase,
) -> Result<Vec<(u64, TaskId)>, SnapshotError> {
    let entries = policy
        .queued()
        .ok_or_else(|| SnapshotError::Policy(policy.name().to_owned()))?;
    Ok(entries
        .into_iter()
        .filter(|(_, t)| live_in(t.slot, t.task, phase))
        .map(|(seq, t)| (seq, t.task))
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::*;
    use crate::{
        AgentTask, Kind, NewTask, Request, RequestError, RequestLimits, Response, SavedTask,
        StateError, Step, TaskContext, Time,
    };

    /// Asks one LLM question, then finishes.
    #[derive(Debug, Serialize, Deserialize)]
    struct Ask {
        asked: bool,
    }

    impl AgentTask for Ask {
        fn poll(&mut self, cx: &mut TaskContext<'_>) -> crate::Step {
            if self.asked {
                return Step::done(1);
            }
            self.asked = true;
            cx.request(Request::llm(json!("question")));
            Step::Wait
        }
        fn type_name(&self) -> &'static str {
            "ask"
        }
        fn save(&self) -> Result<SavedTask, StateError> {
            SavedTask::serde(self)
        }
    }

    fn take_all(scheduler: &mut Scheduler) -> Vec<RequestKey> {
        std::iter::from_fn(|| scheduler.poll_request())
            .map(|out| out.key)
            .collect()
    }

    /// A snapshot whose queue of requests out still holds the key of a request that
    /// was answered 429 and waits at its gate for the back-off to end (as an earlier
    /// version wrote from a replayed journal): the restored request waits there, and
    /// goes, counted, only when the gate lets it; it does not go at once, uncounted,
    /// from the stale key.
    #[test]
    fn a_stale_key_of_a_request_waiting_at_its_gate_does_not_send_it() {
        let registry = TaskRegistry::new().with_serde::<Ask>("ask");
        let mut scheduler = Scheduler::new(
            Config::new().requests(RequestLimits::new().max_in_flight(Kind::Llm, 1)),
        );
        for _ in 0..2 {
            scheduler
                .submit(Time::ZERO, NewTask::new(Ask { asked: false }))
                .unwrap();
        }
        while scheduler.step(Time::ZERO).is_some() {}
        let sent = take_all(&mut scheduler);
        assert_eq!(sent.len(), 1);
        let refused = Response::new(
            sent[0],
            Err(RequestError::RateLimited {
                retry_after: Some(Duration::from_secs(1)),
            }),
        );
        let _ = scheduler.handle_response(Time::from_duration(Duration::from_millis(10)), refused);
        assert_eq!(take_all(&mut scheduler), []);
        let backoff_end = scheduler.poll_timeout().unwrap();

        let mut snapshot = scheduler.snapshot().unwrap();
        let stale = snapshot
            .data
            .gates
            .iter()
            .flat_map(|gate| &gate.held)
            .map(|(_, _, key)| *key)
            .find(|key| key.task() == sent[0].task())
            .unwrap();
        snapshot.data.direct.push(stale);
        let mut restored = Scheduler::restore(&snapshot, &registry).unwrap();
        restored.resend_in_flight();
        // The kind backs off: nothing goes.
        assert_eq!(take_all(&mut restored), []);
        restored.handle_timeout(backoff_end);
        // Then one request at a time, as the gate's limit says.
        let first = take_all(&mut restored);
        assert_eq!(first.len(), 1);
        let _ = restored.handle_response(backoff_end, Response::new(first[0], Ok(json!(1))));
        while restored.step(backoff_end).is_some() {}
        let second = take_all(&mut restored);
        assert_eq!(second.len(), 1);
        assert_ne!(first, second);
    }
}
