//! Snapshot, restore, snapshot again: the same bytes, for graphs holding every task
//! state (explicit tasks only: async tasks, saved by replay, are not covered here),
//! every kind of wait, children, dependencies, the slot queue, gates, a 429 back-off,
//! deadlines and retention; the same listings after the restore; a restored scheduler
//! that goes on as the original; and the errors of tasks, types and policies a
//! snapshot or a restore cannot handle.

use std::time::Duration;

use serde_json::json;
use spool::{
    CancelReason, ComputedConfig, Config, Dep, Kind, NewTask, Policy, PolicyChoice, Priority,
    QueueEntry, RejectReason, RequestError, RequestLimits, RestoreError, Scheduler, Snapshot,
    SnapshotError, Step, TaskError, TaskId, TaskLimits, TaskRef, TaskRegistry, TaskState,
    TestScheduler, Time, WaitReason, task_fn,
};

use crate::tasks::{Asker, Caller, Failer, Kid, Op, Parent, Scorer, Sleeper, Worker, registry};

pub(crate) fn t(n: u64) -> TaskId {
    TaskId::from_raw(n)
}

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(crate) fn at_ms(n: u64) -> Time {
    Time::from_duration(ms(n))
}

/// The keys of the requests held by the test scheduler for `task`, oldest first.
fn held_for(ts: &TestScheduler, task: TaskId) -> Vec<spool::RequestKey> {
    ts.held_requests()
        .iter()
        .map(|h| h.request.key)
        .filter(|k| k.task() == task)
        .collect()
}

/// Snapshot → encode → decode → restore → snapshot → encode: the bytes are identical,
/// the decoded snapshot equals the one taken, and the restored scheduler shows the same
/// tasks, queue state, details, table, requests in flight, time, counters and trace
/// hash. Returns the restored scheduler.
pub(crate) fn round_trip(original: &mut Scheduler) -> Scheduler {
    let snapshot = original.snapshot().unwrap();
    let bytes = snapshot.encode().unwrap();
    let decoded = Snapshot::decode(&bytes).unwrap();
    assert_eq!(decoded, snapshot, "decode(encode(s)) differs from s");
    let mut restored = Scheduler::restore(&decoded, &registry()).unwrap();
    let again = restored.snapshot().unwrap().encode().unwrap();
    if bytes != again {
        // Where the two differ, in words: the snapshots' debug text around the first
        // difference.
        let before = format!("{snapshot:?}");
        let after = format!("{:?}", restored.snapshot().unwrap());
        let at = before
            .chars()
            .zip(after.chars())
            .position(|(a, b)| a != b)
            .unwrap_or(before.len().min(after.len()));
        let around = |text: &str| -> String {
            text.chars()
                .skip(at.saturating_sub(200))
                .take(400)
                .collect()
        };
        panic!(
            "the restored scheduler snapshots to other bytes ({} vs {} bytes); first difference:\nbefore: ..{}..\nafter:  ..{}..",
            bytes.len(),
            again.len(),
            around(&before),
            around(&after)
        );
    }
    assert_same_view(original, &mut restored);
    restored
}

/// Everything a caller can see of the two schedulers is the same.
pub(crate) fn assert_same_view(a: &mut Scheduler, b: &mut Scheduler) {
    assert_eq!(
        a.tasks().collect::<Vec<_>>(),
        b.tasks().collect::<Vec<_>>(),
        "tasks()"
    );
    assert_eq!(a.queue_state(), b.queue_state(), "queue_state()");
    assert_eq!(a.queue_details(), b.queue_details(), "queue_details()");
    assert_eq!(a.debug_table(), b.debug_table(), "debug_table()");
    assert_eq!(a.in_flight(), b.in_flight(), "in_flight()");
    assert_eq!(a.now(), b.now(), "now()");
    assert_eq!(a.stats(), b.stats(), "stats()");
    assert_eq!(a.trace().hash(), b.trace().hash(), "trace hash");
    assert_eq!(a.live_len(), b.live_len(), "live_len()");
    assert_eq!(a.len(), b.len(), "len()");
    assert_eq!(a.ready_len(), b.ready_len(), "ready_len()");
    assert_eq!(a.in_flight_len(), b.in_flight_len(), "in_flight_len()");
    assert_eq!(a.has_outbound(), b.has_outbound(), "has_outbound()");
    assert_eq!(a.policy_name(), b.policy_name(), "policy_name()");
    assert_eq!(a.poll_timeout(), b.poll_timeout(), "poll_timeout()");
}

/// Builds the graph twice, swaps the second one's core for its restored snapshot (the
/// test scheduler keeps its mocks and held requests, keyed with the old indexes), then
/// drives both alike to the end — answering every held request with 1, oldest first,
/// until none is left — and checks that they end alike: the same task states, the same
/// trace events from the restore on, the same trace hash and counters.
pub(crate) fn continues_alike(build: fn() -> TestScheduler) {
    let mut straight = build();
    let mut swapped = build();
    let bytes = swapped.core().snapshot().unwrap().encode().unwrap();
    let next_seq = swapped.trace_events().last().map_or(1, |e| e.seq + 1);
    *swapped.core_mut() =
        Scheduler::restore(&Snapshot::decode(&bytes).unwrap(), &registry()).unwrap();
    assert!(swapped.trace_events().is_empty());
    for ts in [&mut straight, &mut swapped] {
        loop {
            ts.run_until_quiet();
            let held: Vec<_> = ts.held_requests().iter().map(|h| h.request.key).collect();
            if held.is_empty() {
                break;
            }
            for key in held {
                let _ = ts.answer(key, 1);
            }
        }
    }
    assert_eq!(straight.task_states(), swapped.task_states());
    let after: Vec<String> = straight
        .trace_events()
        .iter()
        .filter(|e| e.seq >= next_seq)
        .map(|e| e.to_string())
        .collect();
    let resumed: Vec<String> = swapped
        .trace_events()
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert_eq!(after, resumed, "trace events after the restore");
    assert_eq!(straight.trace_hash(), swapped.trace_hash());
    assert_eq!(straight.stats(), swapped.stats());
    assert_eq!(straight.now(), swapped.now());
    assert_eq!(straight.core().live_len(), 0, "the graph runs to its end");
}

// ---------------------------------------------------------------------------------
// The graphs.
// ---------------------------------------------------------------------------------

/// Requests in every state: sent and held (one LLM, one confirmation), three fanned
/// out with one answered and not yet taken, one made and still in the outbox, and a
/// task never polled. Tasks 1–5.
pub(crate) fn requests_graph() -> TestScheduler {
    let mut ts = TestScheduler::new();
    ts.hold(Kind::Llm);
    ts.advance(ms(1500));
    let asker = ts.spawn(Asker::new(2));
    let fan = ts.spawn(Worker::new(vec![Op::FanOut(3)]));
    let confirm = ts.spawn(Caller::new("confirm", json!("go on?")));
    ts.step_until_idle();
    let fan_keys = held_for(&ts, fan);
    assert_eq!(fan_keys.len(), 3);
    let _ = ts.answer(fan_keys[1], 7);
    ts.step_until_idle();
    // On the core by hand: a task polled whose request has not been taken from the
    // outbox, and a task never polled.
    let now = ts.now();
    let unsent = ts
        .core_mut()
        .submit(now, NewTask::new(Asker::new(1)))
        .unwrap()
        .id;
    assert_eq!(ts.core_mut().step(now), Some(unsent));
    let ready = ts
        .core_mut()
        .submit(now, NewTask::new(Asker::new(1)))
        .unwrap()
        .id;
    let llm = TaskState::Waiting(WaitReason::Request(Kind::Llm));
    assert_eq!(ts.task_state(asker), llm);
    assert_eq!(
        ts.task_state(fan),
        TaskState::Waiting(WaitReason::Requests(2))
    );
    assert_eq!(
        ts.task_state(confirm),
        TaskState::Waiting(WaitReason::Request(Kind::Confirm))
    );
    assert_eq!(ts.task_state(unsent), llm);
    assert_eq!(ts.task_state(ready), TaskState::Ready);
    assert!(ts.core().has_outbound());
    ts
}

/// Timers: sleepers at different naps, one finished, one whose timer fired and that
/// was not polled yet, and a task racing two requests with `WaitAny` (one answered).
pub(crate) fn timers_graph() -> TestScheduler {
    let mut ts = TestScheduler::new();
    ts.hold(Kind::Llm);
    let long = ts.spawn(Sleeper::new(&[5_000, 1_000]));
    let short = ts.spawn(Sleeper::new(&[300, 300, 300]));
    let done = ts.spawn(Sleeper::new(&[100]));
    let racer = ts.spawn(Worker::new(vec![Op::Race(2), Op::Sleep(10_000)]));
    ts.advance(ms(700));
    let keys = held_for(&ts, racer);
    assert_eq!(keys.len(), 2);
    let _ = ts.answer(keys[0], 3);
    ts.step_until_idle();
    let fired = ts.spawn(Sleeper::new(&[50]));
    ts.step_until_idle();
    // The core moves on to 750 ms by hand: the timer fires, the task is not polled.
    ts.core_mut().handle_timeout(at_ms(750));
    let timer = TaskState::Waiting(WaitReason::Timer);
    assert_eq!(ts.task_state(long), timer);
    assert_eq!(ts.task_state(short), timer);
    assert_eq!(ts.task_state(done), TaskState::Completed(Ok(json!(1))));
    assert_eq!(
        ts.task_state(racer),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );
    assert_eq!(ts.task_state(fired), TaskState::Ready);
    ts
}

/// Children: a parent joined on three of four children (one failed already, its result
/// waiting to be taken), a nested parent, and a `WaitAny` parent that finished with its
/// first child, canceling the other.
pub(crate) fn children_graph() -> TestScheduler {
    let mut ts = TestScheduler::new();
    ts.hold(Kind::Llm);
    let parent = ts.spawn(Parent::new(vec![
        Kid::Ask(1),
        Kid::Sleep(500),
        Kid::Fail(0),
        Kid::Parent(vec![Kid::Ask(1), Kid::Sleep(200)]),
    ]));
    let first = ts.spawn(Parent::first_only(vec![Kid::Ask(1), Kid::Sleep(10_000)]));
    ts.advance(ms(300));
    // The parents' children: 3–6 and 7–8; the nested parent's: 9–10.
    let asker_of_first = t(7);
    let key = held_for(&ts, asker_of_first)[0];
    let _ = ts.answer(key, 11);
    ts.step_until_idle();
    assert_eq!(
        ts.task_state(parent),
        TaskState::Waiting(WaitReason::Children(3))
    );
    assert_eq!(
        ts.task_state(t(5)),
        TaskState::Completed(Err(TaskError::Failed {
            message: "failed on purpose after 0 questions".into()
        }))
    );
    assert_eq!(
        ts.task_state(t(6)),
        TaskState::Waiting(WaitReason::Children(1))
    );
    assert_eq!(ts.task_state(t(10)), TaskState::Completed(Ok(json!(1))));
    assert_eq!(
        ts.task_state(first),
        TaskState::Completed(Ok(json!("task 7 ok: 11")))
    );
    assert_eq!(
        ts.task_state(t(8)),
        TaskState::Canceled(CancelReason::ParentEnded(first))
    );
    ts
}

/// Dependencies: a chain blocked on a request, a task two dependencies deep with one
/// met, a task submitted under a parent, a batch depending on itself in order, a
/// submission rejected for a failed dependency, and a chain canceled by one.
pub(crate) fn dependencies_graph() -> TestScheduler {
    let mut ts = TestScheduler::new();
    ts.hold(Kind::Llm);
    let a = ts.spawn(Asker::new(1));
    let b = ts.submit(NewTask::new(Asker::new(1)).after(a));
    let c = ts.submit(NewTask::new(Sleeper::new(&[10])).after(a).after(b));
    let d = ts.submit(NewTask::new(Asker::new(1)).parent(a).agent("child-agent"));
    let e0 = ts.spawn(Asker::new(1));
    let e = ts.submit(NewTask::new(Sleeper::new(&[10])).after(e0).after(a));
    let f = ts.spawn(Failer::new(0));
    let h = ts.spawn(Failer::new(1));
    ts.step_until_idle();
    let g = ts.admit(NewTask::new(Asker::new(1)).after(f));
    let i = ts.submit(NewTask::new(Asker::new(1)).after(h));
    let j = ts.submit(NewTask::new(Sleeper::new(&[1])).after(i));
    let batch = ts
        .submit_all(vec![
            NewTask::new(Asker::new(1)).priority(Priority::High),
            NewTask::new(Asker::new(1)).after(Dep::Batch(0)),
            NewTask::new(Sleeper::new(&[5])).after(Dep::Batch(1)),
        ])
        .unwrap();
    ts.step_until_idle();
    let _ = ts.answer(held_for(&ts, e0)[0], 1);
    let _ = ts.answer(held_for(&ts, h)[0], 1);
    ts.step_until_idle();
    assert_eq!(
        g.admission,
        spool::Admission::Rejected {
            reason: RejectReason::DependencyFailed { dependency: f }
        }
    );
    let deps = |n| TaskState::Waiting(WaitReason::Dependencies(n));
    assert_eq!(ts.task_state(b), deps(1));
    assert_eq!(ts.task_state(c), deps(2));
    assert_eq!(ts.task_state(d), deps(1));
    assert_eq!(ts.task_state(e), deps(1));
    assert_eq!(
        ts.task_state(i),
        TaskState::Canceled(CancelReason::DependencyFailed(h))
    );
    assert_eq!(
        ts.task_state(j),
        TaskState::Canceled(CancelReason::DependencyFailed(i))
    );
    assert_eq!(
        ts.task_state(batch[0].id),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );
    assert_eq!(ts.task_state(batch[1].id), deps(1));
    assert_eq!(ts.task_state(batch[2].id), deps(1));
    ts
}

/// The slot queue: three running, one parked by its agent's cap, one by its type's
/// cap, one queued behind a full start window, ahead of it by priority one that got a
/// slot.
pub(crate) fn slots_graph() -> TestScheduler {
    let core = Scheduler::new(
        Config::new()
            .record_trace(true)
            .policy(PolicyChoice::Priority)
            .limits(
                TaskLimits::new()
                    .max_running(3)
                    .max_running_per_agent(1)
                    .max_running_per_type("sleeper", 1)
                    .start_window(4, Duration::from_secs(60)),
            ),
    );
    let mut ts = TestScheduler::with_scheduler(core);
    ts.hold(Kind::Llm);
    let a1 = ts.submit(NewTask::new(Asker::new(1)).agent("a"));
    let b1 = ts.submit(NewTask::new(Sleeper::new(&[10_000])).agent("b"));
    let a2 = ts.submit(NewTask::new(Asker::new(1)).agent("a"));
    let c1 = ts.submit(NewTask::new(Sleeper::new(&[1_000])).agent("c"));
    let d1 = ts.submit(NewTask::new(Asker::new(1)).agent("d"));
    let e1 = ts.submit(
        NewTask::new(Asker::new(1))
            .agent("e")
            .priority(Priority::High),
    );
    let e2 = ts.submit(
        NewTask::new(Asker::new(1))
            .agent("e")
            .priority(Priority::Low),
    );
    ts.advance(ms(100));
    let _ = ts.answer(held_for(&ts, d1)[0], 1);
    ts.advance(ms(100));
    let _ = ts.answer(held_for(&ts, e1)[0], 1);
    ts.advance(ms(100));
    let slot = TaskState::Waiting(WaitReason::Slot);
    assert_eq!(
        ts.task_state(a1),
        TaskState::Waiting(WaitReason::Request(Kind::Llm))
    );
    assert_eq!(ts.task_state(b1), TaskState::Waiting(WaitReason::Timer));
    assert_eq!(ts.task_state(a2), slot);
    assert_eq!(ts.task_state(c1), slot);
    assert_eq!(ts.task_state(d1), TaskState::Completed(Ok(json!(1))));
    assert_eq!(ts.task_state(e1), TaskState::Completed(Ok(json!(1))));
    assert_eq!(ts.task_state(e2), slot);
    let state = ts.queue_state();
    assert_eq!((state.running, state.queued), (2, 3));
    assert!(state.rate_limited, "the start window holds e2 back");
    ts
}

/// Request gates: LLM requests held by an in-flight cap (and, behind it, a token
/// window), tool calls held by a request window, one parked by its agent's in-flight
/// cap.
pub(crate) fn gates_graph() -> TestScheduler {
    let core = Scheduler::new(
        Config::new().record_trace(true).requests(
            RequestLimits::new()
                .max_in_flight(Kind::Llm, 2)
                .tokens(Kind::Llm, 100, Duration::from_secs(60))
                .window(Kind::tool("search"), 2, Duration::from_secs(10))
                .per_agent_in_flight(2),
        ),
    );
    let mut ts = TestScheduler::with_scheduler(core);
    ts.hold(Kind::Llm);
    ts.hold(Kind::tool("search"));
    let search = |n: u32| NewTask::new(Caller::new("tool:search", json!(n)));
    let q1 = ts.submit(NewTask::new(Asker::new(1)).agent("q"));
    let q2 = ts.submit(NewTask::new(Asker::new(1)).agent("q"));
    let q3 = ts.submit(search(3).agent("q"));
    let big = ts.submit(
        NewTask::new(Caller::new("llm", json!("big")).tokens(90))
            .agent("r")
            .priority(Priority::High),
    );
    let s1 = ts.submit(search(1).agent("r"));
    let s2 = ts.submit(search(2).agent("s"));
    let s4 = ts.submit(search(4).agent("s"));
    let small = ts.submit(NewTask::new(Asker::new(1)).agent("s"));
    ts.step_until_idle();
    // q3 found its agent at its cap (parked); `big` waits for the in-flight cap, `small`
    // behind it; s4 waits for the search window.
    let sent: Vec<TaskId> = ts.sent_requests().iter().map(|s| s.key.task()).collect();
    assert_eq!(sent, vec![q1, q2, s1, s2]);
    for held in [q3, big, s4, small] {
        assert!(!ts.task_state(held).is_terminal(), "task {held} is live");
    }
    let state = ts.queue_state();
    assert_eq!(state.held_requests, 4);
    assert!(state.rate_limited, "the search window holds s4 back");
    ts
}

/// A 429 back-off in force: the first LLM request was rate limited with a
/// `Retry-After` of 3 s, the kind is backed off, and all three requests wait at the gate.
pub(crate) fn backoff_graph() -> TestScheduler {
    let core = Scheduler::new(
        Config::new()
            .record_trace(true)
            .requests(RequestLimits::new().max_in_flight(Kind::Llm, 4)),
    );
    let mut ts = TestScheduler::with_scheduler(core);
    let mut calls = 0;
    ts.mock_llm_fn(move |_| {
        calls += 1;
        if calls == 1 {
            Err(RequestError::RateLimited {
                retry_after: Some(Duration::from_secs(3)),
            })
        } else {
            Ok(json!(1))
        }
    });
    for _ in 0..3 {
        ts.spawn(Asker::new(1));
    }
    ts.advance(ms(1000));
    let state = ts.queue_state();
    assert_eq!(state.backoff_until, Some(at_ms(3000)));
    assert_eq!(state.held_requests, 3);
    assert_eq!(state.stats.rate_limited, 1);
    ts
}

/// Deadlines: one missed while queued, one missed while running, the rest standing.
pub(crate) fn deadlines_graph() -> TestScheduler {
    let core = Scheduler::new(
        Config::new()
            .record_trace(true)
            .limits(TaskLimits::new().max_running(2)),
    );
    let mut ts = TestScheduler::with_scheduler(core);
    ts.hold(Kind::Llm);
    let running_missed = ts.submit(NewTask::new(Asker::new(1)).deadline(ms(1000)));
    let running = ts.submit(NewTask::new(Asker::new(1)).deadline(ms(9000)));
    let queued_missed = ts.submit(NewTask::new(Sleeper::new(&[10])).deadline(ms(500)));
    let queued = ts.submit(NewTask::new(Sleeper::new(&[10_000])).deadline_at(at_ms(20_000)));
    let queued_no_deadline = ts.submit(NewTask::new(Asker::new(1)));
    ts.advance(ms(600));
    ts.advance(ms(600));
    assert_eq!(
        ts.task_state(queued_missed),
        TaskState::Completed(Err(TaskError::DeadlineExceeded {
            task: queued_missed,
            deadline: at_ms(500),
            while_queued: true
        }))
    );
    assert_eq!(
        ts.task_state(running_missed),
        TaskState::Completed(Err(TaskError::DeadlineExceeded {
            task: running_missed,
            deadline: at_ms(1000),
            while_queued: false
        }))
    );
    let llm = TaskState::Waiting(WaitReason::Request(Kind::Llm));
    assert_eq!(ts.task_state(running), llm);
    assert_eq!(ts.task_state(queued), TaskState::Waiting(WaitReason::Timer));
    assert_eq!(
        ts.task_state(queued_no_deadline),
        TaskState::Waiting(WaitReason::Slot)
    );
    ts
}

/// Retention and the ways to end: completed, failed, panicked, no executor, canceled,
/// rejected as a duplicate; the first ones evicted (holes in the table), the later ones
/// kept until their time-to-live runs out; a live task holding a key; a confirmation
/// held from a reused index.
pub(crate) fn retention_graph() -> TestScheduler {
    let core = Scheduler::new(
        Config::new()
            .record_trace(true)
            .retention(Duration::from_secs(10)),
    );
    let mut ts = TestScheduler::with_scheduler(core);
    ts.mock_llm([1, 2, 3, 4, 5, 6]);
    let ended = |ts: &mut TestScheduler| {
        vec![
            ts.spawn(Asker::new(1)),
            ts.spawn(Failer::new(1)),
            ts.spawn(Failer::panicking()),
            ts.spawn(Caller::new("tool:missing", json!({}))),
            ts.spawn(Caller::new("confirm", json!("sure?"))),
        ]
    };
    let early = ended(&mut ts);
    ts.step_until_idle();
    ts.cancel(early[4]).unwrap();
    let keeper = ts.submit(NewTask::new(Sleeper::new(&[60_000])).key("the-key"));
    ts.advance(Duration::from_secs(6));
    let late = ended(&mut ts);
    let duplicate = ts.admit(NewTask::new(Asker::new(1)).key("the-key"));
    ts.step_until_idle();
    ts.cancel(late[4]).unwrap();
    ts.advance(Duration::from_secs(6));
    // A request made after the evictions, from an index the table reused: its key's index
    // is not the one a restore gives the task.
    let asking = ts.spawn(Caller::new("confirm", json!("still there?")));
    ts.step_until_idle();
    assert_eq!(
        ts.task_state(asking),
        TaskState::Waiting(WaitReason::Request(Kind::Confirm))
    );
    for id in &early {
        assert_eq!(ts.core().task_state(*id), None, "task {id} evicted");
    }
    // The script's third answer: the first two went to the early asker and failer.
    assert_eq!(ts.task_state(late[0]), TaskState::Completed(Ok(json!(3))));
    assert_eq!(
        ts.task_state(late[1]),
        TaskState::Completed(Err(TaskError::Failed {
            message: "failed on purpose after 1 questions".into()
        }))
    );
    assert!(matches!(
        ts.task_state(late[2]),
        TaskState::Completed(Err(TaskError::Panicked { .. }))
    ));
    assert_eq!(
        ts.task_state(late[3]),
        TaskState::Completed(Err(TaskError::NoExecutor {
            task: late[3],
            kind: Kind::tool("missing")
        }))
    );
    assert_eq!(
        ts.task_state(late[4]),
        TaskState::Canceled(CancelReason::Requested)
    );
    assert_eq!(
        ts.task_state(duplicate.id),
        TaskState::Completed(Err(TaskError::Rejected {
            task: duplicate.id,
            reason: RejectReason::Duplicate {
                key: "the-key".into(),
                existing: keeper
            }
        }))
    );
    assert_eq!(ts.task_state(keeper), TaskState::Waiting(WaitReason::Timer));
    assert_eq!(ts.stats().evicted, 5);
    ts
}

/// A bit of everything under `policy`: slots per run and per agent, an LLM gate,
/// retention, agent weights, sleepers, parents with children, dependencies, deadlines,
/// failures, a held confirmation; driven for a while, then stopped mid-flight.
pub(crate) fn mixed_graph(policy: PolicyChoice) -> TestScheduler {
    let core = Scheduler::new(
        Config::new()
            .record_trace(true)
            .policy(policy)
            .limits(TaskLimits::new().max_running(4).max_running_per_agent(2))
            .requests(RequestLimits::new().max_in_flight(Kind::Llm, 2))
            .retention(Duration::from_secs(20))
            .agent_weight("heavy", 3),
    );
    let mut ts = TestScheduler::with_scheduler(core);
    ts.mock_with_latency(
        Kind::Llm,
        spool::Mock::Fixed(json!(2)),
        Duration::from_millis(700),
    );
    let agents = ["heavy", "light", "other"];
    let priorities = [Priority::Low, Priority::Normal, Priority::High];
    let mut ids = Vec::new();
    for n in 0..18u64 {
        let agent = agents[n as usize % 3];
        let priority = priorities[(n as usize / 3) % 3];
        let task = match n % 6 {
            0 => NewTask::new(Asker::new(2)),
            1 => NewTask::new(Sleeper::new(&[400, 900])),
            2 => NewTask::new(Parent::new(vec![Kid::Ask(1), Kid::Sleep(300)])),
            3 => NewTask::new(Failer::new(1)),
            4 => NewTask::new(Worker::new(vec![
                Op::FanOut(2),
                Op::Yield,
                Op::Sleep(250),
                Op::Llm(5),
            ])),
            _ => NewTask::new(Caller::new("confirm", json!(n))),
        };
        let mut task = task.agent(agent).priority(priority);
        if n % 4 == 3 {
            task = task.after(ids[n as usize - 2]);
        }
        if n % 5 == 4 {
            task = task.deadline(Duration::from_secs(2 + n));
        }
        ids.push(ts.submit(task));
    }
    ts.advance(ms(2600));
    ts
}

// ---------------------------------------------------------------------------------
// Round trips, one per graph.
// ---------------------------------------------------------------------------------

/// Snapshot → encode → decode → restore → snapshot → encode gives identical bytes.
#[test]
fn snapshot_restore_snapshot_gives_identical_bytes() {
    let mut ts = TestScheduler::new();
    ts.hold(Kind::Llm);
    for n in [1, 2, 3, 2, 1] {
        ts.submit(NewTask::new(Asker::new(n)).agent(format!("a{n}")));
    }
    ts.step_until_idle();
    let key = ts.held_requests()[0].request.key;
    let _ = ts.answer(key, 5);
    ts.step_until_idle();
    let _ = round_trip(ts.core_mut());
}

/// An empty scheduler round-trips, and so does one that only ever had ended tasks.
#[test]
fn an_empty_scheduler_round_trips() {
    let mut s = Scheduler::new(Config::new());
    let _ = round_trip(&mut s);
    let mut ts = TestScheduler::new();
    ts.spawn(Failer::new(0));
    ts.step_until_idle();
    let _ = round_trip(ts.core_mut());
}

/// Requests sent and held, fanned out with one answer waiting, still in the outbox,
/// and a task not polled yet: the same bytes after a round trip,
/// and the restored scheduler goes on as the original does.
#[test]
fn requests_in_every_state_round_trip() {
    let mut ts = requests_graph();
    let _ = round_trip(ts.core_mut());
    continues_alike(requests_graph);
}

/// Timers pending, fired and not polled, and a `WaitAny` race: the same bytes,
/// and the restored scheduler goes on as the original does.
#[test]
fn timers_round_trip() {
    let mut ts = timers_graph();
    let _ = round_trip(ts.core_mut());
    continues_alike(timers_graph);
}

/// Parents, children, a child's result waiting to be taken, a canceled child: the
/// same bytes.
#[test]
fn children_round_trip() {
    let mut ts = children_graph();
    let _ = round_trip(ts.core_mut());
    continues_alike(children_graph);
}

/// Dependency chains, partly met, canceled, rejected, within a batch: the same bytes,
/// and the restored scheduler goes on as the original does.
#[test]
fn dependencies_round_trip() {
    let mut ts = dependencies_graph();
    let _ = round_trip(ts.core_mut());
    continues_alike(dependencies_graph);
}

/// Tasks queued for a slot, parked by per-agent and per-type caps, held back by the
/// start window: the same bytes,
/// and the restored scheduler goes on as the original does.
#[test]
fn the_slot_queue_round_trips() {
    let mut ts = slots_graph();
    let _ = round_trip(ts.core_mut());
    continues_alike(slots_graph);
}

/// Requests held at gates by in-flight caps, a token window, a request window, and one
/// parked by its agent's cap: the same bytes,
/// and the restored scheduler goes on as the original does.
#[test]
fn request_gates_round_trip() {
    let mut ts = gates_graph();
    let _ = round_trip(ts.core_mut());
    continues_alike(gates_graph);
}

/// A 429 back-off in force, with its request to be sent again: the same bytes,
/// and the restored scheduler goes on as the original does.
#[test]
fn a_backoff_in_force_round_trips() {
    let mut ts = backoff_graph();
    let _ = round_trip(ts.core_mut());
    continues_alike(backoff_graph);
}

/// Deadlines standing and missed: the same bytes,
/// and the restored scheduler goes on as the original does.
#[test]
fn deadlines_round_trip() {
    let mut ts = deadlines_graph();
    let _ = round_trip(ts.core_mut());
    continues_alike(deadlines_graph);
}

/// Ended tasks of every kind, some evicted (holes in the table), some retained: the
/// same bytes.
#[test]
fn retention_and_every_ending_round_trip() {
    let mut ts = retention_graph();
    let _ = round_trip(ts.core_mut());
    continues_alike(retention_graph);
}

/// The mixed graph under FIFO: the same bytes,
/// and the restored scheduler goes on as the original does.
#[test]
fn a_mixed_graph_round_trips_under_fifo() {
    let mut ts = mixed_graph(PolicyChoice::Fifo);
    let _ = round_trip(ts.core_mut());
    continues_alike(|| mixed_graph(PolicyChoice::Fifo));
}

/// The mixed graph under priority levels: the same bytes,
/// and the restored scheduler goes on as the original does.
#[test]
fn a_mixed_graph_round_trips_under_priority() {
    let mut ts = mixed_graph(PolicyChoice::Priority);
    let _ = round_trip(ts.core_mut());
    continues_alike(|| mixed_graph(PolicyChoice::Priority));
}

/// The mixed graph under computed priority (with a base for `asker`): the same bytes,
/// and the restored scheduler goes on as the original does.
#[test]
fn a_mixed_graph_round_trips_under_computed_priority() {
    let computed = || {
        mixed_graph(PolicyChoice::Computed(
            ComputedConfig::default().base("asker", 70),
        ))
    };
    let _ = round_trip(computed().core_mut());
    continues_alike(computed);
}

/// The mixed graph under weighted fair share: the same bytes,
/// and the restored scheduler goes on as the original does.
#[test]
fn a_mixed_graph_round_trips_under_fair_share() {
    let mut ts = mixed_graph(PolicyChoice::FairShare);
    let _ = round_trip(ts.core_mut());
    continues_alike(|| mixed_graph(PolicyChoice::FairShare));
}

/// A snapshot's rows (what `spool inspect` prints) for the mixed graph under priority
/// levels, checked by hand: each row names the task, agent, type, level and submission
/// time the scheduler lists, and a live task's state as `TaskState` shows it
/// (`Waiting(1 dependency)`, `Waiting(1 child)`); an ended one's as `Completed(ok)`,
/// `Completed(error: ..)` or `Canceled(..)`.
#[test]
fn the_rows_of_a_mixed_snapshot() {
    let ts = mixed_graph(PolicyChoice::Priority);
    let snapshot = ts.core().snapshot().unwrap();
    let rows = snapshot.rows();
    assert_eq!(rows.len(), ts.core().len());
    assert_eq!(snapshot.now(), ts.now());
    assert_eq!(snapshot.stats(), ts.stats());
    for (row, info) in rows.iter().zip(ts.core().tasks()) {
        assert_eq!(
            (row.id, row.type_name.as_str(), row.agent.as_str()),
            (info.id, &*info.type_name, info.agent.as_str())
        );
        assert_eq!(
            (row.priority, row.created_at),
            (info.priority, info.created_at)
        );
        assert_eq!(row.age, snapshot.now() - info.created_at);
        if !info.state.is_terminal() {
            assert_eq!(
                row.state,
                info.state.to_string(),
                "task {}'s row shows its state otherwise than TaskState",
                row.id
            );
        }
    }
    let mut text = format!(
        "{:>3} {:<6} {:<8} {:<8} {:>8} {:>5} {}\n",
        "ID", "AGENT", "TYPE", "PRIORITY", "CREATED", "AGE", "STATE"
    );
    for r in &rows {
        text.push_str(&format!(
            "{:>3} {:<6} {:<8} {:<8} {:>8} {:>5} {}\n",
            r.id.to_string(),
            r.agent,
            r.type_name,
            r.priority.to_string(),
            r.created_at.to_string(),
            format!("{:?}", r.age),
            r.state
        ));
    }
    insta::assert_snapshot!(text);
}

/// A float with all its digits — in a request's payload, in an answer not taken yet,
/// in a task's result, in a task's saved fields — comes back from a restore as the same
/// number: the same bytes, and the restored task sees exactly what the original would
/// have.
#[test]
fn floats_round_trip_exactly() {
    // serde_json's default parser reads this text back one ulp off.
    let x = 249.431_522_282_743_34_f64;
    let mut ts = TestScheduler::new();
    ts.hold(Kind::Llm);
    ts.hold(Kind::tool("measure"));
    let scorer = ts.spawn(Scorer {
        score: x,
        asked: false,
    });
    let in_payload = ts.spawn(Caller::new("tool:measure", json!({"x": x})));
    let fan = ts.spawn(Worker::new(vec![Op::FanOut(2)]));
    ts.step_until_idle();
    let key = held_for(&ts, fan)[0];
    let _ = ts.answer(key, json!(x));
    let answered = ts.spawn(Caller::new("llm", json!("how much?")));
    ts.step_until_idle();
    let key = held_for(&ts, answered)[0];
    let _ = ts.answer(key, json!({"score": x}));
    ts.step_until_idle();
    assert_eq!(
        ts.task_state(answered),
        TaskState::Completed(Ok(json!({"score": x})))
    );
    let mut restored = round_trip(ts.core_mut());
    assert_eq!(
        restored.task_state(answered),
        Some(TaskState::Completed(Ok(json!({"score": x}))))
    );
    let payload = restored
        .in_flight()
        .into_iter()
        .find(|r| r.key.task() == in_payload)
        .map(|r| r.request.payload.value().clone());
    assert_eq!(payload, Some(json!({"x": x})));
    // The saved float, back in the restored scorer's fields: answered 0, it finishes
    // with the float itself.
    let key = restored
        .in_flight()
        .into_iter()
        .find(|r| r.key.task() == scorer)
        .map(|r| r.key)
        .unwrap();
    let now = restored.now();
    let _ = restored.handle_response(now, spool::Response::ok(key, json!(0.0)));
    while restored.step(now).is_some() {}
    assert_eq!(
        restored.task_state(scorer),
        Some(TaskState::Completed(Ok(json!(x))))
    );
    let _ = restored.resend_in_flight();
    let mut sent = Vec::new();
    while let Some(out) = restored.poll_request() {
        sent.push((out.key.task(), out.request.payload.value().clone()));
    }
    assert!(sent.contains(&(in_payload, json!({"x": x}))));
    continues_alike(|| {
        let mut ts = TestScheduler::new();
        ts.hold(Kind::Llm);
        let fan = ts.spawn(Worker::new(vec![Op::FanOut(2)]));
        ts.step_until_idle();
        let key = held_for(&ts, fan)[0];
        let _ = ts.answer(key, json!(249.431_522_282_743_34_f64));
        ts
    });
}

/// A request of a custom kind whose name has a space (which `Kind::custom` accepts):
/// the snapshot that holds it decodes, and round-trips to the same bytes.
#[test]
fn a_custom_kind_with_a_space_round_trips() {
    let kind = Kind::custom("web search");
    let mut ts = TestScheduler::new();
    ts.hold(kind.clone());
    let caller = ts.spawn(Caller::new("web search", json!("rust snapshots")));
    ts.step_until_idle();
    assert_eq!(
        ts.task_state(caller),
        TaskState::Waiting(WaitReason::Request(kind))
    );
    let _ = round_trip(ts.core_mut());
}

/// A task whose dependent ended (canceled) and was then evicted by retention, while
/// the task itself still waits: the same bytes after a round trip.
#[test]
fn a_task_whose_dependent_was_evicted_round_trips() {
    let build = || {
        let mut ts = TestScheduler::with_scheduler(Scheduler::new(
            Config::new()
                .record_trace(true)
                .retention(Duration::from_secs(1)),
        ));
        ts.hold(Kind::Llm);
        let a = ts.spawn(Asker::new(1));
        let b = ts.submit(NewTask::new(Asker::new(1)).after(a));
        ts.step_until_idle();
        ts.cancel(b).unwrap();
        ts.advance(Duration::from_secs(2));
        assert_eq!(ts.core().task_state(b), None, "evicted");
        assert_eq!(
            ts.task_state(a),
            TaskState::Waiting(WaitReason::Request(Kind::Llm))
        );
        ts
    };
    let _ = round_trip(build().core_mut());
    continues_alike(build);
}

// ---------------------------------------------------------------------------------
// What cannot be snapshotted or restored.
// ---------------------------------------------------------------------------------

/// A live `task_fn` closure cannot be saved: `snapshot()` fails with exactly which
/// task, its type and why.
#[test]
fn a_live_closure_task_makes_the_snapshot_fail() {
    let mut ts = TestScheduler::new();
    ts.hold(Kind::Llm);
    ts.spawn(Asker::new(1));
    let mut asked = false;
    let closure = ts.spawn(task_fn("closure", move |cx| {
        if !asked {
            asked = true;
            cx.llm(json!("?"));
            return Step::Wait;
        }
        Step::done(1)
    }));
    ts.step_until_idle();
    assert_eq!(
        ts.core().snapshot(),
        Err(SnapshotError::Unsaveable {
            task: closure,
            type_name: "closure".into(),
            reason: "`closure` does not implement AgentTask::save".into(),
        })
    );
    // Once it ended, only its result is kept, and the snapshot goes through.
    let key = held_for(&ts, closure)[0];
    let _ = ts.answer(key, 1);
    ts.step_until_idle();
    assert_eq!(ts.task_state(closure), TaskState::Completed(Ok(json!(1))));
    let _ = round_trip(ts.core_mut());
}

/// A live task whose type the registry does not know: the restore fails with
/// `UnknownType` naming the first such task; ended tasks of unknown types need nothing.
#[test]
fn an_unknown_type_makes_the_restore_fail() {
    let mut ts = TestScheduler::new();
    ts.hold(Kind::Llm);
    let done = ts.spawn(Sleeper::new(&[]));
    ts.step_until_idle();
    ts.spawn(Asker::new(1));
    let sleeping = ts.spawn(Sleeper::new(&[100]));
    ts.spawn(Sleeper::new(&[100]));
    ts.step_until_idle();
    assert_eq!(ts.task_state(done), TaskState::Completed(Ok(json!(0))));
    let bytes = ts.core().snapshot().unwrap().encode().unwrap();
    let snapshot = Snapshot::decode(&bytes).unwrap();
    let only_askers = TaskRegistry::new().with_serde::<Asker>("asker");
    assert_eq!(
        Scheduler::restore(&snapshot, &only_askers).err(),
        Some(RestoreError::UnknownType {
            task: sleeping,
            type_name: "sleeper".into(),
        })
    );
}

/// A body its type's decoder refuses: `BadBody` with the decoder's message.
#[test]
fn a_body_the_decoder_refuses_makes_the_restore_fail() {
    let mut ts = TestScheduler::new();
    ts.hold(Kind::Llm);
    let asker = ts.spawn(Asker::new(1));
    ts.step_until_idle();
    let snapshot = ts.core().snapshot().unwrap();
    let refusing = TaskRegistry::new().with("asker", |_| {
        Err(spool::StateError::Decode("not today".to_owned()))
    });
    assert_eq!(
        Scheduler::restore(&snapshot, &refusing).err(),
        Some(RestoreError::BadBody {
            task: asker,
            type_name: "asker".into(),
            reason: "its saved state does not decode: not today".into(),
        })
    );
    // A body saved by another type under the same name: postcard's own message.
    let wrong = TaskRegistry::new().with_serde::<Parent>("asker");
    assert!(matches!(
        Scheduler::restore(&snapshot, &wrong),
        Err(RestoreError::BadBody { task, .. }) if task == asker
    ));
}

/// A FIFO of its own that can list its queue, under the name `mine`.
#[derive(Debug, Default)]
struct ListingFifo {
    queue: std::collections::VecDeque<(u64, TaskRef)>,
}

impl Policy for ListingFifo {
    fn push(&mut self, entry: &QueueEntry) {
        self.queue.push_back((entry.seq, entry.task));
    }
    fn pop(&mut self, _now: Time) -> Option<TaskRef> {
        self.queue.pop_front().map(|(_, task)| task)
    }
    fn len(&self) -> usize {
        self.queue.len()
    }
    fn name(&self) -> &'static str {
        "mine"
    }
    fn queued(&self) -> Option<Vec<(u64, TaskRef)>> {
        Some(self.queue.iter().copied().collect())
    }
}

/// The same FIFO, but it cannot list its queue.
#[derive(Debug, Default)]
struct SecretFifo(ListingFifo);

impl Policy for SecretFifo {
    fn push(&mut self, entry: &QueueEntry) {
        self.0.push(entry);
    }
    fn pop(&mut self, now: Time) -> Option<TaskRef> {
        self.0.pop(now)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn name(&self) -> &'static str {
        "secret"
    }
}

/// Custom policies: one that lists its queue round-trips through the registry; without
/// it in the registry the restore fails with `UnknownPolicy`; one that cannot list its
/// queue makes the snapshot fail with `SnapshotError::Policy`.
#[test]
fn custom_policies_round_trip_through_the_registry_or_fail_exactly() {
    let graph = |policy: PolicyChoice| {
        let mut ts = TestScheduler::with_scheduler(Scheduler::new(
            Config::new()
                .record_trace(true)
                .policy(policy)
                .limits(TaskLimits::new().max_running(1)),
        ));
        ts.hold(Kind::Llm);
        for n in 1..=3 {
            ts.spawn(Asker::new(n));
        }
        ts.step_until_idle();
        ts
    };
    let mut ts = graph(PolicyChoice::custom(|| Box::new(ListingFifo::default())));
    let snapshot = ts.core().snapshot().unwrap();
    assert_eq!(
        Scheduler::restore(&snapshot, &registry()).err(),
        Some(RestoreError::UnknownPolicy("mine".into()))
    );
    let with_policy = registry().with_policy("mine", || Box::new(ListingFifo::default()));
    let bytes = snapshot.encode().unwrap();
    let mut restored =
        Scheduler::restore(&Snapshot::decode(&bytes).unwrap(), &with_policy).unwrap();
    assert_eq!(restored.snapshot().unwrap().encode().unwrap(), bytes);
    assert_same_view(ts.core_mut(), &mut restored);

    let ts = graph(PolicyChoice::custom(|| Box::new(SecretFifo::default())));
    assert_eq!(
        ts.core().snapshot().err(),
        Some(SnapshotError::Policy("secret".into()))
    );
}

// ---------------------------------------------------------------------------------
// A restored scheduler is a fork.
// ---------------------------------------------------------------------------------

/// One snapshot restored twice gives two independent schedulers: answered differently
/// (one with 1s, one canceling a task and answering 100s), each ends its own way, and
/// neither touches the other or the snapshot, which restores to the same bytes after.
#[test]
fn a_restored_scheduler_is_a_fork() {
    let mut ts = mixed_graph(PolicyChoice::FairShare);
    let snapshot = ts.core().snapshot().unwrap();
    let bytes = snapshot.encode().unwrap();
    let fork = |answer: i64, cancel: bool| {
        let mut core = Scheduler::restore(&Snapshot::decode(&bytes).unwrap(), &registry()).unwrap();
        // A new process: requests that were with executors go again.
        let resent = core.resend_in_flight();
        let mut fork = TestScheduler::with_scheduler(core);
        fork.mock_llm_fn(move |_| Ok(json!(answer)));
        if cancel {
            fork.cancel(t(1)).unwrap();
        }
        // Confirmations are held: answer them as they come.
        loop {
            fork.run_until_quiet();
            let held: Vec<_> = fork.held_requests().iter().map(|h| h.request.key).collect();
            if held.is_empty() {
                break;
            }
            for key in held {
                let _ = fork.answer(key, answer);
            }
        }
        (resent, fork)
    };
    let (resent_a, a) = fork(1, false);
    let (resent_b, b) = fork(100, true);
    assert!(resent_a > 0);
    assert_eq!(resent_a, resent_b);
    let states_a = a.task_states();
    let states_b = b.task_states();
    assert_ne!(states_a, states_b);
    assert!(a.core().live_len() == 0 && b.core().live_len() == 0);
    assert_eq!(
        states_b.iter().find(|(id, _)| *id == t(1)).map(|(_, s)| s),
        Some(&TaskState::Canceled(CancelReason::Requested))
    );
    assert!(
        states_a
            .iter()
            .any(|(_, s)| *s == TaskState::Completed(Ok(json!(2 + 1))))
    );
    assert_ne!(a.trace_hash(), b.trace_hash());
    // The original and the snapshot are untouched.
    assert_eq!(ts.core().snapshot().unwrap(), snapshot);
    let again = Scheduler::restore(&snapshot, &registry()).unwrap();
    assert_eq!(again.snapshot().unwrap().encode().unwrap(), bytes);
    let _ = round_trip(ts.core_mut());
}

/// After a restore, `resend_in_flight` puts every request that was with an executor
/// back in the outbox with the same keys (by task id, then number), and counts them;
/// a second call finds none.
#[test]
fn resend_in_flight_sends_the_same_keys_again() {
    let mut ts = requests_graph();
    let in_flight: Vec<(TaskId, u32)> = ts
        .core()
        .in_flight()
        .iter()
        .map(|r| (r.key.task(), r.key.number()))
        .collect();
    let unsent = (t(4), 1);
    let sent: Vec<(TaskId, u32)> = in_flight.iter().copied().filter(|k| *k != unsent).collect();
    assert_eq!(sent, vec![(t(1), 1), (t(2), 1), (t(2), 3), (t(3), 1)]);
    let mut restored = round_trip(ts.core_mut());
    assert_eq!(restored.resend_in_flight(), 4);
    assert_eq!(restored.resend_in_flight(), 0);
    let mut out = Vec::new();
    while let Some(request) = restored.poll_request() {
        out.push((request.key.task(), request.key.number()));
    }
    // The request never taken comes first: it was in the outbox already.
    let mut expected = vec![unsent];
    expected.extend(sent);
    assert_eq!(out, expected);
}
