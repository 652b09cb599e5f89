//! `spool demo`: runs hundreds of scripted ReAct agents on the threaded runtime against
//! simulated LLM and tool executors, shows progress, and prints a summary that checks
//! every agent's answer against its script.

mod agent;
mod executors;
mod progress;
mod script;

use std::collections::BTreeMap;
use std::io::Write;
use std::ops::RangeInclusive;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use spool_core::{Kind, NewTask, OutboundRequest, RequestError, TaskInfo, TaskState, Value};
use spool_runtime::{RunReport, Runtime};

use agent::ReactAgent;
use executors::Simulated;
use progress::Progress;
use script::Script;

/// Simulated LLM latency, before the `--max-latency-ms` cap.
const LLM_LATENCY_MS: RangeInclusive<u64> = 5..=40;
/// Simulated tool latency, before the `--max-latency-ms` cap.
const TOOL_LATENCY_MS: RangeInclusive<u64> = 1..=10;
/// Mismatches shown in detail before the rest are only counted.
const SHOWN_MISMATCHES: usize = 5;

/// The options of `spool demo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DemoOptions {
    /// Agents to run.
    pub(crate) agents: usize,
    /// Seed of the scripts and the simulated latencies.
    pub(crate) seed: u64,
    /// Cap on every simulated latency, in milliseconds.
    pub(crate) max_latency_ms: u64,
    /// No progress lines on stderr.
    pub(crate) quiet: bool,
}

impl Default for DemoOptions {
    fn default() -> DemoOptions {
        DemoOptions {
            agents: 300,
            seed: 42,
            max_latency_ms: *LLM_LATENCY_MS.end(),
            quiet: false,
        }
    }
}

/// `range` with both ends capped at `max`.
fn capped(range: &RangeInclusive<u64>, max: u64) -> RangeInclusive<u64> {
    (*range.start()).min(max)..=(*range.end()).min(max)
}

/// How the tasks ended, and how many answers matched their script.
#[derive(Debug, Default)]
struct Tally {
    completed: usize,
    failed: usize,
    canceled: usize,
    unfinished: usize,
    verified: usize,
    mismatches: Vec<String>,
}

/// Runs the demo and prints its summary; the exit code says whether every check held.
pub(crate) fn run(options: &DemoOptions) -> ExitCode {
    let DemoOptions {
        agents,
        seed,
        max_latency_ms,
        quiet,
    } = *options;
    let llm_ms = capped(&LLM_LATENCY_MS, max_latency_ms);
    let tool_ms = capped(&TOOL_LATENCY_MS, max_latency_ms);
    println!(
        "spool demo: {agents} agents, seed {seed}, simulated latency llm {}-{} ms, tools {}-{} ms",
        llm_ms.start(),
        llm_ms.end(),
        tool_ms.start(),
        tool_ms.end()
    );

    // Requests served, by kind, counted by the executors themselves.
    let served: BTreeMap<&'static str, Arc<AtomicU64>> =
        ["llm", "tool:calc", "tool:read_file", "tool:search"]
            .into_iter()
            .map(|kind| (kind, Arc::new(AtomicU64::new(0))))
            .collect();
    let counter = |kind: &str| served.get(kind).cloned().unwrap_or_default();
    let tool = |name: &str, answer: fn(&OutboundRequest) -> Result<Value, RequestError>| {
        let kind = format!("tool:{name}");
        Simulated::new(seed, &kind, tool_ms.clone(), counter(&kind), answer)
    };
    let mut runtime = Runtime::builder()
        .executor(
            Kind::Llm,
            Simulated::new(
                seed,
                "llm",
                llm_ms.clone(),
                counter("llm"),
                executors::scripted_llm(seed),
            ),
        )
        .executor(Kind::tool("search"), tool("search", executors::search))
        .executor(
            Kind::tool("read_file"),
            tool("read_file", executors::read_file),
        )
        .executor(Kind::tool("calc"), tool("calc", executors::calc))
        .build();

    let scripts: Vec<Script> = (0..agents).map(|i| Script::new(seed, i)).collect();
    for (i, script) in scripts.iter().enumerate() {
        let name = format!("agent-{i}");
        let task = NewTask::new(ReactAgent::new(name.clone(), script.question.clone())).agent(name);
        if let Err(error) = runtime.submit(task) {
            eprintln!("spool demo: could not submit agent-{i}: {error}");
            return ExitCode::FAILURE;
        }
    }

    let progress = if quiet {
        None
    } else {
        match Progress::start(runtime.handle(), agents) {
            Ok(progress) => Some(progress),
            Err(error) => {
                eprintln!("spool demo: no progress display: {error}");
                None
            }
        }
    };
    let report = runtime.run_until_idle();
    let tasks: Vec<TaskInfo> = runtime.scheduler().tasks().collect();
    if let Some(progress) = &progress {
        progress.stop();
    }
    // Dropping the runtime stops its executors and fails any stats query still waiting
    // for the loop, so the progress thread can be joined after it.
    drop(runtime);
    if let Some(progress) = progress {
        progress.finish(&report.stats, report.elapsed);
    }

    let tally = tally(&tasks, &scripts);
    let served: BTreeMap<&str, u64> = served
        .iter()
        .map(|(kind, n)| (*kind, n.load(Ordering::Relaxed)))
        .collect();
    let ok = summary(
        &mut std::io::stdout().lock(),
        agents,
        &report,
        &tally,
        &served,
    );
    match ok {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("spool demo: could not print the summary: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Counts the tasks by final state and checks each completed agent's answer.
fn tally(tasks: &[TaskInfo], scripts: &[Script]) -> Tally {
    let mut tally = Tally::default();
    for task in tasks {
        match &task.state {
            TaskState::Completed(Ok(value)) => {
                tally.completed += 1;
                let script = task
                    .agent
                    .strip_prefix("agent-")
                    .and_then(|n| n.parse::<usize>().ok())
                    .and_then(|i| scripts.get(i));
                match script.map(|script| script.verify(&task.agent, value)) {
                    Some(Ok(())) => tally.verified += 1,
                    Some(Err(why)) => tally.mismatches.push(format!("{}: {why}", task.agent)),
                    None => tally
                        .mismatches
                        .push(format!("{}: not an agent of this run", task.agent)),
                }
            }
            TaskState::Completed(Err(error)) => {
                tally.failed += 1;
                tally
                    .mismatches
                    .push(format!("{}: failed: {error}", task.agent));
            }
            TaskState::Canceled(_) => tally.canceled += 1,
            TaskState::Ready | TaskState::Running | TaskState::Waiting(_) => tally.unfinished += 1,
        }
    }
    tally
}

/// Prints the summary; returns whether every check held.
fn summary(
    out: &mut impl Write,
    agents: usize,
    report: &RunReport,
    tally: &Tally,
    served: &BTreeMap<&str, u64>,
) -> std::io::Result<bool> {
    let stats = &report.stats;
    let unfinished = if tally.unfinished > 0 {
        format!(", {} unfinished", tally.unfinished)
    } else {
        String::new()
    };
    writeln!(
        out,
        "tasks:      {} completed ok, {} failed, {} canceled{unfinished}",
        tally.completed, tally.failed, tally.canceled
    )?;
    let total_served: u64 = served.values().sum();
    let by_kind: Vec<String> = served
        .iter()
        .map(|(kind, n)| format!("{kind}: {n}"))
        .collect();
    writeln!(out, "requests:   {total_served} ({})", by_kind.join(", "))?;
    writeln!(
        out,
        "peaks:      {} tasks ready, {} requests in flight at once",
        stats.peak_ready, stats.peak_in_flight
    )?;
    writeln!(out, "wall time:  {:.3} s", report.elapsed.as_secs_f64())?;
    writeln!(
        out,
        "steps:      {} ({:.0} steps/s)",
        report.steps,
        report.steps_per_second()
    )?;

    let mut ok = true;
    if total_served != stats.requests
        || stats.answers != stats.requests
        || stats.dropped_answers != 0
    {
        ok = false;
        writeln!(
            out,
            "check:      FAILED: the scheduler sent {} requests and took {} answers ({} dropped), executors served {total_served}",
            stats.requests, stats.answers, stats.dropped_answers
        )?;
    }
    let checked =
        tally.verified == agents && tally.mismatches.is_empty() && tally.completed == agents;
    if checked {
        writeln!(
            out,
            "check:      ok, {agents}/{agents} answers match their script (calc results recomputed)"
        )?;
    } else {
        ok = false;
        let missing = agents.saturating_sub(tally.verified + tally.mismatches.len());
        writeln!(
            out,
            "check:      FAILED: {} of {agents} answers match, {} do not, {missing} missing",
            tally.verified,
            tally.mismatches.len()
        )?;
        for mismatch in tally.mismatches.iter().take(SHOWN_MISMATCHES) {
            writeln!(out, "  {mismatch}")?;
        }
        if tally.mismatches.len() > SHOWN_MISMATCHES {
            writeln!(
                out,
                "  … and {} more",
                tally.mismatches.len() - SHOWN_MISMATCHES
            )?;
        }
    }
    Ok(ok)
}
