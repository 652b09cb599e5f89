//! The demo's summary: how its tasks ended, what was served, the limits held, and the
//! checks of a finished run (every request answered once, the provider's limit kept,
//! every answer matching its script).

use std::collections::BTreeMap;
use std::io::Write;

use spool_core::{Stats, TaskInfo, TaskState};
use spool_exec::AttemptCounts;
use spool_runtime::RunReport;

use super::LLM_IN_FLIGHT;
use super::script::Script;

/// Mismatches shown in detail before the rest are only counted.
const SHOWN_MISMATCHES: usize = 5;
/// Answers shown after a run against a real endpoint before the rest are only counted.
const SHOWN_ANSWERS: usize = 10;
/// The longest answer shown, in characters.
const ANSWER_CHARS: usize = 200;

/// How the tasks ended, and how many answers matched their script.
#[derive(Debug, Default)]
pub(super) struct Tally {
    completed: usize,
    failed: usize,
    canceled: usize,
    unfinished: usize,
    verified: usize,
    /// Agents that ended with their results evicted by the retention since.
    pub(super) evicted: usize,
    mismatches: Vec<String>,
    /// `(agent, answer)` of every agent that completed, by agent number.
    answers: Vec<(String, String)>,
}

/// The number of the agent called `agent-<n>`.
fn agent_number(agent: &str) -> Option<usize> {
    agent.strip_prefix("agent-")?.parse().ok()
}

/// Counts the tasks by final state and, given the scripts, checks each completed
/// agent's answer against its script; without them, takes every answer as it is.
pub(super) fn tally(tasks: &[TaskInfo], scripts: Option<&[Script]>) -> Tally {
    let mut tally = Tally::default();
    for task in tasks {
        match &task.state {
            TaskState::Completed(Ok(value)) => {
                tally.completed += 1;
                let answer = value["answer"].as_str().unwrap_or_default().to_owned();
                tally.answers.push((task.agent.clone(), answer));
                let Some(scripts) = scripts else {
                    tally.verified += 1;
                    continue;
                };
                let script = agent_number(&task.agent).and_then(|i| scripts.get(i));
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
        .answers
        .sort_by_key(|(agent, _)| (agent_number(agent), agent.clone()));
    tally
}

/// What the simulated LLM provider saw.
#[derive(Debug, Default)]
pub(super) struct Provider {
    /// Calls it refused with a 429.
    pub(super) refused: u64,
    /// The most calls it held at once.
    pub(super) llm_peak: u64,
    /// Whether this process went on from a store: counts before it are not its own.
    pub(super) resumed: bool,
    /// Whether it was a real endpoint: its peak is unknown, its answers unscripted.
    pub(super) real: bool,
    /// What this process sent a real endpoint: every attempt, the executor's own
    /// retries of 5xx and connection errors among them, and its 429s.
    pub(super) endpoint: Option<AttemptCounts>,
}

/// Prints the summary; returns whether every check held.
pub(super) fn summary(
    out: &mut impl Write,
    agents: usize,
    report: &RunReport,
    tally: &Tally,
    served: &BTreeMap<&str, u64>,
    provider: &Provider,
) -> std::io::Result<bool> {
    let stats = &report.stats;
    write_tasks(out, tally)?;
    write_requests(out, stats, served, provider)?;
    write_limits(out, stats, provider)?;
    write_time(out, report)?;
    let counted = check_counts(out, stats, served, provider)?;
    let held = check_peak(out, provider)?;
    if provider.real {
        write_answers(out, tally)?;
    }
    let answered = check_answers(out, agents, tally, provider)?;
    Ok(counted && held && answered)
}

/// The `tasks:` line: how the tasks ended.
fn write_tasks(out: &mut impl Write, tally: &Tally) -> std::io::Result<()> {
    let mut unfinished = if tally.unfinished > 0 {
        format!(", {} unfinished", tally.unfinished)
    } else {
        String::new()
    };
    if tally.evicted > 0 {
        unfinished.push_str(&format!(
            ", {} ended with their results evicted after the retention",
            tally.evicted
        ));
    }
    writeln!(
        out,
        "tasks:      {} completed ok, {} failed, {} canceled{unfinished}",
        tally.completed, tally.failed, tally.canceled
    )
}

/// The `requests:` line: the scheduler's count of requests, as the last progress line
/// gives it; by kind, what this process's executors served, less the LLM calls sent
/// again after a 429 (the `limits:` line counts those).
fn write_requests(
    out: &mut impl Write,
    stats: &Stats,
    served: &BTreeMap<&str, u64>,
    provider: &Provider,
) -> std::io::Result<()> {
    let by_kind: Vec<String> = served
        .iter()
        .map(|(kind, n)| {
            let n = if *kind == "llm" {
                n.saturating_sub(provider.refused)
            } else {
                *n
            };
            format!("{kind}: {n}")
        })
        .collect();
    let whose = if provider.resumed {
        "in the whole run; this process: "
    } else {
        ""
    };
    writeln!(
        out,
        "requests:   {} ({whose}{})",
        stats.requests,
        by_kind.join(", ")
    )
}

/// The `peaks:` and `limits:` lines, and for a real endpoint the `server:` line: what
/// the scheduler held at once, what the provider refused, and what the server saw.
fn write_limits(out: &mut impl Write, stats: &Stats, provider: &Provider) -> std::io::Result<()> {
    writeln!(
        out,
        "peaks:      {} tasks ready, {} requests in flight at once",
        stats.peak_ready, stats.peak_in_flight
    )?;
    let seen = if provider.real {
        String::new()
    } else {
        format!(" (the most it saw: {})", provider.llm_peak)
    };
    // 429s past the back-off bounds (a Retry-After over `max_wait`, a request's
    // back-off budget spent) failed their tasks instead of going again.
    let given_up = match provider.endpoint {
        Some(counts) if !provider.resumed => counts.rate_limited.saturating_sub(provider.refused),
        _ => 0,
    };
    let given_up = if given_up > 0 {
        format!("; {given_up} more refused past the back-off bounds and failed to their tasks")
    } else {
        String::new()
    };
    writeln!(
        out,
        "limits:     at most {LLM_IN_FLIGHT} LLM calls at the provider at once{seen}; {} calls refused with 429, backed off and sent again{given_up}",
        provider.refused
    )?;
    if let Some(counts) = provider.endpoint {
        // What the server saw: the requests above, plus the executor's own retries.
        writeln!(
            out,
            "server:     {} requests sent to the server ({} retries of 5xx/connection errors, {} answered 429)",
            counts.attempts, counts.retries, counts.rate_limited
        )?;
    }
    Ok(())
}

/// The `wall time:` and `steps:` lines.
fn write_time(out: &mut impl Write, report: &RunReport) -> std::io::Result<()> {
    writeln!(out, "wall time:  {:.3} s", report.elapsed.as_secs_f64())?;
    writeln!(
        out,
        "steps:      {} ({:.0} steps/s)",
        report.steps,
        report.steps_per_second()
    )
}

/// Checks that every request was served once, plus once more for each 429 (counted by
/// this process's executors, so only for a run that did not resume from a store), and
/// that every answer was taken; says so if not. Returns whether it held.
fn check_counts(
    out: &mut impl Write,
    stats: &Stats,
    served: &BTreeMap<&str, u64>,
    provider: &Provider,
) -> std::io::Result<bool> {
    let total_served: u64 = served.values().sum();
    let counted_here =
        total_served != stats.requests + provider.refused || stats.rate_limited != provider.refused;
    if (!provider.resumed && counted_here)
        || stats.answers != stats.requests
        || stats.dropped_answers != 0
    {
        writeln!(
            out,
            "check:      FAILED: the scheduler sent {} requests, backed off {} times and took {} answers ({} dropped); executors served {total_served} and refused {}",
            stats.requests,
            stats.rate_limited,
            stats.answers,
            stats.dropped_answers,
            provider.refused
        )?;
        return Ok(false);
    }
    Ok(true)
}

/// Checks that the provider never held more LLM calls than the limit; says so if it
/// did. Returns whether it held.
fn check_peak(out: &mut impl Write, provider: &Provider) -> std::io::Result<bool> {
    if provider.llm_peak > u64::from(LLM_IN_FLIGHT) {
        writeln!(
            out,
            "check:      FAILED: the provider held {} LLM calls at once, over the limit of {LLM_IN_FLIGHT}",
            provider.llm_peak
        )?;
        return Ok(false);
    }
    Ok(true)
}

/// The `answers:` a real endpoint gave: the first SHOWN_ANSWERS, each cut at
/// ANSWER_CHARS characters, and how many more there are.
fn write_answers(out: &mut impl Write, tally: &Tally) -> std::io::Result<()> {
    writeln!(out, "answers:")?;
    for (agent, answer) in tally.answers.iter().take(SHOWN_ANSWERS) {
        let mut shown: String = answer.chars().take(ANSWER_CHARS).collect();
        if answer.chars().count() > ANSWER_CHARS {
            shown.push('…');
        }
        writeln!(out, "  {agent}: {shown}")?;
    }
    if tally.answers.len() > SHOWN_ANSWERS {
        writeln!(out, "  … and {} more", tally.answers.len() - SHOWN_ANSWERS)?;
    }
    Ok(())
}

/// The last `check:` line: every agent finished with an answer, matching its script
/// for the scripted model; if not, how many did and the first failures. An agent whose
/// result was evicted ran once: its key says so, not its answer. Returns whether it
/// held.
fn check_answers(
    out: &mut impl Write,
    agents: usize,
    tally: &Tally,
    provider: &Provider,
) -> std::io::Result<bool> {
    let checked = tally.verified + tally.evicted == agents
        && tally.mismatches.is_empty()
        && tally.completed + tally.evicted == agents;
    match (checked, provider.real) {
        (true, true) => writeln!(
            out,
            "check:      ok, {agents}/{agents} agents finished with an answer (a real LLM: answers are not checked against scripts)"
        )?,
        (true, false) => writeln!(
            out,
            "check:      ok, {}/{agents} answers match their script (calc results recomputed){}",
            tally.verified,
            if tally.evicted > 0 {
                format!(", {} evicted", tally.evicted)
            } else {
                String::new()
            }
        )?,
        (false, true) => {
            writeln!(
                out,
                "check:      FAILED: {} of {agents} agents finished with an answer, {} failed, {} unfinished",
                tally.completed, tally.failed, tally.unfinished
            )?;
            for failure in tally.mismatches.iter().take(SHOWN_MISMATCHES) {
                writeln!(out, "  {failure}")?;
            }
        }
        (false, false) => write_mismatches(out, agents, tally)?,
    }
    Ok(checked)
}

/// The `check:` line of scripted answers that do not all match: how many match, how
/// many do not and how many are missing, and the first mismatches.
fn write_mismatches(out: &mut impl Write, agents: usize, tally: &Tally) -> std::io::Result<()> {
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
    Ok(())
}

#[cfg(test)]
mod tests;
