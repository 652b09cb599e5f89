//! Writes: the writer's connection and what it keeps of the head, and the transaction
//! that writes a batch of entries and checkpoints — one statement per table, the head
//! row first, fenced by the writer's epoch. Run on the writer thread
//! ([`crate::writer`]).

use std::sync::{Arc, Mutex};

use postgres::{Client, Statement, Transaction};
use spool_core::SnapshotParts;
use spool_durable::{CrashCounter, History, SegmentCost, WriteStats};

use crate::address::Address;
use crate::error::PgStoreError;
use crate::options::PgOptions;
use crate::rows::Head;
use crate::sum;
use crate::versions::{At, Live, Rows, VersionStatements, live_now, write_rows};

/// One write in a transaction: an entry appended, or a checkpoint.
pub(crate) use spool_durable::Op;

/// The statements a transaction runs, prepared once per connection.
pub(crate) struct Statements {
    head: Statement,
    entries: Statement,
    checkpoint: Statement,
    versions: VersionStatements,
    kept: Statement,
    drop_old: Statement,
    drop_before_base: Statement,
    drop_old_versions: Statement,
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
                "INSERT INTO spool.checkpoints
                     (shard, id, last_seq, parts, len, body, sum, at, bytes, prior, base)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            )?,
            versions: VersionStatements::prepare(client)?,
            // What retention weighs: each checkpoint's wall time and sizes (no bodies).
            kept: client.prepare(
                "SELECT id, last_seq, parts, at, bytes, prior, base FROM spool.checkpoints
                 WHERE shard = $1 ORDER BY id",
            )?,
            // Drops the checkpoints $2 and the entries up to $3 (the last before the
            // oldest kept).
            drop_old: client.prepare(
                "WITH dropped AS (
                     DELETE FROM spool.checkpoints WHERE shard = $1 AND id = ANY($2::bigint[])
                 )
                 DELETE FROM spool.entries WHERE shard = $1 AND seq <= $3",
            )?,
            // Drops the task row versions before $2, the oldest kept checkpoint's base.
            drop_before_base: client
                .prepare("DELETE FROM spool.tasks WHERE shard = $1 AND since < $2")?,
            // While history is kept, also the versions no checkpoint from $2 (the
            // oldest kept) on reads: those a version from $3 (the oldest dropped) to $2
            // replaced, and the tombstones among these (the ones replaced at or
            // before $3 went when it became the oldest).
            drop_old_versions: client.prepare(
                "DELETE FROM spool.tasks t
                 USING (SELECT task, since, body IS NULL AS tombstone FROM spool.tasks
                        WHERE shard = $1 AND since >= $3 AND since <= $2) AS n
                 WHERE t.shard = $1 AND t.task = n.task
                   AND (t.since < n.since OR (t.since = n.since AND n.tombstone))",
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
    /// The checkpoints kept as of the last commit this writer made, as retention
    /// weighs them: read at the first checkpoint written (`None` until then).
    pub(crate) kept: Option<Vec<Kept>>,
    /// While history is kept, the live task rows and the versions the latest
    /// checkpoint reads, as of the last commit this writer made at checkpoint `.0`:
    /// what a rebase copies, and when, without reading the rows back.
    pub(crate) rows: Option<(u64, Live)>,
    /// The encoded bytes of the entries after the latest checkpoint, as of the last
    /// commit this writer made: the next checkpoint records them as the bytes of the
    /// segment before it.
    pub(crate) tail_bytes: u64,
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
        let mut keep = Keep {
            count: self.options.keep_checkpoints,
            history: self.options.history,
            now_ms: self.options.clock.now_ms(),
            prior: self.tail_bytes,
            kept: None,
            rows: None,
        };
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
                    keep.prior += bytes.len() as u64;
                    batch.push(shard, head.last_seq as i64, bytes, &mut written);
                }
                Op::Checkpoint { snapshot, start } => {
                    batch.flush(&mut tx, &st.entries, shard)?;
                    let how = Checkpoint {
                        shard,
                        start: *start,
                        parts: false,
                    };
                    let body = Body::Whole(snapshot);
                    if keep.kept.is_none() {
                        let kept = kept_now(&mut tx, st, shard, self.kept.as_ref(), self.head)?;
                        keep.kept = Some(kept);
                    }
                    if keep.rows.is_none() && !keep.history.is_off() {
                        let base = keep.base();
                        let cached = self.rows.take();
                        let at = self.head.checkpoint;
                        let rows = live_now(&mut tx, &st.versions, shard, cached, at, base)?;
                        keep.rows = Some(rows);
                    }
                    write_checkpoint(&mut tx, st, how, &mut head, body, &mut keep, &mut written)?;
                    keep.prior = 0;
                    starts |= *start;
                    if !*start && first {
                        self.crash.in_checkpoint();
                    }
                }
                Op::Parts(parts) => {
                    batch.flush(&mut tx, &st.entries, shard)?;
                    let how = Checkpoint {
                        shard,
                        start: false,
                        parts: true,
                    };
                    let body = Body::Parts(parts);
                    if keep.kept.is_none() {
                        let kept = kept_now(&mut tx, st, shard, self.kept.as_ref(), self.head)?;
                        keep.kept = Some(kept);
                    }
                    if keep.rows.is_none() && !keep.history.is_off() {
                        let base = keep.base();
                        let cached = self.rows.take();
                        let at = self.head.checkpoint;
                        let rows = live_now(&mut tx, &st.versions, shard, cached, at, base)?;
                        keep.rows = Some(rows);
                    }
                    write_checkpoint(&mut tx, st, how, &mut head, body, &mut keep, &mut written)?;
                    keep.prior = 0;
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
        self.tail_bytes = keep.prior;
        if keep.kept.is_some() {
            self.kept = keep.kept;
        }
        if let Some(rows) = keep.rows {
            self.rows = Some((plan.after.checkpoint, rows));
        }
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

/// What a checkpoint keeps of the ones before it.
struct Keep {
    /// How many checkpoints to keep at least (whole ones; one in parts keeps itself).
    count: usize,
    /// How much history to keep.
    history: History,
    /// The wall time of the transaction, in milliseconds since the Unix epoch.
    now_ms: u64,
    /// The encoded bytes of the entries since the last checkpoint.
    prior: u64,
    /// The checkpoints kept, as of the last op: read (or copied from the writer's) at
    /// the batch's first checkpoint.
    kept: Option<Vec<Kept>>,
    /// While history is kept, the task rows as of the last op (see [`Writer::rows`]).
    rows: Option<Live>,
}

impl Keep {
    /// The latest checkpoint's base (0: none is kept).
    fn base(&self) -> i64 {
        self.kept
            .as_ref()
            .and_then(|kept| kept.last())
            .map_or(0, |k| k.base)
    }
}

/// Which checkpoint is written.
#[derive(Clone, Copy)]
struct Checkpoint {
    shard: i32,
    /// It starts a new journal: without history nothing before it is kept; with
    /// history, the segments before it are kept as for any checkpoint.
    start: bool,
    /// It is in parts.
    parts: bool,
}

impl Checkpoint {
    /// Whether the task rows it replaces are kept for the checkpoints before it.
    fn history(self, keep: &Keep) -> bool {
        !keep.history.is_off()
    }
}

/// What a checkpoint writes.
#[derive(Clone, Copy)]
enum Body<'a> {
    /// A whole snapshot, encoded.
    Whole(&'a [u8]),
    /// A header and the rows of the tasks that changed.
    Parts(&'a SnapshotParts),
}

/// Writes checkpoint `head.checkpoint + 1` after `head.last_seq`: its task rows (none
/// for a whole one; see [`crate::versions`]), its row, and drops what `keep` does not
/// keep — the oldest checkpoints, the entries no kept one needs, the task row versions
/// no kept checkpoint reads. Without history only the latest checkpoint in parts can
/// be read (the versions it replaces are deleted), so one drops every checkpoint
/// before it; with history the versions stay for the checkpoints that read them.
fn write_checkpoint(
    tx: &mut Transaction<'_>,
    st: &Statements,
    how: Checkpoint,
    head: &mut Head,
    body: Body<'_>,
    keep: &mut Keep,
    written: &mut WriteStats,
) -> Result<(), postgres::Error> {
    let shard = how.shard;
    let (blob, bytes) = match body {
        Body::Whole(snapshot) => (snapshot, snapshot.len()),
        Body::Parts(parts) => (
            parts.header.as_slice(),
            parts.header.len() + parts.rows.iter().map(|(_, r)| r.len()).sum::<usize>(),
        ),
    };
    written.snapshot_bytes += bytes as u64;
    head.checkpoint += 1;
    let id = head.checkpoint as i64;
    let fields = sum::CheckpointFields {
        last_seq: head.last_seq as i64,
        parts: how.parts,
        len: blob.len() as i64,
        at: keep.now_ms as i64,
        bytes: bytes as i64,
        prior: keep.prior as i64,
        base: id,
    };
    written.checkpoints += 1;
    written.row_bytes += blob.len() as u64;
    let mut kept = keep.kept.take().unwrap_or_default();
    let before = kept.last().map(|k| k.base);
    let mut rows = keep.rows.take();
    let live = if how.history(keep) {
        rows.as_mut()
    } else {
        None
    };
    let task_rows = match body {
        Body::Whole(_) => Rows::Whole,
        Body::Parts(parts) => Rows::Parts(parts),
    };
    let at = At { shard, id };
    let base = write_rows(tx, &st.versions, at, task_rows, before, live, written)?;
    keep.rows = rows;
    let fields = sum::CheckpointFields { base, ..fields };
    let check = sum::checkpoint(shard, id, fields, blob);
    tx.execute(
        &st.checkpoint,
        &[
            &shard,
            &id,
            &fields.last_seq,
            &fields.parts,
            &fields.len,
            &blob,
            &check,
            &fields.at,
            &fields.bytes,
            &fields.prior,
            &fields.base,
        ],
    )?;
    kept.push(Kept {
        id,
        last_seq: fields.last_seq,
        parts: how.parts,
        at: keep.now_ms,
        bytes: bytes as u64,
        prior: keep.prior,
        base,
    });
    let dropped = drop_old(tx, st, how, *head, keep, &mut kept);
    keep.kept = Some(kept);
    dropped
}

/// What retention weighs of a kept checkpoint: kept in memory from one batch to the
/// next ([`Writer::kept`]), so a checkpoint reads no rows to decide what it drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Kept {
    id: i64,
    /// The last entry before it.
    last_seq: i64,
    /// Whether it is in parts.
    parts: bool,
    /// Its wall time, in milliseconds since the Unix epoch.
    at: u64,
    /// The bytes it was given.
    bytes: u64,
    /// The encoded bytes of the entries of the segment before it.
    prior: u64,
    /// The checkpoint its task rows start from.
    base: i64,
}

/// The checkpoints kept as of `head` (the last commit): `cached` if it ends at
/// `head`'s checkpoint, else read from the rows (numbers only: a damaged one reads as
/// 0, and the row's own check finds it when it is read).
fn kept_now(
    tx: &mut Transaction<'_>,
    st: &Statements,
    shard: i32,
    cached: Option<&Vec<Kept>>,
    head: Head,
) -> Result<Vec<Kept>, postgres::Error> {
    if let Some(kept) = cached
        && kept.last().map_or(0, |k| k.id) == head.checkpoint as i64
    {
        return Ok(kept.clone());
    }
    let number = |row: &postgres::Row, index: usize| -> u64 {
        row.try_get::<_, i64>(index)
            .ok()
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0)
    };
    Ok(tx
        .query(&st.kept, &[&shard])?
        .iter()
        .map(|row| Kept {
            id: row.try_get(0).unwrap_or(0),
            last_seq: row.try_get(1).unwrap_or(0),
            parts: row.try_get(2).unwrap_or(false),
            at: number(row, 3),
            bytes: number(row, 4),
            prior: number(row, 5),
            base: row.try_get(6).unwrap_or(0),
        })
        .collect())
}

/// Drops the checkpoints `keep` does not keep — beyond the last `keep.count` (one for a
/// checkpoint in parts) and outside the history kept, and, without history, those in
/// parts other than the latest (which cannot be read any more) — with the entries no
/// kept one needs and the kept task rows no kept one reads, and takes them out of
/// `kept` (the checkpoints kept, the new one last).
fn drop_old(
    tx: &mut Transaction<'_>,
    st: &Statements,
    how: Checkpoint,
    head: Head,
    keep: &Keep,
    kept: &mut Vec<Kept>,
) -> Result<(), postgres::Error> {
    let shard = how.shard;
    let costs: Vec<SegmentCost> = kept
        .iter()
        .enumerate()
        .map(|(index, row)| {
            let next = kept.get(index + 1);
            SegmentCost {
                ended_ms: next.map_or(keep.now_ms, |next| next.at),
                bytes: row.bytes + next.map_or(0, |next| next.prior),
            }
        })
        .collect();
    let latest = kept.len().saturating_sub(1);
    let count = if how.parts || how.start {
        1
    } else {
        keep.count
    };
    let kept_from = if how.start && !how.history(keep) {
        latest
    } else {
        kept.len()
            .saturating_sub(count)
            .min(keep.history.keep_from(&costs, keep.now_ms))
    };
    let history = how.history(keep);
    let mut dropped = Vec::new();
    let mut dropped_base = i64::MAX;
    let mut index = 0;
    kept.retain(|row| {
        let unreadable = row.parts && row.id != head.checkpoint as i64 && !history;
        let drop = index < kept_from || unreadable;
        index += 1;
        if drop {
            dropped.push(row.id);
            dropped_base = dropped_base.min(row.base);
        }
        !drop
    });
    if dropped.is_empty() {
        return Ok(());
    }
    let latest = head.checkpoint as i64;
    let (oldest, last_seq, base) = kept
        .first()
        .map_or((latest, head.last_seq as i64, latest), |k| {
            (k.id, k.last_seq, k.base)
        });
    // Versions before the oldest kept checkpoint's base are there only if a dropped
    // checkpoint read from an older base: otherwise they went with an earlier drop.
    tx.execute(&st.drop_old, &[&shard, &dropped, &last_seq])?;
    if dropped_base < base {
        tx.execute(&st.drop_before_base, &[&shard, &base])?;
    }
    if history {
        let first = dropped.iter().copied().min().unwrap_or(oldest);
        tx.execute(&st.drop_old_versions, &[&shard, &oldest, &first])?;
    }
    Ok(())
}
