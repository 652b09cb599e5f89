//! Schedules: list and read from the views; create or replace, patch,
//! delete, run now, pause and resume through the runtime's handle, each answered once
//! durable. A body's every problem is listed with its path.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use spool_core::{
    CatchUp, CronSpec, FireOutcome, Overlap, ScheduleDef, ScheduleError, ScheduleInfo,
    SchedulePatch, SessionMode, Spec, Value, check_slug,
};
use spool_runtime::RuntimeError;
use utoipa::ToSchema;

use crate::call::blocking;
use crate::guard::JsonBody;
use crate::problem::{FieldError, Problem};
use crate::routes::tasks::summary;
use crate::state::AppState;

/// When a schedule fires.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum SpecBody {
    /// A cron expression (five fields) on a time zone's wall clock.
    Cron {
        /// `minute hour day month weekday`, e.g. `0 9 * * 1-5`.
        expression: String,
        /// An IANA zone (default `UTC`).
        tz: Option<String>,
    },
    /// Every interval: `90s`, `5m`, `1h30m`, `1d`.
    Interval {
        /// The interval.
        every: String,
    },
    /// Once, at an RFC 3339 instant.
    Once {
        /// The instant.
        #[schema(format = DateTime)]
        at: String,
    },
}

/// What a schedule does when it is overdue after downtime.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CatchUpBody {
    /// Run the latest missed fire once (overdue-once; the default).
    Latest,
    /// Run none.
    None,
    /// Run every missed fire within a window (`6h`).
    All(String),
}

/// The body of `PUT /v1/schedules/{slug}` (a whole replacement).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SchedulePutBody {
    /// The task type each run makes (or give `prompt`).
    pub task_type: Option<String>,
    /// A prompt for the server's prompt type (`spool serve`: the built-in `agent`).
    pub prompt: Option<String>,
    /// The run's input (with `task_type`).
    #[schema(value_type = Option<Object>)]
    pub input: Option<Value>,
    /// Whether it fires (default true).
    pub enabled: Option<bool>,
    /// When it fires.
    pub schedule: SpecBody,
    /// `persist` (default: one conversation across runs), `fresh`, or `shared:ID`.
    pub session: Option<String>,
    /// `skip` (default), `buffer-one`, `buffer-all`, `cancel-other`, `allow-all`.
    pub overlap: Option<String>,
    /// Overdue fires after downtime.
    pub catch_up: Option<CatchUpBody>,
    /// Pause itself after this many failed runs in a row.
    #[serde(default, deserialize_with = "whole_u32")]
    #[schema(value_type = Option<u64>, maximum = 4294967295_u64)]
    pub pause_after_failures: Option<u32>,
}

/// The body of `PATCH /v1/schedules/{slug}`: the fields to change.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SchedulePatchBody {
    /// See [`SchedulePutBody`].
    pub task_type: Option<String>,
    /// See [`SchedulePutBody`].
    pub prompt: Option<String>,
    /// See [`SchedulePutBody`].
    #[schema(value_type = Option<Object>)]
    pub input: Option<Value>,
    /// See [`SchedulePutBody`].
    pub enabled: Option<bool>,
    /// See [`SchedulePutBody`].
    pub schedule: Option<SpecBody>,
    /// See [`SchedulePutBody`].
    pub session: Option<String>,
    /// See [`SchedulePutBody`].
    pub overlap: Option<String>,
    /// See [`SchedulePutBody`].
    pub catch_up: Option<CatchUpBody>,
    /// See [`SchedulePutBody`].
    #[serde(default, deserialize_with = "whole_u32")]
    #[schema(value_type = Option<u64>, maximum = 4294967295_u64)]
    pub pause_after_failures: Option<u32>,
}

/// A count from 0 to `u32::MAX`, written `3` or `3.0`: JSON Schema's `integer`, which
/// the document promises, takes a number with a zero fraction.
fn whole_u32<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    use serde::de::Error as _;
    let Some(number) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    let whole = match number.as_u64() {
        Some(n) => u32::try_from(n).ok(),
        None => number
            .as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(f))
            .map(|f| f as u32),
    };
    whole.map(Some).ok_or_else(|| {
        D::Error::custom(format!(
            "expected a whole number from 0 to 4294967295, found {number}"
        ))
    })
}

/// How a schedule is doing.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleStatusBody {
    /// Its next fire (none: paused or done).
    pub next_run: Option<String>,
    /// When its last run started.
    pub last_run: Option<String>,
    /// `success` or `error`.
    pub last_result: Option<String>,
    /// Why its last run failed.
    pub last_error: Option<String>,
    /// Its session's id.
    pub session: Option<String>,
    /// Runs started.
    pub runs: u64,
    /// Failed runs in a row.
    pub consecutive_failures: u32,
    /// Fires that did not run.
    pub missed: u64,
    /// Its runs going now (task ids).
    pub running: Vec<u64>,
    /// Why it paused itself.
    pub paused_reason: Option<String>,
}

/// A schedule and its status.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleBody {
    /// Its name.
    pub slug: String,
    /// The task type its runs make.
    pub task_type: String,
    /// Their input.
    #[schema(value_type = Object)]
    pub input: Value,
    /// Whether it fires.
    pub enabled: bool,
    /// When.
    pub schedule: SpecBody,
    /// `persist`, `fresh` or `shared:ID`.
    pub session: String,
    /// The overlap policy.
    pub overlap: String,
    /// The catch-up policy.
    pub catch_up: CatchUpBody,
    /// Pause after this many failures in a row.
    pub pause_after_failures: Option<u32>,
    /// When it was made.
    pub created_at: String,
    /// When it was last changed.
    pub updated_at: String,
    /// How it is doing.
    pub status: ScheduleStatusBody,
}

impl From<&ScheduleInfo> for ScheduleBody {
    fn from(info: &ScheduleInfo) -> ScheduleBody {
        let def = &info.def;
        let s = &info.status;
        ScheduleBody {
            slug: def.slug.clone(),
            task_type: def.task_type.clone(),
            input: def.input.clone(),
            enabled: def.enabled,
            schedule: match &def.spec {
                Spec::Cron(cron) => SpecBody::Cron {
                    expression: cron.expression().to_owned(),
                    tz: Some(cron.time_zone().to_owned()),
                },
                Spec::Every(every) => SpecBody::Interval {
                    every: interval_text(*every),
                },
                Spec::Once(at) => SpecBody::Once { at: at.to_string() },
            },
            session: match &def.session {
                SessionMode::Persist => "persist".to_owned(),
                SessionMode::Fresh => "fresh".to_owned(),
                SessionMode::Shared(id) => format!("shared:{id}"),
            },
            overlap: def.overlap.name().to_owned(),
            catch_up: match def.catch_up {
                CatchUp::None => CatchUpBody::None,
                CatchUp::All { window } => CatchUpBody::All(interval_text(window)),
                _ => CatchUpBody::Latest,
            },
            pause_after_failures: def.pause_after_failures,
            created_at: info.created_at.to_string(),
            updated_at: info.updated_at.to_string(),
            status: ScheduleStatusBody {
                next_run: s.next_run.map(|t| t.to_string()),
                last_run: s.last_run.map(|t| t.to_string()),
                last_result: s.last_result.map(|r| {
                    match r {
                        spool_core::RunResult::Success => "success",
                        _ => "error",
                    }
                    .to_owned()
                }),
                last_error: s.last_error.clone(),
                session: s.session.clone(),
                runs: s.runs,
                consecutive_failures: s.consecutive_failures,
                missed: s.missed,
                running: s.running.iter().map(|id| id.get()).collect(),
                paused_reason: s.paused_reason.clone(),
            },
        }
    }
}

/// What `POST /v1/schedules/{slug}/run` did.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleOutcome {
    /// The schedule.
    pub slug: String,
    /// `started`, `buffered`, `skipped`, `delayed` or `failed`.
    pub status: String,
    /// The run's task, if one started.
    pub task: Option<u64>,
    /// When a delayed fire tries again, or why one failed.
    pub detail: Option<String>,
}

/// `1h30m`, `90s`: the interval as `Spec::parse_every` reads it.
fn interval_text(every: Duration) -> String {
    let mut secs = every.as_secs();
    if secs == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

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
}

#[allow(clippy::too_many_arguments)]
fn check(
    state: &AppState,
    task_type: Option<String>,
    prompt: Option<String>,
    input: Option<Value>,
    schedule: Option<&SpecBody>,
    session: Option<&str>,
    overlap: Option<&str>,
    catch_up: Option<&CatchUpBody>,
    errors: &mut Vec<FieldError>,
) -> Checked {
    let task = run_of(state, task_type, prompt, input, errors);
    let spec = schedule.and_then(|s| spec(s, errors));
    let session = session.and_then(|s| session_mode(s, errors));
    let overlap = overlap.and_then(|o| match Overlap::parse(o) {
        Ok(o) => Some(o),
        Err(e) => {
            errors.push(FieldError::new("/overlap", e.to_string()));
            None
        }
    });
    let catch_up = catch_up.and_then(|c| match c {
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
    Checked {
        task,
        spec,
        session,
        overlap,
        catch_up,
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
        if let Some(schema) = state.inner.schemas.get(task_type) {
            if let Err(violations) = schema.check(input) {
                errors.extend(
                    violations
                        .into_iter()
                        .map(|v| FieldError::new(format!("/input{}", v.path), v.message)),
                );
            }
        }
    }
    task
}

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

/// Creates a schedule, or replaces it whole (its status and session stay).
#[utoipa::path(put, path = "/v1/schedules/{slug}", operation_id = "put_schedule", params(("slug" = String, Path, min_length = 1, max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", description = "The schedule's name: 1 to 63 lower-case letters, digits and '-', not starting or ending with '-'")), request_body = SchedulePutBody, responses(
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
    (status = 400, description = "The body is empty, not JSON, or not the shape", body = Problem, content_type = "application/problem+json"),
    (status = 413, description = "The body is over the server's limit", body = Problem, content_type = "application/problem+json"),
    (status = 409, description = "The session is busy with another schedule's run", body = Problem, content_type = "application/problem+json"),
))]
pub(crate) async fn put(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<SchedulePutBody>,
) -> Result<Response, Problem> {
    let name = slug(&name)?;
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
    let checked = check(
        &state,
        body.task_type,
        body.prompt,
        body.input,
        Some(&body.schedule),
        body.session.as_deref(),
        body.overlap.as_deref(),
        body.catch_up.as_ref(),
        &mut errors,
    );
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
    let handle = state.inner.handle.clone();
    let created = blocking(move || handle.put_schedule(def))
        .await?
        .map_err(refused)?;
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
    let checked = check(
        &state,
        body.task_type,
        body.prompt,
        if input_alone {
            None
        } else {
            body.input.clone()
        },
        body.schedule.as_ref(),
        body.session.as_deref(),
        body.overlap.as_deref(),
        body.catch_up.as_ref(),
        &mut errors,
    );
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
    let info = blocking(move || handle.patch_schedule(&patched, patch))
        .await?
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
