//! A ReAct agent written as `async` code ([`agent`]), run on the threaded runtime with a
//! human in the loop.
//!
//! - The LLM: with `OPENAI_BASE_URL` set (and `OPENAI_API_KEY`, `OPENAI_MODEL` if
//!   needed), that OpenAI-compatible endpoint, through `spool::exec::OpenAiExecutor`;
//!   otherwise a scripted executor that reads the conversation and answers
//!   deterministically (three tool calls, then an answer computed from the tools'
//!   answers), so the example needs no network and no API key. Both answer in the same
//!   normalized format, and the agent is the same.
//! - The tools `weather` and `calendar` are function tools (`spool::exec::FunctionTools`):
//!   Rust closures whose arguments are checked against a JSON schema, and whose
//!   definitions are what the LLM is offered. `weather` is a pool of two threads, so its
//!   two calls of the fan-out run side by side (the order of their log lines may vary;
//!   the agent sees the answers in the order it asked).
//! - The confirmation is answered from another thread through a `RuntimeHandle`: that
//!   thread plays the human, waits for the question, approves it, and shuts the runtime
//!   down once the task has ended. The main thread runs the loop.
//!
//! Run with `cargo run --example react_agent`. It prints which LLM it uses, each
//! request's outcome as an executor serves it, the question put to the human, the
//! scheduler's trace of the task and the final answer; it exits with an error status if
//! the agent did not complete.

pub mod agent;

use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool::exec::{ConfigError, FunctionTools, OpenAiConfig, OpenAiExecutor, SchemaError};
use spool::{
    Config, Kind, NewTask, OutboundRequest, RequestError, Runtime, RuntimeError, RuntimeHandle,
    TaskId, TaskState, Trace, from_fn,
};

/// The question the agent is asked.
const QUESTION: &str = "Where should the team have its picnic on Saturday, Lisbon or Porto?";

/// How often the human's thread looks for a question or for the task's end.
const POLL_EVERY: Duration = Duration::from_millis(1);

/// How long the human's thread waits for the task before giving up and shutting the
/// runtime down anyway, so that the example never hangs (with the scripted model).
const GIVE_UP_AFTER: Duration = Duration::from_secs(10);
/// The same with a real endpoint, whose answers take seconds each.
const GIVE_UP_AFTER_REAL: Duration = Duration::from_secs(300);

/// The model asked of a real endpoint when `OPENAI_MODEL` is not set.
const DEFAULT_MODEL: &str = "gpt-4o-mini";

/// Builds the runtime, submits the agent, runs the loop on this thread while another
/// plays the human, then prints the trace and the outcome.
fn main() -> ExitCode {
    let tools = match function_tools() {
        Ok(tools) => tools,
        Err(error) => {
            eprintln!("a tool's schema is wrong: {error}");
            return ExitCode::FAILURE;
        }
    };
    let builder = Runtime::builder()
        .config(Config::new().record_trace(true))
        .pool(Kind::tool("weather"), 2, {
            let tools = tools.clone();
            move || tools.clone()
        })
        .executor(Kind::tool("calendar"), tools.clone())
        .executor(Kind::tool(agent::SEND_TOOL), from_fn(send_report));
    // The real endpoint if OPENAI_BASE_URL is set, else the scripted model.
    let (builder, give_up_after) = match OpenAiConfig::from_env(DEFAULT_MODEL) {
        Ok(config) => {
            println!(
                "llm: {} (model {}, from OPENAI_BASE_URL)",
                config.endpoint(),
                config.model
            );
            let executor = OpenAiExecutor::new(config);
            (builder.executor(Kind::Llm, executor), GIVE_UP_AFTER_REAL)
        }
        Err(ConfigError::MissingBaseUrl) => {
            println!("llm: the built-in scripted model (set OPENAI_BASE_URL for a real one)");
            (
                builder.executor(Kind::Llm, from_fn(scripted_llm)),
                GIVE_UP_AFTER,
            )
        }
        Err(error) => {
            eprintln!("OPENAI_BASE_URL is set but cannot be used: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut runtime = builder.build();

    let agent = agent::react_agent(QUESTION.to_owned(), tools.definitions());
    let id = match runtime.submit(NewTask::new(agent)) {
        Ok(submission) => submission.id,
        Err(e) => {
            eprintln!("the runtime refused the agent: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("task {id}: {QUESTION}");

    let handle = runtime.handle();
    let human = thread::spawn(move || {
        let shutdown = ShutdownOnDrop(handle.clone());
        let result = play_the_human(&handle, id, give_up_after);
        drop(shutdown);
        result
    });
    let report = runtime.run();
    match human.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("the human's thread lost the runtime: {e}"),
        Err(_) => eprintln!("the human's thread panicked"),
    }

    println!("\ntrace:");
    print!("{}", Trace::render(runtime.scheduler().trace().events()));
    println!("\n{} steps in {:?}", report.steps, report.elapsed);
    match runtime.task_state(id) {
        Some(TaskState::Completed(Ok(value))) => {
            println!("answer: {}", value["answer"]);
            println!("report: {}", value["report"]);
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("the agent did not complete: {other:?}");
            ExitCode::FAILURE
        }
    }
}

/// Shuts the runtime down when dropped: when the human's thread is done, and also if it
/// panics (a closed stdout makes `println!` panic), so that `run` always returns.
struct ShutdownOnDrop(RuntimeHandle);

impl Drop for ShutdownOnDrop {
    fn drop(&mut self) {
        // Gone already means the loop has stopped anyway.
        let _ = self.0.shutdown();
    }
}

/// The human in the loop, on a thread of its own: approves every confirmation as it
/// appears, and returns once task `id` has ended (or after `give_up_after`); the
/// caller then shuts the runtime down.
///
/// # Errors
/// [`RuntimeError::Gone`] if the runtime was dropped.
fn play_the_human(
    handle: &RuntimeHandle,
    id: TaskId,
    give_up_after: Duration,
) -> Result<(), RuntimeError> {
    let started = Instant::now();
    let mut answered = Vec::new();
    loop {
        let state = handle.query(move |runtime| runtime.task_state(id))?;
        if state.as_ref().is_none_or(TaskState::is_terminal) {
            break;
        }
        if started.elapsed() > give_up_after {
            eprintln!("[human] task {id} is still {state:?} after {give_up_after:?}; giving up");
            break;
        }
        for pending in handle.pending_confirmations()? {
            if answered.contains(&pending.key) {
                continue;
            }
            let question = &pending.question;
            println!(
                "[human] asked: {} (to {})",
                as_text(&question["ask"]),
                as_text(&question["to"])
            );
            let findings = question["report"]["findings"].as_array();
            for finding in findings.into_iter().flatten() {
                println!("[human]   report: {finding}");
            }
            println!("[human] answers: yes");
            handle.answer(pending.key, json!(true))?;
            answered.push(pending.key);
        }
        thread::sleep(POLL_EVERY);
    }
    Ok(())
}

/// The scripted LLM: reads the conversation and answers in the LLM executor's
/// normalized format. Before any tool has answered, it calls three tools at once; after,
/// it answers from what they said.
fn scripted_llm(request: &OutboundRequest) -> Result<Value, RequestError> {
    let payload = request.request.payload.value();
    let messages = payload["messages"]
        .as_array()
        .ok_or_else(|| RequestError::failed("the request has no `messages` list"))?;
    let answered = messages.iter().any(|m| m["role"] == "tool");
    let answer = if answered {
        let text = final_answer(messages)?;
        json!({"content": text, "tool_calls": [], "finish_reason": "stop", "usage": null})
    } else {
        json!({
            "content": "I need Saturday's forecast for both cities and the team's calendar.",
            "tool_calls": [
                {"id": "call_1", "name": "weather", "arguments": {"city": "Lisbon", "day": "Saturday"}},
                {"id": "call_2", "name": "weather", "arguments": {"city": "Porto", "day": "Saturday"}},
                {"id": "call_3", "name": "calendar", "arguments": {"team": "platform", "day": "Saturday"}},
            ],
            "finish_reason": "tool_calls",
            "usage": null,
        })
    };
    println!("[llm] -> {answer}");
    Ok(answer)
}

/// The scripted LLM's answer: the warmest dry city, when the team is free, and whether
/// the report was sent, from the tools' answers in `messages`.
fn final_answer(messages: &[Value]) -> Result<String, RequestError> {
    // Which tool each call id was, from the assistant's tool calls.
    let calls: Vec<(&Value, &Value)> = messages
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .map(|call| (&call["id"], &call["function"]["name"]))
        .collect();
    let answers_of = |tool: &str| -> Vec<Value> {
        messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .filter(|m| {
                calls
                    .iter()
                    .any(|(id, name)| **id == m["tool_call_id"] && *name == tool)
            })
            .filter_map(|m| m["content"].as_str())
            .filter_map(|text| serde_json::from_str::<Value>(text).ok())
            .filter(|answer| answer.get("error").is_none())
            .collect()
    };
    let forecasts = answers_of("weather");
    let best = forecasts
        .iter()
        .filter(|f| f["forecast"] != "rain")
        .max_by_key(|f| f["high_c"].as_i64().unwrap_or(i64::MIN))
        .ok_or_else(|| RequestError::failed("no dry city among the forecasts"))?;
    let calendar = answers_of("calendar");
    let free_from = calendar
        .first()
        .and_then(|c| c["free_from"].as_str())
        .unwrap_or("any time");
    let others: Vec<String> = forecasts
        .iter()
        .filter(|f| f["city"] != best["city"])
        .map(|f| {
            format!(
                "{}: {}, {} °C",
                as_text(&f["city"]),
                as_text(&f["forecast"]),
                f["high_c"]
            )
        })
        .collect();
    let mut answer = format!(
        "{}: {}, {} °C on Saturday, and the team is free from {free_from} ({}).",
        as_text(&best["city"]),
        as_text(&best["forecast"]),
        best["high_c"],
        others.join("; ")
    );
    let told = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    if told.starts_with(agent::REPORT_SENT) {
        answer.push_str(" The report has been sent.");
    } else {
        answer.push_str(" The report was not sent.");
    }
    Ok(answer)
}

/// A JSON string's text, or the JSON of anything else.
fn as_text(value: &Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

/// The tools the LLM is offered, as function tools: `weather` and `calendar`, each with
/// the schema of its arguments.
///
/// # Errors
/// A schema that does not compile (none does, as written).
fn function_tools() -> Result<FunctionTools, SchemaError> {
    FunctionTools::new()
        .register(
            "weather",
            json!({
                "type": "object",
                "description": "The forecast for a city on a day: the sky and the high in °C.",
                "properties": {
                    "city": {"type": "string", "description": "The city, e.g. Lisbon."},
                    "day": {"type": "string", "description": "The day, e.g. Saturday."},
                },
                "required": ["city"],
                "additionalProperties": false,
            }),
            weather,
        )?
        .register(
            "calendar",
            json!({
                "type": "object",
                "description": "When the team is busy and free on a day.",
                "properties": {
                    "team": {"type": "string", "description": "The team, e.g. platform."},
                    "day": {"type": "string", "description": "The day, e.g. Saturday."},
                },
                "required": ["day"],
                "additionalProperties": false,
            }),
            calendar,
        )
}

/// The `weather` tool: a fixed forecast per city.
fn weather(args: &Value) -> Result<Value, String> {
    let city = args["city"].as_str().unwrap_or_default().to_lowercase();
    let forecast = if city.starts_with("lisbon") || city.starts_with("lisboa") {
        json!({"city": "Lisbon", "forecast": "sunny", "high_c": 24})
    } else if city.starts_with("porto") || city.starts_with("oporto") {
        json!({"city": "Porto", "forecast": "rain", "high_c": 17})
    } else {
        return Err(format!("no forecast for {}", args["city"]));
    };
    println!("[tool:weather] {args} -> {forecast}");
    Ok(forecast)
}

/// The `calendar` tool: when the team is free.
fn calendar(args: &Value) -> Result<Value, String> {
    let team = args
        .get("team")
        .cloned()
        .unwrap_or_else(|| json!("platform"));
    let free = json!({"team": team, "busy": ["standup 09:30-10:45"], "free_from": "11:00"});
    println!("[tool:calendar] {args} -> {free}");
    Ok(free)
}

/// The side-effecting tool: "sends" the report (prints it) and hands back a receipt.
fn send_report(request: &OutboundRequest) -> Result<Value, RequestError> {
    let args = request.request.payload.value();
    let receipt = json!("msg-0001");
    println!(
        "[tool:{}] sent to {} -> {receipt}",
        agent::SEND_TOOL,
        args["to"]
    );
    Ok(receipt)
}
