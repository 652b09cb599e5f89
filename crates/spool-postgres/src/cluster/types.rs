//! What the cluster's tables say, as values: a lease, an inbox item, and the status of
//! shards and nodes.

use std::time::Duration;

/// A shard's lease held by a node: it may write the shard (a
/// [`PgStore`](crate::PgStore) opened with [`PgOptions::shard`](crate::PgOptions::shard)
/// and [`PgOptions::lease_epoch`](crate::PgOptions::lease_epoch)) until it expires.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The shard.
    pub shard: u32,
    /// The lease's epoch: one more than any before it on the shard.
    pub epoch: u64,
    /// How long until it expires, by PostgreSQL's clock, when it was taken or renewed
    /// (the node counts it down on its own monotonic clock, less a margin).
    pub expires_in: Duration,
}

/// A submission waiting in a shard's inbox for the shard's owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboxItem {
    /// Its number: items are taken in this order.
    pub id: u64,
    /// The shard it is for.
    pub shard: u32,
    /// Its idempotency key: the owner submits it with this key, so an item submitted
    /// twice (a crash between submitting and [`ack`](crate::Cluster::ack)) makes one
    /// task.
    pub key: String,
    /// What was submitted, as the node that took it encoded it.
    pub body: Vec<u8>,
}

/// What the owner of a shard did with an inbox item, recorded with its key by
/// [`Cluster::ack_taken`](crate::Cluster::ack_taken).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken {
    /// The item.
    pub item: u64,
    /// Its idempotency key.
    pub key: String,
    /// What became of it.
    pub outcome: TakenOutcome,
}

/// What became of an inbox item: the task it made, the task its key had made before,
/// or why the shard's scheduler refused it for good.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TakenOutcome {
    /// It made this task.
    Task(u64),
    /// Its key had made this task before (the same request sent again): no new one.
    Existing(u64),
    /// Its key had made this task before for a different request: refused.
    KeyReused(u64),
    /// Refused for good, with the reason; no task was made.
    Refused(String),
}

/// Where an idempotency key is bound and what its inbox item became
/// ([`Cluster::key_binding`](crate::Cluster::key_binding)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyBinding {
    /// The shard the key is bound to.
    pub shard: u32,
    /// The latest inbox item with the key that its shard's owner took, and what it
    /// became; `None` before the owner took one (or when the key was only ever
    /// submitted on the owner directly).
    pub outcome: Option<(u64, TakenOutcome)>,
}

/// One shard, as [`Cluster::status`](crate::Cluster::status) sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShardStatus {
    /// The shard.
    pub shard: u32,
    /// The node holding its lease (`None`: released or never taken); an expired lease
    /// keeps its owner until another node takes it.
    pub owner: Option<String>,
    /// The epoch of its latest lease (0: never taken).
    pub epoch: u64,
    /// How long ago its lease was taken (`None` when it has no owner).
    pub lease_age: Option<Duration>,
    /// How long until its lease expires (`None` when it has no owner; zero once it has
    /// expired: see [`expired`](ShardStatus::expired)).
    pub expires_in: Option<Duration>,
    /// Whether it has an owner whose lease has expired.
    pub expired: bool,
    /// How many submissions wait in its inbox.
    pub inbox: u64,
    /// How many journal entries it has after its latest checkpoint.
    pub lag: u64,
}

/// One node, as [`Cluster::status`](crate::Cluster::status) sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeStatus {
    /// The node's name.
    pub node: String,
    /// Its address, as it joined with.
    pub addr: String,
    /// How long ago it joined.
    pub up_for: Duration,
    /// How long ago its last heartbeat was.
    pub heartbeat_age: Duration,
    /// Whether it was asked to drain (hand its shards over and take none).
    pub draining: bool,
    /// The shards whose lease it holds and has not let expire, lowest first.
    pub shards: Vec<u32>,
}

/// The whole cluster at one moment: every shard, lowest first, and every node that
/// joined, by name.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterStatus {
    /// The shards.
    pub shards: Vec<ShardStatus>,
    /// The nodes.
    pub nodes: Vec<NodeStatus>,
}

/// A duration from milliseconds PostgreSQL worked out (`None` stays `None`; a
/// negative one is zero).
pub(crate) fn millis(ms: Option<i64>) -> Option<Duration> {
    ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}
