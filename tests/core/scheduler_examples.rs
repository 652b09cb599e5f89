//! The scheduler's worked examples, each with exact orders, positions and scores.
//!
//! Scheduling API calls: each call is a task. The concurrency limit is
//! `TaskLimits::max_running`, a submission's `Admission` says whether it is ready,
//! queued or rate limited, the rate window is `TaskLimits::start_window`, and a call
//! completing (`complete`) is its task ending (its held request answered).
//!
//! Prioritizing loops: loops are tasks whose type name is the loop type, ordered by
//! `PolicyChoice::Computed(ComputedConfig::default())`. Depth comes from real parent
//! chains (`NewTask::parent`), age from virtual time. To show an order, the loops
//! compete for one slot (`max_running(1)`) that a blocker task holds; when the blocker
//! ends, the queued loops (which finish on their first poll) are admitted one after
//! another, and the test asserts that order as well as the scores.

use std::time::Duration;

use serde_json::json;
use spool::{
    Admission, AgentTask, Cause, ComputedConfig, Config, Delivery, Kind, NewTask, Phase,
    PolicyChoice, Priority, QueueDetail, Request, Scheduler, Step, SubmitError, TaskId, TaskLimits,
    TaskState, TestScheduler, Time, WaitReason, task_fn,
};

use crate::support::ask_once;

fn t(n: u64) -> TaskId {
    TaskId::from_raw(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn mins(n: u64) -> Duration {
    Duration::from_secs(60 * n)
}

/// A task of type `name` that makes one held LLM request and finishes with its answer:
/// it holds its slot until the test answers (`complete`).
fn holder(name: &'static str) -> impl AgentTask {
    ask_once(name, Request::llm(json!(name)))
}

/// A task of type `name` that finishes on its first poll.
fn quick(name: &'static str) -> impl AgentTask {
    task_fn(name, move |_cx| Step::done(json!(name)))
}

/// A test scheduler with `config`, LLM requests held for the test to answer.
fn with_config(config: Config) -> TestScheduler {
    let mut ts = TestScheduler::with_scheduler(Scheduler::new(config.record_trace(true)));
    ts.hold(Kind::Llm);
    ts
}

/// Ends task `id` (`complete`): answers its held request and lets the
/// scheduler run what that frees.
fn complete(ts: &mut TestScheduler, id: TaskId) {
    let key = ts
        .held_requests()
        .iter()
        .map(|h| h.request.key)
        .find(|k| k.task() == id)
        .unwrap_or_else(|| panic!("task {id} has no held request"));
    assert_eq!(ts.answer(key, json!("done")), Delivery::Delivered);
    ts.step_until_idle();
    assert!(ts.task_state(id).is_ok(), "task {id} completed");
}

/// The tasks admitted from the slot queue so far (trace cause `admitted`), in order.
fn admitted(ts: &TestScheduler) -> Vec<TaskId> {
    ts.trace_events()
        .iter()
        .filter(|e| e.cause == Cause::Admitted)
        .map(|e| e.task)
        .collect()
}

/// The row of task `id` in `queue_details`.
fn detail(ts: &TestScheduler, id: TaskId) -> QueueDetail {
    ts.queue_details()
        .into_iter()
        .find(|d| d.id == id)
        .unwrap_or_else(|| panic!("task {id} is not live"))
}

/// The computed scores of `ids`, from `queue_details`.
fn scores(ts: &TestScheduler, ids: &[TaskId]) -> Vec<Option<i64>> {
    ids.iter().map(|id| detail(ts, *id).score).collect()
}

// ---------------------------------------------------------------------------------
// Scheduling API calls: concurrency, priority levels, rate limits.
// ---------------------------------------------------------------------------------

/// With two slots, the first two submissions are ready and the third is queued at
/// position 1 (estimated wait: 30 s default per slot time, divided by 2 slots); when
/// one running task ends, the queued one gets its slot, so two run and none is queued.
#[test]
fn test_concurrent_limit() {
    let mut ts = with_config(
        Config::new()
            .policy(PolicyChoice::Priority)
            .limits(TaskLimits::new().max_running(2)),
    );

    let a = ts.admit(NewTask::new(holder("a")).priority(Priority::Normal));
    let b = ts.admit(NewTask::new(holder("b")).priority(Priority::Normal));
    let c = ts.admit(NewTask::new(holder("c")).priority(Priority::Normal));
    assert_eq!(a.admission, Admission::Ready);
    assert_eq!(b.admission, Admission::Ready);
    assert_eq!(
        c.admission,
        Admission::Queued {
            position: 1,
            estimated_wait: secs(15),
        }
    );
    ts.step_until_idle();
    assert_eq!(ts.task_state(c.id), TaskState::Waiting(WaitReason::Slot));
    let state = ts.queue_state();
    assert_eq!((state.running, state.queued), (2, 1));

    complete(&mut ts, a.id);

    // Now `c` runs (it was promoted from the queue when `a` ended).
    let state = ts.queue_state();
    assert_eq!(state.running, 2);
    assert_eq!(state.queued, 0);
    assert_eq!(admitted(&ts), [c.id]);
    assert_eq!(
        ts.task_state(c.id),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );
    let stats = ts.stats();
    assert_eq!(
        (
            stats.scheduled,
            stats.completed,
            stats.peak_running,
            stats.peak_queued
        ),
        (3, 1, 2, 1)
    );
}

/// One slot, held by a normal task; low, normal and high tasks queue (each at position
/// 1: nothing of its level or above is ahead of it). When the running task ends, the
/// high one runs; then normal, then low.
#[test]
fn test_priority_ordering() {
    let mut ts = with_config(
        Config::new()
            .policy(PolicyChoice::Priority)
            .limits(TaskLimits::new().max_running(1)),
    );

    let running = ts.admit(NewTask::new(holder("running")).priority(Priority::Normal));
    assert_eq!(running.admission, Admission::Ready);
    ts.step_until_idle();
    let mut queued = Vec::new();
    for (name, priority) in [
        ("low", Priority::Low),
        ("normal", Priority::Normal),
        ("high", Priority::High),
    ] {
        let s = ts.admit(NewTask::new(holder(name)).priority(priority));
        assert_eq!(
            s.admission,
            Admission::Queued {
                position: 1,
                estimated_wait: secs(30),
            },
            "{name}"
        );
        queued.push(s.id);
    }
    let [low, normal, high] = queued[..] else {
        unreachable!()
    };

    complete(&mut ts, running.id);

    let details = ts.queue_details();
    let running_now: Vec<&str> = details
        .iter()
        .filter(|d| d.state != TaskState::Waiting(WaitReason::Slot))
        .map(|d| d.type_name)
        .collect();
    assert_eq!(running_now, ["high"]);

    complete(&mut ts, high);
    complete(&mut ts, normal);
    complete(&mut ts, low);
    assert_eq!(admitted(&ts), [high, normal, low]);
}

/// At most 3 starts in any 60 s. The first three submissions start; the fourth, with
/// slots free, is rate limited for exactly the 60 s until the first start leaves the
/// window — and starts by itself then.
#[test]
fn test_rate_limiting() {
    let mut ts = with_config(
        Config::new()
            .policy(PolicyChoice::Priority)
            .limits(TaskLimits::new().max_running(10).start_window(3, secs(60))),
    );

    for name in ["a", "b", "c"] {
        let s = ts.admit(NewTask::new(holder(name)));
        assert_eq!(s.admission, Admission::Ready, "{name}");
    }
    let d = ts.admit(NewTask::new(holder("d")));
    assert_eq!(
        d.admission,
        Admission::RateLimited {
            retry_after: secs(60)
        }
    );
    ts.step_until_idle();
    let state = ts.queue_state();
    assert_eq!(
        (state.running, state.queued, state.rate_limited),
        (3, 1, true)
    );
    assert_eq!(ts.stats().rate_limited, 1);

    ts.advance(secs(59) + Duration::from_millis(999));
    assert_eq!(ts.task_state(d.id), TaskState::Waiting(WaitReason::Slot));
    ts.advance(Duration::from_millis(1));
    let start = ts
        .trace_events()
        .iter()
        .find(|e| e.task == d.id && e.cause == Cause::Admitted)
        .map(|e| (e.time, e.from.clone(), e.to.clone()));
    assert_eq!(
        start,
        Some((
            Time::ZERO + secs(60),
            Phase::Waiting(WaitReason::Slot),
            Phase::Ready
        ))
    );
    assert_eq!(
        ts.task_state(d.id),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );
    assert!(!ts.queue_state().rate_limited);
}

// ---------------------------------------------------------------------------------
// Computed priority over loop hierarchies.
// ---------------------------------------------------------------------------------

/// Computed priority with the documented terms, one slot.
fn loops() -> TestScheduler {
    with_config(
        Config::new()
            .policy(PolicyChoice::Computed(ComputedConfig::default()))
            .limits(TaskLimits::new().max_running(1)),
    )
}

/// Runs a chain of loops of these types to completion, each submitted under the
/// previous one (the first has no parent) after that one completed. Returns their ids.
fn completed_chain(ts: &mut TestScheduler, types: &[&'static str]) -> Vec<TaskId> {
    let mut ids: Vec<TaskId> = Vec::new();
    for name in types {
        let mut task = NewTask::new(quick(name));
        if let Some(parent) = ids.last() {
            task = task.parent(*parent);
        }
        let s = ts.admit(task);
        assert_eq!(s.admission, Admission::Ready, "{name}");
        ts.step_until_idle();
        assert_eq!(ts.task_state(s.id), TaskState::Completed(Ok(json!(name))));
        ids.push(s.id);
    }
    ids
}

/// Submits a blocker task that takes the one slot and keeps it until released.
fn hold_the_slot(ts: &mut TestScheduler) -> TaskId {
    let s = ts.admit(NewTask::new(holder("blocker")));
    assert_eq!(s.admission, Admission::Ready);
    ts.step_until_idle();
    s.id
}

/// Submits a loop that must queue for the slot.
fn queue(ts: &mut TestScheduler, task: NewTask) -> TaskId {
    let s = ts.admit(task);
    assert!(
        matches!(s.admission, Admission::Queued { .. }),
        "task {} should queue: {:?}",
        s.id,
        s.admission
    );
    s.id
}

/// Releases the blocker and returns the order in which the queued loops got the slot.
fn release(ts: &mut TestScheduler, blocker: TaskId) -> Vec<TaskId> {
    let before = admitted(ts).len();
    complete(ts, blocker);
    admitted(ts)[before..].to_vec()
}

/// Three loops and a blocked plan: A (ralph, 5 min, depth 3) = 135, B (phase, 30 min,
/// depth 2) = 130, C (ralph, 1 min, depth 3, iteration 5) = 111: A runs first, then B,
/// then C. A plan waiting 50 min on an incomplete dependency (the blocker) scores 90
/// and is listed as not runnable. The `debug scheduler` table is snapshotted.
#[test]
fn example_priority_calculation_runs_a_then_b_then_c() {
    let mut ts = loops();
    let [_plan, spec, phase] = completed_chain(&mut ts, &["plan", "spec", "phase"])[..] else {
        unreachable!()
    };
    let blocker = hold_the_slot(&mut ts);
    let d = ts.admit(NewTask::new(quick("plan")).after(blocker));
    assert_eq!(d.admission, Admission::Blocked { dependencies: 1 });
    ts.advance(mins(20));
    let b = queue(&mut ts, NewTask::new(quick("phase")).parent(spec));
    ts.advance(mins(25));
    let a = queue(&mut ts, NewTask::new(quick("ralph")).parent(phase));
    ts.advance(mins(4));
    let c = queue(
        &mut ts,
        NewTask::new(quick("ralph")).parent(phase).iteration(5),
    );
    ts.advance(mins(1));

    assert_eq!(
        scores(&ts, &[a, b, c, d.id]),
        [Some(135), Some(130), Some(111), Some(90)]
    );
    let rows: Vec<(TaskId, u32, u32, Duration)> = [a, b, c, d.id]
        .iter()
        .map(|id| {
            let row = detail(&ts, *id);
            (row.id, row.depth, row.iteration, row.age)
        })
        .collect();
    assert_eq!(
        rows,
        [
            (a, 3, 1, mins(5)),
            (b, 2, 1, mins(30)),
            (c, 3, 5, mins(1)),
            (d.id, 0, 1, mins(50)),
        ]
    );
    insta::assert_snapshot!(ts.debug_table());

    assert_eq!(release(&mut ts, blocker), [a, b, c, d.id]);
}

/// Depth is the number of ancestors along the `parent` chain, counted through ancestors
/// that have already completed (Plan 0 → Spec 1 → Phase 2 → Ralph 3, a second Phase
/// under the Spec at 2, a second Spec under the Plan at 1).
#[test]
fn depth_counts_ancestors_that_already_completed() {
    let mut ts = loops();
    let [plan, spec, phase] = completed_chain(&mut ts, &["plan", "spec", "phase"])[..] else {
        unreachable!()
    };
    let _blocker = hold_the_slot(&mut ts);
    let ralph = queue(&mut ts, NewTask::new(quick("ralph")).parent(phase));
    let phase2 = queue(&mut ts, NewTask::new(quick("phase")).parent(spec));
    let spec2 = queue(&mut ts, NewTask::new(quick("spec")).parent(plan));

    let depths: Vec<(&str, u32)> = [ralph, phase2, spec2]
        .iter()
        .map(|id| {
            let row = detail(&ts, *id);
            (row.type_name, row.depth)
        })
        .collect();
    assert_eq!(depths, [("ralph", 3), ("phase", 2), ("spec", 1)]);
    assert_eq!(
        scores(&ts, &[ralph, phase2, spec2]),
        [Some(130), Some(100), Some(70)]
    );
}

/// The same hierarchy submitted while every ancestor is still live (each loop waits
/// for its parent): depth is 1, 2, 3 down the chain, and the loops run parent first.
#[test]
fn depth_counts_ancestors_submitted_while_they_wait() {
    let mut ts = with_config(
        Config::new()
            .policy(PolicyChoice::Computed(ComputedConfig::default()))
            .limits(TaskLimits::new().max_running(4)),
    );
    let plan = ts.admit(NewTask::new(holder("plan")));
    assert_eq!(plan.admission, Admission::Ready);
    let mut ids = vec![plan.id];
    for name in ["spec", "phase", "ralph"] {
        let parent = *ids.last().unwrap();
        let s = ts.admit(NewTask::new(quick(name)).parent(parent));
        assert_eq!(
            s.admission,
            Admission::Blocked { dependencies: 1 },
            "{name}"
        );
        ids.push(s.id);
    }
    ts.step_until_idle();
    let depths: Vec<(&str, u32, Option<i64>)> = ids
        .iter()
        .map(|id| {
            let row = detail(&ts, *id);
            (row.type_name, row.depth, row.score)
        })
        .collect();
    assert_eq!(
        depths,
        [
            ("plan", 0, Some(40)),
            ("spec", 1, Some(70)),
            ("phase", 2, Some(100)),
            ("ralph", 3, Some(130)),
        ]
    );

    complete(&mut ts, plan.id);
    let completed: Vec<TaskId> = ts
        .trace_events()
        .iter()
        .filter(|e| e.to == Phase::Completed)
        .map(|e| e.task)
        .collect();
    assert_eq!(completed, ids);
}

/// New leaf vs old branch: Ralph-X (now, depth 3) = 130 beats Spec-Y (40 min,
/// depth 1) = 110, though Y waited 40 minutes longer.
#[test]
fn a_new_leaf_beats_an_old_branch() {
    let mut ts = loops();
    let chain_x = completed_chain(&mut ts, &["plan", "spec", "phase"]);
    let [plan_y] = completed_chain(&mut ts, &["plan"])[..] else {
        unreachable!()
    };
    let blocker = hold_the_slot(&mut ts);
    let y = queue(&mut ts, NewTask::new(quick("spec")).parent(plan_y));
    ts.advance(mins(40));
    let x = queue(&mut ts, NewTask::new(quick("ralph")).parent(chain_x[2]));

    assert_eq!(scores(&ts, &[x, y]), [Some(130), Some(110)]);
    assert_eq!((detail(&ts, x).depth, detail(&ts, y).depth), (3, 1));
    assert_eq!(release(&mut ts, blocker), [x, y]);
}

/// Very old plan vs new ralph: Plan-A, waiting 50 minutes (the most age counts), scores
/// 90; Ralph-B, new at depth 3, scores 130 and still wins.
#[test]
fn a_new_ralph_beats_a_very_old_plan() {
    let mut ts = loops();
    let chain_b = completed_chain(&mut ts, &["plan", "spec", "phase"]);
    let blocker = hold_the_slot(&mut ts);
    let a = queue(&mut ts, NewTask::new(quick("plan")));
    ts.advance(mins(50));
    let b = queue(&mut ts, NewTask::new(quick("ralph")).parent(chain_b[2]));

    assert_eq!(scores(&ts, &[a, b]), [Some(90), Some(130)]);
    assert_eq!(release(&mut ts, blocker), [b, a]);
}

/// A struggling loop is deprioritized: two ralphs at depth 3, both 10 minutes old; X on
/// iteration 7 scores 100 + 10 + 30 − 30 (capped) = 110, Y on iteration 1 scores 140
/// and runs first although X was submitted first.
#[test]
fn a_struggling_loop_is_deprioritized() {
    let mut ts = loops();
    let chain = completed_chain(&mut ts, &["plan", "spec", "phase"]);
    let blocker = hold_the_slot(&mut ts);
    let x = queue(
        &mut ts,
        NewTask::new(quick("ralph")).parent(chain[2]).iteration(7),
    );
    let y = queue(&mut ts, NewTask::new(quick("ralph")).parent(chain[2]));
    ts.advance(mins(10));

    assert_eq!(scores(&ts, &[x, y]), [Some(110), Some(140)]);
    assert_eq!((detail(&ts, x).iteration, detail(&ts, y).iteration), (7, 1));
    assert_eq!(release(&mut ts, blocker), [y, x]);
}

/// Completing a branch: Phase-003's two ralph children, 004 (5 min old) = 135 and 005
/// (2 min old) = 132; the older runs first.
#[test]
fn the_older_sibling_runs_first() {
    let mut ts = loops();
    let chain = completed_chain(&mut ts, &["plan", "spec", "phase"]);
    let blocker = hold_the_slot(&mut ts);
    let r004 = queue(&mut ts, NewTask::new(quick("ralph")).parent(chain[2]));
    ts.advance(mins(3));
    let r005 = queue(&mut ts, NewTask::new(quick("ralph")).parent(chain[2]));
    ts.advance(mins(2));

    assert_eq!(scores(&ts, &[r004, r005]), [Some(135), Some(132)]);
    assert_eq!(release(&mut ts, blocker), [r004, r005]);
}

/// A ralph with no parent, waiting 5 minutes, scores base 100 + age 5 + depth 0 = 105.
#[test]
fn test_priority_calculation() {
    let mut ts = loops();
    let blocker = hold_the_slot(&mut ts);
    let ralph = queue(&mut ts, NewTask::new(quick("ralph")));
    ts.advance(mins(5));

    let row = detail(&ts, ralph);
    assert_eq!(
        (
            row.type_name,
            row.score,
            row.age,
            row.depth,
            row.iteration,
            row.state
        ),
        (
            "ralph",
            Some(105),
            mins(5),
            0,
            1,
            TaskState::Waiting(WaitReason::Slot)
        )
    );
    // A second short of six minutes still counts five whole minutes.
    ts.advance(secs(59));
    assert_eq!(scores(&ts, &[ralph]), [Some(105)]);
    ts.advance(secs(1));
    assert_eq!(scores(&ts, &[ralph]), [Some(106)]);
    assert_eq!(release(&mut ts, blocker), [ralph]);
}

/// A spec under a running plan is not runnable (it waits for its parent even with a
/// slot free); once the plan completes it runs. It is one level deeper than the plan
/// and inherits its agent and priority.
#[test]
fn test_dependency_blocks_execution() {
    let mut ts = with_config(
        Config::new()
            .policy(PolicyChoice::Computed(ComputedConfig::default()))
            .limits(TaskLimits::new().max_running(2)),
    );
    let parent = ts.admit(
        NewTask::new(holder("plan"))
            .agent("alice")
            .priority(Priority::High),
    );
    assert_eq!(parent.admission, Admission::Ready);
    ts.step_until_idle();
    assert_eq!(
        ts.task_state(parent.id),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );

    let child = ts.admit(NewTask::new(quick("spec")).parent(parent.id));
    assert_eq!(child.admission, Admission::Blocked { dependencies: 1 });
    ts.step_until_idle();
    // Not runnable: the parent is not complete, though a slot is free.
    assert_eq!(
        ts.task_state(child.id),
        TaskState::Waiting(WaitReason::Dependencies(1))
    );
    let row = detail(&ts, child.id);
    assert_eq!(
        (row.depth, row.priority, row.score),
        (1, Priority::High, Some(70))
    );
    assert_eq!(
        ts.core().agent_name(row.agent),
        "alice",
        "the child inherits its parent's agent"
    );

    complete(&mut ts, parent.id);

    assert_eq!(
        ts.task_state(child.id),
        TaskState::Completed(Ok(json!("spec")))
    );
    let child_trace: Vec<String> = ts
        .trace_events()
        .iter()
        .filter(|e| e.task == child.id)
        .map(|e| format!("{} {} -> {} ({})", e.time, e.from, e.to, e.cause))
        .collect();
    assert_eq!(
        child_trace,
        [
            "0.000s New -> Waiting(1 dependency) (submitted)",
            // Released while its parent ends, it queues with the others the parent
            // releases, and the freed slot goes to the best of them.
            "0.000s Waiting(1 dependency) -> Waiting(slot) (dependency task 1 completed)",
            "0.000s Waiting(slot) -> Ready (admitted)",
            "0.000s Ready -> Running (scheduled)",
            "0.000s Running -> Completed(ok) (returned)",
        ]
    );
}

/// A plan waiting an hour scores 40 + 50 = 90: a new ralph (100) still beats it, but it
/// now goes before a new phase (80) and a new spec (60) that would have beaten it when
/// it was new. After two hours its age boost is still capped at 50, so it still scores
/// 90 and a new ralph still wins.
#[test]
fn test_age_boost_prevents_starvation() {
    let mut ts = loops();
    let blocker = hold_the_slot(&mut ts);
    let old_plan = queue(&mut ts, NewTask::new(quick("plan")));
    assert_eq!(scores(&ts, &[old_plan]), [Some(40)]);
    ts.advance(mins(60));
    let young_ralph = queue(&mut ts, NewTask::new(quick("ralph")));
    let young_phase = queue(&mut ts, NewTask::new(quick("phase")));
    let young_spec = queue(&mut ts, NewTask::new(quick("spec")));

    let s = scores(&ts, &[young_ralph, old_plan, young_phase, young_spec]);
    assert_eq!(s, [Some(100), Some(90), Some(80), Some(60)]);
    assert!(s[0] > s[1], "ralph still wins, but barely");
    assert_eq!(
        release(&mut ts, blocker),
        [young_ralph, old_plan, young_phase, young_spec]
    );

    // Two hours: the age boost is still capped at 50.
    let mut ts = loops();
    let blocker = hold_the_slot(&mut ts);
    let old_plan = queue(&mut ts, NewTask::new(quick("plan")));
    ts.advance(mins(120));
    let young_ralph = queue(&mut ts, NewTask::new(quick("ralph")));
    assert_eq!(scores(&ts, &[young_ralph, old_plan]), [Some(100), Some(90)]);
    assert_eq!(release(&mut ts, blocker), [young_ralph, old_plan]);
}

/// Equal scores go to the earlier submission: a spec submitted at 0 (60 + 10 min =
/// 70) and a spec at depth 1 submitted 10 minutes later (60 + 10 = 70) tie, and the
/// older runs first; among equal scores and equal times, queue order decides.
#[test]
fn equal_scores_go_to_the_earlier_submission_then_queue_order() {
    let mut ts = loops();
    let [plan] = completed_chain(&mut ts, &["plan"])[..] else {
        unreachable!()
    };
    let blocker = hold_the_slot(&mut ts);
    let old = queue(&mut ts, NewTask::new(quick("spec")));
    ts.advance(mins(10));
    let deep = queue(&mut ts, NewTask::new(quick("spec")).parent(plan));
    let deep_twin = queue(&mut ts, NewTask::new(quick("spec")).parent(plan));

    assert_eq!(
        scores(&ts, &[deep_twin, deep, old]),
        [Some(70), Some(70), Some(70)]
    );
    assert_eq!(release(&mut ts, blocker), [old, deep, deep_twin]);
}

/// A loop whose parent does not exist is never runnable: the submission is refused
/// outright (`None => return false`), and nothing is added.
#[test]
fn a_loop_under_a_missing_parent_is_refused() {
    let mut ts = loops();
    let result = ts
        .core_mut()
        .submit(Time::ZERO, NewTask::new(quick("spec")).parent(t(99)));
    assert_eq!(
        result,
        Err(SubmitError::UnknownParent {
            index: 0,
            parent: t(99)
        })
    );
    assert_eq!((ts.core().len(), ts.stats().submitted), (0, 0));
}
