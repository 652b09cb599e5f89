//! The views the loop publishes: what the API reads, updated on the loop's thread at
//! most once per interval ([`RuntimeBuilder::publish`]) and swapped in whole, so a
//! reader never waits for the loop and never sees half a turn.
//!
//! A publication costs what changed since the last one, not what the table holds: the
//! trace events since then name the tasks that changed, and only their rows are made
//! again (the core's [`Timeline`] of each is carried from its old row and takes the new
//! events); the tasks removed from the table (forgotten, or evicted after their
//! retention) come in the publication, since the trace does not show them. The rows
//! are shared between publications ([`TaskRows`]), so a new publication copies none
//! of the rows that did not change. A live task's open interval is closed at read
//! time, at the publication's `now`: no row is touched because time passed. The
//! queue's counts and details are taken over the live tasks only (their ages and
//! scores move with time), not over the ended ones the table keeps. The recent events
//! are kept in a bounded ring for the event stream.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use spool_core::{
    Cause, QueueState, ScheduleInfo, Scheduler, Stats, TaskId, TaskInfo, TaskState, Time, Timeline,
    TraceEvent, Value, WaitReason,
};
use spool_runtime::{PendingConfirmation, Publication, RuntimeBuilder, TurnStats};
use tokio::sync::watch;

use crate::histogram::TaskHistograms;
use crate::waits::{RecentWaits, WaitSummary};

/// How often the loop publishes by default, at most.
pub const DEFAULT_PUBLISH_EVERY: Duration = Duration::from_millis(20);

/// How many recent trace events the views keep for the event stream by default.
pub const DEFAULT_EVENT_RING: usize = 65_536;

/// One task as the API lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskRow {
    /// Its id.
    pub id: TaskId,
    /// Its type: the registered type it was submitted as.
    pub type_name: String,
    /// Its agent.
    pub agent: String,
    /// Its priority level.
    pub priority: spool_core::Priority,
    /// Its state.
    pub state: TaskState,
    /// When it was submitted (scheduler time).
    pub created_at: Time,
    /// Its requests in flight: sent to an executor and not answered (a request held
    /// back by a limit is not counted).
    pub in_flight: u32,
    /// The kinds of the requests it waits on, in flight or held back, as of its last
    /// change.
    pub requests: Vec<String>,
    /// Where its time went, from the trace events the views saw (for a task restored
    /// from a store, from the first publication on: its past is not in this process's
    /// trace).
    pub timeline: Timeline,
    /// The length of its result's JSON (compact), in bytes, once completed with one:
    /// measured once when the row is made, so that a list can leave a large result out
    /// without looking at it.
    pub result_bytes: Option<u64>,
    /// Whether the result was left out of the views: a result of more than
    /// [`VIEW_RESULT_MAX`] bytes is not copied into them (`state` holds `null` in its
    /// place); the loop's table has it, where `GET /v1/tasks/{id}` reads it.
    pub result_elided: bool,
    /// The task and step it was forked from, for a fork.
    pub forked_from: Option<spool_core::ForkOrigin>,
    /// What it spent on LLM answers, if the scheduler counts spend (it has budgets)
    /// and the task spent anything.
    pub spend: Option<spool_core::Spend>,
}

/// The longest result's JSON the views copy into a row, in bytes (64 KiB): a larger
/// one stays in the loop's table only, so that the views do not hold a second copy of
/// every large result.
pub const VIEW_RESULT_MAX: u64 = 64 * 1024;

impl TaskRow {
    /// The row without its result if the result is larger than [`VIEW_RESULT_MAX`].
    pub(crate) fn elide_large_result(mut self) -> TaskRow {
        if self.result_bytes.is_some_and(|n| n > VIEW_RESULT_MAX) {
            self.state = TaskState::Completed(Ok(Value::Null));
            self.result_elided = true;
        }
        self
    }

    pub(crate) fn new(info: TaskInfo, requests: Vec<String>, timeline: Timeline) -> TaskRow {
        TaskRow {
            result_bytes: result_of(&info.state).map(json_len),
            result_elided: false,
            id: info.id,
            type_name: info.type_name.into_owned(),
            agent: info.agent,
            priority: info.priority,
            state: info.state,
            created_at: info.created_at,
            in_flight: info.in_flight,
            requests,
            timeline,
            forked_from: None,
            spend: None,
        }
    }
}

/// How many consecutive ids a chunk of [`TaskRows`] holds.
const CHUNK: u64 = 256;

/// The tasks' rows by id, shared between publications in chunks of 256
/// consecutive ids, each row behind an `Arc` too.
///
/// Why chunks rather than a persistent map (such as `imbl`'s `OrdMap`): task ids only
/// grow and are never reused, so the rows fall into chunks by id that fill once and
/// then only change as their tasks do; new tasks go to the last chunk. Cloning the map
/// for a publication clones one `Arc` per chunk (a few hundred for 50,000 tasks, a
/// few microseconds), and a change copies its chunk's index of `Arc`s (at most 256)
/// once per publication, whatever else changes in it — so a publication costs about
/// what changed, with nothing more to depend on (a persistent map would be a new
/// dependency, under the MPL, for an O(log n) clone this gets in O(n / 256) with a
/// tiny constant). Readers iterate and look up ids as in a `BTreeMap`.
#[derive(Clone, Debug, Default)]
pub struct TaskRows {
    chunks: BTreeMap<u64, Arc<BTreeMap<TaskId, Arc<TaskRow>>>>,
    len: usize,
}

impl TaskRows {
    /// The row of task `id`.
    pub fn get(&self, id: &TaskId) -> Option<&TaskRow> {
        self.chunks
            .get(&(id.get() / CHUNK))
            .and_then(|chunk| chunk.get(id))
            .map(AsRef::as_ref)
    }

    /// How many rows there are.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every row, by id.
    pub fn values(&self) -> impl Iterator<Item = &TaskRow> {
        self.chunks
            .values()
            .flat_map(|chunk| chunk.values().map(AsRef::as_ref))
    }

    /// The rows of ids greater than `id`, by id.
    pub fn after(&self, id: TaskId) -> impl Iterator<Item = &TaskRow> {
        self.chunks
            .range(id.get() / CHUNK..)
            .flat_map(move |(_, chunk)| {
                chunk
                    .range((Bound::Excluded(id), Bound::Unbounded))
                    .map(|(_, row)| row.as_ref())
            })
    }

    /// The greatest id there is a row of.
    pub fn last_id(&self) -> Option<TaskId> {
        self.chunks
            .values()
            .next_back()
            .and_then(|chunk| chunk.keys().next_back().copied())
    }

    /// Puts `row` in, in place of the row of the same id; returns that one.
    pub(crate) fn insert(&mut self, row: TaskRow) -> Option<Arc<TaskRow>> {
        let chunk = self.chunks.entry(row.id.get() / CHUNK).or_default();
        let old = Arc::make_mut(chunk).insert(row.id, Arc::new(row));
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Takes out the row of task `id`.
    fn remove(&mut self, id: TaskId) -> Option<Arc<TaskRow>> {
        let key = id.get() / CHUNK;
        let chunk = self.chunks.get_mut(&key)?;
        let old = Arc::make_mut(chunk).remove(&id)?;
        if chunk.is_empty() {
            self.chunks.remove(&key);
        }
        self.len -= 1;
        Some(old)
    }
}

/// A pending confirmation as listed.
pub type Confirmation = PendingConfirmation;

/// Answers by request kind and outcome since the server started, as the core counts
/// them ([`spool_core::Trace::answers`]): `ok` (a value), `error` (an error, a 429
/// not retried any more included), `backed_off` (a 429 that sent the request back to its gate).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// `(kind, outcome)` → count.
    pub by_kind: BTreeMap<(String, &'static str), u64>,
}

impl RequestCounts {
    /// The counts of `answers`, each kind with its three outcomes.
    pub fn of(answers: &BTreeMap<spool_core::Kind, spool_core::AnswerCounts>) -> RequestCounts {
        let mut by_kind = BTreeMap::new();
        for (kind, counts) in answers {
            let kind = kind.to_string();
            by_kind.insert((kind.clone(), "backed_off"), counts.backed_off);
            by_kind.insert((kind.clone(), "error"), counts.error);
            by_kind.insert((kind, "ok"), counts.ok);
        }
        RequestCounts { by_kind }
    }
}

/// Everything the API reads, as of one publication.
#[derive(Clone, Debug, Default)]
pub struct Views {
    /// Publications so far (0: none yet).
    pub generation: u64,
    /// The scheduler's time at publication.
    pub now: Time,
    /// The wall-clock instant of `now` (`Runtime::wall_time`): a task's submission
    /// and deadline read in it; `None` before the first publication.
    pub wall_clock: Option<jiff::Timestamp>,
    /// When it was published, by the monotonic clock (`None` before the first): the
    /// loop publishes only after turns that change something, so an idle server's
    /// views age, and a reader adds this to `now` for the time since.
    pub published_at: Option<std::time::Instant>,
    /// Every task in the table (live, and ended within retention), by id.
    pub tasks: TaskRows,
    /// The scheduler at a glance (`queue_state`).
    pub queue: Option<QueueState>,
    /// Every task's queue detail (`queue_details`), agents by name: `(detail, agent)`.
    pub details: Vec<(spool_core::QueueDetail, String)>,
    /// Every request kind's gate.
    pub gates: Vec<spool_core::GateView>,
    /// The run-queue policy's name.
    pub policy: &'static str,
    /// The most tasks started at once, if limited.
    pub max_running: Option<usize>,
    /// Every schedule with its status.
    pub schedules: Vec<ScheduleInfo>,
    /// Confirmations waiting for an answer.
    pub confirmations: Vec<Confirmation>,
    /// Requests in flight (out, not held, and not answered), by kind: the queue's
    /// [`by_kind`](QueueState::by_kind) counts, kinds with none left out.
    pub in_flight: BTreeMap<String, u64>,
    /// Requests by kind and outcome.
    pub requests: RequestCounts,
    /// The waits and durations of the tasks that ended since the server started.
    pub histograms: TaskHistograms,
    /// The wait statistics every view shows, over the latest tasks that ended.
    pub waits: WaitSummary,
    /// The counters.
    pub stats: Stats,
    /// The loop's turns.
    pub turns: TurnStats,
    /// Spend by agent and for the day, if the scheduler counts spend (it has budgets).
    pub spend: Option<spool_core::SpendReport>,
}

impl Views {
    /// The scheduler's time as of now, read off the publication: its `now` plus the
    /// time since it was published. The loop publishes only after turns that change
    /// something, so an idle server's last publication ages while its tasks' waits go
    /// on; ages and open intervals are taken at this time, not at `now`. (Between a
    /// change and its publication, at most one publishing interval, a wait may show a
    /// little longer than it was.)
    pub fn read_now(&self) -> Time {
        self.now + self.published_at.map_or(Duration::ZERO, |at| at.elapsed())
    }
}

/// The recent trace events, oldest first, at most `capacity`.
#[derive(Debug)]
pub struct EventRing {
    events: VecDeque<TraceEvent>,
    capacity: usize,
}

impl EventRing {
    fn new(capacity: usize) -> EventRing {
        EventRing {
            events: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    fn push(&mut self, event: TraceEvent) {
        if self.events.len() == self.capacity {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    /// The sequence number of the oldest event kept.
    pub fn first_seq(&self) -> Option<u64> {
        self.events.front().map(|e| e.seq)
    }

    /// The sequence number of the newest event kept.
    pub fn last_seq(&self) -> Option<u64> {
        self.events.back().map(|e| e.seq)
    }

    /// The events after `seq` (all of them for 0), up to `max`, that `keep` keeps.
    pub fn after(
        &self,
        seq: u64,
        max: usize,
        keep: impl Fn(&TraceEvent) -> bool,
    ) -> Vec<TraceEvent> {
        let start = self.events.partition_point(|e| e.seq <= seq);
        self.events
            .range(start..)
            .filter(|e| keep(e))
            .take(max)
            .cloned()
            .collect()
    }
}

/// The shared side of the views: the latest publication, the ring, and a signal that
/// changes at each publication.
#[derive(Clone, Debug)]
pub struct ViewsHandle {
    latest: Arc<RwLock<Arc<Views>>>,
    ring: Arc<RwLock<EventRing>>,
    published: watch::Receiver<u64>,
}

impl ViewsHandle {
    /// The latest publication.
    pub fn latest(&self) -> Arc<Views> {
        match self.latest.read() {
            Ok(views) => Arc::clone(&views),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Reads the event ring.
    pub fn with_ring<T>(&self, f: impl FnOnce(&EventRing) -> T) -> T {
        match self.ring.read() {
            Ok(ring) => f(&ring),
            Err(poisoned) => f(&poisoned.into_inner()),
        }
    }

    /// A receiver that changes at each publication.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.published.clone()
    }
}

/// Installs on `builder` a publisher that builds the API's [`Views`] at most once per
/// `every`, keeping the last `ring` trace events; returns the builder and the handle
/// the API reads through.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use spool_runtime::Runtime;
///
/// let (builder, views) = spool_http::publish_views(Runtime::builder(), Duration::from_millis(20), 1024);
/// let mut runtime = builder.build();
/// runtime.run_until_idle();
/// assert!(views.latest().generation >= 1);
/// ```
pub fn publish_views(
    builder: RuntimeBuilder,
    every: Duration,
    ring: usize,
) -> (RuntimeBuilder, ViewsHandle) {
    let latest = Arc::new(RwLock::new(Arc::new(Views::default())));
    let ring = Arc::new(RwLock::new(EventRing::new(ring)));
    let (tx, rx) = watch::channel(0);
    let handle = ViewsHandle {
        latest: Arc::clone(&latest),
        ring: Arc::clone(&ring),
        published: rx,
    };
    let mut builder_state = ViewBuilder::default();
    let builder = builder.publish(every, move |publication| {
        let events = publication.take_events();
        let removed = publication.take_removed();
        let views = builder_state.build(publication, &events, &removed);
        let generation = views.generation;
        if let Ok(mut ring) = ring.write() {
            for event in events {
                ring.push(event);
            }
        }
        if let Ok(mut latest) = latest.write() {
            *latest = Arc::new(views);
        }
        tx.send_replace(generation);
    });
    (builder, handle)
}

/// What the publisher keeps between publications.
#[derive(Debug, Default)]
struct ViewBuilder {
    generation: u64,
    /// The rows as last published (shared with that publication).
    rows: TaskRows,
    /// Whether the rows hold every task the table held at the first publication (a
    /// restored runtime starts with tasks no event names).
    seeded: bool,
    /// The tasks that have not ended: the queue's counts and details are taken over
    /// these, not over every task the table holds.
    live: BTreeSet<TaskId>,
    /// The ended tasks' waits and durations.
    histograms: TaskHistograms,
    /// The latest ended tasks' waits, and their statistics as last published.
    waits: RecentWaits,
    wait_summary: WaitSummary,
}

impl ViewBuilder {
    fn build(
        &mut self,
        publication: &Publication<'_>,
        events: &[TraceEvent],
        removed: &[TaskId],
    ) -> Views {
        let runtime = publication.runtime();
        let core: &Scheduler = runtime.scheduler();
        self.take_changes(core, events, removed);
        // As `queue_details` gives them (in the policy's order), over the live tasks only.
        let details: Vec<_> = core
            .queue_details_of(self.live.iter().copied())
            .into_iter()
            .map(|d| {
                let agent = core.agent_name(d.agent).to_owned();
                (d, agent)
            })
            .collect();
        let queue = core.queue_state_of(self.live.iter().copied());
        let in_flight = queue
            .by_kind
            .iter()
            .filter(|k| k.in_flight > 0)
            .map(|k| (k.kind.to_string(), k.in_flight as u64))
            .collect();
        self.generation += 1;
        Views {
            generation: self.generation,
            now: core.now(),
            wall_clock: runtime.wall_time(core.now()),
            published_at: Some(std::time::Instant::now()),
            tasks: self.rows.clone(),
            queue: Some(queue),
            details,
            gates: core.gates(),
            policy: core.policy_name(),
            max_running: core.task_limits().max_running,
            schedules: runtime.schedules(),
            confirmations: runtime.pending_confirmations().to_vec(),
            in_flight,
            requests: RequestCounts::of(core.trace().answers()),
            histograms: self.histograms.clone(),
            waits: self.wait_summary,
            stats: core.stats().clone(),
            turns: *publication.turns(),
            spend: core.spend(),
        }
    }

    /// Takes in what changed since the last publication: makes again the rows of the
    /// tasks that `events` name (each timeline carried on from its row) and counts
    /// those that ended, seeds the rows at the first publication, and drops the rows
    /// of the tasks gone from the table (`removed`, or no longer there).
    fn take_changes(&mut self, core: &Scheduler, events: &[TraceEvent], removed: &[TaskId]) {
        // The tasks the events name, each with its timeline taken on from its row.
        let mut touched: BTreeMap<TaskId, Timeline> = BTreeMap::new();
        for event in events {
            let rows = &self.rows;
            touched
                .entry(event.task)
                .or_insert_with(|| {
                    rows.get(&event.task)
                        .map(|row| row.timeline.clone())
                        .unwrap_or_default()
                })
                .take(event);
        }
        self.observe_ended(core, events, &touched);
        if !self.seeded {
            // The tasks the runtime started with (restored): their timelines go on
            // from now, in the state they are in; what came before is not in this
            // process's trace.
            self.seeded = true;
            let now = core.now();
            for info in core.tasks() {
                if !touched.contains_key(&info.id) {
                    let timeline = Timeline::resumed(now, &info.state);
                    self.put(core, info, timeline);
                }
            }
        }
        for (id, timeline) in touched {
            match core.task(id) {
                Some(info) => self.put(core, info, timeline),
                None => self.drop_row(id),
            }
        }
        for id in removed {
            self.drop_row(*id);
        }
    }

    /// Counts in the histograms, once each, the tasks that ended since the last
    /// publication (`touched`, from `events`); a rejected submission is not a task
    /// that ran, and is left out.
    fn observe_ended(
        &mut self,
        core: &Scheduler,
        events: &[TraceEvent],
        touched: &BTreeMap<TaskId, Timeline>,
    ) {
        let mut born = BTreeSet::new();
        let mut rejected = BTreeSet::new();
        for event in events {
            match event.cause {
                Cause::Submitted | Cause::Spawned(_) => {
                    born.insert(event.task);
                }
                Cause::Rejected => {
                    rejected.insert(event.task);
                }
                _ => {}
            }
        }
        let mut changed = false;
        for (id, timeline) in touched {
            let Some(end) = timeline.ended() else {
                continue;
            };
            let before = self.rows.get(id);
            if rejected.contains(id) || before.is_some_and(|row| row.timeline.ended().is_some()) {
                continue;
            }
            // Its submission time; for one submitted and gone within this publication,
            // its first event's. A task restored at start and gone before the first
            // publication has none known: it is left out.
            let created = core
                .task(*id)
                .map(|info| info.created_at)
                .or(before.map(|row| row.created_at))
                .or_else(|| born.contains(id).then(|| timeline.started()).flatten());
            if let Some(created) = created
                && let Some(waited) = self.histograms.observe(timeline, created, end)
            {
                self.waits.push(waited);
                changed = true;
            }
        }
        // Sorted again only when a wait came in (and once for the first publication).
        if changed || self.generation == 0 {
            self.wait_summary = self.waits.summary();
        }
    }

    /// Makes task `info`'s row again, with `timeline`.
    fn put(&mut self, core: &Scheduler, info: TaskInfo, timeline: Timeline) {
        let requests: Vec<String> = core
            .task_requests(info.id)
            .iter()
            .map(ToString::to_string)
            .collect();
        if matches!(info.state, TaskState::Completed(_) | TaskState::Canceled(_)) {
            self.live.remove(&info.id);
        } else {
            self.live.insert(info.id);
        }
        let forked_from = core.fork_origin(info.id).map(|(origin, _)| origin);
        let spend = core.task_spend(info.id);
        let mut row = TaskRow::new(info, requests, timeline).elide_large_result();
        row.forked_from = forked_from;
        row.spend = spend;
        self.rows.insert(row);
    }

    /// Takes out task `id`'s row: it left the table.
    fn drop_row(&mut self, id: TaskId) {
        self.rows.remove(id);
        self.live.remove(&id);
    }
}

/// A short tag for a task's state, as the API filters by it: `ready`, `running`,
/// `waiting`, `queued` (for a slot), `blocked` (on dependencies), `completed`,
/// `failed`, `canceled`.
pub fn state_tag(state: &TaskState) -> &'static str {
    match state {
        TaskState::Ready => "ready",
        TaskState::Running => "running",
        TaskState::Waiting(WaitReason::Slot) => "queued",
        TaskState::Waiting(WaitReason::Dependencies(_)) => "blocked",
        TaskState::Waiting(_) => "waiting",
        TaskState::Completed(Ok(_)) => "completed",
        TaskState::Completed(Err(_)) => "failed",
        TaskState::Canceled(_) => "canceled",
    }
}

/// Every state tag [`state_tag`] gives.
pub const STATE_TAGS: [&str; 8] = [
    "ready",
    "running",
    "waiting",
    "queued",
    "blocked",
    "completed",
    "failed",
    "canceled",
];

/// The length of `value`'s compact JSON, in bytes, counted without keeping it.
pub(crate) fn json_len(value: &Value) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to the counter cannot fail, nor can a `Value` fail to serialize.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// A task's result, if it completed with one.
pub fn result_of(state: &TaskState) -> Option<&Value> {
    match state {
        TaskState::Completed(Ok(value)) => Some(value),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
