//! The GenAI semantic conventions: what a request's payload and its answer say, as span
//! names and attributes (`gen_ai.*`), beside spool's own (`spool.*`).

use opentelemetry::trace::SpanKind;
use opentelemetry::{Array, KeyValue, StringValue, Value as OtelValue};
use serde_json::Value;
use spool_core::{Kind, RequestError};

/// `gen_ai.operation.name`.
pub(crate) const OPERATION: &str = "gen_ai.operation.name";

/// A request span's name, kind and attributes at its start, from its kind and payload.
pub(crate) struct Started {
    pub(crate) name: String,
    pub(crate) kind: SpanKind,
    pub(crate) attributes: Vec<KeyValue>,
}

/// What an LLM or tool request's span starts with. `provider` and `model` are the
/// observer's (the model used when the payload names none); `call_id` is the tool call
/// the LLM asked for that this request carries, if known.
pub(crate) fn started(
    kind: &Kind,
    payload: &Value,
    provider: &str,
    model: Option<&str>,
    call_id: Option<&str>,
) -> Started {
    match kind {
        Kind::Llm => {
            let model = payload["model"].as_str().or(model);
            let mut attributes = vec![
                KeyValue::new(OPERATION, "chat"),
                KeyValue::new("gen_ai.provider.name", provider.to_owned()),
            ];
            if let Some(model) = model {
                attributes.push(KeyValue::new("gen_ai.request.model", model.to_owned()));
            }
            if let Some(t) = payload["temperature"].as_f64() {
                attributes.push(KeyValue::new("gen_ai.request.temperature", t));
            }
            let max_tokens = payload["max_completion_tokens"]
                .as_i64()
                .or_else(|| payload["max_tokens"].as_i64());
            if let Some(n) = max_tokens {
                attributes.push(KeyValue::new("gen_ai.request.max_tokens", n));
            }
            Started {
                name: model.map_or_else(|| "chat".to_owned(), |m| format!("chat {m}")),
                kind: SpanKind::Client,
                attributes,
            }
        }
        Kind::Tool(name) => {
            let mut attributes = vec![
                KeyValue::new(OPERATION, "execute_tool"),
                KeyValue::new("gen_ai.tool.name", name.to_string()),
                KeyValue::new("gen_ai.tool.type", "function"),
            ];
            if let Some(id) = call_id {
                attributes.push(KeyValue::new("gen_ai.tool.call.id", id.to_owned()));
            }
            Started {
                name: format!("execute_tool {name}"),
                kind: SpanKind::Internal,
                attributes,
            }
        }
        other => Started {
            name: other.to_string(),
            kind: SpanKind::Internal,
            attributes: Vec::new(),
        },
    }
}

/// Token counts an LLM answer reports.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) input: Option<i64>,
    pub(crate) output: Option<i64>,
}

/// What an LLM answer adds to its span: the model that answered, the tokens in and out,
/// the finish reason and the answer's id; and the usage, for its task's totals. The
/// answer is the executor's normalized one (`finish_reason`, `usage` with
/// `prompt_tokens`/`completion_tokens`), or a provider's own (`choices[].finish_reason`,
/// `input_tokens`/`output_tokens`).
pub(crate) fn answered_llm(answer: &Value, attributes: &mut Vec<KeyValue>) -> Usage {
    if let Some(model) = answer["model"].as_str() {
        attributes.push(KeyValue::new("gen_ai.response.model", model.to_owned()));
    }
    if let Some(id) = answer["id"].as_str() {
        attributes.push(KeyValue::new("gen_ai.response.id", id.to_owned()));
    }
    let usage = &answer["usage"];
    let count = |a: &str, b: &str| usage[a].as_i64().or_else(|| usage[b].as_i64());
    let used = Usage {
        input: count("prompt_tokens", "input_tokens"),
        output: count("completion_tokens", "output_tokens"),
    };
    if let Some(n) = used.input {
        attributes.push(KeyValue::new("gen_ai.usage.input_tokens", n));
    }
    if let Some(n) = used.output {
        attributes.push(KeyValue::new("gen_ai.usage.output_tokens", n));
    }
    let reasons: Vec<StringValue> = match (&answer["finish_reason"], &answer["choices"]) {
        (Value::String(reason), _) => vec![reason.clone().into()],
        (_, Value::Array(choices)) => choices
            .iter()
            .filter_map(|c| c["finish_reason"].as_str())
            .map(|r| r.to_owned().into())
            .collect(),
        _ => Vec::new(),
    };
    if !reasons.is_empty() {
        attributes.push(KeyValue::new(
            "gen_ai.response.finish_reasons",
            OtelValue::Array(Array::String(reasons)),
        ));
    }
    used
}

/// The tool calls an LLM answer asks for, in order: each one's function name and id.
pub(crate) fn tool_calls(answer: &Value) -> impl Iterator<Item = (String, Option<String>)> + '_ {
    answer["tool_calls"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter_map(|call| {
            let name = call["name"]
                .as_str()
                .or_else(|| call["function"]["name"].as_str())?;
            Some((name.to_owned(), call["id"].as_str().map(str::to_owned)))
        })
}

/// `error.type` of a failed request: a short, stable name of why.
pub(crate) fn error_type(error: &RequestError) -> &'static str {
    match error {
        RequestError::Failed { .. } => "failed",
        RequestError::RateLimited { .. } => "rate_limited",
        RequestError::Timeout { .. } => "timeout",
        RequestError::InvalidArguments { .. } => "invalid_arguments",
        RequestError::Malformed { .. } => "malformed",
        RequestError::ExecutorDied { .. } => "executor_died",
        RequestError::Canceled => "canceled",
        RequestError::RateLimitExceeded { .. } => "rate_limit_exceeded",
        _ => "_OTHER",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn keys(attributes: &[KeyValue]) -> Vec<String> {
        attributes
            .iter()
            .map(|kv| format!("{}={}", kv.key, kv.value))
            .collect()
    }

    #[test]
    fn an_llm_request_is_a_chat_span_named_after_its_model() {
        let s = started(
            &Kind::Llm,
            &json!({"messages": [], "temperature": 0.5, "max_tokens": 64}),
            "openai",
            Some("gpt-4o-mini"),
            None,
        );
        assert_eq!(s.name, "chat gpt-4o-mini");
        assert_eq!(s.kind, SpanKind::Client);
        assert_eq!(
            keys(&s.attributes),
            [
                "gen_ai.operation.name=chat",
                "gen_ai.provider.name=openai",
                "gen_ai.request.model=gpt-4o-mini",
                "gen_ai.request.temperature=0.5",
                "gen_ai.request.max_tokens=64",
            ]
        );
        let named = started(&Kind::Llm, &json!({"model": "m2"}), "p", Some("m1"), None);
        assert_eq!(named.name, "chat m2");
        assert_eq!(
            started(&Kind::Llm, &json!({}), "p", None, None).name,
            "chat"
        );
    }

    #[test]
    fn an_llm_answer_gives_the_usage_and_finish_reasons() {
        let mut attributes = Vec::new();
        let used = answered_llm(
            &json!({"content": "hi", "tool_calls": [], "finish_reason": "stop",
                    "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20},
                    "model": "gpt-4o-mini-2024"}),
            &mut attributes,
        );
        assert_eq!(
            used,
            Usage {
                input: Some(12),
                output: Some(8)
            }
        );
        assert_eq!(
            keys(&attributes),
            [
                "gen_ai.response.model=gpt-4o-mini-2024",
                "gen_ai.usage.input_tokens=12",
                "gen_ai.usage.output_tokens=8",
                "gen_ai.response.finish_reasons=[\"stop\"]",
            ]
        );
    }

    #[test]
    fn tool_calls_are_read_in_the_normalized_and_the_provider_shapes() {
        let calls: Vec<_> = tool_calls(&json!({"tool_calls": [
            {"id": "call_1", "name": "search", "arguments": {}},
            {"id": "call_2", "type": "function", "function": {"name": "calc"}},
            {"name": "read_file"},
        ]}))
        .collect();
        assert_eq!(
            calls,
            [
                ("search".to_owned(), Some("call_1".to_owned())),
                ("calc".to_owned(), Some("call_2".to_owned())),
                ("read_file".to_owned(), None),
            ]
        );
    }
}
