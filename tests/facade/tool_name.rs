//! A tool whose name is only known at run time (read from the model's answer) is called
//! with the owned name, on virtual time with a mocked tool.

use serde_json::json;
use spool::{Kind, TaskState, TestScheduler, async_task};

#[test]
fn an_async_agent_calls_a_tool_named_by_the_model() {
    let mut scheduler = TestScheduler::new();
    scheduler.mock_llm([json!({"tool": "word_count", "args": {"text": "one two three"}})]);
    scheduler.inject_mock_tool("word_count", json!({"words": 3}));
    let id = scheduler.spawn(async_task("caller", |cx| async move {
        let plan = cx.llm(json!({"prompt": "which tool?"})).await?;
        // A `String` made at run time: no `&'static str`, no leak.
        let name: String = plan["tool"].as_str().unwrap_or_default().to_owned();
        let answer = cx.tool(name, plan["args"].clone()).await?;
        Ok(answer)
    }));
    scheduler.step_until_idle();

    assert_eq!(
        scheduler.task_state(id),
        TaskState::Completed(Ok(json!({"words": 3})))
    );
    let sent: Vec<Kind> = scheduler
        .sent_requests()
        .iter()
        .map(|sent| sent.kind.clone())
        .collect();
    assert_eq!(sent, [Kind::Llm, Kind::tool("word_count")]);
}
