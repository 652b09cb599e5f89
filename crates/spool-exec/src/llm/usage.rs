//! What an answer used, for the scheduler's budgets: the `usage` object of the
//! normalized answer (`prompt_tokens`, `completion_tokens`), streamed or not, with the
//! model the request asked for.

use serde_json::Value;
use spool_core::{Response, Usage};

/// `response` with the [`Usage`] its answer reports, if it reports one: tokens in and
/// out, and the model asked for (the payload's `model`, else `model`, the executor's).
/// An answer whose `usage` gives only `total_tokens` counts them all as input.
pub(super) fn with_usage(response: Response, payload: &Value, model: &str) -> Response {
    let Some(usage) = usage_of(&response, payload, model) else {
        return response;
    };
    response.with_usage(usage)
}

/// The usage an answer reports, if it is a success with a `usage` object that counts
/// tokens.
fn usage_of(response: &Response, payload: &Value, model: &str) -> Option<Usage> {
    let usage = response.result.as_ref().ok()?.get("usage")?;
    let count = |name: &str| usage.get(name).and_then(Value::as_u64);
    let (input, output) = match (count("prompt_tokens"), count("completion_tokens")) {
        (None, None) => (count("total_tokens")?, 0),
        (input, output) => (input.unwrap_or(0), output.unwrap_or(0)),
    };
    let model = payload
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(model);
    Some(Usage::new(input, output, model))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;
    use spool_core::RequestError;

    use super::*;

    fn key() -> spool_core::RequestKey {
        let mut s = spool_core::Scheduler::new(spool_core::Config::new());
        let task = spool_core::task_fn("ask", |cx| {
            cx.llm(json!({}));
            spool_core::Step::Wait
        });
        s.submit(spool_core::Time::ZERO, spool_core::NewTask::new(task))
            .unwrap();
        while s.step(spool_core::Time::ZERO).is_some() {}
        s.poll_request().unwrap().key
    }

    #[test]
    fn the_usage_object_and_the_model_asked_for_make_the_usage() {
        let answer = |usage: Value| Response::ok(key(), json!({"content": "hi", "usage": usage}));
        let counted = json!({"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17});
        let response = with_usage(answer(counted.clone()), &json!({}), "gpt-4o");
        assert_eq!(response.usage, Some(Usage::new(12, 5, "gpt-4o")));
        let response = with_usage(answer(counted), &json!({"model": "o3"}), "gpt-4o");
        assert_eq!(response.usage, Some(Usage::new(12, 5, "o3")));
        let total = with_usage(answer(json!({"total_tokens": 9})), &json!({}), "m");
        assert_eq!(total.usage, Some(Usage::new(9, 0, "m")));
        assert_eq!(with_usage(answer(Value::Null), &json!({}), "m").usage, None);
        let failed = Response::err(key(), RequestError::failed("no"));
        assert_eq!(with_usage(failed, &json!({}), "m").usage, None);
    }
}
