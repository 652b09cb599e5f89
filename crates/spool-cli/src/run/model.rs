//! The scripted model of `spool run`: answers any prompt the built-in agent is given,
//! in two turns — a `search` for the prompt, then an answer that says which run of the
//! conversation this is and what the search found — so a schedule's session visibly
//! grows by one exchange a run, with no endpoint.

use serde_json::{Value, json};
use spool_core::{OutboundRequest, RequestError};

/// The scripted model's reply to a request of the built-in agent, in the normalized
/// format a real endpoint's answers come in.
pub(crate) fn reply(request: &OutboundRequest) -> Result<Value, RequestError> {
    reply_to(request.request.payload.value())
}

/// The reply to a request whose payload is `payload` (`{"messages", "tools"}`).
fn reply_to(payload: &Value) -> Result<Value, RequestError> {
    let messages = payload["messages"]
        .as_array()
        .ok_or_else(|| invalid("the request has no `messages` list"))?;
    let (asked_at, prompt) = messages
        .iter()
        .enumerate()
        .rev()
        .find(|(_, m)| m["role"] == "user")
        .and_then(|(i, m)| m["content"].as_str().map(|text| (i, text)))
        .ok_or_else(|| invalid("the conversation has no user message"))?;
    let runs = messages.iter().filter(|m| m["role"] == "user").count();
    let answered = &messages[asked_at + 1..];
    let found = answered
        .iter()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str());
    let Some(found) = found else {
        return Ok(json!({
            "content": null,
            "tool_calls": [{"id": format!("call_{runs}"), "name": "search", "arguments": {"query": prompt}}],
            "finish_reason": "tool_calls",
            "usage": null,
        }));
    };
    let figure = serde_json::from_str::<Value>(found)
        .ok()
        .and_then(|v| v["figure"].as_i64())
        .map_or_else(|| "nothing".to_owned(), |f| format!("the figure {f}"));
    Ok(json!({
        "content": format!("Run {runs} of this conversation: for \"{prompt}\" the notes give {figure}."),
        "tool_calls": [],
        "finish_reason": "stop",
        "usage": null,
    }))
}

fn invalid(message: &str) -> RequestError {
    RequestError::InvalidArguments {
        message: message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(messages: Value) -> Value {
        reply_to(&json!({ "messages": messages })).expect("a reply")
    }

    #[test]
    fn it_searches_then_answers_counting_the_runs() {
        let first = ask(json!([
            {"role": "system", "content": "You are daily."},
            {"role": "user", "content": "standup"},
        ]));
        assert_eq!(first["tool_calls"][0]["name"], "search");
        assert_eq!(first["tool_calls"][0]["arguments"]["query"], "standup");
        let second = ask(json!([
            {"role": "system", "content": "You are daily."},
            {"role": "user", "content": "standup"},
            {"role": "assistant", "content": "Run 1 ..."},
            {"role": "user", "content": "standup"},
            {"role": "assistant", "content": null, "tool_calls": []},
            {"role": "tool", "tool_call_id": "call_2", "content": "{\"figure\": 512}"},
        ]));
        assert_eq!(
            second["content"],
            "Run 2 of this conversation: for \"standup\" the notes give the figure 512."
        );
    }
}
