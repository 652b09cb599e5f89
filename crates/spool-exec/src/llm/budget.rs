//! The answer budget: the most bytes the answers being read may hold at once across an
//! executor and its clones (a pool's workers), so that many large answers at the same
//! time cannot take the process's memory with them.
//!
//! An answer of known length reserves all of it before it is read, waiting (within the
//! attempt's deadline) until it fits; one of unknown length reserves a step at a time,
//! its first step waiting like a known length, each further step taken only if it fits
//! at once: an answer already holding bytes never waits for others, so answers read at
//! the same time cannot wait for each other for ever.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// What the budget holds now and has held, for [`OpenAiExecutor::answer_bytes`](super::OpenAiExecutor::answer_bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AnswerBytes {
    /// The budget: the most bytes held at once.
    pub limit: u64,
    /// Bytes held now by the answers being read.
    pub held: u64,
    /// The most bytes held at once so far.
    pub peak: u64,
    /// Answers that waited for room before they were read.
    pub waited: u64,
    /// Attempts ended because an answer of unknown length outgrew the room left.
    pub refused: u64,
}

/// The budget shared by an executor's clones.
#[derive(Debug)]
pub(super) struct AnswerBudget {
    state: Mutex<AnswerBytes>,
    freed: Condvar,
}

/// Bytes reserved for one answer; given back when dropped.
#[derive(Debug)]
pub(super) struct Hold<'a> {
    budget: &'a AnswerBudget,
    bytes: u64,
}

impl AnswerBudget {
    pub(super) fn new(limit: u64) -> AnswerBudget {
        AnswerBudget {
            state: Mutex::new(AnswerBytes {
                limit,
                ..AnswerBytes::default()
            }),
            freed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, AnswerBytes> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What the budget holds now and has held.
    pub(super) fn snapshot(&self) -> AnswerBytes {
        *self.lock()
    }

    /// Reserves `bytes` (at most the limit), waiting until they fit or `deadline`
    /// passes (`None` then).
    pub(super) fn reserve(&self, bytes: u64, deadline: Instant) -> Option<Hold<'_>> {
        let mut state = self.lock();
        let bytes = bytes.min(state.limit);
        let mut counted = false;
        while state.held + bytes > state.limit {
            if !counted {
                counted = true;
                state.waited += 1;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            state = self
                .freed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        state.held += bytes;
        state.peak = state.peak.max(state.held);
        Some(Hold {
            budget: self,
            bytes,
        })
    }
}

impl Hold<'_> {
    /// The bytes reserved.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Reserves `more` bytes on top if they fit now; false (and counted as refused) if
    /// they do not.
    pub(super) fn grow(&mut self, more: u64) -> bool {
        let mut state = self.budget.lock();
        if state.held + more > state.limit {
            state.refused += 1;
            return false;
        }
        state.held += more;
        state.peak = state.peak.max(state.held);
        self.bytes += more;
        true
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let mut state = self.budget.lock();
        state.held -= self.bytes;
        drop(state);
        self.budget.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn holds_add_up_to_the_limit_and_are_given_back() {
        let budget = AnswerBudget::new(100);
        let soon = Instant::now() + Duration::from_secs(5);
        let a = budget.reserve(60, soon);
        let mut b = budget.reserve(40, soon).expect("40 fits beside 60");
        assert!(!b.grow(1));
        assert_eq!(budget.snapshot().held, 100);
        // Nothing fits now: a reservation past its deadline gives up.
        assert!(budget.reserve(1, Instant::now()).is_none());
        drop(a);
        assert!(b.grow(10));
        assert_eq!(b.bytes(), 50);
        drop(b);
        let seen = budget.snapshot();
        assert_eq!(
            (seen.limit, seen.held, seen.peak, seen.waited, seen.refused),
            (100, 0, 100, 1, 1)
        );
    }
}
