//! `spool demo`: runs hundreds of ReAct agents on the threaded runtime, shows progress,
//! and prints a summary.
//!
//! Without `OPENAI_BASE_URL` the LLM is the built-in scripted model (seeded latency,
//! some 429s) and the summary checks every agent's answer against its script. With it,
//! the LLM is that OpenAI-compatible endpoint (`OPENAI_API_KEY`, `OPENAI_MODEL`
//! optional): the agents send the same OpenAI-format requests and read the same
//! normalized answers, and the summary reports the answers and checks only that every
//! agent finished with one. The tools are simulated function tools in both modes.
//!
//! Ctrl-C (or SIGTERM) stops a run: the demo says how far it got and, with `--store`,
//! that the same command goes on from there, and exits 130 (a second one ends the
//! process at once).

mod acks;
#[cfg(test)]
mod damage;
pub(crate) mod executors;
mod progress;
mod script;

use std::collections::BTreeMap;
use std::io::Write;
use std::ops::RangeInclusive;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use spool_core::{
    BackoffConfig, Config, Kind, NewTask, OutboundRequest, PolicyChoice, RequestLimits, TaskInfo,
    TaskState,
};
use spool_exec::{AttemptCounts, ConfigError, OpenAiConfig, OpenAiExecutor};
use spool_runtime::{DEFAULT_RETENTION, RunReport, Runtime};
use spool_store::{CrashAt, Store, StoreOptions};

use crate::agent::{ReactAgent, registry, tools};
use crate::cli::{DEMO_AGENTS, DEMO_MAX_LATENCY_MS, DEMO_SEED, DemoArgs};
use executors::{Counted, Simulated};
use progress::Progress;
use script::Script;

/// Simulated LLM latency by default; `--max-latency-ms` sets its upper end.
const LLM_LATENCY_MS: RangeInclusive<u64> = 5..=DEMO_MAX_LATENCY_MS;
/// Simulated tool latency, capped at `--max-latency-ms`.
pub(crate) const TOOL_LATENCY_MS: RangeInclusive<u64> = 1..=10;
/// Mismatches shown in detail before the rest are only counted.
const SHOWN_MISMATCHES: usize = 5;
/// LLM calls at the provider at once (`max-api-calls`, scaled to the demo).
pub(crate) const LLM_IN_FLIGHT: u32 = 32;
/// About one LLM call in this many is first refused with a 429.
const RATE_LIMITED_ONE_IN: u64 = 40;
/// Journal entries between two checkpoints of a store.
const CHECKPOINT_EVERY: u64 = 500;

/// **For crash tests only**: `SPOOL_CRASH_AT=commit:N` or `checkpoint:N` makes the
/// store's writer abort the process inside its Nth commit or checkpoint write
/// ([`CrashAt`]); `crates/spool-cli/tests/crash.rs` uses it. Unset (or not of that
/// form, which is reported and ignored), nothing happens.
const CRASH_AT_VAR: &str = "SPOOL_CRASH_AT";

/// The store's options: the defaults, and the crash tests' moment if one is set.
fn store_options() -> StoreOptions {
    let crash_at =
        std::env::var(CRASH_AT_VAR)
            .ok()
            .and_then(|text| match text.parse::<CrashAt>() {
                Ok(at) => Some(at),
                Err(error) => {
                    tracing::warn!("spool demo: {CRASH_AT_VAR} ignored: {error}");
                    None
                }
            });
    StoreOptions::new().crash_at(crash_at)
}
/// The simulated provider's `Retry-After`.
const RETRY_AFTER: Duration = Duration::from_millis(20);
/// The model asked of a real endpoint when `OPENAI_MODEL` is not set.
const DEFAULT_MODEL: &str = "gpt-4o-mini";
/// Answers shown after a run against a real endpoint before the rest are only counted.
const SHOWN_ANSWERS: usize = 10;
/// The longest answer shown, in characters.
const ANSWER_CHARS: usize = 200;

/// Which LLM the agents talk to.
#[derive(Debug)]
pub(crate) enum Llm {
    /// The built-in scripted model, with simulated latency and 429s.
    Scripted,
    /// A real OpenAI-compatible endpoint, named by `OPENAI_BASE_URL`.
    Real(OpenAiConfig),
}

impl Llm {
    /// The real endpoint if `OPENAI_BASE_URL` is set, else the scripted model.
    ///
    /// # Errors
    /// `OPENAI_BASE_URL` is set but the configuration cannot work (see
    /// [`OpenAiConfig::from_env`]).
    pub(crate) fn from_env() -> Result<Llm, ConfigError> {
        match OpenAiConfig::from_env(DEFAULT_MODEL) {
            Ok(config) => Ok(Llm::Real(config.workers(LLM_IN_FLIGHT as usize))),
            Err(ConfigError::MissingBaseUrl) => Ok(Llm::Scripted),
            Err(error) => Err(error),
        }
    }
}

/// The options of `spool demo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DemoOptions {
    /// Agents to run.
    pub(crate) agents: usize,
    /// Seed of the scripts and the simulated latencies.
    pub(crate) seed: u64,
    /// The slowest simulated call, in milliseconds: the upper end of the LLM's latency
    /// (raised or lowered), and a cap on the tools'.
    pub(crate) max_latency_ms: u64,
    /// No progress lines on stderr.
    pub(crate) quiet: bool,
    /// Journal to this store, and go on from it if it holds a run.
    pub(crate) store: Option<std::path::PathBuf>,
    /// Record the run's journal, with its trace, to this file (for `spool replay`).
    pub(crate) journal: Option<std::path::PathBuf>,
    /// Print `acked N` on stdout as answers become durable (for crash tests).
    pub(crate) report_acks: bool,
    /// How long a finished agent's result is kept before it is evicted.
    pub(crate) retention: Duration,
}

impl Default for DemoOptions {
    fn default() -> DemoOptions {
        DemoOptions {
            agents: DEMO_AGENTS,
            seed: DEMO_SEED,
            max_latency_ms: *LLM_LATENCY_MS.end(),
            quiet: false,
            store: None,
            journal: None,
            report_acks: false,
            retention: DEFAULT_RETENTION,
        }
    }
}

impl From<DemoArgs> for DemoOptions {
    fn from(args: DemoArgs) -> DemoOptions {
        let DemoArgs {
            agents,
            seed,
            max_latency_ms,
            store,
            journal,
            retention_secs,
            report_acks,
            quiet,
        } = args;
        DemoOptions {
            agents,
            seed,
            max_latency_ms,
            quiet,
            store,
            journal,
            report_acks,
            retention: Duration::from_secs(retention_secs),
        }
    }
}

/// `range` with both ends capped at `max`.
fn capped(range: &RangeInclusive<u64>, max: u64) -> RangeInclusive<u64> {
    (*range.start()).min(max)..=(*range.end()).min(max)
}

/// The simulated LLM latency for `--max-latency-ms max`: up to `max`, from the default
/// range's start (or from `max`, if it is below that start). It raises the range as
/// well as lowers it: `400` gives 5-400 ms.
fn llm_latency(max: u64) -> RangeInclusive<u64> {
    (*LLM_LATENCY_MS.start()).min(max)..=max
}

/// How the tasks ended, and how many answers matched their script.
#[derive(Debug, Default)]
struct Tally {
    completed: usize,
    failed: usize,
    canceled: usize,
    unfinished: usize,
    verified: usize,
    /// Agents that ended with their results evicted by the retention since.
    evicted: usize,
    mismatches: Vec<String>,
    /// `(agent, answer)` of every agent that completed, by agent number.
    answers: Vec<(String, String)>,
}

/// Runs the demo and prints its summary; the exit code says whether every check held.
pub(crate) fn run(options: &DemoOptions) -> ExitCode {
    // Before any thread starts, so that every thread inherits the mask and Ctrl-C and
    // SIGTERM wait for the thread that takes them.
    let signals = crate::signals::block();
    let DemoOptions {
        agents,
        seed,
        max_latency_ms,
        quiet,
        ..
    } = *options;
    let llm_ms = llm_latency(max_latency_ms);
    let tool_ms = capped(&TOOL_LATENCY_MS, max_latency_ms);
    let llm = match Llm::from_env() {
        Ok(llm) => llm,
        Err(error) => {
            eprintln!("spool demo: OPENAI_BASE_URL is set but cannot be used: {error}");
            return ExitCode::FAILURE;
        }
    };
    // Requests served, by kind, counted by the executors themselves.
    let served: BTreeMap<&'static str, Arc<AtomicU64>> =
        ["llm", "tool:calc", "tool:read_file", "tool:search"]
            .into_iter()
            .map(|kind| (kind, Arc::new(AtomicU64::new(0))))
            .collect();
    let counter = |kind: &str| served.get(kind).cloned().unwrap_or_default();
    // The tools check their arguments against the schemas the LLM is offered.
    let functions = tools::function_tools();
    let tool = |name: &'static str| {
        let kind = format!("tool:{name}");
        let functions = functions.clone();
        Simulated::new(
            seed,
            &kind,
            tool_ms.clone(),
            counter(&kind),
            move |request: &OutboundRequest| functions.call(name, request.request.payload.value()),
        )
    };
    // Fair share across the agents, at most LLM_IN_FLIGHT calls at the provider, and a
    // back-off on 429s: scaled to the simulated provider's milliseconds, or the default
    // (from 2 s) for a real one.
    let mut backoff = BackoffConfig::default();
    if let Llm::Scripted = llm {
        backoff.base = RETRY_AFTER;
        backoff.max = RETRY_AFTER * 8;
    }
    let config = Config::new()
        .policy(PolicyChoice::FairShare)
        .requests(
            RequestLimits::new()
                .max_in_flight(Kind::Llm, LLM_IN_FLIGHT)
                .backoff(backoff),
        )
        .retention(options.retention);
    let refused = Arc::new(AtomicU64::new(0));
    let llm_peak = Arc::new(AtomicU64::new(0));
    // With a store: go on from the run it holds, if any, journaling every input to it
    // and checkpointing every CHECKPOINT_EVERY entries.
    let store = match &options.store {
        None => None,
        Some(path) => match Store::open_with(path, store_options()) {
            Ok(store) => Some(store),
            Err(error) => {
                eprintln!(
                    "spool demo: cannot open the store {}: {error}",
                    path.display()
                );
                return ExitCode::FAILURE;
            }
        },
    };
    let recovered = match store.as_ref().map(Store::recover) {
        None | Some(Ok(None)) => None,
        Some(Ok(Some(journal))) => Some(journal),
        Some(Err(error)) => {
            eprintln!("spool demo: cannot read the store: {error}");
            return ExitCode::FAILURE;
        }
    };
    // A store of `spool run` is refused before anything is written to it; a new one
    // (or one of the demo's from before the kind was recorded) is stamped the demo's.
    if let (Some(store), Some(path)) = (&store, &options.store) {
        let claimed = crate::stored::claim_kind(
            store,
            path,
            recovered.as_ref(),
            crate::stored::StoreKind::Demo,
            true,
        );
        if let Err(failure) = claimed {
            return failure.report("spool demo");
        }
    }
    match &llm {
        Llm::Scripted => outln!(
            "spool demo: {agents} agents, seed {seed}, simulated latency llm {}-{} ms, tools {}-{} ms",
            llm_ms.start(),
            llm_ms.end(),
            tool_ms.start(),
            tool_ms.end()
        ),
        Llm::Real(config) => outln!(
            "spool demo: {agents} agents, seed {seed}, llm {} (model {}, from OPENAI_BASE_URL), simulated latency tools {}-{} ms",
            config.endpoint(),
            config.model,
            tool_ms.start(),
            tool_ms.end()
        ),
    }
    let mut builder = Runtime::builder().config(config);
    if let Some(journal) = &recovered {
        builder = match builder.recover(journal, &registry()) {
            Ok(builder) => builder,
            Err(error) => {
                eprintln!("spool demo: cannot go on from the store: {error}");
                return ExitCode::FAILURE;
            }
        };
    }
    let recording = options
        .journal
        .as_ref()
        .map(|_| spool_runtime::MemoryJournal::new());
    if let Some(journal) = &recording {
        builder = builder.journal(journal.clone()).journal_trace(true);
    } else if let Some(store) = &store {
        builder = builder
            .journal(store.clone())
            .checkpoint_every(CHECKPOINT_EVERY);
    }
    // The real endpoint's executor, kept to count what it sent (retries included).
    let mut endpoint: Option<OpenAiExecutor> = None;
    let builder = match &llm {
        Llm::Scripted => {
            let scripted = executors::rate_limited(
                seed,
                RATE_LIMITED_ONE_IN,
                RETRY_AFTER,
                refused.clone(),
                executors::scripted_llm(seed),
            );
            builder.executor(
                Kind::Llm,
                Simulated::new(seed, "llm", llm_ms.clone(), counter("llm"), scripted)
                    .with_peak(llm_peak.clone()),
            )
        }
        // `OpenAiExecutor::install` with a count of the requests served, for the
        // summary's check: a pool of LLM_IN_FLIGHT workers sharing one connection pool.
        Llm::Real(config) => {
            let executor = OpenAiExecutor::new(config.clone());
            endpoint = Some(executor.clone());
            let served = counter("llm");
            builder.pool(Kind::Llm, config.workers, move || {
                Counted::new(executor.clone(), served.clone())
            })
        }
    };
    let built = builder
        .executor(Kind::tool("search"), tool("search"))
        .executor(Kind::tool("read_file"), tool("read_file"))
        .executor(Kind::tool("calc"), tool("calc"))
        .try_build();
    // With a store, starting the runtime writes to it: a damaged store can fail here.
    let mut runtime = match built {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("spool demo: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };

    let scripts: Vec<Script> = (0..agents).map(|i| Script::new(seed, i)).collect();
    // Each agent is submitted under its name as its key: an agent the store's run
    // already has, live or ended (even with its result evicted after the retention),
    // is not submitted again.
    if recovered.is_some() {
        let stats = runtime.scheduler().stats();
        outln!(
            "store: resumed at {} with {} tasks, {} answers taken",
            runtime.scheduler().now(),
            runtime.scheduler().len(),
            stats.answers
        );
    }
    // One group for them all: acknowledged together, once durable.
    let mut numbers = Vec::new();
    let mut tasks = Vec::new();
    for (i, script) in scripts.iter().enumerate() {
        let name = format!("agent-{i}");
        if runtime.scheduler().key(&name).is_some() {
            continue;
        }
        numbers.push(i);
        tasks.push(
            NewTask::new(ReactAgent::new(name.clone(), script.question.clone()))
                .agent(name.clone())
                .key(name),
        );
    }
    for (i, submitted) in numbers.into_iter().zip(runtime.submit_all(tasks)) {
        if let Err(error) = submitted {
            eprintln!("spool demo: could not submit agent-{i}: {error}");
            return ExitCode::FAILURE;
        }
    }

    let acks = options
        .report_acks
        .then(|| acks::Acks::start(runtime.handle()));
    let progress = if quiet {
        None
    } else {
        match Progress::start(runtime.handle(), agents) {
            Ok(progress) => Some(progress),
            Err(error) => {
                tracing::warn!("spool demo: no progress display: {error}");
                None
            }
        }
    };
    // Ctrl-C or SIGTERM stops the loop after its turn: what was taken in is durable,
    // and the demo says how far it got (a second one ends the process at once).
    let interrupted = Arc::new(AtomicBool::new(false));
    if let Some(set) = signals {
        let handle = runtime.handle();
        let interrupted = interrupted.clone();
        crate::signals::on_signal(set, quiet, "spool demo", move || {
            interrupted.store(true, Ordering::SeqCst);
            let _ = handle.shutdown();
        });
    }
    let report = runtime.run_until_idle();
    if let Some(error) = runtime.journal_error() {
        eprintln!("spool demo: the store failed: {error}");
        return ExitCode::FAILURE;
    }
    let tasks: Vec<TaskInfo> = runtime.scheduler().tasks().collect();
    // Requests a limiter still holds (some, if a signal stopped the run).
    let held = runtime.scheduler().queue_state().held_requests;
    // Agents that ended and whose results the retention has evicted since: the key
    // record says they ran, not how.
    let evicted = {
        let scheduler = runtime.scheduler();
        let present: std::collections::BTreeSet<&str> =
            tasks.iter().map(|t| t.agent.as_str()).collect();
        (0..agents)
            .map(|i| format!("agent-{i}"))
            .filter(|name| {
                !present.contains(name.as_str())
                    && scheduler.key(name).is_some_and(|k| k.ended_at.is_some())
            })
            .count()
    };
    if let Some(progress) = &progress {
        progress.stop();
    }
    if let Some(acks) = &acks {
        acks.stop();
    }
    // Dropping the runtime stops its executors and fails any stats query still waiting
    // for the loop, so the progress thread can be joined after it.
    drop(runtime);
    if let (Some(path), Some(journal)) = (&options.journal, recording) {
        let written = journal
            .journal()
            .ok_or_else(|| "the journal never started".to_owned())
            .and_then(|j| j.encode().map_err(|e| e.to_string()))
            .and_then(|bytes| std::fs::write(path, bytes).map_err(|e| e.to_string()));
        match written {
            Ok(()) => outln!("journal:    written to {}", path.display()),
            Err(error) => {
                eprintln!(
                    "spool demo: cannot write the journal to {}: {error}",
                    path.display()
                );
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(progress) = progress {
        progress.finish(&report.stats, report.elapsed, held);
    }

    let real = matches!(llm, Llm::Real(_));
    // A real LLM answers as it likes: there is no script to check its answers against.
    let mut tally = tally(&tasks, (!real).then_some(&scripts[..]));
    tally.evicted = evicted;
    let served: BTreeMap<&str, u64> = served
        .iter()
        .map(|(kind, n)| (*kind, n.load(Ordering::Relaxed)))
        .collect();
    if let Some(acks) = acks {
        acks.finish();
    }
    if interrupted.load(Ordering::SeqCst) {
        return stopped(&report, agents, options.store.as_deref());
    }
    let provider = Provider {
        // A real provider's 429s are counted by the scheduler that backed off.
        refused: if real {
            report.stats.rate_limited
        } else {
            refused.load(Ordering::Relaxed)
        },
        llm_peak: llm_peak.load(Ordering::Relaxed),
        resumed: recovered.is_some(),
        real,
        endpoint: endpoint.as_ref().map(OpenAiExecutor::attempts),
    };
    let ok = summary(
        &mut std::io::stdout().lock(),
        agents,
        &report,
        &tally,
        &served,
        &provider,
    );
    match ok {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => crate::output::failed("spool demo", &error),
    }
}

/// The exit status of a demo stopped by Ctrl-C or SIGTERM (128 + SIGINT, as a shell
/// gives a command Ctrl-C ended).
pub(crate) const STOPPED_STATUS: u8 = 130;

/// Says that the run stopped on a signal, how far it got and what was kept, instead of
/// the summary (whose checks are for a finished run); exits [`STOPPED_STATUS`].
fn stopped(report: &RunReport, agents: usize, store: Option<&std::path::Path>) -> ExitCode {
    let stats = &report.stats;
    let done = stats.completed + stats.failed + stats.canceled;
    let kept = match store {
        Some(path) => format!(
            "everything taken in is in {}: the same command goes on from there",
            path.display()
        ),
        None => "nothing was kept (with --store, a run goes on where it stopped)".to_owned(),
    };
    outln!(
        "stopped:    by a signal after {:.3} s, {done} of {agents} agents done, {} requests; {kept}",
        report.elapsed.as_secs_f64(),
        stats.requests
    );
    ExitCode::from(STOPPED_STATUS)
}

/// The number of the agent called `agent-<n>`.
fn agent_number(agent: &str) -> Option<usize> {
    agent.strip_prefix("agent-")?.parse().ok()
}

/// Counts the tasks by final state and, given the scripts, checks each completed
/// agent's answer against its script; without them, takes every answer as it is.
fn tally(tasks: &[TaskInfo], scripts: Option<&[Script]>) -> Tally {
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
struct Provider {
    /// Calls it refused with a 429.
    refused: u64,
    /// The most calls it held at once.
    llm_peak: u64,
    /// Whether this process went on from a store: counts before it are not its own.
    resumed: bool,
    /// Whether it was a real endpoint: its peak is unknown, its answers unscripted.
    real: bool,
    /// What this process sent a real endpoint: every attempt, the executor's own
    /// retries of 5xx and connection errors among them, and its 429s.
    endpoint: Option<AttemptCounts>,
}

/// Prints the summary; returns whether every check held.
fn summary(
    out: &mut impl Write,
    agents: usize,
    report: &RunReport,
    tally: &Tally,
    served: &BTreeMap<&str, u64>,
    provider: &Provider,
) -> std::io::Result<bool> {
    let stats = &report.stats;
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
    )?;
    let total_served: u64 = served.values().sum();
    // The scheduler's count of requests, as the last progress line gives it; by kind,
    // what this process's executors served, less the LLM calls sent again after a 429
    // (the `limits:` line counts those).
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
    )?;
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
    writeln!(out, "wall time:  {:.3} s", report.elapsed.as_secs_f64())?;
    writeln!(
        out,
        "steps:      {} ({:.0} steps/s)",
        report.steps,
        report.steps_per_second()
    )?;

    let mut ok = true;
    // Every request is served once, plus once more for each 429 (counted by this
    // process's executors, so only for a run that did not resume from a store).
    let counted_here =
        total_served != stats.requests + provider.refused || stats.rate_limited != provider.refused;
    if (!provider.resumed && counted_here)
        || stats.answers != stats.requests
        || stats.dropped_answers != 0
    {
        ok = false;
        writeln!(
            out,
            "check:      FAILED: the scheduler sent {} requests, backed off {} times and took {} answers ({} dropped); executors served {total_served} and refused {}",
            stats.requests,
            stats.rate_limited,
            stats.answers,
            stats.dropped_answers,
            provider.refused
        )?;
    }
    if provider.llm_peak > u64::from(LLM_IN_FLIGHT) {
        ok = false;
        writeln!(
            out,
            "check:      FAILED: the provider held {} LLM calls at once, over the limit of {LLM_IN_FLIGHT}",
            provider.llm_peak
        )?;
    }
    // An agent whose result was evicted ran once: its key says so, not its answer.
    let checked = tally.verified + tally.evicted == agents
        && tally.mismatches.is_empty()
        && tally.completed + tally.evicted == agents;
    if provider.real {
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
    }
    if checked && provider.real {
        writeln!(
            out,
            "check:      ok, {agents}/{agents} agents finished with an answer (a real LLM: answers are not checked against scripts)"
        )?;
    } else if checked {
        writeln!(
            out,
            "check:      ok, {}/{agents} answers match their script (calc results recomputed){}",
            tally.verified,
            if tally.evicted > 0 {
                format!(", {} evicted", tally.evicted)
            } else {
                String::new()
            }
        )?;
    } else if provider.real {
        ok = false;
        writeln!(
            out,
            "check:      FAILED: {} of {agents} agents finished with an answer, {} failed, {} unfinished",
            tally.completed, tally.failed, tally.unfinished
        )?;
        for failure in tally.mismatches.iter().take(SHOWN_MISMATCHES) {
            writeln!(out, "  {failure}")?;
        }
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
