//! One HTTP API over every shard of the cluster, on every node: a request goes to
//! the shard it is about — run here (its router, in this process) or on the node that
//! holds it (passed on once, with the shard named) — and lists are gathered from every
//! shard.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use spool_cluster::{HeldShards, ShardId, shard_of_task};
use spool_core::TaskRegistry;
use spool_http::{Access, AppState, DeltaHub, Problem, SubmitCheck, ViewsHandle};
use spool_postgres::cluster::shard_for;
use tower::ServiceExt as _;

use super::db::Db;
use super::peers::{HopKey, Peers, forward};
use crate::agent::AGENT_TYPE;

/// The largest body a request may have (the API's own limit).
pub(crate) const BODY_LIMIT: usize = spool_http::DEFAULT_BODY_LIMIT;

/// How long a request for a shard this node has just leased waits for its runtime
/// to be recovered before it is answered `503`.
const STARTING_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What a shard's runtime publishes for its API, as the runtime was made.
pub(crate) struct Published {
    /// Its views and trace events.
    pub(crate) views: ViewsHandle,
    /// The pieces of its streamed answers.
    pub(crate) deltas: DeltaHub,
}

/// The shared state of the node's API.
pub(crate) struct Front {
    /// The cluster's shard count.
    pub(crate) shards: u32,
    /// This node's name (set once the server has bound its port, which names it by
    /// default).
    pub(crate) node_id: OnceLock<String>,
    /// The shards this node runs (set once the node has joined).
    pub(crate) held: OnceLock<HeldShards>,
    /// What each shard's runtime publishes (views, pieces of answers), as it was made.
    pub(crate) views: Arc<Mutex<BTreeMap<ShardId, Published>>>,
    /// Each shard's router, for the epoch it was made for.
    routers: Mutex<BTreeMap<ShardId, (u64, axum::Router, AppState)>>,
    /// The task types, with the built-in agent's input schema.
    pub(crate) registry: TaskRegistry,
    /// Who may read and write.
    pub(crate) access: Access,
    /// The API's token.
    pub(crate) token: String,
    /// Checks submissions before they go to another shard's inbox.
    pub(crate) check: SubmitCheck,
    /// The cluster's tables.
    pub(crate) db: Db,
    /// Who holds which shard.
    pub(crate) peers: Peers,
    /// Signs and checks requests passed between nodes.
    pub(crate) hop: HopKey,
    /// Set when the server stops: streams passed on from other nodes end.
    closing: tokio::sync::watch::Sender<bool>,
    /// How long a submission put in another shard's inbox waits for its task's id.
    pub(crate) inbox_wait: std::time::Duration,
    /// Turns for shards picked for submissions without agent or key.
    pub(crate) turn: std::sync::atomic::AtomicU64,
}

impl Front {
    /// The state of a node's API.
    pub(crate) fn new(
        db: Db,
        registry: TaskRegistry,
        access: Access,
        token: String,
        check: SubmitCheck,
        views: Arc<Mutex<BTreeMap<ShardId, Published>>>,
        inbox_wait: std::time::Duration,
    ) -> Front {
        let hop = HopKey::new(&token);
        Front {
            shards: db.shards(),
            node_id: OnceLock::new(),
            held: OnceLock::new(),
            views,
            routers: Mutex::new(BTreeMap::new()),
            registry,
            access,
            token,
            check,
            db,
            peers: Peers::default(),
            hop,
            closing: tokio::sync::watch::Sender::new(false),
            inbox_wait,
            turn: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// This node's name.
    pub(crate) fn me(&self) -> &str {
        self.node_id.get().map_or("starting", String::as_str)
    }

    /// The shards run here now, in order.
    pub(crate) fn local_shards(&self) -> Vec<ShardId> {
        self.held.get().map_or_else(Vec::new, |held| {
            held.list().into_iter().map(|(shard, _, _)| shard).collect()
        })
    }

    /// The router of shard `shard` if it runs here: made once per lease epoch over
    /// the runtime's handle and the views it publishes.
    pub(crate) fn local(&self, shard: ShardId) -> Option<axum::Router> {
        let held = self.held.get()?.get(shard);
        let mut routers = self.routers.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((epoch, handle)) = held else {
            // Not run here (any more): its API goes, and its streams end.
            if let Some((_, _, gone)) = routers.remove(&shard) {
                gone.close_streams();
            }
            return None;
        };
        if let Some((made_for, router, _)) = routers.get(&shard)
            && *made_for == epoch
        {
            return Some(router.clone());
        }
        let (views, deltas) = {
            let published = self.views.lock().unwrap_or_else(PoisonError::into_inner);
            let published = published.get(&shard)?;
            (published.views.clone(), published.deltas.clone())
        };
        let state = AppState::new(handle, self.registry.clone(), views, self.token.clone())
            .ok()?
            .access(self.access.clone())
            .prompt_type(AGENT_TYPE)
            .with_deltas(deltas);
        let router = spool_http::router(state.clone());
        if let Some((_, _, old)) = routers.insert(shard, (epoch, router.clone(), state)) {
            old.close_streams();
        }
        Some(router)
    }

    /// Ends the event streams of every shard's API (the server is stopping).
    pub(crate) fn close_streams(&self) {
        self.closing.send_replace(true);
        let routers = self.routers.lock().unwrap_or_else(PoisonError::into_inner);
        for (_, _, state) in routers.values() {
            state.close_streams();
        }
    }

    /// Resolves once the server stops (the streams end then).
    pub(crate) fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut closing = self.closing.subscribe();
        async move {
            let _ = closing.wait_for(|closed| *closed).await;
        }
    }

    /// `response`, passed on from another node, with its body ended when the server
    /// stops if it is an event stream (which would otherwise hold the stop until the
    /// other node ends it).
    fn ending(&self, response: Response) -> Response {
        let streams = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !streams {
            return response;
        }
        let closed = self.closed();
        response.map(|body| {
            use futures::StreamExt as _;
            Body::from_stream(body.into_data_stream().take_until(closed))
        })
    }

    /// Answers `request` from shard `shard`: here if it runs here, else from the node
    /// that holds it (asked again once if that node no longer does); `503` when no
    /// live node holds it.
    pub(crate) async fn to_shard(&self, shard: ShardId, request: Request) -> Response {
        if let Some(router) = self.local(shard) {
            return call(router, request).await;
        }
        let (parts, body) = request.into_parts();
        let bytes = match axum::body::to_bytes(body, BODY_LIMIT).await {
            Ok(bytes) => bytes,
            Err(_) => return Problem::too_large(BODY_LIMIT).into_response(),
        };
        let mut why = String::new();
        for fresh in [false, true] {
            match self.peers.owner(&self.db, shard, fresh).await {
                Ok(Some((owner, _))) if owner == self.me() => {
                    // Leased here a moment ago: its runtime is being recovered.
                    if let Some(router) = self.starting(shard).await {
                        let request = Request::from_parts(parts.clone(), Body::from(bytes));
                        return call(router, request).await;
                    }
                    why = format!("shard {shard} is starting on this node");
                }
                Ok(Some((owner, addr))) => {
                    let request = Request::from_parts(parts.clone(), Body::from(bytes.clone()));
                    match forward(&addr, shard, self.me(), &self.hop, request).await {
                        Ok(response) if !moved(&response) => return self.ending(response),
                        Ok(_) => why = format!("node {owner} no longer holds shard {shard}"),
                        Err(error) if error.sent && !safe(&parts.method) => {
                            // It may have been done: sending it again could do it twice.
                            return Problem::new(
                                StatusCode::BAD_GATEWAY,
                                "node-did-not-answer",
                                "The shard's node did not answer",
                                format!(
                                    "node {owner}, which holds shard {shard}, took the request \
                                     and did not answer ({}); it may have been done: read before \
                                     sending it again",
                                    error.why
                                ),
                            )
                            .into_response();
                        }
                        Err(error) => {
                            why = format!("node {owner}, which holds shard {shard}: {}", error.why);
                        }
                    }
                }
                Ok(None) => why = format!("no live node holds shard {shard} now"),
                Err(error) => why = format!("the cluster's tables cannot be read: {error}"),
            }
        }
        no_owner(&why)
    }

    /// The router of shard `shard`, which this node has just leased, once its runtime
    /// has been recovered and runs (waiting up to [`STARTING_WAIT`]).
    async fn starting(&self, shard: ShardId) -> Option<axum::Router> {
        let until = std::time::Instant::now() + STARTING_WAIT;
        loop {
            if let Some(router) = self.local(shard) {
                return Some(router);
            }
            if std::time::Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Answers a request another node passed on for shard `shard`: from it if it runs
    /// here, else `503` saying it moved (the other node looks again).
    pub(crate) async fn forwarded(&self, shard: ShardId, request: Request) -> Response {
        if request.method() == axum::http::Method::POST && request.uri().path() == "/v1/tasks" {
            // Nodes never pass submissions on: they go through the shard's inbox,
            // where the key is bound.
            return Problem::bad_request("a submission is not passed between nodes")
                .into_response();
        }
        let mut router = self.local(shard);
        if router.is_none() {
            // Leased here a moment ago (the other node read the owner after the lease
            // was taken): its runtime is being recovered.
            if let Ok(Some((owner, _))) = self.peers.owner(&self.db, shard, true).await
                && owner == self.me()
            {
                router = self.starting(shard).await;
            }
        }
        match router {
            Some(router) => call(router, request).await,
            None => {
                let mut response = Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "shard-moved",
                    "Shard not held here",
                    format!("node {} does not hold shard {shard}", self.me()),
                )
                .into_response();
                retry_after(&mut response);
                response
            }
        }
    }

    /// Asks every shard with `request`'s method, path and headers (the body is empty)
    /// and gives each shard's answer: status and body.
    async fn ask_all(
        &self,
        request: Request,
        path: &str,
    ) -> Result<Vec<(ShardId, Value)>, Response> {
        let (parts, _) = request.into_parts();
        let mut answers = Vec::new();
        for shard in 0..self.shards {
            answers.push((shard, self.ask_one(shard, &parts, path).await?));
        }
        Ok(answers)
    }

    /// Asks shard `shard` with `parts`' headers for `path` (a `GET`, whatever the
    /// request's method) and gives its answer's JSON, or its failure as it came.
    async fn ask_one(
        &self,
        shard: ShardId,
        parts: &axum::http::request::Parts,
        path: &str,
    ) -> Result<Value, Response> {
        let mut request = copy(parts, path);
        *request.method_mut() = axum::http::Method::GET;
        let response = self.to_shard(shard, request).await;
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), LIST_LIMIT)
            .await
            .map_err(|_| {
                Problem::internal(format!("shard {shard}'s answer is over {LIST_LIMIT} bytes"))
                    .into_response()
            })?;
        if !status.is_success() {
            return Err(passed_on(status, bytes));
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            Problem::internal(format!("shard {shard} answered what is not JSON: {e}"))
                .into_response()
        })
    }

    /// `GET /v1/tasks` over every shard (or the one of the agent asked for), a page at
    /// a time. A shard's ids are above every id of the shards before it, so the tasks
    /// by id are shard 0's, then shard 1's, and so on: a page is read from the cursor's
    /// shard on, each shard asked for what the page still lacks, until it is full.
    pub(crate) async fn list_tasks(&self, request: Request) -> Response {
        let query = request.uri().query().unwrap_or("").to_owned();
        if let Some(agent) = query_value(&query, "agent") {
            return self.to_shard(shard_for(&agent, self.shards), request).await;
        }
        let head = request.method() == axum::http::Method::HEAD;
        let limit = match query_value(&query, "limit").map(|l| l.parse::<usize>()) {
            None => 100,
            Some(Ok(limit)) if (1..=1000).contains(&limit) => limit,
            // The shard says what is wrong with it, as a lone server does.
            Some(_) => return self.to_shard(0, request).await,
        };
        let first = query_value(&query, "cursor")
            .and_then(|c| c.parse::<u64>().ok())
            .map_or(0, |cursor| shard_of_task(cursor).min(self.shards - 1));
        let (parts, _) = request.into_parts();
        let mut tasks: Vec<Value> = Vec::new();
        let mut more = false;
        for shard in first..self.shards {
            let want = limit - tasks.len();
            let path = with_query_value(&parts.uri, "limit", &want.to_string());
            let page = match self.ask_one(shard, &parts, &path).await {
                Ok(page) => page,
                Err(response) => return response,
            };
            if let Some(list) = page["tasks"].as_array() {
                tasks.extend(list.iter().take(want).cloned());
            }
            if tasks.len() >= limit {
                more = !page["next_cursor"].is_null() || shard + 1 < self.shards;
                break;
            }
        }
        let next_cursor = if more {
            tasks
                .last()
                .and_then(|t| t["id"].as_u64())
                .map(|id| id.to_string())
        } else {
            None
        };
        listed(head, &json!({"tasks": tasks, "next_cursor": next_cursor}))
    }

    /// A list that is an array on each shard (`/v1/schedules`, `/v1/confirmations`):
    /// every shard's, one after another, sorted by `order` where given.
    pub(crate) async fn list_all(&self, request: Request, order: Option<&str>) -> Response {
        let head = request.method() == axum::http::Method::HEAD;
        let path = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let answers = match self.ask_all(request, &path).await {
            Ok(answers) => answers,
            Err(response) => return response,
        };
        let mut all: Vec<Value> = answers
            .into_iter()
            .filter_map(|(_, list)| match list {
                Value::Array(items) => Some(items),
                _ => None,
            })
            .flatten()
            .collect();
        if let Some(field) = order {
            all.sort_by(|a, b| a[field].as_str().cmp(&b[field].as_str()));
        }
        listed(head, &Value::Array(all))
    }

    /// A request about something that lives in one shard that cannot be told from the
    /// request (a session, a confirmation): each shard is asked in turn, those run here
    /// first, until one does not answer `404`.
    pub(crate) async fn first_found(&self, request: Request) -> Response {
        let (parts, body) = request.into_parts();
        let bytes = match axum::body::to_bytes(body, BODY_LIMIT).await {
            Ok(bytes) => bytes,
            Err(_) => return Problem::too_large(BODY_LIMIT).into_response(),
        };
        let local = self.local_shards();
        let order = local
            .iter()
            .copied()
            .chain((0..self.shards).filter(|s| !local.contains(s)));
        let mut last = None;
        for shard in order {
            let request = Request::from_parts(parts.clone(), Body::from(bytes.clone()));
            let response = self.to_shard(shard, request).await;
            if response.status() != StatusCode::NOT_FOUND {
                return response;
            }
            last = Some(response);
        }
        last.unwrap_or_else(|| Problem::not_found("nothing there").into_response())
    }

    /// A request of one shard's own (`/v1/queue`, or `/v1/events` of one shard): the
    /// shard named by `?shard=N`, which is required when the cluster has more than one.
    pub(crate) async fn one_shard(&self, request: Request) -> Response {
        let query = request.uri().query().unwrap_or("").to_owned();
        let shard = match query_value(&query, "shard") {
            Some(text) => match text.parse::<ShardId>() {
                Ok(shard) if shard < self.shards => shard,
                _ => {
                    return Problem::bad_request(format!(
                        "`shard` must be a shard's number, 0 to {}",
                        self.shards - 1
                    ))
                    .into_response();
                }
            },
            None if self.shards == 1 => 0,
            None => {
                return Problem::bad_request(format!(
                    "{} is per shard and this cluster has {} shards: name one with \
                     ?shard=N (0 to {}); GET /v1/cluster lists them",
                    request.uri().path(),
                    self.shards,
                    self.shards - 1
                ))
                .into_response();
            }
        };
        let request = without_query_value(request, "shard");
        self.to_shard(shard, request).await
    }

    /// A request that any shard answers the same (`/`, the task types, the OpenAPI
    /// document, a path that is not an endpoint): one run here, else shard 0's node.
    pub(crate) async fn any(&self, request: Request) -> Response {
        match self.local_shards().first() {
            Some(&shard) => self.to_shard(shard, request).await,
            None => self.to_shard(0, request).await,
        }
    }

    /// The task whose id is `id`'s shard, or `None` for an id no shard makes.
    pub(crate) fn shard_of(&self, id: u64) -> Option<ShardId> {
        let shard = shard_of_task(id);
        (shard < self.shards).then_some(shard)
    }

    /// The shard of a schedule: by its slug.
    pub(crate) fn shard_of_slug(&self, slug: &str) -> ShardId {
        shard_for(slug, self.shards)
    }
}

/// Calls a shard's router with `request`.
pub(crate) async fn call(router: axum::Router, request: Request) -> Response {
    match router.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// Whether a request with `method` may be sent again when it is not known whether it
/// was done: one that reads.
fn safe(method: &axum::http::Method) -> bool {
    matches!(*method, axum::http::Method::GET | axum::http::Method::HEAD)
}

/// Whether another node answered that it no longer holds the shard.
fn moved(response: &Response) -> bool {
    response.status() == StatusCode::SERVICE_UNAVAILABLE
        && response.headers().contains_key(SHARD_MOVED)
}

/// The header a node sets on the `503` for a shard it does not hold.
const SHARD_MOVED: &str = "x-spool-shard-moved";

fn retry_after(response: &mut Response) {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
        .headers_mut()
        .insert(SHARD_MOVED, HeaderValue::from_static("1"));
}

/// `503`: the shard asked for has no node to answer for it now.
pub(crate) fn no_owner(why: &str) -> Response {
    let mut response = Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "shard-unavailable",
        "Shard unavailable",
        format!("{why}; a live node takes a shard within its lease's ttl: try again"),
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// The most a shard's answer to a list may hold.
const LIST_LIMIT: usize = 64 << 20;

/// A gathered list as the answer to a `GET`, or to a `HEAD` (its headers alone).
fn listed(head: bool, list: &Value) -> Response {
    let response = axum::Json(list).into_response();
    if !head {
        return response;
    }
    let (parts, _) = response.into_parts();
    Response::from_parts(parts, Body::empty())
}

/// `uri`'s path and query with `name` set to `value`.
fn with_query_value(uri: &axum::http::Uri, name: &str, value: &str) -> String {
    let mut pairs: Vec<String> = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty() && pair.split('=').next() != Some(name))
        .map(str::to_owned)
        .collect();
    pairs.push(format!("{name}={value}"));
    format!("{}?{}", uri.path(), pairs.join("&"))
}

/// A shard's answer that was not a success, given back as it was.
fn passed_on(status: StatusCode, bytes: Bytes) -> Response {
    let mut response = (status, bytes).into_response();
    if let Ok(value) = HeaderValue::from_str(spool_http::PROBLEM_JSON) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}

/// A request like `parts`' (method, headers) to `path`, with no body.
fn copy(parts: &axum::http::request::Parts, path: &str) -> Request {
    let mut copy = Request::new(Body::empty());
    *copy.method_mut() = parts.method.clone();
    *copy.headers_mut() = parts.headers.clone();
    copy.headers_mut().remove(header::CONTENT_LENGTH);
    if let Ok(uri) = path.parse() {
        *copy.uri_mut() = uri;
    }
    copy
}

/// The value of `name` in a query string, percent-decoding left alone (the names and
/// values the front reads are plain).
pub(crate) fn query_value(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then(|| value.to_owned())
    })
}

/// `request` without `name` in its query (the shard's own API does not take it).
fn without_query_value(mut request: Request, name: &str) -> Request {
    let uri = request.uri();
    let rest: Vec<&str> = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty() && pair.split('=').next() != Some(name))
        .collect();
    let path = if rest.is_empty() {
        uri.path().to_owned()
    } else {
        format!("{}?{}", uri.path(), rest.join("&"))
    };
    if let Ok(uri) = path.parse() {
        *request.uri_mut() = uri;
    }
    request
}
