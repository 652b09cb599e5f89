//! The Rust side of the Python agents benchmark (`benches/python/agents.py`): the same
//! agent as the Python one — an `async` agent making 5 LLM requests — on the same
//! runtime set-up as `spool.Runtime(store=..., llm=spool.fixed("llm", ...))`: a task
//! type registered with `TaskRegistry::with_async` (replayable, durable by replay), an
//! SQLite store opened with its defaults (WAL, `synchronous = NORMAL`), a checkpoint
//! every 500 journal entries, and an LLM executor answering every request at once with
//! the same fixed answer. Prints one JSON line per run.
//!
//! Run with `cargo run --release --example agents_baseline -- AGENTS RUNS DIR`: each
//! of `RUNS` runs submits `AGENTS` agents (one `submit` each, as Python's
//! `Runtime.submit`) on a fresh store in `DIR`, runs until idle and closes the runtime
//! (which waits for the store's last write); the time counted is from the first submit
//! to the close.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use serde_json::{Value, json};
use spool::store::Store;
use spool::{Cx, Kind, NewTask, Outcome, Request, Runtime, TaskError, TaskRegistry, from_fn};

/// LLM requests per agent.
const STEPS: usize = 5;

/// Journal entries between two checkpoints, as `spool.Runtime` sets them.
const CHECKPOINT_EVERY: u64 = 500;

/// The agent: 5 LLM requests in a row, each carrying the step's message; returns the
/// last answer's content.
async fn five_steps(cx: Cx, input: Value) -> Outcome {
    let n = input.get("n").and_then(Value::as_u64).unwrap_or(0);
    let mut last = Value::Null;
    for step in 0..STEPS {
        let payload = json!({
            "messages": [{"role": "user", "content": format!("agent {n}, step {step}")}]
        });
        let answer = cx
            .request(Request::new(Kind::Llm, payload))
            .await
            .map_err(|e| TaskError::failed(format!("the LLM failed: {e}")))?;
        last = answer.get("content").cloned().unwrap_or(Value::Null);
    }
    Ok(json!({"n": n, "last": last}))
}

/// One run's figures.
struct Measured {
    seconds: f64,
    completed: u64,
}

/// Runs `agents` agents to the end on a fresh store at `path`.
fn run_once(agents: u64, path: &Path) -> Result<Measured, String> {
    let registry = TaskRegistry::new().with_async("five", five_steps);
    let store = Store::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let answer = json!({"role": "assistant", "content": "ok"});
    let mut runtime = Runtime::builder()
        .registry(registry.clone())
        .executor(Kind::Llm, from_fn(move |_| Ok(answer.clone())))
        .journal(store.clone())
        .checkpoint_every(CHECKPOINT_EVERY)
        .try_build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let started = Instant::now();
    for n in 0..agents {
        let body = registry
            .make("five", &json!({ "n": n }))
            .map_err(|e| format!("cannot make the agent: {e}"))?;
        runtime
            .submit(NewTask::boxed(body))
            .map_err(|e| format!("the runtime refused agent {n}: {e}"))?;
    }
    let report = runtime.run_until_idle();
    if let Some(error) = runtime.journal_error() {
        return Err(format!("the store failed: {error}"));
    }
    drop(runtime);
    drop(store);
    Ok(Measured {
        seconds: started.elapsed().as_secs_f64(),
        completed: report.stats.completed,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(agents), Some(runs), Some(dir)) = (
        args.first().and_then(|a| a.parse::<u64>().ok()),
        args.get(1).and_then(|a| a.parse::<u32>().ok()),
        args.get(2).map(PathBuf::from),
    ) else {
        eprintln!("usage: agents_baseline AGENTS RUNS DIR");
        return ExitCode::FAILURE;
    };
    for run in 0..runs {
        let path = dir.join(format!("rust-{agents}-{run}.spool"));
        match run_once(agents, &path) {
            Ok(m) if m.completed == agents => {
                let steps = agents * STEPS as u64;
                println!(
                    "{}",
                    json!({
                        "agents": agents,
                        "steps": steps,
                        "seconds": m.seconds,
                        "steps_per_s": steps as f64 / m.seconds,
                    })
                );
            }
            Ok(m) => {
                eprintln!("only {} of {agents} agents completed", m.completed);
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
        for suffix in ["", "-wal", "-shm", ".lock"] {
            let mut name = path.clone().into_os_string();
            name.push(suffix);
            let _ = std::fs::remove_file(name);
        }
    }
    ExitCode::SUCCESS
}
