//! Counters over a run, for dashboards and for tests that check what was dropped.

use std::time::Duration;

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
    /// Requests made by tasks (each counted once, when made, whether it was then sent at
    /// once or held back by a limit first).
    pub requests: u64,
    /// Answers delivered to their tasks.
    pub answers: u64,
    /// Answers dropped: for unknown or finished tasks, or requests not in flight.
    pub dropped_answers: u64,
    /// Voluntary yields.
    pub yields: u64,
    /// The most tasks ready at once.
    pub peak_ready: u64,
    /// The most requests in flight at once: sent to an executor (let go by their kind's
    /// gate, or at once for a kind with no limit) and not answered. Requests held back
    /// by a limit (a cap on requests in flight, a rate window, a 429 back-off, an
    /// agent's cap) are not counted, so under a cap of `n` requests of one kind, with
    /// no other kind, it never exceeds `n`. As [`QueueState::in_flight`] counts them.
    ///
    /// [`QueueState::in_flight`]: crate::QueueState::in_flight
    pub peak_in_flight: u64,
    /// Tasks that got a slot (`total_scheduled`).
    pub scheduled: u64,
    /// Submissions rejected.
    pub rejected: u64,
    /// 429 answers after which the request waited at its gate to go again (a 429 given
    /// up as `RateLimitExceeded` reaches its task instead), plus submissions told
    /// `RateLimited`.
    pub rate_limited: u64,
    /// Time tasks waited from submission to their slot, summed over `scheduled`.
    pub total_wait: Duration,
    /// The most tasks queued at once (waiting for a slot or dependencies).
    pub peak_queued: u64,
    /// The most tasks running at once.
    pub peak_running: u64,
    /// Tasks that failed with `DeadlineExceeded` (also counted in `failed`).
    pub deadlines_exceeded: u64,
    /// Ended tasks evicted when their retention ran out.
    pub evicted: u64,
}

impl Stats {
    /// The average wait for a slot, if any task got one.
    pub fn average_wait(&self) -> Option<Duration> {
        u32::try_from(self.scheduled)
            .ok()
            .filter(|n| *n > 0)
            .map(|n| self.total_wait / n)
    }
}
