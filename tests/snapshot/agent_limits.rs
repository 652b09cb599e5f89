//! Agents' shares of a request kind (`RequestLimits::agent_limit`) under weighted fair
//! share survive a snapshot: each share's window, its requests waiting apart and when
//! its window frees are in it, so a restored scheduler sends what the original would
//! have, when it would have.

use std::time::Duration;

use serde_json::json;
use spool::{
    AgentKindLimits, Config, Kind, Mock, NewTask, PolicyChoice, RequestLimits, Scheduler, Snapshot,
    TaskId, TaskLimits, TestScheduler, Time,
};

use crate::tasks::{Asker, registry};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn at(n: u64) -> Time {
    Time::from_duration(secs(n))
}

/// Every LLM question answered 1 after 1 s.
fn answering(ts: &mut TestScheduler) {
    ts.mock_with_latency(Kind::Llm, Mock::Fixed(json!(1)), secs(1));
}

/// What a run shows: its trace event by event, the requests sent as `(time, task)`,
/// and its trace hash.
type Run = (Vec<String>, Vec<(Time, TaskId)>, u64);

/// Agents a (weight 2), b and c under fair share, 3 tasks running at once; the LLM
/// takes 2 requests at once, each agent 1 at once and 2 in any 10 s. a's four
/// one-question tasks are submitted first, then b's two and c's two. Run to the end —
/// straight through, or snapshotted at `stop`, encoded, decoded and restored.
fn shared_run(stop: Option<Duration>) -> Run {
    let config = Config::new()
        .record_trace(true)
        .policy(PolicyChoice::FairShare)
        .agent_weight("a", 2)
        .limits(TaskLimits::new().max_running(3))
        .requests(
            RequestLimits::new()
                .max_in_flight(Kind::Llm, 2)
                .agent_limit(
                    Kind::Llm,
                    AgentKindLimits::new().max_in_flight(1).window(2, secs(10)),
                ),
        );
    let mut ts = TestScheduler::with_scheduler(Scheduler::new(config));
    answering(&mut ts);
    for agent in ["a", "a", "a", "a", "b", "b", "c", "c"] {
        ts.submit(NewTask::new(Asker::new(1)).agent(agent.to_owned()));
    }
    let mut events = Vec::new();
    let mut sends = Vec::new();
    if let Some(stop) = stop {
        ts.advance(stop);
        assert_eq!(ts.core().check_invariants(), Ok(()));
        events.extend(ts.trace_events().iter().map(ToString::to_string));
        sends.extend(ts.sent_requests().iter().map(|s| (s.at, s.key.task())));
        let bytes = ts.snapshot().unwrap().encode().unwrap();
        // Agents' shares are what format version 6 added.
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 6);
        let snapshot = Snapshot::decode(&bytes).unwrap();
        let restored = Scheduler::restore(&snapshot, &registry()).unwrap();
        assert_eq!(restored.snapshot().unwrap().encode().unwrap(), bytes);
        assert_eq!(restored.request_limits(), ts.core().request_limits());
        ts = TestScheduler::restore(&snapshot, &registry()).unwrap();
        answering(&mut ts);
    }
    ts.run_until_quiet();
    assert_eq!(ts.core().check_invariants(), Ok(()));
    events.extend(ts.trace_events().iter().map(ToString::to_string));
    sends.extend(ts.sent_requests().iter().map(|s| (s.at, s.key.task())));
    (events, sends, ts.trace_hash())
}

/// Straight through:
///
/// - 0 s: a's first three tasks take the three slots; a's first request goes, its
///   other two wait apart for a's share, and the LLM's second place stays free: no
///   other agent has a task running.
/// - 1 s: a's first answer lets a's second request go; its task's slot goes by fair
///   share to b (a holds 2 slots at weight 2, b and c none; b before c), whose request
///   goes beside a's.
/// - 2 s: a's second answer: a has sent 2 in its window (free at 10 s), so its third
///   waits apart; the slot goes to c (a 1 slot at weight 2, b 1, c 0), whose request
///   goes. b's answer: its slot goes to b's second task (b has none running now), whose
///   request goes (b has 1 in its window).
/// - 3 s: c's and b's answers: the slots go to c's second (c has none running, a
///   has half its weight) and a's fourth; c's request goes, a's fourth waits apart.
/// - 10 s: a's window frees: its third request goes; its fourth waits for the next
///   free place in a's window, at 11 s.
///
/// Restored from a snapshot at 5 s — nothing in flight, a's two requests waiting for
/// its window — the run is the same, event for event, with the same trace hash.
#[test]
fn agents_shares_under_fair_share_survive_a_restore() {
    let straight = shared_run(None);
    let (a, b, c) = (
        [1, 2, 3, 4].map(TaskId::from_raw),
        [5, 6].map(TaskId::from_raw),
        [7, 8].map(TaskId::from_raw),
    );
    assert_eq!(
        straight.1,
        [
            (at(0), a[0]),
            (at(1), a[1]),
            (at(1), b[0]),
            (at(2), c[0]),
            (at(2), b[1]),
            (at(3), c[1]),
            (at(10), a[2]),
            (at(11), a[3]),
        ]
    );
    insta::assert_snapshot!(straight.0.join("\n"));
    assert_eq!(shared_run(Some(secs(5))), straight);
}
