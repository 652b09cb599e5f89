//! A task of the table as a snapshot record, and back: what a checkpoint writes of each
//! task, and the entry a restore rebuilds from it. Values travel as JSON text (see
//! [`crate::snapshot`]); a record that names other tasks is given their indexes.

use std::borrow::Cow;

use serde_json::Value;

use super::{Body, Ended, TaskEntry, TaskPhase, TaskTable};
use crate::async_task::RemakeError;
use crate::id::{AgentId, TaskId};
use crate::payload::Payload;
use crate::pending::{Out, PendingRequest, PendingSet, Status};
use crate::registry::TaskRegistry;
use crate::saved::{OutcomeRecord, SavedTask};
use crate::snapshot::{
    BodyRecord, EndRecord, FamilyRecord, PendingRecord, PhaseRecord, RestoreError, ResultRecord,
    SavedRecord, SnapshotError, StatusRecord, TaskRecord,
};
use crate::state::{CancelReason, Outcome, TaskState};
use crate::task::{AgentTask, Family};

impl TaskTable {
    /// `task`, a task of this table, as a snapshot record.
    ///
    /// # Errors
    /// [`SnapshotError::Unsaveable`] if the task is live and its body refuses to save.
    pub(in crate::scheduler) fn record(
        &self,
        task: &TaskEntry,
    ) -> Result<TaskRecord, SnapshotError> {
        Ok(record_with(task, body_record(task)?))
    }

    /// `task` as a snapshot record whose live body is left unsaved (an empty state):
    /// what the invariants check, which reads everything but the bodies.
    pub(in crate::scheduler) fn record_unsaved(&self, task: &TaskEntry) -> TaskRecord {
        // An ended task's record is its result, which always saves.
        let unsaved = || BodyRecord::Live(SavedRecord::State(Vec::new()));
        let body = match &task.body {
            Body::Live(_) => unsaved(),
            Body::Ended(_) => body_record(task).unwrap_or_else(|_| unsaved()),
        };
        record_with(task, body)
    }
}

/// `task` as a snapshot record with `body` for its body.
fn record_with(task: &TaskEntry, body: BodyRecord) -> TaskRecord {
    TaskRecord {
        id: task.id,
        type_name: task.type_name().to_owned(),
        agent: task.agent.0,
        priority: task.priority,
        created_at: task.created_at,
        phase: phase_record(task.phase),
        wait_any: task.wait_any,
        timer_fired: task.timer_fired,
        holds_slot: task.holds_slot,
        timer: task.timer,
        next_request: task.next_request,
        pending: task.pending.as_slice().iter().map(pending_record).collect(),
        family: task.family.as_deref().map(family_record),
        body,
    }
}

impl TaskEntry {
    /// Rebuilds a task's entry from its record; `index_of` finds the indexes of the tasks
    /// it names.
    ///
    /// # Errors
    /// The first of, in this order: the body's ([`restore_body`]); a record whose phase
    /// and body disagree (live and a result, or done and live); a request's
    /// ([`restore_status`]), in request order; a child's result that does not parse.
    pub(in crate::scheduler) fn restore(
        record: &TaskRecord,
        registry: &TaskRegistry,
        index_of: &impl Fn(&TaskId) -> Option<u32>,
    ) -> Result<TaskEntry, RestoreError> {
        let id = record.id;
        let body = restore_body(record, registry)?;
        let live = !matches!(record.phase, PhaseRecord::Done);
        if live == matches!(body, Body::Ended(_)) {
            return Err(RestoreError::Invalid(format!(
                "task {id} is {} but its body is {}",
                if live { "live" } else { "done" },
                if live { "a result" } else { "live" }
            )));
        }
        let (pending, in_flight) = restore_pending(&record.pending, id)?;
        let family = match &record.family {
            None => None,
            Some(family) => Some(restore_family(family, id, index_of)?),
        };
        Ok(TaskEntry {
            id,
            body,
            timer: record.timer,
            created_at: record.created_at,
            next_request: record.next_request,
            in_flight,
            agent: AgentId(record.agent),
            phase: task_phase(record.phase),
            wait_any: record.wait_any,
            timer_fired: record.timer_fired,
            holds_slot: record.holds_slot,
            priority: record.priority,
            pending,
            family,
        })
    }
}

/// A task's body as its record: a live body saved (its state, or its replay log), an
/// ended one's final state and depth.
fn body_record(task: &TaskEntry) -> Result<BodyRecord, SnapshotError> {
    Ok(match &task.body {
        Body::Live(body) => match body.save() {
            Ok(SavedTask::State(bytes)) => BodyRecord::Live(SavedRecord::State(bytes)),
            Ok(SavedTask::Replay(bytes)) => BodyRecord::Live(SavedRecord::Replay(bytes)),
            Err(reason) => {
                return Err(SnapshotError::Unsaveable {
                    task: task.id,
                    type_name: task.type_name().to_owned(),
                    reason: reason.to_string(),
                });
            }
        },
        Body::Ended(ended) => BodyRecord::Ended {
            state: match &ended.state {
                TaskState::Canceled(reason) => EndRecord::Canceled(reason.clone()),
                TaskState::Completed(outcome) => EndRecord::Completed(outcome_record(outcome)),
                // An ended body always holds a terminal state.
                _ => EndRecord::Canceled(CancelReason::Shutdown),
            },
            depth: ended.depth,
        },
    })
}

/// An entry's phase as recorded: running is recorded as ready (a snapshot is taken
/// between steps, when nothing runs).
fn phase_record(phase: TaskPhase) -> PhaseRecord {
    match phase {
        TaskPhase::Ready | TaskPhase::Running => PhaseRecord::Ready,
        TaskPhase::Waiting => PhaseRecord::Waiting,
        TaskPhase::Queued => PhaseRecord::Queued,
        TaskPhase::Blocked => PhaseRecord::Blocked,
        TaskPhase::Done => PhaseRecord::Done,
    }
}

/// An entry's phase for a recorded one.
fn task_phase(phase: PhaseRecord) -> TaskPhase {
    match phase {
        PhaseRecord::Ready => TaskPhase::Ready,
        PhaseRecord::Waiting => TaskPhase::Waiting,
        PhaseRecord::Queued => TaskPhase::Queued,
        PhaseRecord::Blocked => TaskPhase::Blocked,
        PhaseRecord::Done => TaskPhase::Done,
    }
}

/// A request of a task as its record: in flight with its payload and how far out it
/// is (0 with the scheduler, 1 sent, 2 sent and counted at its gate), or its answer.
fn pending_record(p: &PendingRequest) -> PendingRecord {
    PendingRecord {
        number: p.number,
        kind: p.kind.clone(),
        tokens: p.tokens,
        status: match &p.status {
            Status::InFlight(payload, out) => StatusRecord::InFlight {
                payload: json_text(payload.value()),
                out: match out {
                    Out::Unsent => 0,
                    Out::Sent | Out::Taken => 1,
                    Out::Counted(_) | Out::CountedTaken(_) => 2,
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
    }
}

/// A task's family (parent, children, joins, dependents, key...) as its record: tasks
/// by id only.
fn family_record(f: &Family) -> FamilyRecord {
    FamilyRecord {
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
        // Every dependent, in the table or not: a task's record is its own data, so
        // removing another task never changes it (a checkpoint in parts writes only
        // the tasks that changed).
        dependents: f.dependents.iter().map(|(id, _)| *id).collect(),
    }
}

/// A task's body from its record: a live one rebuilt through `registry`, an ended one's
/// result.
///
/// # Errors
/// [`RestoreError::UnknownType`] for a live body of a type the registry does not know,
/// [`RestoreError::BadBody`] or [`RestoreError::Nondeterminism`] for one it cannot
/// rebuild, [`RestoreError::Invalid`] for an ended one's value that does not parse.
fn restore_body(record: &TaskRecord, registry: &TaskRegistry) -> Result<Body, RestoreError> {
    let id = record.id;
    Ok(match &record.body {
        BodyRecord::Live(saved) => Body::Live(live_body(record, saved, registry)?),
        BodyRecord::Ended { state, depth } => Body::Ended(Box::new(Ended {
            state: match state {
                EndRecord::Completed(o) => TaskState::Completed(outcome(o, id)?),
                EndRecord::Canceled(reason) => TaskState::Canceled(reason.clone()),
            },
            type_name: registry
                .static_name(&record.type_name)
                .map_or_else(|| Cow::Owned(record.type_name.clone()), Cow::Borrowed),
            depth: *depth,
            // Set from the snapshot's fork records after.
            fork: None,
        })),
    })
}

/// A live task's body, rebuilt by its type's decoder (a saved state) or maker (an async
/// task's replay log).
fn live_body(
    record: &TaskRecord,
    saved: &SavedRecord,
    registry: &TaskRegistry,
) -> Result<Box<dyn AgentTask>, RestoreError> {
    let (id, type_name) = (record.id, &record.type_name);
    let unknown = || RestoreError::UnknownType {
        task: id,
        type_name: type_name.clone(),
    };
    let bad = |reason: String| RestoreError::BadBody {
        task: id,
        type_name: type_name.clone(),
        reason,
    };
    match saved {
        SavedRecord::State(bytes) => match registry.decode(type_name, bytes) {
            None => Err(unknown()),
            Some(Err(reason)) => Err(bad(reason)),
            Some(Ok(body)) => Ok(body),
        },
        SavedRecord::Replay(bytes) => match registry.rebuild_async(type_name, id, bytes) {
            None => Err(unknown()),
            Some(Err(RemakeError::Nondeterminism(n))) => Err(RestoreError::Nondeterminism(n)),
            Some(Err(RemakeError::Bad(reason))) => Err(bad(reason)),
            Some(Ok(body)) => Ok(body),
        },
    }
}

/// The requests of task `id` from their records, and how many of them are in flight.
fn restore_pending(
    records: &[PendingRecord],
    id: TaskId,
) -> Result<(PendingSet, u32), RestoreError> {
    let mut pending = PendingSet::Empty;
    let mut in_flight = 0;
    for p in records {
        let status = restore_status(p, id)?;
        if let Status::InFlight(..) = status {
            in_flight += 1;
        }
        pending.push(PendingRequest {
            number: p.number,
            kind: p.kind.clone(),
            tokens: p.tokens,
            status,
        });
    }
    Ok((pending, in_flight))
}

/// Where a request of task `id` is, from its record.
///
/// # Errors
/// [`RestoreError::Invalid`] for a state of being out that is not 0, 1 or 2, then for a
/// payload or an answer that does not parse.
fn restore_status(p: &PendingRecord, id: TaskId) -> Result<Status, RestoreError> {
    Ok(match &p.status {
        StatusRecord::InFlight {
            payload,
            out,
            epoch,
        } => {
            let out = match out {
                // Out and not in a queue of requests out: taken by the driver (a
                // restore puts those still in the queues back as not taken).
                0 => Out::Unsent,
                1 => Out::Taken,
                2 => Out::CountedTaken(*epoch),
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
    })
}

/// Task `id`'s family from its record, the tasks it names given their indexes.
///
/// # Errors
/// [`RestoreError::Invalid`] for a child's result that does not parse.
fn restore_family(
    f: &FamilyRecord,
    id: TaskId,
    index_of: &impl Fn(&TaskId) -> Option<u32>,
) -> Result<Box<Family>, RestoreError> {
    let mut results = Vec::with_capacity(f.results.len());
    for (child, o) in &f.results {
        results.push((*child, outcome(o, id)?));
    }
    Ok(Box::new(Family {
        parent: f.parent.and_then(|p| Some((p, index_of(&p)?))),
        children: f.children.clone(),
        joined: f.joined.clone(),
        results,
        joined_ended: f.joined_ended,
        depth: f.depth,
        retries: f.retries,
        deadline: f.deadline,
        key: f.key.clone(),
        unmet: f.unmet,
        // A dependent no longer in the table keeps its id and names no index: ending
        // this task passes it by.
        dependents: f
            .dependents
            .iter()
            .map(|d| (*d, index_of(d).unwrap_or(u32::MAX)))
            .collect(),
        // A fork's origin and tape, and the task's code-version decisions, come from
        // the snapshot's addenda, set after.
        fork: None,
        patches: Default::default(),
    }))
}

/// A value as JSON text.
fn json_text(value: &Value) -> String {
    // A `Value` always serializes.
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

/// A value from the JSON text task `task`'s record holds.
fn json_value(text: &str, task: TaskId) -> Result<Value, RestoreError> {
    serde_json::from_str(text).map_err(|e| {
        RestoreError::Invalid(format!("task {task} holds JSON that does not parse: {e}"))
    })
}

/// An outcome as its record, its value as JSON text.
fn outcome_record(outcome: &Outcome) -> OutcomeRecord {
    match outcome {
        Ok(value) => OutcomeRecord::Ok(json_text(value)),
        Err(error) => OutcomeRecord::Err(error.clone()),
    }
}

/// An outcome from its record in task `task`'s.
fn outcome(record: &OutcomeRecord, task: TaskId) -> Result<Outcome, RestoreError> {
    Ok(match record {
        OutcomeRecord::Ok(text) => Ok(json_value(text, task)?),
        OutcomeRecord::Err(error) => Err(error.clone()),
    })
}
