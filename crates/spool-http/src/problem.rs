//! Errors as RFC 9457 problem details (`application/problem+json`): every error the API
//! answers says what was wrong in `title` and `detail`, and a 422 lists every violation
//! with its path. Nothing here carries a file path, a stack or a debug dump: messages
//! are written for the caller, from typed errors.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The media type of problem details.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// One thing wrong with a request's body: where (a JSON pointer into the body) and
/// what.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct FieldError {
    /// A JSON pointer (RFC 6901) into the request body: `/input/prompt`, `/schedule/expression`.
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

impl FieldError {
    /// A violation at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// An RFC 9457 problem: the body of every error the API answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem (`about:blank`-style tags under
    /// `https://spool.invalid/problems/`; see `docs/http.md`).
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary of the kind of problem.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What was wrong with this request, and what to do.
    pub detail: String,
    /// Every violation, for a 422.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
    /// Seconds to wait before trying again (also the `Retry-After` header), for a 429.
    #[serde(skip)]
    pub retry_after: Option<u64>,
}

impl Problem {
    /// A problem of kind `slug` (the last part of its type URI).
    pub fn new(status: StatusCode, slug: &str, title: &str, detail: impl Into<String>) -> Problem {
        Problem {
            kind: format!("https://spool.invalid/problems/{slug}"),
            title: title.to_owned(),
            status: status.as_u16(),
            detail: detail.into(),
            errors: Vec::new(),
            retry_after: None,
        }
    }

    /// 400: the body is not JSON, or not of the expected shape.
    pub fn bad_request(detail: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "bad-request",
            "Bad request",
            detail,
        )
    }

    /// 401: no bearer token, or a wrong one.
    pub fn unauthorized(detail: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Unauthorized",
            detail,
        )
    }

    /// 404: nothing by that name.
    pub fn not_found(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::NOT_FOUND, "not-found", "Not found", detail)
    }

    /// 409: the request conflicts with what is there now.
    pub fn conflict(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::CONFLICT, "conflict", "Conflict", detail)
    }

    /// 413: the body is over the limit.
    pub fn too_large(limit: usize) -> Problem {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too-large",
            "Request body too large",
            format!("the request body is over the limit of {limit} bytes"),
        )
    }

    /// 422: the body is JSON of the right shape but its values do not fit; `errors`
    /// lists each.
    pub fn invalid(detail: impl Into<String>, errors: Vec<FieldError>) -> Problem {
        let mut problem = Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
            "Invalid request",
            detail,
        );
        problem.errors = errors;
        problem
    }

    /// 422 with one violation, at `path`.
    pub fn invalid_at(path: &str, message: impl Into<String>) -> Problem {
        let message = message.into();
        Problem::invalid(
            format!("{path}: {message}"),
            vec![FieldError::new(path, message)],
        )
    }

    /// 429: try again after `retry_after` seconds.
    pub fn too_many(detail: impl Into<String>, retry_after: u64) -> Problem {
        let mut problem = Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too-many-requests",
            "Too many requests",
            detail,
        );
        problem.retry_after = Some(retry_after.max(1));
        problem
    }

    /// 503: the runtime stopped.
    pub fn unavailable(detail: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "Service unavailable",
            detail,
        )
    }

    /// 500, saying only what failed (never how, nor where).
    pub fn internal(detail: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            detail,
        )
    }

    /// The problem's status.
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"spool\""),
            );
        }
        response
    }
}

impl From<spool_runtime::RuntimeError> for Problem {
    fn from(error: spool_runtime::RuntimeError) -> Problem {
        match error {
            spool_runtime::RuntimeError::Gone => {
                Problem::unavailable("the runtime has stopped; nothing was changed")
            }
            other => Problem::internal(other.to_string()),
        }
    }
}
