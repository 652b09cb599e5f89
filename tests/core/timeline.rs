//! Per-task timelines, from the trace of runs under virtual time.
//!
//! The property: whatever the workload — several agents and priorities, a slot limit,
//! dependencies, gated kinds with caps and windows, 429s, timers, children,
//! confirmations, cancellations — every task's intervals start at its submission,
//! follow one another with no gap or overlap, and end at its end (or at `now` for a
//! live task), so their durations add up to its lifetime exactly; and each interval's
//! wait is what the trace says the task was doing then. Then one task's timeline in a
//! known scenario, exactly.

use std::collections::BTreeSet;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;
use spool::{
    AgentTask, Cause, Config, Delivery, Kind, Mock, NewTask, Phase, Priority, RequestError,
    RequestLimits, Scheduler, Step, TaskContext, TaskId, TaskLimits, TestScheduler, Time, Timeline,
    TraceEvent, Wait, WaitReason,
};

/// One thing a task does, then waits for.
#[derive(Clone, Debug)]
enum Op {
    Llm,
    Tool,
    Confirm,
    Sleep(u64),
    /// This many LLM requests at once.
    Fanout(u32),
    /// A child that makes one LLM request, joined.
    Child,
    Yield,
}

/// A task that does its ops in order, taking (and dropping) whatever answers came.
#[derive(Debug)]
struct Program {
    ops: Vec<Op>,
    at: usize,
}

impl AgentTask for Program {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        while cx.take_answer().is_some() {}
        while cx.take_any_child_result().is_some() {}
        cx.take_timer_fired();
        let Some(op) = self.ops.get(self.at).cloned() else {
            return Step::done(json!(self.at));
        };
        self.at += 1;
        match op {
            Op::Llm => {
                cx.llm(json!("q"));
            }
            Op::Tool => {
                cx.tool("search", json!({}));
            }
            Op::Confirm => {
                cx.confirm(json!("go on?"));
            }
            Op::Sleep(ms) => cx.sleep(Duration::from_millis(ms)),
            Op::Fanout(n) => {
                for _ in 0..n {
                    cx.llm(json!("part"));
                }
            }
            Op::Child => {
                let child = cx.spawn(NewTask::new(Program {
                    ops: vec![Op::Llm],
                    at: 0,
                }));
                cx.join(child);
            }
            Op::Yield => return Step::Yield,
        }
        Step::Wait
    }

    fn type_name(&self) -> &'static str {
        "program"
    }
}

/// A task to submit: its agent, level, ops, and the earlier task it depends on.
#[derive(Clone, Debug)]
struct Plan {
    agent: usize,
    priority: Priority,
    ops: Vec<Op>,
    after: Option<usize>,
}

/// What the test driver does next.
#[derive(Clone, Debug)]
enum Action {
    Submit(Plan),
    Advance(u64),
    /// Answers the held request at this index (of those held), or answers it 429.
    Answer(usize, bool),
    Cancel(usize),
}

/// The limits of a run.
#[derive(Clone, Debug)]
struct Limits {
    max_running: usize,
    llm_in_flight: Option<u32>,
    tool_window: Option<u32>,
    per_agent: Option<u32>,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Llm),
        2 => Just(Op::Tool),
        1 => Just(Op::Confirm),
        1 => (1u64..400).prop_map(Op::Sleep),
        1 => (2u32..4).prop_map(Op::Fanout),
        1 => Just(Op::Child),
        1 => Just(Op::Yield),
    ]
}

fn plan() -> impl Strategy<Value = Plan> {
    (
        0usize..3,
        prop_oneof![
            Just(Priority::Low),
            Just(Priority::Normal),
            Just(Priority::High)
        ],
        prop::collection::vec(op(), 0..5),
        prop::option::weighted(0.3, 0usize..8),
    )
        .prop_map(|(agent, priority, ops, after)| Plan {
            agent,
            priority,
            ops,
            after,
        })
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        3 => plan().prop_map(Action::Submit),
        3 => (1u64..700).prop_map(Action::Advance),
        3 => (0usize..8, prop::bool::weighted(0.75)).prop_map(|(i, ok)| Action::Answer(i, ok)),
        1 => (0usize..8).prop_map(Action::Cancel),
    ]
}

fn limits() -> impl Strategy<Value = Limits> {
    (
        1usize..4,
        prop::option::of(1u32..3),
        prop::option::of(1u32..3),
        prop::option::weighted(0.3, 1u32..3),
    )
        .prop_map(
            |(max_running, llm_in_flight, tool_window, per_agent)| Limits {
                max_running,
                llm_in_flight,
                tool_window,
                per_agent,
            },
        )
}

/// Runs `actions` under `limits`; returns the scheduler (its trace recorded).
fn run(limits: &Limits, actions: &[Action]) -> TestScheduler {
    let mut requests = RequestLimits::new();
    if let Some(max) = limits.llm_in_flight {
        requests = requests.max_in_flight(Kind::Llm, max);
    }
    if let Some(max) = limits.tool_window {
        requests = requests.window(Kind::tool("search"), max, Duration::from_millis(300));
    }
    if let Some(max) = limits.per_agent {
        requests = requests.per_agent_in_flight(max);
    }
    let config = Config::new()
        .record_trace(true)
        .limits(TaskLimits::new().max_running(limits.max_running))
        .requests(requests);
    let mut ts = TestScheduler::with_scheduler(Scheduler::new(config));
    ts.hold(Kind::Llm);
    ts.mock_with_latency(
        Kind::tool("search"),
        Mock::Fixed(json!("found")),
        Duration::from_millis(40),
    );
    let mut submitted: Vec<TaskId> = Vec::new();
    for action in actions {
        match action {
            Action::Submit(plan) => {
                let mut task = NewTask::new(Program {
                    ops: plan.ops.clone(),
                    at: 0,
                })
                .agent(["a", "b", "c"][plan.agent])
                .priority(plan.priority);
                if let Some(dep) = plan.after.and_then(|i| submitted.get(i))
                    && ts.core().task_state(*dep).is_some()
                {
                    task = task.after(*dep);
                }
                submitted.push(ts.submit(task));
            }
            Action::Advance(ms) => ts.advance(Duration::from_millis(*ms)),
            Action::Answer(i, ok) => {
                let held = ts.held_requests();
                if held.is_empty() {
                    continue;
                }
                let key = held[i % held.len()].request.key;
                if *ok {
                    let _ = ts.answer(key, "answer");
                } else {
                    let _ = ts.respond(
                        key,
                        Err(RequestError::RateLimited {
                            retry_after: Some(Duration::from_millis(250)),
                        }),
                    );
                }
            }
            Action::Cancel(i) => {
                if let Some(id) = submitted.get(*i) {
                    let _ = ts.cancel(*id);
                }
            }
        }
        ts.step_until_idle();
    }
    ts
}

/// Whether `wait` is what a task in `phase` does (held requests show as rate limited).
fn fits(wait: &Wait, phase: &Phase) -> bool {
    match (phase, wait) {
        (Phase::Ready | Phase::Running, Wait::Running) => true,
        (Phase::Waiting(WaitReason::Slot), Wait::Queued) => true,
        (Phase::Waiting(WaitReason::Dependencies(_)), Wait::Blocked) => true,
        (Phase::Waiting(WaitReason::Timer), Wait::Timer) => true,
        (Phase::Waiting(WaitReason::Children(_)), Wait::Children) => true,
        (Phase::Waiting(WaitReason::Request(k)), Wait::Request(w)) => k == w,
        (Phase::Waiting(WaitReason::Request(k)), Wait::RateLimited(w)) => w.as_ref() == Some(k),
        (Phase::Waiting(WaitReason::Requests(n)), Wait::Requests(m)) => n == m,
        (Phase::Waiting(WaitReason::Requests(_)), Wait::RateLimited(_)) => true,
        _ => false,
    }
}

fn ended(phase: &Phase) -> bool {
    matches!(phase, Phase::Completed | Phase::Failed | Phase::Canceled)
}

/// Checks every task's timeline against its trace; returns how many intervals were
/// rate limited (to show the workloads reach them).
fn check(ts: &TestScheduler) -> usize {
    let events = ts.trace_events();
    let now = ts.now();
    let tasks: BTreeSet<TaskId> = events.iter().map(|e| e.task).collect();
    let mut rate_limited = 0;
    for id in tasks {
        let own: Vec<&TraceEvent> = events.iter().filter(|e| e.task == id).collect();
        let timeline = Timeline::of(id, events);
        let submitted = own[0].time;
        assert_eq!(
            own[0].from,
            Phase::New,
            "task {id} starts at its submission"
        );
        if let Some(info) = ts.core().task(id) {
            assert_eq!(info.created_at, submitted, "task {id}");
        }
        let end = own.iter().find(|e| ended(&e.to)).map(|e| e.time);
        assert_eq!(timeline.ended(), end, "task {id}");
        let until = end.unwrap_or(now);
        let intervals: Vec<_> = timeline.intervals(now).collect();
        let span = |_: usize| format!("task {id}: {}", timeline.render(now));
        if until > submitted {
            assert_eq!(
                intervals.first().map(|i| i.start),
                Some(submitted),
                "{}",
                span(0)
            );
            assert_eq!(intervals.last().map(|i| i.end), Some(until), "{}", span(0));
        }
        for (k, pair) in intervals.windows(2).enumerate() {
            assert_eq!(pair[0].end, pair[1].start, "{}", span(k));
            assert_ne!(pair[0].wait, pair[1].wait, "{}", span(k));
        }
        for (k, interval) in intervals.iter().enumerate() {
            let last_open = end.is_none() && k + 1 == intervals.len();
            assert!(interval.start < interval.end || last_open, "{}", span(k));
        }
        let lifetime = until.saturating_since(submitted);
        let summed: Duration = intervals.iter().map(|i| i.duration()).sum();
        assert_eq!(summed, lifetime, "{}", span(0));
        assert_eq!(timeline.totals(now).total(), lifetime, "{}", span(0));
        // Each stretch between two of its events is spent as the first one says.
        for (k, event) in own.iter().enumerate() {
            let next = own.get(k + 1).map_or(until, |e| e.time);
            if ended(&event.to) || next <= event.time {
                continue;
            }
            let during = intervals
                .iter()
                .find(|i| i.start <= event.time && event.time < i.end)
                .unwrap_or_else(|| panic!("{} has no interval at {}", span(k), event.time));
            assert!(
                fits(&during.wait, &event.to),
                "{}: `{event}` then {}",
                span(k),
                during.wait
            );
            if let Wait::RateLimited(_) = during.wait {
                let held = own[..=k]
                    .iter()
                    .any(|e| matches!(e.cause, Cause::BackedOff { .. } | Cause::Held { .. }));
                assert!(held, "{}: rate limited with nothing held", span(k));
            }
        }
        rate_limited += intervals
            .iter()
            .filter(|i| matches!(i.wait, Wait::RateLimited(_)))
            .count();
    }
    rate_limited
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_task_s_intervals_tile_its_life_and_follow_its_trace(
        limits in limits(),
        actions in prop::collection::vec(action(), 1..40),
    ) {
        let ts = run(&limits, &actions);
        check(&ts);
    }
}

/// The property's workloads do reach held and backed-off requests, queues, timers and
/// children (a fixed workload, so that this cannot pass by chance). No time passes in a
/// poll under virtual time, and a ready task is polled at once: no interval is
/// `running` (the fan-out's second request is held by the LLM's cap, so it shows as
/// rate limited, not as `requests`).
#[test]
fn the_workloads_reach_every_wait() {
    let plan = |agent, ops: Vec<Op>, after| {
        Action::Submit(Plan {
            agent,
            priority: Priority::Normal,
            ops,
            after,
        })
    };
    let limits = Limits {
        max_running: 2,
        llm_in_flight: Some(1),
        tool_window: Some(1),
        per_agent: None,
    };
    let actions = vec![
        plan(0, vec![Op::Llm, Op::Tool, Op::Tool], None),
        plan(1, vec![Op::Llm, Op::Sleep(50), Op::Child], None),
        plan(2, vec![Op::Fanout(2), Op::Confirm], None),
        plan(0, vec![Op::Yield], Some(0)),
        Action::Answer(0, false),
        Action::Advance(100),
        Action::Answer(0, true),
        Action::Advance(3_000),
        Action::Answer(0, true),
        Action::Advance(500),
        Action::Answer(0, true),
        Action::Advance(500),
        Action::Answer(0, true),
        Action::Advance(500),
        Action::Answer(0, true),
        Action::Cancel(2),
        Action::Advance(1_000),
    ];
    let ts = run(&limits, &actions);
    assert!(check(&ts) >= 2);
    let waits: BTreeSet<&str> = ts
        .trace_events()
        .iter()
        .map(|e| e.task)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .flat_map(|id| {
            Timeline::of(id, ts.trace_events())
                .intervals(ts.now())
                .map(|i| i.wait.name())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        waits,
        BTreeSet::from([
            "blocked",
            "children",
            "queued",
            "rate_limited",
            "request",
            "timer"
        ])
    );
}

/// Task 2, with one slot taken by task 1 (asleep 100 ms): queued until 100 ms; its LLM
/// request, answered 429 at 150 ms (`Retry-After: 1s`, so the LLM backs off 2 s, until
/// 2.150 s), goes again then and is answered at 2.400 s; its tool call takes 40 ms; its
/// confirmation is answered by a person at 3.000 s; it ends.
#[test]
fn one_task_s_timeline_queued_llm_429_tool_confirm_done() {
    let config = Config::new()
        .record_trace(true)
        .limits(TaskLimits::new().max_running(1));
    let mut ts = TestScheduler::with_scheduler(Scheduler::new(config));
    ts.hold(Kind::Llm);
    ts.mock_with_latency(
        Kind::tool("search"),
        Mock::Fixed(json!("found")),
        Duration::from_millis(40),
    );
    ts.spawn(Program {
        ops: vec![Op::Sleep(100)],
        at: 0,
    });
    let task = ts.spawn(Program {
        ops: vec![Op::Llm, Op::Tool, Op::Confirm],
        at: 0,
    });
    ts.advance(Duration::from_millis(150));
    let key = ts.held_requests()[0].request.key;
    assert_eq!(
        ts.respond(
            key,
            Err(RequestError::RateLimited {
                retry_after: Some(Duration::from_secs(1)),
            }),
        ),
        Delivery::BackedOff
    );
    ts.advance(Duration::from_millis(2_250));
    let key = ts.held_requests()[0].request.key;
    assert_eq!(ts.answer(key, "answer"), Delivery::Delivered);
    ts.advance(Duration::from_millis(600));
    let confirm = ts.held_requests()[0].request.key;
    assert_eq!(ts.answer(confirm, true), Delivery::Delivered);
    ts.step_until_idle();
    let timeline = Timeline::of(task, ts.trace_events());
    insta::assert_snapshot!(timeline.render(ts.now()), @r"
    0.000s .. 0.100s queued
    0.100s .. 0.150s request(llm)
    0.150s .. 2.150s rate_limited(llm)
    2.150s .. 2.400s request(llm)
    2.400s .. 2.440s request(tool:search)
    2.440s .. 3.000s request(confirm)
    ended 3.000s
    ");
    let totals = timeline.totals(ts.now());
    assert_eq!(totals.queued, Duration::from_millis(100));
    assert_eq!(totals.rate_limited, Duration::from_secs(2));
    assert_eq!(totals.waiting["llm"], Duration::from_millis(300));
    assert_eq!(totals.waiting["tool:search"], Duration::from_millis(40));
    assert_eq!(totals.waiting["confirm"], Duration::from_millis(560));
    assert_eq!(totals.running, Duration::ZERO);
    assert_eq!(timeline.ended(), Some(Time::ZERO + Duration::from_secs(3)));
}
