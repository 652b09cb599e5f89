//! What the tests that run `spool serve --postgres` nodes share: a fresh cluster and its
//! token file, a node's command line, the cluster as `GET /v1/cluster` shows it,
//! submitting with an Idempotency-Key, every task listed through the cursor, and a
//! stand-in OpenAI-compatible LLM on loopback.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::Server;

#[path = "../../../../tests/exec/common/warm_up.rs"]
mod warm_up;

/// A fresh cluster: a database of the test binary's PostgreSQL made a cluster, and the
/// token file its nodes share, in a temporary directory removed when this is dropped.
pub(crate) struct TestCluster {
    /// The database's URL, as given to `--postgres`.
    pub(crate) url: String,
    /// The temporary directory holding the token file (and whatever the test puts there).
    pub(crate) dir: tempfile::TempDir,
    /// The token file, as given to `--token-file`.
    pub(crate) token_file: PathBuf,
}

impl TestCluster {
    /// Makes the database `database` (a name no other test uses) a cluster of `shards`
    /// shards, and writes `token` to the token file.
    pub(crate) fn init(database: &str, shards: u32, token: &str) -> TestCluster {
        let url = spool_pgtest::PgCluster::shared()
            .create_database(database)
            .unwrap_or_else(|e| panic!("database {database}: {e}"));
        spool_postgres::Cluster::init(&url, shards)
            .unwrap_or_else(|e| panic!("a cluster of {shards} shards: {e}"));
        let dir = tempfile::tempdir().expect("a temporary directory");
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, token).expect("the token is written");
        TestCluster {
            url,
            dir,
            token_file,
        }
    }
}

/// `spool serve` as one node of a cluster: its arguments and environment. By default
/// on a free loopback port (`127.0.0.1:0`), with leases of 2 s.
pub(crate) struct Node<'a> {
    url: &'a str,
    token_file: &'a str,
    name: &'a str,
    addr: &'a str,
    ttl: &'a str,
    more: Vec<&'a str>,
    env: Vec<(&'a str, &'a str)>,
}

impl<'a> Node<'a> {
    /// Node `name` of the cluster at `url`, with the token in `token_file`.
    pub(crate) fn new(url: &'a str, token_file: &'a Path, name: &'a str) -> Node<'a> {
        Node {
            url,
            token_file: token_file.to_str().expect("a UTF-8 path"),
            name,
            addr: "127.0.0.1:0",
            ttl: "2s",
            more: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Listens on `addr` (`HOST:PORT`).
    pub(crate) fn addr(mut self, addr: &'a str) -> Node<'a> {
        self.addr = addr;
        self
    }

    /// Takes leases of `ttl` (`--lease-ttl`).
    pub(crate) fn ttl(mut self, ttl: &'a str) -> Node<'a> {
        self.ttl = ttl;
        self
    }

    /// The built-in LLM answers after `ms` milliseconds (`--llm-latency-ms`).
    pub(crate) fn llm_latency_ms(self, ms: &'a str) -> Node<'a> {
        self.args(["--llm-latency-ms", ms])
    }

    /// More arguments, after the others.
    pub(crate) fn args(mut self, args: impl IntoIterator<Item = &'a str>) -> Node<'a> {
        self.more.extend(args);
        self
    }

    /// The environment variable `key` set to `value`.
    pub(crate) fn env(mut self, key: &'a str, value: &'a str) -> Node<'a> {
        self.env.push((key, value));
        self
    }

    /// Its command line, `serve` first.
    pub(crate) fn command_line(&self) -> Vec<&'a str> {
        let mut args = vec![
            "serve",
            "--addr",
            self.addr,
            "--postgres",
            self.url,
            "--token-file",
            self.token_file,
            "--node-id",
            self.name,
            "--lease-ttl",
            self.ttl,
        ];
        args.extend(&self.more);
        args
    }

    /// Its environment variables.
    pub(crate) fn environment(&self) -> &[(&'a str, &'a str)] {
        &self.env
    }

    /// Starts it, and waits until it listens.
    pub(crate) fn start(&self) -> Server {
        Server::start_with(self.command_line(), &self.env)
    }
}

/// `GET /v1/cluster` on `addr` with the bearer `token`: its JSON, or `None` if it did
/// not answer `200`.
pub(crate) fn cluster(agent: &ureq::Agent, addr: &str, token: &str) -> Option<Value> {
    let (status, body) = super::get(agent, addr, token, "/v1/cluster");
    (status == 200).then_some(body)
}

/// Waits up to `within` until `GET /v1/cluster` on `addr` answers `200` with what
/// `done` accepts, and returns that; fails saying `what` it waited for and the last
/// answer.
pub(crate) fn wait_cluster(
    agent: &ureq::Agent,
    addr: &str,
    token: &str,
    within: Duration,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let (status, body) = super::get(agent, addr, token, "/v1/cluster");
        if status == 200 && done(&body) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the cluster is {status} {body}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// The number of a shard of `GET /v1/cluster`'s `shards`.
pub(crate) fn shard_number(shard: &Value) -> u32 {
    u32::try_from(shard["shard"].as_u64().expect("a shard number")).expect("a small number")
}

/// Each shard held on a lease that has not expired: its owner and lease epoch, as
/// `GET /v1/cluster` says.
pub(crate) fn leases(cluster: &Value) -> BTreeMap<u32, (String, u64)> {
    let mut leases = BTreeMap::new();
    for shard in cluster["shards"].as_array().expect("shards") {
        if let (Some(owner), false) = (shard["owner"].as_str(), shard["expired"] == json!(true)) {
            let epoch = shard["epoch"].as_u64().expect("an epoch");
            leases.insert(shard_number(shard), (owner.to_owned(), epoch));
        }
    }
    leases
}

/// The shards each node holds on a lease that has not expired, in order, as
/// `GET /v1/cluster` says.
pub(crate) fn holders(cluster: &Value) -> BTreeMap<String, Vec<u32>> {
    let mut holders: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (shard, (owner, _)) in leases(cluster) {
        holders.entry(owner).or_default().push(shard);
    }
    holders
}

/// Whether each of `nodes`, and no other node, holds one shard on a lease that has
/// not expired, as `GET /v1/cluster` says.
pub(crate) fn one_shard_each(cluster: &Value, nodes: &[&str]) -> bool {
    let holders = holders(cluster);
    holders.len() == nodes.len()
        && nodes
            .iter()
            .all(|node| holders.get(*node).map(Vec::len) == Some(1))
}

/// Waits up to 30 s until each of `nodes`, and no other node, holds one shard, as
/// `GET /v1/cluster` on `addr` says, and returns what it says then.
pub(crate) fn wait_one_shard_each(
    agent: &ureq::Agent,
    addr: &str,
    token: &str,
    nodes: &[&str],
) -> Value {
    wait_cluster(
        agent,
        addr,
        token,
        Duration::from_secs(30),
        "each node holds one shard",
        |c| one_shard_each(c, nodes),
    )
}

/// `POST /v1/tasks` of `body` on `addr` with the bearer `token` and
/// `Idempotency-Key: key`: the status and the JSON body (`null` if there is none), or
/// the error when the node did not answer.
pub(crate) fn try_submit(
    agent: &ureq::Agent,
    addr: &str,
    token: &str,
    key: &str,
    body: &Value,
) -> Result<(u16, Value), ureq::Error> {
    let mut response = agent
        .post(format!("http://{addr}/v1/tasks"))
        .header("Authorization", format!("Bearer {token}"))
        .header("Idempotency-Key", key)
        .send_json(body)?;
    let status = response.status().as_u16();
    let body = response.body_mut().read_json().unwrap_or(Value::Null);
    Ok((status, body))
}

/// As [`try_submit`], to a node that must answer.
pub(crate) fn submit(
    agent: &ureq::Agent,
    addr: &str,
    token: &str,
    key: &str,
    body: &Value,
) -> (u16, Value) {
    try_submit(agent, addr, token, key, body)
        .unwrap_or_else(|e| panic!("POST /v1/tasks on {addr} (key {key}): {e}"))
}

/// Every task `GET /v1/tasks?QUERY` lists on `addr` (gathered from every shard), page
/// by page through `next_cursor`; each page must come with a `200`.
pub(crate) fn list_tasks(agent: &ureq::Agent, addr: &str, token: &str, query: &str) -> Vec<Value> {
    let mut tasks = Vec::new();
    let mut cursor = String::new();
    loop {
        let (status, page) = super::get(agent, addr, token, &format!("/v1/tasks?{query}{cursor}"));
        assert_eq!(status, 200, "{page}");
        tasks.extend(page["tasks"].as_array().expect("tasks").iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return tasks,
        }
    }
}

/// A stand-in OpenAI-compatible LLM on 127.0.0.1: a thread of its own takes each
/// request and hands it to the test's handler (it answers `GET /warm-up` itself).
/// Stopped when dropped.
pub(crate) struct StandInLlm {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StandInLlm {
    /// Starts serving on a free loopback port, each request given to `handle`, with
    /// `connections` of tiny_http's connection threads grown first: every call in
    /// flight holds a connection of its own, and none must wait for a thread.
    pub(crate) fn start(
        connections: usize,
        mut handle: impl FnMut(tiny_http::Request) + Send + 'static,
    ) -> StandInLlm {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("a port on 127.0.0.1");
        let port = server.server_addr().to_ip().expect("an IP address").port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                let Ok(Some(request)) = server.recv_timeout(Duration::from_millis(20)) else {
                    continue;
                };
                if request.url() == "/warm-up" {
                    let _ = request.respond(tiny_http::Response::from_string("ok"));
                    continue;
                }
                handle(request);
            }
        });
        warm_up::grow_connection_threads(port, connections);
        StandInLlm {
            port,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`, with no path.
    pub(crate) fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for StandInLlm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Answers `request` with the chat completion `id` whose final answer is `content`,
/// its usage 10 prompt tokens and `completion_tokens`.
pub(crate) fn reply(
    request: tiny_http::Request,
    id: &str,
    content: &str,
    completion_tokens: u64,
) -> std::io::Result<()> {
    let body = json!({
        "id": id,
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": completion_tokens,
            "total_tokens": 10 + completion_tokens},
    });
    let header =
        tiny_http::Header::from_bytes("Content-Type", "application/json").expect("a valid header");
    request.respond(tiny_http::Response::from_string(body.to_string()).with_header(header))
}
