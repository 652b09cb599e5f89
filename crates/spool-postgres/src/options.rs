//! How a store is connected: [`PgOptions`].

use std::time::Duration;

use spool_durable::{CrashAt, History, WallClock};

/// How many groups (loop turns) may wait in the writer's queue by default.
pub const DEFAULT_QUEUE_GROUPS: usize = 256;

/// How a [`PgStore`](crate::PgStore) is connected and writes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PgOptions {
    pub(crate) keep_checkpoints: usize,
    pub(crate) queue_groups: usize,
    pub(crate) synchronous_commit: bool,
    pub(crate) crash_at: Option<CrashAt>,
    pub(crate) retry_for: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) shard: u32,
    pub(crate) lease_epoch: Option<u64>,
    pub(crate) history: History,
    pub(crate) clock: WallClock,
}

impl Default for PgOptions {
    fn default() -> PgOptions {
        PgOptions {
            keep_checkpoints: 2,
            queue_groups: DEFAULT_QUEUE_GROUPS,
            synchronous_commit: true,
            crash_at: None,
            retry_for: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            shard: 0,
            lease_epoch: None,
            history: History::default(),
            clock: WallClock::system(),
        }
    }
}

impl PgOptions {
    /// The defaults: keep the last 2 checkpoints at least and 7 days of history (at
    /// most 1 GiB, [`History::default`]), a queue of
    /// [`DEFAULT_QUEUE_GROUPS`] groups, `synchronous_commit = on`, retry a lost
    /// connection for 60 s, give up connecting after 10 s, shard 0, no lease (the
    /// writer's lock).
    pub fn new() -> PgOptions {
        PgOptions::default()
    }

    /// How many checkpoints to keep at least (at least 1), with the journal entries
    /// after the oldest of them, whatever [`history`](PgOptions::history) says: older
    /// ones it does not keep are deleted in the transaction that writes a new one. A
    /// checkpoint in parts can be read later only while history is kept: without
    /// history, one drops every checkpoint before it.
    #[must_use]
    pub fn keep_checkpoints(mut self, count: usize) -> PgOptions {
        self.keep_checkpoints = count.max(1);
        self
    }

    /// How much history to keep (default [`History::default`]: 7 days, at most 1
    /// GiB): the segments — a checkpoint and the entries after it — a new checkpoint
    /// leaves in place, oldest dropped first, the latest always kept.
    /// [`History::off`] keeps the latest segment alone.
    #[must_use]
    pub fn history(mut self, history: History) -> PgOptions {
        self.history = history;
        self
    }

    /// The wall clock checkpoints are stamped with and history's age is weighed by
    /// (default [`WallClock::system`]); a test gives a [`WallClock::manual`] one.
    #[must_use]
    pub fn clock(mut self, clock: WallClock) -> PgOptions {
        self.clock = clock;
        self
    }

    /// How many groups (loop turns) may wait in the writer's queue (at least 1,
    /// default [`DEFAULT_QUEUE_GROUPS`]): when the server is slower than the loop, or
    /// gone, a full queue makes the loop wait in `commit` (back-pressure).
    #[must_use]
    pub fn queue_groups(mut self, groups: usize) -> PgOptions {
        self.queue_groups = groups.max(1);
        self
    }

    /// Whether a commit waits for the server to flush it to disk (`true`, the
    /// default: the session's `synchronous_commit` is `on`, and a commit survives the
    /// server crashing) or not (`off`: the server may lose its last commits if it
    /// crashes, never the database's consistency; a crash of spool's process loses
    /// nothing acknowledged either way).
    #[must_use]
    pub fn synchronous_commit(mut self, on: bool) -> PgOptions {
        self.synchronous_commit = on;
        self
    }

    /// **For crash tests only**: end the process at `at`, inside a transaction (see
    /// [`CrashAt`]).
    #[must_use]
    pub fn crash_at(mut self, at: Option<CrashAt>) -> PgOptions {
        self.crash_at = at;
        self
    }

    /// How long the writer retries when its connection is lost (the server restarts,
    /// the connection is cut) before the group it writes fails with
    /// [`PgStoreError::Unavailable`](crate::PgStoreError::Unavailable) (default 60 s).
    /// While it retries, groups wait in the queue and then the loop waits.
    #[must_use]
    pub fn retry_for(mut self, duration: Duration) -> PgOptions {
        self.retry_for = duration;
        self
    }

    /// How long connecting may take before it is given up (default 10 s).
    #[must_use]
    pub fn connect_timeout(mut self, duration: Duration) -> PgOptions {
        self.connect_timeout = duration;
        self
    }

    /// Which shard of the database the store is (default 0): its own journal, head
    /// row, checkpoints and task rows, apart from every other shard's. A reader
    /// ([`PgStore::connect_read_only_with`](crate::PgStore::connect_read_only_with))
    /// reads this shard.
    #[must_use]
    pub fn shard(mut self, shard: u32) -> PgOptions {
        self.shard = shard;
        self
    }

    /// Writes the shard in lease mode, as the owner of the shard's lease with epoch
    /// `epoch` (a [`Lease`](crate::cluster::Lease) taken from the
    /// [`Cluster`](crate::cluster::Cluster)): no writer's lock is taken; at connect,
    /// the server sessions of the shard's writers with an older epoch are ended, and
    /// the head row's epoch is set to `epoch` only if it is older (else
    /// [`PgStoreError::Fenced`](crate::PgStoreError::Fenced): a newer owner exists).
    /// Every write checks the epoch as always, so once a newer owner has connected
    /// this writer writes nothing more. Without it (the default), the writer takes the
    /// shard's writer lock and the next epoch at connect: one process writes.
    #[must_use]
    pub fn lease_epoch(mut self, epoch: u64) -> PgOptions {
        self.lease_epoch = Some(epoch);
        self
    }
}
