//! Publication: the loop hands a read-only view of itself to an embedder's function
//! at most once per interval, after turns that changed something, so that readers on
//! other threads (an HTTP server) read published copies instead of queueing queries
//! on the loop. With a publisher, the core records its trace and logs the tasks it
//! removes from its table, and the publisher gets each event and each removal once.

use std::fmt;
use std::time::{Duration, Instant};

use spool_core::{TaskId, TraceEvent};

use super::Runtime;

/// What the loop hands its publisher: the runtime between two turns, the trace events
/// since the last publication, and how long its turns take.
#[derive(Debug)]
pub struct Publication<'a> {
    runtime: &'a Runtime,
    events: Vec<TraceEvent>,
    removed: Vec<TaskId>,
    turns: TurnStats,
}

impl<'a> Publication<'a> {
    /// The runtime, between two turns.
    pub fn runtime(&self) -> &'a Runtime {
        self.runtime
    }

    /// The trace events since the last publication, oldest first.
    pub fn events(&self) -> &[TraceEvent] {
        &self.events
    }

    /// Takes the trace events since the last publication (each is handed out once).
    pub fn take_events(&mut self) -> Vec<TraceEvent> {
        std::mem::take(&mut self.events)
    }

    /// The tasks removed from the table since the last publication (forgotten, or
    /// evicted when their retention ran out), oldest first: the trace shows every
    /// other change to a task, not this one.
    pub fn removed(&self) -> &[TaskId] {
        &self.removed
    }

    /// Takes the ids of the tasks removed since the last publication (each is handed
    /// out once).
    pub fn take_removed(&mut self) -> Vec<TaskId> {
        std::mem::take(&mut self.removed)
    }

    /// The loop's turns so far.
    pub fn turns(&self) -> &TurnStats {
        &self.turns
    }
}

/// How long the loop's turns take (measured only when a publisher is installed).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TurnStats {
    /// Turns measured.
    pub turns: u64,
    /// Their time, summed.
    pub total: Duration,
    /// The longest.
    pub max: Duration,
}

/// The function a runtime publishes to ([`RuntimeBuilder::publish`](crate::RuntimeBuilder::publish)).
pub(crate) type PublishFn = Box<dyn FnMut(&mut Publication<'_>) + Send>;

/// The loop's publisher and when it last published.
pub(crate) struct Publisher {
    every: Duration,
    f: PublishFn,
    /// Trace events taken for the journal, kept for the next publication.
    events: Vec<TraceEvent>,
    last: Option<Instant>,
    /// Something changed since the last publication.
    owed: bool,
    turns: TurnStats,
}

impl fmt::Debug for Publisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Publisher")
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

impl Publisher {
    pub(crate) fn new(every: Duration, f: PublishFn) -> Publisher {
        Publisher {
            every,
            f,
            events: Vec::new(),
            last: None,
            // The first turn publishes where the runtime starts.
            owed: true,
            turns: TurnStats::default(),
        }
    }

    /// When the loop must wake to publish what changed, if anything did.
    fn deadline(&self) -> Option<Instant> {
        if !self.owed {
            return None;
        }
        Some(
            self.last
                .map_or_else(Instant::now, |last| last + self.every),
        )
    }
}

impl Runtime {
    /// Keeps trace events the journal took, for the publisher (which sees each once).
    pub(crate) fn keep_for_publisher(&mut self, events: &[TraceEvent]) {
        if let Some(publisher) = self.publisher.as_mut() {
            publisher.events.extend_from_slice(events);
        }
    }

    /// Ends a turn that began at `started`: counts its time and, if it `changed`
    /// something (or an earlier one did) and the last publication is at least `every`
    /// old, publishes.
    pub(crate) fn end_turn_publish(&mut self, started: Option<Instant>, changed: bool) {
        // What a turn whose group the journal refused holds may never be committed:
        // it is not published (the loop ends).
        if self.journaling.failed() {
            return;
        }
        let Some(publisher) = self.publisher.as_mut() else {
            return;
        };
        if let Some(started) = started {
            let took = started.elapsed();
            publisher.turns.turns += 1;
            publisher.turns.total += took;
            publisher.turns.max = publisher.turns.max.max(took);
        }
        publisher.owed |= changed;
        let due = publisher
            .last
            .is_none_or(|last| last.elapsed() >= publisher.every);
        if publisher.owed && due {
            self.publish_now();
        }
    }

    /// Publishes now, whatever changed.
    pub(crate) fn publish_now(&mut self) {
        let Some(mut publisher) = self.publisher.take() else {
            return;
        };
        let mut events = std::mem::take(&mut publisher.events);
        // Events since the turn's own (a run's last settling): the observer's too.
        let recorded = self.core.trace_mut().take_events();
        self.observe_events(&recorded);
        events.extend(recorded);
        let removed = self.core.take_removed();
        let mut publication = Publication {
            runtime: self,
            events,
            removed,
            turns: publisher.turns,
        };
        (publisher.f)(&mut publication);
        publisher.last = Some(Instant::now());
        publisher.owed = false;
        self.publisher = Some(publisher);
    }

    /// The trace events the next publication will hand out, oldest first: what
    /// happened since the last one. Empty without a publisher.
    ///
    /// A reader that needs a task newer than the published views (a client reading the
    /// task it was just answered) can derive what the views would show from these.
    pub fn unpublished_events(&self) -> impl Iterator<Item = &TraceEvent> + '_ {
        let (kept, recorded): (&[TraceEvent], &[TraceEvent]) = match &self.publisher {
            Some(publisher) => (&publisher.events, self.core.trace().events()),
            None => (&[], &[]),
        };
        kept.iter().chain(recorded)
    }

    /// When the loop must wake to publish, if it must.
    pub(crate) fn publish_deadline(&self) -> Option<Instant> {
        self.publisher.as_ref().and_then(Publisher::deadline)
    }

    /// Whether turns are measured (a publisher is installed).
    pub(crate) fn measures_turns(&self) -> bool {
        self.publisher.is_some()
    }
}
