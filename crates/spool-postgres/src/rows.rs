//! The rows of a store, each checked against its checksum as it is read: the head row,
//! journal entries, checkpoints and task rows.

use postgres::GenericClient;
use postgres::Row;
use postgres::types::FromSql;

use crate::error::PgStoreError;
use crate::sum;

/// The head row of a shard: where its journal ends, and which writer may write it.
/// Every write updates it in its transaction, so a recovery can tell a journal whose
/// last entries or latest checkpoint were lost from one that ends there.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Head {
    /// The sequence number of the last entry committed (0: none yet).
    pub(crate) last_seq: u64,
    /// The id of the latest checkpoint (0: none yet).
    pub(crate) checkpoint: u64,
    /// The epoch of the writer that may write: each writer that connects takes the
    /// next.
    pub(crate) epoch: i64,
}

/// Column `index` of `row`, the row `what` names: a value of another type or a null
/// is damage.
pub(crate) fn column<'a, T: FromSql<'a>>(
    row: &'a Row,
    index: usize,
    what: impl Fn() -> String,
) -> Result<T, PgStoreError> {
    row.try_get(index).map_err(|e| {
        PgStoreError::Corrupt(format!(
            "{}: `{}` cannot be read ({e})",
            what(),
            row.columns().get(index).map_or("?", |c| c.name())
        ))
    })
}

/// A number read from the store, which cannot be negative.
fn count(value: i64, what: impl Fn() -> String) -> Result<u64, PgStoreError> {
    u64::try_from(value)
        .map_err(|_| PgStoreError::Corrupt(format!("{} holds a negative number ({value})", what())))
}

/// `shard`'s head row, checked against its checksum (locked for the transaction if
/// `for_update`).
pub(crate) fn read_head(
    client: &mut impl GenericClient,
    shard: i32,
    for_update: bool,
) -> Result<Head, PgStoreError> {
    let sql = if for_update {
        "SELECT last_seq, checkpoint, epoch, sum FROM spool.head WHERE shard = $1 FOR UPDATE"
    } else {
        "SELECT last_seq, checkpoint, epoch, sum FROM spool.head WHERE shard = $1"
    };
    let Some(row) = client.query_opt(sql, &[&shard])? else {
        return Err(PgStoreError::Corrupt("the head row is missing".to_owned()));
    };
    let what = || "the head row".to_owned();
    let last_seq: i64 = column(&row, 0, what)?;
    let checkpoint: i64 = column(&row, 1, what)?;
    let epoch: i64 = column(&row, 2, what)?;
    let check: i64 = column(&row, 3, what)?;
    if sum::head(shard, last_seq, checkpoint, epoch) != check {
        return Err(PgStoreError::Corrupt(
            "the head row does not match its checksum".to_owned(),
        ));
    }
    Ok(Head {
        last_seq: count(last_seq, what)?,
        checkpoint: count(checkpoint, what)?,
        epoch,
    })
}

/// A journal entry's row, checked: `(seq, body, sum)`.
pub(crate) fn entry_row(row: &Row, shard: i32) -> Result<(u64, Vec<u8>), PgStoreError> {
    let seq: i64 = column(row, 0, || "a journal entry".to_owned())?;
    let what = || format!("journal entry {seq}");
    let body: Vec<u8> = column(row, 1, what)?;
    let check: i64 = column(row, 2, what)?;
    if sum::entry(shard, seq, &body) != check {
        return Err(PgStoreError::Corrupt(format!(
            "journal entry {seq} does not match its checksum"
        )));
    }
    Ok((count(seq, what)?, body))
}

/// What a task row version's columns are, in the order [`task_row`] reads them.
pub(crate) const TASK_COLUMNS: &str = "task, body, row_sum, since, origin, sum";

/// The task rows checkpoint `$3` reads, in `shard` `$1`, whose base is `$2`: for each
/// task, the newest version kept from the base to the checkpoint (columns
/// [`TASK_COLUMNS`], by task; a tombstone means the task is not in it).
pub(crate) const ROWS_AT: &str = "SELECT DISTINCT ON (task) task, body, row_sum, since, origin, sum
     FROM spool.tasks WHERE shard = $1 AND since >= $2 AND since <= $3
     ORDER BY task, since DESC";

/// A task row version (columns [`TASK_COLUMNS`]), checked: `(task, body)`, no body
/// for a tombstone. `kept` says how damage is named: a row only older checkpoints
/// read (a kept one, named with its checkpoint), or one the latest reads.
pub(crate) fn task_row(
    row: &Row,
    shard: i32,
    kept: bool,
) -> Result<(u64, Option<Vec<u8>>), PgStoreError> {
    let task: i64 = column(row, 0, || "a task row".to_owned())?;
    let since: i64 = column(row, 3, || format!("a row of task {task}"))?;
    let what = || {
        if kept {
            format!("the kept row of task {task} from checkpoint {since}")
        } else {
            format!("the row of task {task}")
        }
    };
    let body: Option<Vec<u8>> = column(row, 1, what)?;
    let row_sum: i64 = column(row, 2, what)?;
    let origin: i64 = column(row, 4, what)?;
    let check: i64 = column(row, 5, what)?;
    let body_ok = body
        .as_ref()
        .is_none_or(|body| sum::task(shard, task, origin, body) == row_sum);
    if !body_ok || sum::version(shard, task, since, origin, row_sum, body.is_none()) != check {
        return Err(PgStoreError::Corrupt(format!(
            "{} does not match its checksum",
            what()
        )));
    }
    Ok((count(task, what)?, body))
}

/// What a checkpoint row's columns are, in [`CHECKPOINT_COLUMNS`]' order.
pub(crate) const CHECKPOINT_COLUMNS: &str =
    "id, last_seq, parts, len, body, sum, at, bytes, prior, base";

/// A checkpoint's row, checked against its checksum and the head row.
#[derive(Debug)]
pub(crate) struct CheckpointRow {
    pub(crate) id: u64,
    /// The sequence number of the last entry before it.
    pub(crate) last_seq: u64,
    /// Whether it is in parts: `body` is the header, the task rows are in `tasks`.
    pub(crate) parts: bool,
    /// The snapshot, or the header of one in parts.
    pub(crate) body: Vec<u8>,
    /// The wall time it was written, in milliseconds since the Unix epoch.
    pub(crate) at: u64,
    /// The bytes it was given: a snapshot, or a header and the rows that changed.
    pub(crate) bytes: u64,
    /// The encoded bytes of the entries of the segment before it.
    pub(crate) prior: u64,
    /// The checkpoint its task rows start from: it reads, for each task, the newest
    /// version kept from this one to itself.
    pub(crate) base: u64,
}

impl CheckpointRow {
    /// The row (columns [`CHECKPOINT_COLUMNS`]), if it matches its checksum, its length
    /// and the head row.
    pub(crate) fn checked(
        row: &Row,
        shard: i32,
        head: Head,
    ) -> Result<CheckpointRow, PgStoreError> {
        let id: i64 = column(row, 0, || "a checkpoint".to_owned())?;
        let what = || format!("checkpoint {id}");
        let last_seq: i64 = column(row, 1, what)?;
        let parts: bool = column(row, 2, what)?;
        let len: i64 = column(row, 3, what)?;
        let body: Vec<u8> = column(row, 4, what)?;
        let check: i64 = column(row, 5, what)?;
        let at: i64 = column(row, 6, what)?;
        let bytes: i64 = column(row, 7, what)?;
        let prior: i64 = column(row, 8, what)?;
        let base: i64 = column(row, 9, what)?;
        let fields = sum::CheckpointFields {
            last_seq,
            parts,
            len,
            at,
            bytes,
            prior,
            base,
        };
        if sum::checkpoint(shard, id, fields, &body) != check {
            return Err(PgStoreError::Corrupt(format!(
                "checkpoint {id} does not match its checksum"
            )));
        }
        if len != body.len() as i64 {
            return Err(PgStoreError::Corrupt(format!(
                "checkpoint {id} has {} bytes, not {len}",
                body.len()
            )));
        }
        let row = CheckpointRow {
            id: count(id, what)?,
            last_seq: count(last_seq, what)?,
            parts,
            body,
            at: count(at, what)?,
            bytes: count(bytes, what)?,
            prior: count(prior, what)?,
            base: count(base, what)?,
        };
        if row.id > head.checkpoint || row.last_seq > head.last_seq {
            return Err(PgStoreError::Corrupt(format!(
                "checkpoint {} (after entry {}) is past the head row (checkpoint {}, entry {})",
                row.id, row.last_seq, head.checkpoint, head.last_seq
            )));
        }
        Ok(row)
    }
}

/// Every checkpoint row of `shard`, oldest first, each checked.
pub(crate) fn checkpoint_rows(
    client: &mut impl GenericClient,
    shard: i32,
    head: Head,
) -> Result<Vec<CheckpointRow>, PgStoreError> {
    let rows = client.query(
        &format!("SELECT {CHECKPOINT_COLUMNS} FROM spool.checkpoints WHERE shard = $1 ORDER BY id"),
        &[&shard],
    )?;
    rows.iter()
        .map(|row| CheckpointRow::checked(row, shard, head))
        .collect()
}

/// Checkpoint `id`'s row, which the caller expects kept: missing, it is
/// [`PgStoreError::NoCheckpoint`], or damage if it is the latest.
pub(crate) fn kept_checkpoint(
    client: &mut impl GenericClient,
    shard: i32,
    id: u64,
    head: Head,
) -> Result<CheckpointRow, PgStoreError> {
    let row = client.query_opt(
        &format!("SELECT {CHECKPOINT_COLUMNS} FROM spool.checkpoints WHERE shard = $1 AND id = $2"),
        &[&shard, &(id as i64)],
    )?;
    match row {
        Some(row) => CheckpointRow::checked(&row, shard, head),
        None if id == head.checkpoint => Err(PgStoreError::Corrupt(format!(
            "checkpoint {id}, the latest, is missing"
        ))),
        None => Err(PgStoreError::NoCheckpoint(id)),
    }
}
