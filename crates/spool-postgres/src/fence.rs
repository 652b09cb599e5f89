//! A shard's writer in lease mode: it holds the shard's lease with an epoch (from the
//! cluster's `spool.shards`), takes no advisory lock, and at connect ends the server
//! sessions of the shard's older writers and raises the head row's epoch to its own.
//! Every write then checks the epoch (as every writer's does), so a writer that lost
//! its lease writes nothing once the new owner has connected.

use std::time::{Duration, Instant};

use postgres::Client;
use postgres::error::SqlState;

use crate::error::PgStoreError;
use crate::rows::{Head, read_head};
use crate::sum;

/// How long raising the epoch waits for the head row's lock before the older writers'
/// sessions are looked for and ended again.
const LOCK_WAIT: &str = "1s";

/// The `application_name` of the sessions of `shard`'s writer with lease `epoch`:
/// what a newer owner finds them by.
pub(crate) fn application_name(shard: i32, epoch: i64) -> String {
    format!("spool shard {shard} epoch {epoch}")
}

/// Ends every server session of `shard`'s writers with an epoch older than `epoch`
/// (other than this one): a writer frozen inside a transaction holds the head row's
/// lock, and would otherwise keep the new owner waiting for ever. Returns how many
/// were ended.
pub(crate) fn end_older_writers(
    client: &mut Client,
    shard: i32,
    epoch: i64,
) -> Result<i64, PgStoreError> {
    let row = client.query_one(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND CASE WHEN application_name ~ ('^spool shard ' || $1::integer::text || ' epoch [0-9]{1,18}$')
                    THEN split_part(application_name, ' ', 5)::bigint < $2
                    ELSE false END",
        &[&shard, &epoch],
    )?;
    Ok(row.try_get(0)?)
}

/// Takes `shard` for the writer with lease `epoch`: ends the older writers' sessions,
/// then sets the head row's epoch to `epoch` if it is older. Tries again while the
/// head row stays locked (a session of an older writer that connected meanwhile),
/// for up to `wait`. Returns the head with the new epoch.
///
/// # Errors
/// [`PgStoreError::Fenced`] if the head row's epoch is `epoch` or newer: a newer owner
/// exists (or this lease was used already); [`PgStoreError::HeadLocked`] if the head
/// row stayed locked for `wait` by a session that is not an older lease writer.
pub(crate) fn take_lease(
    client: &mut Client,
    what: &str,
    shard: i32,
    epoch: i64,
    wait: Duration,
) -> Result<Head, PgStoreError> {
    let started = Instant::now();
    loop {
        end_older_writers(client, shard, epoch)?;
        match raise_epoch(client, what, shard, epoch) {
            Err(PgStoreError::Postgres(e)) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                if started.elapsed() >= wait {
                    return Err(PgStoreError::HeadLocked {
                        what: what.to_owned(),
                        shard: shard.unsigned_abs(),
                        seconds: started.elapsed().as_secs(),
                    });
                }
            }
            done => return done,
        }
    }
}

/// Sets the head row's epoch to `epoch` if it is older, in one transaction that waits
/// at most [`LOCK_WAIT`] for the row.
fn raise_epoch(
    client: &mut Client,
    what: &str,
    shard: i32,
    epoch: i64,
) -> Result<Head, PgStoreError> {
    let mut tx = client.transaction()?;
    tx.batch_execute(&format!("SET LOCAL lock_timeout = '{LOCK_WAIT}'"))?;
    let head = read_head(&mut tx, shard, true)?;
    if head.epoch >= epoch {
        return Err(PgStoreError::Fenced {
            what: what.to_owned(),
            ours: epoch,
            found: head.epoch,
        });
    }
    let (last_seq, checkpoint) = (head.last_seq as i64, head.checkpoint as i64);
    let changed = tx.execute(
        "UPDATE spool.head SET epoch = $2, sum = $3 WHERE shard = $1 AND epoch < $2",
        &[
            &shard,
            &epoch,
            &sum::head(shard, last_seq, checkpoint, epoch),
        ],
    )?;
    if changed != 1 {
        return Err(PgStoreError::Fenced {
            what: what.to_owned(),
            ours: epoch,
            found: head.epoch,
        });
    }
    tx.commit()?;
    Ok(Head { epoch, ..head })
}
