//! First in, first out: tasks run in the order they became ready.

use std::collections::VecDeque;

use super::{Policy, QueueEntry, TaskRef};
use crate::Time;

/// Capacity kept when the queue drains, so a burst does not pin its memory.
const KEEP: usize = 4096;

/// First in, first out. Push and pop are O(1).
#[derive(Debug, Default)]
pub struct Fifo {
    queue: VecDeque<TaskRef>,
}

impl Fifo {
    /// An empty FIFO queue.
    pub fn new() -> Fifo {
        Fifo::default()
    }
}

impl Policy for Fifo {
    #[inline]
    fn push(&mut self, entry: &QueueEntry) {
        self.queue.push_back(entry.task);
    }

    #[inline]
    fn pop(&mut self, _now: Time) -> Option<TaskRef> {
        let next = self.queue.pop_front();
        if next.is_none() && self.queue.capacity() > KEEP {
            self.queue.shrink_to(KEEP);
        }
        next
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn name(&self) -> &'static str {
        "fifo"
    }
}
