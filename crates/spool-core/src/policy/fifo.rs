//! First in, first out: tasks run in the order they became ready.

use std::collections::VecDeque;

use super::{Policy, QueueEntry};
use crate::Time;

/// First in, first out. Push and pop are O(1).
#[derive(Debug, Default)]
pub struct Fifo {
    queue: VecDeque<QueueEntry>,
}

impl Fifo {
    /// An empty FIFO queue.
    pub fn new() -> Fifo {
        Fifo::default()
    }
}

impl Policy for Fifo {
    #[inline]
    fn push(&mut self, entry: QueueEntry) {
        self.queue.push_back(entry);
    }

    #[inline]
    fn pop(&mut self, _now: Time) -> Option<QueueEntry> {
        self.queue.pop_front()
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn name(&self) -> &'static str {
        "fifo"
    }
}
