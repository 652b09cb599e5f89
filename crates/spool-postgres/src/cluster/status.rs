//! The cluster at one moment, for `spool cluster status`: every shard's lease, inbox
//! and lag, and every node.

use postgres::IsolationLevel;

use super::Cluster;
use super::error::ClusterError;
use super::types::{ClusterStatus, NodeStatus, ShardStatus, millis};

impl Cluster {
    /// Each shard whose lease is held and unexpired, by PostgreSQL's clock, with its
    /// owner's name and address, lowest shard first: who to ask for a shard, in one
    /// light read.
    ///
    /// # Errors
    /// [`ClusterError::Postgres`] if the read failed.
    pub fn owners(&self) -> Result<Vec<(u32, String, String)>, ClusterError> {
        self.run(|client| {
            let rows = client.query(
                "SELECT s.shard, s.owner, n.addr FROM spool.shards s
                 JOIN spool.nodes n ON n.node = s.owner
                 WHERE s.expires_at > now()
                 ORDER BY s.shard",
                &[],
            )?;
            rows.iter()
                .map(|row| {
                    let shard: i32 = row.try_get(0)?;
                    Ok((shard.unsigned_abs(), row.try_get(1)?, row.try_get(2)?))
                })
                .collect()
        })
    }

    /// Every shard (owner, epoch, lease age and expiry by PostgreSQL's clock, inbox
    /// depth, journal entries since its latest checkpoint) and every node (address,
    /// heartbeat age, draining, shards held), read in one transaction.
    ///
    /// # Errors
    /// [`ClusterError::Postgres`] if the read failed.
    pub fn status(&self) -> Result<ClusterStatus, ClusterError> {
        self.run(|client| {
            let mut tx = client
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let rows = tx.query(
                "SELECT s.shard, s.owner, s.epoch,
                     (extract(epoch FROM (now() - s.taken_at)) * 1000)::bigint,
                     (extract(epoch FROM (s.expires_at - now())) * 1000)::bigint,
                     (SELECT count(*) FROM spool.inbox i WHERE i.shard = s.shard),
                     coalesce(h.last_seq - coalesce((SELECT c.last_seq FROM spool.checkpoints c
                         WHERE c.shard = h.shard AND c.id = h.checkpoint), 0), 0)
                 FROM spool.shards s LEFT JOIN spool.head h ON h.shard = s.shard
                 ORDER BY s.shard",
                &[],
            )?;
            let mut shards = Vec::with_capacity(rows.len());
            for row in rows {
                let shard: i32 = row.try_get(0)?;
                let owner: Option<String> = row.try_get(1)?;
                let epoch: i64 = row.try_get(2)?;
                let age: Option<i64> = row.try_get(3)?;
                let expires: Option<i64> = row.try_get(4)?;
                let inbox: i64 = row.try_get(5)?;
                let lag: i64 = row.try_get(6)?;
                let expires = owner.as_ref().and(expires);
                shards.push(ShardStatus {
                    shard: shard.unsigned_abs(),
                    epoch: epoch.unsigned_abs(),
                    lease_age: millis(owner.as_ref().and(age)),
                    expires_in: millis(expires),
                    expired: expires.is_some_and(|ms| ms <= 0),
                    owner,
                    inbox: inbox.unsigned_abs(),
                    lag: lag.unsigned_abs(),
                });
            }
            let rows = tx.query(
                "SELECT n.node, n.addr,
                     (extract(epoch FROM (now() - n.started_at)) * 1000)::bigint,
                     (extract(epoch FROM (now() - n.heartbeat_at)) * 1000)::bigint,
                     n.draining,
                     coalesce(array_agg(s.shard ORDER BY s.shard)
                         FILTER (WHERE s.shard IS NOT NULL), '{}')
                 FROM spool.nodes n
                 LEFT JOIN spool.shards s ON s.owner = n.node AND s.expires_at > now()
                 GROUP BY n.node ORDER BY n.node",
                &[],
            )?;
            let mut nodes = Vec::with_capacity(rows.len());
            for row in rows {
                let held: Vec<i32> = row.try_get(5)?;
                nodes.push(NodeStatus {
                    node: row.try_get(0)?,
                    addr: row.try_get(1)?,
                    up_for: millis(row.try_get(2)?).unwrap_or_default(),
                    heartbeat_age: millis(row.try_get(3)?).unwrap_or_default(),
                    draining: row.try_get(4)?,
                    shards: held.into_iter().map(i32::unsigned_abs).collect(),
                });
            }
            tx.commit()?;
            Ok(ClusterStatus { shards, nodes })
        })
    }
}
