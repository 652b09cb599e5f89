//! Resume equivalence: a seeded random workload run straight through, and run again
//! with the scheduler replaced every k-th step by the restore of its own snapshot
//! (encoded and decoded on the way, so the bytes are what is restored), ends the same:
//! the same task states, the same trace (event for event, as text) after every restore
//! point, the same trace hash, counters and requests sent.
//!
//! Two drivers: one of its own that steps the core one poll (or one move of the clock)
//! at a time, as `TestScheduler::step` does, with executors whose answers and latencies
//! are drawn from a seeded generator per request sent (so a request sent out of order
//! after a restore changes every answer after it); and the `TestScheduler` itself,
//! whose core is swapped with `*ts.core_mut() = ..` between `ts.step()`s while its
//! mocks and delayed answers stay (answers keyed with indexes from before the restore).
//! Explicit tasks only (async tasks are saved by journal replay, which these tests do
//! not cover).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

use serde_json::json;
use spool::{
    BackoffConfig, CancelReason, ComputedConfig, Config, Kind, Mock, NewTask, PolicyChoice,
    Priority, RequestError, RequestLimits, Response, Scheduler, SeededRng, Snapshot, TaskId,
    TaskLimits, TaskRegistry, TaskState, TestScheduler, Time, TraceEvent,
};

use crate::tasks::{Asker, Caller, Failer, Kid, Op, Parent, Sleeper, Worker, registry};

// ---------------------------------------------------------------------------------
// The workload.
// ---------------------------------------------------------------------------------

/// A task's body, as data (a `NewTask` cannot be cloned, and both runs need one).
#[derive(Clone, Debug)]
enum Body {
    Worker(Vec<Op>),
    Asker(u32),
    Sleeper(Vec<u64>),
    Parent(Vec<Kid>, bool),
    Failer(u32),
    Caller(&'static str),
}

/// A task to submit; dependencies and parents by index into the plan's tasks.
#[derive(Clone, Debug)]
struct Spec {
    body: Body,
    agent: String,
    priority: Priority,
    after: Vec<usize>,
    parent: Option<usize>,
    deadline_ms: Option<u64>,
    key: Option<String>,
    iteration: u32,
}

/// Tasks submitted at a step, and tasks canceled then.
#[derive(Clone, Debug)]
struct Wave {
    at_step: u64,
    tasks: Vec<Spec>,
    cancels: Vec<usize>,
}

/// A whole workload: the scheduler's configuration and the waves.
#[derive(Clone, Debug)]
struct Plan {
    seed: u64,
    config: Config,
    waves: Vec<Wave>,
}

fn script(rng: &mut SeededRng, depth: u32) -> Vec<Op> {
    let len = 1 + rng.below(if depth == 0 { 4 } else { 2 });
    (0..len)
        .map(|_| match rng.below(100) {
            0..=34 => Op::Llm(1 + rng.below(60) as u32),
            35..=46 => Op::Tool("search".into()),
            47..=48 => Op::Tool("missing".into()),
            49..=57 => Op::FanOut(2 + rng.below(3) as u32),
            58..=64 => Op::Race(2 + rng.below(2) as u32),
            65..=79 => Op::Sleep(10 + rng.below(4_000)),
            80..=84 => Op::Yield,
            85..=94 if depth < 2 => Op::Spawn(
                (0..1 + rng.below(3))
                    .map(|_| script(rng, depth + 1))
                    .collect(),
            ),
            85..=94 => Op::Sleep(10 + rng.below(500)),
            _ => Op::Fail,
        })
        .collect()
}

fn spec(rng: &mut SeededRng, index: usize) -> Spec {
    let body = match rng.below(100) {
        0..=54 => Body::Worker(script(rng, 0)),
        55..=64 => Body::Asker(1 + rng.below(3) as u32),
        65..=74 => Body::Sleeper(
            (0..1 + rng.below(3))
                .map(|_| 50 + rng.below(4_000))
                .collect(),
        ),
        75..=81 => {
            let kids = (0..1 + rng.below(3))
                .map(|_| match rng.below(4) {
                    0 => Kid::Ask(1 + rng.below(2) as u32),
                    1 => Kid::Sleep(10 + rng.below(2_000)),
                    2 => Kid::Fail(rng.below(2) as u32),
                    _ => Kid::Parent(vec![Kid::Ask(1), Kid::Sleep(100)]),
                })
                .collect();
            Body::Parent(kids, rng.chance(30))
        }
        82..=85 => Body::Failer(rng.below(3) as u32),
        86..=91 => Body::Caller("confirm"),
        92..=97 => Body::Caller("tool:search"),
        _ => Body::Caller("tool:missing"),
    };
    let earlier = |rng: &mut SeededRng| index - 1 - rng.below(index.min(25) as u64) as usize;
    let after = if index > 0 && rng.chance(15) {
        (0..1 + rng.below(2)).map(|_| earlier(rng)).collect()
    } else {
        Vec::new()
    };
    let parent = (index > 0 && rng.chance(5)).then(|| earlier(rng));
    Spec {
        body,
        agent: format!("a{}", rng.below(5)),
        priority: [
            Priority::Low,
            Priority::Normal,
            Priority::High,
            Priority::Critical,
        ][rng.below(4) as usize],
        after,
        parent,
        deadline_ms: rng.chance(10).then(|| 500 + rng.below(20_000)),
        key: rng.chance(5).then(|| format!("k{}", rng.below(5))),
        iteration: if rng.chance(10) {
            2 + rng.below(3) as u32
        } else {
            1
        },
    }
}

/// The limits every workload runs under; the policy follows the seed.
fn config(seed: u64) -> Config {
    let mut backoff = BackoffConfig::default();
    backoff.max_retries = 3;
    config_without_gates(seed).requests(
        RequestLimits::new()
            .max_in_flight(Kind::Llm, 6)
            .window(Kind::Llm, 40, Duration::from_secs(10))
            .tokens(Kind::Llm, 1_500, Duration::from_secs(10))
            .max_in_flight(Kind::tool("search"), 3)
            .per_agent_in_flight(4)
            .backoff(backoff),
    )
}

/// [`config`] without request limits: no request goes through a gate, and answers
/// take the scheduler's hot path.
fn config_without_gates(seed: u64) -> Config {
    let policy = match seed % 4 {
        0 => PolicyChoice::Fifo,
        1 => PolicyChoice::Priority,
        2 => PolicyChoice::Computed(
            ComputedConfig::default()
                .base("worker", 30)
                .base("asker", 20),
        ),
        _ => PolicyChoice::FairShare,
    };
    Config::new()
        .record_trace(true)
        .policy(policy)
        .limits(
            TaskLimits::new()
                .max_running(10)
                .max_running_per_agent(4)
                .max_running_per_type("sleeper", 2)
                .start_window(25, Duration::from_secs(5))
                .max_queued(400)
                .max_queued_per_agent(120),
        )
        .retention(Duration::from_secs(10))
        .agent_weight("a0", 3)
        .agent_weight("a1", 2)
}

/// The workload of `seed`: waves of `sizes` tasks, the first at step 0, the next ones
/// `gap` steps apart (or as soon as nothing else is left to happen), each but the first
/// canceling two tasks of earlier waves.
fn plan(seed: u64, sizes: &[usize], gap: u64) -> Plan {
    let mut rng = SeededRng::new(seed);
    let mut index = 0;
    let waves = sizes
        .iter()
        .enumerate()
        .map(|(w, size)| {
            let cancels = if index > 0 {
                (0..2).map(|_| rng.below(index as u64) as usize).collect()
            } else {
                Vec::new()
            };
            let tasks = (0..*size)
                .map(|_| {
                    index += 1;
                    spec(&mut rng, index - 1)
                })
                .collect();
            Wave {
                at_step: w as u64 * gap,
                tasks,
                cancels,
            }
        })
        .collect();
    Plan {
        seed,
        config: config(seed),
        waves,
    }
}

fn new_task(spec: &Spec, ids: &[Option<TaskId>]) -> Result<NewTask, String> {
    let mut task = match &spec.body {
        Body::Worker(ops) => NewTask::new(Worker::new(ops.clone())),
        Body::Asker(n) => NewTask::new(Asker::new(*n)),
        Body::Sleeper(naps) => NewTask::new(Sleeper::new(naps)),
        Body::Parent(kids, false) => NewTask::new(Parent::new(kids.clone())),
        Body::Parent(kids, true) => NewTask::new(Parent::first_only(kids.clone())),
        Body::Failer(n) => NewTask::new(Failer::new(*n)),
        Body::Caller(kind) => NewTask::new(Caller::new(kind, json!({"q": spec.agent}))),
    }
    .agent(spec.agent.clone())
    .priority(spec.priority)
    .iteration(spec.iteration);
    let id = |i: usize| ids[i].ok_or_else(|| format!("task #{i} was never submitted"));
    for dep in &spec.after {
        task = task.after(id(*dep)?);
    }
    if let Some(parent) = spec.parent {
        task = task.parent(id(parent)?);
    }
    if let Some(ms) = spec.deadline_ms {
        task = task.deadline(Duration::from_millis(ms));
    }
    if let Some(key) = &spec.key {
        task = task.key(key.clone());
    }
    Ok(task)
}

/// Submits a wave on `core` at `now`, and cancels its tasks to cancel; each outcome as
/// text, for both runs to compare.
fn submit_wave(
    core: &mut Scheduler,
    now: Time,
    wave: &Wave,
    ids: &mut Vec<Option<TaskId>>,
    log: &mut Vec<String>,
) {
    for spec in &wave.tasks {
        let submitted = new_task(spec, ids).and_then(|task| {
            core.submit(now, task)
                .map(|s| (s.id, s.admission))
                .map_err(|e| e.to_string())
        });
        match submitted {
            Ok((id, admission)) => {
                log.push(format!(
                    "{now} submit #{} -> {id}: {admission:?}",
                    ids.len()
                ));
                ids.push(Some(id));
            }
            Err(error) => {
                log.push(format!("{now} submit #{}: {error}", ids.len()));
                ids.push(None);
            }
        }
    }
    for index in &wave.cancels {
        if let Some(id) = ids[*index] {
            let result = core.cancel(now, id, CancelReason::Requested);
            log.push(format!("{now} cancel {id}: {result:?}"));
        }
    }
}

// ---------------------------------------------------------------------------------
// A driver of its own: one poll at a time.
// ---------------------------------------------------------------------------------

/// The scheduler with virtual time and seeded executors. Like `TestScheduler`, a step
/// fires what is due, delivers the answers due, polls one task and routes what it
/// asked for; unlike it, moving the clock to the next event is a step of its own, so a
/// restore can come between any two polls.
struct Driver {
    core: Scheduler,
    now: Time,
    rng: SeededRng,
    delayed: BinaryHeap<Reverse<(Time, u64)>>,
    answers: BTreeMap<u64, Response>,
    seq: u64,
    /// Requests sent and cancel signals, with their times.
    log: Vec<String>,
    /// Trace events of the cores replaced so far.
    events: Vec<TraceEvent>,
    /// Checkpoints written as parts, as a store keeps them, if the run writes them.
    parts: Option<PartsStore>,
    /// Whether a checkpoint in parts follows every input (every call that can change
    /// the core), numbered by `inputs`.
    every_input: bool,
    inputs: u64,
}

/// What a store keeps of checkpoints written as parts: the latest header, and each
/// task's latest row.
#[derive(Default)]
struct PartsStore {
    header: Vec<u8>,
    rows: BTreeMap<TaskId, Vec<u8>>,
    /// Checkpoints written, and how many of them were full.
    written: u64,
    full: u64,
    /// Rows written over all checkpoints, and the tasks in the table at each, summed.
    rows_written: u64,
    tasks_seen: u64,
}

impl PartsStore {
    fn snapshot(&self) -> Snapshot {
        Snapshot::from_parts(
            &self.header,
            self.rows.iter().map(|(id, row)| (*id, row.as_slice())),
        )
        .unwrap()
    }
}

impl Driver {
    fn new(config: Config, seed: u64) -> Driver {
        Driver {
            core: Scheduler::new(config),
            now: Time::ZERO,
            rng: SeededRng::new(seed ^ 0x5eed),
            delayed: BinaryHeap::new(),
            answers: BTreeMap::new(),
            seq: 0,
            log: Vec::new(),
            events: Vec::new(),
            parts: None,
            every_input: false,
            inputs: 0,
        }
    }

    /// After an input: a checkpoint in parts, checked against the whole snapshot, if
    /// the run writes one after every input.
    fn input_done(&mut self) {
        if self.every_input {
            self.inputs += 1;
            self.checkpoint_parts(self.inputs);
        }
    }

    /// Writes a checkpoint as parts over the last one's, and checks that the parts
    /// now make the very snapshot the core takes whole.
    fn checkpoint_parts(&mut self, step: u64) {
        let Some(store) = self.parts.as_mut() else {
            return;
        };
        let parts = self.core.snapshot_changes().unwrap();
        // A row per task changed, once (a store may refuse a task written twice).
        assert!(
            parts.rows.windows(2).all(|w| w[0].0 < w[1].0),
            "step {step}: rows not one per task, in id order"
        );
        if parts.full {
            store.rows.clear();
            store.full += 1;
        }
        store.written += 1;
        store.rows_written += parts.rows.len() as u64;
        store.tasks_seen += self.core.len() as u64;
        store.header = parts.header;
        for id in parts.removed {
            store.rows.remove(&id);
        }
        store.rows.extend(parts.rows);
        let whole = self.core.snapshot().unwrap();
        if store.snapshot().encode().unwrap() != whole.encode().unwrap() {
            // Name the first part that differs.
            let want = whole.to_parts().unwrap();
            let have = store.snapshot().to_parts().unwrap();
            assert_eq!(have.header, want.header, "step {step}: the header differs");
            let have: BTreeMap<_, _> = have.rows.into_iter().collect();
            for (id, row) in want.rows {
                assert_eq!(
                    have.get(&id),
                    Some(&row),
                    "step {step}: task {id}'s row differs"
                );
            }
            panic!("step {step}: the store holds rows of tasks no longer in the table");
        }
    }

    /// Replaces the core with the restore of the checkpoint written as parts.
    fn swap_from_parts(&mut self, registry: &TaskRegistry, step: u64) {
        self.checkpoint_parts(step);
        self.events.extend(self.core.trace_mut().take_events());
        let Some(store) = self.parts.as_ref() else {
            return;
        };
        self.core = Scheduler::restore(&store.snapshot(), registry).unwrap();
        assert!(!self.core.is_tracking_changes());
    }

    fn step(&mut self) -> bool {
        self.core.handle_timeout(self.now);
        self.input_done();
        let mut progressed = self.deliver_due();
        if self.core.step(self.now).is_some() {
            progressed = true;
        }
        self.input_done();
        if self.route() {
            progressed = true;
        }
        progressed
    }

    fn deliver_due(&mut self) -> bool {
        let mut any = false;
        while let Some(Reverse((at, seq))) = self.delayed.peek().copied() {
            if at > self.now {
                break;
            }
            self.delayed.pop();
            if let Some(response) = self.answers.remove(&seq) {
                let delivery = self.core.handle_response(self.now, response);
                self.input_done();
                self.log
                    .push(format!("{} delivered {seq}: {delivery:?}", self.now));
            }
            any = true;
        }
        any
    }

    /// The executors: answers and latencies drawn per request, in the order sent.
    fn route(&mut self) -> bool {
        let mut any = false;
        while let Some(out) = self.core.poll_request() {
            self.input_done();
            any = true;
            let kind = out.request.kind.clone();
            self.log
                .push(format!("{} sent {} {kind}", self.now, out.key));
            let rng = &mut self.rng;
            let (latency_ms, result, used) = match &kind {
                Kind::Llm => {
                    let latency = 1 + rng.below(900);
                    let result = match rng.below(100) {
                        0..=3 => Err(RequestError::RateLimited {
                            retry_after: rng
                                .chance(50)
                                .then(|| Duration::from_millis(rng.below(3_000))),
                        }),
                        4..=6 => Err(RequestError::failed("overloaded")),
                        _ => Ok(json!(rng.below(10))),
                    };
                    (
                        latency,
                        result,
                        rng.chance(50).then(|| rng.below(40) as u32),
                    )
                }
                Kind::Tool(name) if name == "search" => (5 + rng.below(200), Ok(json!(1)), None),
                Kind::Confirm => (3_000, Ok(json!(true)), None),
                _ => {
                    let delivery = self.core.handle_unroutable(self.now, out.key);
                    self.input_done();
                    self.log
                        .push(format!("{} unroutable: {delivery:?}", self.now));
                    continue;
                }
            };
            let mut response = Response::new(out.key, result);
            if let Some(used) = used {
                response = response.with_tokens_used(used);
            }
            self.seq += 1;
            let at = self.now + Duration::from_millis(latency_ms);
            self.delayed.push(Reverse((at, self.seq)));
            self.answers.insert(self.seq, response);
        }
        while let Some(signal) = self.core.poll_cancel() {
            self.input_done();
            self.log.push(format!("{} cancel {}", self.now, signal.key));
        }
        any
    }

    fn next_event(&mut self) -> Option<Time> {
        let answer = self.delayed.peek().map(|Reverse((at, _))| *at);
        let timeout = self.core.poll_timeout();
        self.input_done();
        match (timeout, answer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Replaces the core with the restore of its snapshot's bytes.
    fn swap(&mut self, registry: &TaskRegistry) {
        self.events.extend(self.core.trace_mut().take_events());
        let bytes = self.core.snapshot().unwrap().encode().unwrap();
        self.core = Scheduler::restore(&Snapshot::decode(&bytes).unwrap(), registry).unwrap();
        assert!(self.core.trace().events().is_empty());
    }
}

/// What a run ends with.
#[derive(Debug, PartialEq)]
struct Run {
    states: Vec<(TaskId, TaskState)>,
    trace: Vec<String>,
    hash: u64,
    stats: spool::Stats,
    now: Time,
    log: Vec<String>,
    steps: u64,
    /// The trace hash after each step.
    hashes: Vec<u64>,
    /// The encoded snapshot every 100th step (before any restore there).
    snapshots: Vec<(u64, Vec<u8>)>,
    restores: u64,
}

/// Runs `plan` to the end; with `every = Some(k)`, replaces the core every k-th step.
/// Given the straight run, checks the trace hash at each restore against it, to name
/// the first step that went otherwise.
fn drive(plan: &Plan, every: Option<u64>, straight: Option<&Run>) -> Run {
    drive_with(plan, every, straight, None).0
}

/// `drive_with`'s `parts` for a checkpoint in parts after every input.
const EVERY_INPUT: u64 = 0;

/// As [`drive`]; with `parts = Some(j)`, also writes a checkpoint as parts every j-th
/// step (checking it against the whole snapshot), and restores from the parts;
/// `Some(EVERY_INPUT)`: after every input to the core instead.
fn drive_with(
    plan: &Plan,
    every: Option<u64>,
    straight: Option<&Run>,
    parts: Option<u64>,
) -> (Run, Option<PartsStore>) {
    let registry = registry();
    let mut d = Driver::new(plan.config.clone(), plan.seed);
    if parts.is_some() {
        d.parts = Some(PartsStore::default());
    }
    d.every_input = parts == Some(EVERY_INPUT);
    let mut ids = Vec::new();
    let mut submissions = Vec::new();
    let mut wave = 0;
    let mut step = 0u64;
    let mut hashes = Vec::new();
    let mut snapshots = Vec::new();
    let mut restores = 0;
    loop {
        while wave < plan.waves.len() && plan.waves[wave].at_step <= step {
            submit_wave(
                &mut d.core,
                d.now,
                &plan.waves[wave],
                &mut ids,
                &mut submissions,
            );
            wave += 1;
            d.input_done();
        }
        if !d.step() {
            match d.next_event() {
                Some(at) => d.now = d.now.max(at),
                // Nothing left to happen: the next wave comes now.
                None if wave < plan.waves.len() => {
                    submit_wave(
                        &mut d.core,
                        d.now,
                        &plan.waves[wave],
                        &mut ids,
                        &mut submissions,
                    );
                    wave += 1;
                    d.input_done();
                }
                None => break,
            }
        }
        step += 1;
        hashes.push(d.core.trace().hash());
        if step.is_multiple_of(100) {
            snapshots.push((step, d.core.snapshot().unwrap().encode().unwrap()));
        }
        if parts.is_some_and(|j| j != EVERY_INPUT && step.is_multiple_of(j)) {
            d.checkpoint_parts(step);
        }
        if every.is_some_and(|k| step.is_multiple_of(k)) {
            if parts.is_some() {
                d.swap_from_parts(&registry, step);
            } else {
                d.swap(&registry);
            }
            restores += 1;
            if let Some(straight) = straight {
                assert_eq!(
                    Some(&d.core.trace().hash()),
                    straight.hashes.get(step as usize - 1),
                    "seed {}, restore every {every:?}: the trace differs by step {step}",
                    plan.seed
                );
            }
        }
        assert!(step < 200_000, "the run does not end");
    }
    let mut events = std::mem::take(&mut d.events);
    events.extend(d.core.trace_mut().take_events());
    let mut log = submissions;
    log.extend(d.log);
    let parts_store = d.parts.take();
    let run = Run {
        states: d.core.tasks().map(|t| (t.id, t.state)).collect(),
        trace: events.iter().map(|e| e.to_string()).collect(),
        hash: d.core.trace().hash(),
        stats: d.core.stats().clone(),
        now: d.now,
        log,
        steps: step,
        hashes,
        snapshots,
        restores,
    };
    (run, parts_store)
}

/// The straight run and the run restored every `k` steps end alike.
fn assert_resumes_alike(plan: &Plan, straight: &Run, k: u64) {
    let resumed = drive(plan, Some(k), Some(straight));
    let seed = plan.seed;
    assert_eq!(resumed.steps, straight.steps, "seed {seed}, k {k}: steps");
    assert_eq!(resumed.restores, straight.steps / k, "seed {seed}, k {k}");
    // The events, one for one, numbered without a gap across the restores.
    let first_difference = straight
        .trace
        .iter()
        .zip(&resumed.trace)
        .position(|(a, b)| a != b);
    assert_eq!(
        first_difference, None,
        "seed {seed}, k {k}: the trace differs at event {first_difference:?}"
    );
    assert_eq!(
        resumed.trace.len(),
        straight.trace.len(),
        "seed {seed}, k {k}"
    );
    assert_eq!(
        resumed.hash, straight.hash,
        "seed {seed}, k {k}: trace hash"
    );
    assert_eq!(
        resumed.states, straight.states,
        "seed {seed}, k {k}: states"
    );
    assert_eq!(resumed.stats, straight.stats, "seed {seed}, k {k}: stats");
    assert_eq!(resumed.now, straight.now, "seed {seed}, k {k}: time");
    assert_eq!(resumed.log, straight.log, "seed {seed}, k {k}: requests");
}

/// Checks that the straight run of `plan` is a real workload: it ends with every task
/// ended, many requests, retries after 429s, failures, cancels, children, evictions.
fn assert_rich(plan: &Plan, run: &Run) {
    let seed = plan.seed;
    let s = &run.stats;
    assert!(
        run.states.iter().all(|(_, state)| state.is_terminal()),
        "seed {seed}: some task never ended: {:?}",
        run.states
            .iter()
            .filter(|(_, s)| !s.is_terminal())
            .collect::<Vec<_>>()
    );
    assert!(s.submitted >= 300, "seed {seed}: {s:?}");
    assert!(s.requests >= 400, "seed {seed}: {s:?}");
    assert!(s.rate_limited > 0, "seed {seed}: {s:?}");
    assert!(
        s.failed > 10 && s.canceled > 0 && s.completed > 100,
        "seed {seed}: {s:?}"
    );
    assert!(
        s.evicted > 0 && s.deadlines_exceeded > 0,
        "seed {seed}: {s:?}"
    );
    for (n, seq) in run.trace.iter().zip(1u64..) {
        assert!(n.starts_with(&format!("#{seq} ")), "seed {seed}: {n}");
    }
}

fn straight_and_resumed(seed: u64) {
    let plan = plan(seed, &[60, 60, 60, 60, 60], 300);
    let straight = drive(&plan, None, None);
    assert_rich(&plan, &straight);
    for k in [1, 7, 100] {
        assert_resumes_alike(&plan, &straight, k);
    }
}

/// Seed 1, priority levels: 300 explicit tasks in five waves, with the children they
/// spawn, requests of three kinds, 429s, failures, sleeps, dependencies, deadlines,
/// cancels and every limit on. Restored every step, every 7th and every 100th, the run
/// ends as the straight one does.
#[test]
fn restoring_every_k_steps_changes_nothing_under_priority_levels() {
    straight_and_resumed(1);
}

/// Seed 2, computed priority: as above.
#[test]
fn restoring_every_k_steps_changes_nothing_under_computed_priority() {
    straight_and_resumed(2);
}

/// Seed 3, weighted fair share: as above.
#[test]
fn restoring_every_k_steps_changes_nothing_under_fair_share() {
    straight_and_resumed(3);
}

/// Seed 4, FIFO: as above.
#[test]
fn restoring_every_k_steps_changes_nothing_under_fifo() {
    straight_and_resumed(4);
}

/// The same state gives the same bytes, however it was reached: seed 1 run straight
/// and run restored every 7th step snapshot to identical bytes at every 100th step (a
/// content-addressed store keeps one copy of what did not change).
#[test]
fn a_resumed_run_snapshots_to_the_same_bytes_as_the_straight_one() {
    let plan = plan(1, &[60, 60, 60, 60, 60], 300);
    let straight = drive(&plan, None, None);
    let resumed = drive(&plan, Some(7), Some(&straight));
    assert_eq!(resumed.snapshots.len(), straight.snapshots.len());
    for ((step, a), (_, b)) in straight.snapshots.iter().zip(&resumed.snapshots) {
        if a != b {
            let a = format!("{:?}", Snapshot::decode(a).unwrap());
            let b = format!("{:?}", Snapshot::decode(b).unwrap());
            let at = a
                .chars()
                .zip(b.chars())
                .position(|(x, y)| x != y)
                .unwrap_or(0);
            let around =
                |t: &str| -> String { t.chars().skip(at.saturating_sub(250)).take(400).collect() };
            panic!(
                "step {step}: the snapshots differ; first difference:\nstraight: ..{}..\nresumed:  ..{}..",
                around(&a),
                around(&b)
            );
        }
    }
}

// ---------------------------------------------------------------------------------
// The test scheduler, its core swapped.
// ---------------------------------------------------------------------------------

/// Latencies by kind for the test scheduler's mocks, drawn from the seed.
fn latencies(seed: u64) -> BTreeMap<Kind, Duration> {
    let mut rng = SeededRng::new(seed ^ 0x1a7e);
    BTreeMap::from([
        (Kind::Llm, Duration::from_millis(50 + rng.below(700))),
        (
            Kind::tool("search"),
            Duration::from_millis(5 + rng.below(200)),
        ),
    ])
}

/// A test scheduler with seeded mocks: the LLM answers from a generator drawn per
/// request (429s and failures among them), search answers 1, `tool:missing` has no
/// executor, confirmations are held.
fn test_scheduler(plan: &Plan) -> TestScheduler {
    let mut ts = TestScheduler::with_scheduler(Scheduler::new(plan.config.clone()));
    let latency = latencies(plan.seed);
    let mut rng = SeededRng::new(plan.seed ^ 0x11);
    ts.mock_with_latency(
        Kind::Llm,
        Mock::Fn(Box::new(move |_| match rng.below(100) {
            0..=3 => Err(RequestError::RateLimited {
                retry_after: Some(Duration::from_millis(rng.below(2_000))),
            }),
            4..=6 => Err(RequestError::failed("overloaded")),
            _ => Ok(json!(rng.below(10))),
        })),
        latency[&Kind::Llm],
    );
    ts.mock_with_latency(
        Kind::tool("search"),
        Mock::Fixed(json!(1)),
        latency[&Kind::tool("search")],
    );
    ts
}

/// When the next mock answer is due: the first request sent whose answer has not
/// arrived (each arrives its kind's latency after it was sent).
fn next_answer(ts: &TestScheduler, latency: &BTreeMap<Kind, Duration>) -> Option<Time> {
    let now = ts.now();
    ts.sent_requests()
        .iter()
        .filter_map(|s| latency.get(&s.kind).map(|l| s.at + *l))
        .filter(|at| *at > now)
        .min()
}

/// Runs `plan` on a test scheduler: `ts.step()` until idle, then the clock to the next
/// timer or mock answer (`ts.advance`), answering held confirmations when nothing else
/// is left; every k-th of those steps, the core is replaced by its restored snapshot.
fn drive_test_scheduler(plan: &Plan, every: Option<u64>) -> (Run, Vec<u64>) {
    let registry = registry();
    let latency = latencies(plan.seed);
    let mut ts = test_scheduler(plan);
    let mut ids = Vec::new();
    let mut log = Vec::new();
    let mut events: Vec<TraceEvent> = Vec::new();
    let mut restore_points = Vec::new();
    let mut wave = 0;
    let mut step = 0u64;
    loop {
        while wave < plan.waves.len() && plan.waves[wave].at_step <= step {
            let now = ts.now();
            submit_wave(ts.core_mut(), now, &plan.waves[wave], &mut ids, &mut log);
            wave += 1;
        }
        if !ts.step() {
            let timer = ts.core_mut().poll_timeout();
            let next = match (timer, next_answer(&ts, &latency)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let held: Vec<_> = ts.held_requests().iter().map(|h| h.request.key).collect();
            if let Some(next) = next {
                let now = ts.now();
                ts.advance(next - now);
            } else if !held.is_empty() {
                for key in held {
                    let delivery = ts.answer(key, true);
                    log.push(format!("{} confirm {key}: {delivery:?}", ts.now()));
                }
            } else if wave < plan.waves.len() {
                let now = ts.now();
                submit_wave(ts.core_mut(), now, &plan.waves[wave], &mut ids, &mut log);
                wave += 1;
            } else {
                break;
            }
        }
        step += 1;
        if every.is_some_and(|k| step.is_multiple_of(k)) {
            events.extend(ts.core_mut().trace_mut().take_events());
            restore_points.push(events.last().map_or(1, |e| e.seq + 1));
            let bytes = ts.core().snapshot().unwrap().encode().unwrap();
            *ts.core_mut() =
                Scheduler::restore(&Snapshot::decode(&bytes).unwrap(), &registry).unwrap();
        }
        assert!(step < 100_000, "the run does not end");
    }
    events.extend(ts.core_mut().trace_mut().take_events());
    log.extend(
        ts.sent_requests()
            .iter()
            .map(|s| format!("{} sent {} {}", s.at, s.key, s.kind)),
    );
    log.extend(
        ts.cancel_signals()
            .iter()
            .map(|c| format!("cancel {}", c.key)),
    );
    let run = Run {
        states: ts.task_states(),
        trace: events.iter().map(|e| e.to_string()).collect(),
        hash: ts.trace_hash(),
        stats: ts.stats().clone(),
        now: ts.now(),
        log,
        steps: step,
        hashes: Vec::new(),
        snapshots: Vec::new(),
        restores: 0,
    };
    (run, restore_points)
}

/// The test scheduler with its core swapped every 1st, 7th and 100th step (keeping
/// its mocks, held confirmations and delayed answers) ends as the straight run: the
/// same events after each restore point (numbered on from the snapshot, so the events
/// taken from each core before its swap and those of the last core make the straight
/// run's trace, one for one), states, hash, counters and requests sent. Two seeds.
#[test]
fn swapping_the_test_schedulers_core_every_k_steps_changes_nothing() {
    for seed in [5, 6] {
        let plan = plan(seed, &[90, 60], 300);
        let (straight, _) = drive_test_scheduler(&plan, None);
        assert!(straight.states.iter().all(|(_, s)| s.is_terminal()));
        assert!(straight.stats.rate_limited > 0 && straight.stats.requests > 150);
        for k in [1, 7, 100] {
            let (resumed, points) = drive_test_scheduler(&plan, Some(k));
            assert_eq!(
                points.len() as u64,
                straight.steps / k,
                "seed {seed}, k {k}"
            );
            let first_difference = straight
                .trace
                .iter()
                .zip(&resumed.trace)
                .position(|(a, b)| a != b);
            assert_eq!(
                first_difference, None,
                "seed {seed}, k {k}: the trace differs at event {first_difference:?} (restores at events {points:?})"
            );
            assert_eq!(resumed, straight, "seed {seed}, k {k}");
        }
    }
}

/// Fair share, a slot queue with a per-agent cap of 1 and two slots: a3 and a4 wait
/// for a slot while a2, submitted before them, is parked behind its agent's cap. When
/// a1 ends, a2 goes back to its place in the queue — ahead of a3 and a4, as the
/// priority and FIFO queues put it back — and gets the slot; a3 and a4 follow in order.
/// A snapshot taken then restores to a scheduler that admits the rest in the same order
/// as the original.
#[test]
fn under_fair_share_a_parked_task_goes_back_to_its_place() {
    let build = || {
        let mut ts = TestScheduler::with_scheduler(Scheduler::new(
            Config::new()
                .record_trace(true)
                .policy(PolicyChoice::FairShare)
                .limits(TaskLimits::new().max_running(2).max_running_per_agent(1)),
        ));
        ts.hold(Kind::Llm);
        let a1 = ts.submit(NewTask::new(Asker::new(1)).agent("a"));
        let a2 = ts.submit(NewTask::new(Asker::new(1)).agent("a"));
        let b1 = ts.submit(NewTask::new(Asker::new(1)).agent("b"));
        let a3 = ts.submit(NewTask::new(Asker::new(1)).agent("a"));
        let a4 = ts.submit(NewTask::new(Asker::new(1)).agent("a"));
        ts.step_until_idle();
        (ts, [a1, a2, b1, a3, a4])
    };
    // Answers held requests, oldest first, until none is left; returns the tasks that
    // got their slots, in order, from trace event `from` on.
    let admitted = |ts: &mut TestScheduler, from: u64| -> Vec<TaskId> {
        while let Some(held) = ts.held_requests().first() {
            let _ = ts.answer(held.request.key, 1);
            ts.step_until_idle();
        }
        ts.trace_events()
            .iter()
            .filter(|e| e.seq >= from && e.cause == spool::Cause::Admitted)
            .map(|e| e.task)
            .collect()
    };
    let (mut straight, [a1, a2, b1, a3, a4]) = build();
    let (mut swapped, _) = build();
    for ts in [&mut straight, &mut swapped] {
        let _ = ts.answer(ts.held_requests()[0].request.key, 1);
        ts.step_until_idle();
    }
    assert_eq!(straight.task_state(a1), TaskState::Completed(Ok(json!(1))));
    let restore_point = swapped.trace_events().last().unwrap().seq + 1;
    let bytes = swapped.core().snapshot().unwrap().encode().unwrap();
    *swapped.core_mut() =
        Scheduler::restore(&Snapshot::decode(&bytes).unwrap(), &registry()).unwrap();
    let straight_order = admitted(&mut straight, 0);
    let straight_after = admitted(&mut straight, restore_point);
    let swapped_after = admitted(&mut swapped, restore_point);
    assert_eq!(
        swapped_after, straight_after,
        "admissions after the restore (straight run: {straight_order:?})"
    );
    // b1 queued behind parked a2 (a task is never admitted past the queue), then got the
    // free slot at once.
    assert_eq!(
        straight_order,
        vec![b1, a2, a3, a4],
        "the straight run's admissions"
    );
    assert_eq!(straight.task_states(), swapped.task_states());
    assert_eq!(straight.trace_hash(), swapped.trace_hash());
}

/// Fair share, three slots, one task running for each of agents x, y and z. Queued:
/// x's low-priority task, then y's, then x's normal-priority one, which is canceled
/// while it waits. When z's task ends, x and y have equal shares, and the slot goes to
/// the agent whose next task has waited longest: x, whose next live task is its
/// low-priority one, queued before y's. The canceled task, gone, decides nothing — and
/// a snapshot taken after the cancel restores to a scheduler that gives the slot to the
/// same task.
#[test]
fn under_fair_share_a_task_canceled_while_queued_does_not_decide_the_next_slot() {
    let build = || {
        let mut ts = TestScheduler::with_scheduler(Scheduler::new(
            Config::new()
                .record_trace(true)
                .policy(PolicyChoice::FairShare)
                .limits(TaskLimits::new().max_running(3)),
        ));
        ts.hold(Kind::Llm);
        let z1 = ts.submit(NewTask::new(Asker::new(1)).agent("z"));
        ts.submit(NewTask::new(Asker::new(1)).agent("x"));
        ts.submit(NewTask::new(Asker::new(1)).agent("y"));
        let low = |agent: &'static str| {
            NewTask::new(Asker::new(1))
                .agent(agent)
                .priority(Priority::Low)
        };
        let x_low = ts.submit(low("x"));
        let y_low = ts.submit(low("y"));
        let x_normal = ts.submit(NewTask::new(Asker::new(1)).agent("x"));
        ts.step_until_idle();
        ts.cancel(x_normal).unwrap();
        (ts, z1, x_low, y_low)
    };
    let (mut straight, z1, x_low, y_low) = build();
    let (mut swapped, ..) = build();
    let bytes = swapped.core().snapshot().unwrap().encode().unwrap();
    *swapped.core_mut() =
        Scheduler::restore(&Snapshot::decode(&bytes).unwrap(), &registry()).unwrap();
    let admitted = |ts: &mut TestScheduler| {
        let key = ts
            .held_requests()
            .iter()
            .find(|h| h.request.key.task() == z1)
            .unwrap()
            .request
            .key;
        let _ = ts.answer(key, 1);
        ts.step_until_idle();
        ts.trace_events()
            .iter()
            .filter(|e| e.cause == spool::Cause::Admitted)
            .map(|e| e.task)
            .collect::<Vec<_>>()
    };
    let straight_admitted = admitted(&mut straight);
    let swapped_admitted = admitted(&mut swapped);
    assert_eq!(
        swapped_admitted, straight_admitted,
        "the slot z's task freed, straight and restored"
    );
    assert_eq!(straight_admitted, vec![x_low], "not {y_low}");
}

/// Checkpoints written as parts (the rows of the tasks that changed over the last
/// checkpoint's) make, at every one of them, the snapshot the scheduler takes whole,
/// byte for byte; a run restored from them every 50 steps ends as the straight run.
/// Seeds 1–3 (priority levels, computed priority, fair share), with every limit, 429s,
/// children, cancels and evictions (rows removed).
#[test]
fn checkpoints_in_parts_make_the_whole_snapshot_and_resume_alike() {
    for seed in 1..=3 {
        let plan = plan(seed, &[60, 60, 60, 60, 60], 300);
        let straight = drive(&plan, None, None);
        let (run, store) = drive_with(&plan, None, None, Some(3));
        assert_eq!(run, straight, "seed {seed}: writing parts changed the run");
        let store = store.unwrap();
        assert_eq!(
            store.full, 1,
            "seed {seed}: only the first checkpoint is full"
        );
        // Rows written follow what changed: far fewer than every task at every checkpoint.
        assert!(
            store.rows_written * 4 < store.tasks_seen,
            "seed {seed}: {} rows written over {} checkpoints of {} tasks in all",
            store.rows_written,
            store.written,
            store.tasks_seen
        );
        let (resumed, store) = drive_with(&plan, Some(50), Some(&straight), Some(3));
        assert_eq!(resumed.trace, straight.trace, "seed {seed}");
        assert_eq!(resumed.states, straight.states, "seed {seed}");
        assert_eq!(resumed.log, straight.log, "seed {seed}");
        // Each restore starts tracking anew: its first checkpoint is full.
        let store = store.unwrap();
        assert_eq!(store.full, 1 + resumed.restores, "seed {seed}");
    }
}

/// A task ended, forgotten, and a new one at its index, all between two checkpoints in
/// parts: the index was changed twice over, and has one row (the new task's), next to
/// the removed id. Parts with a task's row twice do not make a snapshot.
#[test]
fn a_slot_reused_between_checkpoints_has_one_row() {
    let mut core = Scheduler::new(Config::new());
    let done = || NewTask::new(spool::task_fn("done", |_cx| spool::Step::done(1)));
    assert!(core.snapshot_changes().unwrap().full);
    let first = core.submit(Time::ZERO, done()).unwrap().id;
    assert_eq!(core.step(Time::ZERO), Some(first));
    assert!(core.forget(first).is_some());
    let second = core.submit(Time::ZERO, done()).unwrap().id;
    assert_eq!(core.step(Time::ZERO), Some(second));
    let parts = core.snapshot_changes().unwrap();
    let ids: Vec<TaskId> = parts.rows.iter().map(|(id, _)| *id).collect();
    assert_eq!((ids, parts.removed), (vec![second], vec![first]));
    let rows = parts.rows.iter().map(|(id, row)| (*id, row.as_slice()));
    let whole = Snapshot::from_parts(&parts.header, rows).unwrap();
    assert_eq!(
        whole.encode().unwrap(),
        core.snapshot().unwrap().encode().unwrap()
    );
}

/// A checkpoint in parts after every input to the core (each submission wave,
/// `handle_timeout`, `handle_response`, `handle_unroutable`, `step`, `poll_request`,
/// `poll_cancel`, `poll_timeout`) makes the snapshot it takes whole, byte for byte: a
/// task whose record an input changes and that the input does not note fails here at
/// that input, even when a later input (its next poll) would have noted it before a
/// coarser checkpoint. Seeds 1–3, a smaller workload than the test above, with request
/// gates and without (answers then take the hot path, which notes its task apart).
#[test]
fn checkpoints_in_parts_after_every_input_make_the_whole_snapshot() {
    for (seed, gates) in (1..=3).flat_map(|seed| [(seed, true), (seed, false)]) {
        let mut plan = plan(seed, &[20, 20, 20], 150);
        if !gates {
            plan.config = config_without_gates(seed);
        }
        let straight = drive(&plan, None, None);
        let (run, store) = drive_with(&plan, None, None, Some(EVERY_INPUT));
        assert_eq!(run, straight, "seed {seed}: writing parts changed the run");
        let store = store.unwrap();
        assert_eq!(
            store.full, 1,
            "seed {seed}: only the first checkpoint is full"
        );
        assert!(
            store.written > 2 * run.steps,
            "seed {seed}: {}",
            store.written
        );
    }
}
