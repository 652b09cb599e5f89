//! [`Node`]: a process's place in the cluster — the shards it holds now, each with its
//! runtime — and the way it leaves (stop or drop).

use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

use spool_runtime::{RuntimeBuilder, RuntimeHandle};

use crate::error::ClusterError;
use crate::event::Event;
use crate::held::Held;
use crate::inbox::InboxReader;
use crate::lease::LeaseLoop;
use crate::leases::Leases;
use crate::options::{NodeOptions, ShardId};
use crate::watchdog::Watchdog;

/// A spool node of a cluster on one PostgreSQL: it leases shards (up to its fair share
/// of them, the shard count divided among the live nodes, the remainder one each to
/// the first by name), runs a runtime per
/// shard it holds on that shard's store, submits what other nodes put in their
/// inboxes, and hands its shards over when stopped.
///
/// A node that cannot renew a lease stops that shard's runtime before the lease
/// expires, by its own monotonic clock; a writer that finds a newer owner of its shard
/// ([`PgStoreError::Fenced`](spool_postgres::PgStoreError::Fenced)) stops at once.
/// Dropping a node stops it as [`Node::stop`] does.
pub struct Node {
    held: Held,
    events: Sender<Event>,
    lease: Option<JoinHandle<Result<(), ClusterError>>>,
    inbox: Option<InboxReader>,
    watchdog: Option<Watchdog>,
    node_id: String,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("node_id", &self.node_id)
            .field("shards", &self.shard_ids())
            .finish_non_exhaustive()
    }
}

impl Node {
    /// Joins the cluster in the database at `url` (made with `Cluster::init`) as
    /// `options` says, and starts leasing: the first shards are taken before it
    /// returns. `make` gives the runtime of a shard the node takes (its executors,
    /// policy, publication); the node sets its configuration, task types, checkpoints
    /// and journal, and recovers it from the shard's store.
    ///
    /// # Errors
    /// [`ClusterError::Database`] if the cluster cannot be reached or joined;
    /// [`ClusterError::Spawn`] if a thread cannot be started. A shard that cannot be
    /// started is logged and released, not an error: the node goes on with the others.
    pub fn start(
        url: &str,
        options: NodeOptions,
        make: impl Fn(ShardId) -> RuntimeBuilder + Send + 'static,
    ) -> Result<Node, ClusterError> {
        let leases = Leases::join(url, &options)?;
        let held = Held::default();
        let (events, events_rx) = std::sync::mpsc::channel();
        let node_id = options.node_id.clone();
        // Each part started stops with its value if a later one cannot start.
        let watchdog = Watchdog::start(&node_id, held.clone())?;
        let inbox = match &options.inbox {
            Some(decode) => Some(InboxReader::start(
                url,
                &options,
                Arc::clone(decode),
                held.clone(),
            )?),
            None => None,
        };
        let lease_loop = LeaseLoop::new(
            url.to_owned(),
            options,
            leases,
            Box::new(make),
            held.clone(),
            (events.clone(), events_rx),
        );
        let (first_round, first_round_done) = std::sync::mpsc::channel();
        let name = format!("spool lease {node_id}");
        let lease = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || lease_loop.run(first_round))
            .map_err(|e| ClusterError::Spawn {
                thread: name,
                reason: e.to_string(),
            })?;
        // A node that returns holds its share (or what it could take of it); a lease
        // thread that ended (it panicked) is found by `stop`.
        let _ = first_round_done.recv();
        Ok(Node {
            held,
            events,
            lease: Some(lease),
            inbox,
            watchdog: Some(watchdog),
            node_id,
        })
    }

    /// The node's name in the cluster.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The shards the node runs now, in shard order: each with its lease's epoch and
    /// its runtime's handle.
    pub fn shards(&self) -> Vec<(ShardId, u64, RuntimeHandle)> {
        self.held.list()
    }

    /// A handle on the shards the node runs, for other threads (an HTTP server's):
    /// it sees them as they change, and outlives nothing (once the node stops it lists
    /// none).
    pub fn held(&self) -> HeldShards {
        HeldShards(self.held.clone())
    }

    /// The shards the node runs now, in order.
    pub fn shard_ids(&self) -> Vec<ShardId> {
        self.shards()
            .into_iter()
            .map(|(shard, _, _)| shard)
            .collect()
    }

    /// The handle of shard `shard`'s runtime, if the node runs it now.
    pub fn handle(&self, shard: ShardId) -> Option<RuntimeHandle> {
        self.held.get(shard).map(|(_, handle)| handle)
    }

    /// Leaves the cluster: stops every shard's runtime (each ends its current turn and
    /// commits what it journaled), then releases every lease at once, so other nodes
    /// take the shards without waiting for them to expire, and marks the node gone.
    /// The inbox reader stops first, so nothing new is submitted meanwhile.
    ///
    /// # Errors
    /// [`ClusterError::Database`] if the leases could not be released (they then
    /// expire after their ttl); [`ClusterError::Panicked`] if a thread of the node
    /// panicked.
    pub fn stop(mut self) -> Result<(), ClusterError> {
        self.stop_now()
    }

    fn stop_now(&mut self) -> Result<(), ClusterError> {
        if let Some(inbox) = self.inbox.take() {
            inbox.stop();
        }
        let Some(lease) = self.lease.take() else {
            return Ok(());
        };
        // A lease thread that ended already is joined below all the same.
        let _ = self.events.send(Event::Stop);
        let left = lease.join().map_err(|_| ClusterError::Panicked {
            thread: format!("spool lease {}", self.node_id),
        });
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.stop();
        }
        left?
    }
}

/// The shards a [`Node`] runs, seen from another thread ([`Node::held`]).
#[derive(Clone, Debug)]
pub struct HeldShards(Held);

impl HeldShards {
    /// The shards the node runs now and may answer for, in shard order: each with its
    /// lease's epoch and its runtime's handle. A shard whose lease the node could not
    /// renew in time (it was frozen past it, say) is not listed, even before the node
    /// stops it: another node may hold it already, and what this one's runtime holds
    /// may never be committed.
    pub fn list(&self) -> Vec<(ShardId, u64, RuntimeHandle)> {
        self.0.list_valid(std::time::Instant::now())
    }

    /// Shard `shard`'s epoch and runtime handle, if the node runs it now and may
    /// answer for it (as [`list`](HeldShards::list) says).
    pub fn get(&self, shard: ShardId) -> Option<(u64, RuntimeHandle)> {
        self.0.get_valid(shard, std::time::Instant::now())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Err(error) = self.stop_now() {
            tracing::error!(node = %self.node_id, "the node did not stop cleanly: {error}");
        }
    }
}
