//! `spool run --store PATH`: the long-running process. It goes on from what the store
//! holds (or starts it), runs its schedules and their runs with the built-in agent —
//! the scripted model of [`model`], or the endpoint in `OPENAI_BASE_URL` — and prints a
//! line per run start and end on stderr. Ctrl-C or SIGTERM stops it cleanly (what was
//! taken in is durable); a kill stops it anywhere, and the next start goes on from the
//! store: that is the store's job.

pub(crate) mod model;
mod watch;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use spool_core::{Config, Kind, OutboundRequest};
use spool_exec::OpenAiExecutor;
use spool_runtime::{DEFAULT_RETENTION, Runtime, RuntimeBuilder};

use crate::demo::executors::Simulated;
use crate::demo::{LLM_IN_FLIGHT, Llm, TOOL_LATENCY_MS, tools};
use crate::limits::{Described, LimitArgs, Limits};
use crate::output::counted;
use crate::stored::{Failure, open_limited};

/// The seed of the simulated latencies of `spool run`'s tools.
const SEED: u64 = 4;

/// The options of `spool run`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RunOptions {
    /// The store to run.
    pub(crate) store: PathBuf,
    /// No lines on stderr but errors.
    pub(crate) quiet: bool,
    /// The scripted model's latency per call.
    pub(crate) llm_latency: Duration,
    /// The limits on tasks and requests.
    pub(crate) limits: LimitArgs,
}

/// `spool run`.
pub(crate) fn run(options: &RunOptions) -> ExitCode {
    match serve(options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report("spool run"),
    }
}

fn serve(options: &RunOptions) -> Result<(), Failure> {
    let llm = Llm::from_env()
        .map_err(|e| Failure::Failed(format!("OPENAI_BASE_URL is set but cannot be used: {e}")))?;
    // Before any thread starts, so that every thread inherits the mask and the
    // signals wait for the thread that takes them.
    let signals = signals::block();
    let limits = options
        .limits
        .limits()
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let builder = agent_builder(&llm, options.llm_latency, &limits);
    let mut runtime = open_limited(&options.store, builder, &limits)?;
    let handle = runtime.handle();
    if let Some(set) = signals {
        let handle = handle.clone();
        signals::on_signal(set, options.quiet, "spool run", move || {
            let _ = handle.shutdown();
        });
    }
    if !options.quiet {
        tracing::info!(
            "spool run: {}; Ctrl-C to stop",
            started(&runtime, &options.store, &llm, options.llm_latency)
        );
    }
    let watcher = (!options.quiet).then(|| watch::Watcher::start(handle));
    runtime.run();
    let journal_error = runtime.journal_error().map(|error| error.to_string());
    // The runtime goes before the watcher is joined: a query the watcher sent after
    // the loop's last turn is answered by no one until the runtime drops it (then
    // `Gone`), so joining first could wait for ever.
    drop(runtime);
    if let Some(watcher) = watcher {
        watcher.stop();
    }
    if let Some(error) = journal_error {
        return Err(Failure::Failed(format!("the store failed: {error}")));
    }
    if !options.quiet {
        tracing::info!("spool run: stopped; everything taken in is in the store");
    }
    Ok(())
}

/// What `spool run` and `spool serve` say of the store they start on: its schedules and
/// live tasks, the LLM and the limits (`1 schedule, 0 live tasks in team.spool; llm the
/// scripted model (20 ms a call); no limits`).
pub(crate) fn started(runtime: &Runtime, store: &Path, llm: &Llm, latency: Duration) -> String {
    let core = runtime.scheduler();
    format!(
        "{}, {} in {}; llm {}; {}",
        counted(runtime.schedules().len(), "schedule"),
        counted(core.live_len(), "live task"),
        store.display(),
        described_llm(llm, latency),
        Described(core.task_limits(), core.request_limits()),
    )
}

/// The LLM the built-in agent asks, as `spool run` and `spool serve` say it at start:
/// `the scripted model (20 ms a call)`, or the endpoint and its model (the endpoint
/// without its credentials).
pub(crate) fn described_llm(llm: &Llm, llm_latency: Duration) -> String {
    match llm {
        Llm::Scripted => format!("the scripted model ({} ms a call)", llm_latency.as_millis()),
        Llm::Real(config) => format!("{} (model {})", config.endpoint(), config.model),
    }
}

/// A runtime builder with the built-in agent's executors: the scripted model (each
/// call taking `llm_latency`) or the endpoint `llm` names, and the demo's tools, under
/// `limits`. `spool run` and `spool serve` both run on it.
pub(crate) fn agent_builder(llm: &Llm, llm_latency: Duration, limits: &Limits) -> RuntimeBuilder {
    let config = Config::new()
        .retention(DEFAULT_RETENTION)
        .limits(limits.tasks.clone())
        .requests(limits.requests.clone());
    let builder = Runtime::builder().config(config);
    let latency_ms = u64::try_from(llm_latency.as_millis()).unwrap_or(u64::MAX);
    let served = Arc::new(AtomicU64::new(0));
    let builder = match llm {
        Llm::Scripted => builder.executor(
            Kind::Llm,
            Simulated::new(
                SEED,
                "llm",
                latency_ms..=latency_ms,
                served.clone(),
                model::reply,
            ),
        ),
        Llm::Real(config) => {
            let executor = OpenAiExecutor::new(config.clone());
            builder.pool(
                Kind::Llm,
                config.workers.min(LLM_IN_FLIGHT as usize),
                move || executor.clone(),
            )
        }
    };
    let functions = tools::function_tools();
    ["search", "read_file", "calc"]
        .into_iter()
        .fold(builder, |builder, name| {
            let kind = format!("tool:{name}");
            let functions = functions.clone();
            let tool = Simulated::new(
                SEED,
                &kind,
                TOOL_LATENCY_MS,
                served.clone(),
                move |request: &OutboundRequest| {
                    functions.call(name, request.request.payload.value())
                },
            );
            builder.executor(Kind::tool(name), tool)
        })
}

/// Ctrl-C and SIGTERM, taken by a thread of their own (no handler, no unsafe code):
/// the first starts the shutdown, a second ends the process at once. Signals within
/// [`SAME_SIGNAL`](signals::SAME_SIGNAL) of the first are the same signal: `timeout`,
/// a terminal's Ctrl-C or a supervisor may send it to the process and to its group.
#[cfg(unix)]
pub(crate) mod signals {
    use std::time::{Duration, Instant};

    use nix::sys::signal::{SigSet, Signal};

    /// Signals this soon after the first are taken as the same one.
    pub(crate) const SAME_SIGNAL: Duration = Duration::from_secs(1);

    /// Blocks SIGINT and SIGTERM in this thread (and the threads it starts); `None`
    /// if they could not be blocked (they then end the process, as by default).
    pub(crate) fn block() -> Option<SigSet> {
        let mut set = SigSet::empty();
        set.add(Signal::SIGINT);
        set.add(Signal::SIGTERM);
        set.thread_block().ok().map(|()| set)
    }

    /// What a signal after the first does, `since` the first.
    #[derive(Debug, PartialEq, Eq)]
    pub(crate) enum Again {
        /// Within [`SAME_SIGNAL`]: the same signal, nothing more to do.
        Same,
        /// Later: the user means it; the process ends at once.
        Exit,
    }

    /// What a signal `since` the first means.
    pub(crate) fn again(since: Duration) -> Again {
        if since < SAME_SIGNAL {
            Again::Same
        } else {
            Again::Exit
        }
    }

    /// Waits for the signals of `set` on a thread of its own; at the first, runs
    /// `stop` on a thread of its own (so that a later signal is still heard while it
    /// runs).
    pub(crate) fn on_signal(
        set: SigSet,
        quiet: bool,
        command: &'static str,
        stop: impl FnOnce() + Send + 'static,
    ) {
        let spawned = std::thread::Builder::new()
            .name("spool-signals".to_owned())
            .spawn(move || {
                let mut stop = Some(stop);
                let mut first: Option<Instant> = None;
                while let Ok(signal) = set.wait() {
                    if let Some(at) = first {
                        match again(at.elapsed()) {
                            Again::Same => {
                                tracing::debug!("{command}: {signal} again at once; one signal");
                                continue;
                            }
                            Again::Exit => {
                                tracing::warn!("{command}: {signal} again; stopping now");
                                std::process::exit(130);
                            }
                        }
                    }
                    first = Some(Instant::now());
                    if !quiet {
                        tracing::info!("{command}: {signal}; shutting down");
                    }
                    if let Some(stop) = stop.take() {
                        let started = std::thread::Builder::new()
                            .name("spool-shutdown".to_owned())
                            .spawn(stop);
                        if let Err(error) = started {
                            tracing::warn!("{command}: cannot shut down ({error}); stopping now");
                            std::process::exit(130);
                        }
                    }
                }
            });
        if let Err(error) = spawned {
            tracing::warn!("{command}: no signal thread ({error}); Ctrl-C kills the process");
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_signal_within_a_second_of_the_first_is_the_same_one() {
            assert_eq!(again(Duration::ZERO), Again::Same);
            assert_eq!(again(Duration::from_millis(999)), Again::Same);
            assert_eq!(again(Duration::from_secs(1)), Again::Exit);
            assert_eq!(again(Duration::from_secs(60)), Again::Exit);
        }
    }
}

/// Elsewhere, Ctrl-C ends the process as by default; the store keeps what was durable.
#[cfg(not(unix))]
pub(crate) mod signals {
    pub(crate) fn block() -> Option<()> {
        None
    }

    pub(crate) fn on_signal(
        _set: (),
        _quiet: bool,
        _command: &'static str,
        _stop: impl FnOnce() + Send + 'static,
    ) {
    }
}
