//! Counters over a run, for dashboards and for tests that check what was dropped.

use serde::{Deserialize, Serialize};

/// What the scheduler has done so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Stats {
    /// Tasks submitted.
    pub submitted: u64,
    /// Polls of tasks (steps).
    pub polls: u64,
    /// Tasks that completed with a value.
    pub completed: u64,
    /// Tasks that completed with an error (panics included).
    pub failed: u64,
    /// Tasks that were canceled.
    pub canceled: u64,
    /// Requests sent out.
    pub requests: u64,
    /// Answers delivered to their tasks.
    pub answers: u64,
    /// Answers dropped: for unknown or finished tasks, or requests not in flight.
    pub dropped_answers: u64,
    /// Voluntary yields.
    pub yields: u64,
    /// The most tasks ready at once.
    pub peak_ready: u64,
    /// The most requests in flight at once.
    pub peak_in_flight: u64,
}
