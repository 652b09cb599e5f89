//! The whole-store check behind [`PgStore::verify`](crate::PgStore::verify): every row
//! against its checksum, the journal without a gap and not past the head, the latest
//! checkpoint where the head says, and every kept checkpoint's journal read as a
//! recovery reads it.

use postgres::GenericClient;

use crate::error::PgStoreError;
use crate::recover::journal_from;
use crate::rows::{TASK_COLUMNS, checkpoint_rows, entry_row, read_head, task_row};

/// Checks everything `shard` holds.
pub(crate) fn verify(client: &mut impl GenericClient, shard: i32) -> Result<(), PgStoreError> {
    let head = read_head(client, shard, false)?;
    let checkpoints = checkpoint_rows(client, shard, head)?;
    match checkpoints.last() {
        Some(latest) if latest.id == head.checkpoint => {}
        None if head.checkpoint == 0 => {}
        _ => {
            return Err(PgStoreError::Corrupt(format!(
                "checkpoint {}, the latest, is missing",
                head.checkpoint
            )));
        }
    }
    let entries = client.query(
        "SELECT seq, body, sum FROM spool.entries WHERE shard = $1 ORDER BY seq",
        &[&shard],
    )?;
    let oldest = checkpoints.first().map(|c| c.last_seq);
    let mut previous: Option<u64> = None;
    for row in &entries {
        let (seq, _) = entry_row(row, shard)?;
        if seq > head.last_seq {
            return Err(PgStoreError::Corrupt(format!(
                "journal entry {seq} is past the last one committed ({})",
                head.last_seq
            )));
        }
        let expected = match previous {
            Some(previous) => Some(previous + 1),
            None => oldest.map(|oldest| oldest + 1),
        };
        if let Some(expected) = expected
            && seq > expected
        {
            return Err(PgStoreError::Corrupt(format!(
                "journal entry {expected} is missing (the next kept is {seq})"
            )));
        }
        previous = Some(seq);
    }
    // Each task's versions, newest first: the newest is the one the latest checkpoint
    // can read, the older ones are kept for older checkpoints.
    let tasks = client.query(
        &format!(
            "SELECT {TASK_COLUMNS} FROM spool.tasks WHERE shard = $1 ORDER BY task, since DESC"
        ),
        &[&shard],
    )?;
    let mut last_task: Option<i64> = None;
    for row in &tasks {
        let task: Option<i64> = row.try_get(0).ok();
        let kept = task.is_some() && task == last_task;
        task_row(row, shard, kept)?;
        last_task = task;
    }
    for checkpoint in &checkpoints {
        journal_from(client, shard, checkpoint.id, head)?;
    }
    Ok(())
}
