//! Shrinking a failing workload: smaller and smaller workloads are tried — a task
//! less, a fault less, a step less, a limit or a deadline less, the plain policy — and
//! each one that still breaks the same kind of invariant is kept, until none does.

use super::report::SimFailure;
use super::simulate;
use super::workload::{Op, SimPolicy, Workload};

/// Tries at most this many workloads.
const MAX_TRIES: usize = 2_000;

/// The smallest workload found that, run with `seed`, still breaks the same kind of
/// invariant as `failure` did with `workload`, and its failure.
pub fn shrink(seed: u64, workload: &Workload, failure: &SimFailure) -> (Workload, SimFailure) {
    let class = failure.violation.class();
    let mut best = (workload.clone(), failure.clone());
    let mut tries = 0;
    'smaller: loop {
        for candidate in smaller(&best.0) {
            tries += 1;
            if tries > MAX_TRIES {
                break 'smaller;
            }
            let report = simulate(seed, &candidate);
            if let Some(found) = report.failure.filter(|f| f.violation.class() == class) {
                best = (candidate, found);
                continue 'smaller;
            }
        }
        break;
    }
    best
}

/// A change that leaves a limit out.
type Cut = fn(&mut Workload);

/// The workloads one change smaller than `w`, the biggest cuts first.
fn smaller(w: &Workload) -> Vec<Workload> {
    let mut out = Vec::new();
    for i in 0..w.tasks.len() {
        let mut c = w.clone();
        c.tasks.remove(i);
        out.push(c);
    }
    for i in 0..w.faults.len() {
        let mut c = w.clone();
        c.faults.remove(i);
        out.push(c);
    }
    for t in 0..w.tasks.len() {
        for script in fewer_ops(&w.tasks[t].script) {
            let mut c = w.clone();
            c.tasks[t].script = script;
            out.push(c);
        }
        if w.tasks[t].deadline.is_some() {
            let mut c = w.clone();
            c.tasks[t].deadline = None;
            out.push(c);
        }
        if w.tasks[t].at > 0 {
            let mut c = w.clone();
            c.tasks[t].at /= 2;
            out.push(c);
        }
    }
    let limits = &w.limits;
    let cuts: [(bool, Cut); 9] = [
        (limits.max_running.is_some(), |c| {
            c.limits.max_running = None
        }),
        (limits.max_running_per_agent.is_some(), |c| {
            c.limits.max_running_per_agent = None;
        }),
        (limits.llm_in_flight.is_some(), |c| {
            c.limits.llm_in_flight = None
        }),
        (limits.llm_window.is_some(), |c| c.limits.llm_window = None),
        (limits.llm_tokens.is_some(), |c| c.limits.llm_tokens = None),
        (limits.tool_in_flight.is_some(), |c| {
            c.limits.tool_in_flight = None
        }),
        (limits.per_agent_in_flight.is_some(), |c| {
            c.limits.per_agent_in_flight = None;
        }),
        (limits.llm_agent_in_flight.is_some(), |c| {
            c.limits.llm_agent_in_flight = None;
        }),
        (limits.llm_agent_window.is_some(), |c| {
            c.limits.llm_agent_window = None;
        }),
    ];
    for (set, cut) in cuts {
        if set {
            let mut c = w.clone();
            cut(&mut c);
            out.push(c);
        }
    }
    if w.policy != SimPolicy::Fifo {
        let mut c = w.clone();
        c.policy = SimPolicy::Fifo;
        out.push(c);
    }
    out
}

/// The scripts one step shorter than `ops`: a step left out, or a child's script one
/// step shorter, or a child's step in place of the spawn.
fn fewer_ops(ops: &[Op]) -> Vec<Vec<Op>> {
    let mut out = Vec::new();
    for i in 0..ops.len() {
        let mut c = ops.to_vec();
        c.remove(i);
        out.push(c);
        if let Op::Spawn(child) = &ops[i] {
            for shorter in fewer_ops(child) {
                let mut c = ops.to_vec();
                c[i] = Op::Spawn(shorter);
                out.push(c);
            }
            let mut c = ops.to_vec();
            c.splice(i..=i, child.iter().cloned());
            out.push(c);
        }
    }
    out
}
