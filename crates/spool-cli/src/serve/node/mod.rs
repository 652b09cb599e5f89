//! `spool serve --postgres URL` on a database with a cluster (made by `spool cluster
//! init`): the process is a node. It leases its share of the shards and runs a runtime
//! per shard it holds (the built-in agent, as a lone server does), and its HTTP API
//! answers for every shard: what it runs itself, what other nodes run (passed on to
//! them), and submissions for shards it does not hold (through their inboxes). A
//! signal hands its shards over at once.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use spool_cluster::{Node, NodeOptions, ShardId};
use spool_core::{Config, TaskRegistry};
use spool_http::{Access, Server, SubmitCheck};
use spool_runtime::DEFAULT_RETENTION;

use super::NodeArgs;
use crate::cli::limits::Limits;
use crate::demo::Llm;
use crate::run::agent_builder_with;
use crate::stored::{Failure, failed};

mod budget;
mod db;
mod events;
mod front;
mod identity;
mod peers;
mod routes;
mod status;
mod submit;

pub(crate) use db::Db;

/// How long a submission put in another shard's inbox waits for the owner to make
/// its task before it is answered without the task's id.
const INBOX_WAIT: Duration = Duration::from_secs(5);

/// What a node needs from `spool serve`'s start.
pub(crate) struct NodeStart<'a> {
    /// The database's URL.
    pub(crate) url: &'a str,
    /// Its name without a password, for the log.
    pub(crate) name: String,
    /// The cluster's tables, connected.
    pub(crate) db: Db,
    /// The node's name, address and lease length as given.
    pub(crate) node: &'a NodeArgs,
    /// The HTTP server, not started yet.
    pub(crate) server: spool_http::ServerBuilder,
    /// Whether it listens on every address (then the other nodes reach it by the
    /// host's name, by default).
    pub(crate) every_address: bool,
    /// The API's token.
    pub(crate) token: String,
    /// Who may read and write.
    pub(crate) access: Access,
    /// The task types the API takes, with their input schemas.
    pub(crate) api_registry: TaskRegistry,
    /// The model the agents talk to, and the scripted model's latency.
    pub(crate) llm: Llm,
    /// The scripted model's latency.
    pub(crate) llm_latency: Duration,
    /// The limits on tasks and requests.
    pub(crate) limits: Limits,
}

/// A node that runs: its HTTP server and its place in the cluster.
pub(crate) struct RunningNode {
    /// The HTTP server.
    pub(crate) server: Server,
    /// The node.
    pub(crate) node: Node,
    /// The node's name.
    pub(crate) node_id: String,
    /// The URL other nodes reach it at.
    pub(crate) advertise: String,
    /// The cluster's shard count.
    pub(crate) shards: u32,
    /// The exporter of the shards' spans, if the environment names a collector.
    pub(crate) otel: Option<Arc<spool_otel::Otel>>,
}

/// Starts the node's HTTP API, then joins the cluster and takes its first shards.
pub(crate) fn start(start: NodeStart<'_>) -> Result<RunningNode, Failure> {
    let check = SubmitCheck::new(start.api_registry.clone())
        .map_err(|e| failed("cannot set up the API", e))?;
    let views: Arc<Mutex<BTreeMap<ShardId, front::Published>>> = Arc::default();
    let front = Arc::new(front::Front::new(
        start.db.clone(),
        start.api_registry,
        start.access,
        start.token.clone(),
        check.clone(),
        Arc::clone(&views),
        INBOX_WAIT,
    ));
    // The server starts first: the node's address (and its default name) is the port
    // it bound. Until the node has joined it runs no shard, and passes every request
    // on to the nodes that do.
    // The other nodes name this one in `Host` as its address says: that host is
    // answered (with the host's name when it listens on every address).
    let mut server = start.server;
    if let Some(advertise) = &start.node.advertise {
        let authority = peers::authority(advertise).map_err(Failure::Usage)?;
        let host = authority
            .rsplit_once(':')
            .map_or(authority.as_str(), |(host, _)| host);
        server = server.allow_host(host);
    } else if start.every_address {
        server = server.allow_host(host_name());
    }
    let app = axum::Router::new()
        .fallback(routes::handle)
        .with_state(Arc::clone(&front));
    let closing = Arc::clone(&front);
    let server = server
        .start_app(app, front::BODY_LIMIT, move || closing.close_streams())
        .map_err(|e| failed("cannot serve", e))?;
    let addr = server.addr();
    let node_id = start
        .node
        .node_id
        .clone()
        .unwrap_or_else(|| default_name(addr));
    let advertise = start
        .node
        .advertise
        .clone()
        .unwrap_or_else(|| default_address(addr));
    if let Some(cluster) = start.db.blocking()
        && let Err(failure) = identity::check(cluster, &node_id, &start.token, start.node.lease_ttl)
    {
        server.shutdown();
        return Err(failure);
    }
    let _ = front.node_id.set(node_id.clone());
    let config = Config::new()
        .retention(DEFAULT_RETENTION)
        .limits(start.limits.tasks.clone())
        .requests(start.limits.requests.clone());
    let options = NodeOptions::new(node_id.clone(), advertise.clone())
        .lease_ttl(start.node.lease_ttl)
        .history(start.limits.history)
        .registry(crate::agent::registry())
        .config(config)
        .inbox(move |_shard, body| {
            check
                .check(body)
                .map(|checked| checked.task)
                .map_err(|problem| problem.detail)
        });
    let otel = crate::otel::start(&start.llm, "spool serve")?.map(Arc::new);
    let (llm, latency, limits) = (start.llm, start.llm_latency, start.limits);
    // `--limit`'s cluster-wide budgets; the node's slices go with `make` when it stops.
    let budgets = budget::Budgets::start(start.url, &node_id, &limits, start.node.lease_ttl)?;
    let made = Arc::clone(&views);
    let observed = otel.clone();
    let node = Node::start(start.url, options, move |shard| {
        let builder = agent_builder_with(&llm, latency, &limits, &budgets);
        let builder = match &observed {
            Some(otel) => otel.observe(builder),
            None => builder,
        };
        let (builder, views) = spool_http::publish_views(
            builder,
            spool_http::DEFAULT_PUBLISH_EVERY,
            spool_http::DEFAULT_EVENT_RING,
        );
        // The pieces of the shard's streamed answers, for its event stream (kept in
        // this process only, as a lone server keeps them).
        let (builder, deltas) = spool_http::publish_deltas(builder, spool_http::DEFAULT_DELTA_RING);
        made.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(shard, front::Published { views, deltas });
        builder
    })
    .map_err(|e| {
        failed(
            &format!(
                "cannot join the cluster in {} as node {node_id}",
                start.name
            ),
            e,
        )
    })?;
    let _ = front.held.set(node.held());
    Ok(RunningNode {
        server,
        node,
        node_id,
        advertise,
        shards: front.shards,
        otel,
    })
}

/// A node's name by default: the host's name and the port.
fn default_name(addr: SocketAddr) -> String {
    format!("{}-{}", host_name(), addr.port())
}

/// The URL other nodes reach this one at by default: `http://ADDR`, with the host's
/// name for an unspecified address (0.0.0.0 or ::).
fn default_address(addr: SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        format!("http://{}:{}", host_name(), addr.port())
    } else {
        format!("http://{addr}")
    }
}

/// The host's name (what of it a node's name may hold: letters, digits, `.`, `_`,
/// `-`), or `localhost` if it cannot be read.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| {
            name.trim()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                .take(48)
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}
