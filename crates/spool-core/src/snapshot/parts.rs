//! A snapshot in parts: a header (the scheduler without its tasks) and one row per
//! task, so that a store can write a checkpoint as the rows that changed since the
//! last one, and put the whole snapshot together again when it recovers.
//!
//! A whole snapshot and the parts it splits into are the same data: taking a
//! scheduler's parts, writing them over the last checkpoint's and reading them back
//! with [`Snapshot::from_parts`] gives the snapshot the scheduler takes whole, byte for
//! byte.

use serde::{Deserialize, Serialize};

use super::{DecodeError, Snapshot, SnapshotData, SnapshotError, TaskRecord, codec};
use crate::id::{RequestKey, TaskId};

/// A header as encoded: how many tasks the table holds (so that a missing row is
/// found), and the snapshot's data without them.
#[derive(Serialize, Deserialize)]
struct Header {
    tasks: u64,
    data: SnapshotData,
}

/// Encodes `data` (with no task records) as the header of a table of `tasks` tasks.
pub(crate) fn encode_header(data: SnapshotData, tasks: usize) -> Result<Vec<u8>, SnapshotError> {
    let since6 = !data.addenda.v6.is_empty();
    let header = Header {
        tasks: tasks as u64,
        data,
    };
    codec::encode_snapshot(&header, since6).map_err(SnapshotError::Encode)
}

/// A checkpoint in parts, from [`Scheduler::snapshot_changes`](crate::Scheduler::snapshot_changes)
/// or [`Snapshot::to_parts`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotParts {
    /// Everything but the tasks — configuration, time, counters, queues, limiter state,
    /// timers, and how many tasks the table holds — encoded in the snapshot envelope
    /// (its size follows the queues, not the number of tasks).
    pub header: Vec<u8>,
    /// A row for each task that changed (or for every task, if `full`), by id: the
    /// task's record, encoded (postcard, no envelope: a store checks its rows itself).
    pub rows: Vec<(TaskId, Vec<u8>)>,
    /// Tasks removed from the table (forgotten, or evicted after their retention)
    /// since the last parts, by id.
    pub removed: Vec<TaskId>,
    /// Whether `rows` holds every task in the table: the parts stand alone.
    pub full: bool,
}

impl TaskRecord {
    /// The record as a row.
    pub(crate) fn to_row(&self) -> Result<Vec<u8>, String> {
        postcard::to_allocvec(self).map_err(|e| e.to_string())
    }

    /// A record from a row.
    fn from_row(id: TaskId, bytes: &[u8]) -> Result<TaskRecord, DecodeError> {
        let (record, rest): (TaskRecord, &[u8]) = crate::bounded::take_from_postcard(bytes)
            .map_err(|e| DecodeError::Malformed(format!("the row of task {id}: {e}")))?;
        if !rest.is_empty() {
            return Err(DecodeError::Malformed(format!(
                "the row of task {id} has {} bytes after its record",
                rest.len()
            )));
        }
        if record.id != id {
            return Err(DecodeError::Invalid(format!(
                "the row of task {id} holds task {}",
                record.id
            )));
        }
        Ok(record)
    }
}

impl SnapshotData {
    /// Every request key in the queues and limiter state, to change its index.
    fn keys_mut(&mut self) -> impl Iterator<Item = &mut RequestKey> {
        self.outbox
            .iter_mut()
            .chain(self.direct.iter_mut())
            .chain(self.gates.iter_mut().flat_map(|g| {
                g.tokens
                    .iter_mut()
                    .map(|(_, k, _)| k)
                    .chain(g.held.iter_mut().map(|(_, _, k)| k))
            }))
            .chain(
                self.parked_requests
                    .iter_mut()
                    .flat_map(|(_, held)| held.iter_mut().map(|(_, _, k)| k)),
            )
            .chain(self.retries.iter_mut().map(|(k, _, _)| k))
            .chain(self.addenda.v6.budgets.held.iter_mut())
            .chain(
                self.addenda
                    .v6
                    .agent_limits
                    .shares
                    .iter_mut()
                    .flat_map(|s| s.parked.iter_mut().map(|(_, _, k)| k)),
            )
    }

    /// Gives each request key the index a restore puts its task in (task `i` of the
    /// list at index `i`); a key whose task is not in the list names no index
    /// (`u32::MAX`).
    pub(crate) fn resolve_indexes(&mut self) {
        let ids: Vec<TaskId> = self.tasks.iter().map(|t| t.id).collect();
        for key in self.keys_mut() {
            let index = ids
                .binary_search(&key.task())
                .map_or(u32::MAX, |i| i as u32);
            *key = RequestKey::new(key.task(), key.number(), index);
        }
    }

    /// The header's form of the keys: naming no index.
    fn unresolve_indexes(&mut self) {
        for key in self.keys_mut() {
            *key = RequestKey::new(key.task(), key.number(), u32::MAX);
        }
    }
}

impl Snapshot {
    /// The snapshot as parts: its header and a row for every task (`full`).
    ///
    /// # Errors
    /// [`SnapshotError::Encode`] if serde cannot encode a part (a bug).
    pub fn to_parts(&self) -> Result<SnapshotParts, SnapshotError> {
        let mut header = SnapshotData {
            tasks: Vec::new(),
            ..self.data.clone()
        };
        header.unresolve_indexes();
        let header = encode_header(header, self.data.tasks.len())?;
        let rows = self
            .data
            .tasks
            .iter()
            .map(|t| Ok((t.id, t.to_row().map_err(SnapshotError::Encode)?)))
            .collect::<Result<_, SnapshotError>>()?;
        Ok(SnapshotParts {
            header,
            rows,
            removed: Vec::new(),
            full: true,
        })
    }

    /// The whole snapshot from a header and the rows of every task in the table, in
    /// any order (a store's latest header and, per task, its latest row).
    ///
    /// # Errors
    /// A [`DecodeError`]: a header that is not one (or holds tasks), a row that does
    /// not decode or holds another task than it is filed under, a task with two rows,
    /// or parts that do not hang together.
    pub fn from_parts<'a>(
        header: &[u8],
        rows: impl IntoIterator<Item = (TaskId, &'a [u8])>,
    ) -> Result<Snapshot, DecodeError> {
        let Header { tasks, mut data } =
            codec::decode_versioned(header, &super::MAGIC, &super::v2_tail())?;
        if !data.tasks.is_empty() {
            return Err(DecodeError::Invalid(
                "a checkpoint's header holds task records".to_owned(),
            ));
        }
        for (id, bytes) in rows {
            data.tasks.push(TaskRecord::from_row(id, bytes)?);
        }
        if data.tasks.len() as u64 != tasks {
            return Err(DecodeError::Invalid(format!(
                "the checkpoint has {} task rows, its header counts {tasks}",
                data.tasks.len()
            )));
        }
        data.tasks.sort_unstable_by_key(|t| t.id);
        if let Some(pair) = data.tasks.windows(2).find(|w| w[0].id == w[1].id) {
            return Err(DecodeError::Invalid(format!(
                "task {} has two rows",
                pair[0].id
            )));
        }
        data.resolve_indexes();
        data.check().map_err(DecodeError::Invalid)?;
        Ok(Snapshot { data })
    }
}
