//! The planted bug (the `planted-bug` feature: a gate lets one request past its cap of
//! requests in flight) is caught by the simulation, shrunk to a small workload, and
//! replayed from the line printed. Run with
//! `cargo test -p spool-test --features planted-bug --test sim_planted -- --nocapture`.

#![allow(clippy::unwrap_used)]

use spool_test::sim::{Violation, Workload, check_seeds, simulate};

#[test]
fn the_planted_bug_is_caught_shrunk_and_replayed() {
    let failure = check_seeds(0..1_000).unwrap_err();
    let printout = failure.to_string();
    println!("{printout}");
    // The line that replays the shrunk case, as printed.
    let line = printout
        .lines()
        .find_map(|l| l.split("Workload::parse(r#\"").nth(1))
        .and_then(|rest| rest.split("\"#)").next())
        .unwrap();
    let seed: u64 = printout
        .strip_prefix("seed ")
        .and_then(|rest| rest.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(seed, failure.seed);
    let shrunk = Workload::parse(line).unwrap();
    assert!(
        shrunk.tasks.len() <= 3,
        "shrunk to {} tasks",
        shrunk.tasks.len()
    );
    assert!(
        shrunk.faults.len() <= 1,
        "shrunk to {} faults",
        shrunk.faults.len()
    );
    let replayed = simulate(seed, &shrunk).failure.unwrap();
    // Caught as a cap exceeded: by the observer of what went out, or by
    // `check_invariants` on the gate.
    let caught = match &replayed.violation {
        Violation::Limit(what) => what.contains("over the cap of"),
        Violation::Invariant(error) => error.to_string().contains("gate's requests in flight"),
        _ => false,
    };
    assert!(caught, "replayed as {replayed}");
}
