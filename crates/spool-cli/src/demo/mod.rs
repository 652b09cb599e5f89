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
mod setup;
mod summary;

use std::ops::RangeInclusive;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use spool_core::{NewTask, TaskInfo};
use spool_durable::CrashAt;
use spool_exec::{ConfigError, OpenAiConfig, OpenAiExecutor};
use spool_runtime::{DEFAULT_RETENTION, MemoryJournal, RunReport, Runtime, RuntimeHandle};

use crate::agent::ReactAgent;
use crate::cli::location::{Location, StoreLocation};
use crate::cli::{DEMO_AGENTS, DEMO_MAX_LATENCY_MS, DEMO_SEED, DemoArgs};
use acks::Acks;
use progress::Progress;
use script::Script;
use setup::{Built, Counters, Latency, Stored};
use summary::{Provider, summary, tally};

/// Simulated LLM latency by default; `--max-latency-ms` sets its upper end.
const LLM_LATENCY_MS: RangeInclusive<u64> = 5..=DEMO_MAX_LATENCY_MS;
/// Simulated tool latency, capped at `--max-latency-ms`.
pub(crate) const TOOL_LATENCY_MS: RangeInclusive<u64> = 1..=10;
/// LLM calls at the provider at once (`max-api-calls`, scaled to the demo).
pub(crate) const LLM_IN_FLIGHT: u32 = 32;
/// About one LLM call in this many is first refused with a 429.
const RATE_LIMITED_ONE_IN: u64 = 40;
/// Journal entries between two checkpoints of a store.
const CHECKPOINT_EVERY: u64 = 500;

/// **For crash tests only**: `SPOOL_CRASH_AT=commit:N` or `checkpoint:N` makes the
/// store's writer (SQLite's or PostgreSQL's) end the process inside its Nth commit or
/// checkpoint write ([`CrashAt`]); `crates/spool-cli/tests/crash.rs` uses it. Unset
/// (or not of that form, which is reported and ignored), nothing happens.
const CRASH_AT_VAR: &str = "SPOOL_CRASH_AT";

/// The crash tests' moment, if one is set.
fn crash_at() -> Option<CrashAt> {
    std::env::var(CRASH_AT_VAR)
        .ok()
        .and_then(|text| match text.parse::<CrashAt>() {
            Ok(at) => Some(at),
            Err(error) => {
                tracing::warn!("spool demo: {CRASH_AT_VAR} ignored: {error}");
                None
            }
        })
}
/// The simulated provider's `Retry-After`.
const RETRY_AFTER: Duration = Duration::from_millis(20);
/// The model asked of a real endpoint when `OPENAI_MODEL` is not set.
const DEFAULT_MODEL: &str = "gpt-4o-mini";

/// Which LLM the agents talk to.
#[derive(Clone, Debug)]
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

    /// The same model, a real endpoint's answers streamed or not.
    pub(crate) fn streaming(self, stream: bool) -> Llm {
        match self {
            Llm::Real(config) => Llm::Real(config.stream(stream)),
            Llm::Scripted => Llm::Scripted,
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
    /// Journal to this store, and go on from it if it holds a run (with neither
    /// option, the one in `SPOOL_DATABASE_URL`, if set and `journal` is not).
    pub(crate) store: StoreLocation,
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
            store: StoreLocation::default(),
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
            location,
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
            store: location,
            journal,
            report_acks,
            retention: Duration::from_secs(retention_secs),
        }
    }
}

impl DemoOptions {
    /// The store the run journals to, if any: the one the options name, or with
    /// neither `--store`, `--postgres` nor `--journal` the one in `SPOOL_DATABASE_URL`.
    fn location(&self) -> Option<Location> {
        if self.journal.is_some() {
            return None;
        }
        self.store.location()
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

/// Runs the demo and prints its summary; the exit code says whether every check held.
pub(crate) fn run(options: &DemoOptions) -> ExitCode {
    run_steps(options).unwrap_or_else(|failed| failed)
}

/// The demo's steps, in order: set up, submit the agents, run them to the end, then
/// report. `Err` is the exit code of a step that failed, having said why.
fn run_steps(options: &DemoOptions) -> Result<ExitCode, ExitCode> {
    // Before any thread starts, so that every thread inherits the mask and Ctrl-C and
    // SIGTERM wait for the thread that takes them.
    let signals = crate::signals::block();
    let latency = Latency::new(options.max_latency_ms);
    let llm = Llm::from_env().map_err(|error| {
        eprintln!("spool demo: OPENAI_BASE_URL is set but cannot be used: {error}");
        ExitCode::FAILURE
    })?;
    let counters = Counters::new();
    let location = options.location();
    // With a store: go on from the run it holds, if any, journaling every input to it
    // and checkpointing every CHECKPOINT_EVERY entries.
    let stored = Stored::open(location.as_ref())?;
    say_start(options, &llm, &latency);
    let Built {
        mut runtime,
        recording,
        endpoint,
    } = setup::build(options, &llm, &latency, &stored, &counters)?;
    let scripts: Vec<Script> = (0..options.agents)
        .map(|i| Script::new(options.seed, i))
        .collect();
    if stored.recovered.is_some() {
        say_resumed(&runtime);
    }
    submit_agents(&mut runtime, &scripts)?;
    let shown = Shown::start(options, &runtime);
    // Ctrl-C or SIGTERM stops the loop after its turn: what was taken in is durable,
    // and the demo says how far it got (a second one ends the process at once).
    let interrupted = Arc::new(AtomicBool::new(false));
    if let Some(set) = signals {
        let stop = stop(runtime.handle(), interrupted.clone());
        crate::signals::on_signal(set, options.quiet, "spool demo", stop);
    }
    let report = runtime.run_until_idle();
    if let Some(error) = runtime.journal_error() {
        eprintln!("spool demo: the store failed: {error}");
        return Err(ExitCode::FAILURE);
    }
    let ended = Ended::read(&runtime, options.agents);
    shown.stop();
    // Dropping the runtime stops its executors and fails any stats query still waiting
    // for the loop, so the progress thread can be joined after it.
    drop(runtime);
    write_journal(options.journal.as_deref(), recording)?;
    shown.finish(&report, ended.held);
    if interrupted.load(Ordering::SeqCst) {
        return Ok(stopped(&report, options.agents, location.as_ref()));
    }
    let real = matches!(llm, Llm::Real(_));
    let provider = Provider {
        // A real provider's 429s are counted by the scheduler that backed off.
        refused: if real {
            report.stats.rate_limited
        } else {
            counters.refused.load(Ordering::Relaxed)
        },
        llm_peak: counters.llm_peak.load(Ordering::Relaxed),
        resumed: stored.recovered.is_some(),
        real,
        endpoint: endpoint.as_ref().map(OpenAiExecutor::attempts),
    };
    Ok(report_summary(
        options, &report, &ended, &scripts, &counters, &provider,
    ))
}

/// Says what runs: the agents, the seed, the LLM and the simulated latencies.
fn say_start(options: &DemoOptions, llm: &Llm, latency: &Latency) {
    let DemoOptions { agents, seed, .. } = *options;
    let Latency {
        llm: llm_ms,
        tool: tool_ms,
    } = latency;
    match llm {
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
}

/// Says where a run the store held goes on from.
fn say_resumed(runtime: &Runtime) {
    let stats = runtime.scheduler().stats();
    outln!(
        "store: resumed at {} with {} tasks, {} answers taken",
        runtime.scheduler().now(),
        runtime.scheduler().len(),
        stats.answers
    );
}

/// Submits an agent for each script, in one group, acknowledged together once durable.
/// Each agent is submitted under its name as its key: an agent the store's run already
/// has, live or ended (even with its result evicted after the retention), is not
/// submitted again. `Err` is the exit code, the agent that could not be submitted said.
fn submit_agents(runtime: &mut Runtime, scripts: &[Script]) -> Result<(), ExitCode> {
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
            return Err(ExitCode::FAILURE);
        }
    }
    Ok(())
}

/// What a signal does: marks the run interrupted and stops the loop after its turn.
fn stop(handle: RuntimeHandle, interrupted: Arc<AtomicBool>) -> impl FnOnce() + Send + 'static {
    move || {
        interrupted.store(true, Ordering::SeqCst);
        let _ = handle.shutdown();
    }
}

/// What the demo shows while it runs: the progress lines on stderr (unless quiet) and
/// the `acked N` lines of `--report-acks`.
struct Shown {
    /// The progress display; dropped before the acks.
    progress: Option<Progress>,
    /// The acknowledgements reported.
    acks: Option<Acks>,
}

impl Shown {
    /// Starts the acks' report, if asked for, then the progress display, unless quiet
    /// (or the terminal cannot show it, which is said).
    fn start(options: &DemoOptions, runtime: &Runtime) -> Shown {
        let acks = options.report_acks.then(|| Acks::start(runtime.handle()));
        let progress = if options.quiet {
            None
        } else {
            match Progress::start(runtime.handle(), options.agents) {
                Ok(progress) => Some(progress),
                Err(error) => {
                    tracing::warn!("spool demo: no progress display: {error}");
                    None
                }
            }
        };
        Shown { progress, acks }
    }

    /// Stops both at the end of the run, before the runtime goes.
    fn stop(&self) {
        if let Some(progress) = &self.progress {
            progress.stop();
        }
        if let Some(acks) = &self.acks {
            acks.stop();
        }
    }

    /// Prints the last progress line, from the run's final counters, and the last acks.
    fn finish(self, report: &RunReport, held: usize) {
        if let Some(progress) = self.progress {
            progress.finish(&report.stats, report.elapsed, held);
        }
        if let Some(acks) = self.acks {
            acks.finish();
        }
    }
}

/// The agents as the run left them.
struct Ended {
    /// Every task the scheduler still has.
    tasks: Vec<TaskInfo>,
    /// Requests a limiter still holds (some, if a signal stopped the run).
    held: usize,
    /// Agents that ended and whose results the retention has evicted since: the key
    /// record says they ran, not how.
    evicted: usize,
}

impl Ended {
    /// Reads the tasks of the run's `agents` from the runtime, after its run.
    fn read(runtime: &Runtime, agents: usize) -> Ended {
        let scheduler = runtime.scheduler();
        let tasks: Vec<TaskInfo> = scheduler.tasks().collect();
        let held = scheduler.queue_state().held_requests;
        let present: std::collections::BTreeSet<&str> =
            tasks.iter().map(|t| t.agent.as_str()).collect();
        let evicted = (0..agents)
            .map(|i| format!("agent-{i}"))
            .filter(|name| {
                !present.contains(name.as_str())
                    && scheduler.key(name).is_some_and(|k| k.ended_at.is_some())
            })
            .count();
        Ended {
            tasks,
            held,
            evicted,
        }
    }
}

/// Writes the journal recorded in memory to `path`, for `--journal`, and says where.
/// `Err` is the exit code, the reason said.
fn write_journal(path: Option<&Path>, recording: Option<MemoryJournal>) -> Result<(), ExitCode> {
    let (Some(path), Some(journal)) = (path, recording) else {
        return Ok(());
    };
    let written = journal
        .journal()
        .ok_or_else(|| "the journal never started".to_owned())
        .and_then(|j| j.encode().map_err(|e| e.to_string()))
        .and_then(|bytes| std::fs::write(path, bytes).map_err(|e| e.to_string()));
    match written {
        Ok(()) => {
            outln!("journal:    written to {}", path.display());
            Ok(())
        }
        Err(error) => {
            eprintln!(
                "spool demo: cannot write the journal to {}: {error}",
                path.display()
            );
            Err(ExitCode::FAILURE)
        }
    }
}

/// Tallies the run and prints the summary; the exit code says whether every check held.
/// A real LLM answers as it likes: there is no script to check its answers against.
fn report_summary(
    options: &DemoOptions,
    report: &RunReport,
    ended: &Ended,
    scripts: &[Script],
    counters: &Counters,
    provider: &Provider,
) -> ExitCode {
    let mut tally = tally(&ended.tasks, (!provider.real).then_some(scripts));
    tally.evicted = ended.evicted;
    let ok = summary(
        &mut std::io::stdout().lock(),
        options.agents,
        report,
        &tally,
        &counters.served_now(),
        provider,
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
fn stopped(report: &RunReport, agents: usize, store: Option<&Location>) -> ExitCode {
    let stats = &report.stats;
    let done = stats.completed + stats.failed + stats.canceled;
    let kept = match store {
        Some(location) => format!(
            "everything taken in is in {}: the same command goes on from there",
            location.name()
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
