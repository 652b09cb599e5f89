//! The cost of a schedule's fire: whether it stays flat from 100 to 10,000 schedules on
//! one scheduler, beside tokio timers doing the same work, and the time of a virtual
//! year of one schedule.
//!
//! # What it measures
//!
//! `N` schedules on one `spool_core::Scheduler`, driven directly (no `TestScheduler`):
//! the driver asks `poll_timeout` for the next moment, gives it to `handle_timeout` (the
//! schedules' timers fire, each fire makes its run's task through the registry and
//! admits it), then `step`s until no task is ready (the run completes at its first
//! poll). Each schedule is `ScheduleDef::new` as a user makes it (its own persistent
//! session, `skip` overlap, latest catch-up); its run type, [`Tick`], completes at once
//! with a value that adds nothing to the session. The scheduler keeps no trace and
//! evicts a result at the next clock move (`retention(0)`), so the task table does not
//! grow with the fires. A fire's cost is the whole of it: the timer, the schedule's
//! bookkeeping, the run's input (JSON), its task made and admitted, its one poll, its
//! end recorded on the schedule, the next timer set.
//!
//! Two patterns, each at 100, 1,000 and 10,000 schedules:
//! - `staggered`: one fire at a time. Every schedule is `Spec::Every(5 min)`, schedule
//!   `i` made at `i × 5 min / N`, so the fires come one by one, `5 min / N` apart: each
//!   wake-up fires one schedule.
//! - `together`: all due together. Every schedule is `*/5 * * * *` (UTC), all made at
//!   the same instant, so every five minutes all `N` fire in one wake-up.
//!
//! Each run first goes through one round of fires (`N`, untimed: each schedule's first
//! fire also makes its session), then times `FIRES` fires (default 50,000), counted as
//! runs completed. It reports nanoseconds per fire (median of the runs) and the ratio of
//! each size to 100 schedules (the target: 10,000 within 2× of 100).
//!
//! The baseline, in the same run: the same workload on tokio (a current-thread runtime,
//! its clock paused with `tokio::time::pause()`, so that time is virtual too: with
//! nothing to do, the runtime advances the paused clock to the next timer). `N` tokio
//! tasks, each looping `sleep_until(next)`, then `tokio::spawn` of a trivial task (it
//! counts the fire), then `next += 5 min`; staggered or together as above; the same
//! warm-up round and the same `FIRES` timed. tokio does far less per fire (no run input,
//! no registry, no status): the column says what the timer and task machinery alone
//! costs.
//!
//! The year: one `*/5 * * * *` UTC schedule made at 2026-12-31T23:59Z and run through
//! 2027 in virtual time, on a `TestScheduler` (`advance` of 365 days, as
//! `tests/schedule_year.rs` does, trace recorded, results kept) and on the core driven as
//! above: 105,120 runs, asserted, and the wall time each took.
//!
//! # How to run it
//!
//! `cargo bench --bench schedules` runs the full table (well under a minute). Environment
//! variables narrow it:
//! - `SPOOL_SCHED_SIZES=100,1000,10000`: the schedule counts (the ratio column needs 100);
//! - `SPOOL_SCHED_PATTERNS=staggered,together`: the patterns;
//! - `SPOOL_SCHED_FIRES=50000`: the fires timed per run;
//! - `SPOOL_SCHED_RUNS=5`: the runs per cell, for the median;
//! - `SPOOL_SCHED_TOKIO=1`: `0` leaves the tokio baseline out;
//! - `SPOOL_SCHED_YEAR=1`: `0` leaves the year out.
//!
//! Under `cargo test --benches` (no `--bench` argument) it runs one quick pass: 100
//! schedules, 1,000 fires, both patterns, the baseline, and a virtual day instead of the
//! year, to check that it works.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;
use spool::core::{
    AgentTask, Config, CronSpec, SavedTask, ScheduleDef, Scheduler, Spec, StateError, Step,
    TaskContext, TaskRegistry, Time,
};
use spool_test::TestScheduler;

mod common;

use common::{env_list, median};

/// The schedule counts of the full run.
const SIZES: [usize; 3] = [100, 1_000, 10_000];
/// Fires timed per run.
const FIRES: u64 = 50_000;
/// Runs per cell, for the median.
const RUNS: usize = 5;
/// Every schedule's period.
const PERIOD: Duration = Duration::from_secs(300);
/// The quick pass under `cargo test --benches`.
const QUICK_SIZE: usize = 100;
const QUICK_FIRES: u64 = 1_000;
/// Runs in a year of `*/5 * * * *`, and in a day.
const YEAR_RUNS: u64 = 365 * 288;
const DAY_RUNS: u64 = 288;
/// Where virtual time starts (a minute before 2027, so that 2027-01-01T00:00Z fires).
const START: &str = "2026-12-31T23:59:00Z";

// ---------------------------------------------------------------------------------
// the run
// ---------------------------------------------------------------------------------

/// A scheduled run: completes at its first poll, with a value that adds no message to
/// its session. Its input (the schedule's `{}` with `schedule` and `session` added) is
/// read and dropped.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Tick {}

impl AgentTask for Tick {
    fn poll(&mut self, _cx: &mut TaskContext<'_>) -> Step {
        Step::done(json!("tick"))
    }

    fn type_name(&self) -> &'static str {
        "tick"
    }

    fn save(&self) -> Result<SavedTask, StateError> {
        SavedTask::serde(self)
    }
}

fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<Tick>("tick")
}

fn cron(expr: &str) -> Spec {
    Spec::Cron(CronSpec::parse(expr, "UTC").expect("a good expression"))
}

// ---------------------------------------------------------------------------------
// spool
// ---------------------------------------------------------------------------------

/// How the fires of the `N` schedules fall.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Pattern {
    /// One at a time: `Every(5 min)`, made `5 min / N` apart.
    Staggered,
    /// All at once: `*/5 * * * *`, made together.
    Together,
}

impl Pattern {
    const ALL: [Pattern; 2] = [Pattern::Staggered, Pattern::Together];

    fn name(self) -> &'static str {
        match self {
            Pattern::Staggered => "staggered",
            Pattern::Together => "together",
        }
    }

    /// When schedule `i` of `n` is made, after the start.
    fn offset(self, i: usize, n: usize) -> Duration {
        match self {
            Pattern::Staggered => PERIOD / n as u32 * i as u32,
            Pattern::Together => Duration::ZERO,
        }
    }
}

impl FromStr for Pattern {
    type Err = String;

    fn from_str(s: &str) -> Result<Pattern, String> {
        Pattern::ALL
            .into_iter()
            .find(|p| p.name() == s.trim())
            .ok_or_else(|| format!("unknown pattern {s:?}"))
    }
}

/// A core scheduler at [`START`] with `n` schedules made in `pattern`; returns it and
/// the time making them took.
fn spool_scheduler(n: usize, pattern: Pattern) -> (Scheduler, Duration) {
    let mut core = Scheduler::new(Config::new().retention(Duration::ZERO));
    core.set_registry(registry());
    core.set_wall_clock(Time::ZERO, START.parse().expect("an instant"));
    let made = Instant::now();
    for i in 0..n {
        let spec = match pattern {
            Pattern::Staggered => Spec::Every(PERIOD),
            Pattern::Together => cron("*/5 * * * *"),
        };
        let def = ScheduleDef::new(format!("s-{i}"), spec, "tick", json!({}));
        let at = Time::ZERO + pattern.offset(i, n);
        // The clock moved first: `put_schedule(at, ..)` times a new schedule from the
        // scheduler's clock before it moves to `at` (a bug, in
        // `tests/schedule_findings.rs`), which would put two schedules on one fire.
        // Nothing is due yet (the first fire is a period after the start).
        core.handle_timeout(at);
        assert_eq!(core.put_schedule(at, def), Ok(true));
    }
    (core, made.elapsed())
}

/// Drives `core` until `fires` more runs completed; returns the wake-ups it took.
fn drive(core: &mut Scheduler, fires: u64) -> u64 {
    let target = core.stats().completed + fires;
    let mut wakes = 0;
    while core.stats().completed < target {
        let at = core
            .poll_timeout()
            .expect("a schedule's timer is always set");
        core.handle_timeout(at);
        while core.step(at).is_some() {}
        wakes += 1;
    }
    assert_eq!(core.stats().completed, target, "no fire beyond the target");
    assert_eq!(core.stats().failed, 0);
    wakes
}

/// One timed run of spool.
#[derive(Clone, Debug)]
struct Run {
    elapsed: Duration,
    fires: u64,
    wakes: u64,
    /// Making the schedules (untimed in `elapsed`).
    setup: Duration,
}

impl Run {
    fn ns_per_fire(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.fires as f64
    }
}

fn spool_once(n: usize, pattern: Pattern, fires: u64) -> Run {
    let (mut core, setup) = spool_scheduler(n, pattern);
    // One round untimed: each schedule's first fire also makes its session.
    drive(&mut core, n as u64);
    let started = Instant::now();
    let wakes = drive(&mut core, fires);
    let elapsed = started.elapsed();
    let expected = match pattern {
        Pattern::Staggered => fires,
        Pattern::Together => fires / n as u64,
    };
    assert_eq!(
        wakes,
        expected,
        "{}: the fires fall as meant",
        pattern.name()
    );
    let missed: u64 = core.schedules().iter().map(|s| s.status.missed).sum();
    assert_eq!(missed, 0, "no fire is missed");
    Run {
        elapsed,
        fires,
        wakes,
        setup,
    }
}

// ---------------------------------------------------------------------------------
// tokio
// ---------------------------------------------------------------------------------

/// The same workload on tokio timers, on a paused clock: `n` tasks each sleeping until
/// its next fire and spawning a trivial task per fire. Returns the time of `fires`
/// fires after one untimed round.
fn tokio_once(n: usize, pattern: Pattern, fires: u64) -> Duration {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async move {
        tokio::time::pause();
        let count = Arc::new(AtomicU64::new(0));
        let done = Arc::new(tokio::sync::Notify::new());
        let warm = n as u64;
        let target = warm + fires;
        let start = tokio::time::Instant::now();
        let mut schedules = Vec::with_capacity(n);
        for i in 0..n {
            let (count, done) = (count.clone(), done.clone());
            let mut next = start + pattern.offset(i, n) + PERIOD;
            schedules.push(tokio::spawn(async move {
                loop {
                    tokio::time::sleep_until(next).await;
                    let (count, done) = (count.clone(), done.clone());
                    tokio::spawn(async move {
                        let fired = count.fetch_add(1, Ordering::Relaxed) + 1;
                        if fired == warm || fired == target {
                            done.notify_one();
                        }
                    });
                    next += PERIOD;
                }
            }));
        }
        done.notified().await;
        let started = Instant::now();
        done.notified().await;
        let elapsed = started.elapsed();
        assert!(count.load(Ordering::Relaxed) >= target);
        for schedule in schedules {
            schedule.abort();
        }
        elapsed
    })
}

// ---------------------------------------------------------------------------------
// the year
// ---------------------------------------------------------------------------------

/// A `*/5 * * * *` schedule for `days` virtual days from [`START`] on a
/// `TestScheduler`; returns the wall time.
fn year_test_scheduler(days: u64, runs: u64) -> Duration {
    let mut t = TestScheduler::new();
    t.set_registry(registry());
    t.set_wall_clock(START.parse().expect("an instant"));
    let def = ScheduleDef::new("tick", cron("*/5 * * * *"), "tick", json!({}));
    assert_eq!(t.put_schedule(def), Ok(true));
    let started = Instant::now();
    t.advance(Duration::from_secs(days * 24 * 3600));
    let elapsed = started.elapsed();
    let status = t.schedule("tick").expect("the schedule").status;
    assert_eq!((status.runs, status.missed), (runs, 0));
    elapsed
}

/// The same on the core driven directly.
fn year_core(days: u64, runs: u64) -> Duration {
    let mut core = Scheduler::new(Config::new().retention(Duration::ZERO));
    core.set_registry(registry());
    core.set_wall_clock(Time::ZERO, START.parse().expect("an instant"));
    let def = ScheduleDef::new("tick", cron("*/5 * * * *"), "tick", json!({}));
    assert_eq!(core.put_schedule(Time::ZERO, def), Ok(true));
    let end = Time::ZERO + Duration::from_secs(days * 24 * 3600);
    let started = Instant::now();
    while let Some(at) = core.poll_timeout().filter(|at| *at <= end) {
        core.handle_timeout(at);
        while core.step(at).is_some() {}
    }
    let elapsed = started.elapsed();
    let status = core.schedule("tick").expect("the schedule").status;
    assert_eq!((status.runs, status.missed), (runs, 0));
    elapsed
}

// ---------------------------------------------------------------------------------
// the table
// ---------------------------------------------------------------------------------

/// A measured cell.
#[derive(Debug)]
struct Cell {
    schedules: usize,
    pattern: Pattern,
    spool: Vec<Run>,
    tokio: Vec<Duration>,
}

impl Cell {
    fn spool_ns(&self) -> f64 {
        median(&self.spool.iter().map(Run::ns_per_fire).collect::<Vec<_>>())
    }

    fn tokio_ns(&self) -> Option<f64> {
        let fires = self.spool.first()?.fires as f64;
        (!self.tokio.is_empty()).then(|| {
            median(
                &self
                    .tokio
                    .iter()
                    .map(|d| d.as_nanos() as f64 / fires)
                    .collect::<Vec<_>>(),
            )
        })
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: a quick pass then.
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let full = args.iter().any(|a| a == "--bench");
    let (sizes, patterns, fires, runs, with_tokio, year) = if full {
        (
            env_list("SPOOL_SCHED_SIZES", &SIZES),
            env_list("SPOOL_SCHED_PATTERNS", &Pattern::ALL),
            env_list("SPOOL_SCHED_FIRES", &[FIRES])[0].max(1),
            env_list("SPOOL_SCHED_RUNS", &[RUNS])[0].max(1),
            env_list("SPOOL_SCHED_TOKIO", &[1u8])[0] != 0,
            env_list("SPOOL_SCHED_YEAR", &[1u8])[0] != 0,
        )
    } else {
        println!(
            "quick check with {QUICK_SIZE} schedules and {QUICK_FIRES} fires; \
             `cargo bench --bench schedules` measures the table"
        );
        (
            vec![QUICK_SIZE],
            Pattern::ALL.to_vec(),
            QUICK_FIRES,
            1,
            true,
            false,
        )
    };
    let whole = Instant::now();

    let mut cells = Vec::new();
    for &pattern in &patterns {
        for &n in &sizes {
            assert!(
                pattern == Pattern::Staggered || fires % n as u64 == 0,
                "together: the fires ({fires}) must be a multiple of the schedules ({n})"
            );
            let mut cell = Cell {
                schedules: n,
                pattern,
                spool: Vec::new(),
                tokio: Vec::new(),
            };
            for _ in 0..runs {
                let run = spool_once(n, pattern, fires);
                let tokio = with_tokio.then(|| tokio_once(n, pattern, fires));
                eprintln!(
                    "  {n} schedules, {}: spool {:.0} ns/fire ({} wake-ups, made in {:.3} s){}",
                    pattern.name(),
                    run.ns_per_fire(),
                    run.wakes,
                    run.setup.as_secs_f64(),
                    tokio.map_or(String::new(), |d| format!(
                        ", tokio {:.0} ns/fire",
                        d.as_nanos() as f64 / fires as f64
                    )),
                );
                cell.spool.push(run);
                cell.tokio.extend(tokio);
            }
            cells.push(cell);
        }
    }

    let years = if full && year {
        let test = year_test_scheduler(365, YEAR_RUNS);
        let core = year_core(365, YEAR_RUNS);
        Some((test, core))
    } else {
        // The quick pass: a virtual day.
        year_test_scheduler(1, DAY_RUNS);
        year_core(1, DAY_RUNS);
        None
    };

    println!();
    println!(
        "schedules workload: N schedules on one core scheduler, {fires} fires timed after one \
         untimed round; a fire = timer + run made through the registry + its one poll to \
         completion; median of {runs} runs"
    );
    println!(
        "{:<9} | {:>9} | {:>14} | {:>11} | {:>14} | {:>11} | {:>11} | {:>8} | {:>13}",
        "pattern",
        "schedules",
        "spool ns/fire",
        "spool vs 100",
        "tokio ns/fire",
        "tokio vs 100",
        "spool/tokio",
        "wake-ups",
        "µs/schedule made"
    );
    for cell in &cells {
        let base = cells
            .iter()
            .find(|c| c.pattern == cell.pattern && c.schedules == 100);
        let spool = cell.spool_ns();
        let tokio = cell.tokio_ns();
        let vs = |x: Option<f64>, b: Option<f64>| match (x, b) {
            (Some(x), Some(b)) => format!("{:.2}×", x / b),
            _ => "—".to_owned(),
        };
        let run = &cell.spool[0];
        println!(
            "{:<9} | {:>9} | {:>14.0} | {:>11} | {:>14} | {:>11} | {:>11} | {:>8} | {:>13.2}",
            cell.pattern.name(),
            cell.schedules,
            spool,
            vs(Some(spool), base.map(Cell::spool_ns)),
            tokio.map_or("—".to_owned(), |t| format!("{t:.0}")),
            vs(tokio, base.and_then(Cell::tokio_ns)),
            vs(Some(spool), tokio),
            run.wakes,
            median(
                &cell
                    .spool
                    .iter()
                    .map(|r| r.setup.as_secs_f64() * 1e6 / cell.schedules as f64)
                    .collect::<Vec<_>>()
            ),
        );
    }
    for &pattern in &patterns {
        let at = |n: usize| {
            cells
                .iter()
                .find(|c| c.pattern == pattern && c.schedules == n)
        };
        if let (Some(small), Some(large)) = (at(100), at(10_000)) {
            let spool = large.spool_ns() / small.spool_ns();
            let tokio = match (large.tokio_ns(), small.tokio_ns()) {
                (Some(l), Some(s)) => format!("{:.2}×", l / s),
                _ => "—".to_owned(),
            };
            println!(
                "{}: 10,000 vs 100 schedules: spool {spool:.2}× ({}), tokio {tokio}",
                pattern.name(),
                if spool <= 2.0 {
                    "within the 2× target"
                } else {
                    "OVER the 2× target"
                },
            );
        }
    }
    if let Some((test, core)) = years {
        println!(
            "a virtual year (2027) of one */5 * * * * schedule, {YEAR_RUNS} runs: \
             TestScheduler::advance {:.3} s, core driven directly {:.3} s",
            test.as_secs_f64(),
            core.as_secs_f64()
        );
    }
    println!("whole run: {:.1} s", whole.elapsed().as_secs_f64());
}
