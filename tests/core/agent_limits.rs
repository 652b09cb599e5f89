//! Each agent's share of a request kind (`RequestLimits::agent_limit`, `--agent-limit`)
//! beside the kind's own limits: a request goes when both have room; a request its
//! agent has no room for waits apart and never holds back another agent's; waiting
//! requests go in task-priority order. Every expected order and time below was worked
//! out by hand from the documented rules, then checked against the run.

use std::time::Duration;

use serde_json::json;
use spool::{
    AgentKindLimits, Config, Kind, Mock, NewTask, PolicyChoice, Priority, Request, RequestLimits,
    Scheduler, TaskId, TestScheduler, Time,
};

use crate::support::{ask_once, assert_trace_continuous};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn at(n: u64) -> Time {
    Time::from_duration(secs(n))
}

/// A task of `agent` at `priority` that asks the LLM once.
fn asker(agent: &str, priority: Priority) -> NewTask {
    NewTask::new(ask_once("asker", Request::llm(json!("question"))))
        .agent(agent.to_owned())
        .priority(priority)
}

/// A test scheduler under `limits` and `policy`, recording its trace, whose LLM answers
/// every question 1 s after it is sent.
fn answering(limits: RequestLimits, policy: PolicyChoice) -> TestScheduler {
    let config = Config::new()
        .record_trace(true)
        .policy(policy)
        .requests(limits);
    let mut ts = TestScheduler::with_scheduler(Scheduler::new(config));
    ts.mock_with_latency(Kind::Llm, Mock::Fixed(json!("answer")), secs(1));
    ts
}

/// Every request sent, as `(time, task)`.
fn sent(ts: &TestScheduler) -> Vec<(Time, TaskId)> {
    ts.sent_requests()
        .iter()
        .map(|s| (s.at, s.key.task()))
        .collect()
}

/// Two LLM requests in flight at most, one per agent. Agent a's three High tasks are
/// made first, then b's Normal one and c's Low one. At 0 s a's first goes; a's other
/// two, at the head of the LLM's queue, wait apart for a's share, so b's goes beside
/// it (a queue of the kind in task-priority order alone would have held b back behind
/// a). At 1 s both answers free room: a's second goes (High first), then c's; at 2 s
/// a's third.
#[test]
fn an_agent_at_its_share_does_not_hold_back_another_agents_request() {
    let limits = RequestLimits::new()
        .max_in_flight(Kind::Llm, 2)
        .agent_limit(Kind::Llm, AgentKindLimits::new().max_in_flight(1));
    let mut ts = answering(limits, PolicyChoice::Fifo);
    let a: Vec<TaskId> = (0..3)
        .map(|_| ts.submit(asker("a", Priority::High)))
        .collect();
    let b = ts.submit(asker("b", Priority::Normal));
    let c = ts.submit(asker("c", Priority::Low));
    ts.step_until_idle();
    assert_eq!(ts.core().check_invariants(), Ok(()));
    assert_eq!(sent(&ts), [(at(0), a[0]), (at(0), b)]);
    let state = ts.queue_state();
    assert_eq!((state.in_flight, state.held_requests), (2, 3));

    assert_eq!(ts.run_until_quiet(), at(3));
    assert_eq!(
        sent(&ts),
        [
            (at(0), a[0]),
            (at(0), b),
            (at(1), a[1]),
            (at(1), c),
            (at(2), a[2]),
        ]
    );
    assert_eq!(ts.core().check_invariants(), Ok(()));
    assert_trace_continuous(&ts);
}

/// An agent's own share in place of the common one: "batch" may have 2 in flight
/// where every other agent has 1.
#[test]
fn an_agent_of_its_own_share_is_held_to_it() {
    let limits = RequestLimits::new()
        .agent_limit(Kind::Llm, AgentKindLimits::new().max_in_flight(1))
        .agent_limit_for("batch", Kind::Llm, AgentKindLimits::new().max_in_flight(2));
    let mut ts = answering(limits, PolicyChoice::Fifo);
    let batch: Vec<TaskId> = (0..3)
        .map(|_| ts.submit(asker("batch", Priority::Normal)))
        .collect();
    let chat: Vec<TaskId> = (0..2)
        .map(|_| ts.submit(asker("chat", Priority::Normal)))
        .collect();
    ts.run_until_quiet();
    assert_eq!(
        sent(&ts),
        [
            (at(0), batch[0]),
            (at(0), batch[1]),
            (at(0), chat[0]),
            (at(1), batch[2]),
            (at(1), chat[1]),
        ]
    );
    assert_eq!(ts.core().check_invariants(), Ok(()));
}

/// Three agents of three one-question tasks each, made a's first, then b's, then c's
/// (so their requests wait in that order); the LLM takes 2 requests at once, each agent
/// 1 at once and 2 in any 10 s.
///
/// - 0 s: a's first goes; a's others wait apart for a's share; b's first goes (the
///   kind's cap).
/// - 1 s: the answers let a's second and b's second go: each agent's next request
///   was made before c's.
/// - 2 s: a and b have sent 2 in their windows (free at 10 s, when their first sends
///   leave them): their thirds wait apart, and c's first goes while the kind has room
///   for two; c's second waits for c's share.
/// - 3 s: c's second goes; 4 s: c has sent 2 in its window (free at 12 s).
/// - 10 s: a's and b's thirds go as their windows free.
/// - 12 s: c's third.
#[test]
fn three_agents_under_a_kind_cap_and_a_share_with_a_window() {
    let limits = RequestLimits::new()
        .max_in_flight(Kind::Llm, 2)
        .agent_limit(
            Kind::Llm,
            AgentKindLimits::new().max_in_flight(1).window(2, secs(10)),
        );
    let mut ts = answering(limits, PolicyChoice::Fifo);
    let mut ids = [[TaskId::from_raw(0); 3]; 3];
    for (agent, name) in ["a", "b", "c"].iter().enumerate() {
        for id in &mut ids[agent] {
            *id = ts.submit(asker(name, Priority::Normal));
        }
    }
    let [a, b, c] = ids;
    assert_eq!(ts.run_until_quiet(), at(13));
    assert_eq!(
        sent(&ts),
        [
            (at(0), a[0]),
            (at(0), b[0]),
            (at(1), a[1]),
            (at(1), b[1]),
            (at(2), c[0]),
            (at(3), c[1]),
            (at(10), a[2]),
            (at(10), b[2]),
            (at(12), c[2]),
        ]
    );
    assert_eq!(ts.core().check_invariants(), Ok(()));
    assert_trace_continuous(&ts);
    insta::assert_snapshot!(ts.trace());
}
