//! Snapshots: everything a scheduler needs to go on, taken between steps, encoded in
//! postcard inside a checked envelope, and restored — as many times as wanted — into a
//! scheduler that goes on exactly as the original would have.
//!
//! The records here are the format: plain data, no JSON values (postcard cannot carry
//! serde_json's self-describing values, so they travel as JSON text), indexes renumbered
//! densely in task-id order so that a restored scheduler snapshots to the same bytes.

pub(crate) mod codec;
mod parts;
pub(crate) mod round_trip;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use codec::{DecodeError, FORMAT_VERSION, HEADER_LEN, MAGIC, MAX_PAYLOAD};
pub use parts::SnapshotParts;
pub(crate) use parts::encode_header;
pub use round_trip::RoundTripError;

use crate::admission::TaskLimits;
use crate::id::{RequestKey, TaskId};
use crate::kind::Kind;
use crate::limiter::RequestLimits;
use crate::policy::ComputedConfig;
use crate::priority::Priority;
use crate::request::{CancelSignal, RequestError};
use crate::saved::OutcomeRecord;
use crate::state::CancelReason;
use crate::stats::Stats;
use crate::time::Time;

/// A scheduler's whole state between two steps. Made by
/// [`Scheduler::snapshot`](crate::Scheduler::snapshot), turned into bytes by
/// [`encode`](Snapshot::encode) and back by [`decode`](Snapshot::decode), and made into a
/// scheduler again by [`Scheduler::restore`](crate::Scheduler::restore).
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub(crate) data: SnapshotData,
}

impl Snapshot {
    /// The snapshot as bytes: `magic | format version | length | crc32 | postcard`.
    ///
    /// # Errors
    /// [`SnapshotError::Encode`] if serde cannot encode a part (which would be a bug).
    pub fn encode(&self) -> Result<Vec<u8>, SnapshotError> {
        codec::encode_snapshot(&self.data, !self.data.addenda.v6.is_empty())
            .map_err(SnapshotError::Encode)
    }

    /// Reads a snapshot from bytes, checking everything: truncated, corrupt, oversized,
    /// newer or malformed input is a typed error, never a panic.
    ///
    /// # Errors
    /// A [`DecodeError`] saying what was wrong.
    pub fn decode(bytes: &[u8]) -> Result<Snapshot, DecodeError> {
        let data: SnapshotData = codec::decode_versioned(bytes, &MAGIC, &v2_tail())?;
        data.check().map_err(DecodeError::Invalid)?;
        Ok(Snapshot { data })
    }

    /// The same snapshot under other limits, for a driver that starts again with new
    /// ones; `None` while a task is live (queued tasks, held requests and the counts of
    /// requests in flight were made under the old ones). Windows' histories and
    /// back-offs carry over to the kinds the new limits still gate.
    ///
    /// Restored, the scheduler runs under the new limits; a journal must start from it
    /// (not go on from one written under the old), or its replay would differ.
    pub fn with_limits(&self, tasks: TaskLimits, requests: RequestLimits) -> Option<Snapshot> {
        let live = |t: &TaskRecord| {
            !matches!(
                (&t.phase, &t.body),
                (PhaseRecord::Done, BodyRecord::Ended { .. })
            )
        };
        if self.data.tasks.iter().any(live) {
            return None;
        }
        let mut data = self.data.clone();
        data.gating = data.gating || requests.gates_requests();
        let agent_limits = &mut data.addenda.v6.agent_limits;
        agent_limits.common = requests.agent_kinds.clone();
        agent_limits.own = requests.agent_kinds_for.clone();
        data.config.limits = tasks;
        data.config.requests = requests;
        Some(Snapshot { data })
    }

    /// The scheduler's time when it was taken.
    pub fn now(&self) -> Time {
        self.data.now
    }

    /// The id the next task submitted after this snapshot gets: every task with a
    /// smaller id was submitted before it.
    pub fn next_task_id(&self) -> TaskId {
        TaskId(self.data.next_task)
    }

    /// The counters when it was taken.
    pub fn stats(&self) -> &Stats {
        &self.data.stats
    }

    /// One row per task in the snapshot, by id: what `spool inspect` prints. Needs no
    /// registry: the bodies are not rebuilt.
    pub fn rows(&self) -> Vec<SnapshotRow> {
        self.data
            .tasks
            .iter()
            .map(|t| SnapshotRow {
                id: t.id,
                agent: self
                    .data
                    .agents
                    .get(t.agent as usize)
                    .map_or_else(|| "?".to_owned(), |(name, _)| name.clone()),
                type_name: t.type_name.clone(),
                priority: t.priority,
                state: t.describe(),
                created_at: t.created_at,
                age: self.data.now - t.created_at,
            })
            .collect()
    }
}

/// What a version 2 payload lacks at its end: an empty schedule table, encoded.
pub(crate) fn v2_tail() -> Vec<u8> {
    postcard::to_allocvec(&crate::schedule::SchedulesRecord::default()).unwrap_or_default()
}

/// One task of a snapshot, as [`Snapshot::rows`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SnapshotRow {
    /// The task.
    pub id: TaskId,
    /// Its agent's name.
    pub agent: String,
    /// Its type.
    pub type_name: String,
    /// Its level.
    pub priority: Priority,
    /// Its state, and what it waits on: `Ready`, `Waiting(llm)`, `Completed(ok)`...
    pub state: String,
    /// When it was submitted.
    pub created_at: Time,
    /// How long before the snapshot it was submitted.
    pub age: Duration,
}

/// Why a scheduler could not be snapshotted. Nothing is changed when it fails.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// A live task's body cannot be saved.
    #[error("task {task} (type `{type_name}`) cannot be saved: {reason}")]
    Unsaveable {
        /// The task.
        task: TaskId,
        /// Its type.
        type_name: String,
        /// What its `save` said.
        reason: String,
    },
    /// The run-queue policy cannot list its queue.
    #[error(
        "the run-queue policy `{0}` cannot list its queue (Policy::queued), so it cannot be snapshotted"
    )]
    Policy(String),
    /// Encoding failed.
    #[error("the snapshot could not be encoded: {0}")]
    Encode(String),
    /// A live task's state does not round-trip: a driver that checks before it
    /// snapshots (`RuntimeBuilder::check_round_trip`) takes no snapshot then.
    #[error(transparent)]
    RoundTrip(#[from] RoundTripError),
}

/// Why a snapshot could not be restored.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RestoreError {
    /// A live task's type is not in the registry.
    #[error("task {task} has type `{type_name}`, which the registry does not know")]
    UnknownType {
        /// The task.
        task: TaskId,
        /// Its type.
        type_name: String,
    },
    /// A task's saved state could not be decoded by its type's decoder.
    #[error("task {task} (type `{type_name}`) could not be rebuilt: {reason}")]
    BadBody {
        /// The task.
        task: TaskId,
        /// Its type.
        type_name: String,
        /// The decoder's message.
        reason: String,
    },
    /// A rebuilt async task asked for something other than what its journal recorded.
    #[error(transparent)]
    Nondeterminism(#[from] crate::async_task::Nondeterminism),
    /// The snapshot uses a custom policy the registry does not know.
    #[error("the snapshot uses the policy `{0}`, which the registry does not know")]
    UnknownPolicy(String),
    /// The snapshot does not hang together.
    #[error("the snapshot is inconsistent: {0}")]
    Invalid(String),
}

// ---------------------------------------------------------------------------------
// The format.
// ---------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct SnapshotData {
    pub(crate) config: ConfigRecord,
    pub(crate) now: Time,
    pub(crate) next_task: u64,
    pub(crate) next_seq: u64,
    pub(crate) ready_seq: u64,
    /// The run queue: `(seq, task)`, in sequence order.
    pub(crate) ready: Vec<(u64, TaskId)>,
    /// Agents by id: name and fair-share weight.
    pub(crate) agents: Vec<(String, u32)>,
    /// Every task in the table, by id; task `i` of this list lives at index `i`.
    pub(crate) tasks: Vec<TaskRecord>,
    pub(crate) outbox: Vec<RequestKey>,
    pub(crate) direct: Vec<RequestKey>,
    pub(crate) cancels: Vec<CancelSignal>,
    pub(crate) timers: Vec<(Time, u64, TaskId)>,
    pub(crate) deadlines: Vec<(Time, u64, TaskId)>,
    pub(crate) expiry: Vec<(Time, TaskId)>,
    pub(crate) trace: TraceRecord,
    pub(crate) stats: Stats,
    pub(crate) slot_queue: Option<SlotQueueRecord>,
    pub(crate) gates: Vec<GateRecord>,
    pub(crate) parked_requests: Vec<(u32, Vec<HeldRecord>)>,
    pub(crate) hold_seq: u64,
    /// Requests sent again after 429s: how many times, and how long they waited.
    pub(crate) retries: Vec<(RequestKey, u32, Duration)>,
    pub(crate) gating: bool,
    /// Keys of ended tasks still in the idempotency window: `(key, task, ended at)`,
    /// by key (live tasks' keys are in their records).
    pub(crate) ended_keys: Vec<(String, TaskId, Time)>,
    /// The schedule table and the sessions (format version 3; last, so that a version
    /// 2 payload reads with an empty one appended).
    pub(crate) schedules: crate::schedule::SchedulesRecord,
    /// What format version 4 added (last, so that a version 3 payload reads with the
    /// default appended).
    pub(crate) addenda: codec::Addenda,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ConfigRecord {
    pub(crate) policy: PolicyRecord,
    pub(crate) limits: TaskLimits,
    pub(crate) requests: RequestLimits,
    pub(crate) retention: Option<Duration>,
    pub(crate) idempotency_window: Option<Duration>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum PolicyRecord {
    Fifo,
    Priority,
    Computed(ComputedConfig),
    FairShare,
    Custom(String),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TraceRecord {
    pub(crate) record: bool,
    pub(crate) next_seq: u64,
    pub(crate) hash: u64,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum PhaseRecord {
    Ready,
    Waiting,
    Queued,
    Blocked,
    Done,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct TaskRecord {
    pub(crate) id: TaskId,
    pub(crate) type_name: String,
    pub(crate) agent: u32,
    pub(crate) priority: Priority,
    pub(crate) created_at: Time,
    pub(crate) phase: PhaseRecord,
    pub(crate) wait_any: bool,
    pub(crate) timer_fired: bool,
    pub(crate) holds_slot: bool,
    pub(crate) timer: Time,
    pub(crate) next_request: u32,
    pub(crate) pending: Vec<PendingRecord>,
    pub(crate) family: Option<FamilyRecord>,
    pub(crate) body: BodyRecord,
}

impl TaskRecord {
    /// The state in words, as `TaskState` shows it (without rebuilding the body).
    fn describe(&self) -> String {
        let in_flight: Vec<&PendingRecord> = self
            .pending
            .iter()
            .filter(|p| matches!(p.status, StatusRecord::InFlight { .. }))
            .collect();
        match (&self.phase, &self.body) {
            (PhaseRecord::Ready, _) => "Ready".to_owned(),
            (PhaseRecord::Queued, _) => "Waiting(slot)".to_owned(),
            (PhaseRecord::Blocked, _) => {
                let n = self.family.as_ref().map_or(0, |f| f.unmet);
                format!("Waiting({})", crate::state::WaitReason::Dependencies(n))
            }
            (PhaseRecord::Waiting, _) => match in_flight.as_slice() {
                [] if self.family.as_ref().is_some_and(|f| !f.joined.is_empty()) => {
                    let n = self.family.as_ref().map_or(0, |f| f.joined.len() as u32);
                    format!("Waiting({})", crate::state::WaitReason::Children(n))
                }
                [] => "Waiting(timer)".to_owned(),
                [one] => format!("Waiting({})", one.kind),
                many => format!("Waiting({} requests)", many.len()),
            },
            (PhaseRecord::Done, BodyRecord::Ended { state, .. }) => match state {
                EndRecord::Completed(OutcomeRecord::Ok(_)) => "Completed(ok)".to_owned(),
                EndRecord::Completed(OutcomeRecord::Err(e)) => format!("Completed(error: {e})"),
                EndRecord::Canceled(reason) => format!("Canceled({reason})"),
            },
            (PhaseRecord::Done, BodyRecord::Live(_)) => "Done".to_owned(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum BodyRecord {
    /// A live task's saved body.
    Live(SavedRecord),
    /// An ended task's result.
    Ended { state: EndRecord, depth: u32 },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum SavedRecord {
    State(Vec<u8>),
    Replay(Vec<u8>),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum EndRecord {
    Completed(OutcomeRecord),
    Canceled(CancelReason),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct PendingRecord {
    pub(crate) number: u32,
    pub(crate) kind: Kind,
    pub(crate) tokens: u32,
    pub(crate) status: StatusRecord,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum StatusRecord {
    /// `out`: 0 with the scheduler, 1 sent, 2 sent and counted at its gate, in its
    /// gate's back-off `epoch`.
    InFlight {
        payload: String,
        out: u8,
        epoch: u32,
    },
    Answered(ResultRecord),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum ResultRecord {
    Ok(String),
    Err(RequestError),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct FamilyRecord {
    pub(crate) parent: Option<TaskId>,
    pub(crate) children: Vec<TaskId>,
    pub(crate) joined: Vec<TaskId>,
    pub(crate) results: Vec<(TaskId, OutcomeRecord)>,
    pub(crate) joined_ended: Option<TaskId>,
    pub(crate) depth: u32,
    pub(crate) retries: u32,
    pub(crate) deadline: Option<Time>,
    pub(crate) key: Option<String>,
    pub(crate) unmet: u32,
    pub(crate) dependents: Vec<TaskId>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct SlotQueueRecord {
    pub(crate) seq: u64,
    /// The queue of tasks waiting for a slot: `(seq, task)`, in sequence order.
    pub(crate) queue: Vec<(u64, TaskId)>,
    pub(crate) seqs: Vec<(TaskId, u64)>,
    pub(crate) parked: Vec<(CapRecord, Vec<(u64, TaskId)>)>,
    pub(crate) window: Vec<Time>,
    pub(crate) started: Vec<(TaskId, Time)>,
    pub(crate) slot_time_total: Duration,
    pub(crate) slots_ended: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) enum CapRecord {
    Agent(u32),
    Type(String),
}

/// A held request: its task's priority, the order it was held in, its key.
pub(crate) type HeldRecord = (Priority, u64, RequestKey);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct GateRecord {
    pub(crate) kind: Kind,
    pub(crate) window: Vec<Time>,
    pub(crate) tokens: Vec<(Time, RequestKey, u32)>,
    pub(crate) backoff_until: Time,
    pub(crate) hits: u32,
    /// Back-offs begun, ever (see `Backoff::epoch`).
    pub(crate) epoch: u32,
    /// Held requests, best first.
    pub(crate) held: Vec<HeldRecord>,
}

impl SnapshotData {
    /// The requests waiting to be sent, as `(task, request number)`: held at a gate,
    /// parked by their task, or waiting in an agent's share.
    pub(crate) fn waiting_requests(&self) -> std::collections::BTreeSet<(TaskId, u32)> {
        self.gates
            .iter()
            .flat_map(|gate| &gate.held)
            .chain(self.parked_requests.iter().flat_map(|(_, held)| held))
            .chain(
                self.addenda
                    .v6
                    .agent_limits
                    .shares
                    .iter()
                    .flat_map(|s| &s.parked),
            )
            .map(|(_, _, key)| (key.task(), key.number()))
            .collect()
    }

    /// Checks that the references inside hang together, so that a restore can index
    /// with them: every task id named is in the table, ids are unique and ordered.
    /// The first part that does not hang together, in this order, is the error.
    pub(crate) fn check(&self) -> Result<(), String> {
        let ids: Vec<TaskId> = self.tasks.iter().map(|t| t.id).collect();
        self.check_ids(&ids)?;
        self.check_queues(&ids)?;
        self.check_tasks(&ids)?;
        self.check_held(&ids)?;
        if self.agents.is_empty() {
            return Err("no agents (the default agent is always there)".to_owned());
        }
        Ok(())
    }

    /// The table's `ids` are unique, in order, and all before the next id.
    fn check_ids(&self, ids: &[TaskId]) -> Result<(), String> {
        if ids.windows(2).any(|w| w[0] >= w[1]) {
            return Err("task ids are not unique and in order".to_owned());
        }
        if let Some(last) = ids.last()
            && last.0 >= self.next_task
        {
            return Err(format!(
                "task {last} is at or past the next id {}",
                self.next_task
            ));
        }
        Ok(())
    }

    /// The run queue, the outbox (requests and cancels) and the timers (deadlines
    /// included) name only tasks in the table.
    fn check_queues(&self, ids: &[TaskId]) -> Result<(), String> {
        if !self.ready.iter().all(|(_, id)| known(ids, id)) {
            return names_unknown("the run queue");
        }
        if !self
            .outbox
            .iter()
            .chain(&self.direct)
            .all(|k| key_ok(ids, k))
            || !self.cancels.iter().all(|c| known(ids, &c.key.task()))
        {
            return names_unknown("the outbox");
        }
        if !self
            .timers
            .iter()
            .chain(&self.deadlines)
            .all(|(_, _, id)| known(ids, id))
        {
            return names_unknown("a timer");
        }
        Ok(())
    }

    /// Task by task: its agent is known, and its family names no task never made (an
    /// ended task forgotten since may be named).
    fn check_tasks(&self, ids: &[TaskId]) -> Result<(), String> {
        for task in &self.tasks {
            if task.agent as usize >= self.agents.len() {
                return Err(format!("task {} has an unknown agent", task.id));
            }
            if let Some(family) = &task.family {
                let named = family
                    .parent
                    .iter()
                    .chain(&family.children)
                    .chain(&family.joined)
                    .chain(&family.dependents);
                for id in named {
                    if !known(ids, id) && id.0 >= self.next_task {
                        return Err(format!("task {} names task {id}, never made", task.id));
                    }
                }
            }
        }
        Ok(())
    }

    /// What waits held back — the slot queue, the gates' held requests, the requests
    /// parked by an agent's cap — names only tasks in the table, and known agents.
    fn check_held(&self, ids: &[TaskId]) -> Result<(), String> {
        if let Some(slot_queue) = &self.slot_queue {
            let queued = slot_queue
                .queue
                .iter()
                .chain(slot_queue.parked.iter().flat_map(|(_, q)| q.iter()));
            if !queued.map(|(_, id)| id).all(|id| known(ids, id)) {
                return names_unknown("the slot queue");
            }
        }
        for gate in &self.gates {
            if !gate.held.iter().all(|(_, _, key)| key_ok(ids, key)) {
                return names_unknown("a gate");
            }
        }
        for (agent, held) in &self.parked_requests {
            if *agent as usize >= self.agents.len() || !held.iter().all(|(_, _, k)| key_ok(ids, k))
            {
                return names_unknown("a parked request");
            }
        }
        for share in &self.addenda.v6.agent_limits.shares {
            if share.agent as usize >= self.agents.len()
                || !share.parked.iter().all(|(_, _, k)| key_ok(ids, k))
            {
                return names_unknown("an agent's share of a kind");
            }
        }
        Ok(())
    }
}

/// Whether `id` is in the table, whose ids are `ids` (in order).
fn known(ids: &[TaskId], id: &TaskId) -> bool {
    ids.binary_search(id).is_ok()
}

/// Whether `key`'s task is in the table at the index the key says.
fn key_ok(ids: &[TaskId], key: &RequestKey) -> bool {
    ids.binary_search(&key.task())
        .is_ok_and(|index| index as u32 == key.index())
}

/// The error of a part, `what`, naming a task or index not in the table.
fn names_unknown(what: &str) -> Result<(), String> {
    Err(format!("{what} names a task or index not in the table"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::saved::{SavedTask, StateError};
    use crate::scheduler::{Config, Scheduler};
    use crate::task::{AgentTask, NewTask, Step, TaskContext};

    /// Yields forever: a task that stays in the table.
    #[derive(Debug, Serialize, Deserialize)]
    struct Idle;

    impl AgentTask for Idle {
        fn poll(&mut self, _cx: &mut TaskContext<'_>) -> Step {
            Step::Yield
        }
        fn type_name(&self) -> &'static str {
            "idle"
        }
        fn save(&self) -> Result<SavedTask, StateError> {
            SavedTask::serde(self)
        }
    }

    /// The data of a scheduler holding two live tasks, 1 and 2.
    fn two_tasks() -> SnapshotData {
        let mut scheduler = Scheduler::new(Config::new());
        for _ in 0..2 {
            scheduler.submit(Time::ZERO, NewTask::new(Idle)).unwrap();
        }
        let data = scheduler.snapshot().unwrap().data;
        assert_eq!(data.check(), Ok(()));
        data
    }

    /// A change that breaks one part of the data, and the error `check` then gives.
    type Break = (Box<dyn Fn(&mut SnapshotData)>, &'static str);

    /// A key naming task 99, which no table holds.
    fn stray_key() -> RequestKey {
        RequestKey::new(TaskId(99), 1, 0)
    }

    /// Each step breaks one more part, each before the parts broken so far in the
    /// order `check` reads them: the error is always the part broken last, so the
    /// first part that fails decides the error.
    #[test]
    fn check_names_the_first_part_that_does_not_hang_together() {
        let mut data = two_tasks();
        let stray = TaskId(99);
        let breaks: Vec<Break> = vec![
            (
                Box::new(|d| d.parked_requests.push((7, Vec::new()))),
                "a parked request names a task or index not in the table",
            ),
            (
                Box::new(|d| {
                    d.gates.push(GateRecord {
                        kind: Kind::Llm,
                        window: Vec::new(),
                        tokens: Vec::new(),
                        backoff_until: Time::ZERO,
                        hits: 0,
                        epoch: 0,
                        held: vec![(Priority::Normal, 0, stray_key())],
                    });
                }),
                "a gate names a task or index not in the table",
            ),
            (
                Box::new(move |d| {
                    d.slot_queue = Some(SlotQueueRecord {
                        seq: 1,
                        queue: vec![(0, stray)],
                        seqs: Vec::new(),
                        parked: Vec::new(),
                        window: Vec::new(),
                        started: Vec::new(),
                        slot_time_total: Duration::ZERO,
                        slots_ended: 0,
                    });
                }),
                "the slot queue names a task or index not in the table",
            ),
            (
                Box::new(|d| d.tasks[1].agent = 5),
                "task 2 has an unknown agent",
            ),
            (
                Box::new(move |d| {
                    d.tasks[0].family = Some(FamilyRecord {
                        parent: None,
                        children: vec![stray],
                        joined: Vec::new(),
                        results: Vec::new(),
                        joined_ended: None,
                        depth: 0,
                        retries: 0,
                        deadline: None,
                        key: None,
                        unmet: 0,
                        dependents: Vec::new(),
                    });
                }),
                "task 1 names task 99, never made",
            ),
            (
                Box::new(move |d| d.deadlines.push((Time::ZERO, 0, stray))),
                "a timer names a task or index not in the table",
            ),
            (
                Box::new(|d| d.direct.push(stray_key())),
                "the outbox names a task or index not in the table",
            ),
            (
                Box::new(move |d| d.ready.push((0, stray))),
                "the run queue names a task or index not in the table",
            ),
            (
                Box::new(|d| d.next_task = 2),
                "task 2 is at or past the next id 2",
            ),
            (
                Box::new(|d| d.tasks.swap(0, 1)),
                "task ids are not unique and in order",
            ),
        ];
        for (step, (break_part, expected)) in breaks.iter().enumerate() {
            break_part(&mut data);
            assert_eq!(data.check(), Err((*expected).to_owned()), "step {step}");
        }
    }

    /// A table with no agents at all is refused, even with no task to name one.
    #[test]
    fn check_refuses_a_table_without_agents() {
        let mut data = Scheduler::new(Config::new()).snapshot().unwrap().data;
        data.agents.clear();
        assert_eq!(
            data.check(),
            Err("no agents (the default agent is always there)".to_owned())
        );
    }
}
