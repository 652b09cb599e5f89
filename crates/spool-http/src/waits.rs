//! The wait statistics every view shows (`/v1/queue`'s `waits`, the web page, `spool
//! top`): the average, median, 95th percentile and longest wait, all over one
//! population with one definition of a wait, computed once, on the server.
//!
//! - **The wait** is a task's time waiting for a slot or a rate limit: the `queued`
//!   and `rate_limited` intervals of its timeline (what `/metrics`'
//!   `spool_task_wait_seconds` counts).
//! - **The tasks** are the last [`RECENT_WAITS`] that ended while the server watched
//!   them from their submission (a task restored from a store, whose waits before the
//!   restart are not known, is left out; so is a rejected submission).
//!
//! A statistic taken over the tasks ever scheduled beside a percentile over the tasks
//! a page lists would disagree (an average above the 95th percentile); taken over the
//! same tasks, they describe one distribution.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;
use utoipa::ToSchema;

use crate::millis::millis;

/// How many of the latest ended tasks the wait statistics are over.
pub const RECENT_WAITS: usize = 1_000;

/// The waits of the latest ended tasks, at most [`RECENT_WAITS`], oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecentWaits {
    waits: VecDeque<Duration>,
}

impl RecentWaits {
    /// Counts the wait of a task that ended; the oldest goes past [`RECENT_WAITS`].
    pub fn push(&mut self, wait: Duration) {
        if self.waits.len() == RECENT_WAITS {
            self.waits.pop_front();
        }
        self.waits.push_back(wait);
    }

    /// The statistics of the waits kept.
    pub fn summary(&self) -> WaitSummary {
        let mut sorted: Vec<Duration> = self.waits.iter().copied().collect();
        sorted.sort_unstable();
        let n = sorted.len();
        // Nearest rank: the smallest wait at or above `p`% of them.
        let rank = |p: usize| {
            let index = (n * p).div_ceil(100).max(1) - 1;
            sorted.get(index).copied().map(millis)
        };
        let total: Duration = sorted.iter().sum();
        WaitSummary {
            tasks: n as u64,
            window: RECENT_WAITS as u64,
            avg_ms: u32::try_from(n)
                .ok()
                .filter(|n| *n > 0)
                .map(|n| millis(total / n)),
            p50_ms: rank(50),
            p95_ms: rank(95),
            max_ms: sorted.last().copied().map(millis),
        }
    }
}

/// Waits for a slot or a rate limit (queued plus rate limited), in whole
/// milliseconds, over the last `tasks` tasks that ended while the server watched them
/// from their submission (at most `window`). Every figure is over those same tasks;
/// `null` while there is none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct WaitSummary {
    /// How many tasks the figures are over.
    pub tasks: u64,
    /// The most tasks they are ever over: the latest this many that ended.
    pub window: u64,
    /// The average wait.
    pub avg_ms: Option<u64>,
    /// The median wait (nearest rank).
    pub p50_ms: Option<u64>,
    /// The 95th percentile wait (nearest rank: the smallest at or above 95% of them).
    pub p95_ms: Option<u64>,
    /// The longest wait.
    pub max_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A burst that queued long, then a run of quick tasks: the burst is out of the
    /// window, and every figure is over the 1,000 quick ones (an average over every
    /// task ever scheduled would be 6.7 s here, beside a 95th percentile of 10 ms).
    #[test]
    fn every_figure_is_over_the_same_tasks() {
        let mut waits = RecentWaits::default();
        // 200 tasks that waited 40 s each, long ago: pushed out of the window by the
        // 1,000 quick ones after them (10 ms each, 19 of them 2 s).
        for _ in 0..200 {
            waits.push(ms(40_000));
        }
        for i in 0..1_000 {
            waits.push(if i % 50 == 0 { ms(2_000) } else { ms(10) });
        }
        assert_eq!(
            waits.summary(),
            WaitSummary {
                tasks: 1_000,
                window: 1_000,
                avg_ms: Some(49),
                p50_ms: Some(10),
                p95_ms: Some(10),
                max_ms: Some(2_000),
            }
        );
    }

    #[test]
    fn percentiles_are_nearest_ranks_and_nothing_is_null() {
        let mut waits = RecentWaits::default();
        assert_eq!(
            waits.summary(),
            WaitSummary {
                window: 1_000,
                ..WaitSummary::default()
            }
        );
        for n in 1..=20 {
            waits.push(ms(n * 10));
        }
        let summary = waits.summary();
        assert_eq!(
            (
                summary.avg_ms,
                summary.p50_ms,
                summary.p95_ms,
                summary.max_ms
            ),
            (Some(105), Some(100), Some(190), Some(200))
        );
    }
}
