//! Sessions: the conversations schedules' runs continue. Read one, or delete it (a
//! schedule that used it makes a new one at its next run). A deletion is an input to
//! the loop like any other: journaled, answered once durable.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Serialize;
use spool_core::{ScheduleError, SessionInfo, Value, check_session_id, message_bytes};
use spool_runtime::RuntimeError;
use utoipa::ToSchema;

use crate::call::blocking;
use crate::problem::Problem;
use crate::state::AppState;

/// A session.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionBody {
    /// Its id.
    pub id: String,
    /// Its messages, oldest first (as the runs returned them).
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<Value>,
    /// How many messages it holds.
    pub message_count: usize,
    /// The bytes its messages count for against the session byte limit (each
    /// message's compact JSON).
    pub bytes: usize,
    /// The task using it now, if one is.
    pub holder: Option<u64>,
    /// When it was made (RFC 3339).
    pub created_at: String,
    /// When messages were last added (RFC 3339).
    pub updated_at: String,
}

impl From<SessionInfo> for SessionBody {
    fn from(s: SessionInfo) -> SessionBody {
        SessionBody {
            id: s.id,
            message_count: s.messages.len(),
            bytes: s.messages.iter().map(message_bytes).sum(),
            messages: s.messages,
            holder: s.holder.map(|t| t.get()),
            created_at: s.created_at.to_string(),
            updated_at: s.updated_at.to_string(),
        }
    }
}

/// A session id from a path, checked (`../etc` is refused before anything is looked
/// up).
fn session_id(text: &str) -> Result<String, Problem> {
    check_session_id(text).map_err(|e| Problem::invalid_at("/id", e.to_string()))?;
    Ok(text.to_owned())
}

/// The problem for a refused session operation.
fn refused(error: RuntimeError) -> Problem {
    match error {
        RuntimeError::Schedule(ScheduleError::NoSession(id)) => {
            Problem::not_found(format!("no session has the id `{id}`"))
        }
        RuntimeError::Schedule(error @ ScheduleError::SessionBusy { .. }) => {
            Problem::conflict(format!("{error}; delete it once the run has ended"))
        }
        RuntimeError::Schedule(other) => Problem::internal(other.to_string()),
        other => Problem::from(other),
    }
}

/// One session, read from the loop.
#[utoipa::path(get, path = "/v1/sessions/{id}", operation_id = "get_session", params(("id" = String, Path, min_length = 1, max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", description = "The session's id: `s-1`, or the name a schedule shares it by")), responses(
    (status = 200, body = SessionBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, description = "Not a session id", body = Problem, content_type = "application/problem+json"),
))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<SessionBody>, Problem> {
    let id = session_id(&id)?;
    let handle = state.inner.handle.clone();
    let wanted = id.clone();
    let session = blocking(move || handle.session(&wanted))
        .await??
        .ok_or_else(|| Problem::not_found(format!("no session has the id `{id}`")))?;
    Ok(Json(SessionBody::from(session)))
}

/// Deletes a session: its messages are gone, and a schedule that used it makes a new
/// one at its next run. A session a run is using is not deleted (`409`): delete it once
/// the run has ended.
#[utoipa::path(delete, path = "/v1/sessions/{id}", operation_id = "delete_session", params(("id" = String, Path, min_length = 1, max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", description = "The session's id: `s-1`, or the name a schedule shares it by")), responses(
    (status = 204, description = "Deleted"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, description = "A run is using the session", body = Problem, content_type = "application/problem+json"),
    (status = 422, description = "Not a session id", body = Problem, content_type = "application/problem+json"),
))]
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, Problem> {
    let id = session_id(&id)?;
    let handle = state.inner.handle.clone();
    blocking(move || handle.delete_session(&id))
        .await?
        .map_err(refused)?;
    state.caught_up().await?;
    Ok(StatusCode::NO_CONTENT)
}
