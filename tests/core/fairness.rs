//! Fairness and priority across queued tasks (per-agent fairness, priority levels):
//! weighted fair share between agents, the per-agent cap, priority levels within an
//! agent, and the priority policy with children inheriting their parent's level. Every
//! expected order below was worked out by hand from the documented rules, then checked
//! against the run.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use spool::{
    Admission, AgentTask, Cause, Config, Kind, Mock, NewTask, Phase, PolicyChoice, Priority,
    Request, Scheduler, Submission, TaskId, TaskLimits, TaskState, TestScheduler, Time, WaitReason,
    async_task,
};

use crate::support::{ask_once, assert_trace_continuous, held_keys};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn at(n: u64) -> Time {
    Time::from_duration(secs(n))
}

/// A task that makes one LLM request and finishes with its answer.
fn one_llm(name: &'static str) -> impl AgentTask {
    ask_once(name, Request::llm(json!(name)))
}

/// The order tasks completed in, from the trace.
fn completion_order(ts: &TestScheduler) -> Vec<TaskId> {
    ts.trace_events()
        .iter()
        .filter(|e| e.to == Phase::Completed)
        .map(|e| e.task)
        .collect()
}

/// The order tasks got a slot after waiting for one, from the trace.
fn admission_order(ts: &TestScheduler) -> Vec<TaskId> {
    ts.trace_events()
        .iter()
        .filter(|e| e.cause == Cause::Admitted)
        .map(|e| e.task)
        .collect()
}

/// How many tasks of `agent` hold a slot (live and not waiting for one).
fn running_of(ts: &TestScheduler, agent: &str) -> usize {
    ts.queue_details()
        .iter()
        .filter(|d| ts.core().agent_name(d.agent) == agent)
        .filter(|d| d.state != TaskState::Waiting(WaitReason::Slot))
        .count()
}

/// How many tasks of `agent` wait for a slot.
fn queued_of(ts: &TestScheduler, agent: &str) -> usize {
    ts.queue_details()
        .iter()
        .filter(|d| ts.core().agent_name(d.agent) == agent)
        .filter(|d| d.state == TaskState::Waiting(WaitReason::Slot))
        .count()
}

fn fair_share(limits: TaskLimits) -> Config {
    Config::new()
        .record_trace(true)
        .policy(PolicyChoice::FairShare)
        .limits(limits)
}

// ---------------------------------------------------------------------------------
// 1. Fair share: a small agent is not starved by a big one.
// ---------------------------------------------------------------------------------

/// Agent "big" submits 1,000 one-request tasks, then agent "small" submits 10, all at
/// time 0, with four slots and an LLM that answers in 1 s. Fair share gives the slots
/// that free up to the agent with fewer tasks running, so small gets two of the four
/// slots from the first answers on: small's tasks complete two per second, at
/// positions 5, 6, 9, 10, ... 21, 22 of the completion order (its last at position 22,
/// at t = 6 s) — long before big's 100th completion — and big's 1,000 finish after.
///
/// Worked out by hand: at t = 1 s big's four first tasks are answered; each one that
/// ends hands its slot to the agent with the smaller share (ties to the agent whose
/// next task has waited longest), which gives small, small, big, big; from then on each
/// second ends two tasks of each agent, small's first (its tasks woke first), until
/// small has none left.
#[test]
fn fair_share_runs_a_small_agent_beside_a_big_one() {
    let core = Scheduler::new(fair_share(TaskLimits::new().max_running(4)));
    let mut ts = TestScheduler::with_scheduler(core);
    ts.mock_with_latency(Kind::Llm, Mock::Fixed(json!("ok")), secs(1));
    let big: Vec<TaskId> = (0..1000)
        .map(|_| ts.submit(NewTask::new(one_llm("big")).agent("big")))
        .collect();
    let small: Vec<TaskId> = (0..10)
        .map(|_| ts.submit(NewTask::new(one_llm("small")).agent("small")))
        .collect();
    assert_eq!(
        (ts.queue_state().running, ts.queue_state().queued),
        (4, 1006)
    );

    let end = ts.run_until_quiet();

    // 1,010 tasks, four at a time, one second each, with no idle slot: 253 s.
    assert_eq!(end, at(253));
    for id in big.iter().chain(&small) {
        assert_eq!(ts.task_state(*id), TaskState::Completed(Ok(json!("ok"))));
    }
    let order = completion_order(&ts);
    assert_eq!(order.len(), 1010);
    let small_positions: Vec<usize> = order
        .iter()
        .enumerate()
        .filter(|(_, id)| small.contains(id))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(small_positions, [5, 6, 9, 10, 13, 14, 17, 18, 21, 22]);
    // Small's tasks complete in the order submitted.
    let small_order: Vec<TaskId> = order
        .iter()
        .copied()
        .filter(|id| small.contains(id))
        .collect();
    assert_eq!(small_order, small);
    let big_100th = order
        .iter()
        .enumerate()
        .filter(|(_, id)| big.contains(id))
        .nth(99)
        .map(|(i, _)| i + 1)
        .unwrap();
    assert_eq!(big_100th, 110);
    assert!(small_positions.iter().all(|p| *p < big_100th));
    // Small's last task completed at t = 6 s.
    let last_small = ts
        .trace_events()
        .iter()
        .find(|e| e.task == small[9] && e.to == Phase::Completed)
        .unwrap();
    assert_eq!(last_small.time, at(6));
    let stats = ts.stats();
    assert_eq!(
        (
            stats.completed,
            stats.scheduled,
            stats.peak_running,
            stats.peak_queued
        ),
        (1010, 1010, 4, 1006)
    );
}

// ---------------------------------------------------------------------------------
// 2. Weights.
// ---------------------------------------------------------------------------------

/// Agent "a" has weight 3, "b" weight 1, four slots, 40 tasks each (submitted
/// alternately, so the first four slots go two and two at submission). From the first
/// answers on, fair share keeps a at 3 running for b's 1: each slot that frees goes to
/// the agent with the smaller running/weight share.
#[test]
fn weights_give_an_agent_of_weight_three_three_slots_for_one() {
    let core = Scheduler::new(
        fair_share(TaskLimits::new().max_running(4))
            .agent_weight("a", 3)
            .agent_weight("b", 1),
    );
    let mut ts = TestScheduler::with_scheduler(core);
    ts.mock_with_latency(Kind::Llm, Mock::Fixed(json!("ok")), secs(1));
    for _ in 0..40 {
        ts.submit(NewTask::new(one_llm("a")).agent("a"));
        ts.submit(NewTask::new(one_llm("b")).agent("b"));
    }
    ts.step_until_idle();
    assert_eq!((running_of(&ts, "a"), running_of(&ts, "b")), (2, 2));

    let mut seen = Vec::new();
    for second in 1..=10 {
        ts.advance(secs(1));
        assert_eq!(ts.now(), at(second));
        seen.push((running_of(&ts, "a"), running_of(&ts, "b")));
    }
    assert_eq!(seen, vec![(3, 1); 10]);
    // After ten seconds: a started 2 + 3 × 10 tasks, b 2 + 1 × 10.
    assert_eq!((queued_of(&ts, "a"), queued_of(&ts, "b")), (8, 28));
    let state = ts.queue_state();
    assert_eq!((state.running, state.queued), (4, 36));
    assert_eq!(state.stats.completed, 40);
}

// ---------------------------------------------------------------------------------
// 3. The per-agent cap.
// ---------------------------------------------------------------------------------

/// Four slots, at most two per agent; agent "a" has weight 10, so fair share alone
/// would give it every slot. a submits six tasks and b four: a runs two and b two; a's
/// other four wait for a's own tasks to end while b's queued tasks take the slots b's
/// tasks free, although a's were queued first and a's share is smaller.
#[test]
fn the_per_agent_cap_holds_an_agent_back_while_others_go_on() {
    let core = Scheduler::new(
        fair_share(TaskLimits::new().max_running(4).max_running_per_agent(2)).agent_weight("a", 10),
    );
    let mut ts = TestScheduler::with_scheduler(core);
    ts.hold(Kind::Llm);
    let a: Vec<Submission> = (0..6)
        .map(|_| ts.admit(NewTask::new(one_llm("a")).agent("a")))
        .collect();
    let b: Vec<Submission> = (0..4)
        .map(|_| ts.admit(NewTask::new(one_llm("b")).agent("b")))
        .collect();
    // a's first two start; its other four queue behind its cap (positions 1 to 4, an
    // estimated 30 s per slot over four slots each); b's first two start, its last two
    // wait for a slot.
    let queued = |position: usize| Admission::Queued {
        position,
        estimated_wait: Duration::from_millis(7_500) * position as u32,
    };
    assert_eq!(
        a.iter().map(|s| s.admission.clone()).collect::<Vec<_>>(),
        [
            Admission::Ready,
            Admission::Ready,
            queued(1),
            queued(2),
            queued(3),
            queued(4)
        ]
    );
    assert_eq!(b[0].admission, Admission::Ready);
    assert_eq!(b[1].admission, Admission::Ready);
    assert!(matches!(b[2].admission, Admission::Queued { .. }));
    assert!(matches!(b[3].admission, Admission::Queued { .. }));
    let a: Vec<TaskId> = a.iter().map(|s| s.id).collect();
    let b: Vec<TaskId> = b.iter().map(|s| s.id).collect();
    ts.step_until_idle();
    assert_eq!((running_of(&ts, "a"), running_of(&ts, "b")), (2, 2));
    let requests =
        |ts: &TestScheduler| -> Vec<TaskId> { held_keys(ts).iter().map(|k| k.task()).collect() };
    assert_eq!(requests(&ts), [a[0], a[1], b[0], b[1]]);

    // b's first task ends: its slot goes to b's third task, not to a's queued ones.
    let key = held_keys(&ts)[2];
    let _ = ts.answer(key, "done");
    ts.step_until_idle();
    assert_eq!((running_of(&ts, "a"), running_of(&ts, "b")), (2, 2));
    assert_eq!(requests(&ts), [a[0], a[1], b[1], b[2]]);

    // And again.
    let key = held_keys(&ts)[2];
    let _ = ts.answer(key, "done");
    ts.step_until_idle();
    assert_eq!(requests(&ts), [a[0], a[1], b[2], b[3]]);

    // a's first task ends: a's third task starts, and a stays at two.
    let key = held_keys(&ts)[0];
    let _ = ts.answer(key, "done");
    ts.step_until_idle();
    assert_eq!(requests(&ts), [a[1], b[2], b[3], a[2]]);
    assert_eq!((running_of(&ts, "a"), running_of(&ts, "b")), (2, 2));

    // b's tasks end: with b out of work, a's waiting tasks still start only two at a
    // time, and a slot stays empty.
    for _ in 0..2 {
        let key = *held_keys(&ts)
            .iter()
            .find(|k| b.contains(&k.task()))
            .unwrap();
        let _ = ts.answer(key, "done");
        ts.step_until_idle();
    }
    assert_eq!(requests(&ts), [a[1], a[2]]);
    assert_eq!((running_of(&ts, "a"), queued_of(&ts, "a")), (2, 3));
    assert_eq!(ts.queue_state().running, 2);

    // Answer everything, oldest first: a runs its tasks two at a time to the end.
    while let Some(key) = held_keys(&ts).first().copied() {
        assert!(running_of(&ts, "a") <= 2);
        let _ = ts.answer(key, "done");
        ts.step_until_idle();
    }
    for id in a.iter().chain(&b) {
        assert_eq!(ts.task_state(*id), TaskState::Completed(Ok(json!("done"))));
    }
    // b's first two were queued behind a's parked tasks for a moment at submission
    // and got their slots at once; then b's last two, then a's four, two at a time.
    assert_eq!(
        admission_order(&ts),
        [b[0], b[1], b[2], b[3], a[2], a[3], a[4], a[5]]
    );
    assert_eq!(ts.stats().peak_running, 4);
    assert_trace_continuous(&ts);
}

// ---------------------------------------------------------------------------------
// 4. Priority levels within an agent under fair share.
// ---------------------------------------------------------------------------------

/// One slot, fair share; agent "a" holds the slot, then queues Low, Normal, Low,
/// Critical and High tasks, in that order. When slots free up, a's tasks start by
/// level — Critical, High, Normal, then the two Lows in the order submitted.
#[test]
fn fair_share_starts_an_agents_tasks_by_priority_level() {
    let core = Scheduler::new(fair_share(TaskLimits::new().max_running(1)));
    let mut ts = TestScheduler::with_scheduler(core);
    ts.hold(Kind::Llm);
    let first = ts.submit(NewTask::new(one_llm("first")).agent("a"));
    let levels = [
        Priority::Low,
        Priority::Normal,
        Priority::Low,
        Priority::Critical,
        Priority::High,
    ];
    let ids: Vec<TaskId> = levels
        .iter()
        .map(|p| ts.submit(NewTask::new(one_llm("queued")).agent("a").priority(*p)))
        .collect();
    ts.step_until_idle();
    assert_eq!(held_keys(&ts).len(), 1);
    assert_eq!(ts.queue_state().queued, 5);

    while let Some(key) = held_keys(&ts).first().copied() {
        let _ = ts.answer(key, "done");
        ts.step_until_idle();
        assert!(held_keys(&ts).len() <= 1);
    }

    let (low1, normal, low2, critical, high) = (ids[0], ids[1], ids[2], ids[3], ids[4]);
    assert_eq!(
        completion_order(&ts),
        [first, critical, high, normal, low1, low2]
    );
    assert_eq!(admission_order(&ts), [critical, high, normal, low1, low2]);
}

// ---------------------------------------------------------------------------------
// 5. The priority policy.
// ---------------------------------------------------------------------------------

/// Under `PolicyChoice::Priority` with one slot, tasks queued at every level start
/// Critical, High, Normal, Low, FIFO within a level, whatever order they came in.
#[test]
fn priority_policy_starts_queued_tasks_by_level_then_fifo() {
    let core = Scheduler::new(
        Config::new()
            .record_trace(true)
            .policy(PolicyChoice::Priority)
            .limits(TaskLimits::new().max_running(1)),
    );
    let mut ts = TestScheduler::with_scheduler(core);
    ts.hold(Kind::Llm);
    let first = ts.submit(NewTask::new(one_llm("first")));
    let levels = [
        Priority::Low,
        Priority::Normal,
        Priority::High,
        Priority::Critical,
        Priority::Low,
        Priority::Normal,
        Priority::High,
        Priority::Critical,
    ];
    let ids: Vec<TaskId> = levels
        .iter()
        .map(|p| ts.submit(NewTask::new(one_llm("queued")).priority(*p)))
        .collect();
    ts.step_until_idle();
    while let Some(key) = held_keys(&ts).first().copied() {
        let _ = ts.answer(key, "done");
        ts.step_until_idle();
    }
    let expected = [
        ids[3], ids[7], ids[2], ids[6], ids[1], ids[5], ids[0], ids[4],
    ];
    assert_eq!(admission_order(&ts), expected);
    let mut all = vec![first];
    all.extend(expected);
    assert_eq!(completion_order(&ts), all);
}

/// Under `PolicyChoice::Priority` with no task limits, the run queue polls ready
/// tasks by level, FIFO within a level; children spawned with `cx.spawn` inherit their
/// parent's level (and an explicit level wins), as `queue_details` shows, and are
/// polled by that level.
#[test]
fn priority_policy_polls_by_level_and_children_inherit_their_parents_level() {
    let core = Scheduler::new(
        Config::new()
            .record_trace(true)
            .policy(PolicyChoice::Priority),
    );
    let mut ts = TestScheduler::with_scheduler(core);
    ts.hold(Kind::Llm);
    let spawned: Arc<Mutex<Vec<TaskId>>> = Arc::default();
    let parent = |level: Priority, spawned: Arc<Mutex<Vec<TaskId>>>| {
        NewTask::new(async_task("parent", move |cx| async move {
            let a = cx.spawn(NewTask::new(one_llm("child")));
            let b = cx.spawn(NewTask::new(one_llm("child")));
            let c = cx.spawn(NewTask::new(one_llm("urgent child")).priority(Priority::Critical));
            spawned.lock().unwrap().extend([a.id(), b.id(), c.id()]);
            let outcomes = cx.join_all(vec![a, b, c]).await;
            Ok(json!(outcomes.len()))
        }))
        .priority(level)
    };
    let low = ts.submit(parent(Priority::Low, Arc::clone(&spawned)));
    let normal = ts.submit(NewTask::new(one_llm("plain")));
    let high = ts.submit(parent(Priority::High, Arc::clone(&spawned)));
    ts.step_until_idle();

    let children = spawned.lock().unwrap().clone();
    // Polled first: the High parent, then Normal, then the Low parent.
    assert_eq!(children.len(), 6);
    let (high_kids, low_kids) = (&children[0..3], &children[3..6]);
    let details = ts.queue_details();
    let level_of = |id: TaskId| details.iter().find(|d| d.id == id).unwrap().priority;
    let depth_of = |id: TaskId| details.iter().find(|d| d.id == id).unwrap().depth;
    assert_eq!(
        [
            level_of(high_kids[0]),
            level_of(high_kids[1]),
            level_of(high_kids[2])
        ],
        [Priority::High, Priority::High, Priority::Critical]
    );
    assert_eq!(
        [
            level_of(low_kids[0]),
            level_of(low_kids[1]),
            level_of(low_kids[2])
        ],
        [Priority::Low, Priority::Low, Priority::Critical]
    );
    assert_eq!(depth_of(high_kids[0]), 1);
    assert_eq!(
        (level_of(low), level_of(normal), level_of(high)),
        (Priority::Low, Priority::Normal, Priority::High)
    );

    // The order tasks were polled for the first time.
    let mut first_polls: Vec<TaskId> = Vec::new();
    for e in ts.trace_events() {
        if e.to == Phase::Running && !first_polls.contains(&e.task) {
            first_polls.push(e.task);
        }
    }
    // The High parent goes first; its children are ready when its poll returns, so
    // its Critical child and then its two High children run before Normal; the Low
    // parent's Critical child jumps ahead of everything left, then the Low children.
    assert_eq!(
        first_polls,
        [
            high,
            high_kids[2],
            high_kids[0],
            high_kids[1],
            normal,
            low,
            low_kids[2],
            low_kids[0],
            low_kids[1],
        ]
    );

    while let Some(key) = held_keys(&ts).first().copied() {
        let _ = ts.answer(key, "done");
        ts.step_until_idle();
    }
    assert_eq!(ts.task_state(high), TaskState::Completed(Ok(json!(3))));
    assert_eq!(ts.task_state(low), TaskState::Completed(Ok(json!(3))));
    assert_trace_continuous(&ts);
}
