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

/// Runs a shrunk workload that once broke an invariant, and checks it no longer does.
fn keeps_every_invariant(seed: u64, workload: &str) {
    let report = simulate(seed, &Workload::parse(workload).unwrap());
    if let Some(failure) = report.failure {
        panic!("seed {seed}: {failure}");
    }
}

/// A 429 turns the gates on while another task's request is out: the request goes on
/// whether or not the driver took it before, so a journal's replay (which takes
/// nothing) follows the run that was recorded.
#[test]
fn a_429_that_turns_gates_on_replays_from_the_journal() {
    keeps_every_invariant(
        412,
        r#"{"policy":"Fifo","limits":{"max_running":null,"max_running_per_agent":null,"llm_in_flight":null,"llm_window":null,"llm_tokens":null,"tool_in_flight":null,"per_agent_in_flight":null},"tasks":[{"at":869,"agent":0,"priority":0,"deadline":null,"script":[{"Llm":80}]},{"at":0,"agent":1,"priority":1,"deadline":null,"script":[{"Llm":50}]}],"faults":[{"at":1026,"kind":{"Storm":{"count":2,"retry_after":100}}},{"at":1820,"kind":{"Crash":"Journal"}}]}"#,
    );
}

/// A cancel of a task that has already ended changes nothing — not even the clock,
/// which would let a request out at a back-off's end that no journal entry records.
#[test]
fn a_cancel_that_fails_replays_from_the_journal() {
    keeps_every_invariant(
        376,
        r#"{"policy":"Fifo","limits":{"max_running":null,"max_running_per_agent":null,"llm_in_flight":null,"llm_window":null,"llm_tokens":null,"tool_in_flight":null,"per_agent_in_flight":null},"tasks":[{"at":0,"agent":2,"priority":0,"deadline":null,"script":[]},{"at":0,"agent":2,"priority":2,"deadline":null,"script":[{"Llm":100}]}],"faults":[{"at":193,"kind":{"Storm":{"count":4,"retry_after":271}}},{"at":1151,"kind":{"ClockJump":4641}},{"at":2293,"kind":{"Cancel":8}},{"at":2456,"kind":{"Crash":"Journal"}}]}"#,
    );
}

/// Tasks of one agent wait behind its cap on running tasks; the one its cap let back
/// into the queue ends there (its deadline passes) before it gets a slot: the next one
/// the cap holds back takes its place, rather than wait for a slot forever.
#[test]
fn a_task_let_back_by_its_cap_that_ends_queued_lets_the_next_one_back() {
    keeps_every_invariant(
        158599,
        r#"{"policy":"FairShare","limits":{"max_running":2,"max_running_per_agent":1,"llm_in_flight":null,"llm_window":null,"llm_tokens":null,"tool_in_flight":null,"per_agent_in_flight":null},"tasks":[{"at":0,"agent":0,"priority":0,"deadline":null,"script":[]},{"at":1334,"agent":2,"priority":3,"deadline":null,"script":[]},{"at":0,"agent":2,"priority":1,"deadline":1361,"script":[]},{"at":0,"agent":2,"priority":2,"deadline":null,"script":[]},{"at":0,"agent":3,"priority":1,"deadline":null,"script":[{"Both":60}]},{"at":0,"agent":0,"priority":3,"deadline":null,"script":[]},{"at":0,"agent":0,"priority":3,"deadline":null,"script":[{"Llm":60}]},{"at":0,"agent":2,"priority":2,"deadline":null,"script":[]}],"faults":[{"at":556,"kind":{"Storm":{"count":2,"retry_after":100}}},{"at":2933,"kind":{"Cancel":7}}]}"#,
    );
}
