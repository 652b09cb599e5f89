//! Time as the core sees it: a plain offset from the start of the run.
//!
//! The core never reads a clock. Drivers pass `now` in: `TestScheduler` moves it by
//! hand, the threaded runtime reads the monotonic clock once per loop turn.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A point in a run's time: nanoseconds since the run began.
///
/// `Time` is totally ordered and cheap to copy; arithmetic saturates instead of
/// overflowing, so a far-away deadline never wraps around.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use spool_core::Time;
///
/// let t = Time::ZERO + Duration::from_millis(1500);
/// assert_eq!(t.to_string(), "1.500s");
/// assert_eq!(t - Time::ZERO, Duration::from_millis(1500));
/// ```
///
/// `Debug` reads like `Display` (`3.000s`), so a failed assertion shows times as a
/// person reads them.
#[derive(Copy, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Time(u64);

impl fmt::Debug for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Time {
    /// The start of the run.
    pub const ZERO: Time = Time(0);
    /// The latest representable time; used as "never".
    pub const MAX: Time = Time(u64::MAX);

    /// A time `nanos` nanoseconds after the start of the run.
    pub const fn from_nanos(nanos: u64) -> Time {
        Time(nanos)
    }

    /// A time `d` after the start of the run (saturating at [`Time::MAX`]).
    pub fn from_duration(d: Duration) -> Time {
        Time(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// Nanoseconds since the start of the run.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The offset from the start of the run.
    pub const fn as_duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// `self + d`, saturating at [`Time::MAX`].
    pub fn saturating_add(self, d: Duration) -> Time {
        self + d
    }

    /// How long after `earlier` this is; zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        let add = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Time(self.0.saturating_add(add))
    }
}

impl Sub for Time {
    type Output = Duration;
    /// Saturating: a later `rhs` gives zero.
    fn sub(self, rhs: Time) -> Duration {
        self.saturating_since(rhs)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0 / 1_000_000_000;
        let nanos = self.0 % 1_000_000_000;
        if nanos.is_multiple_of(1_000_000) {
            write!(f, "{secs}.{:03}s", nanos / 1_000_000)
        } else {
            write!(f, "{secs}.{nanos:09}s")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_reads_like_display() {
        let t = Time::ZERO + Duration::from_secs(3);
        assert_eq!(format!("{t:?}"), "3.000s");
        assert_eq!(format!("{:?}", Some(t)), "Some(3.000s)");
        assert_eq!(format!("{:?}", crate::id::TaskId::from_raw(12)), "#12");
    }

    #[test]
    fn display_keeps_sub_millisecond_precision() {
        assert_eq!(Time::ZERO.to_string(), "0.000s");
        assert_eq!(Time::from_nanos(2_500_000_000).to_string(), "2.500s");
        assert_eq!(Time::from_nanos(1_000_001).to_string(), "0.001000001s");
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Time::MAX + Duration::from_secs(1), Time::MAX);
        assert_eq!(Time::ZERO - Time::from_nanos(5), Duration::ZERO);
        assert_eq!(Time::from_duration(Duration::MAX), Time::MAX);
    }
}
