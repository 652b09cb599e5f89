//! The `react_agent` example's agent under `TestScheduler`: the LLM and the tools are
//! mocks, the test plays the human. Approved, the report is sent and the answer given;
//! declined, the side-effecting tool is never called and the task says so. The LLM is
//! sent OpenAI-format conversations (checked message by message) and answers in the
//! LLM executor's normalized format. Both trace snapshots were checked by hand: the
//! fan-out's three tool calls leave in one poll (`Running -> Waiting(3 requests) (3
//! requests)`) and the task resumes once, after the last of their answers.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use spool::{
    Delivery, Kind, RequestError, RequestKey, TaskId, TaskState, TestScheduler, WaitReason,
};

use crate::support::assert_trace_continuous;

// The example's own module, shared: its `pub` items are the example's interface, which
// this test crate does not export.
#[allow(unreachable_pub)]
#[path = "../../examples/react_agent/agent.rs"]
mod agent;

/// The question the agent is asked.
const QUESTION: &str = "Lisbon or Porto for Saturday's picnic?";

/// The tools offered to the LLM (OpenAI function definitions).
fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "calendar", "parameters": {"type": "object"}}},
    ])
}

/// The mocked LLM's first answer: three tool calls, one fan-out (normalized format).
fn plan() -> Value {
    json!({
        "content": "forecasts for both cities, and the calendar",
        "tool_calls": [
            {"id": "c1", "name": "weather", "arguments": {"city": "Lisbon"}},
            {"id": "c2", "name": "weather", "arguments": {"city": "Porto"}},
            {"id": "c3", "name": "calendar", "arguments": {"day": "Saturday"}},
        ],
        "finish_reason": "tool_calls",
        "usage": null,
    })
}

/// The mocked LLM's last answer: `text`, no tool calls.
fn answer(text: &str) -> Value {
    json!({"content": text, "tool_calls": [], "finish_reason": "stop", "usage": null})
}

/// What the `weather` mock answers (`inject_mock_tool`: the same to every call).
const FORECAST: &str = "sunny, 24 °C";
/// What the `calendar` mock answers.
const CALENDAR: &str = "free from 11:00";
/// What the report tool's mock answers.
const RECEIPT: &str = "msg-7";

/// The observations the agent must have made from the plan and the tool mocks.
fn observations() -> Value {
    json!([
        {"tool": "weather", "args": {"city": "Lisbon"}, "result": FORECAST},
        {"tool": "weather", "args": {"city": "Porto"}, "result": FORECAST},
        {"tool": "calendar", "args": {"day": "Saturday"}, "result": CALENDAR},
    ])
}

/// The conversation the LLM is sent last: the question, its tool calls, the tools'
/// answers, and what became of the report (`told`).
fn conversation(told: &str) -> Value {
    let call = |id: &str, name: &str, arguments: &str| json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}});
    json!([
        {"role": "system", "content": agent::SYSTEM},
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": plan()["content"], "tool_calls": [
            call("c1", "weather", r#"{"city":"Lisbon"}"#),
            call("c2", "weather", r#"{"city":"Porto"}"#),
            call("c3", "calendar", r#"{"day":"Saturday"}"#),
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": FORECAST},
        {"role": "tool", "tool_call_id": "c2", "content": FORECAST},
        {"role": "tool", "tool_call_id": "c3", "content": CALENDAR},
        {"role": "user", "content": format!(
            "{told} Now answer the question, saying whether the report was sent."
        )},
    ])
}

/// A scheduler with the LLM and the tools mocked, and the agent submitted. Returns the
/// payloads the LLM mock was sent, as it receives them.
fn setup() -> (TestScheduler, TaskId, Arc<Mutex<Vec<Value>>>) {
    let mut scheduler = TestScheduler::new();
    let llm_log: Arc<Mutex<Vec<Value>>> = Arc::default();
    let log = Arc::clone(&llm_log);
    scheduler.mock_llm_fn(move |out| {
        let payload = out.request.payload.value().clone();
        log.lock().unwrap().push(payload.clone());
        let last = &payload["messages"]
            .as_array()
            .and_then(|m| m.last())
            .cloned();
        let told = last
            .as_ref()
            .and_then(|m| m["content"].as_str())
            .unwrap_or("");
        match payload["tool_choice"].as_str() {
            None => Ok(plan()),
            Some("none") if told.starts_with(agent::REPORT_SENT) => {
                Ok(answer("Lisbon; report sent"))
            }
            Some("none") => Ok(answer("Lisbon; report not sent")),
            Some(other) => Err(RequestError::failed(format!("tool_choice {other:?}"))),
        }
    });
    scheduler.inject_mock_tool("weather", FORECAST);
    scheduler.inject_mock_tool("calendar", CALENDAR);
    scheduler.inject_mock_tool(agent::SEND_TOOL, RECEIPT);
    let id = scheduler.spawn(agent::react_agent(QUESTION.to_owned(), tools()));
    (scheduler, id, llm_log)
}

/// Steps until the agent asks the human, and checks the question.
fn step_until_the_agent_asks(scheduler: &mut TestScheduler, id: TaskId) -> RequestKey {
    let mut steps = 0;
    while scheduler.pending_confirmations().is_empty() {
        assert!(scheduler.step(), "the agent went idle without asking");
        steps += 1;
        assert!(steps < 20, "no confirmation after {steps} steps");
    }
    let pending = scheduler.pending_confirmations();
    assert_eq!(pending.len(), 1, "one confirmation: {pending:?}");
    assert_eq!(
        *pending[0].request.request.payload.value(),
        json!({
            "ask": "Send the report?",
            "to": agent::REPORT_TO,
            "report": {"question": QUESTION, "findings": observations()},
        })
    );
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Waiting(WaitReason::Request(Kind::Confirm))
    );
    pending[0].request.key
}

/// The human says yes: three tools in one step, one resume, the report sent, the
/// answer given.
#[test]
fn approved_the_agent_fans_out_sends_the_report_and_answers() {
    let (mut scheduler, id, llm_log) = setup();

    let key = step_until_the_agent_asks(&mut scheduler, id);
    assert_eq!(scheduler.answer(key, json!(true)), Delivery::Delivered);
    scheduler.run_until_quiet();

    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Ok(json!({
            "answer": "Lisbon; report sent",
            "report": {"status": "sent", "to": agent::REPORT_TO, "receipt": RECEIPT},
        })))
    );
    let llm_log = llm_log.lock().unwrap();
    assert_eq!(
        *llm_log,
        [
            json!({
                "messages": [
                    {"role": "system", "content": agent::SYSTEM},
                    {"role": "user", "content": QUESTION},
                ],
                "tools": tools(),
            }),
            json!({
                "messages": conversation(&format!("{} {}.", agent::REPORT_SENT, agent::REPORT_TO)),
                "tools": tools(),
                "tool_choice": "none",
            }),
        ]
    );
    // plan, three tools, confirmation, send, answer.
    assert_eq!(scheduler.stats().requests, 7);
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(scheduler.trace());
}

/// The human says no: the report tool is never called and the value says it was
/// declined.
#[test]
fn declined_the_agent_does_not_send_and_says_so() {
    let (mut scheduler, id, llm_log) = setup();

    let key = step_until_the_agent_asks(&mut scheduler, id);
    assert_eq!(scheduler.answer(key, json!(false)), Delivery::Delivered);
    scheduler.run_until_quiet();

    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Ok(json!({
            "answer": "Lisbon; report not sent",
            "report": {
                "status": "declined",
                "to": agent::REPORT_TO,
                "reason": "the human answered false, so the report was not sent",
            },
        })))
    );
    let llm_log = llm_log.lock().unwrap();
    assert_eq!(llm_log.len(), 2);
    assert_eq!(
        llm_log[1]["messages"],
        conversation(&format!(
            "{} the human answered false, so the report was not sent.",
            agent::REPORT_NOT_SENT
        ))
    );
    // plan, three tools, confirmation, answer: no send.
    assert_eq!(scheduler.stats().requests, 6);
    let trace = scheduler.trace();
    assert!(
        !trace.contains(agent::SEND_TOOL),
        "the report tool was called:\n{trace}"
    );
    assert_trace_continuous(&scheduler);
    insta::assert_snapshot!(trace);
}

/// The LLM answers at once, without a tool: that is the answer, and there is no report
/// to confirm or send.
#[test]
fn an_answer_without_tools_skips_the_report() {
    let mut scheduler = TestScheduler::new();
    scheduler.mock_llm([answer("Lisbon, from memory")]);
    let id = scheduler.spawn(agent::react_agent(QUESTION.to_owned(), tools()));
    scheduler.run_until_quiet();
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Ok(json!({
            "answer": "Lisbon, from memory",
            "report": {
                "status": "skipped",
                "to": agent::REPORT_TO,
                "reason": "the LLM called no tools, so there was nothing to report",
            },
        })))
    );
    assert_eq!(scheduler.stats().requests, 1);
}

/// A tool the agent was not offered (an unknown one, or the report tool it keeps for
/// itself) is not called: the LLM is told there is no such tool, as the demo's agent
/// tells it, and the agent goes on with the offered tool's answer.
#[test]
fn a_tool_not_offered_is_not_called_and_the_llm_is_told() {
    let mut scheduler = TestScheduler::new();
    let plan = json!({
        "content": null,
        "tool_calls": [
            {"id": "c1", "name": "weather", "arguments": {"city": "Lisbon"}},
            {"id": "c2", "name": "teleport", "arguments": {"to": "Porto"}},
            {"id": "c3", "name": agent::SEND_TOOL, "arguments": {}},
        ],
    });
    let llm_log: Arc<Mutex<Vec<Value>>> = Arc::default();
    let log = Arc::clone(&llm_log);
    let first = plan.clone();
    scheduler.mock_llm_fn(move |out| {
        let payload = out.request.payload.value().clone();
        log.lock().unwrap().push(payload.clone());
        Ok(match payload["tool_choice"].as_str() {
            None => first.clone(),
            Some(_) => answer("Lisbon; no teleporting"),
        })
    });
    scheduler.inject_mock_tool("weather", FORECAST);
    scheduler.inject_mock_tool(agent::SEND_TOOL, RECEIPT);
    let id = scheduler.spawn(agent::react_agent(QUESTION.to_owned(), tools()));

    let no_tool = |name: &str| format!("there is no tool named `{name}`");
    let findings = json!([
        {"tool": "weather", "args": {"city": "Lisbon"}, "result": FORECAST},
        {"tool": "teleport", "args": {"to": "Porto"}, "error": no_tool("teleport")},
        {"tool": agent::SEND_TOOL, "args": {}, "error": no_tool(agent::SEND_TOOL)},
    ]);
    let mut steps = 0;
    while scheduler.pending_confirmations().is_empty() {
        assert!(scheduler.step(), "the agent went idle without asking");
        steps += 1;
        assert!(steps < 20, "no confirmation after {steps} steps");
    }
    let pending = scheduler.pending_confirmations();
    assert_eq!(
        *pending[0].request.request.payload.value(),
        json!({
            "ask": "Send the report?",
            "to": agent::REPORT_TO,
            "report": {"question": QUESTION, "findings": findings},
        })
    );
    let key = pending[0].request.key;
    assert_eq!(scheduler.answer(key, json!(false)), Delivery::Delivered);
    scheduler.run_until_quiet();

    let reason = "the human answered false, so the report was not sent";
    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Ok(json!({
            "answer": "Lisbon; no teleporting",
            "report": {"status": "declined", "to": agent::REPORT_TO, "reason": reason},
        })))
    );
    let llm_log = llm_log.lock().unwrap();
    assert_eq!(llm_log.len(), 2);
    let call = |id: &str, name: &str, arguments: &str| json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}});
    let error = |name: &str| json!({ "error": no_tool(name) }).to_string();
    assert_eq!(
        llm_log[1]["messages"],
        json!([
            {"role": "system", "content": agent::SYSTEM},
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": null, "tool_calls": [
                call("c1", "weather", r#"{"city":"Lisbon"}"#),
                call("c2", "teleport", r#"{"to":"Porto"}"#),
                call("c3", agent::SEND_TOOL, "{}"),
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": FORECAST},
            {"role": "tool", "tool_call_id": "c2", "content": error("teleport")},
            {"role": "tool", "tool_call_id": "c3", "content": error(agent::SEND_TOOL)},
            {"role": "user", "content": format!(
                "{} {reason}. Now answer the question, saying whether the report was sent.",
                agent::REPORT_NOT_SENT
            )},
        ])
    );
    // plan, weather, confirmation, answer: neither `teleport` nor the report tool; the
    // act step sent the one request, to `weather`.
    assert_eq!(scheduler.stats().requests, 4);
    let trace = scheduler.trace();
    assert!(
        trace.contains("Running -> Waiting(tool:weather) (1 request)"),
        "the act step did not call only `weather`:\n{trace}"
    );
}
