//! Durations as the API's bodies write them: whole milliseconds.

use std::time::Duration;

/// Whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
