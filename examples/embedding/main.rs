//! An application built on spool: an agent that answers a prompt with a model on an
//! OpenAI-compatible endpoint, calling a tool of its own (`word_count`), durable on a
//! store and served over HTTP. `docs/embedding.md` walks through it.
//!
//! ```sh
//! OPENAI_BASE_URL=https://api.openai.com/v1 OPENAI_API_KEY=sk-... APP_TOKEN=change-me \
//!     cargo run --example embedding
//! ```

use std::error::Error;
use std::net::SocketAddr;
use std::path::Path;

use serde_json::{Value, json};
use spool::exec::{FunctionTools, OpenAiConfig, OpenAiExecutor};
use spool::http::{AppState, Server};
use spool::store::Store;
use spool::{Cx, Kind, Outcome, Runtime, TaskError, TaskRegistry};

/// The task type clients submit: `{"type": "assistant", "input": {"prompt": "..."}}`.
pub(crate) const TASK_TYPE: &str = "assistant";

/// What this application records in its store as the store's maker: spool's own
/// commands refuse a store another program made, and this one refuses theirs.
pub(crate) const MAKER: &str = "my-agent";

/// How many times the agent asks the model before it gives up.
const MAX_ROUNDS: usize = 4;

/// The tools the model may call: Rust functions, each with the JSON Schema its
/// arguments are checked against before it runs.
fn tools() -> Result<FunctionTools, Box<dyn Error>> {
    let tools = FunctionTools::new().register(
        "word_count",
        json!({
            "type": "object",
            "description": "How many words a text has.",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        }),
        |args: &Value| {
            let text = args["text"].as_str().unwrap_or_default();
            Ok(json!({"words": text.split_whitespace().count()}))
        },
    )?;
    Ok(tools)
}

/// The agent: asks the model, runs the tools it calls, gives it their answers, and
/// ends with the model's first reply that calls no tool.
async fn assistant(cx: Cx, input: Value, tools: Value) -> Outcome {
    let mut messages = vec![json!({"role": "user", "content": input["prompt"]})];
    for _ in 0..MAX_ROUNDS {
        let reply = cx
            .llm(json!({"messages": messages, "tools": tools}))
            .await?;
        let calls = reply["tool_calls"].as_array().cloned().unwrap_or_default();
        if calls.is_empty() {
            return Ok(reply["content"].clone());
        }
        // The model's turn, in the form the endpoint takes back.
        let asked: Vec<Value> = calls
            .iter()
            .map(|call| {
                json!({"id": call["id"], "type": "function", "function": {
                    "name": call["name"], "arguments": call["arguments"].to_string()}})
            })
            .collect();
        messages
            .push(json!({"role": "assistant", "content": reply["content"], "tool_calls": asked}));
        // Every call at once; the answers come back in the order asked. The tool's
        // name is the model's, read at run time.
        let requests = calls
            .iter()
            .map(|call| {
                let name = call["name"].as_str().unwrap_or_default().to_owned();
                cx.tool(name, call["arguments"].clone())
            })
            .collect();
        for (call, answer) in calls.iter().zip(cx.all(requests).await) {
            let content = match answer {
                Ok(value) => value.to_string(),
                Err(error) => json!({"error": error.to_string()}).to_string(),
            };
            messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": content}));
        }
    }
    Err(TaskError::failed(format!(
        "the model still called tools after {MAX_ROUNDS} rounds"
    )))
}

/// The runtime, durable on the store at `path` (going on from what it holds), and its
/// HTTP API on `addr`, answering requests that carry `token`.
pub(crate) fn start(
    path: &Path,
    addr: SocketAddr,
    llm: OpenAiConfig,
    token: &str,
) -> Result<(Runtime, Server), Box<dyn Error>> {
    let tools = tools()?;
    let definitions = tools.definitions();
    let registry = TaskRegistry::new()
        .with_async(TASK_TYPE, move |cx, input| {
            assistant(cx, input, definitions.clone())
        })
        .with_input_schema(
            TASK_TYPE,
            json!({"type": "object", "required": ["prompt"],
                   "properties": {"prompt": {"type": "string", "minLength": 1}}}),
        );

    let workers = llm.workers;
    let executor = OpenAiExecutor::new(llm);
    let mut builder = Runtime::builder()
        .registry(registry.clone())
        .pool(Kind::Llm, workers, move || executor.clone())
        .tools(tools);
    let store = Store::open(path)?;
    let maker = store.claim_maker(MAKER)?;
    if maker != MAKER {
        return Err(format!("{} was made by {maker}, not by {MAKER}", path.display()).into());
    }
    if let Some(journal) = store.recover()? {
        // Replays what the store holds and sends again what was out when it stopped.
        builder = builder.recover(&journal, &registry)?;
    }
    let (builder, views) = spool::http::publish_views(
        builder.journal(store),
        spool::http::DEFAULT_PUBLISH_EVERY,
        spool::http::DEFAULT_EVENT_RING,
    );
    let runtime = builder.try_build()?;

    let state = AppState::new(runtime.handle(), registry, views, token)?;
    let server = Server::builder().addr(addr).start(state)?;
    Ok((runtime, server))
}

fn main() -> Result<(), Box<dyn Error>> {
    // OPENAI_BASE_URL (required), OPENAI_API_KEY and OPENAI_MODEL (optional).
    let llm = OpenAiConfig::from_env("gpt-4o-mini")?;
    let token = std::env::var("APP_TOKEN").map_err(|_| "set APP_TOKEN: clients send it")?;
    let addr = "127.0.0.1:8080".parse()?;
    let (mut runtime, _server) = start(Path::new("app.spool"), addr, llm, &token)?;
    println!("listening on http://{addr}");
    // Until the process is stopped: every step is in the store, so a killed process
    // started again goes on where it was.
    runtime.run();
    Ok(())
}
