//! One agent run for the tests: a researcher (agent `alice`) asks the model, which asks
//! for two tools at once (`search`, which answers, and `calc`, which refuses its
//! arguments); it then spawns a summarizer (agent `writer`) that asks another model,
//! and asks the model once more for its answer.

use serde_json::{Value, json};
use spool_core::{Kind, NewTask, RequestError, Submission, async_task};
use spool_runtime::{Runtime, RuntimeBuilder, from_fn};

/// The scripted model: by the `step` its payload names.
fn model(payload: &Value) -> Result<Value, RequestError> {
    match payload["step"].as_str() {
        Some("plan") => Ok(json!({
            "content": null,
            "tool_calls": [
                {"id": "call_1", "name": "search", "arguments": {"query": "figures"}},
                {"id": "call_2", "name": "calc", "arguments": {"expr": "1/0"}},
            ],
            "finish_reason": "tool_calls",
            "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20},
            "model": "gpt-test-0613",
            "id": "resp-1",
        })),
        Some("summarize") => Ok(json!({
            "content": "a summary",
            "tool_calls": [],
            "finish_reason": "stop",
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
            "model": "small-model-001",
        })),
        Some("answer") => Ok(json!({
            "content": "42",
            "tool_calls": [],
            "finish_reason": "stop",
            "usage": {"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34},
            "model": "gpt-test-0613",
        })),
        other => Err(RequestError::InvalidArguments {
            message: format!("no step {other:?}"),
        }),
    }
}

/// A runtime builder with the scripted model and the two tools.
pub(crate) fn builder() -> RuntimeBuilder {
    Runtime::builder()
        .executor(Kind::Llm, from_fn(|req| model(req.request.payload.value())))
        .executor(
            Kind::tool("search"),
            from_fn(|_req| Ok(json!({"figure": 42}))),
        )
        .executor(
            Kind::tool("calc"),
            from_fn(|_req| {
                Err(RequestError::InvalidArguments {
                    message: "division by zero".to_owned(),
                })
            }),
        )
}

/// The researcher, as agent `alice`.
pub(crate) fn researcher() -> NewTask {
    NewTask::new(async_task("researcher", |cx| async move {
        let plan = cx
            .llm(json!({"step": "plan", "messages": [], "temperature": 0}))
            .await?;
        let calls = plan["tool_calls"].as_array().cloned().unwrap_or_default();
        let requests = calls
            .iter()
            .map(|call| {
                let name = call["name"].as_str().unwrap_or_default().to_owned();
                cx.tool(name, call["arguments"].clone())
            })
            .collect();
        // The tools' answers, errors included, go back to the model as they are.
        let _ = cx.all(requests).await;
        let child = cx.spawn(
            NewTask::new(async_task("summarizer", |cx| async move {
                let summary = cx
                    .llm(json!({"step": "summarize", "messages": [], "model": "small-model"}))
                    .await?;
                Ok(summary["content"].clone())
            }))
            .agent("writer"),
        );
        let summary = child.await?;
        let answer = cx.llm(json!({"step": "answer", "messages": []})).await?;
        Ok(json!({"answer": answer["content"], "summary": summary}))
    }))
    .agent("alice")
}

/// Runs the researcher to its end on `runtime`; its submission.
pub(crate) fn run(runtime: &mut Runtime) -> Submission {
    let submission = runtime.submit(researcher()).expect("submitted");
    runtime.run_until_idle();
    submission
}
