//! Scheduling policies at scale: what one scheduling step costs with 1,000 and with
//! 1,000,000 tasks queued, for each run-queue policy; tokio's current-thread scheduler
//! on the same shape; and a naive sort-every-tick selection of computed priorities
//! against spool's `ComputedPriority`.
//!
//! The bars: with 1,000,000 queued tasks one step costs no more than 3× what it costs
//! with 1,000 queued, for each policy; priority levels cost no more than 1.5× FIFO per
//! step.
//!
//! Shapes, each on the core `Scheduler` (`Scheduler::new(Config::new().policy(..))`,
//! no trace recording), driven by hand, virtual time moving 1 ms per step:
//!
//! - `step/<policy>/<N>`: N tasks ready, each poll returns `Step::Yield`, so a step pops
//!   one task from the run queue, polls it and pushes it back: the run-queue policy's
//!   cost at N queued. One iteration is one `Scheduler::step(now)`. The tasks were
//!   submitted in order and never move in the task table, so FIFO walks the table
//!   front to back, the friendliest order there is for the memory system.
//! - `step_shuffled/<policy>/<N>`: the same, but each task first sleeps a random time
//!   below a second (seeded) and then yields forever, so tasks come round in an order
//!   unrelated to where they sit in the table: every step touches a task slot and body
//!   that are not in cache at 1M.
//! - `admit/<policy>/<N>`: `TaskLimits::max_running(16)` with 16 tasks running and N
//!   waiting for a slot. Each running task completes at its first poll (`Step::done`);
//!   its slot goes to the best waiting task, the driver forgets the completed task and
//!   submits a new one, so N stays constant. One iteration is that cycle (`step`,
//!   `forget`, `submit`): the cost of admitting one task at N waiting.
//! - `step/tokio_yield/<N>`: a current-thread tokio runtime with N spawned tasks, each
//!   looping `yield_now().await` and counting its polls in a thread-local counter;
//!   `block_on` runs until the counter has moved by the iterations asked for (it
//!   checks every 61 polls, tokio's event interval; the time is scaled to the polls
//!   that ran). One iteration is one poll. Each runtime lives on a thread of its own
//!   (see [`TokioLoad`]). `step_shuffled/tokio_yield/<N>`: each task first waits on a
//!   oneshot channel, sent on in a seeded random order.
//! - `naive/...`: 100,000 pending records (type, created, depth, iteration). Each tick
//!   selects as a naive scheduler would (`select_runnable`): collect the pending
//!   records from the store, sort them by `calculate_priority` computed inside the
//!   comparator, take the top. `sort_cached_key` computes each priority once per tick
//!   instead (the kindest reading of "recompute every priority and sort"). `computed`
//!   is spool's `ComputedPriority` step at the same N.
//!
//! The tasks, task `i` of a load:
//!
//! - every policy: type `["ralph", "phase", "spec", "plan"][i % 4]`, submitted at
//!   `i × 100 min / N` (so ages run from 0 to 100 minutes when the run starts);
//! - `levels`: priority `[Low, Normal, High, Critical][i % 4]` (so with yielding tasks
//!   the quarter at `Critical` take turns; the others wait);
//! - `computed` (`ComputedConfig::default()`): depth `(i / 4) % 4` (submitted under one
//!   of three completed anchor tasks in a chain, `NewTask::parent`), iteration
//!   `1 + (i / 16) % 3`: 21 distinct static scores, so 21 groups;
//! - `fair`: agent `agent-{i % 100}` (weight 1).
//!
//! Run with `cargo bench --bench policies`. After criterion's groups the binary times
//! each load again itself (median of `RUNS` interleaved runs of 100,000 steps, 10 ticks
//! for the naive selection) and prints one summary line per comparison with the ratio.
//! Under `cargo test --benches` criterion runs each benchmark once, only at N = 1,000
//! (the naive comparison too), and the summary is skipped.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::{OnceLock, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use criterion::Criterion;
use spool::{
    ComputedConfig, Config, NewTask, PolicyChoice, Priority, Scheduler, SeededRng, Step, TaskId,
    TaskLimits, TaskState, Time, Value, task_fn,
};

/// The small queue.
const SMALL: usize = 1_000;
/// The large queue.
const LARGE: usize = 1_000_000;
/// Pending records in the sort-every-tick comparison.
const NAIVE_N: usize = 100_000;
/// Tasks holding a slot at once in the admission shape.
const SLOTS: usize = 16;
/// Steps per timed run in the summary.
const BATCH: u64 = 100_000;
/// Ticks per timed run of the naive selection in the summary (each sorts N records).
const NAIVE_TICKS: u64 = 10;
/// Timed runs per load for the summary lines.
const RUNS: usize = 5;
/// How far virtual time moves per step (and per naive tick).
const TICK: Duration = Duration::from_millis(1);
/// Tasks are submitted evenly over this span before the run starts.
const SPREAD: Duration = Duration::from_secs(100 * 60);
/// Agents in the fair-share loads.
const AGENTS: usize = 100;
/// The loop types with a default base score, best base first.
const TYPES: [&str; 4] = ["ralph", "phase", "spec", "plan"];
/// Priority levels, one per task in turn.
const LEVELS: [Priority; 4] = [
    Priority::Low,
    Priority::Normal,
    Priority::High,
    Priority::Critical,
];

/// A run-queue policy under test.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Policy {
    Fifo,
    Levels,
    Computed,
    Fair,
}

impl Policy {
    const ALL: [Policy; 4] = [Policy::Fifo, Policy::Levels, Policy::Computed, Policy::Fair];

    fn name(self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::Levels => "levels",
            Policy::Computed => "computed",
            Policy::Fair => "fair",
        }
    }

    fn choice(self) -> PolicyChoice {
        match self {
            Policy::Fifo => PolicyChoice::Fifo,
            Policy::Levels => PolicyChoice::Priority,
            Policy::Computed => PolicyChoice::Computed(ComputedConfig::default()),
            Policy::Fair => PolicyChoice::FairShare,
        }
    }
}

/// What a step of a spool load is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Shape {
    /// N tasks ready; every poll yields.
    Step,
    /// As `Step`, but each task first sleeps a random time below a second, so the run
    /// queue's order is shuffled against the order of the task table.
    Shuffled,
    /// N tasks waiting for one of `SLOTS` slots; every poll completes its task, and a
    /// new task is submitted.
    Admit,
}

/// `agent-0` .. `agent-99`, made once.
fn agent_names() -> &'static [&'static str] {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    NAMES.get_or_init(|| {
        (0..AGENTS)
            .map(|i| &*Box::leak(format!("agent-{i}").into_boxed_str()))
            .collect()
    })
}

/// "1k", "100k", "1M".
fn label(n: usize) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

// ---------------------------------------------------------------------------------
// spool
// ---------------------------------------------------------------------------------

/// A core scheduler holding N queued tasks, and the driver state for its steps.
struct SpoolLoad {
    sched: Scheduler,
    policy: Policy,
    shape: Shape,
    now: Time,
    /// Completed tasks at depth 0, 1, 2: a task submitted under one is one deeper.
    anchors: Vec<TaskId>,
    /// Tasks made so far: picks the next one's type, level, depth, agent.
    made: usize,
    /// Tasks queued (ready in `Step`, waiting for a slot in `Admit`).
    queued: usize,
    /// Sleep times in `Shuffled`.
    rng: SeededRng,
}

impl SpoolLoad {
    fn new(policy: Policy, shape: Shape, n: usize) -> SpoolLoad {
        let mut config = Config::new().policy(policy.choice());
        if shape == Shape::Admit {
            config = config.limits(TaskLimits::new().max_running(SLOTS));
        }
        let mut load = SpoolLoad {
            sched: Scheduler::new(config),
            policy,
            shape,
            now: Time::ZERO,
            anchors: Vec::new(),
            made: 0,
            queued: n,
            rng: SeededRng::new(4),
        };
        if policy == Policy::Computed {
            load.make_anchors();
        }
        let total = match shape {
            Shape::Step | Shape::Shuffled => n,
            Shape::Admit => n + SLOTS,
        };
        for i in 0..total {
            let at = SPREAD.as_nanos() * i as u128 / total as u128;
            load.now = Time::from_nanos(at as u64);
            let task = load.make();
            load.sched
                .submit(load.now, task)
                .expect("the table has room");
        }
        load.now = Time::ZERO + SPREAD;
        if shape == Shape::Shuffled {
            // Every task's first poll sets its timer; they fire in timer order.
            for _ in 0..n {
                load.sched.step(load.now).expect("a task is ready");
            }
            load.now = load.now + Duration::from_secs(1);
            load.sched.handle_timeout(load.now);
        }
        load.check();
        load
    }

    /// Three tasks in a chain, each completed, to submit others under.
    fn make_anchors(&mut self) {
        let mut parent = None;
        for _ in 0..3 {
            let mut task = NewTask::new(task_fn("plan", |_| Step::Done(Ok(Value::Null))));
            if let Some(parent) = parent {
                task = task.parent(parent);
            }
            let id = self
                .sched
                .submit(self.now, task)
                .expect("the table has room")
                .id;
            assert_eq!(self.sched.step(self.now), Some(id));
            assert_eq!(
                self.sched.task_state(id),
                Some(TaskState::Completed(Ok(Value::Null)))
            );
            parent = Some(id);
            self.anchors.push(id);
        }
    }

    /// The next task of this load.
    fn make(&mut self) -> NewTask {
        let i = self.made;
        self.made += 1;
        let type_name = TYPES[i % 4];
        let task = match self.shape {
            Shape::Step => NewTask::new(task_fn(type_name, |_| Step::Yield)),
            Shape::Shuffled => {
                let delay = Duration::from_nanos(self.rng.below(1_000_000_000));
                let mut slept = false;
                NewTask::new(task_fn(type_name, move |cx| {
                    if slept {
                        return Step::Yield;
                    }
                    slept = true;
                    cx.sleep(delay);
                    Step::Wait
                }))
            }
            Shape::Admit => NewTask::new(task_fn(type_name, |_| Step::Done(Ok(Value::Null)))),
        };
        match self.policy {
            Policy::Fifo => task,
            Policy::Levels => task.priority(LEVELS[i % 4]),
            Policy::Computed => {
                let depth = (i / 4) % 4;
                let iteration = 1 + (i / 16) % 3;
                let task = task.iteration(iteration as u32);
                match depth {
                    0 => task,
                    d => task.parent(self.anchors[d - 1]),
                }
            }
            Policy::Fair => task.agent(agent_names()[i % AGENTS]),
        }
    }

    /// One step: in `Step`, a task polled and queued again; in `Admit`, a task polled to
    /// completion, forgotten, a waiting one admitted in its place and a new one
    /// submitted.
    #[inline]
    fn step(&mut self) -> TaskId {
        self.now = self.now + TICK;
        let id = self.sched.step(self.now).expect("a task is ready");
        if self.shape == Shape::Admit {
            self.sched.forget(id).expect("the task completed");
            let task = self.make();
            self.sched
                .submit(self.now, task)
                .expect("the table has room");
        }
        id
    }

    /// The queue holds what it should: N queued, and in `Admit` `SLOTS` running.
    fn check(&self) {
        let state = self.sched.queue_state();
        match self.shape {
            Shape::Step | Shape::Shuffled => {
                assert_eq!(state.ready, self.queued, "{:?}", self.policy);
                assert_eq!(state.queued, 0);
            }
            Shape::Admit => {
                assert_eq!(state.ready, SLOTS, "{:?}", self.policy);
                assert_eq!(state.queued, self.queued, "{:?}", self.policy);
            }
        }
        assert_eq!(state.stats.failed, 0);
    }
}

// ---------------------------------------------------------------------------------
// tokio
// ---------------------------------------------------------------------------------

thread_local! {
    /// Polls of the tokio baseline's tasks (a runtime runs them on its own thread).
    static POLLS: Cell<u64> = const { Cell::new(0) };
}

fn polls() -> u64 {
    POLLS.with(Cell::get)
}

/// A current-thread tokio runtime holding N tasks that yield forever.
struct TokioRuntime {
    rt: tokio::runtime::Runtime,
}

/// Counts the polls of a tokio task, then yields: the loop each task runs.
async fn yield_forever() {
    loop {
        POLLS.with(|p| p.set(p.get() + 1));
        tokio::task::yield_now().await;
    }
}

impl TokioRuntime {
    /// In `Shape::Shuffled` each task first waits on a oneshot channel, and the
    /// channels are sent on in a random order, so the run queue's order is shuffled
    /// against the order the tasks were allocated in.
    fn new(shape: Shape, n: usize) -> TokioRuntime {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime");
        rt.block_on(async {
            if shape != Shape::Shuffled {
                for _ in 0..n {
                    tokio::spawn(yield_forever());
                }
                return;
            }
            let before = polls();
            let mut senders = Vec::with_capacity(n);
            for _ in 0..n {
                let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                senders.push(tx);
                tokio::spawn(async move {
                    POLLS.with(|p| p.set(p.get() + 1));
                    if rx.await.is_ok() {
                        yield_forever().await;
                    }
                });
            }
            // Every task polled once, waiting on its channel.
            while polls() < before + n as u64 {
                tokio::task::yield_now().await;
            }
            let mut rng = SeededRng::new(4);
            for i in (1..n).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                senders.swap(i, j);
            }
            for tx in senders {
                tx.send(()).expect("the task waits");
            }
        });
        let load = TokioRuntime { rt };
        // Every task polled once: past its first poll, as the spool tasks are.
        let (ran, _) = load.run(n as u64);
        assert!(ran >= n as u64);
        load
    }

    /// Runs at least `want` polls of the tasks; returns how many ran and how long that
    /// took.
    fn run(&self, want: u64) -> (u64, Duration) {
        let before = polls();
        let target = before + want;
        let started = Instant::now();
        self.rt.block_on(async {
            while polls() < target {
                tokio::task::yield_now().await;
            }
        });
        (polls() - before, started.elapsed())
    }
}

/// A [`TokioRuntime`] built and driven on a thread of its own.
///
/// The thread gives it a malloc arena of its own. On the main thread, once the spool
/// loads had filled glibc's heap with gigabytes of small chunks, the summary's tokio
/// figures at 1,000 tasks came out at 80–540 ns a poll against criterion's 41 ns,
/// varying from run to run, and a profile of the summary showed `malloc_consolidate`
/// and `unlink_chunk` at the top (each `block_on` grows tokio's list of yielded tasks
/// to 1 KiB, a request large enough to make glibc consolidate its free chunks). That
/// is the bench's shared heap, not tokio's scheduling, so tokio is kept out of it.
struct TokioLoad {
    asks: Option<mpsc::Sender<u64>>,
    answers: mpsc::Receiver<(u64, Duration)>,
    thread: Option<thread::JoinHandle<()>>,
}

impl TokioLoad {
    fn new(shape: Shape, n: usize) -> TokioLoad {
        let (asks, asked) = mpsc::channel::<u64>();
        let (answer, answers) = mpsc::channel();
        let thread = thread::spawn(move || {
            let rt = TokioRuntime::new(shape, n);
            let _ = answer.send((0, Duration::ZERO));
            for want in asked {
                if answer.send(rt.run(want)).is_err() {
                    break;
                }
            }
        });
        answers.recv().expect("the tokio thread started");
        TokioLoad {
            asks: Some(asks),
            answers,
            thread: Some(thread),
        }
    }

    /// Runs at least `want` polls on the load's thread; returns how many ran and how
    /// long that took there.
    fn run(&self, want: u64) -> (u64, Duration) {
        self.asks
            .as_ref()
            .expect("the load is live")
            .send(want)
            .expect("the tokio thread is running");
        self.answers.recv().expect("the tokio thread answers")
    }
}

impl Drop for TokioLoad {
    fn drop(&mut self) {
        self.asks = None;
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the tokio thread panicked");
        }
    }
}

// ---------------------------------------------------------------------------------
// The naive selection: sort every tick
// ---------------------------------------------------------------------------------

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum LoopType {
    Ralph,
    Phase,
    Spec,
    Plan,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum LoopStatus {
    Pending,
}

/// A loop record in a naive scheduler's store, cut to what selection reads.
#[derive(Clone, Debug)]
struct LoopRecord {
    id: u64,
    loop_type: LoopType,
    status: LoopStatus,
    /// Milliseconds.
    created_at: u64,
    depth: u32,
    iteration: u32,
}

/// The computed priority, the naive way: with the depth stored on the record (instead
/// of walking the parent chain in the store for it) and `now` passed in (instead of
/// reading the clock).
fn calculate_priority(record: &LoopRecord, now_ms: u64) -> i32 {
    let mut priority = match record.loop_type {
        LoopType::Ralph => 100,
        LoopType::Phase => 80,
        LoopType::Spec => 60,
        LoopType::Plan => 40,
    };
    let age_minutes = now_ms.saturating_sub(record.created_at) / 60_000;
    priority += (age_minutes as i32).min(50);
    priority += record.depth as i32 * 10;
    let retry_penalty = (record.iteration as i32).saturating_sub(1) * 5;
    priority -= retry_penalty.min(30);
    priority
}

/// How the naive load sorts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Sort {
    /// The priority computed inside the comparator.
    Naive,
    /// Each record's priority computed once per tick (`sort_by_cached_key`).
    CachedKey,
}

/// A store of pending records and the clock, selected from naively.
struct NaiveLoad {
    store: Vec<LoopRecord>,
    now_ms: u64,
    sort: Sort,
}

impl NaiveLoad {
    /// The same mix as the computed spool load: task `i` of type `i % 4`, depth
    /// `(i / 4) % 4`, iteration `1 + (i / 16) % 3`, created at `i × 100 min / n`.
    fn new(n: usize, sort: Sort) -> NaiveLoad {
        let types = [
            LoopType::Ralph,
            LoopType::Phase,
            LoopType::Spec,
            LoopType::Plan,
        ];
        let spread = SPREAD.as_millis() as u64;
        let store = (0..n)
            .map(|i| LoopRecord {
                id: i as u64 + 1,
                loop_type: types[i % 4],
                status: LoopStatus::Pending,
                created_at: spread * i as u64 / n as u64,
                depth: ((i / 4) % 4) as u32,
                iteration: (1 + (i / 16) % 3) as u32,
            })
            .collect();
        NaiveLoad {
            store,
            now_ms: spread,
            sort,
        }
    }

    /// The naive `select_runnable` with one slot free: every pending record, sorted by
    /// priority, highest first (a stable sort, so equal priorities stay in store order,
    /// oldest first).
    fn select_runnable(&self, available_slots: usize) -> Vec<LoopRecord> {
        let now = self.now_ms;
        let mut runnable: Vec<LoopRecord> = self
            .store
            .iter()
            .filter(|r| r.status == LoopStatus::Pending)
            .cloned()
            .collect();
        match self.sort {
            Sort::Naive => runnable.sort_by(|a, b| {
                let pa = calculate_priority(a, now);
                let pb = calculate_priority(b, now);
                pb.cmp(&pa)
            }),
            Sort::CachedKey => {
                runnable.sort_by_cached_key(|r| std::cmp::Reverse(calculate_priority(r, now)));
            }
        }
        runnable.truncate(available_slots);
        runnable
    }

    /// One tick: time moves, the best record is picked (it runs a step and stays
    /// pending, as a yielding spool task stays queued).
    fn tick(&mut self) -> u64 {
        self.now_ms += TICK.as_millis() as u64;
        self.select_runnable(1)[0].id
    }
}

// ---------------------------------------------------------------------------------
// loads, built once each and shared by criterion and the summary
// ---------------------------------------------------------------------------------

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Spool(Shape, Policy, usize),
    Tokio(Shape, usize),
    Naive(Sort, usize),
}

enum Load {
    Spool(Box<SpoolLoad>),
    Tokio(TokioLoad),
    Naive(NaiveLoad),
}

impl Load {
    fn build(key: Key) -> Load {
        match key {
            Key::Spool(shape, policy, n) => Load::Spool(Box::new(SpoolLoad::new(policy, shape, n))),
            Key::Tokio(shape, n) => Load::Tokio(TokioLoad::new(shape, n)),
            Key::Naive(sort, n) => Load::Naive(NaiveLoad::new(n, sort)),
        }
    }

    /// Steps per timed run in the summary.
    fn batch(&self) -> u64 {
        match self {
            Load::Naive(_) => NAIVE_TICKS,
            _ => BATCH,
        }
    }

    /// Runs `steps` steps (polls, ticks); the time per step in ns.
    fn time(&mut self, steps: u64) -> f64 {
        let (ran, took) = match self {
            Load::Spool(load) => {
                let started = Instant::now();
                for _ in 0..steps {
                    black_box(load.step());
                }
                (steps, started.elapsed())
            }
            Load::Tokio(load) => load.run(steps),
            Load::Naive(load) => {
                let started = Instant::now();
                for _ in 0..steps {
                    black_box(load.tick());
                }
                (steps, started.elapsed())
            }
        };
        took.as_nanos() as f64 / ran as f64
    }
}

#[derive(Default)]
struct Loads(BTreeMap<Key, Load>);

impl Loads {
    fn get(&mut self, key: Key) -> &mut Load {
        self.0.entry(key).or_insert_with(|| Load::build(key))
    }

    /// Drops a load (the 1M ones hold a few hundred MB each).
    fn drop_load(&mut self, key: Key) {
        self.0.remove(&key);
    }
}

// ---------------------------------------------------------------------------------
// criterion
// ---------------------------------------------------------------------------------

type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// Benchmarks one load; it is built the first time criterion runs it (so a filter that
/// leaves it out never builds it) and kept for the summary.
fn bench_load(group: &mut Group<'_>, id: &str, loads: &mut Loads, key: Key) {
    group.bench_function(id, |b| match loads.get(key) {
        Load::Spool(load) => b.iter(|| load.step()),
        Load::Naive(load) => b.iter(|| load.tick()),
        Load::Tokio(load) => b.iter_custom(|iters| {
            let (ran, took) = load.run(iters);
            took.mul_f64(iters as f64 / ran as f64)
        }),
    });
}

fn criterion_groups(c: &mut Criterion, loads: &mut Loads, sizes: &[usize], naive_n: usize) {
    for shape in [Shape::Step, Shape::Shuffled, Shape::Admit] {
        let mut group = c.benchmark_group(match shape {
            Shape::Step => "step",
            Shape::Shuffled => "step_shuffled",
            Shape::Admit => "admit",
        });
        for n in sizes {
            for policy in Policy::ALL {
                let id = format!("{}/{}", policy.name(), label(*n));
                bench_load(&mut group, &id, loads, Key::Spool(shape, policy, *n));
            }
            if shape != Shape::Admit {
                let id = format!("tokio_yield/{}", label(*n));
                bench_load(&mut group, &id, loads, Key::Tokio(shape, *n));
            }
        }
        group.finish();
    }
    let mut group = c.benchmark_group("naive");
    let n = label(naive_n);
    for (sort, name) in [
        (Sort::Naive, "sort_every_tick"),
        (Sort::CachedKey, "sort_cached_key"),
    ] {
        bench_load(
            &mut group,
            &format!("{name}/{n}"),
            loads,
            Key::Naive(sort, naive_n),
        );
    }
    let computed = Key::Spool(Shape::Step, Policy::Computed, naive_n);
    bench_load(&mut group, &format!("computed/{n}"), loads, computed);
    group.finish();
}

// ---------------------------------------------------------------------------------
// summary
// ---------------------------------------------------------------------------------

/// Median ns per step of each load over `RUNS` interleaved timed runs.
fn medians(loads: &mut Loads, keys: &[Key]) -> BTreeMap<Key, f64> {
    for key in keys {
        let load = loads.get(*key);
        let batch = load.batch();
        load.time(batch); // warm-up
    }
    let mut times: BTreeMap<Key, Vec<f64>> = BTreeMap::new();
    for _ in 0..RUNS {
        for key in keys {
            let load = loads.get(*key);
            let batch = load.batch();
            times.entry(*key).or_default().push(load.time(batch));
        }
    }
    times
        .into_iter()
        .map(|(key, mut t)| {
            t.sort_by(f64::total_cmp);
            (key, t[t.len() / 2])
        })
        .collect()
}

/// "38 ns", "1.2 µs", "31.4 ms".
fn ns(t: f64) -> String {
    if t >= 1e6 {
        format!("{:.1} ms", t / 1e6)
    } else if t >= 1e4 {
        format!("{:.1} µs", t / 1e3)
    } else {
        format!("{t:.0} ns")
    }
}

fn verdict(ratio: f64, bar: f64) -> &'static str {
    if ratio <= bar { "met" } else { "NOT met" }
}

fn summary(loads: &mut Loads) {
    let mut keys = Vec::new();
    for shape in [Shape::Step, Shape::Shuffled, Shape::Admit] {
        for policy in Policy::ALL {
            for n in [SMALL, LARGE] {
                keys.push(Key::Spool(shape, policy, n));
            }
        }
    }
    for shape in [Shape::Step, Shape::Shuffled] {
        keys.extend([Key::Tokio(shape, SMALL), Key::Tokio(shape, LARGE)]);
    }
    let m = medians(loads, &keys);
    for key in &keys {
        if let Some(Load::Spool(load)) = loads.0.get(key) {
            load.check();
        }
    }
    let of = |shape, policy, n| m[&Key::Spool(shape, policy, n)];
    let (small, large) = (label(SMALL), label(LARGE));
    for (shape, what) in [
        (Shape::Step, "policies"),
        (Shape::Shuffled, "policies, run queue shuffled"),
        (Shape::Admit, "admission"),
    ] {
        for policy in Policy::ALL {
            let (a, b) = (of(shape, policy, LARGE), of(shape, policy, SMALL));
            println!(
                "{what}: {} {large}/{small} = {:.2}x ({} vs {} per step) [bar <= 3x: {}] \
                 [median of {RUNS}]",
                policy.name(),
                a / b,
                ns(a),
                ns(b),
                verdict(a / b, 3.0),
            );
        }
        for n in [SMALL, LARGE] {
            let (l, f) = (of(shape, Policy::Levels, n), of(shape, Policy::Fifo, n));
            println!(
                "{what}: levels/fifo at {} = {:.2}x ({} vs {}) [bar <= 1.5x: {}]",
                label(n),
                l / f,
                ns(l),
                ns(f),
                verdict(l / f, 1.5),
            );
        }
    }
    for (shape, what) in [(Shape::Step, ""), (Shape::Shuffled, ", run queue shuffled")] {
        let (a, b) = (m[&Key::Tokio(shape, LARGE)], m[&Key::Tokio(shape, SMALL)]);
        println!(
            "tokio{what} {large}/{small} = {:.2}x ({} vs {} per poll) [median of {RUNS}]",
            a / b,
            ns(a),
            ns(b),
        );
        for n in [SMALL, LARGE] {
            let (s, t) = (of(shape, Policy::Fifo, n), m[&Key::Tokio(shape, n)]);
            println!(
                "spool fifo step / tokio poll{what} at {} = {:.2}x ({} vs {})",
                label(n),
                s / t,
                ns(s),
                ns(t),
            );
        }
    }

    // The large loads are done with: free their memory before the naive comparison.
    for key in &keys {
        if matches!(key, Key::Spool(_, _, LARGE) | Key::Tokio(_, LARGE)) {
            loads.drop_load(*key);
        }
    }
    let computed = Key::Spool(Shape::Step, Policy::Computed, NAIVE_N);
    let naive = Key::Naive(Sort::Naive, NAIVE_N);
    let cached = Key::Naive(Sort::CachedKey, NAIVE_N);
    let m = medians(loads, &[naive, cached, computed]);
    let n = label(NAIVE_N);
    println!(
        "naive sort-every-tick / computed at {n} = {:.0}x ({} vs {} per step) [median of {RUNS}]",
        m[&naive] / m[&computed],
        ns(m[&naive]),
        ns(m[&computed]),
    );
    println!(
        "naive sort-every-tick, priority once per record per tick / computed at {n} = {:.0}x \
         ({} vs {})",
        m[&cached] / m[&computed],
        ns(m[&cached]),
        ns(m[&computed]),
    );
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    // `cargo bench` passes `--bench`; `cargo test --benches` does not (criterion then runs
    // each benchmark once as a test): there only the small loads are built, and the timed
    // summary is skipped. `--profile-time` (for a profiler) runs just the chosen benchmark.
    let args: Vec<String> = std::env::args().collect();
    let benching = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let skip = ["--list", "--profile-time"];
    let mut loads = Loads::default();
    if benching {
        criterion_groups(&mut c, &mut loads, &[SMALL, LARGE], NAIVE_N);
    } else {
        criterion_groups(&mut c, &mut loads, &[SMALL], SMALL);
    }
    c.final_summary();
    if benching && !args.iter().any(|a| skip.contains(&a.as_str())) {
        summary(&mut loads);
    }
}
