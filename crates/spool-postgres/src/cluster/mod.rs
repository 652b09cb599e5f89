//! A cluster of spool nodes on one PostgreSQL database: the shards' leases, the nodes,
//! each shard's inbox and the idempotency keys, in the `spool` schema beside the
//! shards' journals.
//!
//! A cluster has a fixed number of shards, set once by [`Cluster::init`]. A shard is
//! one journal (a [`PgStore`](crate::PgStore) opened with
//! [`PgOptions::shard`](crate::PgOptions::shard)) written by the node holding its
//! lease: [`Cluster::take`] takes free or expired leases (each take raises the shard's
//! epoch), [`Cluster::heartbeat`] renews them, and the writer opened with
//! [`PgOptions::lease_epoch`](crate::PgOptions::lease_epoch) is fenced by the epoch: a
//! node that lost a lease never writes its shard again. Work goes to a shard by
//! [`shard_for`] of its key. Times (expiry, ages) are PostgreSQL's clock, never a
//! node's.
//!
//! ```no_run
//! use std::time::Duration;
//! use spool_postgres::{Cluster, PgOptions, PgStore};
//!
//! let url = "postgres://spool@127.0.0.1:5432/agents";
//! let cluster = Cluster::init(url, 8)?;
//! cluster.join("node-a", "10.0.0.1:8080")?;
//! for lease in cluster.take("node-a", 4, Duration::from_secs(10))? {
//!     let options = PgOptions::new().shard(lease.shard).lease_epoch(lease.epoch);
//!     let _store = PgStore::connect_with(url, options)?;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use postgres::{Client, GenericClient};

use crate::address::Address;
use crate::error::PgStoreError;
use crate::schema::{CLUSTER_SCHEMA, SCHEMA_LOCK, prepare};
use crate::sum;
use crate::write::is_lost;

mod budget;
mod error;
mod inbox;
mod leases;
mod status;
mod types;

pub use budget::{Budget, Slice, SliceStatus, SliceWant};
pub use error::ClusterError;
pub use inbox::InboxListener;
pub use types::{
    ClusterStatus, InboxItem, KeyBinding, Lease, NodeStatus, ShardStatus, Taken, TakenOutcome,
};

/// The most shards a cluster has: task ids stay below 2^53 (safe in JSON) with 2^44 per
/// shard.
pub const MAX_SHARDS: u32 = 512;

/// The channel a submission to a shard's inbox is announced on, with the shard's
/// number as the payload, in the transaction that enqueues it.
pub const INBOX_CHANNEL: &str = "spool_inbox";

/// How long connecting to the cluster's database may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The key of the lock held while the cluster's rows are made, so that two inits at
/// once do not both make them.
const INIT_LOCK: i64 = SCHEMA_LOCK + 1;

/// The shard of `key` among `shards`: FNV-1a (64 bits) of the key's UTF-8 bytes,
/// modulo `shards` (0 is taken as 1). Stable for ever: changing it would move every
/// agent to another shard.
pub fn shard_for(key: &str, shards: u32) -> u32 {
    let hash = fnv1a64(key.as_bytes());
    // The remainder is below `shards`, a u32.
    (hash % u64::from(shards.max(1))) as u32
}

/// FNV-1a, 64 bits.
fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
    })
}

/// How many shards each of `live_nodes` nodes should hold: `shards` divided by them,
/// rounded up (all of them for no node).
pub fn fair_share(shards: u32, live_nodes: usize) -> u32 {
    let nodes = u32::try_from(live_nodes.max(1)).unwrap_or(u32::MAX);
    shards.div_ceil(nodes)
}

/// How many shards node `node` should hold when the live nodes are `live` (their
/// names, in order): the shard count divided among them, the remainder one each to
/// the first by name, so that the shares add up to the shard count (4 shards over 3
/// nodes: 2, 1, 1). A node not among them counts as one more, after them; all the
/// shards for a node alone.
pub fn share_of(shards: u32, live: &[String], node: &str) -> u32 {
    let (count, at) = match live.iter().position(|n| n == node) {
        Some(at) => (live.len(), at),
        None => (live.len() + 1, live.len()),
    };
    let count = u32::try_from(count).unwrap_or(u32::MAX);
    let at = u32::try_from(at).unwrap_or(u32::MAX);
    shards / count + u32::from(at < shards % count)
}

/// A connection to a cluster's tables. Every method runs on one connection of its own
/// (made again at the next call if it was lost), in a transaction of its own. Clones are
/// not needed: a `Cluster` is `Send + Sync`, its calls taking turns on the connection.
pub struct Cluster {
    address: Address,
    client: Mutex<Option<Client>>,
    shards: u32,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.address.name)
            .field("shards", &self.shards)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Makes the database at `url` a cluster of `shards` shards (1 to [`MAX_SHARDS`]):
    /// the store's schema if the database is empty, the cluster's tables, a lease row
    /// (no owner) and a head row (an empty journal) for every shard. Idempotent for the
    /// same count. A shard whose journal exists already (a store run by one process)
    /// keeps it, and its leases start above its writers' epochs.
    ///
    /// # Errors
    /// [`ClusterError::BadShardCount`] for a count out of range,
    /// [`ClusterError::ShardCount`] for a cluster made with another count,
    /// [`ClusterError::Store`] if the database cannot be reached or holds something
    /// else than a spool store of this version.
    pub fn init(url: &str, shards: u32) -> Result<Cluster, ClusterError> {
        if !(1..=MAX_SHARDS).contains(&shards) {
            return Err(ClusterError::BadShardCount { asked: shards });
        }
        let address = Address::parse(url, CONNECT_TIMEOUT)?;
        let mut client = address.connect()?;
        prepare(&mut client, &address, 0, true)?;
        let mut tx = client.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&INIT_LOCK])?;
        tx.batch_execute(CLUSTER_SCHEMA)?;
        match shard_count(&mut tx, &address)? {
            Some(found) if found == shards => {}
            Some(found) => {
                return Err(ClusterError::ShardCount {
                    what: address.name.clone(),
                    found,
                    asked: shards,
                });
            }
            None => make_rows(&mut tx, shards)?,
        }
        tx.commit()?;
        Ok(Cluster {
            address,
            client: Mutex::new(Some(client)),
            shards,
        })
    }

    /// Connects to the cluster in the database at `url`.
    ///
    /// # Errors
    /// [`ClusterError::NotACluster`] for a database that holds no cluster (run `spool
    /// cluster init`); [`ClusterError::Store`] if it cannot be reached or holds a
    /// store of another version.
    pub fn connect(url: &str) -> Result<Cluster, ClusterError> {
        let address = Address::parse(url, CONNECT_TIMEOUT)?;
        let mut client = address.connect()?;
        let schema: bool = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'spool')",
                &[],
            )?
            .try_get(0)?;
        if !schema {
            return Err(ClusterError::NotACluster {
                what: address.name.clone(),
                reason: "it has no `spool` schema".to_owned(),
            });
        }
        match prepare(&mut client, &address, 0, false) {
            Ok(_) => {}
            Err(PgStoreError::NotAStore { what, reason }) => {
                return Err(ClusterError::NotACluster { what, reason });
            }
            Err(other) => return Err(other.into()),
        }
        let Some(shards) = shard_count(&mut client, &address)? else {
            return Err(ClusterError::NotACluster {
                what: address.name.clone(),
                reason: "it is a store run by one process".to_owned(),
            });
        };
        Ok(Cluster {
            address,
            client: Mutex::new(Some(client)),
            shards,
        })
    }

    /// The cluster's count of shards.
    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// The database, as `postgres://user@host:port/db`: never with a password.
    pub fn name(&self) -> String {
        self.address.name.clone()
    }

    /// The cluster's setting `key` (in `spool.cluster`), if it has one.
    ///
    /// # Errors
    /// [`ClusterError::Postgres`] if the read failed.
    pub fn setting(&self, key: &str) -> Result<Option<String>, ClusterError> {
        self.run(|client| {
            let row =
                client.query_opt("SELECT value FROM spool.cluster WHERE key = $1", &[&key])?;
            Ok(row.map(|row| row.try_get(0)).transpose()?)
        })
    }

    /// Sets the cluster's setting `key` to `value`. The shard count (`shards`) is
    /// not a setting: it is refused.
    ///
    /// # Errors
    /// [`ClusterError::Empty`] for an empty key, [`ClusterError::Corrupt`] for
    /// `shards`, [`ClusterError::Postgres`] if the write failed.
    pub fn set_setting(&self, key: &str, value: &str) -> Result<(), ClusterError> {
        if key.is_empty() {
            return Err(ClusterError::Empty {
                what: "a setting's name",
            });
        }
        if key == "shards" {
            return Err(ClusterError::Corrupt(
                "the shard count is set once, by `spool cluster init`".to_owned(),
            ));
        }
        self.run(|client| {
            client.execute(
                "INSERT INTO spool.cluster (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                &[&key, &value],
            )?;
            Ok(())
        })
    }

    /// `shard`, if the cluster has it, as the tables keep it.
    fn check_shard(&self, shard: u32) -> Result<i32, ClusterError> {
        if shard >= self.shards {
            return Err(ClusterError::NoShard {
                shard,
                shards: self.shards,
            });
        }
        // Below MAX_SHARDS.
        Ok(shard as i32)
    }

    fn lock(&self) -> MutexGuard<'_, Option<Client>> {
        // A panic while the lock was held dropped its transaction, which rolled back.
        self.client
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `work` on the connection, made first if there is none or it was lost. A
    /// connection lost during `work` fails the call and is made again at the next.
    fn run<T>(
        &self,
        work: impl FnOnce(&mut Client) -> Result<T, ClusterError>,
    ) -> Result<T, ClusterError> {
        let mut guard = self.lock();
        if guard.as_ref().is_none_or(Client::is_closed) {
            *guard = Some(self.address.connect()?);
        }
        let Some(client) = guard.as_mut() else {
            return Err(ClusterError::Store(PgStoreError::Unsupported(
                "no connection".to_owned(),
            )));
        };
        let result = work(client);
        let lost = match &result {
            Err(ClusterError::Postgres(e)) => is_lost(e),
            Err(ClusterError::Store(PgStoreError::Postgres(e))) => is_lost(e),
            _ => false,
        };
        if lost {
            *guard = None;
        }
        result
    }
}

/// The count of shards `spool.cluster` records, if the database is a cluster.
fn shard_count(
    client: &mut impl GenericClient,
    address: &Address,
) -> Result<Option<u32>, ClusterError> {
    let there: bool = client
        .query_one("SELECT to_regclass('spool.cluster') IS NOT NULL", &[])?
        .try_get(0)?;
    if !there {
        return Ok(None);
    }
    let row = client.query_opt("SELECT value FROM spool.cluster WHERE key = 'shards'", &[])?;
    let Some(row) = row else {
        return Ok(None);
    };
    let value: String = row.try_get(0)?;
    match value.parse::<u32>() {
        Ok(count) if (1..=MAX_SHARDS).contains(&count) => Ok(Some(count)),
        _ => Err(ClusterError::Corrupt(format!(
            "{} records `{value}` shards, not a number from 1 to {MAX_SHARDS}",
            address.name
        ))),
    }
}

/// Records the count and makes a head row and a lease row for every shard. A lease
/// row's epoch starts at its head row's (a journal written before by one process), so
/// the first lease's writer is newer than every writer before it.
fn make_rows(client: &mut impl GenericClient, shards: u32) -> Result<(), ClusterError> {
    client.execute(
        "INSERT INTO spool.cluster (key, value) VALUES ('shards', $1)",
        &[&shards.to_string()],
    )?;
    let numbers: Vec<i32> = (0..shards as i32).collect();
    let sums: Vec<i64> = numbers.iter().map(|&s| sum::head(s, 0, 0, 0)).collect();
    client.execute(
        "INSERT INTO spool.head (shard, last_seq, checkpoint, epoch, sum)
         SELECT s, 0, 0, 0, c FROM unnest($1::integer[], $2::bigint[]) AS t(s, c)
         ON CONFLICT (shard) DO NOTHING",
        &[&numbers, &sums],
    )?;
    client.execute(
        "INSERT INTO spool.shards (shard, owner, epoch)
         SELECT h.shard, NULL, h.epoch FROM spool.head h WHERE h.shard = ANY($1::integer[])
         ON CONFLICT (shard) DO NOTHING",
        &[&numbers],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FNV-1a 64's published vectors, and where they put keys among shards.
    #[test]
    fn shard_for_is_fnv1a_64() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a64("été".as_bytes()), 0x009a_8f0e_88b5_1857);
        assert_eq!(shard_for("a", 1), 0);
        assert_eq!(shard_for("a", 0), 0);
        assert_eq!(shard_for("", 64), 37);
        assert_eq!(shard_for("a", 64), 12);
        assert_eq!(shard_for("foobar", 64), 40);
        assert_eq!(shard_for("foobar", 512), 488);
        assert_eq!(shard_for("agent-1", 64), 0);
        assert_eq!(shard_for("agent-1", 512), 320);
        assert_eq!(shard_for("support/alice", 3), 1);
        assert_eq!(shard_for("été", 64), 23);
    }

    /// A share is rounded up, and no node at all counts as one.
    #[test]
    fn shares_add_up_to_the_shard_count() {
        let live: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let shares: Vec<u32> = live.iter().map(|n| share_of(4, &live, n)).collect();
        assert_eq!(shares, [2, 1, 1]);
        let shares: Vec<u32> = live.iter().map(|n| share_of(64, &live, n)).collect();
        assert_eq!(shares, [22, 21, 21]);
        assert_eq!(share_of(1, &live, "b"), 0);
        assert_eq!(share_of(1, &live, "a"), 1);
        // A node that has not been heard from yet counts as the last one.
        assert_eq!(share_of(4, &live, "d"), 1);
        assert_eq!(share_of(5, &[], "a"), 5);
    }

    #[test]
    fn fair_share_rounds_up() {
        assert_eq!(fair_share(8, 3), 3);
        assert_eq!(fair_share(8, 2), 4);
        assert_eq!(fair_share(1, 3), 1);
        assert_eq!(fair_share(8, 0), 8);
    }
}
