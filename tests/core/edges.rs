//! Edge cases of admission and request limits: a spawned child whose dependency cannot
//! complete, keys on spawned children, a request no executor serves under an agent
//! cap, a cap of zero.

use serde_json::json;
use spool::{
    CancelReason, Config, Dep, Kind, NewTask, Request, RequestLimits, Scheduler, Step, TaskError,
    TaskId, TaskState, TestScheduler, Time, task_fn,
};

use crate::support::ask_once;

/// A parent that spawns one child from `make` and finishes with the child's outcome.
fn parent_of(make: impl Fn() -> NewTask + Send + 'static) -> impl spool::AgentTask {
    let mut child = None;
    task_fn("parent", move |cx| match child {
        None => {
            let id = cx.spawn(make());
            child = Some(id);
            cx.join(id);
            Step::Wait
        }
        Some(id) => Step::Done(
            cx.take_child_result(id)
                .unwrap_or_else(|| Err(TaskError::failed("no result"))),
        ),
    })
}

/// A spawned child that depends on a task that already failed, on a task that does not
/// exist, or on a batch entry (which only `submit_all` gives meaning to) ends at once,
/// canceled with its dependency named; the scheduler's counts stay right.
#[test]
fn a_spawned_child_whose_dependency_cannot_complete_is_canceled_at_once() {
    let mut ts = TestScheduler::new();
    let failed = ts.spawn(task_fn("fails", |_| Step::fail("no")));
    ts.step_until_idle();
    let deps = [
        Dep::Task(failed),
        Dep::Task(TaskId::from_raw(999)),
        Dep::Batch(0),
    ];
    for dep in deps {
        let parent = ts.spawn(parent_of(move || {
            NewTask::new(task_fn("child", |_| Step::done(1))).after(dep)
        }));
        ts.step_until_idle();
        let named = match dep {
            Dep::Task(id) => id,
            Dep::Batch(_) => TaskId::from_raw(0),
        };
        let TaskState::Completed(Err(TaskError::Canceled { reason, .. })) = ts.task_state(parent)
        else {
            panic!("{dep:?}: {}", ts.task_state(parent));
        };
        assert_eq!(reason, CancelReason::DependencyFailed(named), "{dep:?}");
    }
    let state = ts.queue_state();
    assert_eq!((state.queued, state.blocked, state.running), (0, 0, 0));
}

/// A spawned child given the key of a live task does not take the key over: a new
/// submission with that key is still rejected while the first task lives.
#[test]
fn a_spawned_child_does_not_take_over_a_live_tasks_key() {
    let mut ts = TestScheduler::new();
    ts.hold(Kind::Llm);
    let first = ts.submit(NewTask::new(ask_once("first", Request::llm(json!(1)))).key("k"));
    ts.spawn(parent_of(|| {
        NewTask::new(task_fn("child", |_| Step::done(1))).key("k")
    }));
    ts.step_until_idle();
    let again = ts.admit(NewTask::new(task_fn("again", |_| Step::done(2))).key("k"));
    assert_eq!(
        again.admission,
        spool::Admission::Rejected {
            reason: spool::RejectReason::Duplicate {
                key: "k".to_owned(),
                existing: first
            }
        }
    );
}

/// A request no executor serves gives its agent's room back: the agent's next request,
/// held back by a cap of one, goes out.
#[test]
fn an_unroutable_request_lets_its_agents_held_requests_go() {
    let mut s = Scheduler::new(Config::new().requests(RequestLimits::new().per_agent_in_flight(1)));
    let lost = s
        .submit(
            Time::ZERO,
            NewTask::new(ask_once("lost", Request::tool("nowhere", json!(1)))).agent("a"),
        )
        .unwrap()
        .id;
    s.submit(
        Time::ZERO,
        NewTask::new(ask_once("next", Request::llm(json!(2)))).agent("a"),
    )
    .unwrap();
    while s.step(Time::ZERO).is_some() {}
    let first = s.poll_request().unwrap();
    assert_eq!(first.key.task(), lost);
    assert_eq!(
        s.poll_request(),
        None,
        "the cap of one holds the second back"
    );
    let _ = s.handle_unroutable(Time::ZERO, first.key);
    let second = s.poll_request().expect("the agent has room again");
    assert_eq!(second.request.kind, Kind::Llm);
}

/// A cap of one agent's own replaces the cap for every agent for it alone: "a" may
/// have one request out, "b" (under the common cap of two) two.
#[test]
fn an_agent_with_a_cap_of_its_own_is_held_to_it_and_the_others_to_the_common_one() {
    let limits = RequestLimits::new().per_agent_in_flight(2).agent("a", 1);
    let mut s = Scheduler::new(Config::new().requests(limits));
    for (agent, n) in [("a", 1), ("a", 2), ("b", 3), ("b", 4), ("b", 5)] {
        s.submit(
            Time::ZERO,
            NewTask::new(ask_once("ask", Request::llm(json!(n)))).agent(agent),
        )
        .unwrap();
    }
    while s.step(Time::ZERO).is_some() {}
    let mut sent = Vec::new();
    while let Some(out) = s.poll_request() {
        sent.push(out.request.payload.value().clone());
    }
    assert_eq!(sent, [json!(1), json!(3), json!(4)]);
}

/// A per-agent cap of zero is taken as one, as every other zero limit is, rather than
/// holding every request back forever.
#[test]
fn a_per_agent_cap_of_zero_is_taken_as_one() {
    let mut s = Scheduler::new(Config::new().requests(RequestLimits::new().per_agent_in_flight(0)));
    for n in 0..2 {
        s.submit(
            Time::ZERO,
            NewTask::new(ask_once("ask", Request::llm(json!(n)))),
        )
        .unwrap();
    }
    while s.step(Time::ZERO).is_some() {}
    assert!(s.poll_request().is_some());
    assert_eq!(s.poll_request(), None);
}
