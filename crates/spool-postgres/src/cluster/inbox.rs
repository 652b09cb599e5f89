//! Each shard's inbox — submissions a node took for a shard another node owns — and
//! the idempotency keys bound to shards.

use std::collections::BTreeSet;
use std::time::Duration;

use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;

use super::error::ClusterError;
use super::types::{InboxItem, KeyBinding, Taken, TakenOutcome};
use super::{Cluster, INBOX_CHANNEL};
use crate::sum;

/// `key`, if it is one.
fn keyed(key: &str) -> Result<&str, ClusterError> {
    if key.is_empty() {
        return Err(ClusterError::Empty {
            what: "an idempotency key",
        });
    }
    Ok(key)
}

impl Cluster {
    /// Puts a submission in `shard`'s inbox, with its idempotency `key`, and announces
    /// it on [`INBOX_CHANNEL`] (payload: the shard's number) in the same transaction:
    /// when this returns, the submission is durable and the owner is woken. Returns the
    /// item's id.
    ///
    /// # Errors
    /// [`ClusterError::NoShard`] for a shard the cluster does not have,
    /// [`ClusterError::Empty`] for an empty key, [`ClusterError::Postgres`] if the write
    /// failed (nothing is enqueued then).
    pub fn enqueue(&self, shard: u32, key: &str, body: &[u8]) -> Result<u64, ClusterError> {
        let number = self.check_shard(shard)?;
        let key = keyed(key)?;
        self.run(|client| {
            let mut tx = client.transaction()?;
            let id: i64 = tx
                .query_one(
                    "SELECT nextval(pg_get_serial_sequence('spool.inbox', 'id'))",
                    &[],
                )?
                .try_get(0)?;
            tx.execute(
                "INSERT INTO spool.inbox (id, shard, key, body, sum) VALUES ($1, $2, $3, $4, $5)",
                &[
                    &id,
                    &number,
                    &key,
                    &body,
                    &sum::inbox(number, id, key, body),
                ],
            )?;
            tx.execute(
                "SELECT pg_notify($1, $2)",
                &[&INBOX_CHANNEL, &shard.to_string()],
            )?;
            tx.commit()?;
            Ok(id.unsigned_abs())
        })
    }

    /// The first `limit` submissions waiting in `shard`'s inbox, in the order they were
    /// enqueued, each checked against its checksum. They stay there until
    /// [`ack`](Cluster::ack)ed.
    ///
    /// # Errors
    /// [`ClusterError::NoShard`] for a shard the cluster does not have,
    /// [`ClusterError::Corrupt`] for a row that does not match its checksum,
    /// [`ClusterError::Postgres`] if the read failed.
    pub fn pending(&self, shard: u32, limit: u32) -> Result<Vec<InboxItem>, ClusterError> {
        let number = self.check_shard(shard)?;
        self.run(|client| {
            let rows = client.query(
                "SELECT id, key, body, sum FROM spool.inbox WHERE shard = $1 ORDER BY id LIMIT $2",
                &[&number, &i64::from(limit)],
            )?;
            let mut items = Vec::with_capacity(rows.len());
            for row in rows {
                let id: i64 = row.try_get(0)?;
                let key: String = row.try_get(1)?;
                let body: Vec<u8> = row.try_get(2)?;
                let check: i64 = row.try_get(3)?;
                if sum::inbox(number, id, &key, &body) != check {
                    return Err(ClusterError::Corrupt(format!(
                        "inbox item {id} of shard {shard} does not match its checksum"
                    )));
                }
                items.push(InboxItem {
                    id: id.unsigned_abs(),
                    shard,
                    key,
                    body,
                });
            }
            Ok(items)
        })
    }

    /// Deletes the items `ids` from `shard`'s inbox, once what they submitted is
    /// durable in the shard's journal. Returns how many were deleted (ids not there,
    /// or of another shard, are passed over).
    ///
    /// # Errors
    /// [`ClusterError::NoShard`] for a shard the cluster does not have,
    /// [`ClusterError::Postgres`] if the write failed.
    pub fn ack(&self, shard: u32, ids: &[u64]) -> Result<u64, ClusterError> {
        let number = self.check_shard(shard)?;
        let ids: Vec<i64> = ids
            .iter()
            .filter_map(|&id| i64::try_from(id).ok())
            .collect();
        if ids.is_empty() {
            return Ok(0);
        }
        self.run(|client| {
            Ok(client.execute(
                "DELETE FROM spool.inbox WHERE shard = $1 AND id = ANY($2::bigint[])",
                &[&number, &ids],
            )?)
        })
    }

    /// Records with their keys what became of the items `taken` (the task each made
    /// or found, or why it was refused), and deletes them from `shard`'s inbox, in one
    /// transaction, once what they submitted is durable in the shard's journal: the
    /// node that took a submission learns its task from
    /// [`key_binding`](Cluster::key_binding). Returns how many items were deleted.
    ///
    /// # Errors
    /// [`ClusterError::NoShard`] for a shard the cluster does not have,
    /// [`ClusterError::Postgres`] if the write failed (nothing is recorded then).
    pub fn ack_taken(&self, shard: u32, taken: &[Taken]) -> Result<u64, ClusterError> {
        let number = self.check_shard(shard)?;
        if taken.is_empty() {
            return Ok(0);
        }
        let mut ids = Vec::with_capacity(taken.len());
        let mut keys = Vec::with_capacity(taken.len());
        let mut tasks = Vec::with_capacity(taken.len());
        let mut outcomes = Vec::with_capacity(taken.len());
        let mut refusals = Vec::with_capacity(taken.len());
        for item in taken {
            let Ok(id) = i64::try_from(item.item) else {
                continue;
            };
            ids.push(id);
            keys.push(item.key.as_str());
            let (task, outcome, refused) = match &item.outcome {
                TakenOutcome::Task(task) => (Some(*task), "made", None),
                TakenOutcome::Existing(task) => (Some(*task), "existing", None),
                TakenOutcome::KeyReused(task) => (Some(*task), "reused", None),
                TakenOutcome::Refused(reason) => (None, "refused", Some(reason.as_str())),
            };
            tasks.push(task.and_then(|task| i64::try_from(task).ok()));
            outcomes.push(outcome);
            refusals.push(refused);
        }
        self.run(|client| {
            let mut tx = client.transaction()?;
            tx.execute(
                "UPDATE spool.keys AS k \
                 SET item = t.item, task = t.task, outcome = t.outcome, refused = t.refused \
                 FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[]) \
                 AS t(key, item, task, outcome, refused) WHERE k.key = t.key AND k.shard = $6",
                &[&keys, &ids, &tasks, &outcomes, &refusals, &number],
            )?;
            let deleted = tx.execute(
                "DELETE FROM spool.inbox WHERE shard = $1 AND id = ANY($2::bigint[])",
                &[&number, &ids],
            )?;
            tx.commit()?;
            Ok(deleted)
        })
    }

    /// Where `key` is bound, and what the latest of its inbox items that its shard's
    /// owner took became ([`ack_taken`](Cluster::ack_taken)), with that item's id;
    /// `None` for a key never bound.
    ///
    /// # Errors
    /// [`ClusterError::Postgres`] if the read failed.
    pub fn key_binding(&self, key: &str) -> Result<Option<KeyBinding>, ClusterError> {
        self.run(|client| {
            let Some(row) = client.query_opt(
                "SELECT shard, item, task, outcome, refused FROM spool.keys WHERE key = $1",
                &[&key],
            )?
            else {
                return Ok(None);
            };
            let shard: i32 = row.try_get(0)?;
            let item: Option<i64> = row.try_get(1)?;
            let task: Option<i64> = row.try_get(2)?;
            let outcome: Option<String> = row.try_get(3)?;
            let refused: Option<String> = row.try_get(4)?;
            let task = task.map(i64::unsigned_abs);
            let outcome = match (item, outcome.as_deref(), task) {
                (Some(item), Some("made"), Some(task)) => {
                    Some((item.unsigned_abs(), TakenOutcome::Task(task)))
                }
                (Some(item), Some("existing"), Some(task)) => {
                    Some((item.unsigned_abs(), TakenOutcome::Existing(task)))
                }
                (Some(item), Some("reused"), Some(task)) => {
                    Some((item.unsigned_abs(), TakenOutcome::KeyReused(task)))
                }
                (Some(item), Some("refused"), _) => Some((
                    item.unsigned_abs(),
                    TakenOutcome::Refused(refused.unwrap_or_default()),
                )),
                _ => None,
            };
            Ok(Some(KeyBinding {
                shard: shard.unsigned_abs(),
                outcome,
            }))
        })
    }

    /// A connection of its own listening on [`INBOX_CHANNEL`]: what wakes a shard's
    /// owner when a submission is enqueued for it.
    ///
    /// # Errors
    /// [`ClusterError::Store`] if the server cannot be reached,
    /// [`ClusterError::Postgres`] if `LISTEN` failed.
    pub fn listen(&self) -> Result<InboxListener, ClusterError> {
        let mut client = self.address.connect()?;
        client.batch_execute(&format!("LISTEN {INBOX_CHANNEL}"))?;
        Ok(InboxListener { client })
    }

    /// Binds `key` to `shard` unless it is bound already, and returns the shard it is
    /// bound to: the shard of its first submission, whichever node took it, for ever.
    ///
    /// # Errors
    /// [`ClusterError::NoShard`] for a shard the cluster does not have,
    /// [`ClusterError::Empty`] for an empty key, [`ClusterError::Postgres`] if the write
    /// failed.
    pub fn bind_key(&self, key: &str, shard: u32) -> Result<u32, ClusterError> {
        let number = self.check_shard(shard)?;
        let key = keyed(key)?;
        self.run(|client| {
            let mut tx = client.transaction()?;
            tx.execute(
                "INSERT INTO spool.keys (key, shard) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                &[&key, &number],
            )?;
            let bound: i32 = tx
                .query_one("SELECT shard FROM spool.keys WHERE key = $1", &[&key])?
                .try_get(0)?;
            tx.commit()?;
            Ok(bound.unsigned_abs())
        })
    }

    /// The shard `key` is bound to, if it is.
    ///
    /// # Errors
    /// [`ClusterError::Postgres`] if the read failed.
    pub fn key_shard(&self, key: &str) -> Result<Option<u32>, ClusterError> {
        self.run(|client| {
            let row = client.query_opt("SELECT shard FROM spool.keys WHERE key = $1", &[&key])?;
            row.map(|row| row.try_get::<_, i32>(0).map(i32::unsigned_abs))
                .transpose()
                .map_err(ClusterError::from)
        })
    }
}

/// A connection listening for submissions to the shards' inboxes
/// ([`Cluster::listen`]).
pub struct InboxListener {
    client: Client,
}

impl std::fmt::Debug for InboxListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxListener").finish_non_exhaustive()
    }
}

impl InboxListener {
    /// Waits up to `timeout` for a submission to be announced, and returns the shards
    /// announced since the last call, lowest first (empty if none came in time).
    /// Notifications are a wake-up only: an owner also polls its inbox.
    ///
    /// # Errors
    /// [`ClusterError::Postgres`] if the connection failed: listen again on a new one.
    pub fn wait(&mut self, timeout: Duration) -> Result<Vec<u32>, ClusterError> {
        let mut shards = BTreeSet::new();
        let mut notifications = self.client.notifications();
        let mut add = |payload: &str| {
            if let Ok(shard) = payload.parse::<u32>() {
                shards.insert(shard);
            }
        };
        if let Some(first) = notifications.timeout_iter(timeout).next()? {
            add(first.payload());
        }
        let mut more = notifications.iter();
        while let Some(next) = more.next()? {
            add(next.payload());
        }
        Ok(shards.into_iter().collect())
    }
}
