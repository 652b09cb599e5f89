//! Priority levels: `Critical`, then `High`, `Normal`, `Low`; FIFO within a level.
//!
//! Four fixed buckets rather than a heap: the keys are four levels, so push and pop are
//! O(1) and cost little more than [`Fifo`](super::Fifo).

use std::collections::VecDeque;

use super::fifo::push_in_order;
use super::{Policy, QueueEntry, TaskRef};
use crate::priority::Priority;
use crate::time::Time;

/// Capacity each level keeps when it drains.
const KEEP: usize = 1024;

/// Priority levels, highest first, FIFO within a level. Push and pop are O(1).
#[derive(Debug, Default)]
pub struct PriorityLevels {
    /// Indexed by `Priority as usize`: `Low` = 0 .. `Critical` = 3.
    levels: [VecDeque<(u64, TaskRef)>; 4],
    len: usize,
}

impl PriorityLevels {
    /// An empty queue.
    pub fn new() -> PriorityLevels {
        PriorityLevels::default()
    }

    #[inline]
    pub(crate) fn push_ref(&mut self, task: TaskRef, seq: u64, priority: Priority) {
        push_in_order(&mut self.levels[priority as usize], seq, task);
        self.len += 1;
    }
}

impl Policy for PriorityLevels {
    #[inline]
    fn push(&mut self, entry: &QueueEntry) {
        self.push_ref(entry.task, entry.seq, entry.priority);
    }

    #[inline]
    fn pop(&mut self, _now: Time) -> Option<TaskRef> {
        for level in self.levels.iter_mut().rev() {
            if let Some((_, task)) = level.pop_front() {
                self.len -= 1;
                return Some(task);
            }
            if level.capacity() > KEEP {
                level.shrink_to(KEEP);
            }
        }
        None
    }

    fn len(&self) -> usize {
        self.len
    }

    fn name(&self) -> &'static str {
        "priority"
    }

    fn queued(&self) -> Option<Vec<(u64, TaskRef)>> {
        Some(self.levels.iter().flatten().copied().collect())
    }
}
