//! The node's whole API: each request sent where what it is about lives.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};

use super::front::Front;

/// The node's whole API: every request, by what it is about.
pub(crate) async fn handle(State(front): State<Arc<Front>>, mut request: Request) -> Response {
    // A request another node passed on (its proof holds) is answered from the shard it
    // names; the same headers from anyone else are dropped.
    let passed_on = front.hop.check(&mut request);
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let guarded = !matches!(path.as_str(), "/" | "/healthz");
    if guarded && let Err(problem) = front.access.check(&method, request.headers()) {
        return problem.into_response();
    }
    if let Some(shard) = passed_on {
        return front.forwarded(shard, request).await;
    }
    match (&method, segments.as_slice()) {
        (_, ["healthz"]) => super::status::healthz(&front),
        (&Method::GET, ["metrics"]) => super::status::metrics(&front).await,
        (&Method::GET, ["v1", "cluster"]) => super::status::cluster(&front).await,
        (&Method::POST, ["v1", "tasks"]) => super::submit::submit(&front, request).await,
        (&Method::GET | &Method::HEAD, ["v1", "tasks"]) => front.list_tasks(request).await,
        (_, ["v1", "tasks", id, ..]) => {
            match id.parse::<u64>().ok().and_then(|id| front.shard_of(id)) {
                Some(shard) => front.to_shard(shard, request).await,
                None => front.any(request).await,
            }
        }
        (&Method::GET | &Method::HEAD, ["v1", "schedules"]) => {
            front.list_all(request, Some("slug")).await
        }
        (_, ["v1", "schedules", slug, ..]) => {
            let shard = front.shard_of_slug(slug);
            front.to_shard(shard, request).await
        }
        (&Method::GET | &Method::HEAD, ["v1", "confirmations"]) => {
            front.list_all(request, None).await
        }
        // A confirmation's key is `TASK.NUMBER`: the task's shard has it.
        (_, ["v1", "confirmations", key, ..]) => match key
            .split_once('.')
            .and_then(|(task, _)| task.parse::<u64>().ok())
            .and_then(|task| front.shard_of(task))
        {
            Some(shard) => front.to_shard(shard, request).await,
            None => front.any(request).await,
        },
        // Sessions are named apart by shard (from its first task id), so at most one
        // shard has a session of a name it made; a name given by a schedule is looked
        // for in each shard in turn.
        (_, ["v1", "sessions", _, ..]) => front.first_found(request).await,
        (&Method::GET, ["v1", "events"])
            if front.shards > 1
                && super::front::query_value(request.uri().query().unwrap_or(""), "shard")
                    .is_none() =>
        {
            super::events::merged(&front, request).await
        }
        (_, ["v1", "queue"] | ["v1", "events"]) => front.one_shard(request).await,
        _ => front.any(request).await,
    }
}
