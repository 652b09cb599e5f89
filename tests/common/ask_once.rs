//! A task that makes one request, waits, and finishes with the answer's value (or null
//! if the request failed): the smallest task that has a request out. Shared by the core
//! and runtime test binaries.

use spool::{AgentTask, Request, Step, Value, task_fn};

/// The task `name`: makes `request` on its first poll, then finishes with its answer.
pub(crate) fn ask_once(name: &'static str, request: Request) -> impl AgentTask {
    let mut request = Some(request);
    task_fn(name, move |cx| {
        if let Some(request) = request.take() {
            cx.request(request);
            return Step::Wait;
        }
        Step::done(
            cx.take_answer()
                .and_then(|a| a.result.ok())
                .unwrap_or(Value::Null),
        )
    })
}
