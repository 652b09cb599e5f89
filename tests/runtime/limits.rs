//! Scheduling limits on the threaded runtime: the same rules as under `TestScheduler`,
//! on real executor threads and the wall clock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;
use spool::{
    BackoffConfig, CancelSignal, Config, Executor, Kind, NewTask, OutboundRequest, Replies,
    Request, RequestError, RequestLimits, Response, Runtime, TaskError, TaskLimits, TaskState,
    from_fn,
};

use crate::support::{LIMIT, ask_once, within};

/// Counts the requests it is working on at once, and the most it ever had.
#[derive(Default)]
struct Concurrency {
    now: AtomicUsize,
    peak: AtomicUsize,
}

/// With at most 3 LLM calls in flight, a pool of 8 workers that each take 5 ms per call
/// never sees more than 3 at once, and sees 3 (the cap is reached, not just respected).
#[test]
fn the_llm_in_flight_cap_holds_on_a_pool_of_real_threads() {
    let seen = Arc::new(Concurrency::default());
    let counter = Arc::clone(&seen);
    let mut runtime = Runtime::builder()
        .config(Config::new().requests(RequestLimits::new().max_in_flight(Kind::Llm, 3)))
        .pool(Kind::Llm, 8, move || {
            let seen = Arc::clone(&counter);
            from_fn(move |request: &OutboundRequest| {
                let now = seen.now.fetch_add(1, Ordering::SeqCst) + 1;
                seen.peak.fetch_max(now, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(5));
                seen.now.fetch_sub(1, Ordering::SeqCst);
                Ok(request.request.payload.clone().into_value())
            })
        })
        .build();
    let ids: Vec<_> = (0..40)
        .map(|i| {
            runtime
                .submit(NewTask::new(ask_once("asker", Request::llm(json!(i)))))
                .unwrap()
                .id
        })
        .collect();
    let runtime = within(LIMIT, "run_until_idle", move || {
        runtime.run_until_idle();
        runtime
    });
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            runtime.task_state(*id),
            Some(TaskState::Completed(Ok(json!(i))))
        );
    }
    assert_eq!(seen.peak.load(Ordering::SeqCst), 3);
}

/// A provider that answers the first call 429 with `Retry-After: 100 ms` and the next
/// one normally, recording when each call arrived.
struct OnceOverRate {
    calls: Arc<Mutex<Vec<Instant>>>,
}

impl Executor for OnceOverRate {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        let mut calls = self.calls.lock().unwrap();
        calls.push(Instant::now());
        let result = if calls.len() == 1 {
            Err(RequestError::RateLimited {
                retry_after: Some(Duration::from_millis(100)),
            })
        } else {
            Ok(json!("made it"))
        };
        replies.send(Response::new(request.key, result));
    }
}

/// A 429 backs the LLM off on the wall clock: the same request goes again, with the
/// same key, no sooner than its `Retry-After`, and the task never sees the 429.
#[test]
fn a_429_backs_off_for_its_retry_after_on_the_wall_clock() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let mut backoff = BackoffConfig::default();
    backoff.base = Duration::from_millis(10);
    let mut runtime = Runtime::builder()
        .config(Config::new().requests(RequestLimits::new().backoff(backoff)))
        .executor(
            Kind::Llm,
            OnceOverRate {
                calls: Arc::clone(&calls),
            },
        )
        .build();
    let id = runtime
        .submit(NewTask::new(ask_once("asker", Request::llm(json!("q")))))
        .unwrap()
        .id;
    let runtime = within(LIMIT, "run_until_idle", move || {
        runtime.run_until_idle();
        runtime
    });
    assert_eq!(
        runtime.task_state(id),
        Some(TaskState::Completed(Ok(json!("made it"))))
    );
    let calls = calls.lock().unwrap();
    assert_eq!(calls.len(), 2);
    let gap = calls[1] - calls[0];
    assert!(
        gap >= Duration::from_millis(100),
        "sent again after {gap:?}"
    );
    assert!(gap < Duration::from_secs(5), "sent again after {gap:?}");
    let stats = runtime.scheduler().stats();
    assert_eq!(
        (stats.rate_limited, stats.requests, stats.answers),
        (1, 1, 1)
    );
}

/// Holds every request and records the cancel signals it gets.
struct NeverAnswers {
    cancels: Arc<Mutex<Vec<CancelSignal>>>,
}

impl Executor for NeverAnswers {
    fn execute(&mut self, _request: OutboundRequest, _replies: &mut Replies<'_>) {}

    fn cancel(&mut self, signal: CancelSignal, _replies: &mut Replies<'_>) {
        self.cancels.lock().unwrap().push(signal);
    }
}

/// A task whose deadline passes while its request is with an executor fails with
/// `DeadlineExceeded` on the wall clock, the executor is told to stop, and the slot it
/// held goes to the task queued behind it.
#[test]
fn a_deadline_on_the_wall_clock_cancels_the_request_and_frees_the_slot() {
    let cancels = Arc::new(Mutex::new(Vec::new()));
    let mut runtime = Runtime::builder()
        .config(Config::new().limits(TaskLimits::new().max_running(1)))
        .executor(
            Kind::tool("slow"),
            NeverAnswers {
                cancels: Arc::clone(&cancels),
            },
        )
        .executor(Kind::tool("fast"), from_fn(|_| Ok(json!("quick"))))
        .build();
    let started = Instant::now();
    let slow = runtime
        .submit(
            NewTask::new(ask_once("slow", Request::tool("slow", json!({}))))
                .deadline(Duration::from_millis(50)),
        )
        .unwrap()
        .id;
    let fast = runtime
        .submit(NewTask::new(ask_once(
            "fast",
            Request::tool("fast", json!({})),
        )))
        .unwrap()
        .id;
    let runtime = within(LIMIT, "run_until_idle", move || {
        runtime.run_until_idle();
        runtime
    });
    let wall = started.elapsed();
    assert!(wall >= Duration::from_millis(50), "over after {wall:?}");
    let Some(TaskState::Completed(Err(TaskError::DeadlineExceeded {
        task, while_queued, ..
    }))) = runtime.task_state(slow)
    else {
        panic!("not failed by its deadline: {:?}", runtime.task_state(slow));
    };
    assert_eq!((task, while_queued), (slow, false));
    assert_eq!(
        runtime.task_state(fast),
        Some(TaskState::Completed(Ok(json!("quick"))))
    );
    // The cancel signal reaches the executor's thread on its own time: wait for it
    // (boundedly) rather than read the record the moment the loop is idle.
    let waited = Instant::now();
    while cancels.lock().unwrap().is_empty() && waited.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(2));
    }
    let cancels = cancels.lock().unwrap();
    assert_eq!(cancels.len(), 1);
    assert_eq!((cancels[0].key.task(), cancels[0].key.number()), (slow, 1));
}
