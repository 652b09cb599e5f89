//! The scheduler records its own journal: a `TestScheduler` run replays bit for bit, a
//! runtime's journal replays in `TestScheduler`, and a `TestScheduler` journal recovers
//! a runtime — whichever driver recorded it, the same inputs give the same trace.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;
use spool::{
    Config, Journal, JournalEntry, Kind, MemoryJournal, NewTask, RequestError, RequestLimits,
    Runtime, Scheduler, TaskError, TaskLimits, TaskState, TestScheduler, from_fn,
};

use crate::tasks::{Asker, Caller, Op, Worker, registry};

/// Gated and limited: three tasks at a time, two LLM calls in flight and four per
/// `window` (a second in virtual time; less on the real clock, to keep the test short).
fn limited(window: Duration) -> Config {
    let requests = RequestLimits::new()
        .max_in_flight(Kind::Llm, 2)
        .window(Kind::Llm, 4, window);
    Config::new()
        .limits(TaskLimits::new().max_running(3))
        .requests(requests)
}

const SECOND: Duration = Duration::from_secs(1);

/// Workers that ask the LLM, fan out, race, sleep, spawn children, call tools; askers;
/// and a caller of a kind nobody serves.
fn workload() -> Vec<NewTask> {
    let mut tasks = Vec::new();
    for i in 0..6u32 {
        tasks.push(NewTask::new(Worker::new(vec![
            Op::Llm(10 + i),
            Op::Tool("search".to_owned()),
            Op::FanOut(3),
            Op::Sleep(200 + 50 * u64::from(i)),
            Op::Spawn(vec![vec![Op::Llm(5)], vec![Op::Tool("search".to_owned())]]),
            Op::Race(2),
            Op::Yield,
            Op::Llm(7),
        ])));
        tasks.push(NewTask::new(Asker::new(i % 3 + 1)));
    }
    tasks.push(NewTask::new(Caller::new("nowhere", json!("anyone?"))));
    tasks
}

/// An LLM whose answers only the journal knows (a counter), and whose fourth call is
/// refused with a 429.
fn llm_answer(counter: &AtomicU64) -> Result<serde_json::Value, RequestError> {
    let n = counter.fetch_add(1, Ordering::SeqCst);
    if n == 3 {
        return Err(RequestError::RateLimited {
            retry_after: Some(Duration::from_millis(400)),
        });
    }
    Ok(json!(n))
}

/// A `TestScheduler` run with mocks (one with latency, one held for the test), limits,
/// a 429, an unroutable request and a cancellation, recorded from the start.
fn test_scheduler_run() -> TestScheduler {
    let mut scheduler = TestScheduler::with_config(limited(SECOND));
    scheduler.record_journal().unwrap();
    let counter = AtomicU64::new(0);
    scheduler.mock_llm_fn(move |_| llm_answer(&counter));
    scheduler.mock_with_latency(
        Kind::tool("search"),
        spool::Mock::Fixed(json!(3)),
        Duration::from_millis(300),
    );
    let approver = scheduler.submit(NewTask::new(Caller::new("confirm", json!("go?"))));
    for task in workload() {
        scheduler.submit(task);
    }
    let doomed = scheduler.submit(NewTask::new(Worker::new(vec![Op::Sleep(10_000)])));
    scheduler.advance(Duration::from_millis(700));
    scheduler.cancel(doomed).unwrap();
    let held = scheduler.pending_confirmations()[0].request.key;
    assert_eq!(held.task(), approver);
    assert_eq!(
        scheduler.answer(held, json!(40)),
        spool::Delivery::Delivered
    );
    scheduler.run_until_quiet();
    scheduler
}

fn count(journal: &Journal, what: fn(&JournalEntry) -> bool) -> usize {
    journal.entries.iter().filter(|e| what(e)).count()
}

/// Recorded in `TestScheduler` and replayed there: the same events, hash, states and
/// counters, bit for bit, with the journal round-tripped through its encoding.
#[test]
fn a_test_scheduler_run_replays_bit_for_bit() {
    let mut scheduler = test_scheduler_run();
    assert!(scheduler.stats().rate_limited >= 1, "the 429 backed off");
    let journal = scheduler.journal().expect("recording");
    for (what, n) in [
        (
            "submissions",
            count(&journal, |e| matches!(e, JournalEntry::Submit { .. })),
        ),
        (
            "answers",
            count(&journal, |e| matches!(e, JournalEntry::Answered { .. })),
        ),
        (
            "unroutable",
            count(&journal, |e| matches!(e, JournalEntry::Unroutable { .. })),
        ),
        (
            "cancels",
            count(&journal, |e| matches!(e, JournalEntry::Cancel { .. })),
        ),
        (
            "steps",
            count(&journal, |e| matches!(e, JournalEntry::Steps { .. })),
        ),
    ] {
        assert!(n > 0, "no {what} in the journal");
    }
    // Taking requests out is not an input: no entry of the driver's order.
    assert_eq!(
        count(&journal, |e| matches!(
            e,
            JournalEntry::Route | JournalEntry::Taken { .. }
        )),
        0
    );
    let journal = Journal::decode(&journal.encode().unwrap()).unwrap();

    let replay = TestScheduler::replay(&journal, &registry()).unwrap();
    assert_eq!(replay.divergence, None);
    assert_eq!(replay.scheduler.trace().events(), scheduler.trace_events());
    assert_eq!(replay.trace_hash, scheduler.trace_hash());
    assert_eq!(replay.scheduler.stats(), scheduler.stats());
    let states: Vec<_> = replay.scheduler.tasks().map(|t| (t.id, t.state)).collect();
    assert_eq!(states, scheduler.task_states());
}

/// The journal of a small run, entry by entry: each input once, steps counted, nothing
/// of when the driver took requests out, nothing the driver wrote by hand.
#[test]
fn the_core_journals_each_input_once_in_order() {
    let mut scheduler = TestScheduler::new();
    scheduler.record_journal().unwrap();
    scheduler.mock_with_latency(
        Kind::Llm,
        spool::Mock::Fixed(json!(2)),
        Duration::from_secs(1),
    );
    let id = scheduler.submit(NewTask::new(Asker::new(1)));
    scheduler.run_until_quiet();
    assert_eq!(scheduler.task_state(id), TaskState::Completed(Ok(json!(2))));
    let journal = scheduler.journal().unwrap();
    let inputs: Vec<String> = journal
        .entries
        .iter()
        .filter(|e| !matches!(e, JournalEntry::Event(_)))
        .map(|e| match e {
            JournalEntry::Submit { at, id, .. } => format!("submit {id} at {at}"),
            JournalEntry::Answered { at, key, asked, .. } => {
                format!("answer {key} at {at} (asked {})", asked.is_some())
            }
            JournalEntry::Ended { task, preview, .. } => format!("ended {task}: {preview}"),
            other => format!("{other:?}"),
        })
        .collect();
    insta::assert_snapshot!(inputs.join("\n"), @r"
    submit 1 at 0.000s
    Timeout { at: 0.000s }
    Steps { at: 0.000s, count: 1 }
    Timeout { at: 0.000s }
    Timeout { at: 1.000s }
    Timeout { at: 1.000s }
    answer 1:1 at 1.000s (asked true)
    Steps { at: 1.000s, count: 1 }
    ended 1: 2
    Timeout { at: 1.000s }
    ");
}

/// A run on the threaded runtime with real executors, limits, a 429, an unroutable
/// request and an answer from the embedder, journaled to memory with its trace.
fn runtime_run() -> (Runtime, Journal) {
    let sink = MemoryJournal::new();
    let counter = Arc::new(AtomicU64::new(0));
    let llm = from_fn(move |_| llm_answer(&counter));
    let mut runtime = Runtime::builder()
        .config(limited(Duration::from_millis(40)))
        .executor(Kind::Llm, llm)
        .executor(Kind::tool("search"), from_fn(|_| Ok(json!(3))))
        .journal(sink.clone())
        .journal_trace(true)
        .flush_at(4)
        .build();
    let approver = runtime
        .submit(NewTask::new(Caller::new("confirm", json!("go?"))))
        .unwrap()
        .id;
    for task in workload() {
        runtime.submit(task).unwrap();
    }
    runtime.run_until_idle();
    let held = runtime.pending_confirmations()[0].key;
    assert_eq!(held.task(), approver);
    runtime.handle().answer(held, json!(40)).unwrap();
    runtime.run_until_idle();
    assert_eq!(runtime.journal_error(), None);
    let journal = sink.journal().unwrap();
    (runtime, journal)
}

/// Recorded by the runtime, replayed in `TestScheduler`: the trace it recorded, event
/// for event, and the same hash and results.
#[test]
fn a_runtime_journal_replays_in_the_test_scheduler() {
    let (runtime, journal) = runtime_run();
    assert!(runtime.scheduler().stats().rate_limited >= 1);
    // Taking requests out is not an input: no entry of the driver's order.
    assert_eq!(
        count(&journal, |e| matches!(
            e,
            JournalEntry::Route | JournalEntry::Taken { .. }
        )),
        0
    );
    let replay = TestScheduler::replay(&journal, &registry()).unwrap();
    assert_eq!(replay.divergence, None);
    let recorded = count(&journal, |e| matches!(e, JournalEntry::Event(_)));
    assert_eq!(replay.events as usize, recorded);
    assert_eq!(replay.trace_hash, runtime.scheduler().trace().hash());
    assert_eq!(replay.scheduler.stats(), runtime.scheduler().stats());
    let replayed: Vec<_> = replay.scheduler.tasks().map(|t| (t.id, t.state)).collect();
    let ran: Vec<_> = runtime
        .scheduler()
        .tasks()
        .map(|t| (t.id, t.state))
        .collect();
    assert_eq!(replayed, ran);
}

/// Recorded by `TestScheduler`, recovered by the runtime: it stands where the test
/// left it (same trace hash, same states), and goes on — the request the test held is
/// sent again to the runtime's executor, with the same key, and its task finishes.
#[test]
fn a_test_scheduler_journal_recovers_a_runtime() {
    let mut scheduler = TestScheduler::with_config(limited(SECOND));
    scheduler.record_journal().unwrap();
    let counter = AtomicU64::new(0);
    scheduler.mock_llm_fn(move |_| llm_answer(&counter));
    scheduler.mock(Kind::tool("search"), spool::Mock::Fixed(json!(3)));
    let approver = scheduler.submit(NewTask::new(Caller::new("confirm", json!("go?"))));
    for task in workload() {
        scheduler.submit(task);
    }
    scheduler.run_until_quiet();
    assert_eq!(scheduler.held_requests().len(), 1);
    let journal = scheduler.journal().unwrap();

    // The core alone replays it identically...
    let replay = Scheduler::replay(&journal, &registry()).unwrap();
    assert_eq!(replay.divergence, None);
    assert_eq!(replay.trace_hash, scheduler.trace_hash());

    // ... and so does the runtime's recovery path.
    let mut runtime = Runtime::builder()
        .executor(Kind::Llm, from_fn(|_| Ok(json!(1))))
        .executor(Kind::tool("search"), from_fn(|_| Ok(json!(3))))
        .recover(&journal, &registry())
        .unwrap()
        .build();
    assert_eq!(runtime.scheduler().trace().hash(), scheduler.trace_hash());
    assert_eq!(runtime.scheduler().stats(), scheduler.stats());
    for (id, state) in scheduler.task_states() {
        assert_eq!(runtime.task_state(id), Some(state), "task {id}");
    }
    // The question the test left unanswered is asked again, with the same key.
    runtime.run_until_idle();
    let held = scheduler.held_requests()[0].request.key;
    let asked: Vec<_> = runtime
        .pending_confirmations()
        .iter()
        .map(|c| c.key)
        .collect();
    assert_eq!(asked, [held]);
    runtime.handle().answer(held, json!("yes")).unwrap();
    runtime.run_until_idle();
    assert_eq!(
        runtime.task_state(approver),
        Some(TaskState::Completed(Ok(json!("yes"))))
    );
}

/// Deadlines set and results forgotten through the core are inputs too: the replay
/// fires the same deadline and forgets the same task.
#[test]
fn deadlines_and_forgotten_results_replay() {
    let mut scheduler = TestScheduler::new();
    scheduler.record_journal().unwrap();
    scheduler.hold(Kind::Llm);
    let late = scheduler.submit(NewTask::new(Asker::new(1)));
    let kept = scheduler.submit(NewTask::new(Asker::new(1)));
    scheduler.step_until_idle();
    let deadline = scheduler.now() + Duration::from_secs(2);
    scheduler.core_mut().set_deadline(late, deadline).unwrap();
    scheduler.advance(Duration::from_secs(3));
    let held = scheduler.held_requests()[0].request.key;
    assert_eq!(held.task(), kept);
    let _ = scheduler.answer(held, json!(9));
    scheduler.step_until_idle();
    assert!(matches!(
        scheduler.core_mut().forget(late),
        Some(TaskState::Completed(Err(
            TaskError::DeadlineExceeded { .. }
        )))
    ));
    let journal = scheduler.journal().unwrap();
    assert_eq!(
        count(&journal, |e| matches!(e, JournalEntry::SetDeadline { .. })),
        1
    );
    assert_eq!(
        count(&journal, |e| matches!(e, JournalEntry::Forget { .. })),
        1
    );

    let replay = TestScheduler::replay(&journal, &registry()).unwrap();
    assert_eq!(replay.divergence, None);
    assert_eq!(replay.trace_hash, scheduler.trace_hash());
    assert_eq!(replay.scheduler.task_state(late), None, "forgotten");
    assert_eq!(
        replay.scheduler.task_state(kept),
        Some(TaskState::Completed(Ok(json!(9))))
    );
    assert_eq!(replay.scheduler.stats(), scheduler.stats());
}
