//! Checking a submission as `POST /v1/tasks` does, without a runtime: for a server
//! that passes a submission on (a node of a cluster putting it in another shard's
//! inbox) and for the one that makes its task at the other end.

use std::collections::BTreeMap;
use std::sync::Arc;

use spool_core::{NewTask, TaskRegistry};
use spool_exec::Schema;

use crate::guard::parse;
use crate::problem::Problem;
use crate::routes::tasks::{SubmitBody, idempotency_key, make_task, request_fingerprint};
use crate::state::{AppStateError, compile_schemas};

/// Checks the body of a `POST /v1/tasks` against the task types of a registry and
/// their input schemas, with the same answers as the endpoint: a `400` for a body
/// that is not one, a `422` listing every field that is wrong.
///
/// ```
/// use serde_json::json;
/// use spool_core::{Step, TaskRegistry, task_fn};
///
/// let registry = TaskRegistry::new()
///     .with_input("hello", |_| Ok(Box::new(task_fn("hello", |_| Step::done("hi")))))
///     .with_input_schema("hello", json!({"type": "object", "required": ["name"]}));
/// let check = spool_http::SubmitCheck::new(registry)?;
/// let checked = check
///     .check(br#"{"type": "hello", "input": {"name": "ada"}, "agent": "a1"}"#)
///     .map_err(|problem| problem.detail)?;
/// assert_eq!(checked.agent.as_deref(), Some("a1"));
/// let problem = check.check(br#"{"type": "hello", "input": {}}"#).unwrap_err();
/// assert_eq!(problem.status().as_u16(), 422);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct SubmitCheck {
    registry: TaskRegistry,
    schemas: Arc<BTreeMap<String, Schema>>,
}

impl std::fmt::Debug for SubmitCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubmitCheck")
            .field("types", &self.registry.type_names())
            .finish()
    }
}

/// A submission that passed [`SubmitCheck::check`].
#[derive(Debug)]
pub struct Checked {
    /// Its task, with the request's fingerprint set (the same one the endpoint gives
    /// it, so a key sent with it again on any node finds it as a repeat); no key yet.
    pub task: NewTask,
    /// The agent it names, which places it.
    pub agent: Option<String>,
}

impl SubmitCheck {
    /// Checks submissions of `registry`'s task types.
    ///
    /// # Errors
    /// [`AppStateError::BadSchema`] if a registered input schema cannot be compiled.
    pub fn new(registry: TaskRegistry) -> Result<SubmitCheck, AppStateError> {
        let schemas = compile_schemas(&registry)?;
        Ok(SubmitCheck {
            registry,
            schemas: Arc::new(schemas),
        })
    }

    /// Checks `body` and makes its task.
    ///
    /// # Errors
    /// The [`Problem`] the endpoint answers for it: `400` (not JSON, not the shape),
    /// `422` (an unknown type, input that does not fit, a bad priority or deadline).
    pub fn check(&self, body: &[u8]) -> Result<Checked, Problem> {
        let body: SubmitBody = parse(body)?;
        let fingerprint = request_fingerprint(&body);
        let agent = body.agent.clone();
        let task = make_task(&self.registry, &self.schemas, body)?.fingerprint(fingerprint);
        Ok(Checked { task, agent })
    }

    /// The `Idempotency-Key` of a submission's `headers`, checked as the endpoint
    /// checks it (1 to 255 visible ASCII characters).
    ///
    /// # Errors
    /// The endpoint's `400` for a key that is not one.
    pub fn key(headers: &axum::http::HeaderMap) -> Result<Option<String>, Problem> {
        idempotency_key(headers)
    }
}
