//! A first spool program: ten agents, each asking an LLM and then a tool, on the
//! threaded runtime with two executors — one answering at once, one answering later
//! from a thread of its own, as an HTTP client would.
//!
//! Run with `cargo run --example quickstart`.

use std::thread;
use std::time::Duration;

use serde_json::{Value, json};
use spool::{
    AgentTask, Executor, Kind, NewTask, OutboundRequest, Replies, RequestError, Response,
    RunReport, Runtime, Step, TaskContext, TaskState, from_fn,
};

/// Asks the LLM for a word, then has the `upper` tool shout it.
enum Shouter {
    Start(u32),
    AskedLlm,
    AskedTool,
}

impl AgentTask for Shouter {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        match *self {
            Shouter::Start(n) => {
                cx.llm(json!({ "prompt": format!("give me word number {n}") }));
                *self = Shouter::AskedLlm;
                Step::Wait
            }
            Shouter::AskedLlm => match cx.take_answer().map(|a| a.result) {
                Some(Ok(word)) => {
                    cx.tool("upper", word);
                    *self = Shouter::AskedTool;
                    Step::Wait
                }
                Some(Err(e)) => Step::fail(format!("the LLM failed: {e}")),
                None => Step::fail("resumed without an answer"),
            },
            Shouter::AskedTool => match cx.take_answer() {
                Some(answer) => {
                    Step::Done(answer.result.map_err(|e| e.into_task_error(answer.number)))
                }
                None => Step::fail("resumed without an answer"),
            },
        }
    }

    fn type_name(&self) -> &'static str {
        "shouter"
    }
}

/// The words the stand-in LLM gives, one per agent: agent `n` asks for word number `n`.
const WORDS: [&str; 10] = [
    "apple", "birch", "cedar", "delta", "ember", "fjord", "grove", "heron", "iris", "juniper",
];

/// The stand-in LLM: the word whose number ends the prompt.
fn word_for(prompt: &str) -> Result<Value, RequestError> {
    let number = prompt
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse::<usize>().ok());
    match number.and_then(|n| WORDS.get(n)) {
        Some(word) => Ok(json!(word)),
        None => Err(RequestError::InvalidArguments {
            message: format!("no word number in {prompt:?}"),
        }),
    }
}

/// Answers each request 10 ms later from a thread of its own.
struct SlowUpper;

impl Executor for SlowUpper {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        let replier = replies.replier();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(10));
            let text = request
                .request
                .payload
                .as_str()
                .unwrap_or_default()
                .to_uppercase();
            replier.send(Response::ok(request.key, Value::from(text)));
        });
    }
}

/// Runs the ten agents to the end; a line for each task, in the order submitted,
/// then the run's figures.
pub(crate) fn run() -> (Vec<String>, RunReport) {
    let mut runtime = Runtime::builder()
        .executor(
            Kind::Llm,
            from_fn(|request| {
                word_for(
                    request.request.payload["prompt"]
                        .as_str()
                        .unwrap_or_default(),
                )
            }),
        )
        .executor(Kind::tool("upper"), SlowUpper)
        .build();

    let ids: Vec<_> = (0..10)
        .filter_map(|n| {
            runtime
                .submit(NewTask::new(Shouter::Start(n)).agent(format!("agent-{n}")))
                .ok()
        })
        .map(|submission| submission.id)
        .collect();
    let report = runtime.run_until_idle();

    let lines = ids
        .into_iter()
        .map(|id| match runtime.task_state(id) {
            Some(TaskState::Completed(Ok(value))) => format!("task {id}: {value}"),
            Some(other) => format!("task {id}: {other}"),
            None => format!("task {id}: no longer kept"),
        })
        .collect();
    (lines, report)
}

fn main() {
    let (lines, report) = run();
    for line in lines {
        println!("{line}");
    }
    println!("{} steps in {:?}", report.steps, report.elapsed);
}
