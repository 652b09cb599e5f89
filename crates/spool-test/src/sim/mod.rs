//! Seeded simulation: thousands of agent runs in virtual time, with faults at seeded
//! moments, [`Scheduler::check_invariants`](spool_core::Scheduler::check_invariants)
//! after every input and an independent observer of what goes out.
//!
//! [`simulate`] runs one [`Workload`] twice — straight, and with its crashes (each
//! restored from a snapshot, from a checkpoint's parts and the journal since, or from
//! the whole journal) — and checks that both keep every invariant and end exactly
//! alike. [`check_seeds`] runs many seeds, and on a failure shrinks the workload and
//! prints a one-line test that replays it.

mod agent;
mod driver;
mod observer;
mod report;
mod shrink;
mod workload;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

pub use report::{SimFailure, SimReport, Violation};
pub use shrink::shrink;
pub use workload::{
    CrashFrom, FAULT_CLASSES, Fault, FaultKind, Op, SimLimits, SimPolicy, SimTask, Workload,
};

use driver::{Driver, Ending};
use spool_core::TaskState;

/// Runs `workload` with its executors played from `seed`: once straight (its crashes
/// and checkpoints left out), once with them, checking every invariant after every
/// input of each, and that the two runs end alike — the same tasks in the same states,
/// the same trace hash and number of events.
///
/// # Example
/// ```
/// use spool_test::sim::{Workload, simulate};
///
/// let report = simulate(3, &Workload::generate(3));
/// assert_eq!(report.failure, None);
/// ```
pub fn simulate(seed: u64, workload: &Workload) -> SimReport {
    let mut report = SimReport {
        seed,
        ..SimReport::default()
    };
    let straight = match run(seed, workload, false) {
        Ok(ending) => ending,
        Err(failure) => {
            report.failure = Some(failure);
            return report;
        }
    };
    let crashed = match run(seed, workload, true) {
        Ok(ending) => ending,
        Err(failure) => {
            report.failure = Some(failure);
            return report;
        }
    };
    report.failure = compare(&straight, &crashed);
    report.tasks = crashed.states.len();
    for (_, state) in &crashed.states {
        match state {
            TaskState::Completed(Ok(_)) => report.completed += 1,
            TaskState::Completed(Err(_)) => report.failed += 1,
            TaskState::Canceled(_) => report.canceled += 1,
            _ => {}
        }
    }
    report.inputs = crashed.inputs;
    report.trace_hash = crashed.trace_hash;
    report.faults = crashed.faults;
    report
}

/// One run, a panic in it taken as its failure.
fn run(seed: u64, workload: &Workload, crashes: bool) -> Result<Ending, SimFailure> {
    catch_unwind(AssertUnwindSafe(|| {
        Driver::new(seed, workload, crashes).run()
    }))
    .unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        Err(SimFailure {
            input: 0,
            at: spool_core::Time::ZERO,
            crashed_run: crashes,
            violation: Violation::Panicked(message),
        })
    })
}

/// The first difference between the straight run and the run with crashes.
fn compare(straight: &Ending, crashed: &Ending) -> Option<SimFailure> {
    let differs = |what: String| {
        Some(SimFailure {
            input: crashed.inputs,
            at: spool_core::Time::ZERO,
            crashed_run: true,
            violation: Violation::Diverged(what),
        })
    };
    if straight.states != crashed.states {
        let first = straight
            .states
            .iter()
            .zip(&crashed.states)
            .find(|(a, b)| a != b)
            .map(|(a, b)| format!("task {} ended {:?}, straight {:?}", b.0, b.1, a.1))
            .unwrap_or_else(|| "another number of tasks".to_owned());
        return differs(format!("the tasks ended otherwise: {first}"));
    }
    if straight.events != crashed.events || straight.trace_hash != crashed.trace_hash {
        return differs(format!(
            "{} events, trace hash {:x}; straight {} events, trace hash {:x}",
            crashed.events, crashed.trace_hash, straight.events, straight.trace_hash
        ));
    }
    None
}

/// What [`check_seeds`] found over its seeds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeedsSummary {
    /// Seeds run.
    pub seeds: u64,
    /// Tasks made over all of them.
    pub tasks: u64,
    /// Inputs given over all of them (in the runs with crashes).
    pub inputs: u64,
    /// How many times each fault class was reached over all of them.
    pub faults: BTreeMap<&'static str, u64>,
}

impl std::fmt::Display for SeedsSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} seeds, {} tasks, {} inputs; fault classes reached:",
            self.seeds, self.tasks, self.inputs
        )?;
        for class in FAULT_CLASSES {
            let n = self.faults.get(class).copied().unwrap_or(0);
            writeln!(f, "  {class:<32} {n}")?;
        }
        Ok(())
    }
}

/// The first seed [`check_seeds`] found failing, shrunk.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{printout}")]
#[non_exhaustive]
pub struct SeedFailure {
    /// The seed.
    pub seed: u64,
    /// What to print ([`describe_failure`]): the seed, what broke, the shrunk workload
    /// and a one-line test that replays it.
    pub printout: String,
}

/// Runs [`simulate`] for each seed in `seeds`, each on [`Workload::generate`] of the
/// seed.
///
/// # Errors
/// A [`SeedFailure`] for the first seed that fails, shrunk ([`shrink`]).
pub fn check_seeds(seeds: impl IntoIterator<Item = u64>) -> Result<SeedsSummary, SeedFailure> {
    let mut summary = SeedsSummary::default();
    for seed in seeds {
        let workload = Workload::generate(seed);
        let report = simulate(seed, &workload);
        if let Some(failure) = report.failure {
            return Err(SeedFailure {
                seed,
                printout: describe_failure(seed, &workload, &failure),
            });
        }
        summary.seeds += 1;
        summary.tasks += report.tasks as u64;
        summary.inputs += report.inputs;
        for (class, n) in report.faults {
            *summary.faults.entry(class).or_default() += n;
        }
    }
    Ok(summary)
}

/// The printout of a failing seed: what broke, then the workload shrunk and the line
/// that replays it.
pub fn describe_failure(seed: u64, workload: &Workload, failure: &SimFailure) -> String {
    let (small, small_failure) = shrink(seed, workload, failure);
    format!(
        "seed {seed} fails: {failure}\n\
         workload ({} tasks, {} faults, size {}) shrunk to {} tasks, {} faults, size {}:\n\
         {small_failure}\n\
         replay it with:\n\
         let report = spool_test::sim::simulate({seed}, &spool_test::sim::Workload::parse(r#\"{small}\"#).unwrap());\n",
        workload.tasks.len(),
        workload.faults.len(),
        workload.size(),
        small.tasks.len(),
        small.faults.len(),
        small.size(),
    )
}
