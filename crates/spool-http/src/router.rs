//! The router: every endpoint, the token check in front of them, and problems for
//! paths and methods that are not endpoints.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};

use crate::guard::authorize;
use crate::openapi;
use crate::problem::Problem;
use crate::routes::{confirmations, events, history, ops, queue, schedules, sessions, tasks, web};
use crate::state::{AppState, await_views};

/// The API's router over `state`: `/v1/...`, `/healthz`, `/metrics`, and the live web
/// page at `/` (docs/web.md; it needs no token, its API calls do). Mount it on any
/// tokio runtime (`axum::serve`), or run it with [`Server`](crate::Server).
///
/// # Example
/// ```no_run
/// use std::time::Duration;
/// use spool_core::TaskRegistry;
/// use spool_runtime::Runtime;
///
/// let registry = TaskRegistry::new();
/// let (builder, views) = spool_http::publish_views(
///     Runtime::builder().registry(registry.clone()),
///     spool_http::DEFAULT_PUBLISH_EVERY,
///     spool_http::DEFAULT_EVENT_RING,
/// );
/// let mut runtime = builder.build();
/// let state = spool_http::AppState::new(runtime.handle(), registry, views, "secret").unwrap();
/// let app: axum::Router = spool_http::router(state);
/// // On the embedder's own tokio runtime:
/// // axum::serve(tokio::net::TcpListener::bind("127.0.0.1:7420").await?, app).await?;
/// runtime.run();
/// ```
pub fn router(state: AppState) -> Router {
    let guarded = Router::new()
        .route("/v1/tasks", post(tasks::submit).get(tasks::list))
        .route("/v1/tasks/{id}", get(tasks::get))
        .route("/v1/tasks/{id}/cancel", post(tasks::cancel))
        .route("/v1/tasks/{id}/history", get(history::get))
        .route("/v1/tasks/{id}/fork", post(history::fork))
        .route("/v1/task-types", get(tasks::types))
        .route("/v1/confirmations", get(confirmations::list))
        .route("/v1/confirmations/{key}", post(confirmations::answer))
        .route("/v1/schedules", get(schedules::list))
        .route(
            "/v1/schedules/{slug}",
            get(schedules::get)
                .put(schedules::put)
                .patch(schedules::patch)
                .delete(schedules::delete),
        )
        .route("/v1/schedules/{slug}/run", post(schedules::run))
        .route("/v1/schedules/{slug}/pause", post(schedules::pause))
        .route("/v1/schedules/{slug}/resume", post(schedules::resume))
        .route(
            "/v1/sessions/{id}",
            get(sessions::get).delete(sessions::delete),
        )
        .route("/v1/queue", get(queue::get))
        .route("/v1/events", get(events::stream))
        .route("/v1/openapi.json", get(openapi::document))
        .route("/metrics", get(ops::metrics))
        // After the token check: reads wait for the views' first publication.
        .route_layer(middleware::from_fn_with_state(state.clone(), await_views))
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize));
    Router::new()
        .route("/", get(web::page))
        .route("/healthz", get(ops::healthz))
        .merge(guarded)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // Bodies are read within the limit by the handlers' extractor, which answers
        // a problem; axum's own limit stays out of its way.
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

async fn not_found(uri: axum::http::Uri) -> Problem {
    Problem::not_found(format!(
        "no endpoint at {}; see /v1/openapi.json",
        uri.path()
    ))
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Problem {
    Problem::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        "Method not allowed",
        format!("{} does not take {method}", uri.path()),
    )
}
