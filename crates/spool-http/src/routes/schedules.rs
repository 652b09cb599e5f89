//! Schedules: list and read from the views; create or replace, patch,
//! delete, run now, pause and resume through the runtime's handle, each answered once
//! durable. A body's every problem is listed with its path.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use spool_core::{
    CatchUp, CronSpec, FireOutcome, Overlap, Priority, ScheduleDef, ScheduleError, SchedulePatch,
    SessionMode, Spec, Value, check_slug,
};
use spool_runtime::RuntimeError;

use crate::call::blocking;
use crate::guard::JsonBody;
use crate::problem::{FieldError, Problem};
use crate::routes::tasks::summary;
use crate::state::AppState;

mod body;

pub use body::{
    CatchUpBody, RetryBody, ScheduleBody, ScheduleOutcome, SchedulePatchBody, SchedulePutBody,
    ScheduleStatusBody, SpecBody,
};

/// An interval as the API takes it: `Spec::parse_every`'s, without the spaces around it
/// that the command line forgives (the document's pattern has none).
fn interval(text: &str) -> Result<Duration, spool_core::SpecError> {
    if text.trim() != text {
        return Err(spool_core::SpecError::Interval {
            text: text.to_owned(),
            problem: spool_core::IntervalProblem::Unexpected(" ".to_owned()),
        });
    }
    Spec::parse_every(text)
}

/// Reads a spec, or says what is wrong under `/schedule`.
fn spec(body: &SpecBody, errors: &mut Vec<FieldError>) -> Option<Spec> {
    match body {
        SpecBody::Cron { expression, tz } => {
            match CronSpec::parse(expression, tz.as_deref().unwrap_or("UTC")) {
                Ok(cron) => Some(Spec::Cron(cron)),
                Err(e) => {
                    let path = match e {
                        spool_core::SpecError::UnknownTimeZone(_) => "/schedule/tz",
                        _ => "/schedule/expression",
                    };
                    errors.push(FieldError::new(path, e.to_string()));
                    None
                }
            }
        }
        SpecBody::Interval { every } => match interval(every) {
            Ok(every) => Some(Spec::Every(every)),
            Err(e) => {
                errors.push(FieldError::new("/schedule/every", e.to_string()));
                None
            }
        },
        SpecBody::Once { at } => match at.parse::<jiff::Timestamp>() {
            Ok(at) => Some(Spec::Once(at)),
            Err(e) => {
                errors.push(FieldError::new(
                    "/schedule/at",
                    format!("not an RFC 3339 instant: {e}"),
                ));
                None
            }
        },
    }
}

/// The fields PUT and PATCH share, checked, every problem listed.
struct Checked {
    task: Option<(String, Value)>,
    spec: Option<Spec>,
    session: Option<SessionMode>,
    overlap: Option<Overlap>,
    catch_up: Option<CatchUp>,
    agent: Option<String>,
    priority: Option<Priority>,
}

/// The fields PUT and PATCH share, as given.
struct Given<'a> {
    task_type: Option<String>,
    prompt: Option<String>,
    input: Option<Value>,
    schedule: Option<&'a SpecBody>,
    session: Option<&'a str>,
    overlap: Option<&'a str>,
    catch_up: Option<&'a CatchUpBody>,
    agent: Option<String>,
    priority: Option<&'a str>,
}

fn check(state: &AppState, given: Given<'_>, errors: &mut Vec<FieldError>) -> Checked {
    let task = run_of(state, given.task_type, given.prompt, given.input, errors);
    let spec = given.schedule.and_then(|s| spec(s, errors));
    let session = given.session.and_then(|s| session_mode(s, errors));
    let overlap = given.overlap.and_then(|o| match Overlap::parse(o) {
        Ok(o) => Some(o),
        Err(e) => {
            errors.push(FieldError::new("/overlap", e.to_string()));
            None
        }
    });
    let catch_up = given.catch_up.and_then(|c| match c {
        CatchUpBody::Latest => Some(CatchUp::Latest),
        CatchUpBody::None => Some(CatchUp::None),
        CatchUpBody::All(window) => match interval(window) {
            Ok(window) => Some(CatchUp::All { window }),
            Err(e) => {
                errors.push(FieldError::new("/catch_up/all", e.to_string()));
                None
            }
        },
    });
    let agent = given.agent.filter(|agent| {
        let named = !agent.trim().is_empty();
        if !named {
            errors.push(FieldError::new(
                "/agent",
                "an agent's name is not blank (leave `agent` out for the default agent)",
            ));
        }
        named
    });
    let priority = given.priority.and_then(|p| match priority(p) {
        Some(p) => Some(p),
        None => {
            errors.push(FieldError::new(
                "/priority",
                format!("unknown priority `{p}` (expected low, normal, high or critical)"),
            ));
            None
        }
    });
    Checked {
        task,
        spec,
        session,
        overlap,
        catch_up,
        agent,
        priority,
    }
}

/// The priority `text` names, as a task's submission takes it.
fn priority(text: &str) -> Option<Priority> {
    match text {
        "low" => Some(Priority::Low),
        "normal" => Some(Priority::Normal),
        "high" => Some(Priority::High),
        "critical" => Some(Priority::Critical),
        _ => None,
    }
}

/// The task type and input a schedule runs, given a `task_type` (with its `input`) or
/// a `prompt` (the input of the server's prompt type); the input is checked against its
/// type's schema, whether given or made from a prompt. `None` if neither is given, or
/// if what is given is wrong (said in `errors`).
fn run_of(
    state: &AppState,
    task_type: Option<String>,
    prompt: Option<String>,
    input: Option<Value>,
    errors: &mut Vec<FieldError>,
) -> Option<(String, Value)> {
    let task = match (task_type, prompt) {
        (Some(_), Some(_)) => {
            errors.push(FieldError::new(
                "/prompt",
                "give `task_type` or `prompt`, not both",
            ));
            None
        }
        (Some(task_type), None) => {
            if !state.inner.registry.knows(&task_type) {
                errors.push(FieldError::new(
                    "/task_type",
                    format!("unknown task type `{task_type}`"),
                ));
            }
            Some((task_type, input.unwrap_or_else(|| serde_json::json!({}))))
        }
        (None, Some(prompt)) => match &state.inner.prompt_type {
            Some(task_type) => Some((task_type.clone(), serde_json::json!({"prompt": prompt}))),
            None => {
                errors.push(FieldError::new(
                    "/prompt",
                    "this server has no prompt type: give `task_type` and `input`",
                ));
                None
            }
        },
        (None, None) => None,
    };
    if let Some((task_type, input)) = &task {
        if !input.is_object() {
            errors.push(FieldError::new("/input", NOT_AN_OBJECT));
        } else if let Some(schema) = state.inner.schemas.get(task_type)
            && let Err(violations) = schema.check(input)
        {
            errors.extend(
                violations
                    .into_iter()
                    .map(|v| FieldError::new(format!("/input{}", v.path), v.message)),
            );
        }
    }
    task
}

/// What is wrong with an input that is not a JSON object (the document's `input` is an
/// object).
const NOT_AN_OBJECT: &str = "a schedule's input is a JSON object";

/// The session mode `text` names: `persist`, `fresh` or `shared:ID`; `None` (said in
/// `errors`) for anything else.
fn session_mode(text: &str, errors: &mut Vec<FieldError>) -> Option<SessionMode> {
    match text {
        "persist" => Some(SessionMode::Persist),
        "fresh" => Some(SessionMode::Fresh),
        other => match other.strip_prefix("shared:") {
            Some(id) if spool_core::check_session_id(id).is_ok() => {
                Some(SessionMode::Shared(id.to_owned()))
            }
            _ => {
                errors.push(FieldError::new(
                    "/session",
                    format!("`{other}` is not `persist`, `fresh` or `shared:ID` (ID a slug)"),
                ));
                None
            }
        },
    }
}

/// A slug from a path, checked (`../etc` is refused before anything is looked up).
fn slug(text: &str) -> Result<String, Problem> {
    check_slug(text).map_err(|e| Problem::invalid_at("/slug", e.to_string()))?;
    Ok(text.to_owned())
}

/// Whether a PUT may only create (`If-None-Match: *`); any other value of the header
/// is refused, as this API gives no entity tags to compare.
fn create_only(headers: &HeaderMap) -> Result<bool, Problem> {
    let mut values = headers.get_all(axum::http::header::IF_NONE_MATCH).iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(false),
        (Some(value), None) if value.as_bytes().trim_ascii() == b"*" => Ok(true),
        _ => Err(Problem::bad_request(
            "If-None-Match: only `*` is taken here (create the schedule only if it does not exist)",
        )),
    }
}

/// The problem for a refused schedule operation.
fn refused(error: RuntimeError) -> Problem {
    match error {
        RuntimeError::Schedule(error) => match error {
            ScheduleError::NotFound(slug) => {
                Problem::not_found(format!("no schedule is named `{slug}`"))
            }
            ScheduleError::BadSlug { .. } => Problem::invalid_at("/slug", error.to_string()),
            ScheduleError::UnknownType { .. } => {
                Problem::invalid_at("/task_type", error.to_string())
            }
            ScheduleError::BadInput { .. } | ScheduleError::NotSaveable { .. } => {
                Problem::invalid_at("/input", error.to_string())
            }
            ScheduleError::BadOverlap(_) => Problem::invalid_at("/overlap", error.to_string()),
            ScheduleError::BadSession { .. } | ScheduleError::NoSession(_) => {
                Problem::invalid_at("/session", error.to_string())
            }
            ScheduleError::SessionBusy { .. } => Problem::conflict(error.to_string()),
            other => Problem::internal(other.to_string()),
        },
        other => Problem::from(other),
    }
}

/// Every schedule with its status.
#[utoipa::path(get, path = "/v1/schedules", operation_id = "list_schedules", responses((status = 200, body = Vec<ScheduleBody>)))]
pub(crate) async fn list(State(state): State<AppState>) -> Json<Vec<ScheduleBody>> {
    let views = state.inner.views.latest();
    Json(views.schedules.iter().map(ScheduleBody::from).collect())
}

/// One schedule, read from the loop (so a change just answered shows).
async fn current(state: &AppState, slug: String) -> Result<ScheduleBody, Problem> {
    let handle = state.inner.handle.clone();
    let name = slug.clone();
    match blocking(move || handle.schedule(&name)).await?? {
        Some(info) => Ok(ScheduleBody::from(&info)),
        None => Err(Problem::not_found(format!("no schedule is named `{slug}`"))),
    }
}

/// A schedule with its status.
#[utoipa::path(get, path = "/v1/schedules/{slug}", operation_id = "get_schedule", params(("slug" = String, Path, min_length = 1, max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", description = "The schedule's name: 1 to 63 lower-case letters, digits and '-', not starting or ending with '-'")), responses(
    (status = 200, body = ScheduleBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, description = "Not a slug", body = Problem, content_type = "application/problem+json"),
))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ScheduleBody>, Problem> {
    let name = slug(&name)?;
    let views = state.inner.views.latest();
    match views.schedules.iter().find(|s| s.def.slug == name) {
        Some(info) => Ok(Json(ScheduleBody::from(info))),
        None => current(&state, name).await.map(Json),
    }
}

/// Creates a schedule, or replaces it whole (its status and session stay); with
/// `If-None-Match: *`, only creates it.
#[utoipa::path(put, path = "/v1/schedules/{slug}", operation_id = "put_schedule", params(("slug" = String, Path, min_length = 1, max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", description = "The schedule's name: 1 to 63 lower-case letters, digits and '-', not starting or ending with '-'"), ("If-None-Match" = Option<String>, Header, description = "`*`: create the schedule only if no schedule has this slug (else 412, nothing changed)")), request_body = SchedulePutBody, responses(
    (status = 201, description = "Created", body = ScheduleBody, links(
        ("get_schedule" = (operation_id = "get_schedule", parameters(("slug" = "$response.body#/slug")), description = "Read the schedule made")),
        ("patch_schedule" = (operation_id = "patch_schedule", parameters(("slug" = "$response.body#/slug")), description = "Change the schedule made")),
        ("delete_schedule" = (operation_id = "delete_schedule", parameters(("slug" = "$response.body#/slug")), description = "Delete the schedule made")),
        ("run_schedule" = (operation_id = "run_schedule", parameters(("slug" = "$response.body#/slug")), description = "Run the schedule made")),
        ("pause_schedule" = (operation_id = "pause_schedule", parameters(("slug" = "$response.body#/slug")), description = "Pause the schedule made")),
        ("resume_schedule" = (operation_id = "resume_schedule", parameters(("slug" = "$response.body#/slug")), description = "Resume the schedule made")),
    )),
    (status = 200, description = "Replaced", body = ScheduleBody, links(
        ("get_schedule" = (operation_id = "get_schedule", parameters(("slug" = "$response.body#/slug")), description = "Read the schedule replaced")),
        ("patch_schedule" = (operation_id = "patch_schedule", parameters(("slug" = "$response.body#/slug")), description = "Change the schedule replaced")),
        ("delete_schedule" = (operation_id = "delete_schedule", parameters(("slug" = "$response.body#/slug")), description = "Delete the schedule replaced")),
        ("run_schedule" = (operation_id = "run_schedule", parameters(("slug" = "$response.body#/slug")), description = "Run the schedule replaced")),
        ("pause_schedule" = (operation_id = "pause_schedule", parameters(("slug" = "$response.body#/slug")), description = "Pause the schedule replaced")),
        ("resume_schedule" = (operation_id = "resume_schedule", parameters(("slug" = "$response.body#/slug")), description = "Resume the schedule replaced")),
    )),
    (status = 422, body = Problem, content_type = "application/problem+json"),
    (status = 400, description = "The body is empty, not JSON, or not the shape; or `If-None-Match` is not `*`", body = Problem, content_type = "application/problem+json"),
    (status = 413, description = "The body is over the server's limit", body = Problem, content_type = "application/problem+json"),
    (status = 409, description = "The session is busy with another schedule's run", body = Problem, content_type = "application/problem+json"),
    (status = 412, description = "`If-None-Match: *` and a schedule of this slug exists (it is left as it is)", body = Problem, content_type = "application/problem+json"),
))]
pub(crate) async fn put(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<SchedulePutBody>,
) -> Result<Response, Problem> {
    let name = slug(&name)?;
    let create_only = create_only(&headers)?;
    let mut errors = Vec::new();
    if body.task_type.is_none() && body.prompt.is_none() {
        errors.push(FieldError::new(
            "/task_type",
            "give `task_type` (with `input`) or `prompt`",
        ));
    }
    if body.prompt.is_some() && body.input.is_some() {
        errors.push(FieldError::new(
            "/input",
            "a `prompt` is the input; give one or the other",
        ));
    }
    let given = Given {
        task_type: body.task_type,
        prompt: body.prompt,
        input: body.input,
        schedule: Some(&body.schedule),
        session: body.session.as_deref(),
        overlap: body.overlap.as_deref(),
        catch_up: body.catch_up.as_ref(),
        agent: body.agent,
        priority: body.priority.as_deref(),
    };
    let checked = check(&state, given, &mut errors);
    let (Some((task_type, input)), Some(spec), true) =
        (checked.task, checked.spec, errors.is_empty())
    else {
        return Err(Problem::invalid(summary(&errors), errors));
    };
    let mut def = ScheduleDef::new(name.clone(), spec, task_type, input)
        .enabled(body.enabled.unwrap_or(true))
        .session(checked.session.unwrap_or_default())
        .overlap(checked.overlap.unwrap_or_default())
        .catch_up(checked.catch_up.unwrap_or_default());
    if let Some(n) = body.pause_after_failures {
        def = def.pause_after_failures(n);
    }
    if let Some(agent) = checked.agent {
        def = def.agent(agent);
    }
    if let Some(priority) = checked.priority {
        def = def.priority(priority);
    }
    let handle = state.inner.handle.clone();
    let created = if create_only {
        let made = blocking(move || handle.create_schedule(def))
            .await?
            .map_err(refused)?;
        if !made {
            return Err(Problem::new(
                StatusCode::PRECONDITION_FAILED,
                "exists",
                "Precondition Failed",
                format!("a schedule named `{name}` exists already (If-None-Match: *)"),
            ));
        }
        true
    } else {
        blocking(move || handle.put_schedule(def))
            .await?
            .map_err(refused)?
    };
    state.caught_up().await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(current(&state, name).await?)).into_response())
}

/// Changes some fields of a schedule (`{"enabled": false}` pauses it).
#[utoipa::path(patch, path = "/v1/schedules/{slug}", operation_id = "patch_schedule", params(("slug" = String, Path, min_length = 1, max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", description = "The schedule's name: 1 to 63 lower-case letters, digits and '-', not starting or ending with '-'")), request_body = SchedulePatchBody, responses(
    (status = 200, body = ScheduleBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
    (status = 400, description = "The body is empty, not JSON, or not the shape", body = Problem, content_type = "application/problem+json"),
    (status = 413, description = "The body is over the server's limit", body = Problem, content_type = "application/problem+json"),
    (status = 409, description = "The session is busy with another schedule's run", body = Problem, content_type = "application/problem+json"),
))]
pub(crate) async fn patch(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<SchedulePatchBody>,
) -> Result<Json<ScheduleBody>, Problem> {
    let name = slug(&name)?;
    let mut errors = Vec::new();
    let input_alone = body.task_type.is_none() && body.prompt.is_none();
    let given = Given {
        task_type: body.task_type,
        prompt: body.prompt,
        input: if input_alone {
            None
        } else {
            body.input.clone()
        },
        schedule: body.schedule.as_ref(),
        session: body.session.as_deref(),
        overlap: body.overlap.as_deref(),
        catch_up: body.catch_up.as_ref(),
        agent: body.agent,
        priority: body.priority.as_deref(),
    };
    let checked = check(&state, given, &mut errors);
    if input_alone && body.input.as_ref().is_some_and(|input| !input.is_object()) {
        errors.push(FieldError::new("/input", NOT_AN_OBJECT));
    }
    if !errors.is_empty() {
        return Err(Problem::invalid(summary(&errors), errors));
    }
    let mut patch = SchedulePatch::new();
    match checked.task {
        Some((task_type, input)) => {
            patch.task_type = Some(task_type);
            patch.input = Some(input);
        }
        None => patch.input = body.input,
    }
    patch.enabled = body.enabled;
    patch.spec = checked.spec;
    patch.session = checked.session;
    patch.overlap = checked.overlap;
    patch.catch_up = checked.catch_up;
    if let Some(n) = body.pause_after_failures {
        patch.pause_after_failures = Some(Some(n));
    }
    let handle = state.inner.handle.clone();
    let patched = name.clone();
    let info = match (checked.agent, checked.priority) {
        (None, None) => blocking(move || handle.patch_schedule(&patched, patch)).await?,
        // The agent and priority are not fields of a journaled patch: the schedule is
        // read, patched and put whole in one turn of the loop.
        (agent, priority) => {
            blocking(move || {
                handle.replace_schedule(&patched, move |def| {
                    let mut def = patch.apply(&def);
                    if agent.is_some() {
                        def.agent = agent;
                    }
                    if priority.is_some() {
                        def.priority = priority;
                    }
                    def
                })
            })
            .await?
        }
    }
    .map_err(refused)?;
    state.caught_up().await?;
    Ok(Json(ScheduleBody::from(&info)))
}

/// Deletes a schedule (runs going on go on).
#[utoipa::path(delete, path = "/v1/schedules/{slug}", operation_id = "delete_schedule", params(("slug" = String, Path, min_length = 1, max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", description = "The schedule's name: 1 to 63 lower-case letters, digits and '-', not starting or ending with '-'")), responses(
    (status = 204, description = "Deleted"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, description = "Not a slug", body = Problem, content_type = "application/problem+json"),
))]
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<StatusCode, Problem> {
    let name = slug(&name)?;
    let handle = state.inner.handle.clone();
    blocking(move || handle.delete_schedule(&name))
        .await?
        .map_err(refused)?;
    state.caught_up().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Runs a schedule now, through its overlap policy and session.
#[utoipa::path(post, path = "/v1/schedules/{slug}/run", operation_id = "run_schedule", params(("slug" = String, Path, min_length = 1, max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", description = "The schedule's name: 1 to 63 lower-case letters, digits and '-', not starting or ending with '-'")), responses(
    (status = 202, body = ScheduleOutcome),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, description = "Not a slug", body = Problem, content_type = "application/problem+json"),
))]
pub(crate) async fn run(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, Problem> {
    let name = slug(&name)?;
    let handle = state.inner.handle.clone();
    let fired = name.clone();
    let outcome = blocking(move || handle.trigger_schedule(&fired))
        .await?
        .map_err(refused)?;
    state.caught_up().await?;
    let (status, task, detail) = match outcome {
        FireOutcome::Started(id) => ("started", Some(id.get()), None),
        FireOutcome::Buffered => ("buffered", None, None),
        FireOutcome::Skipped => (
            "skipped",
            None,
            Some("a run is going and the overlap policy skips".to_owned()),
        ),
        FireOutcome::Delayed(at) => (
            "delayed",
            None,
            Some(format!("its session is busy; it tries again at {at}")),
        ),
        FireOutcome::Failed(why) => ("failed", None, Some(why)),
        _ => ("unknown", None, None),
    };
    let body = ScheduleOutcome {
        slug: name,
        status: status.to_owned(),
        task,
        detail,
    };
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// Pauses a schedule.
#[utoipa::path(post, path = "/v1/schedules/{slug}/pause", operation_id = "pause_schedule", params(("slug" = String, Path, min_length = 1, max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", description = "The schedule's name: 1 to 63 lower-case letters, digits and '-', not starting or ending with '-'")), responses(
    (status = 200, body = ScheduleBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, description = "Not a slug", body = Problem, content_type = "application/problem+json"),
))]
pub(crate) async fn pause(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ScheduleBody>, Problem> {
    let name = slug(&name)?;
    let handle = state.inner.handle.clone();
    let paused = name.clone();
    blocking(move || handle.pause_schedule(&paused))
        .await?
        .map_err(refused)?;
    state.caught_up().await?;
    current(&state, name).await.map(Json)
}

/// Resumes a paused schedule.
#[utoipa::path(post, path = "/v1/schedules/{slug}/resume", operation_id = "resume_schedule", params(("slug" = String, Path, min_length = 1, max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", description = "The schedule's name: 1 to 63 lower-case letters, digits and '-', not starting or ending with '-'")), responses(
    (status = 200, body = ScheduleBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, description = "Not a slug", body = Problem, content_type = "application/problem+json"),
))]
pub(crate) async fn resume(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ScheduleBody>, Problem> {
    let name = slug(&name)?;
    let handle = state.inner.handle.clone();
    let resumed = name.clone();
    blocking(move || handle.resume_schedule(&resumed))
        .await?
        .map_err(refused)?;
    state.caught_up().await?;
    current(&state, name).await.map(Json)
}
