//! First in, first out: tasks go in the order they were queued.

use std::collections::VecDeque;

use super::{Policy, QueueEntry, TaskRef};
use crate::time::Time;

/// Capacity kept when the queue drains, so a burst does not pin its memory.
const KEEP: usize = 4096;

/// Puts `(seq, task)` in `queue` in sequence order: at the back, unless an entry comes
/// back with an earlier number (a task unparked after a per-agent cap held it), which
/// goes back to its place.
#[inline]
pub(super) fn push_in_order(queue: &mut VecDeque<(u64, TaskRef)>, seq: u64, task: TaskRef) {
    match queue.back() {
        Some((last, _)) if *last > seq => {
            let at = queue.partition_point(|(s, _)| *s < seq);
            queue.insert(at, (seq, task));
        }
        _ => queue.push_back((seq, task)),
    }
}

/// First in, first out. Push and pop are O(1). Entries are kept in the order they
/// were pushed: the run queue never pushes out of order, so this queue does not keep
/// sequence numbers (see [`OrderedFifo`] for the queue of tasks waiting for a slot).
#[derive(Debug, Default)]
pub struct Fifo {
    queue: VecDeque<TaskRef>,
}

impl Fifo {
    /// An empty FIFO queue.
    pub fn new() -> Fifo {
        Fifo::default()
    }

    #[inline(always)]
    pub(crate) fn push_ref(&mut self, task: TaskRef) {
        self.queue.push_back(task);
    }
}

impl Policy for Fifo {
    #[inline]
    fn push(&mut self, entry: &QueueEntry) {
        self.push_ref(entry.task);
    }

    #[inline(always)]
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

    /// The queue keeps no sequence numbers: positions stand in for them.
    fn queued(&self) -> Option<Vec<(u64, TaskRef)>> {
        Some(
            self.queue
                .iter()
                .copied()
                .zip(0u64..)
                .map(|(t, i)| (i, t))
                .collect(),
        )
    }
}

/// First in, first out by sequence number: an entry pushed again with its old number
/// (a task a per-agent or per-type cap held back) goes back to its place. The FIFO
/// policy's queue of tasks waiting for a slot.
#[derive(Debug, Default)]
pub struct OrderedFifo {
    queue: VecDeque<(u64, TaskRef)>,
}

impl OrderedFifo {
    /// An empty queue.
    pub fn new() -> OrderedFifo {
        OrderedFifo::default()
    }
}

impl Policy for OrderedFifo {
    fn push(&mut self, entry: &QueueEntry) {
        push_in_order(&mut self.queue, entry.seq, entry.task);
    }

    fn pop(&mut self, _now: Time) -> Option<TaskRef> {
        let next = self.queue.pop_front();
        if next.is_none() && self.queue.capacity() > KEEP {
            self.queue.shrink_to(KEEP);
        }
        next.map(|(_, task)| task)
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn name(&self) -> &'static str {
        "fifo"
    }

    fn queued(&self) -> Option<Vec<(u64, TaskRef)>> {
        Some(self.queue.iter().copied().collect())
    }
}
