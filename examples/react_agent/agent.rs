//! A ReAct agent (reason, act, observe) written as straight-line `async` code, speaking
//! the OpenAI chat format so that it runs against a real endpoint as it does against
//! the example's scripted model.
//!
//! One run of [`react_agent`]:
//!
//! 1. **Reason.** One LLM call with the question and the tools on offer (OpenAI
//!    function definitions); the LLM answers with 1 to [`MAX_ACTIONS`] tool calls, or
//!    with the answer straight away.
//! 2. **Act.** The tool calls go out together in one step (`cx.all`), and their answers
//!    come back in the order asked, whatever order they arrived in. A tool's error is an
//!    observation like any other, not a failure of the agent; so is a call of a tool
//!    that was not offered: it is not made, and the LLM is told "there is no tool named
//!    `x`", as the demo's agent tells it.
//! 3. **Confirm.** Sending the report is the one side effect, so a human is asked first
//!    (`cx.confirm`). Only the answer `true` approves; anything else declines, and then
//!    the report is not sent.
//! 4. **Answer.** A last LLM call, with the tools' answers and what became of the
//!    report, and `"tool_choice": "none"`, gives the answer.
//!
//! The task ends with `{"answer": <the LLM's text>, "report": <what became of it>}`,
//! where the report is `{"status": "sent", "to": .., "receipt": ..}`,
//! `{"status": "declined", "to": .., "reason": ..}`, or `{"status": "skipped", "to": ..,
//! "reason": ..}` when the LLM answered without calling a tool.
//!
//! The agent only awaits spool (requests and a confirmation): it does no I/O of its own,
//! so it runs the same on the threaded `Runtime` (the example's `main.rs`) and under
//! `TestScheduler` (the test `tests/core/react_agent.rs`, which includes this file).
//!
//! # What the LLM is sent and must answer
//!
//! Sent: `{"messages": [..], "tools": [..]}` in the OpenAI chat format (the final call
//! adds `"tool_choice": "none"`). Answered, as `spool::exec::OpenAiExecutor` normalizes
//! a provider's reply: `{"content": "text" | null, "tool_calls": [{"id": "call_1",
//! "name": "weather", "arguments": {..}}], "finish_reason": .., "usage": ..}`.

use serde_json::{Value, json};
use spool::{AsyncTask, Cx, Outcome, TaskError, async_task};

/// The most tool calls the first answer may make (they all go out at once).
pub const MAX_ACTIONS: usize = 8;

/// The side-effecting tool, called only after the human approved; never offered to
/// the LLM.
pub const SEND_TOOL: &str = "send_report";

/// Who the report goes to.
pub const REPORT_TO: &str = "team@example.com";

/// The system prompt.
pub const SYSTEM: &str = "You help a team plan outings. Call the tools you need, several at \
     once when they do not depend on each other; then answer in one or two sentences.";

/// How the last user message starts when the report was sent; followed by the address.
pub const REPORT_SENT: &str = "The report of your findings was sent to";

/// How the last user message starts when the report was not sent; followed by why.
pub const REPORT_NOT_SENT: &str = "The report of your findings was not sent:";

/// The agent for `question`, offering the LLM the tools `tools` (an OpenAI `tools`
/// array, such as `spool::exec::FunctionTools::definitions`), as a task to submit to a
/// scheduler or runtime. It calls only tools named in `tools`.
pub fn react_agent(question: String, tools: Value) -> AsyncTask {
    async_task("react_agent", move |cx| run(cx, question, tools))
}

/// One tool call the LLM asked for.
struct Action {
    id: String,
    tool: String,
    args: Value,
    /// Whether `tool` is one of the tools offered; only those are called.
    offered: bool,
}

/// The whole agent: reason, act, confirm, answer.
async fn run(cx: Cx, question: String, tools: Value) -> Outcome {
    let mut messages = vec![
        json!({"role": "system", "content": SYSTEM}),
        json!({"role": "user", "content": question}),
    ];

    // 1. Reason: which tools, with which arguments.
    let reply = cx
        .llm(json!({"messages": messages, "tools": tools}))
        .await?;
    let actions = parse_actions(&reply, &tools)?;
    if actions.is_empty() {
        let answer = text_of(&reply)?;
        let reason = "the LLM called no tools, so there was nothing to report";
        return Ok(json!({
            "answer": answer,
            "report": {"status": "skipped", "to": REPORT_TO, "reason": reason},
        }));
    }
    messages.push(assistant_message(&reply, &actions));

    // 2. Act: every call of an offered tool in one step, answers in the order asked; a
    // tool that was not offered is answered here with an error, as the demo does.
    let calls = actions
        .iter()
        .filter(|action| action.offered)
        .map(|action| cx.tool(action.tool.clone(), action.args.clone()))
        .collect();
    let mut results = cx.all(calls).await.into_iter();
    let mut observations = Vec::with_capacity(actions.len());
    for action in &actions {
        let result = if action.offered {
            match results.next() {
                Some(result) => result.map_err(|error| error.to_string()),
                None => return Err(TaskError::failed("a tool call went unanswered")),
            }
        } else {
            Err(format!("there is no tool named `{}`", action.tool))
        };
        let (observation, content) = match result {
            Ok(value) => {
                let content = match &value {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                let observation =
                    json!({"tool": action.tool, "args": action.args, "result": value});
                (observation, content)
            }
            Err(error) => {
                let content = json!({ "error": error }).to_string();
                let observation = json!({"tool": action.tool, "args": action.args, "error": error});
                (observation, content)
            }
        };
        observations.push(observation);
        messages.push(json!({"role": "tool", "tool_call_id": action.id, "content": content}));
    }

    // 3. Confirm the side effect, then do it only if approved.
    let report = json!({"question": question, "findings": observations});
    let verdict = cx
        .confirm(json!({"ask": "Send the report?", "to": REPORT_TO, "report": report}))
        .await?;
    let approved = verdict == Value::Bool(true);
    let (delivery, told) = if approved {
        let receipt = cx
            .tool(SEND_TOOL, json!({"to": REPORT_TO, "report": report}))
            .await?;
        let delivery = json!({"status": "sent", "to": REPORT_TO, "receipt": receipt});
        (delivery, format!("{REPORT_SENT} {REPORT_TO}."))
    } else {
        let reason = format!("the human answered {verdict}, so the report was not sent");
        let told = format!("{REPORT_NOT_SENT} {reason}.");
        let delivery = json!({"status": "declined", "to": REPORT_TO, "reason": reason});
        (delivery, told)
    };

    // 4. Answer from what was observed, with no more tool calls.
    messages.push(json!({
        "role": "user",
        "content": format!("{told} Now answer the question, saying whether the report was sent."),
    }));
    let reply = cx
        .llm(json!({"messages": messages, "tools": tools, "tool_choice": "none"}))
        .await?;
    Ok(json!({"answer": text_of(&reply)?, "report": delivery}))
}

/// The reply's text; a reply without one fails the task with a message saying so.
fn text_of(reply: &Value) -> Result<String, TaskError> {
    reply["content"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| TaskError::failed(format!("the LLM gave no answer: {reply}")))
}

/// The reply's tool calls: at most [`MAX_ACTIONS`] of them, each with a name, which
/// may or may not be one of the offered `tools`. A reply that does not fit fails the
/// task with a message saying why.
fn parse_actions(reply: &Value, tools: &Value) -> Result<Vec<Action>, TaskError> {
    let bad = |why: String| TaskError::failed(format!("the LLM's reply {reply}: {why}"));
    let calls = match &reply["tool_calls"] {
        Value::Array(calls) => calls.as_slice(),
        Value::Null => &[],
        _ => return Err(bad("`tool_calls` is not a list".to_owned())),
    };
    if calls.len() > MAX_ACTIONS {
        return Err(bad(format!(
            "{} tool calls, at most {MAX_ACTIONS} at once",
            calls.len()
        )));
    }
    let offered: Vec<&str> = tools
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|tool| tool["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let Some(name) = call["name"].as_str() else {
                return Err(bad(format!("tool call {} has no name", i + 1)));
            };
            let id = call["id"]
                .as_str()
                .map_or_else(|| format!("call_{}", i + 1), str::to_owned);
            Ok(Action {
                id,
                tool: name.to_owned(),
                args: call["arguments"].clone(),
                offered: offered.contains(&name),
            })
        })
        .collect()
}

/// The assistant's turn as the OpenAI chat format records it: its text and its tool
/// calls, each call's arguments as JSON text.
fn assistant_message(reply: &Value, actions: &[Action]) -> Value {
    let calls: Vec<Value> = actions
        .iter()
        .map(|action| {
            let arguments = match &action.args {
                Value::String(text) => text.clone(),
                parsed => parsed.to_string(),
            };
            json!({
                "id": action.id,
                "type": "function",
                "function": {"name": action.tool, "arguments": arguments},
            })
        })
        .collect();
    json!({"role": "assistant", "content": reply["content"], "tool_calls": calls})
}
