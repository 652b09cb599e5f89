//! A sliding-window limit: at most `max` sends in any window of `per`.

use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Time;

/// At most `max` events in any `per`-long window, kept as a queue of send times pruned
/// from the front, so a check is O(1) amortized.
#[derive(Clone, Debug)]
pub(crate) struct SlidingWindow {
    max: u32,
    per: Duration,
    times: VecDeque<Time>,
}

impl SlidingWindow {
    /// A window of `max` events (at least one: a window of none would hold everything
    /// back forever) per `per`.
    pub(crate) fn new(max: u32, per: Duration) -> SlidingWindow {
        SlidingWindow {
            max: max.max(1),
            per,
            times: VecDeque::new(),
        }
    }

    fn prune(&mut self, now: Time) {
        while let Some(first) = self.times.front() {
            if *first + self.per <= now {
                self.times.pop_front();
            } else {
                break;
            }
        }
    }

    /// Whether one more event fits at `now`.
    pub(crate) fn has_room(&mut self, now: Time) -> bool {
        self.prune(now);
        self.times.len() < self.max as usize
    }

    /// When one more event will fit, if not now.
    pub(crate) fn free_at(&mut self, now: Time) -> Option<Time> {
        if self.has_room(now) {
            return None;
        }
        let excess = self.times.len() + 1 - self.max as usize;
        self.times.get(excess - 1).map(|t| *t + self.per)
    }

    /// Whether one more event fits at `now`, without pruning (for views).
    pub(crate) fn room_at(&self, now: Time) -> bool {
        self.counted_at(now) < self.max as usize
    }

    /// Events in the window ending at `now`, without pruning.
    fn counted_at(&self, now: Time) -> usize {
        self.times
            .iter()
            .rev()
            .take_while(|t| **t + self.per > now)
            .count()
    }

    /// Events counted in the window ending at `now`, the most it takes, and its length
    /// (for views).
    pub(crate) fn use_at(&self, now: Time) -> (u32, u32, Duration) {
        (
            u32::try_from(self.counted_at(now)).unwrap_or(u32::MAX),
            self.max,
            self.per,
        )
    }

    /// Counts an event at `now`.
    pub(crate) fn record(&mut self, now: Time) {
        self.times.push_back(now);
    }

    /// The times counted, oldest first (for snapshots).
    pub(crate) fn times(&self) -> impl Iterator<Item = Time> + '_ {
        self.times.iter().copied()
    }

    /// Counts `times` (oldest first), as a snapshot had them.
    pub(crate) fn restore(&mut self, times: impl IntoIterator<Item = Time>) {
        self.times = times.into_iter().collect();
    }
}
