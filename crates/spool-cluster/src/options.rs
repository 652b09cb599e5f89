//! How a node runs: its name, its lease's length, and what it needs to run a shard
//! ([`NodeOptions`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use spool_core::{Config, NewTask, TaskRegistry};
use spool_durable::History;

/// A shard's number, from 0 to the cluster's shard count − 1.
pub type ShardId = u32;

/// How long a lease lasts unless renewed, by default.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

/// How often a shard's inbox is read when no notification wakes its owner, by default.
pub const DEFAULT_INBOX_POLL: Duration = Duration::from_secs(1);

/// Journal entries between two checkpoints of a shard's store, by default.
pub const DEFAULT_CHECKPOINT_EVERY: u64 = 500;

/// Makes the task of an inbox item: its shard and the body the enqueuing node wrote.
/// `Err` says why the body is not a task; the item is then logged and dropped.
pub type InboxDecoder = Arc<dyn Fn(ShardId, &[u8]) -> Result<NewTask, String> + Send + Sync>;

/// How a [`Node`](crate::Node) runs.
///
/// ```
/// use std::time::Duration;
/// use spool_cluster::NodeOptions;
///
/// let options = NodeOptions::new("node-a", "10.0.0.5:8080").lease_ttl(Duration::from_secs(5));
/// assert_eq!(options.renew_every(), Duration::from_secs(5) / 3);
/// ```
#[derive(Clone)]
pub struct NodeOptions {
    pub(crate) node_id: String,
    pub(crate) addr: String,
    pub(crate) lease_ttl: Duration,
    pub(crate) margin: Option<Duration>,
    pub(crate) inbox_poll: Duration,
    pub(crate) registry: TaskRegistry,
    pub(crate) config: Config,
    pub(crate) checkpoint_every: u64,
    pub(crate) inbox: Option<InboxDecoder>,
    pub(crate) history: History,
}

impl fmt::Debug for NodeOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeOptions")
            .field("node_id", &self.node_id)
            .field("addr", &self.addr)
            .field("lease_ttl", &self.lease_ttl)
            .field("margin", &self.lease_margin())
            .field("inbox_poll", &self.inbox_poll)
            .field("registry", &self.registry)
            .field("checkpoint_every", &self.checkpoint_every)
            .field("inbox", &self.inbox.is_some())
            .field("history", &self.history)
            .finish_non_exhaustive()
    }
}

impl NodeOptions {
    /// A node called `node_id` (unique in the cluster), reachable by the other nodes at
    /// `addr` (what they forward requests to), with the defaults: leases of
    /// [`DEFAULT_LEASE_TTL`], renewed every third of it and given up a fifth of it
    /// before they expire; inboxes read every [`DEFAULT_INBOX_POLL`] when nothing
    /// wakes the node; a checkpoint every [`DEFAULT_CHECKPOINT_EVERY`] entries; no task
    /// types, the default configuration; no inbox decoder (inboxes are not read); each
    /// shard's store keeps the default history ([`History::default`]).
    pub fn new(node_id: impl Into<String>, addr: impl Into<String>) -> NodeOptions {
        NodeOptions {
            node_id: node_id.into(),
            addr: addr.into(),
            lease_ttl: DEFAULT_LEASE_TTL,
            margin: None,
            inbox_poll: DEFAULT_INBOX_POLL,
            registry: TaskRegistry::new(),
            config: Config::new().retention(spool_runtime::DEFAULT_RETENTION),
            checkpoint_every: DEFAULT_CHECKPOINT_EVERY,
            inbox: None,
            history: History::default(),
        }
    }

    /// The history each shard's store keeps (see [`PgOptions::history`]): segments
    /// of its journal, each with the checkpoint it starts from, for as long as
    /// `history` says. [`History::off`] keeps the latest segment alone.
    ///
    /// [`PgOptions::history`]: spool_postgres::PgOptions::history
    #[must_use]
    pub fn history(mut self, history: History) -> NodeOptions {
        self.history = history;
        self
    }

    /// How long a lease lasts unless renewed (at least 30 ms): a node that dies holds
    /// its shards this long before another takes them.
    #[must_use]
    pub fn lease_ttl(mut self, ttl: Duration) -> NodeOptions {
        self.lease_ttl = ttl.max(Duration::from_millis(30));
        self
    }

    /// How long before a lease expires, on the node's own monotonic clock, the node
    /// stops a shard whose lease it could not renew (default a fifth of the ttl, at
    /// most a third of it): room for the node's clock to run slower than the
    /// database's.
    #[must_use]
    pub fn margin(mut self, margin: Duration) -> NodeOptions {
        self.margin = Some(margin);
        self
    }

    /// How often each held shard's inbox is read when no notification came (default
    /// [`DEFAULT_INBOX_POLL`], at least 10 ms).
    #[must_use]
    pub fn inbox_poll(mut self, every: Duration) -> NodeOptions {
        self.inbox_poll = every.max(Duration::from_millis(10));
        self
    }

    /// The task types a shard's journal is replayed with (every type any node submits).
    #[must_use]
    pub fn registry(mut self, registry: TaskRegistry) -> NodeOptions {
        self.registry = registry;
        self
    }

    /// The configuration of a shard that starts empty; the node sets its first task
    /// id from the shard's number. A shard that goes on from its store keeps the
    /// configuration in its snapshot.
    #[must_use]
    pub fn config(mut self, config: Config) -> NodeOptions {
        self.config = config;
        self
    }

    /// Journal entries between two checkpoints of a shard's store (at least 1).
    #[must_use]
    pub fn checkpoint_every(mut self, entries: u64) -> NodeOptions {
        self.checkpoint_every = entries.max(1);
        self
    }

    /// Reads held shards' inboxes, making each item's task with `decode`; each is
    /// submitted under the item's key as idempotency key, and deleted from the inbox
    /// once the submission is durable.
    #[must_use]
    pub fn inbox(
        mut self,
        decode: impl Fn(ShardId, &[u8]) -> Result<NewTask, String> + Send + Sync + 'static,
    ) -> NodeOptions {
        self.inbox = Some(Arc::new(decode));
        self
    }

    /// How often leases are renewed: a third of the ttl.
    pub fn renew_every(&self) -> Duration {
        self.lease_ttl / 3
    }

    /// How long before expiry, on the node's clock, a shard whose lease was not
    /// renewed is stopped.
    pub fn lease_margin(&self) -> Duration {
        self.margin
            .unwrap_or(self.lease_ttl / 5)
            .min(self.lease_ttl / 3)
    }

    /// How long after asking for a renewal (or a take) that gave a lease expiring in
    /// `expires_in` by the database's clock, on the node's monotonic clock, a shard
    /// may run without another: that (at most the ttl) less the margin.
    pub(crate) fn hold_for(&self, expires_in: Duration) -> Duration {
        expires_in
            .min(self.lease_ttl)
            .saturating_sub(self.lease_margin())
    }
}
