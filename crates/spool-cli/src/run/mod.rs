//! `spool run --store PATH` (or `--postgres URL`): the long-running process. It goes
//! on from what the store holds (or starts it), runs its schedules and their runs with
//! the built-in agent — the scripted model of [`model`], or the endpoint in
//! `OPENAI_BASE_URL` — and prints a line per run start and end on stderr. Ctrl-C or SIGTERM stops it cleanly (what was
//! taken in is durable); a kill stops it anywhere, and the next start goes on from the
//! store: that is the store's job.

pub(crate) mod model;
mod watch;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use spool_core::{Config, Executor, Kind, OutboundRequest};
use spool_exec::OpenAiExecutor;
use spool_runtime::{DEFAULT_RETENTION, Runtime, RuntimeBuilder};

use crate::agent::tools;
use crate::cli::RunArgs;
use crate::cli::limits::{LimitArgs, Limits};
use crate::cli::location::StoreLocation;
use crate::demo::executors::Simulated;
use crate::demo::{LLM_IN_FLIGHT, Llm, TOOL_LATENCY_MS};
use crate::limits::Described;
use crate::output::counted;
use crate::signals;
use crate::stored::{Failure, open_limited};

/// The seed of the simulated latencies of `spool run`'s tools.
const SEED: u64 = 4;

/// The options of `spool run`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RunOptions {
    /// The store to run.
    pub(crate) store: StoreLocation,
    /// No lines on stderr but errors.
    pub(crate) quiet: bool,
    /// The scripted model's latency per call.
    pub(crate) llm_latency: Duration,
    /// Whether a real endpoint's answers are streamed.
    pub(crate) stream: bool,
    /// The limits on tasks and requests.
    pub(crate) limits: LimitArgs,
    /// The budgets on LLM spend.
    pub(crate) budgets: crate::cli::budgets::BudgetArgs,
    /// The MCP servers' configuration (`--mcp FILE`), if any.
    pub(crate) mcp: Option<std::path::PathBuf>,
}

impl From<RunArgs> for RunOptions {
    fn from(args: RunArgs) -> RunOptions {
        RunOptions {
            store: args.location,
            quiet: args.quiet,
            llm_latency: args.model.latency(),
            stream: args.model.stream(),
            limits: args.limits,
            budgets: args.budgets,
            mcp: args.mcp.config,
        }
    }
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
        .map_err(|e| Failure::Failed(format!("OPENAI_BASE_URL is set but cannot be used: {e}")))?
        .streaming(options.stream);
    // Before any thread starts, so that every thread inherits the mask and the
    // signals wait for the thread that takes them.
    let signals = signals::block();
    // Stops the MCP servers when this returns, whether stopped or failed.
    let _mcp = crate::mcp::start(options.mcp.as_deref(), "spool run")?;
    let limits = options
        .limits
        .limits()
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let location = options.store.required().map_err(Failure::Usage)?;
    let builder = agent_builder(&llm, options.llm_latency, &limits);
    let builder = match options.budgets.budgets().map_err(Failure::Usage)? {
        Some(budgets) => builder.budgets(budgets),
        None => builder,
    };
    let (builder, otel) = crate::otel::install(builder, &llm, "spool run")?;
    let (mut runtime, store) = open_limited(&location, builder, &limits)?;
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
            started(&runtime, &store.name(), &llm, options.llm_latency)
        );
    }
    let watcher = (!options.quiet).then(|| watch::Watcher::start(handle));
    runtime.run();
    let journal_error = runtime.journal_error().map(|error| error.to_string());
    // The runtime goes before the watcher is joined: a query the watcher sent after
    // the loop's last turn is answered by no one until the runtime drops it (then
    // `Gone`), so joining first could wait for ever.
    drop(runtime);
    crate::otel::finish(otel, "spool run");
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
/// live tasks, the LLM, the limits and the budgets, if any (`1 schedule, 0 live tasks in
/// team.spool; llm the scripted model (20 ms a call); no limits`). `store` is the store's name: the file's
/// path, or the database's URL without its password.
pub(crate) fn started(runtime: &Runtime, store: &str, llm: &Llm, latency: Duration) -> String {
    let core = runtime.scheduler();
    format!(
        "{}, {} in {}; llm {}; {}{}",
        counted(runtime.schedules().len(), "schedule"),
        counted(core.live_len(), "live task"),
        store,
        described_llm(llm, latency),
        Described(core.task_limits(), core.request_limits()),
        crate::cli::budgets::described(core.budgets()),
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

/// The tools of the built-in agent, each served as the kind `tool:NAME`.
pub(crate) const AGENT_TOOLS: [&str; 3] = ["search", "read_file", "calc"];

/// Wraps each executor of the built-in agent as it is registered, by kind: how a
/// cluster node keeps the executors of budgeted kinds to the cluster's budgets.
pub(crate) trait WrapExecutor: Clone + Send + 'static {
    /// What an executor of type `E` becomes.
    type Wrapped<E: Executor>: Executor;

    /// `executor`, which serves `kind`, wrapped.
    fn wrap<E: Executor>(&self, kind: &Kind, executor: E) -> Self::Wrapped<E>;
}

/// Leaves every executor as it is: `spool run`, and `spool serve` on its own.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unwrapped;

impl WrapExecutor for Unwrapped {
    type Wrapped<E: Executor> = E;

    fn wrap<E: Executor>(&self, _kind: &Kind, executor: E) -> E {
        executor
    }
}

/// A runtime builder with the built-in agent's executors: the scripted model (each
/// call taking `llm_latency`) or the endpoint `llm` names, and the demo's tools, under
/// `limits`. `spool run` and `spool serve` both run on it.
pub(crate) fn agent_builder(llm: &Llm, llm_latency: Duration, limits: &Limits) -> RuntimeBuilder {
    agent_builder_with(llm, llm_latency, limits, &Unwrapped)
}

/// [`agent_builder`], with each executor wrapped by `wrap` (every worker's of a pool).
pub(crate) fn agent_builder_with<W: WrapExecutor>(
    llm: &Llm,
    llm_latency: Duration,
    limits: &Limits,
    wrap: &W,
) -> RuntimeBuilder {
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
            wrap.wrap(
                &Kind::Llm,
                Simulated::new(
                    SEED,
                    "llm",
                    latency_ms..=latency_ms,
                    served.clone(),
                    model::reply,
                ),
            ),
        ),
        Llm::Real(config) => {
            let executor = OpenAiExecutor::new(config.clone());
            let wrap = wrap.clone();
            builder.pool(
                Kind::Llm,
                config.workers.min(LLM_IN_FLIGHT as usize),
                move || wrap.wrap(&Kind::Llm, executor.clone()),
            )
        }
    };
    let functions = tools::function_tools();
    #[cfg(feature = "mcp")]
    let builder = match crate::mcp::started() {
        // Each MCP tool's kind is served by a clone: they share the servers.
        Some(mcp) => mcp.tools().iter().fold(builder, |builder, tool| {
            let kind = tool.kind();
            let executor = wrap.wrap(&kind, mcp.clone());
            builder.executor(kind, executor)
        }),
        None => builder,
    };
    AGENT_TOOLS.into_iter().fold(builder, |builder, name| {
        let kind = format!("tool:{name}");
        let functions = functions.clone();
        let tool = Simulated::new(
            SEED,
            &kind,
            TOOL_LATENCY_MS,
            served.clone(),
            move |request: &OutboundRequest| functions.call(name, request.request.payload.value()),
        );
        let kind = Kind::tool(name);
        let tool = wrap.wrap(&kind, tool);
        builder.executor(kind, tool)
    })
}
