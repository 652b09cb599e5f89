//! The rows of a store and their checksums: the head row, the journal entries' and the
//! checkpoints' rows, each checked as it is read, whatever type a damaged file gives a
//! column.

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, Transaction, params};

use crate::StoreError;
use crate::sum;

/// The head row: where the journal ends. Every write updates it in its transaction,
/// so a recovery can tell a journal whose last entries or latest checkpoint were lost
/// from one that ends there.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Head {
    /// The sequence number of the last entry committed (0: none yet).
    pub(super) last_seq: u64,
    /// The id of the latest checkpoint (0: none yet).
    pub(super) checkpoint: u64,
}

/// The head row, checked against its checksum.
pub(super) fn read_head(conn: &Connection) -> Result<Head, StoreError> {
    let row: Option<(Raw, Raw, Raw)> = conn
        .query_row(
            "SELECT last_seq, checkpoint, sum FROM head WHERE id = 1",
            [],
            |row| Ok((Raw::read(row, 0)?, Raw::read(row, 1)?, Raw::read(row, 2)?)),
        )
        .optional()?;
    let Some((last_seq, checkpoint, check)) = row else {
        return Err(StoreError::Corrupt("the head row is missing".to_owned()));
    };
    let what = || "the head row".to_owned();
    let (last_seq, checkpoint) = (
        int(last_seq, "last_seq", what)?,
        int(checkpoint, "checkpoint", what)?,
    );
    let check = int(check, "sum", what)?;
    let head = Head {
        last_seq: last_seq as u64,
        checkpoint: checkpoint as u64,
    };
    if sum::head(head.last_seq, head.checkpoint) != check {
        return Err(StoreError::Corrupt(
            "the head row does not match its checksum".to_owned(),
        ));
    }
    if last_seq < 0 || checkpoint < 0 {
        return Err(StoreError::Corrupt(format!(
            "the head row holds a negative number ({last_seq}, {checkpoint})"
        )));
    }
    Ok(head)
}

/// Writes the head row, with its checksum.
pub(super) fn write_head(tx: &Transaction<'_>, head: Head) -> Result<(), StoreError> {
    let changed = tx
        .prepare_cached("UPDATE head SET last_seq = ?1, checkpoint = ?2, sum = ?3 WHERE id = 1")?
        .execute(params![
            head.last_seq as i64,
            head.checkpoint as i64,
            sum::head(head.last_seq, head.checkpoint)
        ])?;
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::Corrupt("the head row is missing".to_owned()))
    }
}

/// A journal entry's row, checked against its checksum.
#[derive(Debug)]
pub(super) struct EntryRow {
    pub(super) seq: u64,
    /// The entry's encoded length.
    pub(super) len: u64,
    /// Whether `body` holds the roots of the entry's chunks rather than the entry.
    pub(super) chunked: bool,
    pub(super) body: Vec<u8>,
}

impl EntryRow {
    /// The row `(seq, len, chunked, body, sum)` as read, if it matches its checksum and
    /// its values make sense.
    pub(super) fn checked(
        (seq, len, chunked, body, check): RawRow,
    ) -> Result<EntryRow, StoreError> {
        let what = || format!("journal entry {seq}");
        let (len, chunked) = (int(len, "len", what)?, int(chunked, "chunked", what)?);
        let (body, check) = (blob(body, "body", what)?, int(check, "sum", what)?);
        // The values as written (a negative one was not), so any change shows.
        if sum::entry(seq as u64, len as u64, chunked as u64, &body) != check {
            return Err(StoreError::Corrupt(format!(
                "journal entry {seq} does not match its checksum"
            )));
        }
        let seq = count(seq, "an entry's sequence number")?;
        let len = count(len, "an entry's length")?;
        let chunked = match chunked {
            0 => false,
            1 => true,
            other => {
                return Err(StoreError::Corrupt(format!(
                    "journal entry {seq} has the chunked flag {other}"
                )));
            }
        };
        Ok(EntryRow {
            seq,
            len,
            chunked,
            body,
        })
    }
}

/// A checkpoint's row, checked against its checksum.
#[derive(Debug)]
pub(super) struct CheckpointRow {
    pub(super) id: u64,
    /// The sequence number of the last entry before it.
    pub(super) last_seq: u64,
    /// The snapshot's length.
    pub(super) len: u64,
    /// The snapshot's (or, in parts, the header's) root hashes.
    pub(super) roots: Vec<u8>,
    /// Whether it is in parts: `roots` is the header's, the task rows are in `tasks`
    /// (and, for an older one, `task_history`).
    pub(super) parts: bool,
    /// The wall time it was written, in milliseconds since the Unix epoch.
    pub(super) at: u64,
    /// The bytes it was given: a snapshot, or a header and the rows that changed.
    pub(super) bytes: u64,
    /// The encoded bytes of the entries of the segment before it.
    pub(super) prior: u64,
}

impl CheckpointRow {
    /// The row `(id, last_seq, len, roots, sum, parts, at, bytes, prior)` as read, if it
    /// matches its checksum and agrees with the head row.
    pub(super) fn checked(
        ((id, last_seq, len, roots, check), [parts, at, bytes, prior]): (RawRow, [Raw; 4]),
        head: Head,
    ) -> Result<CheckpointRow, StoreError> {
        let what = || format!("checkpoint {id}");
        let (last_seq, len) = (int(last_seq, "last_seq", what)?, int(len, "len", what)?);
        let (roots, check) = (blob(roots, "roots", what)?, int(check, "sum", what)?);
        let parts = int(parts, "parts", what)?;
        let (at, bytes) = (int(at, "at", what)?, int(bytes, "bytes", what)?);
        let prior = int(prior, "prior", what)?;
        let fields = sum::CheckpointFields {
            last_seq: last_seq as u64,
            len: len as u64,
            parts: parts as u64,
            at: at as u64,
            bytes: bytes as u64,
            prior: prior as u64,
        };
        if sum::checkpoint(id as u64, fields, &roots) != check {
            return Err(StoreError::Corrupt(format!(
                "checkpoint {id} does not match its checksum"
            )));
        }
        let row = CheckpointRow {
            id: count(id, "a checkpoint id")?,
            last_seq: count(last_seq, "a checkpoint's last entry")?,
            len: count(len, "a snapshot's length")?,
            roots,
            parts: match parts {
                0 => false,
                1 => true,
                other => {
                    return Err(StoreError::Corrupt(format!(
                        "checkpoint {id} has the parts flag {other}"
                    )));
                }
            },
            at: count(at, "a checkpoint's wall time")?,
            bytes: count(bytes, "a checkpoint's bytes")?,
            prior: count(prior, "a segment's bytes")?,
        };
        if row.id > head.checkpoint || row.last_seq > head.last_seq {
            return Err(StoreError::Corrupt(format!(
                "checkpoint {} (after entry {}) is past the head row (checkpoint {}, entry {})",
                row.id, row.last_seq, head.checkpoint, head.last_seq
            )));
        }
        Ok(row)
    }
}

/// A column's value as read, whatever type the file says: a damaged record header
/// can change a column's type (and text need not be UTF-8, so it is never decoded).
#[derive(Debug)]
pub(super) enum Raw {
    Integer(i64),
    Blob(Vec<u8>),
    /// Any other type, by name.
    Other(&'static str),
}

impl Raw {
    /// Column `index` of `row`.
    fn read(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<Raw> {
        Ok(match row.get_ref(index)? {
            ValueRef::Integer(n) => Raw::Integer(n),
            ValueRef::Blob(bytes) => Raw::Blob(bytes.to_vec()),
            ValueRef::Null => Raw::Other("null"),
            ValueRef::Real(_) => Raw::Other("a real"),
            ValueRef::Text(_) => Raw::Other("text"),
        })
    }

    fn type_name(&self) -> &'static str {
        match self {
            Raw::Integer(_) => "an integer",
            Raw::Blob(_) => "a blob",
            Raw::Other(name) => name,
        }
    }
}

/// A row as read: its key (a rowid, always an integer) and four columns.
pub(super) type RawRow = (i64, Raw, Raw, Raw, Raw);

/// A checkpoint's row as read: its key, four columns, then the parts flag, the wall
/// time, its bytes and the bytes of the segment before it.
pub(super) fn raw_checkpoint_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<(RawRow, [Raw; 4])> {
    Ok((
        raw_row(row)?,
        [
            Raw::read(row, 5)?,
            Raw::read(row, 6)?,
            Raw::read(row, 7)?,
            Raw::read(row, 8)?,
        ],
    ))
}

/// The columns a checkpoint's row is read with, in the order
/// [`raw_checkpoint_row`] takes them.
pub(super) const CHECKPOINT_COLUMNS: &str =
    "id, last_seq, len, roots, sum, parts, at, bytes, prior";

/// The columns a task's row is read with, in the order [`raw_task_row`] takes them.
pub(super) const TASK_COLUMNS: &str = "task, len, chunked, body, sum, since";

/// The columns a kept old task row is read with, in the order [`raw_history_row`]
/// takes them: as a task's row (its `row_sum` as the row's `sum`), then `until` and
/// the kept row's own `sum`.
pub(super) const HISTORY_COLUMNS: &str = "task, len, chunked, body, row_sum, since, until, sum";

/// A task's row as read: its key, four columns, and the checkpoint that wrote it.
pub(super) fn raw_task_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<(RawRow, Raw)> {
    Ok((raw_row(row)?, Raw::read(row, 5)?))
}

/// A kept old task row as read: as a task's row, the checkpoint that replaced it, and
/// its own checksum.
pub(super) fn raw_history_row(
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<((RawRow, Raw), Raw, Raw)> {
    Ok((raw_task_row(row)?, Raw::read(row, 6)?, Raw::read(row, 7)?))
}

/// A task's row, checked against its checksum: in `tasks` (the latest), or a kept old
/// one in `task_history`.
#[derive(Debug)]
pub(super) struct TaskRow {
    pub(super) task: u64,
    /// The row's encoded length.
    pub(super) len: u64,
    /// Whether `body` holds the roots of the row's chunks rather than the row.
    pub(super) chunked: bool,
    pub(super) body: Vec<u8>,
    /// The checkpoint that wrote it.
    pub(super) since: u64,
}

impl TaskRow {
    /// The row `(task, len, chunked, body, sum, since)` of `tasks` as read, if it
    /// matches its checksum.
    pub(super) fn checked(raw: (RawRow, Raw)) -> Result<TaskRow, StoreError> {
        TaskRow::checked_with(raw, None)
    }

    /// The row `(task, len, chunked, body, row_sum, since, until, sum)` of
    /// `task_history` as read, if it matches both its checksums: the row's, and the
    /// kept row's over it.
    pub(super) fn checked_old(
        (raw, until, kept_sum): ((RawRow, Raw), Raw, Raw),
    ) -> Result<TaskRow, StoreError> {
        TaskRow::checked_with(raw, Some((until, kept_sum)))
    }

    fn checked_with(
        ((task, len, chunked, body, check), since): (RawRow, Raw),
        until: Option<(Raw, Raw)>,
    ) -> Result<TaskRow, StoreError> {
        let since_what = since_name(&since);
        let old = until.is_some();
        let what = || {
            if old {
                format!("the kept row of task {task} from checkpoint {since_what}")
            } else {
                format!("the row of task {task}")
            }
        };
        let (len, chunked) = (int(len, "len", what)?, int(chunked, "chunked", what)?);
        let (body, check) = (blob(body, "body", what)?, int(check, "sum", what)?);
        let since = int(since, "since", what)?;
        let row_matches =
            sum::task(task as u64, since as u64, len as u64, chunked as u64, &body) == check;
        let kept_matches = match until {
            None => true,
            Some((until, kept_sum)) => {
                let (until, kept_sum) = (int(until, "until", what)?, int(kept_sum, "sum", what)?);
                sum::task_history(task as u64, since as u64, until as u64, check) == kept_sum
            }
        };
        if !row_matches || !kept_matches {
            return Err(StoreError::Corrupt(format!(
                "{} does not match its checksum",
                what()
            )));
        }
        Ok(TaskRow {
            task: count(task, "a task id")?,
            len: count(len, "a task row's length")?,
            chunked: match chunked {
                0 => false,
                1 => true,
                other => {
                    return Err(StoreError::Corrupt(format!(
                        "{} has the chunked flag {other}",
                        what()
                    )));
                }
            },
            body,
            since: count(since, "a task row's checkpoint")?,
        })
    }
}

/// A `since` column's value, for naming a row in a message.
fn since_name(since: &Raw) -> String {
    match since {
        Raw::Integer(n) => n.to_string(),
        other => format!("({})", other.type_name()),
    }
}

/// A row of four columns after its key, as read.
pub(super) fn raw_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok((
        row.get(0)?,
        Raw::read(row, 1)?,
        Raw::read(row, 2)?,
        Raw::read(row, 3)?,
        Raw::read(row, 4)?,
    ))
}

/// Column `column` of the row `what` names, which must be an integer.
fn int(value: Raw, column: &str, what: impl Fn() -> String) -> Result<i64, StoreError> {
    match value {
        Raw::Integer(n) => Ok(n),
        other => Err(StoreError::Corrupt(format!(
            "{}: `{column}` holds {}, not an integer",
            what(),
            other.type_name()
        ))),
    }
}

/// Column `column` of the row `what` names, which must be a blob.
fn blob(value: Raw, column: &str, what: impl Fn() -> String) -> Result<Vec<u8>, StoreError> {
    match value {
        Raw::Blob(bytes) => Ok(bytes),
        other => Err(StoreError::Corrupt(format!(
            "{}: `{column}` holds {}, not a blob",
            what(),
            other.type_name()
        ))),
    }
}

/// Every checkpoint row, oldest first, each checked.
pub(super) fn checkpoint_rows(
    conn: &Connection,
    head: Head,
) -> Result<Vec<CheckpointRow>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints ORDER BY id"
    ))?;
    let rows = stmt.query_map([], raw_checkpoint_row)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(CheckpointRow::checked(row?, head)?);
    }
    Ok(out)
}

/// Checkpoint `id`'s row, checked; `None` if there is none.
pub(super) fn checkpoint_row(
    conn: &Connection,
    id: u64,
    head: Head,
) -> Result<Option<CheckpointRow>, StoreError> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE id = ?1"
        ))?
        .query_row([id as i64], raw_checkpoint_row)
        .optional()?;
    row.map(|row| CheckpointRow::checked(row, head)).transpose()
}

/// Checkpoint `id`'s row, which the head row says exists.
pub(super) fn kept_checkpoint(
    conn: &Connection,
    id: u64,
    head: Head,
) -> Result<CheckpointRow, StoreError> {
    match checkpoint_row(conn, id, head)? {
        Some(row) => Ok(row),
        None if id == head.checkpoint => Err(StoreError::Corrupt(format!(
            "checkpoint {id}, the latest, is missing"
        ))),
        None => Err(StoreError::NoCheckpoint(id)),
    }
}

/// A count or length read from disk, which cannot be negative.
pub(super) fn count(value: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("{what} is negative ({value})")))
}
