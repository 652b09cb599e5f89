use super::*;
use crate::TaskId;

fn key(n: u32) -> RequestKey {
    RequestKey::new(TaskId(1), n, 0)
}

/// What the gates make of an answer to each of three requests sent together: an
/// answer is delivered, a 429 backs the kind off and holds its request, and a 429
/// asking for longer than `max_wait` (5 minutes) gives up with the error to deliver.
#[test]
fn an_answer_is_delivered_a_429_backs_off_and_one_past_max_wait_gives_up() {
    let mut scheduler = Scheduler::new(crate::Config::new());
    for _ in 0..3 {
        let asker = crate::task_fn("asker", |cx| {
            cx.request(crate::Request::new(Kind::Llm, crate::Value::Null));
            crate::Step::Wait
        });
        let submitted = scheduler.submit(Time::ZERO, crate::NewTask::new(asker));
        assert!(submitted.is_ok(), "{submitted:?}");
    }
    while scheduler.step(Time::ZERO).is_some() {}
    let keys: Vec<RequestKey> = std::iter::from_fn(|| scheduler.poll_request())
        .map(|out| out.key)
        .collect();
    assert_eq!(keys.len(), 3);
    let second = Duration::from_secs(1);
    let day = Duration::from_secs(86_400);
    let refused = |key, retry_after| {
        Response::err(
            key,
            RequestError::RateLimited {
                retry_after: Some(retry_after),
            },
        )
    };
    let answers = [
        Response::ok(keys[0], crate::Value::Null),
        refused(keys[1], second),
        refused(keys[2], day),
    ];
    let gated: Vec<Gated> = answers
        .iter()
        .map(|answer| scheduler.gate_answer(answer.key, answer))
        .collect();
    let given_up = RequestError::RateLimitExceeded {
        retry_after: Some(day),
        waited: Duration::ZERO,
        bound: crate::BackoffBound::MaxWait(Duration::from_secs(300)),
    };
    assert_eq!(
        gated,
        [Gated::Deliver, Gated::BackedOff, Gated::GaveUp(given_up)]
    );
    assert_eq!(scheduler.requests.held_len(), 1);
}

#[test]
fn gating_is_on_only_with_a_limit() {
    assert!(!RequestGates::new(RequestLimits::new()).gating);
    let capped = RequestLimits::new().per_agent_in_flight(2);
    assert!(RequestGates::new(capped).gating);
    let kind = RequestLimits::new().max_in_flight(Kind::Llm, 1);
    let gates = RequestGates::new(kind);
    assert!(gates.gating);
    assert_eq!(gates.gates.keys().collect::<Vec<_>>(), [&Kind::Llm]);
}

#[test]
fn held_requests_go_by_priority_then_by_the_order_held() {
    let mut gates = RequestGates::new(RequestLimits::new());
    gates.hold(&Kind::Llm, Priority::Normal, key(1));
    gates.hold(&Kind::Llm, Priority::High, key(2));
    gates.hold(&Kind::Llm, Priority::Normal, key(3));
    assert_eq!(gates.held_len(), 3);
    let gate = gates
        .gates
        .get_mut(&Kind::Llm)
        .expect("holding made the gate");
    let order: Vec<u32> = std::iter::from_fn(|| gate.held.pop().map(|h| h.2.number())).collect();
    assert_eq!(order, [2, 1, 3]);
}

#[test]
fn counts_are_taken_and_given_back_per_gate_and_agent() {
    let limits = RequestLimits::new().max_in_flight(Kind::Llm, 4);
    let mut gates = RequestGates::new(limits);
    let agent = AgentId(3);
    gates.count(&Kind::Llm, agent);
    gates.count(&Kind::Llm, agent);
    gates.count(&Kind::Tool("ls".into()), AgentId::DEFAULT);
    assert_eq!(gates.agent_in_flight(agent), 2);
    assert_eq!(gates.agent_in_flight(AgentId::DEFAULT), 1);
    assert_eq!(gates.agent_in_flight(AgentId(9)), 0);
    assert_eq!(gates.gates[&Kind::Llm].in_flight, 2);
    gates.release(&Kind::Llm, agent);
    assert_eq!(gates.agent_in_flight(agent), 1);
    assert_eq!(gates.gates[&Kind::Llm].in_flight, 1);
}

#[test]
fn an_agent_of_its_own_cap_is_held_to_it_and_the_others_to_the_common_one() {
    let limits = RequestLimits::new().per_agent_in_flight(4).agent("a", 1);
    let mut gates = RequestGates::new(limits);
    assert!(gates.gating);
    gates.name_agent(AgentId(1), "a");
    gates.name_agent(AgentId(2), "b");
    assert_eq!(gates.agent_cap(AgentId(1)), Some(1));
    assert_eq!(gates.agent_cap(AgentId(2)), Some(4));
    assert_eq!(gates.agent_cap(AgentId::DEFAULT), Some(4));
    let only_a = RequestGates::new(RequestLimits::new().agent("a", 2));
    assert!(only_a.gating);
    assert_eq!(only_a.agent_cap(AgentId(2)), None);
}

#[test]
fn a_settled_request_is_not_retried_and_nothing_waits_with_no_request_held() {
    let mut gates = RequestGates::new(RequestLimits::new());
    gates.retries.insert(key(1), Retried::default());
    gates.settled(&key(2));
    assert_eq!(gates.retries.len(), 1);
    gates.settled(&key(1));
    assert!(gates.retries.is_empty());
    assert_eq!(gates.free_at(Time::ZERO, &Slab::new()), None);
}

/// Two tasks ask the LLM with no limits; the first is answered 429, which turns the
/// gates on. The second request was out before that: whether the driver took it
/// before the 429 or after, it goes as it is — not held at the new gate — and the
/// trace is the same. (A journal's replay, which takes nothing, follows a run whose
/// driver took it.)
#[test]
fn a_request_out_before_a_429_turns_gates_on_goes_whenever_it_is_taken() {
    let run = |take_before: bool| {
        let mut scheduler = Scheduler::new(crate::Config::new().record_trace(true));
        for _ in 0..2 {
            let mut asked = false;
            let asker = crate::task_fn("asker", move |cx| {
                if asked {
                    return crate::Step::done(1);
                }
                asked = true;
                cx.request(crate::Request::new(Kind::Llm, crate::Value::Null));
                crate::Step::Wait
            });
            let submitted = scheduler.submit(Time::ZERO, crate::NewTask::new(asker));
            assert!(submitted.is_ok(), "{submitted:?}");
        }
        while scheduler.step(Time::ZERO).is_some() {}
        let first = scheduler.poll_request().map(|out| out.key);
        let second = if take_before {
            scheduler.poll_request().map(|out| out.key)
        } else {
            None
        };
        let refused = Response::err(
            first.unwrap_or(key(1)),
            RequestError::RateLimited {
                retry_after: Some(Duration::from_secs(1)),
            },
        );
        let at = Time::from_duration(Duration::from_millis(10));
        assert_eq!(
            scheduler.handle_response(at, refused),
            crate::Delivery::BackedOff
        );
        let second = second.or_else(|| scheduler.poll_request().map(|out| out.key));
        assert_eq!(second, Some(RequestKey::new(TaskId(2), 1, 1)));
        assert_eq!(scheduler.poll_request(), None);
        let trace = crate::trace::Trace::render(scheduler.trace().events());
        assert_eq!(scheduler.check_invariants(), Ok(()));
        trace
    };
    assert_eq!(run(false), run(true));
}
