//! Observers: code of the embedder's that watches what the loop does as it happens —
//! the requests it lets out, the answers it takes, the tasks' transitions — to derive
//! telemetry (OpenTelemetry spans, say) without changing what the loop does. A runtime
//! without one pays a test of an empty `Option` per request and per answer.

use std::fmt;
use std::time::{Duration, SystemTime};

use spool_core::{OutboundRequest, Response, Scheduler, Time, TraceEvent};

use super::Runtime;

/// Watches the loop, from its thread ([`RuntimeBuilder::observe`](crate::RuntimeBuilder::observe)).
///
/// Each method is called as the loop does what it names, with an [`Observed`] to read
/// the scheduler and the time from; it runs on the loop, so it should be quick (hand
/// slow work, such as an export, to a thread of its own). Every method does nothing
/// unless implemented.
///
/// Within a loop turn the order is: the answers taken, then the requests let out, then
/// the trace events of the turn (which therefore may name a task whose first request
/// was already observed).
pub trait Observer: Send + 'static {
    /// A request is let out to its executor (or, a confirmation, to the embedder): it
    /// is sent now. A request sent again (after a 429's back-off, or on restore) is let
    /// out again.
    fn on_request(&mut self, observed: &Observed<'_>, request: &OutboundRequest) {
        let _ = (observed, request);
    }

    /// An answer is handed to the scheduler: an executor's, an embedder's to a
    /// confirmation, or the error the runtime answers for an executor that died. It may
    /// be late (its task ended), which the scheduler drops.
    fn on_answer(&mut self, observed: &Observed<'_>, response: &Response) {
        let _ = (observed, response);
    }

    /// The tasks' transitions since the last call, oldest first: once per loop turn
    /// that made any. Each event is handed out once.
    fn on_events(&mut self, observed: &Observed<'_>, events: &[TraceEvent]) {
        let _ = (observed, events);
    }
}

/// What an [`Observer`] reads when it is called: the scheduler as it is, and the time.
pub struct Observed<'a> {
    scheduler: &'a Scheduler,
    now: Time,
    anchor: WallAnchor,
}

impl fmt::Debug for Observed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observed")
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

impl<'a> Observed<'a> {
    /// The scheduler: a task's agent and type ([`Scheduler::task`]), its state.
    pub fn scheduler(&self) -> &'a Scheduler {
        self.scheduler
    }

    /// The loop's time now (the scheduler's time: since the run began).
    pub fn now(&self) -> Time {
        self.now
    }

    /// The wall-clock time of the scheduler's time `at` (a trace event's, say): the
    /// wall clock when the observer was installed, moved on by the scheduler's time
    /// since. An `at` before then is that moment less the difference.
    pub fn wall_time(&self, at: Time) -> SystemTime {
        self.anchor.wall_time(at)
    }

    /// The wall-clock time now, as [`wall_time`](Observed::wall_time) maps the loop's
    /// time: monotonic, unlike the system's clock.
    pub fn wall_now(&self) -> SystemTime {
        self.anchor.wall_time(self.now)
    }
}

/// A moment both as the scheduler's time and as the wall clock's.
#[derive(Copy, Clone, Debug)]
pub(crate) struct WallAnchor {
    time: Time,
    wall: SystemTime,
}

impl WallAnchor {
    fn wall_time(&self, at: Time) -> SystemTime {
        let (at, anchor) = (at.as_nanos(), self.time.as_nanos());
        if at >= anchor {
            self.wall + Duration::from_nanos(at - anchor)
        } else {
            self.wall
                .checked_sub(Duration::from_nanos(anchor - at))
                .unwrap_or(SystemTime::UNIX_EPOCH)
        }
    }
}

/// The loop's observer and where its wall clock stands.
pub(crate) struct Observing {
    observer: Box<dyn Observer>,
    anchor: WallAnchor,
}

impl fmt::Debug for Observing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observing").finish_non_exhaustive()
    }
}

impl Observing {
    /// `observer`, its wall clock anchored at the scheduler's time `now`.
    pub(crate) fn new(observer: Box<dyn Observer>, now: Time) -> Observing {
        Observing {
            observer,
            anchor: WallAnchor {
                time: now,
                wall: SystemTime::now(),
            },
        }
    }
}

impl Runtime {
    /// Tells the observer, if any, that `request` is let out.
    #[inline]
    pub(crate) fn observe_request(&mut self, request: &OutboundRequest) {
        if let Some(observing) = self.observing.as_mut() {
            let observed = Observed {
                scheduler: &self.core,
                now: self.clock.now(),
                anchor: observing.anchor,
            };
            observing.observer.on_request(&observed, request);
        }
    }

    /// Tells the observer, if any, that `response` is handed to the scheduler at `now`.
    #[inline]
    pub(crate) fn observe_answer(&mut self, now: Time, response: &Response) {
        if let Some(observing) = self.observing.as_mut() {
            let observed = Observed {
                scheduler: &self.core,
                now,
                anchor: observing.anchor,
            };
            observing.observer.on_answer(&observed, response);
        }
    }

    /// Whether an observer is installed (it takes the trace events every turn).
    pub(crate) fn observes(&self) -> bool {
        self.observing.is_some()
    }

    /// Hands the observer, if any, the trace events of the turn.
    pub(crate) fn observe_events(&mut self, events: &[TraceEvent]) {
        if events.is_empty() {
            return;
        }
        if let Some(observing) = self.observing.as_mut() {
            let observed = Observed {
                scheduler: &self.core,
                now: self.clock.now(),
                anchor: observing.anchor,
            };
            observing.observer.on_events(&observed, events);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::{Arc, Mutex};

    use serde_json::json;
    use spool_core::{Kind, NewTask, Step, task_fn};

    use super::*;
    use crate::from_fn;

    /// What an observer was told, in order, as text.
    #[derive(Clone, Default)]
    struct Told(Arc<Mutex<Vec<String>>>);

    impl Observer for Told {
        fn on_request(&mut self, observed: &Observed<'_>, request: &OutboundRequest) {
            let agent = observed.scheduler().task(request.key.task()).unwrap().agent;
            self.0.lock().unwrap().push(format!(
                "request {} of task {} ({agent}): {}",
                request.key.number(),
                request.key.task(),
                request.request.kind
            ));
        }

        fn on_answer(&mut self, _observed: &Observed<'_>, response: &Response) {
            self.0.lock().unwrap().push(format!(
                "answer {} of task {}: {}",
                response.key.number(),
                response.key.task(),
                response.result.as_ref().unwrap()
            ));
        }

        fn on_events(&mut self, _observed: &Observed<'_>, events: &[TraceEvent]) {
            let mut told = self.0.lock().unwrap();
            told.extend(
                events
                    .iter()
                    .map(|e| format!("task {}: {} -> {}", e.task, e.from, e.to)),
            );
        }
    }

    /// A task that asks the LLM once and returns its answer.
    fn asker() -> NewTask {
        let mut asked = false;
        NewTask::new(task_fn("ask", move |cx| {
            if !asked {
                asked = true;
                cx.llm(json!("hi"));
                return Step::Wait;
            }
            Step::Done(Ok(cx.take_answer().unwrap().result.unwrap()))
        }))
        .agent("alice")
    }

    #[test]
    fn an_observer_is_told_requests_answers_and_transitions_and_a_publisher_still_gets_every_event()
    {
        let told = Told::default();
        let published = Arc::new(Mutex::new(Vec::new()));
        let sink = published.clone();
        let mut runtime = crate::Runtime::builder()
            .executor(Kind::Llm, from_fn(|_req| Ok(json!("hello"))))
            .observe(told.clone())
            .publish(Duration::ZERO, move |publication| {
                let events = publication.take_events();
                sink.lock().unwrap().extend(
                    events
                        .iter()
                        .map(|e| format!("task {}: {} -> {}", e.task, e.from, e.to)),
                );
            })
            .build();
        runtime.submit(asker()).unwrap();
        runtime.run_until_idle();
        let told = told.0.lock().unwrap().clone();
        assert_eq!(
            told,
            [
                "request 1 of task 1 (alice): llm",
                "task 1: New -> Ready",
                "task 1: Ready -> Running",
                "task 1: Running -> Waiting(llm)",
                "answer 1 of task 1: \"hello\"",
                "task 1: Waiting(llm) -> Ready",
                "task 1: Ready -> Running",
                "task 1: Running -> Completed(ok)",
            ]
        );
        let transitions: Vec<String> = told.into_iter().filter(|t| t.starts_with("task")).collect();
        assert_eq!(*published.lock().unwrap(), transitions);
    }

    #[test]
    fn the_wall_time_of_a_scheduler_time_moves_with_it_from_the_anchor() {
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let anchor = WallAnchor {
            time: Time::from_duration(Duration::from_secs(10)),
            wall,
        };
        assert_eq!(
            anchor.wall_time(Time::from_duration(Duration::from_millis(12_500))),
            wall + Duration::from_millis(2_500)
        );
        assert_eq!(
            anchor.wall_time(Time::from_duration(Duration::from_secs(4))),
            wall - Duration::from_secs(6)
        );
    }
}
