//! `POST /v1/tasks` on a node: the task's shard is its agent's (or, without an
//! agent, its idempotency key's; without either, one this node runs). A key is bound to
//! its shard for ever, cluster-wide. A submission for a shard run here goes to its
//! runtime; one for another shard is checked here, put in that shard's inbox, and
//! answered `202` once committed there — with its task's id once the owner took it,
//! which the node waits a moment for.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use spool_cluster::ShardId;
use spool_http::{Problem, SubmitCheck};
use spool_postgres::cluster::{TakenOutcome, shard_for};

use super::front::{BODY_LIMIT, Front, call, no_owner};

/// How soon the node first looks whether the owner took a submission it enqueued;
/// it looks again twice as late each time, up to [`LOOK_AT_MOST`].
const LOOK_FIRST: Duration = Duration::from_millis(10);

/// The longest between two looks.
const LOOK_AT_MOST: Duration = Duration::from_millis(200);

/// Submits a task through the node.
pub(crate) async fn submit(front: &Front, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, BODY_LIMIT).await {
        Ok(bytes) => bytes,
        Err(_) => return Problem::too_large(BODY_LIMIT).into_response(),
    };
    let key = match SubmitCheck::key(&parts.headers) {
        Ok(key) => key,
        Err(problem) => return problem.into_response(),
    };
    let checked = match front.check.check(&bytes) {
        Ok(checked) => checked,
        Err(problem) => return problem.into_response(),
    };
    let mut shard = match (&checked.agent, &key) {
        (Some(agent), _) => shard_for(agent, front.shards),
        (None, Some(key)) => shard_for(key, front.shards),
        (None, None) => pick(front),
    };
    if let Some(key) = &key {
        let (owned, at) = (key.clone(), shard);
        match front.db.run(move |db| db.bind_key(&owned, at)).await {
            Ok(bound) if bound == shard || checked.agent.is_none() => shard = bound,
            Ok(bound) => return key_elsewhere(key, bound),
            Err(error) => return no_owner(&format!("the key could not be bound: {error}")),
        }
    }
    if let Some(router) = front.local(shard) {
        return call(router, Request::from_parts(parts, Body::from(bytes))).await;
    }
    let key = match key {
        Some(key) => key,
        None => {
            // Bound like a client's key, so that what becomes of it can be read back.
            let (made, at) = (made_key(front), shard);
            let owned = made.clone();
            if let Err(error) = front.db.run(move |db| db.bind_key(&owned, at)).await {
                return no_owner(&format!("the key could not be bound: {error}"));
            }
            made
        }
    };
    let (owned, body) = (key.clone(), bytes.to_vec());
    let item = match front
        .db
        .run(move |db| db.enqueue(shard, &owned, &body))
        .await
    {
        Ok(item) => item,
        Err(error) => {
            return no_owner(&format!(
                "the submission could not be put in shard {shard}'s inbox: {error}"
            ));
        }
    };
    let outcome = wait_for_owner(front, &key, item).await;
    if let Some(TakenOutcome::Existing(id)) = outcome {
        return existing(front, &parts, id).await;
    }
    inbox_answer(shard, &key, outcome)
}

/// `200` for a repeat of a key (the request sent again) taken through the inbox: its
/// task, as a lone server answers it, with the task's state read from its shard.
async fn existing(front: &Front, parts: &axum::http::request::Parts, id: u64) -> Response {
    let mut read = Request::new(Body::empty());
    if let Some(token) = parts.headers.get(axum::http::header::AUTHORIZATION) {
        read.headers_mut()
            .insert(axum::http::header::AUTHORIZATION, token.clone());
    }
    if let Ok(uri) = format!("/v1/tasks/{id}").parse() {
        *read.uri_mut() = uri;
    }
    let shard = front.shard_of(id).unwrap_or(0);
    let response = front.to_shard(shard, read).await;
    let state = if response.status() == StatusCode::OK {
        let bytes = axum::body::to_bytes(response.into_body(), BODY_LIMIT)
            .await
            .unwrap_or_default();
        serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|task| task["state"].as_str().map(str::to_owned))
            .unwrap_or_else(|| "forgotten".to_owned())
    } else {
        "forgotten".to_owned()
    };
    let body = json!({"id": id, "admission": {"status": "existing", "state": state}});
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// A shard for a submission with neither agent nor key: one run here, in turn, else
/// any, in turn.
fn pick(front: &Front) -> ShardId {
    let turn = front.turn.fetch_add(1, Ordering::Relaxed);
    let local = front.local_shards();
    if local.is_empty() {
        u32::try_from(turn % u64::from(front.shards.max(1))).unwrap_or(0)
    } else {
        let at = usize::try_from(turn % local.len() as u64).unwrap_or(0);
        local.get(at).copied().unwrap_or(0)
    }
}

/// A key for a submission without one that goes to an inbox: the node, a counter and
/// the time, unique in the cluster.
fn made_key(front: &Front) -> String {
    let turn = front.turn.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("spool-{}-{nanos:x}-{turn}", front.me())
}

/// Waits, up to the node's inbox wait, for the owner of the key's shard to take the
/// inbox item `item`: what became of it, or `None` if it still waits. (The owner
/// takes a key's items in order, so one taken after it means it was taken too.)
async fn wait_for_owner(front: &Front, key: &str, item: u64) -> Option<TakenOutcome> {
    let until = Instant::now() + front.inbox_wait;
    let mut wait = LOOK_FIRST;
    loop {
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(LOOK_AT_MOST);
        let owned = key.to_owned();
        if let Ok(Some(binding)) = front.db.run(move |db| db.key_binding(&owned)).await
            && let Some((taken, outcome)) = binding.outcome
            && taken >= item
        {
            return Some(outcome);
        }
        if Instant::now() >= until {
            return None;
        }
    }
}

/// The answer to a submission put in shard `shard`'s inbox under `key`.
fn inbox_answer(shard: ShardId, key: &str, outcome: Option<TakenOutcome>) -> Response {
    let body = match outcome {
        Some(TakenOutcome::Refused(reason)) => {
            return Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "refused-by-shard",
                "Refused by its shard",
                format!("shard {shard} refused the submission: {reason}"),
            )
            .into_response();
        }
        Some(TakenOutcome::KeyReused(original)) => {
            // As a lone server says it.
            return Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency-key-reused",
                "Idempotency-Key reused",
                format!(
                    "the Idempotency-Key \"{key}\" was used for a different request (task \
                     {original}); send a new key for a new request"
                ),
            )
            .into_response();
        }
        Some(TakenOutcome::Task(id) | TakenOutcome::Existing(id)) => json!({
            "id": id,
            "admission": {"status": "inbox", "shard": shard},
            "idempotency_key": key,
        }),
        None => json!({
            "id": null,
            "admission": {"status": "inbox", "shard": shard},
            "idempotency_key": key,
        }),
    };
    (StatusCode::ACCEPTED, axum::Json(body)).into_response()
}

/// `422`: the key was bound to another shard by an earlier submission (for another
/// agent): it was used for a different request.
fn key_elsewhere(key: &str, bound: ShardId) -> Response {
    Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency-key-reused",
        "Idempotency-Key reused",
        format!(
            "the Idempotency-Key \"{key}\" was used for a different request (one placed on \
             shard {bound}); send a new key for a new request"
        ),
    )
    .into_response()
}
