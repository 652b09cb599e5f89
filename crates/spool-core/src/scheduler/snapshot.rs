//! Taking a scheduler apart into a [`Snapshot`] and putting one together again.
//!
//! Counters that follow from the tasks (how many are live, queued, in flight, running
//! per agent and type, counted at each gate) are not stored: a restore recomputes them,
//! so a snapshot cannot carry counts that disagree with its tasks.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};

use slab::Slab;

use super::admit::Cap;
use super::{Body, Config, Ended, Scheduler, SlotPhase, TaskSlot};
use crate::limiter::{Gate, Retried};
use crate::pending::{Out, PendingRequest, PendingSet, Status};
use crate::policy::PolicyChoice;
use crate::snapshot::{
    AdmitRecord, BodyRecord, CapRecord, ConfigRecord, EndRecord, FamilyRecord, GateRecord,
    OutcomeRecord, PendingRecord, PhaseRecord, PolicyRecord, RestoreError, ResultRecord,
    SavedRecord, SavedTask, Snapshot, SnapshotData, SnapshotError, StatusRecord, TaskRecord,
    TaskRegistry, TraceRecord,
};
use crate::task::Family;
use crate::trace::Trace;
use crate::{AgentId, Outcome, Payload, RequestKey, TaskId, TaskState, Value};

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
        // Slots are renumbered densely in id order: a restored scheduler puts task `i`
        // in slot `i`, and snapshots to the same bytes.
        let dense: BTreeMap<u32, u32> = self
            .index
            .values()
            .enumerate()
            .map(|(i, slot)| (*slot, i as u32))
            .collect();
        let key = |k: &RequestKey| -> Option<RequestKey> {
            let task = self.tasks.get(k.slot() as usize)?;
            (task.id == k.task()).then_some(())?;
            Some(RequestKey::new(
                k.task(),
                k.number(),
                *dense.get(&k.slot())?,
            ))
        };
        let live_in = |slot: u32, id: TaskId, phase: SlotPhase| {
            self.tasks
                .get(slot as usize)
                .is_some_and(|t| t.id == id && t.phase == phase)
        };

        let mut tasks = Vec::with_capacity(self.index.len());
        for slot in self.index.values() {
            tasks.push(self.task_record(&self.tasks[*slot as usize])?);
        }

        // Queue sequence numbers are kept as ranks: only their order matters, and a
        // queue with skipped entries in it snapshots like the same queue without them.
        let mut ready = queued_entries(&self.ready.policy, &live_in, SlotPhase::Ready)?;
        ready.sort_unstable();
        let ready = ready
            .into_iter()
            .zip(0u64..)
            .map(|((_, id), rank)| (rank, id))
            .collect();

        let admit = match &self.admit {
            None => None,
            Some(admit) => {
                let mut queue = queued_entries(&admit.queue.policy, &live_in, SlotPhase::Queued)?;
                queue.sort_unstable();
                let queued = |id: &TaskId| {
                    self.index
                        .get(id)
                        .is_some_and(|slot| live_in(*slot, *id, SlotPhase::Queued))
                };
                let seqs: Vec<(TaskId, u64)> = admit
                    .seqs
                    .iter()
                    .filter(|(id, _)| queued(id))
                    .map(|(id, seq)| (*id, *seq))
                    .collect();
                let mut parked: Vec<(CapRecord, Vec<(u64, TaskId)>)> = admit
                    .parked
                    .iter()
                    .map(|(cap, entries)| {
                        let cap = match cap {
                            Cap::Agent(agent) => CapRecord::Agent(agent.0),
                            Cap::Type(name) => CapRecord::Type((*name).to_owned()),
                        };
                        let entries = entries
                            .iter()
                            .filter(|(_, t)| live_in(t.slot, t.task, SlotPhase::Queued))
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
                Some(AdmitRecord {
                    seq: admit.queue.seq,
                    queue,
                    seqs,
                    parked,
                    window: admit
                        .window
                        .as_ref()
                        .map(|w| w.times().collect())
                        .unwrap_or_default(),
                    started: admit.started.iter().map(|(id, t)| (*id, *t)).collect(),
                    slot_time_total: admit.slot_time_total,
                    slots_ended: admit.slots_ended,
                })
            }
        };

        let gates = self
            .gates
            .iter()
            .map(|(kind, gate)| {
                let mut held: Vec<_> = gate
                    .held
                    .iter()
                    .filter_map(|(p, Reverse(seq), k)| Some((*p, *seq, key(k)?)))
                    .collect();
                held.sort_unstable_by_key(|h| Reverse((h.0, Reverse(h.1))));
                GateRecord {
                    kind: kind.clone(),
                    window: gate
                        .window
                        .as_ref()
                        .map(|w| w.times().collect())
                        .unwrap_or_default(),
                    tokens: gate
                        .tokens
                        .as_ref()
                        .map(|w| {
                            w.entries()
                                .map(|(t, k, n)| {
                                    (
                                        t,
                                        key(&k).unwrap_or(RequestKey::new(
                                            k.task(),
                                            k.number(),
                                            u32::MAX,
                                        )),
                                        n,
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                    backoff_until: gate.backoff.until,
                    hits: gate.backoff.hits,
                    epoch: gate.backoff.epoch,
                    held,
                }
            })
            .collect();

        let heap_entries = |entries: Vec<(crate::Time, u64, u32, TaskId)>| {
            let mut out: Vec<_> = entries
                .into_iter()
                .filter(|(_, _, slot, id)| {
                    self.tasks
                        .get(*slot as usize)
                        .is_some_and(|t| t.id == *id && t.phase != SlotPhase::Done)
                })
                .map(|(t, seq, _, id)| (t, seq, id))
                .collect();
            out.sort_unstable();
            out
        };
        let timers = heap_entries(
            self.timers
                .iter()
                .map(|Reverse(e)| *e)
                .filter(|(t, _, slot, _)| {
                    self.tasks
                        .get(*slot as usize)
                        .is_some_and(|x| x.timer == *t)
                })
                .collect(),
        );
        let deadlines = heap_entries(self.deadlines.iter().map(|Reverse(e)| *e).collect());

        let data = SnapshotData {
            config: self.config_record()?,
            now: self.now,
            next_task: self.next_task,
            next_seq: self.next_seq,
            ready_seq: self.ready.seq,
            ready,
            agents: self
                .agents
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let weight = self.ready.weights.get(i).copied().unwrap_or(1);
                    (name.to_string(), weight)
                })
                .collect(),
            tasks,
            outbox: self.outbox.iter().filter_map(key).collect(),
            direct: self.direct.iter().filter_map(key).collect(),
            cancels: self.cancels.iter().cloned().collect(),
            timers,
            deadlines,
            expiry: self
                .expiry
                .iter()
                .filter(|(_, id)| self.index.contains_key(id))
                .copied()
                .collect(),
            trace: TraceRecord {
                record: self.trace.recording(),
                next_seq: self.trace.next_seq(),
                hash: self.trace.hash(),
            },
            stats: self.stats.clone(),
            admit,
            gates,
            parked_requests: self
                .parked_requests
                .iter()
                .map(|(agent, held)| {
                    let held = held
                        .iter()
                        .filter_map(|(p, Reverse(seq), k)| Some((*p, *seq, key(k)?)))
                        .collect();
                    (agent.0, held)
                })
                .collect(),
            hold_seq: self.hold_seq,
            retries: self
                .retries
                .iter()
                .filter_map(|(k, r)| Some((key(k)?, r.tries, r.waited)))
                .collect(),
            gating: self.gating,
            ended_keys: self.keys.ended_records(),
        };
        Ok(Snapshot { data })
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
            limits: self.limits.clone(),
            requests: self.request_limits.clone(),
            retention: self.retention,
            idempotency_window: self.keys.window(),
        })
    }

    fn task_record(&self, task: &TaskSlot) -> Result<TaskRecord, SnapshotError> {
        let type_name = task.type_name();
        let body = match &task.body {
            Body::Live(body) => match body.save() {
                Ok(SavedTask::State(bytes)) => BodyRecord::Live(SavedRecord::State(bytes)),
                Ok(SavedTask::Replay(bytes)) => BodyRecord::Live(SavedRecord::Replay(bytes)),
                Err(reason) => {
                    return Err(SnapshotError::Unsaveable {
                        task: task.id,
                        type_name: type_name.to_owned(),
                        reason,
                    });
                }
            },
            Body::Ended(ended) => BodyRecord::Ended {
                state: match &ended.state {
                    TaskState::Canceled(reason) => EndRecord::Canceled(reason.clone()),
                    TaskState::Completed(outcome) => EndRecord::Completed(outcome_record(outcome)),
                    // An ended body always holds a terminal state.
                    _ => EndRecord::Canceled(crate::CancelReason::Shutdown),
                },
                depth: ended.depth,
            },
        };
        let phase = match task.phase {
            SlotPhase::Ready | SlotPhase::Running => PhaseRecord::Ready,
            SlotPhase::Waiting => PhaseRecord::Waiting,
            SlotPhase::Queued => PhaseRecord::Queued,
            SlotPhase::Blocked => PhaseRecord::Blocked,
            SlotPhase::Done => PhaseRecord::Done,
        };
        let pending = task
            .pending
            .as_slice()
            .iter()
            .map(|p| PendingRecord {
                number: p.number,
                kind: p.kind.clone(),
                tokens: p.tokens,
                status: match &p.status {
                    Status::InFlight(payload, out) => StatusRecord::InFlight {
                        payload: json_text(payload.value()),
                        out: match out {
                            Out::Unsent => 0,
                            Out::Sent => 1,
                            Out::Counted(_) => 2,
                        },
                        epoch: p.sent_epoch(),
                    },
                    Status::Answered(Ok(value)) => {
                        StatusRecord::Answered(ResultRecord::Ok(json_text(value)))
                    }
                    Status::Answered(Err(error)) => {
                        StatusRecord::Answered(ResultRecord::Err((**error).clone()))
                    }
                },
            })
            .collect();
        let family = task.family.as_ref().map(|f| FamilyRecord {
            parent: f.parent.map(|(id, _)| id),
            children: f.children.clone(),
            joined: f.joined.clone(),
            results: f
                .results
                .iter()
                .map(|(id, outcome)| (*id, outcome_record(outcome)))
                .collect(),
            joined_ended: f.joined_ended,
            depth: f.depth,
            retries: f.retries,
            deadline: f.deadline,
            key: f.key.clone(),
            unmet: f.unmet,
            dependents: f
                .dependents
                .iter()
                .filter(|(id, _)| self.index.contains_key(id))
                .map(|(id, _)| *id)
                .collect(),
        });
        Ok(TaskRecord {
            id: task.id,
            type_name: type_name.to_owned(),
            agent: task.agent.0,
            priority: task.priority,
            created_at: task.created_at,
            phase,
            wait_any: task.wait_any,
            timer_fired: task.timer_fired,
            holds_slot: task.holds_slot,
            timer: task.timer,
            next_request: task.next_request,
            pending,
            family,
            body,
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
        for (i, record) in d.tasks.iter().enumerate() {
            slots.push((i, restore_task(record, registry, &slot_of)?));
        }
        s.tasks = Slab::from_iter(slots);
        s.index = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (*id, i as u32))
            .collect();
        s.now = d.now;
        s.next_task = d.next_task;
        s.next_seq = d.next_seq;
        s.ready.seq = d.ready_seq;
        s.stats = d.stats.clone();
        s.trace = Trace::resume(d.trace.record, d.trace.next_seq, d.trace.hash);

        // What follows from the tasks.
        for (slot, task) in s.tasks.iter() {
            if task.phase == SlotPhase::Done {
                continue;
            }
            s.live += 1;
            s.in_flight += task.in_flight as usize;
            let agent = task.agent.0 as usize;
            match task.phase {
                SlotPhase::Queued => {
                    s.waiting_for_slot += 1;
                    s.slot_wait_by_level[task.priority as usize] += 1;
                    s.queued_per_agent[agent] += 1;
                }
                SlotPhase::Blocked => {
                    s.blocked += 1;
                    s.queued_per_agent[agent] += 1;
                }
                _ => {}
            }
            if let Some(key) = task.family.as_ref().and_then(|f| f.key.clone()) {
                s.keys.claim(key, task.id);
            }
            if task.holds_slot {
                s.ready.policy.task_started(task.agent);
                if let Some(admit) = s.admit.as_mut() {
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
                    s.agent_in_flight[agent] += 1;
                    s.gates
                        .entry(p.kind.clone())
                        .or_insert_with(|| Gate::new(d.config.requests.kinds.get(&p.kind)))
                        .in_flight += 1;
                }
            }
            let _ = slot;
        }

        // The run queue, in its order.
        for (seq, id) in &d.ready {
            if let Some(slot) = slot_of(id) {
                let task = &s.tasks[slot as usize];
                if task.phase == SlotPhase::Ready {
                    s.ready.seq_push(d.now, slot, task, *seq);
                    s.ready.len += 1;
                }
            }
        }

        // Queues of requests and signals, timers, deadlines, retention.
        s.outbox = d.outbox.iter().copied().collect();
        s.direct = d.direct.iter().copied().collect();
        s.cancels = d.cancels.iter().cloned().collect();
        for (time, seq, id) in &d.timers {
            if let Some(slot) = slot_of(id) {
                s.timers.push(Reverse((*time, *seq, slot, *id)));
            }
        }
        for (time, seq, id) in &d.deadlines {
            if let Some(slot) = slot_of(id) {
                s.deadlines.push(Reverse((*time, *seq, slot, *id)));
            }
        }
        s.expiry = d.expiry.iter().copied().collect::<VecDeque<_>>();
        for (key, task, ended_at) in &d.ended_keys {
            if s.keys.get(key).is_some() {
                return Err(RestoreError::Invalid(format!(
                    "the key `{key}` is held by two tasks"
                )));
            }
            s.keys.restore_ended(key.clone(), *task, *ended_at, d.now);
        }

        // The slot queue.
        if let (Some(record), Some(admit)) = (&d.admit, s.admit.as_mut()) {
            admit.queue.seq = record.seq;
            for (seq, id) in &record.queue {
                if let Some(slot) = slot_of(id) {
                    let task = &s.tasks[slot as usize];
                    if task.phase == SlotPhase::Queued {
                        admit.queue.seq_push(d.now, slot, task, *seq);
                    }
                }
            }
            admit.seqs = record.seqs.iter().copied().collect();
            for (cap, entries) in &record.parked {
                let cap = match cap {
                    CapRecord::Agent(agent) => Cap::Agent(AgentId(*agent)),
                    // The tasks parked behind a type's cap are live tasks of that type:
                    // the cap takes its name from their bodies.
                    CapRecord::Type(name) => entries
                        .iter()
                        .filter_map(|(_, id)| slot_of(id))
                        .map(|slot| s.tasks[slot as usize].live_type_name())
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
                        let slot = slot_of(id)?;
                        Some((*seq, crate::policy::TaskRef { task: *id, slot }))
                    })
                    .collect();
                admit.parked.insert(cap, entries);
            }
            if let Some(window) = admit.window.as_mut() {
                window.restore(record.window.iter().copied());
            }
            admit.started = record.started.iter().copied().collect();
            admit.slot_time_total = record.slot_time_total;
            admit.slots_ended = record.slots_ended;
        }

        // Gates.
        for record in &d.gates {
            let limits = d.config.requests.kinds.get(&record.kind);
            let gate = s
                .gates
                .entry(record.kind.clone())
                .or_insert_with(|| Gate::new(limits));
            if let Some(window) = gate.window.as_mut() {
                window.restore(record.window.iter().copied());
            }
            if let Some(window) = gate.tokens.as_mut() {
                window.restore(record.tokens.iter().copied());
            }
            gate.backoff.until = record.backoff_until;
            gate.backoff.hits = record.hits;
            gate.backoff.epoch = record.epoch;
            for (priority, seq, key) in &record.held {
                gate.held.push((*priority, Reverse(*seq), *key));
            }
        }
        for (agent, held) in &d.parked_requests {
            let held = held
                .iter()
                .map(|(p, seq, key)| (*p, Reverse(*seq), *key))
                .collect();
            s.parked_requests.insert(AgentId(*agent), held);
        }
        s.hold_seq = d.hold_seq;
        s.retries = d
            .retries
            .iter()
            .map(|&(key, tries, waited)| (key, Retried { tries, waited }))
            .collect();
        s.gating = d.gating;
        consistent(d, &s).map_err(RestoreError::Invalid)?;
        Ok(s)
    }

    /// Marks every request that was with an executor as not sent, and puts it back in
    /// the outbox (by task id, then request number) to go again with the same key: what
    /// a new process does after a restore, since its executors never got them. Returns
    /// how many. An executor that cannot de-duplicate by key makes them at least once.
    pub fn resend_in_flight(&mut self) -> usize {
        self.journal_resend();
        let mut resent = 0;
        for (id, slot) in &self.index {
            let task = &mut self.tasks[*slot as usize];
            if task.phase == SlotPhase::Done {
                continue;
            }
            let agent = task.agent.0 as usize;
            for p in task.pending.as_mut_slice() {
                if !p.sent() {
                    continue;
                }
                if p.counted() {
                    if let Some(gate) = self.gates.get_mut(&p.kind) {
                        gate.in_flight -= 1;
                    }
                    self.agent_in_flight[agent] -= 1;
                }
                p.set_out(Out::Unsent);
                self.outbox.push_back(RequestKey::new(*id, p.number, *slot));
                resent += 1;
            }
        }
        resent
    }
}

/// Checks what the format cannot: that every queue holds exactly the tasks in the
/// state that puts them there, and every held request waits at its own kind's gate.
/// A snapshot that passed its checksum but says otherwise was written wrong or made by
/// hand; going on with it would break the scheduler's counts.
fn consistent(d: &SnapshotData, s: &Scheduler) -> Result<(), String> {
    let phase_of = |id: &TaskId| -> Option<SlotPhase> {
        let slot = s.index.get(id)?;
        Some(s.tasks[*slot as usize].phase)
    };
    let mut ready: Vec<TaskId> = d.ready.iter().map(|(_, id)| *id).collect();
    ready.sort_unstable();
    let ready_tasks: Vec<TaskId> = s
        .index
        .iter()
        .filter(|(_, slot)| s.tasks[**slot as usize].phase == SlotPhase::Ready)
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
        .index
        .iter()
        .filter(|(_, slot)| s.tasks[**slot as usize].phase == SlotPhase::Queued)
        .map(|(id, _)| *id)
        .collect();
    if queued != queued_tasks || (!queued.is_empty() && s.admit.is_none()) {
        return Err("the slot queue does not hold exactly the tasks waiting for a slot".to_owned());
    }
    for (id, slot) in &s.index {
        let task = &s.tasks[*slot as usize];
        if task.phase == SlotPhase::Blocked && task.family.as_ref().is_none_or(|f| f.unmet == 0) {
            return Err(format!("task {id} waits for dependencies but has none"));
        }
    }
    let waits_at = |key: &RequestKey, kind: Option<&crate::Kind>| -> bool {
        phase_of(&key.task()).is_some_and(|p| p != SlotPhase::Done)
            && s.tasks[key.slot() as usize]
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
fn queued_entries(
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

fn json_text(value: &Value) -> String {
    // A `Value` always serializes.
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

fn json_value(text: &str, task: TaskId) -> Result<Value, RestoreError> {
    serde_json::from_str(text).map_err(|e| {
        RestoreError::Invalid(format!("task {task} holds JSON that does not parse: {e}"))
    })
}

fn outcome_record(outcome: &Outcome) -> OutcomeRecord {
    match outcome {
        Ok(value) => OutcomeRecord::Ok(json_text(value)),
        Err(error) => OutcomeRecord::Err(error.clone()),
    }
}

fn outcome(record: &OutcomeRecord, task: TaskId) -> Result<Outcome, RestoreError> {
    Ok(match record {
        OutcomeRecord::Ok(text) => Ok(json_value(text, task)?),
        OutcomeRecord::Err(error) => Err(error.clone()),
    })
}

/// Rebuilds one task's slot from its record.
fn restore_task(
    record: &TaskRecord,
    registry: &TaskRegistry,
    slot_of: &impl Fn(&TaskId) -> Option<u32>,
) -> Result<TaskSlot, RestoreError> {
    let id = record.id;
    let body = match &record.body {
        BodyRecord::Live(SavedRecord::State(bytes)) => {
            match registry.decode(&record.type_name, bytes) {
                None => {
                    return Err(RestoreError::UnknownType {
                        task: id,
                        type_name: record.type_name.clone(),
                    });
                }
                Some(Err(reason)) => {
                    return Err(RestoreError::BadBody {
                        task: id,
                        type_name: record.type_name.clone(),
                        reason,
                    });
                }
                Some(Ok(body)) => Body::Live(body),
            }
        }
        BodyRecord::Live(SavedRecord::Replay(bytes)) => {
            match registry.rebuild_async(&record.type_name, id, bytes) {
                None => {
                    return Err(RestoreError::UnknownType {
                        task: id,
                        type_name: record.type_name.clone(),
                    });
                }
                Some(Err(crate::snapshot::registry::AsyncRestoreError::Nondeterminism(n))) => {
                    return Err(RestoreError::Nondeterminism(n));
                }
                Some(Err(crate::snapshot::registry::AsyncRestoreError::Bad(reason))) => {
                    return Err(RestoreError::BadBody {
                        task: id,
                        type_name: record.type_name.clone(),
                        reason,
                    });
                }
                Some(Ok(body)) => Body::Live(body),
            }
        }
        BodyRecord::Ended { state, depth } => Body::Ended(Box::new(Ended {
            state: match state {
                EndRecord::Completed(o) => TaskState::Completed(outcome(o, id)?),
                EndRecord::Canceled(reason) => TaskState::Canceled(reason.clone()),
            },
            type_name: registry
                .static_name(&record.type_name)
                .map_or_else(|| Cow::Owned(record.type_name.clone()), Cow::Borrowed),
            depth: *depth,
        })),
    };
    let live = !matches!(record.phase, PhaseRecord::Done);
    if live == matches!(body, Body::Ended(_)) {
        return Err(RestoreError::Invalid(format!(
            "task {id} is {} but its body is {}",
            if live { "live" } else { "done" },
            if live { "a result" } else { "live" }
        )));
    }
    let mut pending = PendingSet::Empty;
    let mut in_flight = 0;
    for p in &record.pending {
        let status = match &p.status {
            StatusRecord::InFlight {
                payload,
                out,
                epoch,
            } => {
                in_flight += 1;
                let out = match out {
                    0 => Out::Unsent,
                    1 => Out::Sent,
                    2 => Out::Counted(*epoch),
                    other => {
                        return Err(RestoreError::Invalid(format!(
                            "task {id}'s request {} has an unknown state {other}",
                            p.number
                        )));
                    }
                };
                Status::InFlight(Payload::from(json_value(payload, id)?), out)
            }
            StatusRecord::Answered(ResultRecord::Ok(text)) => {
                Status::Answered(Ok(json_value(text, id)?))
            }
            StatusRecord::Answered(ResultRecord::Err(error)) => {
                Status::Answered(Err(Box::new(error.clone())))
            }
        };
        pending.push(PendingRequest {
            number: p.number,
            kind: p.kind.clone(),
            tokens: p.tokens,
            status,
        });
    }
    let family = match &record.family {
        None => None,
        Some(f) => {
            let mut results = Vec::with_capacity(f.results.len());
            for (child, o) in &f.results {
                results.push((*child, outcome(o, id)?));
            }
            Some(Box::new(Family {
                parent: f.parent.and_then(|p| Some((p, slot_of(&p)?))),
                children: f.children.clone(),
                joined: f.joined.clone(),
                results,
                joined_ended: f.joined_ended,
                depth: f.depth,
                retries: f.retries,
                deadline: f.deadline,
                key: f.key.clone(),
                unmet: f.unmet,
                dependents: f
                    .dependents
                    .iter()
                    .filter_map(|d| Some((*d, slot_of(d)?)))
                    .collect(),
            }))
        }
    };
    Ok(TaskSlot {
        id,
        body,
        timer: record.timer,
        created_at: record.created_at,
        next_request: record.next_request,
        in_flight,
        agent: AgentId(record.agent),
        phase: match record.phase {
            PhaseRecord::Ready => SlotPhase::Ready,
            PhaseRecord::Waiting => SlotPhase::Waiting,
            PhaseRecord::Queued => SlotPhase::Queued,
            PhaseRecord::Blocked => SlotPhase::Blocked,
            PhaseRecord::Done => SlotPhase::Done,
        },
        wait_any: record.wait_any,
        timer_fired: record.timer_fired,
        holds_slot: record.holds_slot,
        priority: record.priority,
        pending,
        family,
    })
}
