//! What the scheduler holds, counted, and its counters and trace: reads for drivers
//! and views.

use super::Scheduler;
use crate::stats::Stats;
use crate::trace::Trace;

impl Scheduler {
    /// Tasks ready to be polled.
    pub fn ready_len(&self) -> usize {
        self.ready.len
    }

    /// Requests made and not yet answered (in the outbox or with an executor).
    pub fn in_flight_len(&self) -> usize {
        self.outbox.in_flight
    }

    /// Tasks that have not ended.
    pub fn live_len(&self) -> usize {
        self.tasks.live()
    }

    /// Tasks in the table, ended ones included.
    pub fn len(&self) -> usize {
        self.tasks.entries().len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.tasks.entries().is_empty()
    }

    /// Whether requests or cancel signals wait to be taken by `poll_*`.
    pub fn has_outbound(&self) -> bool {
        self.outbox.has_outbound()
    }

    /// The counters so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The trace.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// The trace, to take its events.
    pub fn trace_mut(&mut self) -> &mut Trace {
        &mut self.trace
    }

    /// Starts or stops keeping trace events in memory (numbering and hash go on).
    pub fn record_trace(&mut self, record: bool) {
        self.trace.set_recording(record);
    }
}
