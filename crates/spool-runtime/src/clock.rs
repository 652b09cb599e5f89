//! The real clock: the monotonic clock, read once per loop turn.

use std::time::Instant;

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
