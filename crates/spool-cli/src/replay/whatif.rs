//! `spool replay JOURNAL --policy P --max-running N --limit KIND=SPEC ...`: the
//! journal's workload (its arrivals, and each answer's latency) run again under other
//! scheduling rules in virtual time ([`spool_test::Workload`]), printed beside the
//! recorded run: an aligned table, or JSON with `--json`.
//!
//! The what-if run takes the recorded run's policy and limits, and changes only what
//! the options give: `--policy`, `--max-running`, `--agent-max-in-flight`, and each
//! kind named by a `--limit` (a kind not named keeps its recorded limits).

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};
use spool_core::{Config, Journal, PolicyChoice, RequestLimits, TaskLimits};
use spool_test::{RunStats, Waits, Workload};

use crate::agent::registry;
use crate::cli::limits::Limits;
use crate::cli::replay::{PolicyName, WhatIfArgs};
use crate::limits::Described;
use crate::terminal::safe;

/// Past this many agents the table leaves out the waits by agent (`--json` has them).
const MAX_AGENT_ROWS: usize = 20;
/// Unmatched requests the table names (it counts them all).
const MAX_UNMATCHED_SHOWN: usize = 5;

/// Runs the what-if: exit 0 with the figures printed; 2 for options that do not fit
/// (a kind limited twice, no policy to take from the recording); 1 for a journal that
/// cannot be read or replayed.
pub(super) fn run(path: &Path, args: &WhatIfArgs) -> ExitCode {
    // The options first: a usage error is said before the journal is read.
    if let Err(error) = args.limits.limits() {
        return failed(&Failure::Usage(error.to_string()));
    }
    let journal = match super::load(path) {
        Ok(journal) => journal,
        Err(code) => return code,
    };
    match compare(&path.display().to_string(), &journal, args) {
        Ok(text) => {
            out!("{text}");
            ExitCode::SUCCESS
        }
        Err(failure) => failed(&failure),
    }
}

/// Why a what-if was not run.
#[derive(Debug)]
enum Failure {
    /// The options do not fit (exit 2).
    Usage(String),
    /// The journal's workload cannot be read (exit 1).
    Journal(String),
}

/// Says why on one line; exit 2 for a usage error, 1 otherwise.
fn failed(failure: &Failure) -> ExitCode {
    match failure {
        Failure::Usage(message) => {
            eprintln!("spool replay: {message}");
            ExitCode::from(2)
        }
        Failure::Journal(message) => {
            eprintln!("spool replay: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The what-if of `journal` (named `name`) under `args`: the table, or the JSON.
fn compare(name: &str, journal: &Journal, args: &WhatIfArgs) -> Result<String, Failure> {
    let given = args
        .limits
        .limits()
        .map_err(|error| Failure::Usage(error.to_string()))?;
    let workload = Workload::from_journal(journal, &registry()).map_err(|error| {
        Failure::Journal(format!("{}: {}", safe(name), safe(&error.to_string())))
    })?;
    let policy = policy(args.policy, &workload.recorded().policy).map_err(Failure::Usage)?;
    let (tasks, requests) = rules(&workload, &given);
    let what_if = workload.run_under(
        Config::new()
            .policy(policy)
            .limits(tasks.clone())
            .requests(requests.clone()),
    );
    let report = Report {
        journal: name.to_owned(),
        arrivals: workload.arrivals(),
        recorded: Side {
            stats: workload.recorded(),
            limits: limits_text(workload.task_limits(), workload.request_limits()),
        },
        what_if: Side {
            stats: &what_if,
            limits: limits_text(&tasks, &requests),
        },
    };
    Ok(if args.json {
        format!("{:#}\n", report.json())
    } else {
        report.table()
    })
}

/// The what-if run's policy: `--policy`'s, else the recorded run's, if it is one
/// `--policy` could name.
fn policy(given: Option<PolicyName>, recorded: &str) -> Result<PolicyChoice, String> {
    let name = match (given, recorded) {
        (Some(name), _) => name,
        (None, "fifo") => PolicyName::Fifo,
        (None, "priority") => PolicyName::Priority,
        (None, "fair-share") => PolicyName::FairShare,
        (None, other) => {
            return Err(format!(
                "the recorded run's policy `{}` cannot be set up here: give --policy fifo, \
                 priority or fair-share",
                safe(other)
            ));
        }
    };
    Ok(match name {
        PolicyName::Fifo => PolicyChoice::Fifo,
        PolicyName::Priority => PolicyChoice::Priority,
        PolicyName::FairShare => PolicyChoice::FairShare,
    })
}

/// The what-if run's limits: the recorded run's, with what the options give in place.
fn rules(workload: &Workload, given: &Limits) -> (TaskLimits, RequestLimits) {
    let mut tasks = workload.task_limits().clone();
    if given.tasks.max_running.is_some() {
        tasks.max_running = given.tasks.max_running;
    }
    let mut requests = workload.request_limits().clone();
    for (kind, limits) in &given.requests.kinds {
        requests.kinds.insert(kind.clone(), limits.clone());
    }
    if given.requests.per_agent_in_flight.is_some() {
        requests.per_agent_in_flight = given.requests.per_agent_in_flight;
    }
    for (kind, limits) in &given.requests.agent_kinds {
        requests.agent_kinds.insert(kind.clone(), *limits);
    }
    (tasks, requests)
}

/// Limits as the options write them (`--max-running 5 --limit llm=3`), or `none`.
fn limits_text(tasks: &TaskLimits, requests: &RequestLimits) -> String {
    let text = Described(tasks, requests).to_string();
    match text.strip_prefix("limits ") {
        Some(options) => options.to_owned(),
        None => "none".to_owned(),
    }
}

/// One run's figures, and its limits as text.
struct Side<'a> {
    stats: &'a RunStats,
    limits: String,
}

/// The two runs of a what-if.
struct Report<'a> {
    /// The journal, as named.
    journal: String,
    /// Tasks submitted from outside.
    arrivals: usize,
    recorded: Side<'a>,
    what_if: Side<'a>,
}

/// A duration in milliseconds, to the tenth.
fn ms(duration: Duration) -> String {
    format!("{:.1}ms", duration.as_secs_f64() * 1000.0)
}

/// A duration in milliseconds, as a JSON number (to the microsecond).
fn ms_json(duration: Duration) -> Value {
    json!(duration.as_micros() as f64 / 1000.0)
}

impl Report<'_> {
    /// The aligned table: a row a figure, the recorded run and the what-if run in two
    /// columns; then the waits by agent and the unmatched requests, if any.
    fn table(&self) -> String {
        let (r, w) = (self.recorded.stats, self.what_if.stats);
        let count = |n: u64| n.to_string();
        let mut rows: Vec<[String; 3]> = vec![
            row("", "recorded".to_owned(), "what-if".to_owned()),
            row("policy", r.policy.clone(), w.policy.clone()),
            row(
                "limits",
                self.recorded.limits.clone(),
                self.what_if.limits.clone(),
            ),
            row("tasks", count(r.tasks), count(w.tasks)),
            row("completed", count(r.completed), count(w.completed)),
            row("failed", count(r.failed), count(w.failed)),
            row("canceled", count(r.canceled), count(w.canceled)),
            row("makespan", ms(r.makespan), ms(w.makespan)),
            row("wait p50", ms(r.waits.p50), ms(w.waits.p50)),
            row("wait p95", ms(r.waits.p95), ms(w.waits.p95)),
            row("requests sent", count(r.requests), count(w.requests)),
            row("429s", count(r.rate_limited), count(w.rate_limited)),
            row(
                "peak in flight",
                count(r.peak_in_flight),
                count(w.peak_in_flight),
            ),
            row("unmatched", "-".to_owned(), count(w.unmatched.len() as u64)),
        ];
        let agents = self.agent_rows();
        let mut out = format!(
            "what-if: the workload of {} ({} tasks submitted) under other rules, in virtual time\n\n",
            safe(&self.journal),
            self.arrivals
        );
        match agents {
            Ok(agents) => {
                let at = rows.len();
                rows.extend(agents);
                let text = aligned(&rows);
                // A blank line and a heading between the figures and the waits by agent.
                let mut lines: Vec<&str> = text.lines().collect();
                let heading = "waits by agent (p50 / p95)";
                lines.insert(at, heading);
                lines.insert(at, "");
                for line in lines {
                    let _ = writeln!(out, "{}", line.trim_end());
                }
            }
            Err(note) => {
                out.push_str(&aligned(&rows));
                let _ = writeln!(out, "\n{note}");
            }
        }
        self.unmatched_note(&mut out);
        out
    }

    /// A row per agent (the two runs' waits), or why there are none.
    fn agent_rows(&self) -> Result<Vec<[String; 3]>, String> {
        let (r, w) = (self.recorded.stats, self.what_if.stats);
        let mut names: Vec<&String> = r.agents.keys().chain(w.agents.keys()).collect();
        names.sort();
        names.dedup();
        if names.len() > MAX_AGENT_ROWS {
            return Err(format!(
                "waits by agent: {} agents, more than the table shows (--json lists each)",
                names.len()
            ));
        }
        let waits = |waits: Option<&Waits>| match waits {
            Some(waits) => format!("{} / {}", ms(waits.p50), ms(waits.p95)),
            None => "-".to_owned(),
        };
        Ok(names
            .into_iter()
            .map(|name| {
                let label = if name.is_empty() {
                    "(none)"
                } else {
                    name.as_str()
                };
                let tasks = r.agents.get(name).map_or(0, |a| a.tasks);
                [
                    format!("  {} ({tasks})", safe(label)),
                    waits(r.agents.get(name)),
                    waits(w.agents.get(name)),
                ]
            })
            .collect())
    }

    /// The requests the recorded run never sent, if any, the first few named.
    fn unmatched_note(&self, out: &mut String) {
        let unmatched = &self.what_if.stats.unmatched;
        if unmatched.is_empty() {
            return;
        }
        let named: Vec<String> = unmatched
            .iter()
            .take(MAX_UNMATCHED_SHOWN)
            .map(|u| format!("task {} request {} ({})", u.task, u.number, u.kind))
            .collect();
        let more = unmatched.len().saturating_sub(MAX_UNMATCHED_SHOWN);
        let _ = write!(
            out,
            "\nunmatched: {} requests the recorded run never sent, answered with an error: {}",
            unmatched.len(),
            named.join(", ")
        );
        if more > 0 {
            let _ = write!(out, " and {more} more");
        }
        out.push('\n');
    }

    /// The figures as JSON: `journal`, `arrivals`, and `recorded` and `what_if` with a
    /// run's figures each (durations in milliseconds).
    fn json(&self) -> Value {
        json!({
            "journal": self.journal,
            "arrivals": self.arrivals,
            "recorded": side_json(&self.recorded),
            "what_if": side_json(&self.what_if),
        })
    }
}

/// A table row.
fn row(label: &str, recorded: String, what_if: String) -> [String; 3] {
    [label.to_owned(), recorded, what_if]
}

/// Rows as lines, each column as wide as its widest cell, two spaces between.
fn aligned(rows: &[[String; 3]]) -> String {
    let width = |column: usize| {
        rows.iter()
            .map(|row| row[column].chars().count())
            .max()
            .unwrap_or(0)
    };
    let (first, second) = (width(0), width(1));
    let mut out = String::new();
    for [label, recorded, what_if] in rows {
        let line = format!("{label:<first$}  {recorded:<second$}  {what_if}");
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// One run's figures as JSON.
fn side_json(side: &Side<'_>) -> Value {
    let s = side.stats;
    let waits = |w: &Waits| {
        json!({
            "tasks": w.tasks,
            "p50_ms": ms_json(w.p50),
            "p95_ms": ms_json(w.p95),
            "max_ms": ms_json(w.max),
        })
    };
    json!({
        "policy": s.policy,
        "limits": side.limits,
        "tasks": s.tasks,
        "completed": s.completed,
        "failed": s.failed,
        "canceled": s.canceled,
        "makespan_ms": ms_json(s.makespan),
        "waits": waits(&s.waits),
        "agents": s.agents.iter().map(|(name, w)| (name.clone(), waits(w))).collect::<serde_json::Map<_, _>>(),
        "requests": s.requests,
        "rate_limited": s.rate_limited,
        "peak_in_flight": s.peak_in_flight,
        "unmatched": s.unmatched.iter().map(|u| json!({
            "task": u.task.get(),
            "number": u.number,
            "kind": u.kind.to_string(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests;
