//! Confirmations: the questions tasks ask a human, listed from the views and answered
//! through the runtime's handle (human-in-the-loop from any client).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use spool_core::Value;
use spool_runtime::PendingConfirmation;
use utoipa::ToSchema;

use crate::call::blocking;
use crate::guard::JsonBody;
use crate::millis::millis;
use crate::problem::Problem;
use crate::state::AppState;

/// A confirmation waiting for an answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConfirmationBody {
    /// Its key, `TASK.NUMBER`: answer it at `/v1/confirmations/{key}`.
    pub key: String,
    /// The task that asks.
    pub task: u64,
    /// The request's number within the task.
    pub number: u32,
    /// The question.
    #[schema(value_type = Object)]
    pub question: Value,
    /// When it was asked (scheduler time, in milliseconds).
    pub since_ms: u64,
}

impl From<&PendingConfirmation> for ConfirmationBody {
    fn from(c: &PendingConfirmation) -> ConfirmationBody {
        ConfirmationBody {
            key: key_text(c),
            task: c.key.task().get(),
            number: c.key.number(),
            question: c.question.clone(),
            since_ms: millis(c.since.as_duration()),
        }
    }
}

fn key_text(c: &PendingConfirmation) -> String {
    format!("{}.{}", c.key.task(), c.key.number())
}

/// The body of `POST /v1/confirmations/{key}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    /// The answer the task gets (any JSON: `true`, `"yes"`, `{"approved": true}`).
    #[schema(value_type = serde_json::Value)]
    pub answer: Value,
}

/// The confirmations waiting for an answer, oldest first.
#[utoipa::path(get, path = "/v1/confirmations", operation_id = "list_confirmations", responses((status = 200, body = Vec<ConfirmationBody>)))]
pub(crate) async fn list(State(state): State<AppState>) -> Json<Vec<ConfirmationBody>> {
    let views = state.inner.views.latest();
    Json(
        views
            .confirmations
            .iter()
            .map(ConfirmationBody::from)
            .collect(),
    )
}

/// Answers a confirmation.
#[utoipa::path(post, path = "/v1/confirmations/{key}", operation_id = "answer_confirmation", request_body = AnswerBody,
    params(("key" = String, Path, description = "`TASK.NUMBER`, as listed")),
    responses(
        (status = 202, description = "The answer is on its way to the task"),
        (status = 400, description = "The body is empty, not JSON, or not the shape", body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over the server's limit", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn answer(
    State(state): State<AppState>,
    Path(key): Path<String>,
    JsonBody(body): JsonBody<AnswerBody>,
) -> Result<Response, Problem> {
    // The loop's own list, not the views: an answer goes to a question still open.
    let handle = state.inner.handle.clone();
    let pending = blocking(move || handle.pending_confirmations()).await??;
    let Some(found) = pending.iter().find(|c| key_text(c) == key) else {
        return Err(Problem::not_found(format!(
            "no confirmation `{key}` is waiting (answered already, or never asked)"
        )));
    };
    let request = found.key;
    let handle = state.inner.handle.clone();
    blocking(move || handle.answer(request, body.answer)).await??;
    // The answer leaves the list once durable; the list read next shows that.
    state.caught_up().await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({"key": key, "answered": true})),
    )
        .into_response())
}
