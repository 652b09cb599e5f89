//! The writer's task rows: versions that are never rewritten. A checkpoint in parts
//! inserts a version of each task row it writes (and, while history is kept, a
//! tombstone for each task it drops) at its own id; it reads, for each task, the
//! newest version kept from its base to itself. A whole checkpoint, or one in full
//! parts, starts anew: it is its own base. Without history the versions a checkpoint
//! replaces are deleted as it writes, so only the live rows are kept; with history
//! they stay for the older checkpoints, and a checkpoint whose reads would grow past
//! about twice its live rows rebases: the server copies the live rows it did not write
//! as versions at its id, and it becomes its own base.

use std::collections::HashMap;

use postgres::{Statement, Transaction};
use spool_core::SnapshotParts;
use spool_durable::WriteStats;

use crate::sum;

/// The statements that write and read task row versions, prepared once per
/// connection.
pub(crate) struct VersionStatements {
    /// Deletes every version of the shard's task rows.
    pub(crate) clear: Statement,
    /// Deletes every version of the tasks `$2`.
    drop: Statement,
    /// Inserts versions written by checkpoint `$5`: tasks `$2`, bodies `$3`, row
    /// checksums `$4`, version checksums `$6`.
    put: Statement,
    /// Inserts tombstones at checkpoint `$3`: tasks `$2`, checksums `$4`.
    tombstones: Statement,
    /// Copies, server-side, the versions of tasks `$2` kept at checkpoints `$4` as
    /// versions at checkpoint `$3`, with checksums `$5`.
    rebase: Statement,
    /// The task rows checkpoint `$3` reads from base `$2` (tombstones included).
    live: Statement,
    /// How many versions are kept from checkpoint `$2` to `$3`.
    versions: Statement,
}

impl VersionStatements {
    /// Prepares them on `client`.
    pub(crate) fn prepare(
        client: &mut postgres::Client,
    ) -> Result<VersionStatements, postgres::Error> {
        Ok(VersionStatements {
            clear: client.prepare("DELETE FROM spool.tasks WHERE shard = $1")?,
            drop: client
                .prepare("DELETE FROM spool.tasks WHERE shard = $1 AND task = ANY($2::bigint[])")?,
            put: client.prepare(
                "INSERT INTO spool.tasks (shard, task, since, origin, body, row_sum, sum)
                 SELECT $1, t.task, $5, $5, t.body, t.row_sum, t.sum
                 FROM unnest($2::bigint[], $3::bytea[], $4::bigint[], $6::bigint[])
                     AS t(task, body, row_sum, sum)",
            )?,
            tombstones: client.prepare(
                "INSERT INTO spool.tasks (shard, task, since, origin, body, row_sum, sum)
                 SELECT $1, t.task, $3, $3, NULL, 0, t.sum
                 FROM unnest($2::bigint[], $4::bigint[]) AS t(task, sum)",
            )?,
            rebase: client.prepare(
                "INSERT INTO spool.tasks (shard, task, since, origin, body, row_sum, sum)
                 SELECT t.shard, t.task, $3, t.origin, t.body, t.row_sum, k.sum
                 FROM unnest($2::bigint[], $4::bigint[], $5::bigint[]) AS k(task, since, sum)
                 JOIN spool.tasks t ON t.shard = $1 AND t.task = k.task AND t.since = k.since",
            )?,
            live: client.prepare(
                "SELECT DISTINCT ON (task) task, since, origin, row_sum, body IS NULL
                 FROM spool.tasks WHERE shard = $1 AND since >= $2 AND since <= $3
                 ORDER BY task, since DESC",
            )?,
            versions: client.prepare(
                "SELECT count(*) FROM spool.tasks
                 WHERE shard = $1 AND since >= $2 AND since <= $3",
            )?,
        })
    }
}

/// A live task row as the writer keeps it: the checkpoint whose version it is, the
/// checkpoint that wrote its body, its row checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Version {
    pub(crate) since: i64,
    pub(crate) origin: i64,
    pub(crate) row_sum: i64,
}

/// Each live task row's version, by task.
pub(crate) type LiveRows = HashMap<i64, Version>;

/// While history is kept, what the writer knows of the task rows as of a commit: the
/// live ones, and how many versions are kept from the latest checkpoint's base to it
/// (what a recovery of it reads).
#[derive(Debug, Default)]
pub(crate) struct Live {
    pub(crate) rows: LiveRows,
    pub(crate) versions: u64,
}

/// How many versions past twice the live rows a checkpoint's reads may grow before it
/// rebases: a few, so that a store of a handful of tasks does not rebase at every
/// checkpoint.
const REBASE_SLACK: u64 = 16;

impl Live {
    /// Whether the reads have grown enough that the checkpoint rebases.
    fn grown(&self) -> bool {
        self.versions > 2 * self.rows.len() as u64 + REBASE_SLACK
    }
}

/// The task rows as of `head_checkpoint` (the last commit), whose base is `base`:
/// `cached` if it was made at that checkpoint, else read (numbers only; a damaged row
/// reads as 0 and its own check finds it when it is read).
pub(crate) fn live_now(
    tx: &mut Transaction<'_>,
    st: &VersionStatements,
    shard: i32,
    cached: Option<(u64, Live)>,
    head_checkpoint: u64,
    base: i64,
) -> Result<Live, postgres::Error> {
    if let Some((at, live)) = cached
        && at == head_checkpoint
    {
        return Ok(live);
    }
    let last = head_checkpoint as i64;
    let mut rows = LiveRows::new();
    for row in tx.query(&st.live, &[&shard, &base, &last])? {
        let tombstone: bool = row.try_get(4).unwrap_or(false);
        if tombstone {
            continue;
        }
        let task: i64 = row.try_get(0).unwrap_or(0);
        let version = Version {
            since: row.try_get(1).unwrap_or(0),
            origin: row.try_get(2).unwrap_or(0),
            row_sum: row.try_get(3).unwrap_or(0),
        };
        rows.insert(task, version);
    }
    let versions: i64 = tx
        .query_one(&st.versions, &[&shard, &base, &last])?
        .try_get(0)
        .unwrap_or(0);
    Ok(Live {
        rows,
        versions: u64::try_from(versions).unwrap_or(0),
    })
}

/// The task rows a checkpoint writes.
#[derive(Clone, Copy)]
pub(crate) enum Rows<'a> {
    /// None: a whole checkpoint (its snapshot holds every task).
    Whole,
    /// A checkpoint in parts: the rows of the tasks that changed, or all if full.
    Parts(&'a SnapshotParts),
}

/// Which checkpoint writes task rows: its shard and id.
#[derive(Clone, Copy)]
pub(crate) struct At {
    pub(crate) shard: i32,
    pub(crate) id: i64,
}

/// Writes checkpoint `at`'s task rows, after a checkpoint whose base was `base`
/// (`None`: none is kept); `live` is the writer's knowledge of the rows while history
/// is kept, brought up to date. Returns the checkpoint's base.
pub(crate) fn write_rows(
    tx: &mut Transaction<'_>,
    st: &VersionStatements,
    at: At,
    rows: Rows<'_>,
    base: Option<i64>,
    live: Option<&mut Live>,
    written: &mut WriteStats,
) -> Result<i64, postgres::Error> {
    let At { shard, id } = at;
    let parts = match rows {
        Rows::Parts(parts) => parts,
        Rows::Whole => {
            match live {
                Some(live) => *live = Live::default(),
                None => {
                    tx.execute(&st.clear, &[&shard])?;
                }
            }
            return Ok(id);
        }
    };
    let mut new = NewRows::default();
    for (task, body) in &parts.rows {
        let task = task.get() as i64;
        written.task_rows += 1;
        written.row_bytes += body.len() as u64;
        let row_sum = sum::task(shard, task, id, body);
        new.row_sums.push(row_sum);
        new.sums
            .push(sum::version(shard, task, id, id, row_sum, false));
        new.tasks.push(task);
        new.bodies.push(body.as_slice());
    }
    let base = match base {
        Some(base) if !parts.full => base,
        _ => id,
    };
    let removed: Vec<i64> = parts.removed.iter().map(|t| t.get() as i64).collect();
    let Some(live) = live else {
        // Without history the versions replaced are deleted: only the live rows stay.
        if parts.full {
            tx.execute(&st.clear, &[&shard])?;
        } else {
            let replaced: Vec<i64> = removed.iter().chain(&new.tasks).copied().collect();
            if !replaced.is_empty() {
                tx.execute(&st.drop, &[&shard, &replaced])?;
            }
        }
        new.put(tx, st, at)?;
        return Ok(base);
    };
    if parts.full {
        *live = Live::default();
    }
    new.put(tx, st, at)?;
    live.versions += new.tasks.len() as u64;
    if !parts.full {
        let dropped: Vec<i64> = removed
            .iter()
            .copied()
            .filter(|task| live.rows.remove(task).is_some())
            .collect();
        if !dropped.is_empty() {
            let sums: Vec<i64> = dropped
                .iter()
                .map(|task| sum::version(shard, *task, id, id, 0, true))
                .collect();
            tx.execute(&st.tombstones, &[&shard, &dropped, &id, &sums])?;
            live.versions += dropped.len() as u64;
        }
    }
    for (task, row_sum) in new.tasks.iter().zip(&new.row_sums) {
        let version = Version {
            since: id,
            origin: id,
            row_sum: *row_sum,
        };
        live.rows.insert(*task, version);
    }
    if base == id || !live.grown() {
        return Ok(base);
    }
    rebase(tx, st, shard, id, live)?;
    Ok(id)
}

/// The versions a checkpoint writes, as the arrays of one statement.
#[derive(Default)]
struct NewRows<'a> {
    tasks: Vec<i64>,
    bodies: Vec<&'a [u8]>,
    row_sums: Vec<i64>,
    sums: Vec<i64>,
}

impl NewRows<'_> {
    /// Inserts them, as checkpoint `at`'s.
    fn put(
        &self,
        tx: &mut Transaction<'_>,
        st: &VersionStatements,
        at: At,
    ) -> Result<(), postgres::Error> {
        if self.tasks.is_empty() {
            return Ok(());
        }
        let params: [&(dyn postgres::types::ToSql + Sync); 6] = [
            &at.shard,
            &self.tasks,
            &self.bodies,
            &self.row_sums,
            &at.id,
            &self.sums,
        ];
        tx.execute(&st.put, &params)?;
        Ok(())
    }
}

/// Makes checkpoint `id` its own base: copies the live rows it did not write as
/// versions at `id`, the server moving the bodies.
fn rebase(
    tx: &mut Transaction<'_>,
    st: &VersionStatements,
    shard: i32,
    id: i64,
    live: &mut Live,
) -> Result<(), postgres::Error> {
    let mut copied: Vec<(i64, i64, i64)> = live
        .rows
        .iter_mut()
        .filter(|(_, version)| version.since != id)
        .map(|(task, version)| {
            let from = version.since;
            version.since = id;
            let check = sum::version(shard, *task, id, version.origin, version.row_sum, false);
            (*task, from, check)
        })
        .collect();
    live.versions = live.rows.len() as u64;
    if copied.is_empty() {
        return Ok(());
    }
    copied.sort_unstable();
    let tasks: Vec<i64> = copied.iter().map(|c| c.0).collect();
    let sinces: Vec<i64> = copied.iter().map(|c| c.1).collect();
    let sums: Vec<i64> = copied.iter().map(|c| c.2).collect();
    tx.execute(&st.rebase, &[&shard, &tasks, &id, &sinces, &sums])?;
    Ok(())
}
