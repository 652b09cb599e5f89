//! What the tests share: a saveable task that asks the LLM once and waits, an LLM
//! that never answers (it records what it was asked), a database per test, and a
//! wait for a condition with a deadline.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;
use spool_cluster::{Node, NodeOptions, ShardId};
use spool_core::{
    AgentTask, Executor, Kind, NewTask, OutboundRequest, Replies, RequestKey, SavedTask, Step,
    TaskContext, TaskRegistry,
};
use spool_pgtest::PgCluster;
use spool_postgres::Cluster;
use spool_runtime::{Runtime, RuntimeHandle};

/// Asks the LLM once, then waits for the answer (which never comes).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Waiter {
    pub(crate) name: String,
    pub(crate) asked: bool,
}

impl Waiter {
    pub(crate) fn task(name: &str) -> NewTask {
        NewTask::new(Waiter {
            name: name.to_owned(),
            asked: false,
        })
    }
}

impl AgentTask for Waiter {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if self.asked {
            return Step::done(self.name.clone());
        }
        self.asked = true;
        cx.llm(json!({"name": self.name}));
        Step::Wait
    }

    fn type_name(&self) -> &'static str {
        "waiter"
    }

    fn save(&self) -> Result<SavedTask, spool_core::StateError> {
        SavedTask::serde(self)
    }
}

/// The task types of the tests.
pub(crate) fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<Waiter>("waiter")
}

/// The requests an LLM that never answers was sent, in order: its key and the
/// asking task's name.
pub(crate) type Asked = Arc<Mutex<Vec<(RequestKey, String)>>>;

/// An LLM that records each request and never answers.
struct Silent(Asked);

impl Executor for Silent {
    fn execute(&mut self, request: OutboundRequest, _replies: &mut Replies<'_>) {
        let name = request.request.payload.value()["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self.0.lock().unwrap().push((request.key, name));
    }
}

/// A database of its own on the shared cluster, made a cluster of `shards` shards.
pub(crate) fn cluster_db(name: &str, shards: u32) -> String {
    let url = PgCluster::shared().create_database(name).unwrap();
    Cluster::init(&url, shards).unwrap();
    url
}

/// Options of a node called `name` with leases of `ttl`, the tests' task types, and
/// an inbox whose bodies are task names.
pub(crate) fn options(name: &str, ttl: Duration) -> NodeOptions {
    NodeOptions::new(name, format!("{name}.invalid:80"))
        .lease_ttl(ttl)
        .registry(registry())
        .inbox_poll(Duration::from_millis(200))
        .inbox(|_shard, body| {
            std::str::from_utf8(body)
                .map(Waiter::task)
                .map_err(|e| e.to_string())
        })
}

/// Starts a node on `url` whose shards' LLM never answers and records into `asked`.
pub(crate) fn start(url: &str, options: NodeOptions, asked: &Asked) -> Node {
    let asked = Arc::clone(asked);
    Node::start(url, options, move |_shard| {
        Runtime::builder().executor(Kind::Llm, Silent(Arc::clone(&asked)))
    })
    .unwrap()
}

/// Waits until `done` says yes, for at most `within`; panics saying `what` otherwise.
pub(crate) fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The shards `node` runs.
pub(crate) fn shard_ids(node: &Node) -> Vec<ShardId> {
    node.shard_ids()
}

/// The ids of the live tasks of a shard's runtime, in order.
pub(crate) fn live_tasks(handle: &RuntimeHandle) -> Vec<u64> {
    handle
        .query(|runtime| {
            let mut ids: Vec<u64> = runtime
                .scheduler()
                .tasks()
                .filter(|task| !task.state.is_terminal())
                .map(|task| task.id.get())
                .collect();
            ids.sort_unstable();
            ids
        })
        .unwrap()
}
