//! The real clocks: the monotonic clock, read once per loop turn; where a restored
//! runtime's clock starts (the time the process was down counted in); the wall clock
//! a runtime reads; and how a scheduler time moves a wall-clock instant.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use spool_core::Time;

/// The monotonic clock as the core's [`Time`]: time since the clock was made.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn new() -> Clock {
        Clock {
            start: Instant::now(),
        }
    }

    /// A clock that reads `at` now: a runtime restored from a snapshot goes on from the
    /// snapshot's time.
    pub fn starting_at(at: Time) -> Clock {
        let now = Instant::now();
        Clock {
            start: now.checked_sub(at.as_duration()).unwrap_or(now),
        }
    }

    /// The time now.
    pub fn now(&self) -> Time {
        Time::from_duration(self.start.elapsed())
    }

    /// The instant a core time stands for.
    ///
    /// # Panics
    /// If the instant is too far ahead for the platform's monotonic clock; see
    /// [`try_instant`](Clock::try_instant).
    pub fn instant(&self, time: Time) -> Instant {
        self.start + time.as_duration()
    }

    /// The instant a core time stands for, or `None` if it is too far ahead for the
    /// platform's monotonic clock (an executor's `Time::MAX` wake-up, say).
    pub fn try_instant(&self, time: Time) -> Option<Instant> {
        self.start.checked_add(time.as_duration())
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// The time a restored runtime's clock starts at: the restored scheduler's time `at`,
/// plus the time the process was down — from `was`, the wall-clock instant the
/// scheduler had for `at` (the wall clock it was told, if it was), to `now` — so that
/// a task's age, deadline, sleeps and retention count the time between two processes
/// as the wall clock did. Without `was`, or with a wall clock that went back, the time
/// goes on from `at`.
pub(crate) fn resumed_at(at: Time, was: Option<Timestamp>, now: Timestamp) -> Time {
    let down = was
        .and_then(|was| Duration::try_from(now.duration_since(was)).ok())
        .unwrap_or(Duration::ZERO);
    at.saturating_add(down)
}

/// `base` moved by the time from `from` to `to` (back if `to` is earlier); `None` out
/// of the wall clock's range.
pub(crate) fn wall_of(base: Timestamp, from: Time, to: Time) -> Option<Timestamp> {
    if to >= from {
        base.checked_add(to.saturating_since(from)).ok()
    } else {
        base.checked_sub(from.saturating_since(to)).ok()
    }
}

/// Where a runtime reads the wall clock: the system's, or one a test moves.
#[derive(Clone)]
pub(crate) struct WallClock(Arc<dyn Fn() -> Timestamp + Send + Sync>);

impl WallClock {
    pub(crate) fn new(now: impl Fn() -> Timestamp + Send + Sync + 'static) -> WallClock {
        WallClock(Arc::new(now))
    }

    pub(crate) fn now(&self) -> Timestamp {
        (self.0)()
    }
}

impl Default for WallClock {
    fn default() -> WallClock {
        WallClock::new(Timestamp::now)
    }
}

impl fmt::Debug for WallClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WallClock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> Time {
        Time::ZERO + Duration::from_secs(secs)
    }

    fn wall(text: &str) -> Timestamp {
        text.parse().unwrap_or_default()
    }

    #[test]
    fn a_restored_clock_counts_the_time_the_process_was_down() {
        let was = wall("2026-11-26T10:00:00Z");
        assert_eq!(
            resumed_at(at(50), Some(was), wall("2026-11-26T11:00:00Z")),
            at(50 + 3_600)
        );
        // No wall clock known, or one that went back: it goes on where it was.
        assert_eq!(resumed_at(at(50), None, was), at(50));
        assert_eq!(
            resumed_at(at(50), Some(was), wall("2026-11-26T09:00:00Z")),
            at(50)
        );
    }

    #[test]
    fn a_scheduler_time_reads_as_the_wall_clock_moved_by_the_difference() {
        let base = wall("2026-11-26T10:00:00Z");
        assert_eq!(
            wall_of(base, at(100), at(130)),
            Some(wall("2026-11-26T10:00:30Z"))
        );
        assert_eq!(
            wall_of(base, at(100), at(40)),
            Some(wall("2026-11-26T09:59:00Z"))
        );
    }
}
