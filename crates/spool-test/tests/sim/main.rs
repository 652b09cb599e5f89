//! The seeded simulation: many seeds keep every invariant, each fault class is
//! reached, a run replays exactly, and a workload travels as one line.

#![allow(clippy::unwrap_used)]

use spool_test::sim::{FAULT_CLASSES, Workload, check_seeds, simulate};

/// Seeds run: `SPOOL_SIM_SEEDS`, else 1,000.
fn seeds() -> u64 {
    std::env::var("SPOOL_SIM_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000)
}

/// Every seed keeps every invariant, through every fault class, and the counts of the
/// classes reached are printed (`-- --nocapture` shows them).
#[test]
fn seeds_keep_every_invariant_through_every_fault_class() {
    let n = seeds();
    let started = std::time::Instant::now();
    let summary = match check_seeds(0..n) {
        Ok(summary) => summary,
        Err(failure) => panic!("{failure}"),
    };
    println!("{summary}in {:.1?}", started.elapsed());
    assert_eq!(summary.seeds, n);
    for class in FAULT_CLASSES {
        let reached = summary.faults.get(class).copied().unwrap_or(0);
        assert!(
            reached > 0,
            "no seed reached the fault class `{class}`\n{summary}"
        );
    }
}

/// The same seed and workload give the same run: the same figures and trace hash.
#[test]
fn a_seed_runs_the_same_every_time() {
    for seed in [1, 17, 99] {
        let workload = Workload::generate(seed);
        let first = simulate(seed, &workload);
        assert_eq!(first.failure, None);
        assert!(first.tasks > 0 || workload.tasks.is_empty());
        assert_eq!(simulate(seed, &workload), first);
    }
}

/// A workload prints as one line and reads back the same.
#[test]
fn a_workload_travels_as_one_line() {
    let workload = Workload::generate(5);
    let line = workload.to_string();
    assert!(!line.contains('\n'));
    assert_eq!(Workload::parse(&line).unwrap(), workload);
    assert!(Workload::parse("{\"policy\":\"Lifo\"}").is_err());
}
