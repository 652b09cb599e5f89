//! Snapshot and restore of 100,000 waiting tasks: each within 1 second, bytes per task
//! reported.
//!
//! The workload: a core `Scheduler` (`Scheduler::new(Config::new())`: FIFO, no limits,
//! no trace recording) holding 100,000 live explicit tasks of a small serde type,
//! [`Waiter`] (three integers; `save` is `SavedTask::serde(self)`, registered with
//! `TaskRegistry::with_serde`). Every task has been stepped once and made one LLM
//! request carrying its number; the requests were taken with `poll_request` (sent), so
//! every task waits on one request in flight.
//!
//! - `save/spool`: `scheduler.snapshot()?.encode()?` — the measured bar (≤ 1 s);
//!   `save/spool_snapshot` and `save/spool_encode` are its two halves, for reference.
//! - `restore/spool`: `Snapshot::decode(&bytes)?` then `Scheduler::restore(&snap,
//!   &registry)?` — the measured bar (≤ 1 s); `restore/spool_decode` and
//!   `restore/spool_restore` are its two halves. Dropping the restored scheduler is not
//!   timed.
//! - `save/serde_json`, the baseline for scale: tokio has no snapshot, so this is what an
//!   embedder of tokio would write by hand — the same 100,000 task states (task id, the
//!   task's fields, the in-flight request's kind and payload) kept alongside the
//!   futures as plain records, `serde_json::to_vec` of the `Vec` of them. Building the
//!   records is not timed (an embedder keeps them up to date as it goes).
//! - `restore/serde_json_tokio`, its counterpart: `serde_json::from_slice` of those
//!   records, then a current-thread tokio runtime with one spawned task per record
//!   (owning the task's fields, awaiting a `oneshot::Receiver` that stands for the
//!   request; the senders kept), run until every task has been polled once, i.e. is
//!   waiting again. Dropping the runtime is not timed.
//!
//! Before timing, the fixture is checked once: the restored scheduler has every task
//! live with its request in flight, snapshots to the same bytes, resends 100,000
//! requests, and finishes every task with the right answer when they are answered.
//!
//! Run with `cargo bench --bench snapshot`. After criterion's groups the binary times
//! each closure again itself (median of `RUNS` runs, interleaved) and prints one summary
//! line per comparison with the ratio, and the encoded size. Without `--bench` (`cargo
//! test --benches`) it runs with 1,000 tasks, criterion runs each benchmark once and the
//! summary is skipped.

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use serde::{Deserialize, Serialize};
use spool::{
    AgentTask, Config, NewTask, Response, SavedTask, Scheduler, Snapshot, Step, TaskContext,
    TaskRegistry, Time, Value,
};
use tokio::sync::oneshot;

/// Tasks in the measurement.
const TASKS: usize = 100_000;
/// Tasks under `cargo test --benches`.
const QUICK_TASKS: usize = 1_000;
/// Timed runs per closure for the summary lines.
const RUNS: usize = 5;
/// The bar for each of snapshot and restore.
const BAR: Duration = Duration::from_secs(1);
/// The task type's stable name.
const TYPE_NAME: &str = "waiter";

// ---------------------------------------------------------------------------------
// the task
// ---------------------------------------------------------------------------------

/// A task that asks once (an LLM request carrying its number) and finishes with the
/// answer added to its sum.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Waiter {
    /// Its number, sent as the request's payload.
    n: u64,
    /// Requests made.
    step: u32,
    /// The answers so far, added up.
    sum: u64,
}

impl AgentTask for Waiter {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if let Some(answer) = cx.take_answer() {
            match answer.result {
                Ok(value) if value.as_u64() == Some(self.n) => self.sum += self.n,
                other => return Step::fail(format!("task {}: unexpected {other:?}", self.n)),
            }
            return Step::done(self.sum);
        }
        cx.llm(Value::from(self.n));
        self.step += 1;
        Step::Wait
    }

    fn type_name(&self) -> &'static str {
        TYPE_NAME
    }

    fn save(&self) -> Result<SavedTask, spool::StateError> {
        SavedTask::serde(self)
    }
}

fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<Waiter>(TYPE_NAME)
}

/// What an embedder of tokio would keep per task to write it out by hand: its id, its
/// fields, and the request it waits on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct HandRecord {
    id: u64,
    task: Waiter,
    request_kind: String,
    request_payload: Value,
}

// ---------------------------------------------------------------------------------
// the fixture
// ---------------------------------------------------------------------------------

/// Everything the timed closures start from.
struct Fixture {
    tasks: usize,
    /// `tasks` tasks, each waiting on one sent request.
    sched: Scheduler,
    registry: TaskRegistry,
    /// `sched.snapshot()`.
    snap: Snapshot,
    /// Its encoding.
    bytes: Vec<u8>,
    /// The same task states as hand-written records (the baseline's input).
    records: Vec<HandRecord>,
    /// `serde_json::to_vec(&records)`.
    json: Vec<u8>,
}

/// `tasks` waiting tasks in a core scheduler, and the baseline's records of them.
fn waiting(tasks: usize) -> (Scheduler, Vec<HandRecord>) {
    let now = Time::ZERO;
    let mut sched = Scheduler::new(Config::new());
    let mut records = Vec::with_capacity(tasks);
    for n in 0..tasks as u64 {
        let task = Waiter { n, step: 0, sum: 0 };
        let id = sched
            .submit(now, NewTask::new(task))
            .expect("the table has room")
            .id;
        records.push(HandRecord {
            id: id.get(),
            task: Waiter { n, step: 1, sum: 0 },
            request_kind: "llm".to_owned(),
            request_payload: Value::from(n),
        });
    }
    while sched.step(now).is_some() {}
    // Sent: an executor holds them now.
    let mut sent = 0;
    while let Some(out) = sched.poll_request() {
        drop(out);
        sent += 1;
    }
    assert_eq!(sent, tasks);
    assert_eq!(sched.live_len(), tasks);
    assert_eq!(sched.in_flight_len(), tasks, "one request in flight each");
    assert_eq!(sched.ready_len(), 0);
    (sched, records)
}

fn fixture(tasks: usize) -> Fixture {
    let (sched, records) = waiting(tasks);
    let snap = sched.snapshot().expect("every task can be saved");
    let bytes = snap.encode().expect("the snapshot encodes");
    let json = serde_json::to_vec(&records).expect("the records encode");
    let fixture = Fixture {
        tasks,
        sched,
        registry: registry(),
        snap,
        bytes,
        records,
        json,
    };
    check(&fixture);
    fixture
}

/// The restored scheduler is the original: same bytes, every request in flight; sent
/// again and answered, every task finishes with the right sum.
fn check(f: &Fixture) {
    let snap = Snapshot::decode(&f.bytes).expect("the bytes decode");
    assert!(snap == f.snap, "decoding gives the snapshot back");
    let mut restored = Scheduler::restore(&snap, &f.registry).expect("the snapshot restores");
    assert_eq!(restored.live_len(), f.tasks);
    assert_eq!(restored.in_flight_len(), f.tasks);
    let again = restored
        .snapshot()
        .and_then(|s| s.encode())
        .expect("the restored scheduler snapshots");
    assert!(
        again == f.bytes,
        "a restored scheduler snapshots to the same bytes"
    );
    assert_eq!(restored.resend_in_flight(), f.tasks);
    let now = snap.now();
    while let Some(out) = restored.poll_request() {
        let payload = out.request.payload.into_value();
        let _ = restored.handle_response(now, Response::ok(out.key, payload));
    }
    while restored.step(now).is_some() {}
    let stats = restored.stats();
    assert_eq!(stats.completed, f.tasks as u64, "{stats:?}");
    assert_eq!(restored.live_len(), 0);

    let back: Vec<HandRecord> = serde_json::from_slice(&f.json).expect("the JSON decodes");
    assert!(back == f.records);
}

// ---------------------------------------------------------------------------------
// the timed work
// ---------------------------------------------------------------------------------

/// (a) snapshot + encode.
fn spool_save(f: &Fixture) -> Vec<u8> {
    f.sched
        .snapshot()
        .expect("every task can be saved")
        .encode()
        .expect("the snapshot encodes")
}

fn spool_snapshot(f: &Fixture) -> Snapshot {
    f.sched.snapshot().expect("every task can be saved")
}

fn spool_encode(f: &Fixture) -> Vec<u8> {
    f.snap.encode().expect("the snapshot encodes")
}

/// (b) decode + restore.
fn spool_restore(f: &Fixture) -> Scheduler {
    let snap = Snapshot::decode(&f.bytes).expect("the bytes decode");
    Scheduler::restore(&snap, &f.registry).expect("the snapshot restores")
}

fn spool_decode(f: &Fixture) -> Snapshot {
    Snapshot::decode(&f.bytes).expect("the bytes decode")
}

fn spool_restore_only(f: &Fixture) -> Scheduler {
    Scheduler::restore(&f.snap, &f.registry).expect("the snapshot restores")
}

/// The save baseline: the hand-kept records to JSON.
fn json_save(f: &Fixture) -> Vec<u8> {
    serde_json::to_vec(&f.records).expect("the records encode")
}

/// Tokio tasks polled at least once (so waiting).
static POLLED: AtomicUsize = AtomicUsize::new(0);

/// What the tokio restore leaves behind, dropped outside the timing.
type TokioRestored = (tokio::runtime::Runtime, Vec<oneshot::Sender<Value>>);

/// The restore baseline: JSON back to records, one tokio task per record, each run up to
/// its first await.
fn json_tokio_restore(f: &Fixture) -> TokioRestored {
    let records: Vec<HandRecord> = serde_json::from_slice(&f.json).expect("the JSON decodes");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime");
    POLLED.store(0, Ordering::Relaxed);
    let senders = rt.block_on(async {
        let mut senders = Vec::with_capacity(records.len());
        for record in records {
            let (tx, rx) = oneshot::channel::<Value>();
            senders.push(tx);
            drop(tokio::spawn(async move {
                let mut task = record.task;
                POLLED.fetch_add(1, Ordering::Relaxed);
                if let Ok(answer) = rx.await {
                    task.sum += answer.as_u64().unwrap_or(0);
                }
                task.sum
            }));
        }
        while POLLED.load(Ordering::Relaxed) < senders.len() {
            tokio::task::yield_now().await;
        }
        senders
    });
    assert_eq!(senders.len(), f.tasks);
    (rt, senders)
}

// ---------------------------------------------------------------------------------
// criterion groups
// ---------------------------------------------------------------------------------

fn save(c: &mut Criterion, f: &Fixture) {
    let mut group = c.benchmark_group("save");
    group.throughput(Throughput::Elements(f.tasks as u64));
    group.sampling_mode(SamplingMode::Flat);
    group.bench_function("spool", |b| b.iter_with_large_drop(|| spool_save(f)));
    group.bench_function("spool_snapshot", |b| {
        b.iter_with_large_drop(|| spool_snapshot(f))
    });
    group.bench_function("spool_encode", |b| {
        b.iter_with_large_drop(|| spool_encode(f))
    });
    group.bench_function("serde_json", |b| b.iter_with_large_drop(|| json_save(f)));
    group.finish();
}

fn restore(c: &mut Criterion, f: &Fixture) {
    let mut group = c.benchmark_group("restore");
    group.throughput(Throughput::Elements(f.tasks as u64));
    group.sampling_mode(SamplingMode::Flat);
    group.bench_function("spool", |b| b.iter_with_large_drop(|| spool_restore(f)));
    group.bench_function("spool_decode", |b| {
        b.iter_with_large_drop(|| spool_decode(f))
    });
    group.bench_function("spool_restore", |b| {
        b.iter_with_large_drop(|| spool_restore_only(f))
    });
    group.bench_function("serde_json_tokio", |b| {
        b.iter_with_large_drop(|| json_tokio_restore(f))
    });
    group.finish();
}

// ---------------------------------------------------------------------------------
// summary lines: our own timing, median of RUNS interleaved runs
// ---------------------------------------------------------------------------------

/// Times `run`, then drops what it made (untimed).
fn timed<T>(run: impl FnOnce() -> T) -> Duration {
    let started = Instant::now();
    let made = black_box(run());
    let elapsed = started.elapsed();
    drop(made);
    elapsed
}

/// Median time of each closure, timed in turn `RUNS` times (interleaved, so that a
/// noisy neighbour hurts all of them alike).
fn medians(runs: &mut [&mut dyn FnMut() -> Duration]) -> Vec<Duration> {
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(RUNS); runs.len()];
    for _ in 0..RUNS {
        for (run, times) in runs.iter_mut().zip(times.iter_mut()) {
            times.push(run());
        }
    }
    times
        .into_iter()
        .map(|mut t| {
            t.sort();
            t[t.len() / 2]
        })
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn verdict(d: Duration) -> &'static str {
    if d <= BAR { "met" } else { "NOT met" }
}

fn summary(f: &Fixture) {
    let tasks = f.tasks;
    // One warm-up run each.
    drop(spool_save(f));
    drop(spool_restore(f));
    drop(json_save(f));
    drop(json_tokio_restore(f));
    let m = medians(&mut [
        &mut || timed(|| spool_save(f)),
        &mut || timed(|| spool_snapshot(f)),
        &mut || timed(|| spool_encode(f)),
        &mut || timed(|| json_save(f)),
        &mut || timed(|| spool_restore(f)),
        &mut || timed(|| spool_decode(f)),
        &mut || timed(|| spool_restore_only(f)),
        &mut || timed(|| json_tokio_restore(f)),
    ]);
    let (save, snapshot, encode, json, restore, decode, restore_only, tokio) =
        (m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]);
    let bytes = f.bytes.len();
    // What the tasks' own `save` wrote (JSON), inside the snapshot.
    let state: usize = f
        .records
        .iter()
        .map(
            |r| match SavedTask::serde(&r.task).expect("a state encodes") {
                SavedTask::State(state) => state.len(),
                _ => unreachable!("SavedTask::serde writes a State"),
            },
        )
        .sum();
    println!(
        "snapshot ({tasks} tasks): snapshot+encode {:.1} ms (target <= {:.0} ms: {}), \
         of which snapshot {:.1} ms, encode {:.1} ms [median of {RUNS}]",
        ms(save),
        ms(BAR),
        verdict(save),
        ms(snapshot),
        ms(encode),
    );
    println!(
        "restore ({tasks} tasks): decode+restore {:.1} ms (target <= {:.0} ms: {}), \
         of which decode {:.1} ms, restore {:.1} ms [median of {RUNS}]",
        ms(restore),
        ms(BAR),
        verdict(restore),
        ms(decode),
        ms(restore_only),
    );
    println!(
        "snapshot size ({tasks} tasks): {bytes} bytes, {:.1} bytes/task, of which the \
         task's saved state {:.1} bytes/task (header {} bytes; serde_json records: {} bytes, \
         {:.1} bytes/task)",
        bytes as f64 / tasks as f64,
        state as f64 / tasks as f64,
        spool::HEADER_LEN,
        f.json.len(),
        f.json.len() as f64 / tasks as f64,
    );
    println!(
        "save reference: serde_json::to_vec of the same {tasks} task states as hand-kept \
         records {:.1} ms; spool snapshot+encode / that = {:.2} [median of {RUNS}]",
        ms(json),
        save.as_secs_f64() / json.as_secs_f64(),
    );
    println!(
        "restore reference: serde_json::from_slice of those records + {tasks} tokio tasks \
         spawned and polled once (current-thread) {:.1} ms; spool decode+restore / that = \
         {:.2} [median of {RUNS}]",
        ms(tokio),
        restore.as_secs_f64() / tokio.as_secs_f64(),
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not (criterion then runs
    // each benchmark once as a test): use a small fixture and skip the timed summary.
    // `--profile-time` (for a profiler) runs just the chosen benchmark.
    let args: Vec<String> = std::env::args().collect();
    let bench = args.iter().any(|a| a == "--bench");
    let skip = ["--test", "--list", "--profile-time"];
    let full = bench && !args.iter().any(|a| a == "--test" || a == "--list");
    let f = fixture(if full { TASKS } else { QUICK_TASKS });
    if !full {
        println!(
            "quick check with {} tasks; `cargo bench --bench snapshot` measures {TASKS}",
            f.tasks
        );
    }
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    save(&mut c, &f);
    restore(&mut c, &f);
    c.final_summary();
    if bench && !args.iter().any(|a| skip.contains(&a.as_str())) {
        summary(&f);
    }
}
