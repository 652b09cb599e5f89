//! The shards a node runs now, shared by its threads: the lease thread lists and
//! renews them, the watchdog takes off those whose lease ran out, the node's callers
//! and the inbox reader read them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use spool_runtime::RuntimeHandle;

use crate::options::ShardId;

/// One shard the node runs.
#[derive(Clone, Debug)]
struct Entry {
    /// The lease's epoch its writer writes under.
    epoch: u64,
    /// Its runtime.
    handle: RuntimeHandle,
    /// Until when, on the node's monotonic clock, it may run without a renewal.
    hold_until: Instant,
}

/// Each shard the node runs, with its lease's epoch, its runtime's handle and until
/// when it may run.
#[derive(Clone, Debug, Default)]
pub(crate) struct Held(Arc<Mutex<BTreeMap<ShardId, Entry>>>);

impl Held {
    /// The shards in order, each with its epoch and handle.
    pub(crate) fn list(&self) -> Vec<(ShardId, u64, RuntimeHandle)> {
        self.lock()
            .iter()
            .map(|(shard, entry)| (*shard, entry.epoch, entry.handle.clone()))
            .collect()
    }

    /// Shard `shard`'s epoch and handle, if it runs here.
    pub(crate) fn get(&self, shard: ShardId) -> Option<(u64, RuntimeHandle)> {
        self.lock()
            .get(&shard)
            .map(|entry| (entry.epoch, entry.handle.clone()))
    }

    /// The shards whose lease still lets them run at `now`, in order, each with its
    /// epoch and handle: what the node may answer for. One whose time ran out (the
    /// node was frozen past it, say) is left out even before the watchdog takes it
    /// off: another node may own it already.
    pub(crate) fn list_valid(&self, now: Instant) -> Vec<(ShardId, u64, RuntimeHandle)> {
        self.lock()
            .iter()
            .filter(|(_, entry)| entry.hold_until > now)
            .map(|(shard, entry)| (*shard, entry.epoch, entry.handle.clone()))
            .collect()
    }

    /// Shard `shard`'s epoch and handle, if it runs here and its lease still lets it
    /// run at `now`.
    pub(crate) fn get_valid(&self, shard: ShardId, now: Instant) -> Option<(u64, RuntimeHandle)> {
        self.lock()
            .get(&shard)
            .filter(|entry| entry.hold_until > now)
            .map(|entry| (entry.epoch, entry.handle.clone()))
    }

    /// Lists `shard` as run here under `epoch` until `hold_until`.
    pub(crate) fn insert(
        &self,
        shard: ShardId,
        epoch: u64,
        handle: RuntimeHandle,
        hold_until: Instant,
    ) {
        let entry = Entry {
            epoch,
            handle,
            hold_until,
        };
        self.lock().insert(shard, entry);
    }

    /// Lets `shard`, if it still runs under `epoch`, run until `hold_until`; `false`
    /// if it no longer runs (the watchdog stopped it).
    pub(crate) fn renew(&self, shard: ShardId, epoch: u64, hold_until: Instant) -> bool {
        match self.lock().get_mut(&shard) {
            Some(entry) if entry.epoch == epoch => {
                entry.hold_until = hold_until;
                true
            }
            _ => false,
        }
    }

    /// Takes `shard` off the list.
    pub(crate) fn remove(&self, shard: ShardId) {
        self.lock().remove(&shard);
    }

    /// Takes every shard off the list.
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }

    /// Takes off the list every shard whose time ran out by `now`, and returns them
    /// with their handles.
    pub(crate) fn take_overdue(&self, now: Instant) -> Vec<(ShardId, RuntimeHandle)> {
        let mut map = self.lock();
        let overdue: Vec<ShardId> = map
            .iter()
            .filter(|(_, entry)| entry.hold_until <= now)
            .map(|(shard, _)| *shard)
            .collect();
        overdue
            .into_iter()
            .filter_map(|shard| map.remove(&shard).map(|entry| (shard, entry.handle)))
            .collect()
    }

    /// When the first shard's time runs out.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.lock().values().map(|entry| entry.hold_until).min()
    }

    /// The map, whatever thread poisoned the lock: it is changed only by whole inserts,
    /// removes and stores of one field, so it is never half changed.
    fn lock(&self) -> MutexGuard<'_, BTreeMap<ShardId, Entry>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use spool_runtime::Runtime;

    use super::Held;

    /// A shard whose time ran out is not answered for, though it is still listed for
    /// the watchdog to stop.
    #[test]
    fn a_shard_past_its_time_is_not_valid() {
        let runtime = Runtime::builder().build();
        let held = Held::default();
        let now = Instant::now();
        held.insert(0, 3, runtime.handle(), now + Duration::from_secs(5));
        held.insert(1, 4, runtime.handle(), now + Duration::from_millis(10));
        let later = now + Duration::from_secs(1);
        let valid: Vec<(u32, u64)> = held
            .list_valid(later)
            .iter()
            .map(|(s, e, _)| (*s, *e))
            .collect();
        assert_eq!(valid, [(0, 3)]);
        assert!(held.get_valid(1, later).is_none());
        assert_eq!(held.get_valid(0, later).map(|(e, _)| e), Some(3));
        assert_eq!(held.list().len(), 2);
        assert_eq!(held.take_overdue(later).len(), 1);
    }
}
