//! Tasks: submit with an optional idempotency key, list with filters and a
//! cursor, read one with its timing, cancel; and the task types with their input
//! schemas.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use spool_core::{
    Admission, CancelError, Fingerprint, KeyedSubmission, MakeError, NewTask, Priority,
    RejectReason, Spec, Submission, SubmitError, TaskId, TaskRegistry, TaskState, Timeline, Value,
};
use spool_exec::Schema;
use spool_runtime::{Runtime, RuntimeError};
use utoipa::ToSchema;

use crate::call::blocking;
use crate::guard::JsonBody;
use crate::millis::millis;
use crate::problem::{FieldError, Problem};
use crate::state::AppState;
use crate::views::{STATE_TAGS, TaskRow, Views, state_tag};

/// The body of `POST /v1/tasks`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitBody {
    /// The task type (one of `GET /v1/task-types`).
    #[serde(rename = "type")]
    pub task_type: String,
    /// The input the type makes its task from (checked against its schema).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub input: Value,
    /// The agent it belongs to, for fairness and per-agent limits.
    pub agent: Option<String>,
    /// `low`, `normal` (default), `high` or `critical`.
    pub priority: Option<String>,
    /// How long it may take from now, queued and running: `90s`, `5m`, `1h30m`.
    pub deadline: Option<String>,
}

/// How a submission was admitted.
#[derive(Debug, Serialize, ToSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum AdmissionBody {
    /// It has a slot and is in the run queue.
    Ready,
    /// It waits for a slot.
    Queued {
        /// Its place in the queue, from 1.
        position: usize,
        /// The expected wait, in milliseconds.
        estimated_wait_ms: u64,
    },
    /// The start window is full; it starts by itself when the window lets it.
    RateLimited {
        /// When the window has room, in milliseconds.
        retry_after_ms: u64,
    },
    /// It waits for its dependencies.
    Blocked {
        /// Unmet dependencies.
        dependencies: u32,
    },
    /// It was not accepted.
    Rejected {
        /// Why.
        reason: String,
    },
    /// The idempotency key was used before: this is the task it made.
    Existing {
        /// That task's state now, as `GET /v1/tasks/{id}` gives it, or `forgotten`:
        /// it ended and is no longer held (evicted or forgotten), its key still kept.
        state: String,
    },
}

impl From<&Admission> for AdmissionBody {
    fn from(admission: &Admission) -> AdmissionBody {
        match admission {
            Admission::Ready => AdmissionBody::Ready,
            Admission::Queued {
                position,
                estimated_wait,
            } => AdmissionBody::Queued {
                position: *position,
                estimated_wait_ms: millis(*estimated_wait),
            },
            Admission::RateLimited { retry_after } => AdmissionBody::RateLimited {
                retry_after_ms: millis(*retry_after),
            },
            Admission::Blocked { dependencies } => AdmissionBody::Blocked {
                dependencies: *dependencies,
            },
            Admission::Rejected { reason } => AdmissionBody::Rejected {
                reason: reason.to_string(),
            },
            _ => AdmissionBody::Rejected {
                reason: "admitted in a way this server does not know".to_owned(),
            },
        }
    }
}

/// The answer to `POST /v1/tasks`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Submitted {
    /// The task's id.
    pub id: u64,
    /// How it was admitted.
    pub admission: AdmissionBody,
}

/// The answer to `POST /v1/tasks/{id}/cancel`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Canceled {
    /// The task's id.
    pub id: u64,
    /// `canceled`.
    pub state: String,
}

pub(crate) mod body;

use body::{ListQuery, ReadAt, TaskBody, TaskPage, TaskTypeBody};

/// Submits a task.
#[utoipa::path(post, path = "/v1/tasks", operation_id = "submit_task", request_body = SubmitBody,
    params(("Idempotency-Key" = Option<String>, Header, nullable = false, min_length = 1, max_length = 255, pattern = "^[!-~]{1,255}$",
        description = "A repeat of the request with the same key returns the task the first made; the key with a different request is refused (422): 1 to 255 visible ASCII characters")),
    responses(
        (status = 202, description = "Accepted (or rejected, with the reason)", body = Submitted, links(
            ("get_task" = (operation_id = "get_task", parameters(("id" = "$response.body#/id")), description = "The task submitted")),
            ("cancel_task" = (operation_id = "cancel_task", parameters(("id" = "$response.body#/id")), description = "Cancel the task submitted")),
        )),
        (status = 200, description = "The key was used before: its task", body = Submitted, links(
            ("get_task" = (operation_id = "get_task", parameters(("id" = "$response.body#/id")), description = "The task the key made")),
            ("cancel_task" = (operation_id = "cancel_task", parameters(("id" = "$response.body#/id")), description = "Cancel the task the key made")),
        )),
        (status = 400, description = "Not JSON, not the shape, or a bad Idempotency-Key", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over the server's limit", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An unknown type, input that does not fit, or an Idempotency-Key used before for a different request", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The queue is full", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn submit(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<SubmitBody>,
) -> Result<Response, Problem> {
    let key = idempotency_key(&headers)?;
    let fingerprint = request_fingerprint(&body);
    let task = make_task(&state.inner.registry, &state.inner.schemas, body)?;
    let Some(key) = key else {
        let handle = state.inner.handle.clone();
        let submission = blocking(move || handle.submit(task)).await?;
        return submitted(&state, submission);
    };
    // A repeat of the key returns the task it made; the key with another request is
    // refused. The loop checks the key and submits in one call, so repeats that come
    // at once make one task.
    let handle = state.inner.handle.clone();
    let task = task.key(key).fingerprint(fingerprint);
    let keyed = match blocking(move || handle.submit_keyed(task)).await? {
        Ok(keyed) => keyed,
        Err(error) => return submitted(&state, Err(error)),
    };
    match keyed.outcome {
        KeyedSubmission::Submitted(submission) => submitted(&state, Ok(submission)),
        KeyedSubmission::Existing { record, .. } => {
            Ok(existing_task(record.task, keyed.holder_state.as_ref()))
        }
        KeyedSubmission::Reused { key, record } => Err(key_reused(&key, record.task)),
        _ => Err(Problem::internal(
            "the key was checked in a way this server does not know",
        )),
    }
}

/// The fingerprint of a submission: its body's members (type, input, agent, priority,
/// deadline; absent ones as `null`) in canonical JSON, headers left out. The same
/// request sent again has the same one, however its members are ordered.
pub(crate) fn request_fingerprint(body: &SubmitBody) -> Fingerprint {
    Fingerprint::of_json(&serde_json::json!({
        "type": body.task_type,
        "input": body.input,
        "agent": body.agent,
        "priority": body.priority,
        "deadline": body.deadline,
    }))
}

/// `422`: `key` was used before for a different request, which made task `original`.
fn key_reused(key: &str, original: TaskId) -> Problem {
    Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency-key-reused",
        "Idempotency-Key reused",
        format!(
            "the Idempotency-Key \"{key}\" was used for a different request (task {original}); \
             send a new key for a new request"
        ),
    )
}

fn existing_task(id: TaskId, state: Option<&TaskState>) -> Response {
    let body = Submitted {
        id: id.get(),
        admission: AdmissionBody::Existing {
            state: state.map_or("forgotten", state_tag).to_owned(),
        },
    };
    (StatusCode::OK, Json(body)).into_response()
}

/// The answer to a submission: 202, or 429 for a full queue.
fn submitted(
    state: &AppState,
    submission: Result<Submission, RuntimeError>,
) -> Result<Response, Problem> {
    let answer = admitted(submission);
    if answer
        .as_ref()
        .is_err_and(|p| p.status() == StatusCode::TOO_MANY_REQUESTS)
    {
        state
            .inner
            .too_many
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    answer
}

fn admitted(submission: Result<Submission, RuntimeError>) -> Result<Response, Problem> {
    let submission = submission.map_err(|e| match e {
        RuntimeError::Submit(SubmitError::TableFull { live }) => Problem::too_many(
            format!("the task table is full ({live} tasks); try again later"),
            1,
        ),
        RuntimeError::Submit(other) => Problem::invalid_at("/input", other.to_string()),
        other => Problem::from(other),
    })?;
    match &submission.admission {
        Admission::Rejected {
            reason: reason @ (RejectReason::QueueFull { .. } | RejectReason::AgentQueueFull { .. }),
        } => Err(Problem::too_many(
            format!(
                "{reason}: task {} was not accepted; try again later",
                submission.id
            ),
            1,
        )),
        Admission::Rejected {
            reason:
                RejectReason::Duplicate { existing: id, .. }
                | RejectReason::AlreadyEnded { original: id, .. },
        } => Ok(existing_task(*id, None)),
        Admission::Rejected {
            reason: RejectReason::KeyReused { key, original },
        } => Err(key_reused(key, *original)),
        admission => {
            let body = Submitted {
                id: submission.id.get(),
                admission: admission.into(),
            };
            Ok((StatusCode::ACCEPTED, Json(body)).into_response())
        }
    }
}

pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, Problem> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let bytes = value.as_bytes();
    let visible =
        (1..=255).contains(&bytes.len()) && bytes.iter().all(|b| (b'!'..=b'~').contains(b));
    let key = value.to_str().ok().filter(|_| visible).ok_or_else(|| {
        Problem::bad_request("the Idempotency-Key header must be 1 to 255 visible ASCII characters")
    })?;
    Ok(Some(key.to_owned()))
}

/// Checks a submission and makes its task with `registry`, its input checked against
/// `schemas`: every violation is listed at once.
pub(crate) fn make_task(
    registry: &TaskRegistry,
    schemas: &BTreeMap<String, Schema>,
    body: SubmitBody,
) -> Result<NewTask, Problem> {
    let mut errors = Vec::new();
    let known = registry.knows(&body.task_type);
    if !known {
        errors.push(FieldError::new(
            "/type",
            format!(
                "unknown task type `{}` (known: {})",
                body.task_type,
                registry.type_names().join(", ")
            ),
        ));
    }
    if let Some(schema) = schemas.get(&body.task_type)
        && let Err(violations) = schema.check(&body.input)
    {
        errors.extend(
            violations
                .into_iter()
                .map(|v| FieldError::new(format!("/input{}", v.path), v.message)),
        );
    }
    let priority = match body.priority.as_deref() {
        None | Some("normal") => Priority::Normal,
        Some("low") => Priority::Low,
        Some("high") => Priority::High,
        Some("critical") => Priority::Critical,
        Some(other) => {
            errors.push(FieldError::new(
                "/priority",
                format!("unknown priority `{other}` (expected low, normal, high or critical)"),
            ));
            Priority::Normal
        }
    };
    let deadline = match body.deadline.as_deref().map(Spec::parse_every) {
        None => None,
        Some(Ok(within)) => Some(within),
        Some(Err(e)) => {
            errors.push(FieldError::new("/deadline", e.to_string()));
            None
        }
    };
    if !errors.is_empty() {
        return Err(Problem::invalid(summary(&errors), errors));
    }
    let made = registry
        .make(&body.task_type, &body.input)
        .map_err(|e| match e {
            MakeError::BadInput { reason, .. } => Problem::invalid_at("/input", reason),
            other => Problem::invalid_at("/type", other.to_string()),
        })?;
    let mut task = NewTask::boxed(made).priority(priority);
    if let Some(agent) = body.agent {
        task = task.agent(agent);
    }
    if let Some(within) = deadline {
        task = task.deadline(within);
    }
    Ok(task)
}

/// "2 problems: /type: ...; /input/x: ..." — the detail of a 422.
pub(crate) fn summary(errors: &[FieldError]) -> String {
    let list: Vec<String> = errors
        .iter()
        .map(|e| format!("{}: {}", e.path, e.message))
        .collect();
    match errors.len() {
        1 => list.join(""),
        n => format!("{n} problems: {}", list.join("; ")),
    }
}

/// Lists tasks, by id, a page at a time.
#[utoipa::path(get, path = "/v1/tasks", operation_id = "list_tasks", params(ListQuery), responses(
    (status = 200, body = TaskPage),
    (status = 400, body = Problem, content_type = "application/problem+json"),
    (status = 503, description = "Starting: the views are not published yet (`Retry-After`)", body = Problem, content_type = "application/problem+json"),
))]
pub(crate) async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<TaskPage>, Problem> {
    let Query(query) = query.map_err(|e| Problem::bad_request(e.body_text()))?;
    if let Some(tag) = query.state.as_deref()
        && !STATE_TAGS.contains(&tag)
    {
        return Err(Problem::bad_request(format!(
            "unknown state `{tag}` (expected one of {})",
            STATE_TAGS.join(", ")
        )));
    }
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(Problem::bad_request("limit must be from 1 to 1000"));
    }
    let after = match query.cursor.as_deref() {
        None => 0,
        Some(cursor) => cursor
            .parse::<u64>()
            .ok()
            .filter(|_| cursor.len() <= 19 && cursor.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| Problem::bad_request("the cursor is not one this server gave"))?,
    };
    let views = state.inner.views.latest();
    let now = ReadAt::of(&views);
    let mut tasks = Vec::new();
    let mut next_cursor = None;
    for row in views.tasks.after(TaskId::from_raw(after)) {
        if query
            .state
            .as_deref()
            .is_some_and(|s| s != state_tag(&row.state))
            || query.agent.as_deref().is_some_and(|a| a != row.agent)
        {
            continue;
        }
        if tasks.len() == limit {
            next_cursor = tasks.last().map(|t: &TaskBody| t.id.to_string());
            break;
        }
        tasks.push(TaskBody::list_row(row, now));
    }
    Ok(Json(TaskPage { tasks, next_cursor }))
}

/// A task: its state, result or error, timing and timeline.
#[utoipa::path(get, path = "/v1/tasks/{id}", operation_id = "get_task", params(("id" = u64, Path, description = "The task's id")), responses(
    (status = 200, body = TaskBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 503, description = "Starting: the views are not published yet (`Retry-After`)", body = Problem, content_type = "application/problem+json"),
))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<TaskBody>, Problem> {
    let id = task_id(&id)?;
    let views = state.inner.views.latest();
    if let Some(row) = views.tasks.get(&id) {
        if !row.result_elided {
            return Ok(Json(TaskBody::with_timeline(row, ReadAt::of(&views))));
        }
        // A large result is not in the views: the loop's table has it.
        let now = ReadAt::of(&views);
        return match large_result(&state, row.id, row.result_bytes.unwrap_or(0)).await? {
            LargeResult::Kept(value) => {
                // The row holds `null` in the result's place; the body takes the result.
                let mut body = TaskBody::with_timeline(row, now);
                body.result = Some(Value::clone(&value));
                Ok(Json(body))
            }
            LargeResult::Other(task_state) => {
                let mut row = row.clone();
                row.state = task_state;
                row.result_elided = false;
                Ok(Json(TaskBody::with_timeline(&row, now)))
            }
            LargeResult::Gone => Err(Problem::not_found(format!(
                "no task {id} (never submitted, or ended and evicted)"
            ))),
        };
    }
    // Ids only grow: one the views have passed is unknown or evicted. One past them
    // may have been submitted since the last publication (a client reading what it
    // was just answered): ask the loop, once, which looks it up before listing.
    if views.tasks.last_id().is_some_and(|last| id <= last) {
        return Err(Problem::not_found(format!(
            "no task {id} (never submitted, or ended and evicted)"
        )));
    }
    let handle = state.inner.handle.clone();
    let views = state.inner.views.clone();
    let row =
        blocking(move || handle.query(move |rt| row_on_loop(rt, &views.latest(), id))).await??;
    match row {
        Some((row, now)) => Ok(Json(TaskBody::with_timeline(&row, now))),
        None => Err(Problem::not_found(format!(
            "no task {id} (never submitted, or ended and evicted)"
        ))),
    }
}

/// Task `id`'s row as the loop's thread sees it, between two turns: either a
/// publication since the handler's read (`latest`) has the task, or none has any of
/// its events yet, and the next one will hand them all out.
fn row_on_loop(rt: &Runtime, latest: &Views, id: TaskId) -> Option<(TaskRow, ReadAt)> {
    if let Some(row) = latest.tasks.get(&id) {
        return Some((row.clone(), ReadAt::of(latest)));
    }
    let core = rt.scheduler();
    core.task(id).map(|info| {
        let mut timeline = Timeline::new();
        for event in rt.unpublished_events().filter(|e| e.task == id) {
            timeline.take(event);
        }
        // A task restored at start, before the first publication: the views
        // will take its timeline on from then, in the state it is in.
        if latest.generation == 0 && timeline.started().is_none() {
            timeline = Timeline::resumed(core.now(), &info.state);
        }
        let requests = core
            .task_requests(id)
            .iter()
            .map(ToString::to_string)
            .collect();
        let at = ReadAt {
            now: core.now(),
            at: core.now(),
            base: rt.wall_time(core.now()),
        };
        let mut row = TaskRow::new(info, requests, timeline);
        row.forked_from = core.fork_origin(id).map(|(origin, _)| origin);
        row.spend = core.task_spend(id);
        (row, at)
    })
}

/// What the loop's table says of a task whose result the views left out.
enum LargeResult {
    /// Its result, as kept for the reads that follow.
    Kept(Arc<Value>),
    /// It is in another state than the views said (not completed with a result).
    Other(TaskState),
    /// It is not in the table (evicted since).
    Gone,
}

/// Task `id`'s result, `bytes` of JSON, which is too large for the views: from the
/// results kept if it is there, else from the loop, one read at a time (each copies
/// the result on the loop's thread), kept for the reads that follow. A read that
/// waited for its turn looks at the results kept again, so that reads of one task at
/// once cost one copy on the loop.
async fn large_result(state: &AppState, id: TaskId, bytes: u64) -> Result<LargeResult, Problem> {
    let large = &state.inner.large_results;
    if let Some(value) = large.get(id, bytes) {
        return Ok(LargeResult::Kept(value));
    }
    let turn = large.turn().await;
    if let Some(value) = large.get(id, bytes) {
        return Ok(LargeResult::Kept(value));
    }
    let inner = state.inner.clone();
    blocking(move || {
        // The turn is held until the copy is kept, even if the request went away.
        let _turn = turn;
        inner.large_results.count_loop_read();
        let task_state = inner
            .handle
            .query(move |rt| rt.scheduler().task(id).map(|t| t.state))?;
        Ok(match task_state {
            Some(TaskState::Completed(Ok(value))) => {
                let value = Arc::new(value);
                let views = inner.views.latest();
                let gone = |task: TaskId| views.tasks.get(&task).is_none();
                inner.large_results.keep(id, bytes, value.clone(), gone);
                LargeResult::Kept(value)
            }
            Some(other) => LargeResult::Other(other),
            None => LargeResult::Gone,
        })
    })
    .await?
}

/// Cancels a task.
#[utoipa::path(post, path = "/v1/tasks/{id}/cancel", operation_id = "cancel_task", params(("id" = u64, Path, description = "The task's id")), responses(
    (status = 202, description = "Canceled", body = Canceled),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, description = "It had ended", body = Problem, content_type = "application/problem+json"),
))]
pub(crate) async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    let id = task_id(&id)?;
    let handle = state.inner.handle.clone();
    match blocking(move || handle.cancel(id)).await? {
        Ok(()) => Ok(state.caught_up().await.map(|()| {
            (
                StatusCode::ACCEPTED,
                Json(Canceled {
                    id: id.get(),
                    state: "canceled".to_owned(),
                }),
            )
                .into_response()
        })?),
        Err(RuntimeError::Cancel(CancelError::UnknownTask(_))) => {
            Err(Problem::not_found(format!("no task {id}")))
        }
        Err(RuntimeError::Cancel(CancelError::AlreadyEnded { state, .. })) => {
            Err(Problem::conflict(format!(
                "task {id} has already ended ({})",
                state_tag(&state)
            )))
        }
        Err(other) => Err(other.into()),
    }
}

/// The registered task types and their input schemas.
#[utoipa::path(get, path = "/v1/task-types", operation_id = "list_task_types", responses((status = 200, body = Vec<TaskTypeBody>)))]
pub(crate) async fn types(State(state): State<AppState>) -> Json<Vec<TaskTypeBody>> {
    let registry = &state.inner.registry;
    Json(
        registry
            .type_names()
            .into_iter()
            .map(|name| TaskTypeBody {
                name: name.to_owned(),
                input_schema: registry.input_schema(name).cloned(),
            })
            .collect(),
    )
}

/// A task id from a path: digits.
fn task_id(text: &str) -> Result<TaskId, Problem> {
    text.parse::<u64>()
        .map(TaskId::from_raw)
        .map_err(|_| Problem::not_found(format!("no task `{text}`: task ids are numbers")))
}
