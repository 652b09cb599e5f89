//! The bodies: what is posted (the task's payload, with the model), what a
//! chat-completions answer is normalized to, and how a body is quoted in a message.

use serde_json::{Map, Value, json};

use crate::json_type;

/// How much of a body an error message quotes, in bytes.
const QUOTE_BYTES: usize = 200;

/// The body to post: the task's payload, with `model` added unless it names one, and
/// `stream` as the executor is configured: with `stream`, `stream: true` and
/// `stream_options: {"include_usage": true}` (the usage comes in the last event);
/// without, neither field (the provider's default, one whole answer). A payload's own
/// `stream` and `stream_options` are replaced: how the answer is read is the
/// executor's to decide, so a payload cannot change the answer's format.
pub(super) fn request_body(payload: &Value, model: &str, stream: bool) -> Result<Vec<u8>, String> {
    let Value::Object(fields) = payload else {
        return Err(format!(
            "an LLM request's payload must be a JSON object with `messages`, not {}",
            json_type(payload)
        ));
    };
    if !matches!(fields.get("messages"), Some(Value::Array(_))) {
        return Err("an LLM request's payload must have a `messages` array".to_owned());
    }
    let mut body = Map::with_capacity(fields.len() + 3);
    if !fields.contains_key("model") {
        body.insert("model".to_owned(), Value::String(model.to_owned()));
    }
    for (name, value) in fields {
        if name != "stream" && name != "stream_options" {
            body.insert(name.clone(), value.clone());
        }
    }
    if stream {
        body.insert("stream".to_owned(), Value::Bool(true));
        body.insert("stream_options".to_owned(), json!({"include_usage": true}));
    }
    serde_json::to_vec(&body).map_err(|e| format!("the payload could not be encoded: {e}"))
}

pub(super) enum AnswerError {
    Malformed(String),
    /// A 2xx body that is the provider's `{"error": ...}`.
    Provider,
}

/// Normalizes a chat-completions answer: the first choice's content and tool calls,
/// its finish reason, the usage; and the total tokens used, if reported.
pub(super) fn normalize(bytes: &[u8]) -> Result<(Value, Option<u32>), AnswerError> {
    let malformed = |what: &str| AnswerError::Malformed(format!("{what}: {}", quote(bytes)));
    let answer: Value = serde_json::from_slice(bytes)
        .map_err(|e| malformed(&format!("the answer is not JSON ({e})")))?;
    let choice = answer.get("choices").and_then(|c| c.get(0));
    let Some(message) = choice
        .and_then(|c| c.get("message"))
        .filter(|m| m.is_object())
    else {
        if answer.get("error").is_some_and(|e| !e.is_null()) {
            return Err(AnswerError::Provider);
        }
        return Err(malformed("the answer has no `choices[0].message` object"));
    };
    let content = match message.get("content") {
        None | Some(Value::Null) => Value::Null,
        Some(Value::String(text)) => Value::String(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match part.get("text") {
                    Some(Value::String(t)) => text.push_str(t),
                    _ => return Err(malformed("a part of `message.content` has no text")),
                }
            }
            Value::String(text)
        }
        Some(_) => return Err(malformed("`message.content` is neither text nor null")),
    };
    let mut calls = Vec::new();
    match message.get("tool_calls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for (i, call) in list.iter().enumerate() {
                let function = call.get("function");
                let Some(Value::String(name)) = function.and_then(|f| f.get("name")) else {
                    return Err(malformed(&format!("tool call {i} has no `function.name`")));
                };
                let arguments = match function.and_then(|f| f.get("arguments")) {
                    None | Some(Value::Null) => json!({}),
                    Some(Value::String(raw)) => serde_json::from_str::<Value>(raw)
                        .unwrap_or_else(|_| Value::String(raw.clone())),
                    Some(other) => other.clone(),
                };
                let id = match call.get("id") {
                    Some(Value::String(id)) => Value::String(id.clone()),
                    _ => Value::Null,
                };
                calls.push(json!({"id": id, "name": name, "arguments": arguments}));
            }
        }
        Some(_) => return Err(malformed("`message.tool_calls` is not an array")),
    }
    let finish_reason = choice
        .and_then(|c| c.get("finish_reason"))
        .cloned()
        .unwrap_or(Value::Null);
    let usage = answer.get("usage").cloned().unwrap_or(Value::Null);
    let tokens = usage
        .get("total_tokens")
        .and_then(Value::as_u64)
        .or_else(|| {
            let prompt = usage.get("prompt_tokens").and_then(Value::as_u64)?;
            let completion = usage.get("completion_tokens").and_then(Value::as_u64)?;
            Some(prompt.saturating_add(completion))
        })
        .map(|t| u32::try_from(t).unwrap_or(u32::MAX));
    let value = json!({
        "content": content,
        "tool_calls": calls,
        "finish_reason": finish_reason,
        "usage": usage,
    });
    Ok((value, tokens))
}

/// Quotes the first 200 bytes of a body (cut on a character boundary, invalid UTF-8
/// replaced) in backticks, saying how long the whole was if it was cut.
///
/// # Example
/// ```
/// assert_eq!(spool_exec::quote_body(b"oops"), "`oops`");
/// assert_eq!(spool_exec::quote_body(b""), "an empty body");
/// let long = "x".repeat(300);
/// assert_eq!(
///     spool_exec::quote_body(long.as_bytes()),
///     format!("`{}`... (300 bytes in all)", "x".repeat(200))
/// );
/// ```
pub fn quote_body(bytes: &[u8]) -> String {
    quote(bytes)
}

pub(super) fn quote(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "an empty body".to_owned();
    }
    let mut cut = bytes.len().min(QUOTE_BYTES);
    // Back off to the start of the character the cut would split (at most 3 bytes).
    for _ in 0..3 {
        if cut > 0 && cut < bytes.len() && bytes[cut] & 0b1100_0000 == 0b1000_0000 {
            cut -= 1;
        } else {
            break;
        }
    }
    let text = String::from_utf8_lossy(&bytes[..cut]);
    if cut < bytes.len() {
        format!("`{text}`... ({} bytes in all)", bytes.len())
    } else {
        format!("`{text}`")
    }
}
