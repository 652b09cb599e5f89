//! The transition table, reached: scenarios that between them make every transition of
//! [`TRANSITIONS`] and no other, each with the exact transitions it makes; and illegal
//! transitions, refused.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::{Value, json};

use super::super::{Body, TaskEntry, TaskPhase, TaskTable};
use super::{IllegalTransition, TRANSITIONS, reached};
use crate::admission::TaskLimits;
use crate::async_task::{AsyncTask, Cx};
use crate::id::{AgentId, RequestKey, TaskId};
use crate::pending::PendingSet;
use crate::priority::Priority;
use crate::registry::TaskRegistry;
use crate::request::Response;
use crate::scheduler::Scheduler;
use crate::scheduler::config::Config;
use crate::state::{CancelReason, Outcome};
use crate::task::{NewTask, Step, task_fn};
use crate::time::Time;

use TaskPhase::{Blocked, Done, Queued, Ready, Running, Waiting};

/// Every phase, in `TaskPhase as u8` order.
const PHASES: [TaskPhase; 6] = [Ready, Running, Waiting, Queued, Blocked, Done];

/// Transitions by (from, to), with how many times each was made.
type Counts = Vec<((TaskPhase, TaskPhase), u64)>;

/// The transitions made on this thread since the last call, in (from, to) order.
fn taken() -> Counts {
    reached::take()
        .into_iter()
        .map(|((from, to), n)| ((PHASES[from as usize], PHASES[to as usize]), n))
        .collect()
}

/// `counts` in the order `taken` gives them.
fn sorted(mut counts: Counts) -> Counts {
    counts.sort_by_key(|((from, to), _)| (*from as u8, *to as u8));
    counts
}

/// Asks the LLM once, then ends with the answer.
fn asker() -> NewTask {
    let mut asked = false;
    NewTask::new(task_fn("asker", move |cx| {
        if !asked {
            asked = true;
            cx.llm(json!("q"));
            return Step::Wait;
        }
        Step::done(json!("a"))
    }))
}

/// Sleeps a second, then ends.
fn sleeper() -> NewTask {
    let mut slept = false;
    NewTask::new(task_fn("sleeper", move |cx| {
        if !slept {
            slept = true;
            cx.sleep(Duration::from_secs(1));
            return Step::Wait;
        }
        Step::done(json!("rested"))
    }))
}

/// Yields once, then ends.
fn yielder() -> NewTask {
    let mut yielded = false;
    NewTask::new(task_fn("yielder", move |_| {
        if !yielded {
            yielded = true;
            return Step::Yield;
        }
        Step::done(json!("went on"))
    }))
}

fn run(s: &mut Scheduler) {
    while s.step(Time::ZERO).is_some() {}
}

fn requests(s: &mut Scheduler) -> Vec<RequestKey> {
    std::iter::from_fn(|| s.poll_request())
        .map(|out| out.key)
        .collect()
}

fn answer(s: &mut Scheduler, key: RequestKey) {
    let _ = s.handle_response(Time::ZERO, Response::ok(key, json!("answer")));
}

/// A task asks, waits, is answered and ends; another yields; another sleeps.
fn run_wait_answer_yield_sleep() -> Counts {
    let mut s = Scheduler::new(Config::new());
    s.submit(Time::ZERO, asker()).unwrap();
    s.submit(Time::ZERO, yielder()).unwrap();
    s.submit(Time::ZERO, sleeper()).unwrap();
    run(&mut s);
    for key in requests(&mut s) {
        answer(&mut s, key);
    }
    s.handle_timeout(Time::from_nanos(1_000_000_000));
    run(&mut s);
    assert_eq!(s.stats().completed, 3);
    taken()
}

/// With one slot, a second task queues for it and gets it when the first ends; a third,
/// queued, is canceled.
fn queue_for_a_slot() -> Counts {
    let mut s = Scheduler::new(Config::new().limits(TaskLimits::default().max_running(1)));
    s.submit(Time::ZERO, yielder()).unwrap();
    s.submit(Time::ZERO, yielder()).unwrap();
    let third = s.submit(Time::ZERO, yielder()).unwrap().id;
    s.cancel(Time::ZERO, third, CancelReason::Requested)
        .unwrap();
    run(&mut s);
    assert_eq!((s.stats().completed, s.stats().canceled), (2, 1));
    taken()
}

/// A task waits for its dependency and runs when it completed; another, blocked, is
/// canceled; a submission with a live task's key is rejected.
fn dependencies_and_a_rejection() -> Counts {
    let mut s = Scheduler::new(Config::new());
    let first = s.submit(Time::ZERO, asker().key("k")).unwrap().id;
    s.submit(Time::ZERO, yielder().after(first)).unwrap();
    let canceled = s.submit(Time::ZERO, yielder().after(first)).unwrap().id;
    s.cancel(Time::ZERO, canceled, CancelReason::Requested)
        .unwrap();
    s.submit(Time::ZERO, yielder().key("k")).unwrap();
    run(&mut s);
    for key in requests(&mut s) {
        answer(&mut s, key);
    }
    run(&mut s);
    let stats = s.stats();
    assert_eq!((stats.completed, stats.canceled, stats.rejected), (2, 1, 1));
    taken()
}

/// A parent spawns a child and joins it; a second child, spawned after a task that
/// failed, ends before it starts.
fn children() -> Counts {
    let mut s = Scheduler::new(Config::new());
    let failed = s.submit(Time::ZERO, asker()).unwrap().id;
    s.cancel(Time::ZERO, failed, CancelReason::Requested)
        .unwrap();
    let mut spawned = false;
    s.submit(
        Time::ZERO,
        NewTask::new(task_fn("parent", move |cx| {
            if !spawned {
                spawned = true;
                let child = cx.spawn(yielder());
                cx.spawn(yielder().after(failed));
                cx.join(child);
                return Step::Wait;
            }
            Step::done(json!("joined"))
        })),
    )
    .unwrap();
    run(&mut s);
    let stats = s.stats();
    assert_eq!((stats.completed, stats.canceled), (2, 2));
    taken()
}

/// A waiting task is canceled, a ready one too, and one is failed by its deadline.
fn cancel_and_deadline() -> Counts {
    let mut s = Scheduler::new(Config::new());
    let waiting = s.submit(Time::ZERO, asker()).unwrap().id;
    s.submit(Time::ZERO, asker().deadline(Duration::from_secs(1)))
        .unwrap();
    run(&mut s);
    let ready = s.submit(Time::ZERO, yielder()).unwrap().id;
    s.cancel(Time::ZERO, waiting, CancelReason::Requested)
        .unwrap();
    s.cancel(Time::ZERO, ready, CancelReason::Requested)
        .unwrap();
    s.handle_timeout(Time::from_nanos(1_000_000_000));
    let stats = s.stats();
    assert_eq!((stats.canceled, stats.deadlines_exceeded), (2, 1));
    taken()
}

/// Asks the LLM once and gives the answer.
async fn ask(cx: Cx, input: Value) -> Outcome {
    Ok(cx.llm(input).await?)
}

fn async_asker() -> NewTask {
    NewTask::new(AsyncTask::replayable("ask", json!("q"), ask))
}

/// Restored from a snapshot — one task waiting for its answer, one queued for the slot,
/// one blocked on the first — the run goes on from the phases restored.
fn restore() -> Counts {
    let mut s = Scheduler::new(Config::new().limits(TaskLimits::default().max_running(1)));
    let first = s.submit(Time::ZERO, async_asker()).unwrap().id;
    s.submit(Time::ZERO, async_asker()).unwrap();
    s.submit(Time::ZERO, async_asker().after(first)).unwrap();
    run(&mut s);
    let keys = requests(&mut s);
    let before = taken();
    let registry = TaskRegistry::new().with_async("ask", ask);
    let mut s = Scheduler::restore(&s.snapshot().unwrap(), &registry).unwrap();
    // Restoring is no transition.
    assert_eq!(taken(), []);
    answer(&mut s, keys[0]);
    run(&mut s);
    assert_eq!(s.stats().completed, 1);
    assert_eq!(
        before,
        sorted(vec![
            ((Blocked, Ready), 1),
            ((Blocked, Queued), 1),
            ((Blocked, Blocked), 1),
            ((Ready, Running), 1),
            ((Running, Waiting), 1),
        ])
    );
    taken()
}

#[test]
fn every_scenario_makes_exactly_its_transitions() {
    let _ = taken();
    assert_eq!(
        run_wait_answer_yield_sleep(),
        sorted(vec![
            ((Blocked, Ready), 3),
            ((Ready, Running), 6),
            ((Running, Waiting), 2),
            ((Running, Ready), 1),
            ((Waiting, Ready), 2),
            ((Running, Done), 3),
        ])
    );
    assert_eq!(
        queue_for_a_slot(),
        sorted(vec![
            ((Blocked, Ready), 1),
            ((Blocked, Queued), 2),
            ((Queued, Done), 1),
            ((Queued, Ready), 1),
            ((Ready, Running), 4),
            ((Running, Ready), 2),
            ((Running, Done), 2),
        ])
    );
    assert_eq!(
        dependencies_and_a_rejection(),
        sorted(vec![
            ((Blocked, Ready), 2),
            ((Blocked, Blocked), 2),
            ((Blocked, Done), 2),
            ((Ready, Running), 4),
            ((Running, Waiting), 1),
            ((Waiting, Ready), 1),
            ((Running, Ready), 1),
            ((Running, Done), 2),
        ])
    );
    assert_eq!(
        children(),
        sorted(vec![
            ((Blocked, Ready), 3),
            ((Ready, Done), 1),
            ((Blocked, Waiting), 1),
            ((Waiting, Done), 1),
            ((Ready, Running), 4),
            ((Running, Waiting), 1),
            ((Running, Ready), 1),
            ((Waiting, Ready), 1),
            ((Running, Done), 2),
        ])
    );
    assert_eq!(
        cancel_and_deadline(),
        sorted(vec![
            ((Blocked, Ready), 3),
            ((Ready, Running), 2),
            ((Running, Waiting), 2),
            ((Waiting, Done), 2),
            ((Ready, Done), 1),
        ])
    );
    assert_eq!(
        restore(),
        sorted(vec![
            ((Waiting, Ready), 1),
            ((Ready, Running), 2),
            ((Running, Done), 1),
            ((Blocked, Queued), 1),
            ((Queued, Ready), 1),
            ((Running, Waiting), 1),
        ])
    );
}

/// The scenarios between them reach every transition of the table, and none that is
/// not in it.
#[test]
fn the_scenarios_reach_every_transition_of_the_table_and_no_other() {
    let _ = taken();
    let mut reached: Vec<(TaskPhase, TaskPhase)> = [
        run_wait_answer_yield_sleep(),
        queue_for_a_slot(),
        dependencies_and_a_rejection(),
        children(),
        cancel_and_deadline(),
        restore(),
    ]
    .into_iter()
    .flatten()
    .map(|(pair, _)| pair)
    .collect();
    reached.sort_by_key(|(from, to)| (*from as u8, *to as u8));
    reached.dedup();
    let mut table: Vec<(TaskPhase, TaskPhase)> = TRANSITIONS
        .iter()
        .flat_map(|t| t.from.iter().map(|from| (*from, t.to)))
        .collect();
    table.sort_by_key(|(from, to)| (*from as u8, *to as u8));
    let never_reached: Vec<_> = table.iter().filter(|p| !reached.contains(p)).collect();
    let not_in_table: Vec<_> = reached.iter().filter(|p| !table.contains(p)).collect();
    assert_eq!(
        never_reached,
        Vec::<&(TaskPhase, TaskPhase)>::new(),
        "in the table, never reached"
    );
    assert_eq!(
        not_in_table,
        Vec::<&(TaskPhase, TaskPhase)>::new(),
        "reached, not in the table"
    );
    assert_eq!(table.len(), 14);
}

fn entry(id: u64, phase: TaskPhase) -> TaskEntry {
    TaskEntry {
        id: TaskId(id),
        body: Body::Live(Box::new(task_fn("t", |_| Step::Wait))),
        timer: Time::MAX,
        created_at: Time::ZERO,
        next_request: 1,
        in_flight: 0,
        agent: AgentId::DEFAULT,
        phase,
        wait_any: false,
        timer_fired: false,
        holds_slot: false,
        priority: Priority::Normal,
        pending: PendingSet::Empty,
        family: None,
    }
}

/// The checked transitions, by name.
type Checked = (
    &'static str,
    fn(&mut TaskEntry) -> Result<(), IllegalTransition>,
);

const CHECKED: [Checked; 5] = [
    ("admit", TaskEntry::admit),
    ("transition_to_queued", TaskEntry::transition_to_queued),
    ("transition_to_blocked", TaskEntry::transition_to_blocked),
    (
        "transition_to_waiting_unstarted",
        TaskEntry::transition_to_waiting_unstarted,
    ),
    ("transition_to_done", TaskEntry::transition_to_done),
];

#[test]
fn a_checked_transition_from_a_phase_the_table_does_not_allow_is_refused() {
    let _ = taken();
    let mut task = entry(7, Done);
    assert_eq!(
        task.transition_to_queued(),
        Err(IllegalTransition {
            task: TaskId(7),
            from: Done,
            to: Queued,
            name: "transition_to_queued",
            allowed: &[Blocked],
        })
    );
    assert_eq!(task.phase, Done);
    assert_eq!(
        task.transition_to_done().unwrap_err().to_string(),
        "task 7 cannot go from Done to Done \
         (transition_to_done leaves only [Ready, Running, Waiting, Queued, Blocked])"
    );
    // Every checked transition, from every phase: made exactly from those the table
    // lists for it, refused (the phase kept) from the others.
    for (name, go) in CHECKED {
        let transition = TRANSITIONS.iter().find(|t| t.name == name).unwrap();
        for from in PHASES {
            let mut task = entry(1, from);
            let made = go(&mut task).is_ok();
            assert_eq!(
                made,
                transition.from.contains(&from),
                "{name} from {from:?}"
            );
            assert_eq!(task.phase, if made { transition.to } else { from });
        }
    }
    // Refusals are not counted as made.
    assert_eq!(
        taken().iter().map(|(_, n)| n).sum::<u64>(),
        2 + 1 + 1 + 1 + 5
    );
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(
    expected = "task 3 cannot go from Waiting to Running (transition_to_running leaves only [Ready])"
)]
fn a_hot_transition_from_a_phase_the_table_does_not_allow_stops_a_debug_build() {
    entry(3, Waiting).transition_to_running();
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(
    expected = "task 4 cannot go from Running to Queued (transition_to_queued leaves only [Blocked])"
)]
fn a_refused_transition_through_the_table_stops_a_debug_build() {
    let mut table = TaskTable::new(4);
    let index = table.add(entry(4, Running));
    table.transition(index, TaskEntry::transition_to_queued);
}

#[test]
#[cfg(not(debug_assertions))]
fn a_refused_transition_through_the_table_is_counted_in_a_release_build() {
    let mut table = TaskTable::new(4);
    let index = table.add(entry(4, Running));
    assert_eq!(
        table
            .transition(index, TaskEntry::transition_to_queued)
            .phase,
        Running
    );
    assert_eq!(
        table.transition(index, TaskEntry::transition_to_done).phase,
        Done
    );
    assert_eq!(table.refused_transitions(), 1);
}
