//! What a demo runs on: the counters its executors keep, the store it goes on from,
//! and the runtime, with its configuration, journal and executors.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use spool_core::{
    BackoffConfig, Config, Journal, Kind, OutboundRequest, PolicyChoice, RequestLimits,
};
use spool_durable::DurableStore;
use spool_exec::OpenAiExecutor;
use spool_runtime::{MemoryJournal, Runtime, RuntimeBuilder};

use super::executors::{self, Counted, Simulated};
use super::{
    CHECKPOINT_EVERY, DemoOptions, LLM_IN_FLIGHT, Llm, RATE_LIMITED_ONE_IN, RETRY_AFTER,
    TOOL_LATENCY_MS, capped, crash_at, llm_latency,
};
use crate::agent::{registry, tools};
use crate::cli::location::Location;
use crate::stored::{Access, StoreKind, claim_kind, connect};

/// The simulated latencies of a run: the LLM's and the tools'.
pub(super) struct Latency {
    /// The simulated LLM's, in milliseconds.
    pub(super) llm: RangeInclusive<u64>,
    /// The tools', in milliseconds.
    pub(super) tool: RangeInclusive<u64>,
}

impl Latency {
    /// The latencies for `--max-latency-ms max`.
    pub(super) fn new(max: u64) -> Latency {
        Latency {
            llm: llm_latency(max),
            tool: capped(&TOOL_LATENCY_MS, max),
        }
    }
}

/// What the executors count as they serve, for the summary's checks.
pub(super) struct Counters {
    /// Requests served, by kind, counted by the executors themselves.
    served: BTreeMap<&'static str, Arc<AtomicU64>>,
    /// Calls the simulated provider refused with a 429.
    pub(super) refused: Arc<AtomicU64>,
    /// The most LLM calls the simulated provider held at once.
    pub(super) llm_peak: Arc<AtomicU64>,
}

impl Counters {
    /// Every count at zero.
    pub(super) fn new() -> Counters {
        Counters {
            served: ["llm", "tool:calc", "tool:read_file", "tool:search"]
                .into_iter()
                .map(|kind| (kind, Arc::new(AtomicU64::new(0))))
                .collect(),
            refused: Arc::new(AtomicU64::new(0)),
            llm_peak: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The counter of requests of `kind` served.
    fn served(&self, kind: &str) -> Arc<AtomicU64> {
        self.served.get(kind).cloned().unwrap_or_default()
    }

    /// Requests served so far, by kind.
    pub(super) fn served_now(&self) -> BTreeMap<&'static str, u64> {
        self.served
            .iter()
            .map(|(kind, n)| (*kind, n.load(Ordering::Relaxed)))
            .collect()
    }
}

/// The store of a run given one, and the run it held when opened.
pub(super) struct Stored {
    /// The store, if one was given.
    pub(super) store: Option<Box<dyn DurableStore>>,
    /// The run it holds, if any: the demo goes on from it.
    pub(super) recovered: Option<Journal>,
}

impl Stored {
    /// Opens the store at `location`, if any, reads the run it holds, and claims it
    /// for the demo: a store of `spool run` is refused before anything is written to
    /// it; a new one (or one of the demo's from before the kind was recorded) is
    /// stamped the demo's. `Err` is the exit code, the reason said.
    pub(super) fn open(location: Option<&Location>) -> Result<Stored, ExitCode> {
        let Some(location) = location else {
            return Ok(Stored {
                store: None,
                recovered: None,
            });
        };
        let store = connect(location, Access::Write, crash_at()).map_err(|error| {
            eprintln!(
                "spool demo: cannot open the store {}: {error}",
                location.name()
            );
            ExitCode::FAILURE
        })?;
        let recovered = store.recover().map_err(|error| {
            eprintln!("spool demo: cannot read the store: {error}");
            ExitCode::FAILURE
        })?;
        claim_kind(store.as_ref(), recovered.as_ref(), StoreKind::Demo, true)
            .map_err(|failure| failure.report("spool demo"))?;
        Ok(Stored {
            store: Some(store),
            recovered,
        })
    }
}

/// A runtime built, and what the demo keeps of its parts.
pub(super) struct Built {
    /// The runtime, its agents not submitted yet.
    pub(super) runtime: Runtime,
    /// The journal recorded in memory for `--journal`.
    pub(super) recording: Option<MemoryJournal>,
    /// The real endpoint's executor, kept to count what it sent (retries included).
    pub(super) endpoint: Option<OpenAiExecutor>,
}

/// Builds the runtime: the demo's configuration, going on from the store's run,
/// journaling, and the executors of the LLM and the tools. With a store, starting the
/// runtime writes to it: a damaged store can fail here. `Err` is the exit code, the
/// reason said.
pub(super) fn build(
    options: &DemoOptions,
    llm: &Llm,
    latency: &Latency,
    stored: &Stored,
    counters: &Counters,
) -> Result<Built, ExitCode> {
    let builder = Runtime::builder().config(config(llm, options));
    let (builder, recording) = journaled(builder, options, stored)?;
    let (builder, endpoint) = with_llm(builder, llm, options.seed, latency, counters);
    let runtime = with_tools(builder, options.seed, latency, counters)
        .try_build()
        .map_err(|error| {
            eprintln!("spool demo: cannot start the runtime: {error}");
            ExitCode::FAILURE
        })?;
    Ok(Built {
        runtime,
        recording,
        endpoint,
    })
}

/// Fair share across the agents, at most LLM_IN_FLIGHT calls at the provider, and a
/// back-off on 429s: scaled to the simulated provider's milliseconds, or the default
/// (from 2 s) for a real one.
fn config(llm: &Llm, options: &DemoOptions) -> Config {
    let mut backoff = BackoffConfig::default();
    if let Llm::Scripted = llm {
        backoff.base = RETRY_AFTER;
        backoff.max = RETRY_AFTER * 8;
    }
    Config::new()
        .policy(PolicyChoice::FairShare)
        .requests(
            RequestLimits::new()
                .max_in_flight(Kind::Llm, LLM_IN_FLIGHT)
                .backoff(backoff),
        )
        .retention(options.retention)
}

/// Goes on from the store's run, if it holds one, and journals: to memory (with the
/// trace) for `--journal`, else to the store, checkpointing every CHECKPOINT_EVERY
/// entries. Returns the journal kept in memory, if any.
fn journaled(
    mut builder: RuntimeBuilder,
    options: &DemoOptions,
    stored: &Stored,
) -> Result<(RuntimeBuilder, Option<MemoryJournal>), ExitCode> {
    if let Some(journal) = &stored.recovered {
        builder = builder.recover(journal, &registry()).map_err(|error| {
            eprintln!("spool demo: cannot go on from the store: {error}");
            ExitCode::FAILURE
        })?;
    }
    let recording = options.journal.as_ref().map(|_| MemoryJournal::new());
    if let Some(journal) = &recording {
        builder = builder.journal(journal.clone()).journal_trace(true);
    } else if let Some(store) = &stored.store {
        builder = builder
            .journal(store.sink())
            .checkpoint_every(CHECKPOINT_EVERY);
    }
    Ok((builder, recording))
}

/// The LLM's executor: the scripted model, with its latency and 429s, or the real
/// endpoint's, whose executor is returned to count what it sent.
fn with_llm(
    builder: RuntimeBuilder,
    llm: &Llm,
    seed: u64,
    latency: &Latency,
    counters: &Counters,
) -> (RuntimeBuilder, Option<OpenAiExecutor>) {
    match llm {
        Llm::Scripted => {
            let scripted = executors::rate_limited(
                seed,
                RATE_LIMITED_ONE_IN,
                RETRY_AFTER,
                counters.refused.clone(),
                executors::scripted_llm(seed),
            );
            let builder = builder.executor(
                Kind::Llm,
                Simulated::new(
                    seed,
                    "llm",
                    latency.llm.clone(),
                    counters.served("llm"),
                    scripted,
                )
                .with_peak(counters.llm_peak.clone()),
            );
            (builder, None)
        }
        // `OpenAiExecutor::install` with a count of the requests served, for the
        // summary's check: a pool of LLM_IN_FLIGHT workers sharing one connection pool.
        Llm::Real(config) => {
            let executor = OpenAiExecutor::new(config.clone());
            let served = counters.served("llm");
            let pool = executor.clone();
            let builder = builder.pool(Kind::Llm, config.workers, move || {
                Counted::new(pool.clone(), served.clone())
            });
            (builder, Some(executor))
        }
    }
}

/// The simulated function tools' executors; they check their arguments against the
/// schemas the LLM is offered.
fn with_tools(
    builder: RuntimeBuilder,
    seed: u64,
    latency: &Latency,
    counters: &Counters,
) -> RuntimeBuilder {
    let functions = tools::function_tools();
    let tool = |name: &'static str| {
        let kind = format!("tool:{name}");
        let functions = functions.clone();
        Simulated::new(
            seed,
            &kind,
            latency.tool.clone(),
            counters.served(&kind),
            move |request: &OutboundRequest| functions.call(name, request.request.payload.value()),
        )
    };
    builder
        .executor(Kind::tool("search"), tool("search"))
        .executor(Kind::tool("read_file"), tool("read_file"))
        .executor(Kind::tool("calc"), tool("calc"))
}
