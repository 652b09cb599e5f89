//! Writes: the writer's connection and what it keeps of the head, and the transaction
//! that writes a batch of entries and checkpoints — one statement per table, the head
//! row first, fenced by the writer's epoch. Run on the writer thread
//! ([`crate::writer`]).

use std::sync::{Arc, Mutex};

use postgres::{Client, Statement, Transaction};
use spool_core::SnapshotParts;
use spool_durable::{CrashCounter, WriteStats};

use crate::address::Address;
use crate::error::PgStoreError;
use crate::options::PgOptions;
use crate::rows::Head;
use crate::sum;

/// One write in a transaction: an entry appended, or a checkpoint.
pub(crate) use spool_durable::Op;

/// The statements a transaction runs, prepared once per connection.
pub(crate) struct Statements {
    head: Statement,
    entries: Statement,
    checkpoint: Statement,
    clear_tasks: Statement,
    drop_tasks: Statement,
    put_tasks: Statement,
    drop_old: Statement,
}

impl Statements {
    /// Prepares them on `client`.
    pub(crate) fn prepare(client: &mut Client) -> Result<Statements, postgres::Error> {
        Ok(Statements {
            head: client.prepare(
                "UPDATE spool.head SET last_seq = $3, checkpoint = $4, sum = $5
                 WHERE shard = $1 AND epoch = $2",
            )?,
            entries: client.prepare(
                "INSERT INTO spool.entries (shard, seq, body, sum)
                 SELECT $1, * FROM unnest($2::bigint[], $3::bytea[], $4::bigint[])",
            )?,
            checkpoint: client.prepare(
                "INSERT INTO spool.checkpoints (shard, id, last_seq, parts, len, body, sum)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )?,
            clear_tasks: client.prepare("DELETE FROM spool.tasks WHERE shard = $1")?,
            drop_tasks: client
                .prepare("DELETE FROM spool.tasks WHERE shard = $1 AND task = ANY($2::bigint[])")?,
            put_tasks: client.prepare(
                "INSERT INTO spool.tasks (shard, task, body, sum)
                 SELECT $1, * FROM unnest($2::bigint[], $3::bytea[], $4::bigint[])
                 ON CONFLICT (shard, task) DO UPDATE SET body = EXCLUDED.body, sum = EXCLUDED.sum",
            )?,
            // The checkpoints kept: the last $3, less those in parts other than the new
            // one $2 (only the latest in parts can be read: the task rows are its).
            // Entries up to the oldest kept one's go with the others.
            drop_old: client.prepare(
                "WITH last AS (
                     SELECT id, last_seq, parts FROM spool.checkpoints
                     WHERE shard = $1 ORDER BY id DESC LIMIT $3
                 ), kept AS (
                     SELECT id, last_seq FROM last WHERE NOT parts OR id = $2
                 ), dropped AS (
                     DELETE FROM spool.checkpoints
                     WHERE shard = $1 AND id NOT IN (SELECT id FROM kept)
                 )
                 DELETE FROM spool.entries
                 WHERE shard = $1 AND seq <= (SELECT min(last_seq) FROM kept)",
            )?,
        })
    }
}

/// The writer's side of a store: its connection (`None` while lost), the head as of
/// its last commit, its epoch, and what it wrote.
pub(crate) struct Writer {
    pub(crate) address: Address,
    pub(crate) options: PgOptions,
    pub(crate) shard: i32,
    /// Whether the writer holds a lease (no writer's lock: the epoch alone fences).
    pub(crate) lease: bool,
    pub(crate) client: Option<Client>,
    pub(crate) statements: Option<Statements>,
    /// The server session holding the writer's lock: `(pid, started)`.
    pub(crate) session: (i32, String),
    /// The head as of the last commit; its epoch is this writer's.
    pub(crate) head: Head,
    /// What was written since the store was connected: apart from the writer's lock,
    /// so that it is read while the writer waits for the server.
    pub(crate) written: Arc<Mutex<WriteStats>>,
    /// What the batch whose `COMMIT` was sent last wrote: counted if a reconnect finds
    /// it committed.
    pub(crate) sent: WriteStats,
    /// Whether the last `COMMIT` was sent and its answer never came: set just before
    /// it is sent, cleared when it answers.
    pub(crate) committing: bool,
    /// The head after a batch whose `COMMIT` was sent and whose outcome the writer
    /// gave up learning (the server stayed away longer than `retry_for`): the next
    /// write first finds out whether it was committed.
    pub(crate) in_doubt: Option<Head>,
    pub(crate) crash: CrashCounter,
}

/// Why a write failed: the connection was lost (worth trying again), or anything else.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The connection is gone; the reason, for the log and the final error.
    Lost(String),
    /// Anything else: the batch fails.
    Fatal(PgStoreError),
}

impl From<PgStoreError> for Failure {
    fn from(error: PgStoreError) -> Failure {
        match error {
            PgStoreError::Postgres(e) if is_lost(&e) => Failure::Lost(crate::address::reason(&e)),
            PgStoreError::Refused { reason, .. } => Failure::Lost(reason),
            other => Failure::Fatal(other),
        }
    }
}

impl From<postgres::Error> for Failure {
    fn from(error: postgres::Error) -> Failure {
        Failure::from(PgStoreError::Postgres(error))
    }
}

/// Whether `error` says the connection is gone: closed, an I/O error, or the server
/// ending the session (shut down, restarting, terminated).
pub(crate) fn is_lost(error: &postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    if let Some(code) = error.code() {
        let code = code.code();
        return code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03");
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// What a batch writes, worked out before the transaction: the head after it and each
/// op's number (an entry's sequence number, a checkpoint's id).
pub(crate) struct Plan {
    pub(crate) after: Head,
    pub(crate) ids: Vec<u64>,
}

impl Writer {
    /// The head and numbers `ops` give, written after `self.head`.
    pub(crate) fn plan(&self, ops: &[&Op]) -> Plan {
        let mut after = self.head;
        let ids = ops
            .iter()
            .map(|op| match op {
                Op::Entry(_) => {
                    after.last_seq += 1;
                    after.last_seq
                }
                Op::Checkpoint { .. } | Op::Parts(_) => {
                    after.checkpoint += 1;
                    after.checkpoint
                }
            })
            .collect();
        Plan { after, ids }
    }

    /// Writes `ops` in order in one transaction, as `plan` says: nothing is changed if
    /// it fails. `first` is whether this is the batch's first try (a crash moment is
    /// counted once per batch).
    pub(crate) fn write_once(
        &mut self,
        ops: &[&Op],
        plan: &Plan,
        first: bool,
    ) -> Result<(), Failure> {
        let shard = self.shard;
        let keep = self.options.keep_checkpoints;
        let (Some(client), Some(st)) = (self.client.as_mut(), self.statements.as_ref()) else {
            return Err(Failure::Lost("not connected".to_owned()));
        };
        let mut head = self.head;
        let mut written = WriteStats::default();
        let mut tx = client.transaction()?;
        // The head first: it checks the epoch (another writer's transaction waits for
        // this one, or this one for it) before anything else is written.
        let after = plan.after;
        let (last, checkpoint) = (after.last_seq as i64, after.checkpoint as i64);
        let check = sum::head(shard, last, checkpoint, head.epoch);
        let changed = tx.execute(&st.head, &[&shard, &head.epoch, &last, &checkpoint, &check])?;
        if changed != 1 {
            return Err(Failure::Fatal(fenced(
                &mut tx,
                &self.address,
                shard,
                head.epoch,
            )));
        }
        let mut batch = Entries::default();
        let mut starts = false;
        for op in ops {
            match op {
                Op::Entry(entry) => {
                    let bytes = entry
                        .to_bytes()
                        .map_err(|e| Failure::Fatal(PgStoreError::Encode(e.to_string())))?;
                    head.last_seq += 1;
                    batch.push(shard, head.last_seq as i64, bytes, &mut written);
                }
                Op::Checkpoint { snapshot, start } => {
                    batch.flush(&mut tx, &st.entries, shard)?;
                    let keep = if *start { 1 } else { keep };
                    checkpoint_whole(&mut tx, st, shard, &mut head, snapshot, keep, &mut written)?;
                    starts |= *start;
                    if !*start && first {
                        self.crash.in_checkpoint();
                    }
                }
                Op::Parts(parts) => {
                    batch.flush(&mut tx, &st.entries, shard)?;
                    checkpoint_parts(&mut tx, st, shard, &mut head, parts, &mut written)?;
                    if first {
                        self.crash.in_checkpoint();
                    }
                }
            }
        }
        batch.flush(&mut tx, &st.entries, shard)?;
        debug_assert_eq!(head, plan.after, "the plan and the writes agree");
        if !starts && first {
            self.crash.in_commit();
        }
        self.sent = written;
        self.committing = true;
        tx.commit()?;
        self.committing = false;
        let written = std::mem::take(&mut self.sent);
        self.committed(plan, &written);
        Ok(())
    }

    /// Lets go of the writer's lock and closes the connection: the writer is done.
    pub(crate) fn close(&mut self) {
        if let Some(mut client) = self.client.take()
            && !self.lease
        {
            // A lost connection's session lets go of the lock when it ends.
            let _ = crate::schema::unlock(&mut client, self.shard);
        }
        self.statements = None;
    }

    /// Takes in a batch that is committed: its head and what it wrote.
    pub(crate) fn committed(&mut self, plan: &Plan, written: &WriteStats) {
        self.head = plan.after;
        self.written
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .add(written);
    }
}

/// The error for a head row that no longer has this writer's epoch.
fn fenced(tx: &mut Transaction<'_>, address: &Address, shard: i32, ours: i64) -> PgStoreError {
    let found = tx
        .query_opt("SELECT epoch FROM spool.head WHERE shard = $1", &[&shard])
        .ok()
        .flatten()
        .and_then(|row| row.try_get::<_, i64>(0).ok())
        .unwrap_or(0);
    PgStoreError::Fenced {
        what: address.name.clone(),
        ours,
        found,
    }
}

/// Journal entries waiting to be inserted, as the three arrays of one statement.
#[derive(Default)]
struct Entries {
    seqs: Vec<i64>,
    bodies: Vec<Vec<u8>>,
    sums: Vec<i64>,
}

impl Entries {
    fn push(&mut self, shard: i32, seq: i64, body: Vec<u8>, written: &mut WriteStats) {
        written.entries += 1;
        written.entry_bytes += body.len() as u64;
        written.row_bytes += body.len() as u64;
        self.sums.push(sum::entry(shard, seq, &body));
        self.seqs.push(seq);
        self.bodies.push(body);
    }

    /// Inserts the entries waiting, in one statement.
    fn flush(
        &mut self,
        tx: &mut Transaction<'_>,
        insert: &Statement,
        shard: i32,
    ) -> Result<(), postgres::Error> {
        if self.seqs.is_empty() {
            return Ok(());
        }
        tx.execute(insert, &[&shard, &self.seqs, &self.bodies, &self.sums])?;
        *self = Entries::default();
        Ok(())
    }
}

/// Inserts checkpoint `head.checkpoint + 1`'s row after `head.last_seq`.
fn insert_checkpoint(
    tx: &mut Transaction<'_>,
    st: &Statements,
    shard: i32,
    head: &mut Head,
    parts: bool,
    body: &[u8],
    written: &mut WriteStats,
) -> Result<i64, postgres::Error> {
    head.checkpoint += 1;
    let id = head.checkpoint as i64;
    let last_seq = head.last_seq as i64;
    let len = body.len() as i64;
    written.checkpoints += 1;
    written.row_bytes += body.len() as u64;
    let check = sum::checkpoint(shard, id, last_seq, parts, len, body);
    tx.execute(
        &st.checkpoint,
        &[&shard, &id, &last_seq, &parts, &len, &body, &check],
    )?;
    Ok(id)
}

/// Writes a whole checkpoint: its row, no task rows, and drops the checkpoints beyond
/// the last `keep` with the entries no kept one needs.
fn checkpoint_whole(
    tx: &mut Transaction<'_>,
    st: &Statements,
    shard: i32,
    head: &mut Head,
    snapshot: &[u8],
    keep: usize,
    written: &mut WriteStats,
) -> Result<(), postgres::Error> {
    written.snapshot_bytes += snapshot.len() as u64;
    let id = insert_checkpoint(tx, st, shard, head, false, snapshot, written)?;
    tx.execute(&st.clear_tasks, &[&shard])?;
    tx.execute(&st.drop_old, &[&shard, &id, &(keep as i64)])?;
    Ok(())
}

/// Writes a checkpoint in parts: its header as the row's body, its rows over the task
/// rows (all anew if the parts are full), and drops every checkpoint before it.
fn checkpoint_parts(
    tx: &mut Transaction<'_>,
    st: &Statements,
    shard: i32,
    head: &mut Head,
    parts: &SnapshotParts,
    written: &mut WriteStats,
) -> Result<(), postgres::Error> {
    written.snapshot_bytes +=
        (parts.header.len() + parts.rows.iter().map(|(_, r)| r.len()).sum::<usize>()) as u64;
    let id = insert_checkpoint(tx, st, shard, head, true, &parts.header, written)?;
    if parts.full {
        tx.execute(&st.clear_tasks, &[&shard])?;
    } else if !parts.removed.is_empty() {
        let removed: Vec<i64> = parts.removed.iter().map(|t| t.get() as i64).collect();
        tx.execute(&st.drop_tasks, &[&shard, &removed])?;
    }
    if !parts.rows.is_empty() {
        let mut tasks = Vec::with_capacity(parts.rows.len());
        let mut bodies = Vec::with_capacity(parts.rows.len());
        let mut sums = Vec::with_capacity(parts.rows.len());
        for (task, body) in &parts.rows {
            let task = task.get() as i64;
            written.task_rows += 1;
            written.row_bytes += body.len() as u64;
            sums.push(sum::task(shard, task, body));
            tasks.push(task);
            bodies.push(body.as_slice());
        }
        tx.execute(&st.put_tasks, &[&shard, &tasks, &bodies, &sums])?;
    }
    tx.execute(&st.drop_old, &[&shard, &id, &1i64])?;
    Ok(())
}
