//! Durable at full speed: the runtime's own cost in memory and on the store, and the
//! time to recover a store of live tasks.
//!
//! # What it measures
//!
//! The workload: `N` agents ([`Agent`]) submitted to a `spool::Runtime` and run until
//! idle. Each agent makes 5 LLM requests one after another (its 5 steps) and keeps every
//! answer in its state (a `Vec<String>`, so the saved state grows a little each step),
//! then ends: 6 polls per agent. The LLM executor (`from_fn`, one worker thread) answers
//! at once with a short string, so the runtime's own cost is all there is. The timed
//! window is the submission of the `N` agents plus `run_until_idle`; "steps" are counted,
//! not assumed: the polls the runtime reports ([`RunReport::steps`], the scheduler's
//! `Stats::polls`), and every run checks that all `N` agents completed.
//!
//! Modes, each at 1,000, 10,000 and 100,000 agents:
//! - `memory`: no journal (the baseline of the ratio column);
//! - `memory-journal`: a `MemoryJournal` as the journal (every entry encoded and kept in
//!   memory, no checkpoints): the cost of journaling without SQLite;
//! - `store`: a `spool_store::Store` (`Durability::Process`, i.e. WAL with
//!   `synchronous = NORMAL`, 2 checkpoints kept, no history: `History::off()`) as the
//!   runtime's journal, with `checkpoint_every(500)` as `spool demo --store` does;
//! - `store-history`: as `store`, keeping history by the default retention (7 days,
//!   1 GiB: every segment of the run is kept); the table's last lines give its time
//!   over `store`'s;
//! - `store-no-ckpt`: the same store, no checkpoints after the starting one;
//! - `powerloss`: a store opened with `Durability::PowerLoss` (`synchronous = FULL`, an
//!   fsync per commit), `checkpoint_every(500)`;
//! - `store-submit-each`: as `store`, but each agent submitted with its own
//!   `Runtime::submit`, which returns once that one submission is durable (a round trip
//!   to the store's writer per agent). The other modes submit the `N` agents with one
//!   `Runtime::submit_all` (one group, one round trip), as a caller with many tasks
//!   at hand would;
//! - `postgres`: a `spool_postgres::PgStore` (`synchronous_commit = on` for its
//!   session, 2 checkpoints kept, no history) as the journal, `checkpoint_every(500)`, on a
//!   throwaway cluster (`spool_pgtest::PgCluster`) with the test settings: `fsync`,
//!   `full_page_writes` off, so nothing is flushed to disk — what PostgreSQL's own work
//!   costs;
//! - `postgres-fsync`: the same on a cluster with `fsync`, `synchronous_commit` and
//!   `full_page_writes` on (PostgreSQL's defaults): each commit flushed to this
//!   machine's disk before it is acknowledged;
//! - `postgres-history`: as `postgres`, keeping history by the default retention.
//!
//! Each `postgres` mode starts its cluster on first use (1 to 2 s, not timed) and every
//! run takes a new database on it, dropped after the run; the clusters are removed
//! when the benchmark ends.
//!
//! Each (size, mode) runs `SPOOL_DURABLE_RUNS` times (default 3) and the median is
//! printed; a mode whose first run takes over 60 s runs once. A mode and its `-history`
//! twin run in turn (one run of each, then the next), so the two see the same load. `powerloss` always runs
//! at up to 10,000 agents; above, it is skipped when its predicted time (its time at the
//! largest smaller size scaled by the agent count, plus the `store` mode's time at this
//! size) is over `SPOOL_DURABLE_BUDGET_S` (default 180 s; 0: never skip), or when no
//! smaller size ran to predict from; the table says so. Each store lives in its own
//! `tempfile` directory.
//!
//! Recovery, at 10,000 and 100,000 live tasks, from the SQLite store and from
//! PostgreSQL (the `postgres` mode's cluster): a store made by running agents on a
//! runtime journaling to it, with an LLM executor that never answers, until every agent
//! has made its first request; then one checkpoint (`Runtime::checkpoint`) and the
//! runtime is dropped. Timed, as a fresh process would do it (median of the runs):
//! opening the store (`Store::open` of the file; `PgStore::connect` as its writer),
//! `recover` (the latest checkpoint and the journal after it), and
//! `RuntimeBuilder::recover` (`Scheduler::replay`: decode, restore the tasks, apply the
//! entries; then every request in flight marked to send again). The recovered
//! scheduler is checked to hold every task live with its request in flight.
//!
//! # How to run it
//!
//! `cargo bench --bench durable` runs the full table: 2.5 to 3.5 minutes on 2 shared
//! cores, about one of them the two `postgres` modes and the recovery from PostgreSQL
//! (a run at 100,000 agents takes 6 to 9 s; making the database of 100,000 live tasks,
//! one durable `submit` each, 12 to 27 s). Environment variables narrow it:
//! - `SPOOL_DURABLE_SIZES=1000,10000`: the agent counts;
//! - `SPOOL_DURABLE_MODES=memory,memory-journal,store,store-history,store-no-ckpt,powerloss,store-submit-each,postgres,postgres-history,postgres-fsync`:
//!   the modes (the ratio column needs `memory`, the history lines `store` and
//!   `store-history`, or `postgres` and `postgres-history`);
//! - `SPOOL_DURABLE_RECOVERY=10000,100000`: the live-task counts to recover (`0`: none);
//! - `SPOOL_DURABLE_RECOVERY_FROM=store,postgres`: the backends recovered from;
//! - `SPOOL_DURABLE_RUNS=3`: the runs per cell;
//! - `SPOOL_DURABLE_BUDGET_S=180`: the predicted time over which `powerloss` is skipped
//!   above 10,000 agents (`0`: never skipped).
//!
//! Under `cargo test --benches` (no `--bench` argument) it runs one quick pass at 200
//! agents, every mode and a recovery of 200 tasks from each backend, to check that it
//! works (the two clusters' start is most of its time).

use std::cell::OnceCell;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use spool::{
    Executor, Kind, MemoryJournal, NewTask, OutboundRequest, Replies, RunReport, Runtime, from_fn,
};
use spool_pgtest::PgCluster;
use spool_postgres::{PgOptions, PgStore};
use spool_store::{Durability, History, Store, StoreOptions, WriteStats};

mod common;

use common::agent::{Agent, STEPS, answer, registry};
use common::database::{Database, Flush};
use common::{env_list, median, median_by};

/// Journal entries between two checkpoints, as `spool demo --store` has it.
const CHECKPOINT_EVERY: u64 = 500;
/// The agent counts of the full run.
const SIZES: [usize; 3] = [1_000, 10_000, 100_000];
/// The live-task counts recovered in the full run.
const RECOVERY: [usize; 2] = [10_000, 100_000];
/// Runs per cell, for the median.
const RUNS: usize = 3;
/// A cell whose first run takes longer than this runs once.
const LONG_RUN: Duration = Duration::from_secs(60);
/// `powerloss` is never skipped up to this many agents (the sizes always measured).
const ALWAYS_POWERLOSS: usize = 10_000;
/// The default prediction over which `powerloss` is skipped.
const BUDGET: Duration = Duration::from_secs(180);
/// The agent count of the quick pass under `cargo test --benches`.
const QUICK: usize = 200;
/// The file name of a store of live tasks, in its directory.
const LIVE_FILE: &str = "live.spool";

// ---------------------------------------------------------------------------------
// the agent and its executors
// ---------------------------------------------------------------------------------

/// An LLM that never answers: it counts the requests it is handed and drops them.
struct Silent {
    seen: Arc<AtomicUsize>,
}

impl Executor for Silent {
    fn execute(&mut self, request: OutboundRequest, _replies: &mut Replies<'_>) {
        drop(request);
        self.seen.fetch_add(1, Ordering::Release);
    }
}

// ---------------------------------------------------------------------------------
// the throughput runs
// ---------------------------------------------------------------------------------

/// Where the runtime's journal goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Mode {
    /// No journal.
    Memory,
    /// A `MemoryJournal`, no checkpoints.
    MemoryJournal,
    /// A store, `synchronous = NORMAL`, a checkpoint every 500 entries, no history.
    Store,
    /// As `Store`, keeping history by the default retention.
    StoreHistory,
    /// A store, no checkpoints after the starting one.
    StoreNoCheckpoints,
    /// A store with `Durability::PowerLoss`, a checkpoint every 500 entries.
    PowerLoss,
    /// As `Store`, but each agent submitted on its own with `Runtime::submit`, which
    /// returns once that submission is durable: one round trip to the writer per agent.
    StoreSubmitEach,
    /// A `PgStore` on a cluster that flushes nothing to disk, a checkpoint every 500
    /// entries, no history.
    Postgres,
    /// As `Postgres`, keeping history by the default retention.
    PostgresHistory,
    /// A `PgStore` on a cluster with `fsync`, `synchronous_commit` and
    /// `full_page_writes` on, a checkpoint every 500 entries.
    PostgresFsync,
}

impl Mode {
    const ALL: [Mode; 10] = [
        Mode::Memory,
        Mode::MemoryJournal,
        Mode::Store,
        Mode::StoreHistory,
        Mode::StoreNoCheckpoints,
        Mode::PowerLoss,
        Mode::StoreSubmitEach,
        Mode::Postgres,
        Mode::PostgresHistory,
        Mode::PostgresFsync,
    ];

    fn name(self) -> &'static str {
        match self {
            Mode::Memory => "memory",
            Mode::MemoryJournal => "memory-journal",
            Mode::Store => "store",
            Mode::StoreHistory => "store-history",
            Mode::StoreNoCheckpoints => "store-no-ckpt",
            Mode::PowerLoss => "powerloss",
            Mode::StoreSubmitEach => "store-submit-each",
            Mode::Postgres => "postgres",
            Mode::PostgresHistory => "postgres-history",
            Mode::PostgresFsync => "postgres-fsync",
        }
    }

    /// The history its store keeps: the default retention in the `-history` modes,
    /// none in the others.
    fn history(self) -> History {
        match self {
            Mode::StoreHistory | Mode::PostgresHistory => History::default(),
            _ => History::off(),
        }
    }

    /// The mode it is measured against for the cost of history, for a `-history`
    /// mode.
    fn without_history(self) -> Option<Mode> {
        match self {
            Mode::StoreHistory => Some(Mode::Store),
            Mode::PostgresHistory => Some(Mode::Postgres),
            _ => None,
        }
    }

    /// The cluster a `postgres` mode runs on; `None` for the others.
    fn cluster(self) -> Option<Flush> {
        match self {
            Mode::Postgres | Mode::PostgresHistory => Some(Flush::Off),
            Mode::PostgresFsync => Some(Flush::Fsync),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------
// the PostgreSQL clusters
// ---------------------------------------------------------------------------------

/// The throwaway clusters the `postgres` modes and recoveries run on, each started on
/// first use and removed when this is dropped.
#[derive(Default)]
struct Clusters {
    off: OnceCell<PgCluster>,
    fsync: OnceCell<PgCluster>,
    /// Databases made so far, for their names.
    databases: std::cell::Cell<u32>,
}

impl Clusters {
    fn get(&self, flush: Flush) -> &PgCluster {
        let start = || flush.start();
        match flush {
            Flush::Off => self.off.get_or_init(start),
            Flush::Fsync => self.fsync.get_or_init(start),
        }
    }

    /// A new database on the `flush` cluster.
    fn database(&self, flush: Flush) -> Database<'_> {
        let n = self.databases.get() + 1;
        self.databases.set(n);
        let name = format!("durable_{n}");
        Database::create(self.get(flush), name)
    }
}

/// The durable backend a run journals to.
enum Backend {
    Sqlite(Store),
    Postgres(PgStore),
}

impl Backend {
    fn write_stats(&self) -> WriteStats {
        match self {
            Backend::Sqlite(store) => store.write_stats(),
            Backend::Postgres(store) => store.write_stats(),
        }
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s.trim())
            .ok_or_else(|| format!("unknown mode {s:?}"))
    }
}

/// One timed run.
#[derive(Clone, Debug)]
struct Run {
    elapsed: Duration,
    /// Polls the runtime counted.
    polls: u64,
    /// Answers the scheduler took.
    answers: u64,
    /// Journal entries and checkpoints the store wrote (0 in memory).
    entries: u64,
    checkpoints: u64,
}

impl Run {
    fn steps_per_second(&self) -> f64 {
        self.polls as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs `agents` agents to the end in `mode` on a fresh runtime (and store, or
/// database on `clusters`).
fn run_once(mode: Mode, agents: usize, clusters: &Clusters) -> Run {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let durability = match mode {
        Mode::PowerLoss => Durability::PowerLoss,
        _ => Durability::Process,
    };
    // Declared before the store, so dropped after it.
    let database = mode.cluster().map(|flush| clusters.database(flush));
    let store = match (mode, &database) {
        (Mode::Memory | Mode::MemoryJournal, _) => None,
        (_, Some(database)) => Some(Backend::Postgres(
            PgStore::connect_with(&database.url, PgOptions::new().history(mode.history()))
                .expect("the PostgreSQL store connects"),
        )),
        (_, None) => Some(Backend::Sqlite(
            Store::open_with(
                dir.path().join("durable.spool"),
                StoreOptions::new()
                    .durability(durability)
                    .history(mode.history()),
            )
            .expect("the store opens"),
        )),
    };
    let mut builder = Runtime::builder().executor(
        Kind::Llm,
        from_fn(|request| Ok(answer(&request.request.payload))),
    );
    if mode == Mode::MemoryJournal {
        builder = builder.journal(MemoryJournal::new());
    }
    if let Some(store) = &store {
        builder = match store {
            Backend::Sqlite(store) => builder.journal(store.clone()),
            Backend::Postgres(store) => builder.journal(store.clone()),
        };
        if mode != Mode::StoreNoCheckpoints {
            builder = builder.checkpoint_every(CHECKPOINT_EVERY);
        }
    }
    let mut runtime = builder.try_build().expect("the runtime starts");
    let started = Instant::now();
    let agent = |n| NewTask::new(Agent::new(n));
    if mode == Mode::StoreSubmitEach {
        for n in 0..agents as u64 {
            runtime.submit(agent(n)).expect("the agent is taken");
        }
    } else {
        for submission in runtime.submit_all((0..agents as u64).map(agent)) {
            submission.expect("the agent is taken");
        }
    }
    let report: RunReport = runtime.run_until_idle();
    let elapsed = started.elapsed();
    assert_eq!(
        runtime.journal_error(),
        None,
        "{}: journaling failed",
        mode.name()
    );
    assert_eq!(
        (report.stats.completed, report.stats.failed),
        (agents as u64, 0),
        "{}: every agent completes",
        mode.name()
    );
    drop(runtime);
    let written = store.as_ref().map(Backend::write_stats);
    Run {
        elapsed,
        polls: report.steps,
        answers: report.stats.answers,
        entries: written.as_ref().map_or(0, |w| w.entries),
        checkpoints: written.as_ref().map_or(0, |w| w.checkpoints),
    }
}

/// A measured cell: the runs of one mode at one size.
#[derive(Debug)]
struct Cell {
    agents: usize,
    mode: Mode,
    runs: Vec<Run>,
}

impl Cell {
    /// The run with the median steps/s.
    fn median_run(&self) -> &Run {
        median_by(&self.runs, Run::steps_per_second)
    }
}

/// Runs `mode` at `agents` up to `runs` times (once if the first run is long).
fn measure(mode: Mode, agents: usize, runs: usize, clusters: &Clusters) -> Cell {
    measure_together(&[mode], agents, runs, clusters)
        .pop()
        .expect("one cell per mode")
}

/// Runs each of `modes` at `agents` up to `runs` times, in turn (one run of each, then
/// the next round), so that modes compared with each other see the same load; a
/// mode whose first run is long runs once.
fn measure_together(modes: &[Mode], agents: usize, runs: usize, clusters: &Clusters) -> Vec<Cell> {
    let mut cells: Vec<Cell> = modes
        .iter()
        .map(|&mode| Cell {
            agents,
            mode,
            runs: Vec::new(),
        })
        .collect();
    for round in 0..runs {
        for cell in &mut cells {
            if round > 0 && cell.runs.first().is_some_and(|r| r.elapsed > LONG_RUN) {
                continue;
            }
            let run = run_once(cell.mode, agents, clusters);
            eprintln!(
                "  {agents} agents, {}: {:.3} s, {} polls, {:.0} steps/s",
                cell.mode.name(),
                run.elapsed.as_secs_f64(),
                run.polls,
                run.steps_per_second()
            );
            cell.runs.push(run);
        }
    }
    cells
}

// ---------------------------------------------------------------------------------
// recovery
// ---------------------------------------------------------------------------------

/// What a recovery reads from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Source {
    /// A `spool_store::Store` file.
    Store,
    /// A `PgStore` database on the cluster of the `postgres` mode.
    Postgres,
}

impl Source {
    const ALL: [Source; 2] = [Source::Store, Source::Postgres];

    fn name(self) -> &'static str {
        match self {
            Source::Store => "store",
            Source::Postgres => "postgres",
        }
    }
}

impl FromStr for Source {
    type Err = String;

    fn from_str(s: &str) -> Result<Source, String> {
        Source::ALL
            .into_iter()
            .find(|m| m.name() == s.trim())
            .ok_or_else(|| format!("unknown backend {s:?}"))
    }
}

/// A store of live tasks, kept while it is recovered from: the SQLite file (`LIVE_FILE`
/// in the directory) or the database.
enum Live<'a> {
    Sqlite(tempfile::TempDir),
    Postgres(Database<'a>),
}

/// A store on `source` holding `tasks` live agents, each waiting on its first request
/// (sent to an executor that never answers), with a checkpoint taken after the last
/// request went out.
fn live_store(source: Source, tasks: usize, clusters: &Clusters) -> Live<'_> {
    let (live, store) = match source {
        Source::Store => {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let path = dir.path().join(LIVE_FILE);
            let store = Store::open(&path).expect("the store opens");
            (Live::Sqlite(dir), Backend::Sqlite(store))
        }
        Source::Postgres => {
            let database = clusters.database(Flush::Off);
            let store = PgStore::connect(&database.url).expect("the PostgreSQL store connects");
            (Live::Postgres(database), Backend::Postgres(store))
        }
    };
    let seen = Arc::new(AtomicUsize::new(0));
    let builder = Runtime::builder().executor(Kind::Llm, Silent { seen: seen.clone() });
    let builder = match &store {
        Backend::Sqlite(store) => builder.journal(store.clone()),
        Backend::Postgres(store) => builder.journal(store.clone()),
    };
    let mut runtime = builder.try_build().expect("the runtime starts");
    for n in 0..tasks as u64 {
        runtime
            .submit(NewTask::new(Agent::new(n)))
            .expect("the agent is taken");
    }
    // Nothing is ever answered, so `run_until_idle` would not return: stop the loop once
    // the executor holds every request.
    let handle = runtime.handle();
    let watcher = thread::spawn(move || {
        while seen.load(Ordering::Acquire) < tasks {
            thread::sleep(Duration::from_millis(1));
        }
        handle.shutdown().expect("the runtime is running");
    });
    runtime.run();
    watcher.join().expect("the watcher ends");
    assert_eq!(runtime.journal_error(), None);
    assert_eq!(runtime.scheduler().live_len(), tasks);
    assert_eq!(runtime.scheduler().in_flight_len(), tasks);
    runtime.checkpoint().expect("the checkpoint is written");
    drop(runtime);
    drop(store);
    live
}

/// One timed recovery.
#[derive(Clone, Debug, PartialEq, PartialOrd)]
struct Recovery {
    total: Duration,
    open: Duration,
    read: Duration,
    replay: Duration,
    entries: usize,
    snapshot_bytes: usize,
}

/// Connects to the database at `url` as its writer, as a new process would: the
/// previous run's connection may still hold the writer's lock for a moment after its
/// store was dropped (the server ends its session on its own time), so a refusal for
/// that is tried again, and the time counted from the try that connects.
fn connect_writer(url: &str) -> (PgStore, Instant) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let started = Instant::now();
        match PgStore::connect(url) {
            Ok(store) => return (store, started),
            Err(spool_postgres::PgStoreError::InUse { .. }) if Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("the PostgreSQL store connects: {e}"),
        }
    }
}

/// Opens the store of `live` afresh and recovers its run into a runtime builder, as a
/// new process would.
fn recover_once(live: &Live<'_>, tasks: usize) -> Recovery {
    let registry = registry();
    let (started, store) = match live {
        Live::Sqlite(dir) => {
            let path = dir.path().join(LIVE_FILE);
            let started = Instant::now();
            let store = Store::open(path).expect("the store opens");
            (started, Backend::Sqlite(store))
        }
        Live::Postgres(database) => {
            let (store, started) = connect_writer(&database.url);
            (started, Backend::Postgres(store))
        }
    };
    let opened = started.elapsed();
    let journal = match &store {
        Backend::Sqlite(store) => store.recover().expect("the store reads"),
        Backend::Postgres(store) => store.recover().expect("the database reads"),
    }
    .expect("the store holds a checkpoint");
    let read = started.elapsed();
    let builder = Runtime::builder()
        .recover(&journal, &registry)
        .expect("the journal replays");
    let total = started.elapsed();
    // Not timed: starting it (no executors, no journal) to check what was recovered.
    let runtime = builder.build();
    assert_eq!(runtime.scheduler().live_len(), tasks);
    assert_eq!(runtime.scheduler().in_flight_len(), tasks);
    Recovery {
        total,
        open: opened,
        read: read - opened,
        replay: total - read,
        entries: journal.entries.len(),
        snapshot_bytes: journal.start.len(),
    }
}

// ---------------------------------------------------------------------------------
// the run and its table
// ---------------------------------------------------------------------------------

/// Why `powerloss` at `agents` is skipped, if it is: never at the sizes always measured
/// (up to [`ALWAYS_POWERLOSS`] agents) nor with a budget of 0; above them, when its time
/// predicted from the largest smaller size measured (scaled by the agent count, plus the
/// `store` mode's time at this size, as its checkpoints are the same) is over `budget`,
/// or when there is no smaller size to predict from.
fn powerloss_skip(agents: usize, cells: &[Cell], budget: Duration) -> Option<String> {
    if agents <= ALWAYS_POWERLOSS || budget.is_zero() {
        return None;
    }
    let time_of = |size: usize, mode: Mode| {
        cells
            .iter()
            .find(|c| c.agents == size && c.mode == mode)
            .map(|c| c.median_run().elapsed)
    };
    let basis = cells
        .iter()
        .filter(|c| c.mode == Mode::PowerLoss && c.agents < agents)
        .map(|c| c.agents)
        .max();
    let Some(p) = basis else {
        return Some(format!(
            "no smaller powerloss run to predict its time from (at today's fsync speed it \
             can take an hour); SPOOL_DURABLE_BUDGET_S=0 runs it (budget {} s)",
            budget.as_secs()
        ));
    };
    let t = time_of(p, Mode::PowerLoss)?;
    let predicted =
        t.mul_f64(agents as f64 / p as f64) + time_of(agents, Mode::Store).unwrap_or_default();
    (predicted > budget).then(|| {
        format!(
            "predicted {:.0} s a run ({:.1} s at {p} agents × {}, plus the store mode's \
             time here) > SPOOL_DURABLE_BUDGET_S = {} s (0 runs it anyway)",
            predicted.as_secs_f64(),
            t.as_secs_f64(),
            agents / p,
            budget.as_secs()
        )
    })
}

fn seconds(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: a quick pass then.
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--list");
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let (sizes, modes, recovery, runs, budget) = if full {
        let budget = env_list::<u64>("SPOOL_DURABLE_BUDGET_S", &[BUDGET.as_secs()]);
        (
            env_list("SPOOL_DURABLE_SIZES", &SIZES),
            env_list("SPOOL_DURABLE_MODES", &Mode::ALL),
            env_list("SPOOL_DURABLE_RECOVERY", &RECOVERY),
            env_list("SPOOL_DURABLE_RUNS", &[RUNS])[0].max(1),
            Duration::from_secs(budget[0]),
        )
    } else {
        println!(
            "quick check with {QUICK} agents; `cargo bench --bench durable` measures the table"
        );
        (vec![QUICK], Mode::ALL.to_vec(), vec![QUICK], 1, BUDGET)
    };
    let sources = if full {
        env_list("SPOOL_DURABLE_RECOVERY_FROM", &Source::ALL)
    } else {
        Source::ALL.to_vec()
    };
    let whole = Instant::now();
    let clusters = Clusters::default();

    let mut cells: Vec<Cell> = Vec::new();
    let mut skipped: Vec<(usize, Mode, String)> = Vec::new();
    for &agents in &sizes {
        for &mode in &modes {
            if mode == Mode::PowerLoss
                && let Some(why) = powerloss_skip(agents, &cells, budget)
            {
                eprintln!("  {agents} agents, powerloss: skipped, {why}");
                skipped.push((agents, mode, why));
                continue;
            }
            if mode
                .without_history()
                .is_some_and(|off| modes.contains(&off))
            {
                // Measured with the mode it is compared with, below.
                continue;
            }
            let twin = Mode::ALL
                .into_iter()
                .find(|m| m.without_history() == Some(mode) && modes.contains(m));
            match twin {
                // A mode and its history twin run in turn, so both see the same load.
                Some(twin) => {
                    cells.extend(measure_together(&[mode, twin], agents, runs, &clusters))
                }
                None => cells.push(measure(mode, agents, runs, &clusters)),
            }
        }
    }

    let mut recoveries: Vec<(Source, usize, Vec<Recovery>, Duration)> = Vec::new();
    for (&tasks, &source) in recovery
        .iter()
        .filter(|&&t| t > 0)
        .flat_map(|t| sources.iter().map(move |s| (t, s)))
    {
        let made = Instant::now();
        let live = live_store(source, tasks, &clusters);
        let made = made.elapsed();
        let times: Vec<Recovery> = (0..runs)
            .map(|_| {
                let r = recover_once(&live, tasks);
                eprintln!(
                    "  recover {tasks} live tasks from {}: {} (open {}, read {}, replay {})",
                    source.name(),
                    seconds(r.total),
                    seconds(r.open),
                    seconds(r.read),
                    seconds(r.replay)
                );
                r
            })
            .collect();
        recoveries.push((source, tasks, times, made));
    }

    println!();
    println!(
        "durable workload: agents of {STEPS} LLM steps keeping their answers (6 polls each), \
         an executor answering at once; steps = polls counted by the runtime"
    );
    println!(
        "{:>8} | {:<17} | {:>16} | {:>15} | {:>10} | {:>4} | {:>7} | {:>7} | {:>7} | {:>5}",
        "agents",
        "mode",
        "steps/s (median)",
        "store/in-memory",
        "µs/step",
        "runs",
        "polls",
        "answers",
        "entries",
        "ckpts"
    );
    for cell in &cells {
        let run = cell.median_run();
        let rate = run.steps_per_second();
        let baseline = cells
            .iter()
            .find(|c| c.agents == cell.agents && c.mode == Mode::Memory)
            .map(|c| c.median_run().steps_per_second());
        let ratio = match (cell.mode, baseline) {
            (Mode::Memory, _) => "1 (baseline)".to_owned(),
            (_, Some(base)) => format!("{:.1}× slower", base / rate),
            (_, None) => "—".to_owned(),
        };
        println!(
            "{:>8} | {:<17} | {:>16.0} | {:>15} | {:>10.2} | {:>4} | {:>7} | {:>7} | {:>7} | {:>5}",
            cell.agents,
            cell.mode.name(),
            rate,
            ratio,
            1e6 / rate,
            cell.runs.len(),
            run.polls,
            run.answers,
            run.entries,
            run.checkpoints,
        );
    }
    for (agents, mode, why) in &skipped {
        println!("{agents:>8} | {:<17} | skipped: {why}", mode.name());
    }
    for cell in &cells {
        let Some(off) = cell.mode.without_history().and_then(|off| {
            cells
                .iter()
                .find(|c| c.agents == cell.agents && c.mode == off)
        }) else {
            continue;
        };
        let (kept, none) = (cell.median_run(), off.median_run());
        println!(
            "history kept ({}) at {} agents: {} {:.0} steps/s against {} {:.0} steps/s: \
             {:.2}× its time",
            History::default(),
            cell.agents,
            cell.mode.name(),
            kept.steps_per_second(),
            off.mode.name(),
            none.steps_per_second(),
            none.steps_per_second() / kept.steps_per_second(),
        );
    }
    for (source, tasks, times, made) in &recoveries {
        let r = median(times);
        println!(
            "recovery of {tasks} live tasks from {} (made in {:.1} s): {} [median of {}] = open {} \
             + read checkpoint and journal {} + replay {} ({} B snapshot, {} entries after it)",
            source.name(),
            made.as_secs_f64(),
            seconds(r.total),
            times.len(),
            seconds(r.open),
            seconds(r.read),
            seconds(r.replay),
            r.snapshot_bytes,
            r.entries,
        );
    }
    println!("whole run: {:.1} s", whole.elapsed().as_secs_f64());
}
