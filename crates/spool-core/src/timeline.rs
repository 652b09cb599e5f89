//! Per-task timelines: the contiguous intervals a task spent in each wait,
//! derived from its trace events, so that every view of a task (the HTTP API, a
//! terminal dashboard, a web page) shows the same numbers.
//!
//! A [`Timeline`] takes one task's [`TraceEvent`]s one at a time, in order. Its
//! intervals start at the task's first event (its submission), follow one another with
//! no gap and no overlap, and the last ends at the task's end — or, for a live task, at
//! whatever `now` the reader gives: the open interval is never stored closed, so a
//! view computes it at read time instead of touching every task as time passes.
//! Totals by wait come from the intervals, so they add up to the task's lifetime
//! exactly.
//!
//! What each trace phase means here:
//! - `Waiting(Slot)`: [`Wait::Queued`]; `Waiting(Dependencies)`: [`Wait::Blocked`];
//! - `Waiting(Request(kind))`: [`Wait::Request`], or [`Wait::RateLimited`] while one of
//!   its requests is held back: answered 429 and backing off
//!   ([`Cause::BackedOff`]) or held at its kind's gate by a window, token or
//!   concurrency limit or its agent's cap ([`Cause::Held`]), until the gate lets it
//!   go ([`Cause::Released`]);
//! - `Waiting(Requests(n))`: [`Wait::Requests`] (or [`Wait::RateLimited`] the same
//!   way); `Waiting(Timer)`: [`Wait::Timer`]; `Waiting(Children)`: [`Wait::Children`];
//! - `Ready` and `Running`: [`Wait::Running`].
//!
//! Transitions at the same instant leave no zero-length interval: the interval that
//! would have lasted no time is dropped, and equal neighbours are merged.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::id::TaskId;
use crate::kind::Kind;
use crate::state::{TaskState, WaitReason};
use crate::time::Time;
use crate::trace::{Cause, Phase, TraceEvent};

/// What a task's time went to during one interval.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Wait {
    /// Waiting for a slot (a concurrency limit or the start window).
    Queued,
    /// Waiting for the tasks it depends on.
    Blocked,
    /// Waiting on a request held back by a rate limit: a 429 back-off, or its kind's
    /// gate (window, tokens, in-flight cap, its agent's cap). The kind, when known.
    RateLimited(Option<Kind>),
    /// Waiting for one request of this kind (`confirm`: a person).
    Request(Kind),
    /// Waiting for several requests at once (this many).
    Requests(u32),
    /// Waiting for a timer.
    Timer,
    /// Waiting for children it joined.
    Children,
    /// Ready or being polled.
    Running,
}

impl Wait {
    /// The wait's name as the HTTP API gives it: `queued`, `blocked`, `rate_limited`,
    /// `request`, `requests`, `timer`, `children` or `running`.
    pub fn name(&self) -> &'static str {
        match self {
            Wait::Queued => "queued",
            Wait::Blocked => "blocked",
            Wait::RateLimited(_) => "rate_limited",
            Wait::Request(_) => "request",
            Wait::Requests(_) => "requests",
            Wait::Timer => "timer",
            Wait::Children => "children",
            Wait::Running => "running",
        }
    }

    /// The request kind it concerns, if any.
    pub fn kind(&self) -> Option<&Kind> {
        match self {
            Wait::RateLimited(kind) => kind.as_ref(),
            Wait::Request(kind) => Some(kind),
            _ => None,
        }
    }
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind() {
            Some(kind) => write!(f, "{}({kind})", self.name()),
            None => match self {
                Wait::Requests(n) => write!(f, "requests({n})"),
                other => f.write_str(other.name()),
            },
        }
    }
}

/// One stretch of a task's life: `[start, end)` spent in `wait`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interval {
    /// When it began.
    pub start: Time,
    /// When it ended (for the open interval of a live task, the `now` it was read at).
    pub end: Time,
    /// What the time went to.
    pub wait: Wait,
}

impl Interval {
    /// How long it lasted.
    pub fn duration(&self) -> Duration {
        self.end.saturating_since(self.start)
    }
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} .. {} {}", self.start, self.end, self.wait)
    }
}

/// Where a task's time went, summed by wait from its intervals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Waiting for a slot.
    pub queued: Duration,
    /// Waiting for dependencies.
    pub blocked: Duration,
    /// Waiting on requests held back by a rate limit (429 back-off or a gate).
    pub rate_limited: Duration,
    /// Waiting for requests, by kind (`llm`, `tool:NAME`, `confirm`; `several` for
    /// more than one at once), for a timer (`timer`) and for children (`children`).
    pub waiting: BTreeMap<String, Duration>,
    /// Ready or being polled.
    pub running: Duration,
}

impl Totals {
    /// Adds `took` spent in `wait`.
    pub fn add(&mut self, wait: &Wait, took: Duration) {
        match wait {
            Wait::Queued => self.queued += took,
            Wait::Blocked => self.blocked += took,
            Wait::RateLimited(_) => self.rate_limited += took,
            Wait::Running => self.running += took,
            Wait::Request(kind) => *self.waiting.entry(kind.to_string()).or_default() += took,
            Wait::Requests(_) => *self.waiting.entry("several".to_owned()).or_default() += took,
            Wait::Timer => *self.waiting.entry("timer".to_owned()).or_default() += took,
            Wait::Children => *self.waiting.entry("children".to_owned()).or_default() += took,
        }
    }

    /// The sum of every part.
    pub fn total(&self) -> Duration {
        self.queued
            + self.blocked
            + self.rate_limited
            + self.running
            + self.waiting.values().sum::<Duration>()
    }
}

/// One task's timeline, built from its trace events as they come.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use spool_core::{Kind, NewTask, Scheduler, Step, Time, Timeline, Wait, task_fn};
///
/// let mut scheduler = Scheduler::new(Default::default());
/// scheduler.record_trace(true);
/// let task = scheduler
///     .submit(Time::ZERO, NewTask::new(task_fn("hi", |_cx| Step::done("hi"))))
///     .unwrap()
///     .id;
/// let later = Time::ZERO + Duration::from_millis(5);
/// while scheduler.step(later).is_some() {}
/// let timeline = Timeline::of(task, scheduler.trace().events());
/// let spans: Vec<String> = timeline.intervals(later).map(|i| i.to_string()).collect();
/// assert_eq!(spans, ["0.000s .. 0.005s running"]);
/// assert_eq!(timeline.ended(), Some(later));
/// assert_eq!(timeline.totals(later).running, Duration::from_millis(5));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// The closed intervals, oldest first.
    closed: Vec<Interval>,
    /// The interval going on: since when, in what (none before the first event).
    open: Option<(Time, Wait)>,
    /// When the task ended, once it has.
    ended: Option<Time>,
    /// The phase its last event left it in.
    phase: Option<Phase>,
    /// Its requests held back now (backing off or held at a gate), with their kinds
    /// when the trace named them.
    held: Vec<(u32, Option<Kind>)>,
}

impl Timeline {
    /// An empty timeline (no event yet).
    pub fn new() -> Timeline {
        Timeline::default()
    }

    /// The timeline of a task whose events before `at` are not known (restored from a
    /// snapshot or a store: the trace before was another process's), going on from
    /// `at` in the state `state`. Its intervals start at `at`, not at its submission;
    /// an ended task's timeline stays empty.
    pub fn resumed(at: Time, state: &TaskState) -> Timeline {
        let phase = match state {
            TaskState::Ready => Phase::Ready,
            TaskState::Running => Phase::Running,
            TaskState::Waiting(reason) => Phase::Waiting(reason.clone()),
            _ => return Timeline::new(),
        };
        let mut timeline = Timeline::new();
        let wait = timeline.wait_in(&phase);
        timeline.phase = Some(phase);
        timeline.go(at, wait);
        timeline
    }

    /// The timeline of task `task` from `events` (a trace; other tasks' events are
    /// passed over).
    pub fn of(task: TaskId, events: &[TraceEvent]) -> Timeline {
        let mut timeline = Timeline::new();
        for event in events.iter().filter(|e| e.task == task) {
            timeline.take(event);
        }
        timeline
    }

    /// Takes the task's next trace event. Events after its end are passed over, and so
    /// is an event earlier than the interval going on (time never goes back).
    pub fn take(&mut self, event: &TraceEvent) {
        if self.ended.is_some() {
            return;
        }
        let time = match &self.open {
            Some((since, _)) => event.time.max(*since),
            None => event.time,
        };
        match &event.cause {
            Cause::BackedOff { number, .. } => self.hold(*number, request_kind(&event.to)),
            Cause::Held { number, kind } => self.hold(*number, Some(kind.clone())),
            Cause::Released { number, .. } | Cause::Answered(number) => {
                self.held.retain(|(n, _)| n != number);
            }
            _ => {}
        }
        let wait = match &event.to {
            Phase::New => None,
            Phase::Completed | Phase::Failed | Phase::Canceled => {
                self.close_at(time);
                self.ended = Some(time);
                self.held.clear();
                self.phase = Some(event.to.clone());
                return;
            }
            phase => Some(self.wait_in(phase)),
        };
        self.phase = Some(event.to.clone());
        if let Some(wait) = wait {
            self.go(time, wait);
        }
    }

    fn hold(&mut self, number: u32, kind: Option<Kind>) {
        if !self.held.iter().any(|(n, _)| *n == number) {
            self.held.push((number, kind));
        }
    }

    /// What time in `phase` goes to, given the requests held back now.
    fn wait_in(&self, phase: &Phase) -> Wait {
        match phase {
            Phase::Waiting(WaitReason::Slot) => Wait::Queued,
            Phase::Waiting(WaitReason::Dependencies(_)) => Wait::Blocked,
            Phase::Waiting(WaitReason::Timer) => Wait::Timer,
            Phase::Waiting(WaitReason::Children(_)) => Wait::Children,
            Phase::Waiting(WaitReason::Request(kind)) if self.held.is_empty() => {
                Wait::Request(kind.clone())
            }
            Phase::Waiting(WaitReason::Request(kind)) => Wait::RateLimited(Some(kind.clone())),
            Phase::Waiting(WaitReason::Requests(n)) if self.held.is_empty() => Wait::Requests(*n),
            Phase::Waiting(WaitReason::Requests(_)) => {
                Wait::RateLimited(self.held.iter().find_map(|(_, kind)| kind.clone()))
            }
            _ => Wait::Running,
        }
    }

    /// From `time` on, the task's time goes to `wait`.
    fn go(&mut self, time: Time, wait: Wait) {
        match self.open.take() {
            None => self.open = Some((time, wait)),
            Some((since, going)) if going == wait => self.open = Some((since, going)),
            Some((since, going)) if since < time => {
                self.closed.push(Interval {
                    start: since,
                    end: time,
                    wait: going,
                });
                self.open = Some((time, wait));
            }
            // The open interval lasted no time: it is dropped, and the one before it,
            // if it is of the same wait, goes on.
            Some((since, _)) => match self.closed.last() {
                Some(last) if last.wait == wait && last.end == since => {
                    let last = self.closed.pop();
                    self.open = last.map(|l| (l.start, l.wait));
                }
                _ => self.open = Some((since, wait)),
            },
        }
    }

    /// Closes the open interval at `time` (dropped if it lasted no time).
    fn close_at(&mut self, time: Time) {
        if let Some((since, wait)) = self.open.take()
            && since < time
        {
            self.closed.push(Interval {
                start: since,
                end: time,
                wait,
            });
        }
    }

    /// When the task's first event came (its submission), if one has.
    pub fn started(&self) -> Option<Time> {
        self.closed
            .first()
            .map(|i| i.start)
            .or(self.open.as_ref().map(|(since, _)| *since))
            .or(self.ended)
    }

    /// When the task ended, if it has.
    pub fn ended(&self) -> Option<Time> {
        self.ended
    }

    /// Since when its time goes to what it goes to now (the start of the open
    /// interval; `None` once it has ended, or before its first event).
    pub fn since(&self) -> Option<Time> {
        self.open.as_ref().map(|(since, _)| *since)
    }

    /// What its time goes to now (`None` once it has ended, or before its first
    /// event).
    pub fn current(&self) -> Option<&Wait> {
        self.open.as_ref().map(|(_, wait)| wait)
    }

    /// Its intervals, oldest first; a live task's last one (the open interval) ends at
    /// `now` (or where it began, if `now` is earlier).
    pub fn intervals(&self, now: Time) -> impl Iterator<Item = Interval> + '_ {
        let open = self.open.as_ref().map(|(since, wait)| Interval {
            start: *since,
            end: now.max(*since),
            wait: wait.clone(),
        });
        self.closed.iter().cloned().chain(open)
    }

    /// How many intervals it has (the open one included).
    pub fn len(&self) -> usize {
        self.closed.len() + usize::from(self.open.is_some())
    }

    /// Whether it has no interval.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its totals by wait, the open interval counted up to `now`.
    pub fn totals(&self, now: Time) -> Totals {
        let mut totals = Totals::default();
        for interval in self.intervals(now) {
            totals.add(&interval.wait, interval.duration());
        }
        totals
    }

    /// The intervals as text, one per line, as `insta` snapshots show them.
    pub fn render(&self, now: Time) -> String {
        let mut out = String::new();
        for interval in self.intervals(now) {
            out.push_str(&interval.to_string());
            out.push('\n');
        }
        if let Some(end) = self.ended {
            out.push_str(&format!("ended {end}\n"));
        }
        out
    }
}

/// The kind of the one request a phase waits on.
fn request_kind(phase: &Phase) -> Option<Kind> {
    match phase {
        Phase::Waiting(WaitReason::Request(kind)) => Some(kind.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Time {
        Time::ZERO + Duration::from_millis(n)
    }

    fn event(time: u64, from: Phase, to: Phase, cause: Cause) -> TraceEvent {
        TraceEvent {
            seq: 0,
            time: ms(time),
            task: TaskId::from_raw(1),
            from,
            to,
            cause,
        }
    }

    fn llm() -> Phase {
        Phase::Waiting(WaitReason::Request(Kind::Llm))
    }

    #[test]
    fn held_and_backed_off_requests_are_rate_limited_until_released() {
        let mut timeline = Timeline::new();
        for e in [
            event(0, Phase::New, Phase::Ready, Cause::Submitted),
            event(0, Phase::Ready, Phase::Running, Cause::Scheduled),
            event(0, Phase::Running, llm(), Cause::Requested(1)),
            event(
                0,
                llm(),
                llm(),
                Cause::Held {
                    number: 1,
                    kind: Kind::Llm,
                },
            ),
            event(
                7,
                llm(),
                llm(),
                Cause::Released {
                    number: 1,
                    kind: Kind::Llm,
                },
            ),
            event(
                9,
                llm(),
                llm(),
                Cause::BackedOff {
                    number: 1,
                    until: ms(20),
                },
            ),
            event(
                20,
                llm(),
                llm(),
                Cause::Released {
                    number: 1,
                    kind: Kind::Llm,
                },
            ),
            event(25, llm(), Phase::Ready, Cause::Answered(1)),
            event(26, Phase::Ready, Phase::Running, Cause::Scheduled),
            event(26, Phase::Running, Phase::Completed, Cause::Returned),
        ] {
            timeline.take(&e);
        }
        assert_eq!(
            timeline.render(ms(99)),
            "0.000s .. 0.007s rate_limited(llm)\n\
             0.007s .. 0.009s request(llm)\n\
             0.009s .. 0.020s rate_limited(llm)\n\
             0.020s .. 0.025s request(llm)\n\
             0.025s .. 0.026s running\n\
             ended 0.026s\n"
        );
        let totals = timeline.totals(ms(99));
        assert_eq!(totals.rate_limited, Duration::from_millis(18));
        assert_eq!(totals.waiting["llm"], Duration::from_millis(7));
        assert_eq!(totals.total(), Duration::from_millis(26));
        assert_eq!(timeline.started(), Some(ms(0)));
    }

    #[test]
    fn a_resumed_timeline_goes_on_from_where_it_was_restored() {
        let mut timeline =
            Timeline::resumed(ms(40), &TaskState::Waiting(WaitReason::Request(Kind::Llm)));
        assert_eq!(timeline.started(), Some(ms(40)));
        timeline.take(&event(45, llm(), Phase::Ready, Cause::Answered(1)));
        timeline.take(&event(45, Phase::Ready, Phase::Running, Cause::Scheduled));
        timeline.take(&event(
            45,
            Phase::Running,
            Phase::Completed,
            Cause::Returned,
        ));
        assert_eq!(
            timeline.render(ms(99)),
            "0.040s .. 0.045s request(llm)\nended 0.045s\n"
        );
        let ended = TaskState::Canceled(crate::state::CancelReason::Requested);
        assert!(Timeline::resumed(ms(40), &ended).is_empty());
    }

    #[test]
    fn a_live_task_s_open_interval_ends_at_now_and_equal_neighbours_merge() {
        let mut timeline = Timeline::new();
        for e in [
            event(
                3,
                Phase::New,
                Phase::Waiting(WaitReason::Slot),
                Cause::Submitted,
            ),
            event(
                5,
                Phase::Waiting(WaitReason::Slot),
                Phase::Ready,
                Cause::Admitted,
            ),
            event(5, Phase::Ready, Phase::Running, Cause::Scheduled),
            event(5, Phase::Running, Phase::Ready, Cause::Yielded),
            event(8, Phase::Ready, Phase::Running, Cause::Scheduled),
            event(
                8,
                Phase::Running,
                Phase::Waiting(WaitReason::Timer),
                Cause::Sleeping,
            ),
        ] {
            timeline.take(&e);
        }
        assert_eq!(
            timeline.render(ms(12)),
            "0.003s .. 0.005s queued\n0.005s .. 0.008s running\n0.008s .. 0.012s timer\n"
        );
        assert_eq!(timeline.current(), Some(&Wait::Timer));
        assert_eq!(timeline.len(), 3);
        // Read before the open interval began, it lasts no time.
        assert_eq!(
            timeline.intervals(ms(0)).last().map(|i| i.duration()),
            Some(Duration::ZERO)
        );
        assert_eq!(
            timeline.totals(ms(12)).waiting["timer"],
            Duration::from_millis(4)
        );
    }
}
