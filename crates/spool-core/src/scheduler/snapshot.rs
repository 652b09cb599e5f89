//! Taking a scheduler apart into a [`Snapshot`] and putting one together again.
//!
//! Counters that follow from the tasks (how many are live, queued, in flight, running
//! per agent and type, counted at each gate) are not stored: a restore recomputes them,
//! so a snapshot cannot carry counts that disagree with its tasks.

mod restore;

pub(super) use restore::consistent;

use super::timers::TimerKind;
use super::{Scheduler, TaskEntry, TaskPhase};
use crate::id::{RequestKey, TaskId};
use crate::pending::Out;
use crate::policy::PolicyChoice;
use crate::snapshot::{
    ConfigRecord, PolicyRecord, Snapshot, SnapshotData, SnapshotError, SnapshotParts, TraceRecord,
};

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
        data.tasks = Vec::with_capacity(self.tasks.by_id.len());
        for index in self.tasks.by_id.values() {
            data.tasks
                .push(self.tasks.record(&self.tasks.entries()[*index as usize])?);
        }
        // A restored scheduler puts task `i` at index `i`, and snapshots to the same bytes.
        data.resolve_indexes();
        Ok(Snapshot { data })
    }

    /// The snapshot's data with live bodies left unsaved (see
    /// [`TaskTable::record_unsaved`](super::TaskTable)): what the invariants check
    /// against the same rules a restore checks, for any task, saveable or not.
    ///
    /// # Errors
    /// [`SnapshotError::Policy`] for a custom policy that cannot list its queue.
    pub(super) fn unsaved_data(&self) -> Result<SnapshotData, SnapshotError> {
        let mut data = self.header()?;
        data.tasks = self
            .tasks
            .by_id
            .values()
            .map(|index| {
                self.tasks
                    .record_unsaved(&self.tasks.entries()[*index as usize])
            })
            .collect();
        data.resolve_indexes();
        Ok(data)
    }

    /// Every live task's id and body, by id: what the round-trip check saves and
    /// restores ([`Scheduler::check_round_trip`]).
    pub(crate) fn live_bodies(
        &self,
    ) -> impl Iterator<Item = (TaskId, &dyn crate::task::AgentTask)> {
        self.tasks
            .by_id
            .keys()
            .filter_map(|id| self.live_body(*id).map(|body| (*id, body)))
    }

    /// The body of the task `id`, if it is live.
    pub(crate) fn live_body(&self, id: TaskId) -> Option<&dyn crate::task::AgentTask> {
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
        let row = |task: &TaskEntry| -> Result<(TaskId, Vec<u8>), SnapshotError> {
            let record = self.tasks.record(task)?;
            let bytes = record.to_row().map_err(SnapshotError::Encode)?;
            Ok((task.id, bytes))
        };
        let (mut rows, removed, full) = match self.tasks.changes() {
            Some(changes) => {
                let mut rows = Vec::with_capacity(changes.indexes.len());
                for index in &changes.indexes {
                    if let Some(task) = self.tasks.entries().get(*index as usize) {
                        rows.push(row(task)?);
                    }
                }
                let mut removed = changes.removed.clone();
                removed.sort_unstable();
                removed.dedup();
                (rows, removed, false)
            }
            None => {
                let mut rows = Vec::with_capacity(self.tasks.by_id.len());
                for index in self.tasks.by_id.values() {
                    rows.push(row(&self.tasks.entries()[*index as usize])?);
                }
                (rows, Vec::new(), true)
            }
        };
        rows.sort_unstable_by_key(|(id, _)| *id);
        // A task removed and a new one in its index: the row is the new task's; an id
        // removed is never given again, so no row names a removed task.
        header.tasks.clear();
        let header = crate::snapshot::encode_header(header, self.tasks.by_id.len())?;
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
    /// keys naming no index (`u32::MAX`; [`SnapshotData::resolve_indexes`] gives them the
    /// indexes a restore puts their tasks in).
    fn header(&self) -> Result<SnapshotData, SnapshotError> {
        let key = |k: &RequestKey| -> Option<RequestKey> {
            let task = self.tasks.entries().get(k.index() as usize)?;
            (task.id == k.task()).then_some(())?;
            Some(RequestKey::new(k.task(), k.number(), u32::MAX))
        };
        let ready = self.ready_ranks()?;
        let slot_queue = match &self.slots.queue {
            None => None,
            Some(queue) => Some(queue.record(&self.tasks)?),
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
            agents: self.agent_records(),
            tasks: Vec::new(),
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
            slot_queue,
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
                forks: self.fork_records(),
                patches: self.patch_records(),
                v6: crate::snapshot::codec::Since6 {
                    budgets: self.budget_record(),
                    agent_limits: self.requests.quota_records(&key),
                },
            },
        };
        Ok(data)
    }

    /// The run queue's tasks still ready, each with its rank in the queue: sequence
    /// numbers are kept as ranks, since only their order matters, and a queue with
    /// skipped entries in it snapshots like the same queue without them.
    ///
    /// # Errors
    /// [`SnapshotError::Policy`] for a policy that cannot list its queue.
    fn ready_ranks(&self) -> Result<Vec<(u64, TaskId)>, SnapshotError> {
        let live_in = |index: u32, id: TaskId, phase: TaskPhase| {
            self.tasks
                .entries()
                .get(index as usize)
                .is_some_and(|t| t.id == id && t.phase == phase)
        };
        let mut ready = queued_entries(&self.ready.policy, &live_in, TaskPhase::Ready)?;
        ready.sort_unstable();
        Ok(ready
            .into_iter()
            .zip(0u64..)
            .map(|((_, id), rank)| (rank, id))
            .collect())
    }

    /// Every agent's name and fair-share weight, by id.
    fn agent_records(&self) -> Vec<(String, u32)> {
        self.tasks
            .agents()
            .enumerate()
            .map(|(i, name)| {
                let weight = self.ready.weights.get(i).copied().unwrap_or(1);
                (name.to_string(), weight)
            })
            .collect()
    }

    /// The configuration as recorded: a custom policy by its name.
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

    /// Puts every request the driver had taken back in the queue of requests to send
    /// (after those not taken yet; by task id, then request number), to go again with
    /// the same key (through its gate, if its kind has one): what a new process does
    /// after a restore, since its executors never got them. Returns how many. An executor that cannot de-duplicate by key makes them at least once.
    pub fn resend_in_flight(&mut self) -> usize {
        self.journal_resend();
        let mut resent = 0;
        let live: Vec<(TaskId, u32)> = self.tasks.by_id.iter().map(|(i, s)| (*i, *s)).collect();
        for (id, index) in &live {
            let task = self.tasks.entry_mut(*index);
            if task.phase == TaskPhase::Done {
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
                    .push_back(RequestKey::new(*id, p.number, *index));
                resent += 1;
            }
        }
        // Checked against the budgets when they were made: they go again as they went.
        // Only budgets check them (at this end of input); without budgets the flag
        // would outlive this input and spare the next one's new requests the check.
        self.budgets.resending = self.budgets.on();
        self.end_input();
        resent
    }
}

/// The queued entries of `policy` whose tasks are still in `phase`.
pub(super) fn queued_entries(
    policy: &crate::policy::PolicyQueue,
    live_in: &impl Fn(u32, TaskId, TaskPhase) -> bool,
    phase: TaskPhase,
) -> Result<Vec<(u64, TaskId)>, SnapshotError> {
    let entries = policy
        .queued()
        .ok_or_else(|| SnapshotError::Policy(policy.name().to_owned()))?;
    Ok(entries
        .into_iter()
        .filter(|(_, t)| live_in(t.index, t.task, phase))
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
        AgentTask, Config, Kind, NewTask, Request, RequestError, RequestLimits, Response,
        SavedTask, StateError, Step, TaskContext, TaskRegistry, Time,
    };

    /// Asks one LLM question, then finishes (the restore tests use it too).
    #[derive(Debug, Serialize, Deserialize)]
    pub(super) struct Ask {
        pub(super) asked: bool,
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
