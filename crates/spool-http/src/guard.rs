//! What every request passes before its handler: the bearer token (compared in
//! constant time), and the JSON body extractor that turns every way a body can be
//! wrong — too large, not JSON, the wrong shape — into a problem.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::problem::Problem;
use crate::state::{AppState, bearer};

/// Lets a request in if its token fits the state's [`Access`](crate::state::Access).
pub(crate) async fn authorize(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let reads = matches!(*request.method(), Method::GET | Method::HEAD);
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    match state.inner.access.allows(given, reads) {
        Ok(()) => next.run(request).await,
        Err(why) => Problem::unauthorized(why).into_response(),
    }
}

/// A JSON body of type `T`, read within the state's body limit.
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub(crate) T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = Problem;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Problem> {
        let limit = state.inner.body_limit;
        let bytes = read_body(request, limit).await?;
        parse(&bytes).map(JsonBody)
    }
}

/// Reads a body of at most `limit` bytes: one over it is a 413, one that broke off
/// (the client stopped sending, or went away) a 400.
pub(crate) async fn read_body(request: Request, limit: usize) -> Result<Bytes, Problem> {
    let body = request.into_body();
    axum::body::to_bytes(body, limit).await.map_err(|error| {
        if error.into_inner().is::<http_body_util::LengthLimitError>() {
            Problem::too_large(limit)
        } else {
            Problem::bad_request("the request body broke off before its end")
        }
    })
}

/// Parses `bytes` as JSON of type `T`: a body that is not JSON, or not of the shape,
/// is a 400 saying where (line and column) and what, in serde's words.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    if bytes.is_empty() {
        return Err(Problem::bad_request(
            "the request body is empty; a JSON object was expected",
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Data => "the body does not have the expected shape",
            _ => "the body is not valid JSON",
        };
        Problem::bad_request(format!("{what}: {e}"))
    })
}
