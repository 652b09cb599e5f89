//! A ReAct agent written as `async` code ([`agent`]), run on the threaded runtime with a
//! human in the loop.
//!
//! - The LLM is a scripted executor: it reads the step from the request's payload and
//!   answers deterministically (a plan of three tool calls, then an answer computed
//!   from the observations), so the example needs no network and no API key.
//! - The tools are executors of their own; `weather` is a pool of two threads, so its
//!   two calls of the fan-out run side by side (the order of their log lines may vary;
//!   the agent sees the answers in the order it asked).
//! - The confirmation is answered from another thread through a `RuntimeHandle`: that
//!   thread plays the human, waits for the question, approves it, and shuts the runtime
//!   down once the task has ended. The main thread runs the loop.
//!
//! Run with `cargo run --example react_agent`. It prints each request's outcome as an
//! executor serves it, the question put to the human, the scheduler's trace of the task
//! and the final answer; it exits with an error status if the agent did not complete.

pub mod agent;

use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool::{
    Config, Kind, NewTask, OutboundRequest, RequestError, Runtime, RuntimeError, RuntimeHandle,
    TaskId, TaskState, Trace, from_fn,
};

/// The question the agent is asked.
const QUESTION: &str = "Where should the team have its picnic on Saturday, Lisbon or Porto?";

/// How often the human's thread looks for a question or for the task's end.
const POLL_EVERY: Duration = Duration::from_millis(1);

/// How long the human's thread waits for the task before giving up and shutting the
/// runtime down anyway, so that the example never hangs.
const GIVE_UP_AFTER: Duration = Duration::from_secs(10);

/// Builds the runtime, submits the agent, runs the loop on this thread while another
/// plays the human, then prints the trace and the outcome.
fn main() -> ExitCode {
    let mut runtime = Runtime::builder()
        .config(Config::new().record_trace(true))
        .executor(Kind::Llm, from_fn(scripted_llm))
        .pool(Kind::tool("weather"), 2, || from_fn(weather))
        .executor(Kind::tool("calendar"), from_fn(calendar))
        .executor(Kind::tool(agent::SEND_TOOL), from_fn(send_report))
        .build();

    let id = match runtime.submit(NewTask::new(agent::react_agent(QUESTION.to_owned()))) {
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
        let result = play_the_human(&handle, id);
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
/// appears, and returns once task `id` has ended (or after [`GIVE_UP_AFTER`]); the
/// caller then shuts the runtime down.
///
/// # Errors
/// [`RuntimeError::Gone`] if the runtime was dropped.
fn play_the_human(handle: &RuntimeHandle, id: TaskId) -> Result<(), RuntimeError> {
    let started = Instant::now();
    let mut answered = Vec::new();
    loop {
        let state = handle.query(move |runtime| runtime.task_state(id))?;
        if state.as_ref().is_none_or(TaskState::is_terminal) {
            break;
        }
        if started.elapsed() > GIVE_UP_AFTER {
            eprintln!("[human] task {id} is still {state:?} after {GIVE_UP_AFTER:?}; giving up");
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

/// The scripted LLM: decides from the payload's `step` (see the [`agent`] module for
/// the format).
fn scripted_llm(request: &OutboundRequest) -> Result<Value, RequestError> {
    let payload = request.request.payload.value();
    let answer = match payload["step"].as_str() {
        Some("plan") => json!({
            "thought": "I need Saturday's forecast for both cities and the team's calendar.",
            "actions": [
                {"tool": "weather", "args": {"city": "Lisbon", "day": "Saturday"}},
                {"tool": "weather", "args": {"city": "Porto", "day": "Saturday"}},
                {"tool": "calendar", "args": {"team": "platform", "day": "Saturday"}},
            ],
        }),
        Some("answer") => json!(final_answer(payload)?),
        other => {
            return Err(RequestError::failed(format!(
                "the scripted LLM has no script for step {other:?}"
            )));
        }
    };
    println!("[llm] {} -> {answer}", as_text(&payload["step"]));
    Ok(answer)
}

/// The scripted LLM's answer: the warmest dry city, and when the team is free.
fn final_answer(payload: &Value) -> Result<String, RequestError> {
    let observations = payload["observations"]
        .as_array()
        .ok_or_else(|| RequestError::failed("the answer step came without observations"))?;
    let forecasts: Vec<&Value> = observations
        .iter()
        .filter(|o| o["tool"] == "weather")
        .map(|o| &o["result"])
        .filter(|r| r.is_object())
        .collect();
    let best = forecasts
        .iter()
        .filter(|f| f["forecast"] != "rain")
        .max_by_key(|f| f["high_c"].as_i64().unwrap_or(i64::MIN))
        .ok_or_else(|| RequestError::failed("no dry city among the forecasts"))?;
    let free_from = observations
        .iter()
        .find(|o| o["tool"] == "calendar")
        .and_then(|o| o["result"]["free_from"].as_str())
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
    if payload["report_sent"] == true {
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

/// The `weather` tool: a fixed forecast per city.
fn weather(request: &OutboundRequest) -> Result<Value, RequestError> {
    let args = request.request.payload.value();
    let forecast = match args["city"].as_str() {
        Some("Lisbon") => json!({"city": "Lisbon", "forecast": "sunny", "high_c": 24}),
        Some("Porto") => json!({"city": "Porto", "forecast": "rain", "high_c": 17}),
        _ => {
            return Err(RequestError::InvalidArguments {
                message: format!("no forecast for {}", args["city"]),
            });
        }
    };
    println!("[tool:weather] {args} -> {forecast}");
    Ok(forecast)
}

/// The `calendar` tool: when the team is free.
fn calendar(request: &OutboundRequest) -> Result<Value, RequestError> {
    let args = request.request.payload.value();
    let free = json!({"team": args["team"], "busy": ["standup 09:30-10:45"], "free_from": "11:00"});
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
