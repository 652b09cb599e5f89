//! The round-trip check of every live task, or of one: see
//! [`TaskRegistry::check_round_trip`].

use super::Scheduler;
use crate::id::TaskId;
use crate::registry::TaskRegistry;
use crate::snapshot::round_trip::{RoundTripError, check};

impl Scheduler {
    /// Checks that every live task round-trips (see
    /// [`TaskRegistry::check_round_trip`]), in id order, and returns how many were
    /// checked (tasks that keep nothing are not). With no registry, only that each
    /// state saves strictly (nothing is lost at the first save) is checked. The
    /// scheduler is not changed.
    ///
    /// # Errors
    /// The first task's [`RoundTripError`].
    pub fn check_round_trip(
        &self,
        registry: Option<&TaskRegistry>,
    ) -> Result<usize, RoundTripError> {
        let mut checked = 0;
        for (id, body) in self.live_bodies() {
            if check(registry, id, body)? {
                checked += 1;
            }
        }
        Ok(checked)
    }

    /// As [`check_round_trip`](Scheduler::check_round_trip), for the task `id`
    /// alone: `Ok(false)` if it is not live, or keeps nothing.
    ///
    /// # Errors
    /// The task's [`RoundTripError`].
    pub fn check_task_round_trip(
        &self,
        id: TaskId,
        registry: Option<&TaskRegistry>,
    ) -> Result<bool, RoundTripError> {
        match self.live_body(id) {
            Some(body) => check(registry, id, body),
            None => Ok(false),
        }
    }
}
