//! The suite's agents: the saveable workers of the store tests (`tests/store/tasks.rs`),
//! and their executors (every answer a function of the request, so a resent request
//! gets the same answer).

#[allow(dead_code, unreachable_pub)]
#[path = "../../store/tasks.rs"]
mod store_tasks;

use serde_json::{Value, json};
use spool_core::TaskRegistry;
use spool_runtime::RuntimeBuilder;

use store_tasks::{Stopper, confirm_answer, llm_answer, tool_answer};
pub(crate) use store_tasks::{Worker, finish, prose};

/// The registry workers are rebuilt from.
pub fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<Worker>("worker")
}

/// A builder with the LLM and the tool executors, each answering with a function of
/// the request, at once.
pub fn builder() -> RuntimeBuilder {
    store_tasks::builder(&Stopper::default(), 0, false)
}

/// What a worker `Worker::new(name, steps, confirm_at)` ends with: every answer is a
/// function of its request.
pub fn expected_result(name: &str, steps: u32, confirm_at: Option<u32>) -> Value {
    let mut log: Vec<String> = Vec::new();
    for step in 0..steps {
        let answer = if Some(step) == confirm_at {
            confirm_answer(&json!({"worker": name, "step": step}))
        } else if step % 3 == 2 {
            tool_answer(&json!({"worker": name, "items": step}))
        } else {
            llm_answer(&json!({"worker": name, "log": log}), 0)
        };
        log.push(answer.as_str().unwrap().to_owned());
    }
    json!({"name": name, "log": log})
}
