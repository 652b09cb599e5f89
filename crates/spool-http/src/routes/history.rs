//! A task's history (`GET /v1/tasks/{id}/history`) and forks of it
//! (`POST /v1/tasks/{id}/fork`), read from the store the runtime journals to.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use spool_core::{Edit, ForkError, HistoryError, RequestError, SubmitError, TaskHistory, Value};
use spool_runtime::TaskHistoryError;
use utoipa::ToSchema;

use crate::call::blocking;
use crate::guard::JsonBody;
use crate::problem::Problem;
use crate::state::AppState;

/// The body of `POST /v1/tasks/{id}/fork`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkBody {
    /// The step of the task's history the fork starts from (`0` to the number of
    /// steps): the answers the task had received before it are played back, the rest
    /// runs live.
    #[serde(deserialize_with = "crate::whole::u32")]
    pub at: u32,
    /// What the fork changes, or `null` (then the requests answered from step `at` on
    /// are asked again).
    #[serde(default)]
    pub edit: Option<EditBody>,
}

/// What a fork changes: another answer to one request (`answer`), or another input
/// (`input`) — exactly one of them.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EditBody {
    /// Another answer to a request made before the fork's step.
    #[serde(default)]
    pub answer: Option<AnswerEdit>,
    /// Another input: the task starts from it; recorded answers are played back while
    /// its requests are the recorded ones.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub input: Option<Value>,
}

/// Another answer to a request made before the fork's step.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerEdit {
    /// The request's number within the task, from 1.
    #[serde(deserialize_with = "crate::whole::u32")]
    pub request: u32,
    /// The answer to give it (a JSON value); `null` if `error` is given.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// Answer it with this error instead of a value.
    #[serde(default)]
    pub error: Option<String>,
}

/// Where a fork comes from.
#[derive(Debug, Serialize, ToSchema)]
pub struct ForkOriginBody {
    /// The task it was forked from.
    pub task: u64,
    /// The step of that task's history it starts from.
    pub step: u32,
}

/// The answer to `POST /v1/tasks/{id}/fork`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Forked {
    /// The fork's id: a new task.
    pub id: u64,
    /// Where it comes from.
    pub origin: ForkOriginBody,
}

/// A task's history: each of its polls (steps), with what it received, what it asked
/// for and how the poll ended, as the store keeps it.
#[utoipa::path(get, path = "/v1/tasks/{id}/history", operation_id = "get_task_history",
    params(("id" = u64, Path, description = "The task's id")),
    responses(
        (status = 200, description = "The task's history: `task`, `type_name`, `agent`, `submitted_at` (ns of the scheduler's time), `input`, `origin` (`{task, step}` for a fork), `steps` (each `{step, at, answers, children_ended, requests, spawned, end}`) and `end`", content_type = "application/json"),
        (status = 404, description = "No such task in the history kept", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Its history is not kept: the server has no store, or the store's retention dropped it; or it was spawned by another task", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The runtime has stopped", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<TaskHistory>, Problem> {
    let id = task_id(&id)?;
    let handle = state.inner.handle.clone();
    let history = blocking(move || handle.history(id)).await?;
    history.map(Json).map_err(|e| problem(&e))
}

/// Forks a task from a step of its history, with an edit: a new task that reuses the
/// answers recorded before that step (nothing is sent for them) and runs live from
/// there.
#[utoipa::path(post, path = "/v1/tasks/{id}/fork", operation_id = "fork_task",
    params(("id" = u64, Path, description = "The task to fork")),
    request_body = ForkBody,
    responses(
        (status = 201, description = "The fork was submitted", body = Forked, links(
            ("get_task" = (operation_id = "get_task", parameters(("id" = "$response.body#/id")), description = "The fork")),
        )),
        (status = 400, description = "Not JSON, or not the shape", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such task in the history kept", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Its history is not kept (no store, or dropped by retention), or it was spawned by another task", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A step past the history, an edited request not made before the step, or an input the task's type refuses", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The task table is full", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn fork(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<ForkBody>,
) -> Result<Response, Problem> {
    let id = task_id(&id)?;
    let edit = edit_of(body.edit)?;
    let at = body.at;
    let handle = state.inner.handle.clone();
    let fork = blocking(move || handle.fork(id, at, edit))
        .await?
        .map_err(|e| problem(&e))?;
    // The fork shows in `GET /v1/tasks/{id}` once this answers.
    state.caught_up().await?;
    let body = Forked {
        id: fork.get(),
        origin: ForkOriginBody {
            task: id.get(),
            step: at,
        },
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// The core's edit from the body's.
fn edit_of(edit: Option<EditBody>) -> Result<Edit, Problem> {
    let Some(EditBody { answer, input }) = edit else {
        return Ok(Edit::None);
    };
    Ok(match (answer, input) {
        (None, None) => {
            return Err(Problem::invalid_at(
                "/edit",
                "an edit gives `answer` or `input` (or send `\"edit\": null`)",
            ));
        }
        (Some(_), Some(_)) => {
            return Err(Problem::invalid_at(
                "/edit",
                "an edit gives `answer` or `input`, not both",
            ));
        }
        (None, Some(input)) => Edit::Input(input),
        (
            Some(AnswerEdit {
                request,
                result,
                error,
            }),
            None,
        ) => {
            let result = match (result, error) {
                (Some(_), Some(_)) => {
                    return Err(Problem::invalid_at(
                        "/edit/answer",
                        "give `result` or `error`, not both",
                    ));
                }
                (_, Some(message)) => Err(RequestError::Failed { message }),
                (result, None) => Ok(result.unwrap_or(Value::Null)),
            };
            Edit::Answer { request, result }
        }
    })
}

/// The problem a history or fork error answers with.
fn problem(error: &TaskHistoryError) -> Problem {
    let detail = error.to_string();
    match error {
        TaskHistoryError::NotKept | TaskHistoryError::Dropped { .. } => Problem::new(
            StatusCode::CONFLICT,
            "history-not-kept",
            "History not kept",
            detail,
        ),
        TaskHistoryError::UnknownTask { .. } => Problem::not_found(detail),
        TaskHistoryError::History(HistoryError::Spawned { .. })
        | TaskHistoryError::Fork(ForkError::NoSubmission { .. }) => {
            Problem::new(StatusCode::CONFLICT, "spawned-task", "Spawned task", detail)
        }
        TaskHistoryError::Fork(ForkError::NoSuchStep { .. }) => Problem::invalid_at("/at", detail),
        TaskHistoryError::Fork(ForkError::NoSuchRequest { .. }) => {
            Problem::invalid_at("/edit/answer/request", detail)
        }
        TaskHistoryError::Submit(SubmitError::TableFull { .. }) => {
            Problem::too_many(format!("{detail}; try again later"), 1)
        }
        TaskHistoryError::Fork(_) | TaskHistoryError::Submit(_) => Problem::invalid(detail, vec![]),
        TaskHistoryError::Gone => {
            Problem::unavailable("the runtime has stopped; nothing was changed")
        }
        _ => Problem::internal(detail),
    }
}

/// A task id from a path: digits.
fn task_id(text: &str) -> Result<spool_core::TaskId, Problem> {
    text.parse::<u64>()
        .map(spool_core::TaskId::from_raw)
        .map_err(|_| Problem::not_found(format!("no task `{text}`: task ids are numbers")))
}
