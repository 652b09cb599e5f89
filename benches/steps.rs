//! Step throughput: spool against tokio, in-process and across a thread.
//!
//! The workload: 10,000 tasks × 100 steps. Every step is a request
//! carrying a small payload (a number), answered by a mock that hands the payload back;
//! the task checks the answer is what it sent. A "step" is one request answered and the
//! task resumed with it, so one run is 1,000,000 steps.
//!
//! - `in_process/spool`: the core `Scheduler` (FIFO, no trace recording) driven by hand,
//!   the mock called by the driver between `poll_request` and `handle_response`.
//! - `in_process/spool_async`: the same workload and driver loop as `in_process/spool`,
//!   each task written as async code (`spool::async_task`) awaiting
//!   `cx.llm(Value::from(n))` per step instead of an explicit `AgentTask` state machine.
//! - `in_process/tokio`: a current-thread tokio runtime, 10k spawned tasks that call the
//!   mock and `yield_now().await` per step.
//! - `in_process/bare`: a hand-written poll loop (a `Vec` of counters, a `VecDeque` run
//!   queue, an outbox) carrying the same JSON `Value`s: the floor for this shape of work.
//! - `in_process/bare_u64`: the same loop carrying a plain `u64`: the loop's own cost.
//! - `cross_thread/spool`: `spool_runtime::Runtime`, one executor thread answering at once.
//! - `cross_thread/tokio`: a current-thread tokio runtime, 10k tasks each sending
//!   `(payload, oneshot::Sender)` per step on a `tokio::sync::mpsc` unbounded channel to a
//!   plain `std::thread` that answers with `blocking_recv`.
//! - `cross_thread/tokio_bounded`: the same on a bounded channel (`send().await`), for
//!   reference; the unbounded one is the baseline (it is the faster of the two).
//!
//! Run with `cargo bench --bench steps`. After criterion's groups the binary times each
//! closure again itself (median of `RUNS` runs, interleaved) and prints one summary line
//! per comparison with the ratio. Under `cargo test --benches` criterion runs each
//! benchmark once and the summary is skipped.

use std::collections::VecDeque;
use std::hint::black_box;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use spool::{
    AgentTask, AsyncTask, Config, Executor, Kind, NewTask, OutboundRequest, Replies, Request,
    Response, Runtime, Scheduler, Step, TaskContext, TaskError, Time, Value,
};
use tokio::sync::{mpsc, oneshot};

/// Tasks per run.
const TASKS: usize = 10_000;
/// Steps (requests answered) per task.
const STEPS: u64 = 100;
/// Steps per run.
const TOTAL_STEPS: u64 = TASKS as u64 * STEPS;
/// What each task's answers add up to: 0 + 1 + … + 99.
const TASK_SUM: u64 = STEPS * (STEPS - 1) / 2;
/// The capacity of the bounded channel in the `tokio_bounded` variant.
const BOUNDED: usize = 1024;
/// Timed runs per closure for the summary lines.
const RUNS: usize = 5;

/// The mock LLM: hands the payload back. Not inlined, and hidden from the optimiser.
#[inline(never)]
fn mock_llm(payload: Value) -> Value {
    black_box(payload)
}

/// The number an answer carries.
fn answer_number(value: &Value) -> u64 {
    value
        .as_u64()
        .expect("the mock answers with the number it was sent")
}

// ---------------------------------------------------------------------------------
// spool tasks and executor
// ---------------------------------------------------------------------------------

/// A task that makes `STEPS` requests one after another, each carrying its step number,
/// and checks every answer against what it sent.
#[derive(Debug, Default)]
struct Counter {
    step: u64,
    sum: u64,
}

impl AgentTask for Counter {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if let Some(answer) = cx.take_answer() {
            match answer.result {
                Ok(value) if value.as_u64() == Some(self.step - 1) => self.sum += self.step - 1,
                other => {
                    return Step::fail(format!("step {}: unexpected answer {other:?}", self.step));
                }
            }
        }
        if self.step < STEPS {
            cx.request(Request::new(Kind::Llm, Value::from(self.step)));
            self.step += 1;
            return Step::Wait;
        }
        Step::done(self.sum)
    }
}

/// The async twin of [`Counter`]: `STEPS` LLM requests awaited one after another, each
/// answer checked against what was sent; finishes with the sum of the answers.
fn async_counter() -> AsyncTask {
    spool::async_task("counter", |cx| async move {
        let mut sum = 0;
        for n in 0..STEPS {
            let answer = cx.llm(Value::from(n)).await?;
            if answer.as_u64() != Some(n) {
                return Err(TaskError::failed(format!(
                    "step {n}: unexpected answer {answer}"
                )));
            }
            sum += n;
        }
        Ok(Value::from(sum))
    })
}

/// Answers every request at once with its own payload (moved, not cloned).
#[derive(Debug)]
struct Echo;

impl Executor for Echo {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        replies.send(Response::ok(
            request.key,
            mock_llm(request.request.payload.into_value()),
        ));
    }
}

// ---------------------------------------------------------------------------------
// in-process
// ---------------------------------------------------------------------------------

/// spool's core scheduler, driven by hand; the driver answers each request at once.
fn spool_in_process() -> u64 {
    drive_in_process(|| NewTask::new(Counter::default()))
}

/// As [`spool_in_process`], with the tasks written as async code.
fn spool_async_in_process() -> u64 {
    drive_in_process(|| NewTask::new(async_counter()))
}

/// Submits `TASKS` tasks made by `make` to a core `Scheduler` and drives it to the end:
/// the one driver loop both in-process spool variants share, so they differ only in
/// how the task is written.
fn drive_in_process(make: impl Fn() -> NewTask) -> u64 {
    let now = Time::ZERO;
    let mut sched = Scheduler::new(Config::new());
    for _ in 0..TASKS {
        sched.submit(now, make()).expect("the table has room");
    }
    // Each poll issues at most one request; answering it makes the task ready again, so
    // the run queue empties only when every task has finished.
    while sched.step(now).is_some() {
        while let Some(out) = sched.poll_request() {
            let _ = sched.handle_response(
                now,
                Response::ok(out.key, mock_llm(out.request.payload.into_value())),
            );
        }
    }
    let stats = sched.stats();
    assert_eq!(
        stats.completed, TASKS as u64,
        "every task completes: {stats:?}"
    );
    assert_eq!(
        stats.answers, TOTAL_STEPS,
        "every step is answered: {stats:?}"
    );
    stats.answers
}

/// tokio's current-thread runtime: each step calls the mock and yields.
fn tokio_in_process(rt: &tokio::runtime::Runtime) -> u64 {
    let total = rt.block_on(async {
        let handles: Vec<_> = (0..TASKS)
            .map(|_| {
                tokio::spawn(async {
                    let mut sum = 0;
                    for n in 0..STEPS {
                        let answer = mock_llm(Value::from(n));
                        assert_eq!(answer_number(&answer), n);
                        sum += n;
                        tokio::task::yield_now().await;
                    }
                    sum
                })
            })
            .collect();
        let mut total = 0;
        for handle in handles {
            total += handle.await.expect("a task panicked");
        }
        total
    });
    assert_eq!(total, TASKS as u64 * TASK_SUM);
    TOTAL_STEPS
}

/// A bare hand-written poll loop of the same shape: no trait objects, no ids, no stats.
fn bare_in_process() -> u64 {
    struct Bare {
        step: u64,
        sum: u64,
        answer: Option<Value>,
    }
    let mut tasks: Vec<Bare> = (0..TASKS)
        .map(|_| Bare {
            step: 0,
            sum: 0,
            answer: None,
        })
        .collect();
    let mut queue: VecDeque<u32> = (0..TASKS as u32).collect();
    let mut outbox: VecDeque<(u32, Value)> = VecDeque::new();
    let mut done = 0;
    let mut answered = 0;
    while let Some(index) = queue.pop_front() {
        let task = &mut tasks[index as usize];
        if let Some(answer) = task.answer.take() {
            assert_eq!(answer_number(&answer), task.step - 1);
            task.sum += task.step - 1;
        }
        if task.step < STEPS {
            outbox.push_back((index, Value::from(task.step)));
            task.step += 1;
        } else {
            assert_eq!(task.sum, TASK_SUM);
            done += 1;
        }
        while let Some((index, payload)) = outbox.pop_front() {
            tasks[index as usize].answer = Some(mock_llm(payload));
            answered += 1;
            queue.push_back(index);
        }
    }
    assert_eq!(done, TASKS);
    assert_eq!(answered, TOTAL_STEPS);
    answered
}

/// The same bare loop with a plain `u64` payload instead of a JSON `Value`: what the loop
/// itself costs when nothing but a machine word travels.
fn bare_u64_in_process() -> u64 {
    #[inline(never)]
    fn mock_u64(payload: u64) -> u64 {
        black_box(payload)
    }
    struct Bare {
        step: u64,
        sum: u64,
        answer: Option<u64>,
    }
    let mut tasks: Vec<Bare> = (0..TASKS)
        .map(|_| Bare {
            step: 0,
            sum: 0,
            answer: None,
        })
        .collect();
    let mut queue: VecDeque<u32> = (0..TASKS as u32).collect();
    let mut outbox: VecDeque<(u32, u64)> = VecDeque::new();
    let mut done = 0;
    let mut answered = 0;
    while let Some(index) = queue.pop_front() {
        let task = &mut tasks[index as usize];
        if let Some(answer) = task.answer.take() {
            assert_eq!(answer, task.step - 1);
            task.sum += answer;
        }
        if task.step < STEPS {
            outbox.push_back((index, task.step));
            task.step += 1;
        } else {
            assert_eq!(task.sum, TASK_SUM);
            done += 1;
        }
        while let Some((index, payload)) = outbox.pop_front() {
            tasks[index as usize].answer = Some(mock_u64(payload));
            answered += 1;
            queue.push_back(index);
        }
    }
    assert_eq!(done, TASKS);
    assert_eq!(answered, TOTAL_STEPS);
    answered
}

// ---------------------------------------------------------------------------------
// cross-thread
// ---------------------------------------------------------------------------------

/// spool's threaded runtime with one executor thread that answers at once.
fn spool_cross_thread() -> u64 {
    let mut runtime = Runtime::builder().executor(Kind::Llm, Echo).build();
    for _ in 0..TASKS {
        runtime
            .submit(NewTask::new(Counter::default()))
            .expect("the table has room");
    }
    let report = runtime.run_until_idle();
    assert_eq!(
        report.stats.completed, TASKS as u64,
        "every task completes: {:?}",
        report.stats
    );
    assert_eq!(
        report.stats.answers, TOTAL_STEPS,
        "every step is answered: {:?}",
        report.stats
    );
    report.stats.answers
}

type Job = (Value, oneshot::Sender<Value>);

/// tokio's current-thread runtime; each step goes to a plain executor thread over a
/// tokio mpsc channel and comes back on a oneshot.
fn tokio_cross_thread(rt: &tokio::runtime::Runtime) -> u64 {
    let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
    let executor = thread::spawn(move || {
        while let Some((payload, reply)) = rx.blocking_recv() {
            let _ = reply.send(mock_llm(payload));
        }
    });
    let total = rt.block_on(async move {
        let handles: Vec<_> = (0..TASKS)
            .map(|_| {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut sum = 0;
                    for n in 0..STEPS {
                        let (reply, answer) = oneshot::channel();
                        tx.send((Value::from(n), reply))
                            .expect("the executor is alive");
                        let answer = answer.await.expect("the executor answers");
                        assert_eq!(answer_number(&answer), n);
                        sum += n;
                    }
                    sum
                })
            })
            .collect();
        drop(tx);
        let mut total = 0;
        for handle in handles {
            total += handle.await.expect("a task panicked");
        }
        total
    });
    executor.join().expect("the executor thread panicked");
    assert_eq!(total, TASKS as u64 * TASK_SUM);
    TOTAL_STEPS
}

/// As [`tokio_cross_thread`], on a bounded channel (`send().await`, capacity
/// `BOUNDED`) instead of an unbounded one.
fn tokio_cross_thread_bounded(rt: &tokio::runtime::Runtime) -> u64 {
    let (tx, mut rx) = mpsc::channel::<Job>(BOUNDED);
    let executor = thread::spawn(move || {
        while let Some((payload, reply)) = rx.blocking_recv() {
            let _ = reply.send(mock_llm(payload));
        }
    });
    let total = rt.block_on(async move {
        let handles: Vec<_> = (0..TASKS)
            .map(|_| {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut sum = 0;
                    for n in 0..STEPS {
                        let (reply, answer) = oneshot::channel();
                        tx.send((Value::from(n), reply))
                            .await
                            .expect("the executor is alive");
                        let answer = answer.await.expect("the executor answers");
                        assert_eq!(answer_number(&answer), n);
                        sum += n;
                    }
                    sum
                })
            })
            .collect();
        drop(tx);
        let mut total = 0;
        for handle in handles {
            total += handle.await.expect("a task panicked");
        }
        total
    });
    executor.join().expect("the executor thread panicked");
    assert_eq!(total, TASKS as u64 * TASK_SUM);
    TOTAL_STEPS
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime")
}

// ---------------------------------------------------------------------------------
// criterion groups
// ---------------------------------------------------------------------------------

fn in_process(c: &mut Criterion) {
    let rt = current_thread();
    let mut group = c.benchmark_group("in_process");
    group.throughput(Throughput::Elements(TOTAL_STEPS));
    group.sampling_mode(SamplingMode::Flat);
    group.bench_function("spool", |b| b.iter(spool_in_process));
    group.bench_function("spool_async", |b| b.iter(spool_async_in_process));
    group.bench_function("tokio", |b| b.iter(|| tokio_in_process(&rt)));
    group.bench_function("bare", |b| b.iter(bare_in_process));
    group.bench_function("bare_u64", |b| b.iter(bare_u64_in_process));
    group.finish();
}

fn cross_thread(c: &mut Criterion) {
    let rt = current_thread();
    let mut group = c.benchmark_group("cross_thread");
    group.throughput(Throughput::Elements(TOTAL_STEPS));
    group.sampling_mode(SamplingMode::Flat);
    group.bench_function("spool", |b| b.iter(spool_cross_thread));
    group.bench_function("tokio", |b| b.iter(|| tokio_cross_thread(&rt)));
    group.bench_function("tokio_bounded", |b| {
        b.iter(|| tokio_cross_thread_bounded(&rt))
    });
    group.finish();
}

// ---------------------------------------------------------------------------------
// summary lines: our own timing, median of RUNS interleaved runs
// ---------------------------------------------------------------------------------

/// Median steps per second of each closure, timed in turn `RUNS` times (interleaved, so
/// that a noisy neighbour hurts all of them alike).
fn medians(runs: &mut [&mut dyn FnMut() -> u64]) -> Vec<f64> {
    let mut rates: Vec<Vec<f64>> = vec![Vec::with_capacity(RUNS); runs.len()];
    for _ in 0..RUNS {
        for (run, rates) in runs.iter_mut().zip(rates.iter_mut()) {
            let started = Instant::now();
            let steps = black_box(run());
            rates.push(steps as f64 / started.elapsed().as_secs_f64());
        }
    }
    rates
        .into_iter()
        .map(|mut r| {
            r.sort_by(f64::total_cmp);
            r[r.len() / 2]
        })
        .collect()
}

fn summary() {
    let rt = current_thread();
    // One warm-up run each.
    spool_in_process();
    tokio_in_process(&rt);
    bare_in_process();
    bare_u64_in_process();
    spool_async_in_process();
    let m = medians(&mut [
        &mut spool_in_process,
        &mut || tokio_in_process(&rt),
        &mut bare_in_process,
        &mut bare_u64_in_process,
        &mut spool_async_in_process,
    ]);
    let (spool, tokio, bare, bare_u64, spool_async) = (m[0], m[1], m[2], m[3], m[4]);
    println!(
        "in-process: spool {:.1} M steps/s, tokio {:.1} M steps/s, ratio {:.2} (target >= 2) \
         [median of {RUNS}]",
        spool / 1e6,
        tokio / 1e6,
        spool / tokio,
    );
    println!(
        "in-process reference: bare loop {:.1} M steps/s with a JSON Value payload \
         (spool at {:.0}% of it), {:.1} M steps/s with a u64 payload [median of {RUNS}]",
        bare / 1e6,
        100.0 * spool / bare,
        bare_u64 / 1e6,
    );
    println!(
        "in-process async: spool async {:.1} M steps/s, explicit {:.1} M steps/s, ratio {:.2} \
         (target: async within 1.5x of explicit, i.e. ratio >= 0.67) [median of {RUNS}]",
        spool_async / 1e6,
        spool / 1e6,
        spool_async / spool,
    );

    spool_cross_thread();
    tokio_cross_thread(&rt);
    tokio_cross_thread_bounded(&rt);
    let m = medians(&mut [
        &mut spool_cross_thread,
        &mut || tokio_cross_thread(&rt),
        &mut || tokio_cross_thread_bounded(&rt),
    ]);
    let (spool, tokio, bounded) = (m[0], m[1], m[2]);
    println!(
        "cross-thread: spool {:.2} M steps/s, tokio {:.2} M steps/s, ratio {:.2} (target >= 5) \
         [median of {RUNS}]",
        spool / 1e6,
        tokio / 1e6,
        spool / tokio,
    );
    println!(
        "cross-thread reference: tokio on a bounded mpsc (capacity {BOUNDED}) {:.2} M steps/s, \
         spool/that {:.2} [median of {RUNS}]",
        bounded / 1e6,
        spool / bounded,
    );
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    in_process(&mut c);
    cross_thread(&mut c);
    c.final_summary();
    // `cargo bench` passes `--bench`; `cargo test --benches` does not (criterion then runs
    // each benchmark once as a test), and the timed summary would only slow tests down.
    // `--profile-time` (for a profiler) runs just the chosen benchmark.
    let args: Vec<String> = std::env::args().collect();
    let skip = ["--test", "--list", "--profile-time"];
    if args.iter().any(|a| a == "--bench") && !args.iter().any(|a| skip.contains(&a.as_str())) {
        summary();
    }
}
