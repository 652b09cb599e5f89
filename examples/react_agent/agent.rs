//! A ReAct agent (reason, act, observe) written as straight-line `async` code.
//!
//! One run of [`react_agent`]:
//!
//! 1. **Reason.** One LLM call with the question and the tools on offer; the LLM answers
//!    with a thought and 1 to [`MAX_ACTIONS`] tool calls (the plan format is below).
//! 2. **Act.** The tool calls go out together in one step (`cx.all`), and their answers
//!    come back in the order asked, whatever order they arrived in. A tool's error is an
//!    observation like any other, not a failure of the agent.
//! 3. **Confirm.** Sending the report is the one side effect, so a human is asked first
//!    (`cx.confirm`). Only the answer `true` approves; anything else declines, and then
//!    the report is not sent.
//! 4. **Answer.** A last LLM call turns the observations into the answer.
//!
//! The task ends with `{"answer": <the LLM's answer>, "report": <what became of it>}`,
//! where the report is `{"status": "sent", "to": .., "receipt": ..}` or
//! `{"status": "declined", "to": .., "reason": ..}`.
//!
//! The agent only awaits spool (requests and a confirmation): it does no I/O of its own,
//! so it runs the same on the threaded `Runtime` (the example's `main.rs`) and under
//! `TestScheduler` (the test `tests/core/react_agent.rs`, which includes this file).
//!
//! # What the LLM is sent and must answer
//!
//! - plan: `{"step": "plan", "question": .., "tools": [..]}` → `{"thought": "..",
//!   "actions": [{"tool": "weather", "args": {..}}, ..]}`;
//! - answer: `{"step": "answer", "question": .., "thought": .., "observations": [..],
//!   "report_sent": bool}` → the answer, any JSON value.

use serde_json::{Value, json};
use spool::{AsyncTask, Cx, Outcome, TaskError, async_task};

/// The tools the LLM may choose from in its plan.
pub const TOOLS: [&str; 2] = ["weather", "calendar"];

/// The most tool calls one plan may make (they all go out at once).
pub const MAX_ACTIONS: usize = 3;

/// The side-effecting tool, called only after the human approved.
pub const SEND_TOOL: &str = "send_report";

/// Who the report goes to.
pub const REPORT_TO: &str = "team@example.com";

/// The agent for `question`, as a task to submit to a scheduler or runtime.
pub fn react_agent(question: String) -> AsyncTask {
    async_task("react_agent", move |cx| run(cx, question))
}

/// One tool call of the plan, checked against [`TOOLS`].
struct Action {
    tool: &'static str,
    args: Value,
}

/// The whole agent: reason, act, confirm, answer.
async fn run(cx: Cx, question: String) -> Outcome {
    // 1. Reason: which tools, with which arguments.
    let plan = cx
        .llm(json!({"step": "plan", "question": question, "tools": TOOLS}))
        .await?;
    let thought = plan.get("thought").cloned().unwrap_or(Value::Null);
    let actions = parse_actions(&plan)?;

    // 2. Act: every tool call in one step, answers in the order asked.
    let calls = actions
        .iter()
        .map(|action| cx.tool(action.tool, action.args.clone()))
        .collect();
    let results = cx.all(calls).await;
    let observations: Vec<Value> = actions
        .iter()
        .zip(results)
        .map(|(action, result)| match result {
            Ok(value) => json!({"tool": action.tool, "args": action.args, "result": value}),
            Err(error) => {
                json!({"tool": action.tool, "args": action.args, "error": error.to_string()})
            }
        })
        .collect();

    // 3. Confirm the side effect, then do it only if approved.
    let report = json!({"question": question, "findings": observations});
    let verdict = cx
        .confirm(json!({"ask": "Send the report?", "to": REPORT_TO, "report": report}))
        .await?;
    let approved = verdict == Value::Bool(true);
    let delivery = if approved {
        let receipt = cx
            .tool(SEND_TOOL, json!({"to": REPORT_TO, "report": report}))
            .await?;
        json!({"status": "sent", "to": REPORT_TO, "receipt": receipt})
    } else {
        json!({
            "status": "declined",
            "to": REPORT_TO,
            "reason": format!("the human answered {verdict}, so the report was not sent"),
        })
    };

    // 4. Answer from what was observed.
    let answer = cx
        .llm(json!({
            "step": "answer",
            "question": question,
            "thought": thought,
            "observations": observations,
            "report_sent": approved,
        }))
        .await?;
    Ok(json!({"answer": answer, "report": delivery}))
}

/// The plan's tool calls: 1 to [`MAX_ACTIONS`] of them, each naming one of [`TOOLS`].
/// A plan that does not fit fails the task with a message saying why.
fn parse_actions(plan: &Value) -> Result<Vec<Action>, TaskError> {
    let bad_plan = |why: String| TaskError::failed(format!("the LLM's plan {plan}: {why}"));
    let Some(actions) = plan.get("actions").and_then(Value::as_array) else {
        return Err(bad_plan("no `actions` list".to_owned()));
    };
    if actions.is_empty() || actions.len() > MAX_ACTIONS {
        return Err(bad_plan(format!(
            "{} actions, expected 1 to {MAX_ACTIONS}",
            actions.len()
        )));
    }
    actions
        .iter()
        .map(|action| {
            let name = action.get("tool").and_then(Value::as_str).unwrap_or("");
            let tool = TOOLS
                .iter()
                .find(|tool| **tool == name)
                .ok_or_else(|| bad_plan(format!("`{name}` is not one of the tools {TOOLS:?}")))?;
            let args = action.get("args").cloned().unwrap_or_else(|| json!({}));
            Ok(Action { tool, args })
        })
        .collect()
}
