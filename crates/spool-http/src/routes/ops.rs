//! Operations: `/healthz` (no token) and `/metrics` in the Prometheus text format, both
//! from the views.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::state::AppState;

mod prometheus;

/// `ok N` (N: the publications of the views so far) once the loop has published its
/// views; `503` `starting 0` before: the API's reads are not answered yet.
#[utoipa::path(get, path = "/healthz", operation_id = "healthz", security(()), responses(
    (status = 200, description = "`ok N`: ready, N publications so far", content_type = "text/plain"),
    (status = 503, description = "`starting 0`: the views are not published yet", content_type = "text/plain"),
))]
pub(crate) async fn healthz(State(state): State<AppState>) -> Response {
    let views = state.inner.views.latest();
    if views.generation == 0 {
        let mut response = (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "starting 0\n".to_owned(),
        )
            .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    }
    format!("ok {}\n", views.generation).into_response()
}

/// The metrics, in the Prometheus text format (version 0.0.4).
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", responses((status = 200, description = "Prometheus text", content_type = "text/plain")))]
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    let views = state.inner.views.latest();
    let too_many = state
        .inner
        .too_many
        .load(std::sync::atomic::Ordering::Relaxed);
    let mut response = prometheus::text(&views, too_many).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}
