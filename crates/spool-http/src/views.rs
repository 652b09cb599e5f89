//! The views the loop publishes: what the API reads, copied on the loop's thread at
//! most once per interval ([`RuntimeBuilder::publish`]) and swapped in whole, so a
//! reader never waits for the loop and never sees half a turn. Each task's timing is
//! built here from the trace events, and the recent events are kept in a bounded ring
//! for the event stream.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use spool_core::{
    Cause, Phase, QueueState, ScheduleInfo, Scheduler, Stats, TaskId, TaskState, Time, TraceEvent,
    Value, WaitReason,
};
use spool_runtime::{PendingConfirmation, Publication, RuntimeBuilder, TurnStats};
use tokio::sync::watch;

/// How often the loop publishes by default, at most.
pub const DEFAULT_PUBLISH_EVERY: Duration = Duration::from_millis(20);

/// How many recent trace events the views keep for the event stream by default.
pub const DEFAULT_EVENT_RING: usize = 65_536;

/// How long a task has spent in each part of its life, from its trace events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timing {
    /// Waiting for a slot.
    pub queued: Duration,
    /// Waiting for dependencies.
    pub blocked: Duration,
    /// Waiting on a request whose kind backs off after a 429.
    pub rate_limited: Duration,
    /// Waiting for requests, by request kind (`several` for more than one at once,
    /// `timer`, `children`).
    pub waiting: BTreeMap<String, Duration>,
    /// Ready or being polled.
    pub running: Duration,
    /// Where the time since `since` goes.
    bucket: Bucket,
    since: Time,
}

/// Where a task's time is going now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum Bucket {
    #[default]
    None,
    Queued,
    Blocked,
    RateLimited,
    Waiting(String),
    Running,
}

impl Timing {
    fn add(&mut self, bucket: &Bucket, took: Duration) {
        match bucket {
            Bucket::None => {}
            Bucket::Queued => self.queued += took,
            Bucket::Blocked => self.blocked += took,
            Bucket::RateLimited => self.rate_limited += took,
            Bucket::Running => self.running += took,
            Bucket::Waiting(kind) => *self.waiting.entry(kind.clone()).or_default() += took,
        }
    }

    /// Takes `event`: the time since the last one goes to where it was going.
    fn take(&mut self, event: &TraceEvent) {
        let bucket = std::mem::take(&mut self.bucket);
        self.add(&bucket, event.time.saturating_since(self.since));
        self.since = event.time;
        self.bucket = match (&event.cause, &event.to) {
            (Cause::BackedOff { .. }, _) => Bucket::RateLimited,
            (_, Phase::Ready | Phase::Running) => Bucket::Running,
            (_, Phase::Waiting(WaitReason::Slot)) => Bucket::Queued,
            (_, Phase::Waiting(WaitReason::Dependencies(_))) => Bucket::Blocked,
            (_, Phase::Waiting(WaitReason::Request(kind))) => Bucket::Waiting(kind.to_string()),
            (_, Phase::Waiting(WaitReason::Requests(_))) => Bucket::Waiting("several".into()),
            (_, Phase::Waiting(WaitReason::Timer)) => Bucket::Waiting("timer".into()),
            (_, Phase::Waiting(WaitReason::Children(_))) => Bucket::Waiting("children".into()),
            _ => Bucket::None,
        };
    }

    /// The timing as of `now` (the open interval counted).
    fn at(&self, now: Time) -> Timing {
        let mut timing = self.clone();
        timing.add(&self.bucket, now.saturating_since(self.since));
        timing.since = now;
        timing
    }
}

/// One task as the API lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskRow {
    /// Its id.
    pub id: TaskId,
    /// Its type.
    pub type_name: String,
    /// Its agent.
    pub agent: String,
    /// Its priority level.
    pub priority: spool_core::Priority,
    /// Its state.
    pub state: TaskState,
    /// When it was submitted (scheduler time).
    pub created_at: Time,
    /// Requests it has out.
    pub in_flight: u32,
    /// Where its time went.
    pub timing: Timing,
    /// When it entered its current state (its last trace event; its submission if none).
    pub since: Time,
}

/// A pending confirmation as listed.
pub type Confirmation = PendingConfirmation;

/// Requests by kind and outcome, counted from the trace: answered, or backed off
/// after a 429.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// `(kind, outcome)` → count.
    pub by_kind: BTreeMap<(String, &'static str), u64>,
}

/// Everything the API reads, as of one publication.
#[derive(Clone, Debug, Default)]
pub struct Views {
    /// Publications so far (0: none yet).
    pub generation: u64,
    /// The scheduler's time at publication.
    pub now: Time,
    /// When it was published, by the monotonic clock (`None` before the first): the
    /// loop publishes only after turns that change something, so an idle server's
    /// views age, and a reader adds this to `now` for the time since.
    pub published_at: Option<std::time::Instant>,
    /// Every task in the table (live, and ended within retention), by id.
    pub tasks: BTreeMap<TaskId, TaskRow>,
    /// Seed 000's `queue_state`.
    pub queue: Option<QueueState>,
    /// Seed 000's `queue_details`, agents by name: `(detail, agent)`.
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
    /// Requests in flight, by kind.
    pub in_flight: BTreeMap<String, u64>,
    /// Requests by kind and outcome.
    pub requests: RequestCounts,
    /// The counters.
    pub stats: Stats,
    /// The loop's turns.
    pub turns: TurnStats,
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
        let views = builder_state.build(publication, &events);
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
    timings: BTreeMap<TaskId, Timing>,
    requests: RequestCounts,
    /// The kind each task waits on, for counting its answers.
    waiting_on: BTreeMap<TaskId, String>,
}

impl ViewBuilder {
    fn build(&mut self, publication: &Publication<'_>, events: &[TraceEvent]) -> Views {
        let runtime = publication.runtime();
        let core: &Scheduler = runtime.scheduler();
        for event in events {
            self.timings.entry(event.task).or_default().take(event);
            self.count_request(event);
        }
        let now = core.now();
        let mut tasks = BTreeMap::new();
        for info in core.tasks() {
            let kept = self.timings.get(&info.id);
            let timing = kept.map(|t| t.at(now)).unwrap_or_default();
            let since = kept.map_or(info.created_at, |t| t.since);
            tasks.insert(
                info.id,
                TaskRow {
                    id: info.id,
                    type_name: info.type_name.into_owned(),
                    agent: info.agent,
                    priority: info.priority,
                    state: info.state,
                    created_at: info.created_at,
                    in_flight: info.in_flight,
                    timing,
                    since,
                },
            );
        }
        // Forget the timing of tasks the table no longer holds.
        self.timings.retain(|id, _| tasks.contains_key(id));
        self.waiting_on.retain(|id, _| tasks.contains_key(id));
        let mut in_flight = BTreeMap::new();
        for request in core.in_flight() {
            *in_flight
                .entry(request.request.kind.to_string())
                .or_insert(0) += 1;
        }
        let details = core
            .queue_details()
            .into_iter()
            .map(|d| {
                let agent = core.agent_name(d.agent).to_owned();
                (d, agent)
            })
            .collect();
        self.generation += 1;
        Views {
            generation: self.generation,
            now,
            published_at: Some(std::time::Instant::now()),
            tasks,
            queue: Some(core.queue_state()),
            details,
            gates: core.gates(),
            policy: core.policy_name(),
            max_running: core.task_limits().max_running,
            schedules: runtime.schedules(),
            confirmations: runtime.pending_confirmations().to_vec(),
            in_flight,
            requests: self.requests.clone(),
            stats: core.stats().clone(),
            turns: *publication.turns(),
        }
    }

    /// Counts a request's answer or back-off by the kind its task waited on.
    fn count_request(&mut self, event: &TraceEvent) {
        match (&event.from, &event.cause) {
            (Phase::Waiting(WaitReason::Request(kind)), Cause::Answered(_)) => {
                self.bump(kind.to_string(), "answered");
            }
            (_, Cause::BackedOff { .. }) => {
                let kind = self
                    .waiting_on
                    .get(&event.task)
                    .cloned()
                    .unwrap_or_else(|| "unknown".to_owned());
                self.bump(kind, "backed_off");
            }
            (Phase::Waiting(WaitReason::Requests(_)), Cause::Answered(_)) => {
                self.bump("several".to_owned(), "answered");
            }
            _ => {}
        }
        if let Phase::Waiting(WaitReason::Request(kind)) = &event.to {
            self.waiting_on.insert(event.task, kind.to_string());
        }
    }

    fn bump(&mut self, kind: String, outcome: &'static str) {
        *self.requests.by_kind.entry((kind, outcome)).or_insert(0) += 1;
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

/// A task's result, if it completed with one.
pub fn result_of(state: &TaskState) -> Option<&Value> {
    match state {
        TaskState::Completed(Ok(value)) => Some(value),
        _ => None,
    }
}
