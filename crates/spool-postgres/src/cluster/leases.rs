//! The nodes and the shards' leases: joining, heartbeats, taking, releasing and
//! draining. Every time is PostgreSQL's `now()`.

use std::time::Duration;

use postgres::Row;

use super::Cluster;
use super::error::ClusterError;
use super::types::{Lease, millis};

/// The columns a statement returning leases gives, in [`lease`]'s order.
const LEASE_COLUMNS: &str =
    "shard, epoch, (extract(epoch FROM (expires_at - now())) * 1000)::bigint";

/// A lease from a row of [`LEASE_COLUMNS`].
fn lease(row: &Row) -> Result<Lease, ClusterError> {
    let shard: i32 = row.try_get(0)?;
    let epoch: i64 = row.try_get(1)?;
    let expires_in: Option<i64> = row.try_get(2)?;
    Ok(Lease {
        shard: u32::try_from(shard)
            .map_err(|_| ClusterError::Corrupt(format!("a lease of shard {shard}")))?,
        epoch: u64::try_from(epoch).map_err(|_| {
            ClusterError::Corrupt(format!("shard {shard}'s lease has epoch {epoch}"))
        })?,
        expires_in: millis(expires_in).unwrap_or(Duration::ZERO),
    })
}

/// Leases from rows, lowest shard first.
fn leases(rows: &[Row]) -> Result<Vec<Lease>, ClusterError> {
    let mut leases = rows.iter().map(lease).collect::<Result<Vec<_>, _>>()?;
    leases.sort_by_key(|lease| lease.shard);
    Ok(leases)
}

/// `duration` in whole milliseconds, as the statements take it (at most about 24 days).
fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis())
        .map_or(i64::from(i32::MAX), |ms| ms.min(i64::from(i32::MAX)))
}

/// `node`, if it is a name.
fn named(node: &str) -> Result<&str, ClusterError> {
    if node.is_empty() {
        return Err(ClusterError::Empty {
            what: "a node's name",
        });
    }
    Ok(node)
}

impl Cluster {
    /// Records `node` (reachable at `addr`) as a member, started and heard from now,
    /// not draining; a node that joined before under this name (a restart) is recorded
    /// anew. Its leases, if any are left, stay its own.
    ///
    /// # Errors
    /// [`ClusterError::Empty`] for an empty name; [`ClusterError::Postgres`] if the
    /// write failed.
    pub fn join(&self, node: &str, addr: &str) -> Result<(), ClusterError> {
        let node = named(node)?;
        self.run(|client| {
            client.execute(
                "INSERT INTO spool.nodes (node, addr, started_at, heartbeat_at, draining)
                 VALUES ($1, $2, now(), now(), false)
                 ON CONFLICT (node) DO UPDATE SET addr = EXCLUDED.addr,
                     started_at = EXCLUDED.started_at, heartbeat_at = EXCLUDED.heartbeat_at,
                     draining = false",
                &[&node, &addr],
            )?;
            Ok(())
        })
    }

    /// Records that `node` is alive, and renews every lease it holds that has not
    /// expired, to expire `ttl` from now. Returns the leases it holds after, lowest
    /// shard first: a shard missing from them (taken by another node, or expired before
    /// this renewal) is lost, and must be stopped; a lease with another epoch than the
    /// node's writer has is not the writer's.
    ///
    /// # Errors
    /// [`ClusterError::UnknownNode`] if `node` has not joined (or has left);
    /// [`ClusterError::Postgres`] if the write failed (nothing is renewed then).
    pub fn heartbeat(&self, node: &str, ttl: Duration) -> Result<Vec<Lease>, ClusterError> {
        let node = named(node)?;
        self.run(|client| {
            let mut tx = client.transaction()?;
            let known = tx.execute(
                "UPDATE spool.nodes SET heartbeat_at = now() WHERE node = $1",
                &[&node],
            )?;
            if known == 0 {
                return Err(ClusterError::UnknownNode(node.to_owned()));
            }
            let rows = tx.query(
                &format!(
                    "UPDATE spool.shards SET expires_at = now() + $2::bigint * interval '1 millisecond',
                         renewed_at = now()
                     WHERE owner = $1 AND expires_at > now()
                     RETURNING {LEASE_COLUMNS}"
                ),
                &[&node, &ms(ttl)],
            )?;
            let held = leases(&rows)?;
            tx.commit()?;
            Ok(held)
        })
    }

    /// Takes up to `max` shards for `node`: those with no owner or an expired lease,
    /// lowest first, skipping any another node is taking at this moment (`FOR UPDATE
    /// SKIP LOCKED`). Each taken lease has the next epoch (above every lease and
    /// writer of the shard before) and expires `ttl` from now. A draining node takes
    /// nothing. Returns what was taken, lowest shard first.
    ///
    /// # Errors
    /// [`ClusterError::Empty`] for an empty name; [`ClusterError::Postgres`] if the
    /// write failed (nothing is taken then).
    pub fn take(&self, node: &str, max: u32, ttl: Duration) -> Result<Vec<Lease>, ClusterError> {
        let node = named(node)?;
        if max == 0 {
            return Ok(Vec::new());
        }
        self.run(|client| {
            let mut tx = client.transaction()?;
            let rows = tx.query(
                "WITH free AS (
                         SELECT shard FROM spool.shards
                         WHERE (owner IS NULL OR expires_at IS NULL OR expires_at <= now())
                           AND NOT EXISTS (SELECT 1 FROM spool.nodes WHERE node = $1 AND draining)
                         ORDER BY shard LIMIT $2
                         FOR UPDATE SKIP LOCKED
                     )
                     UPDATE spool.shards s
                     SET owner = $1,
                         epoch = greatest(s.epoch,
                             coalesce((SELECT h.epoch FROM spool.head h WHERE h.shard = s.shard), 0)) + 1,
                         expires_at = now() + $3::bigint * interval '1 millisecond',
                         taken_at = now(), renewed_at = now()
                     FROM free WHERE s.shard = free.shard
                     RETURNING s.shard, s.epoch,
                         (extract(epoch FROM (s.expires_at - now())) * 1000)::bigint",
                &[&node, &i64::from(max), &ms(ttl)],
            )?;
            let taken = leases(&rows)?;
            tx.commit()?;
            Ok(taken)
        })
    }

    /// Lets go of `lease` (its shard's runtime stopped cleanly first): the shard has no
    /// owner, and any node may take it at once. Returns whether it was released:
    /// `false` if `node` no longer held it with this epoch.
    ///
    /// # Errors
    /// [`ClusterError::Postgres`] if the write failed.
    pub fn release(&self, node: &str, lease: &Lease) -> Result<bool, ClusterError> {
        let node = named(node)?;
        let shard = i32::try_from(lease.shard).unwrap_or(i32::MAX);
        let epoch = i64::try_from(lease.epoch).unwrap_or(i64::MAX);
        self.run(|client| {
            let changed = client.execute(
                "UPDATE spool.shards SET owner = NULL, expires_at = NULL, taken_at = NULL,
                     renewed_at = NULL
                 WHERE shard = $1 AND owner = $2 AND epoch = $3",
                &[&shard, &node, &epoch],
            )?;
            Ok(changed == 1)
        })
    }

    /// Lets go of every lease `node` holds (its runtimes stopped first), expired or
    /// not. Returns the shards released, lowest first.
    ///
    /// # Errors
    /// [`ClusterError::Postgres`] if the write failed.
    pub fn release_all(&self, node: &str) -> Result<Vec<u32>, ClusterError> {
        let node = named(node)?;
        self.run(|client| release_all(client, node))
    }

    /// Lets go of every lease `node` holds and removes it from the nodes: what a node
    /// stopping for good does last. Returns the shards released, lowest first.
    ///
    /// # Errors
    /// [`ClusterError::Postgres`] if the write failed (nothing is changed then).
    pub fn leave(&self, node: &str) -> Result<Vec<u32>, ClusterError> {
        let node = named(node)?;
        self.run(|client| {
            let mut tx = client.transaction()?;
            let released = release_all(&mut tx, node)?;
            tx.execute("DELETE FROM spool.nodes WHERE node = $1", &[&node])?;
            tx.commit()?;
            Ok(released)
        })
    }

    /// Marks `node` as draining: it takes no more shards, and a node that sees the mark
    /// ([`draining`](Cluster::draining)) hands its shards over. The mark stays until
    /// the node joins again.
    ///
    /// # Errors
    /// [`ClusterError::UnknownNode`] if `node` has not joined.
    pub fn drain(&self, node: &str) -> Result<(), ClusterError> {
        let node = named(node)?;
        self.run(|client| {
            let changed = client.execute(
                "UPDATE spool.nodes SET draining = true WHERE node = $1",
                &[&node],
            )?;
            if changed == 0 {
                return Err(ClusterError::UnknownNode(node.to_owned()));
            }
            Ok(())
        })
    }

    /// Whether `node` is marked as draining.
    ///
    /// # Errors
    /// [`ClusterError::UnknownNode`] if `node` has not joined.
    pub fn draining(&self, node: &str) -> Result<bool, ClusterError> {
        let node = named(node)?;
        self.run(|client| {
            let row =
                client.query_opt("SELECT draining FROM spool.nodes WHERE node = $1", &[&node])?;
            match row {
                Some(row) => Ok(row.try_get(0)?),
                None => Err(ClusterError::UnknownNode(node.to_owned())),
            }
        })
    }

    /// The nodes heard from within `within` and not draining, by name: those a fair
    /// share ([`fair_share`](super::fair_share)) counts.
    ///
    /// # Errors
    /// [`ClusterError::Postgres`] if the read failed.
    pub fn live_nodes(&self, within: Duration) -> Result<Vec<String>, ClusterError> {
        self.run(|client| {
            let rows = client.query(
                "SELECT node FROM spool.nodes
                 WHERE NOT draining AND heartbeat_at > now() - $1::bigint * interval '1 millisecond'
                 ORDER BY node",
                &[&ms(within)],
            )?;
            rows.iter()
                .map(|row| row.try_get(0).map_err(ClusterError::from))
                .collect()
        })
    }
}

/// Lets go of `node`'s leases; the shards, lowest first.
fn release_all(
    client: &mut impl postgres::GenericClient,
    node: &str,
) -> Result<Vec<u32>, ClusterError> {
    let rows = client.query(
        "UPDATE spool.shards SET owner = NULL, expires_at = NULL, taken_at = NULL, renewed_at = NULL
         WHERE owner = $1 RETURNING shard",
        &[&node],
    )?;
    let mut shards = rows
        .iter()
        .map(|row| row.try_get::<_, i32>(0).map(|s| s.unsigned_abs()))
        .collect::<Result<Vec<_>, _>>()?;
    shards.sort_unstable();
    Ok(shards)
}
