//! `spool serve` nodes under `--limit` keep the limit for the whole cluster: three
//! nodes, each running one of three shards, talk to one stand-in LLM (tiny_http on
//! 127.0.0.1) that counts the calls it has at once and when each came. Under
//! `--limit llm=2` it never has more than 2 at once (and has 2); under
//! `--limit llm=10/min` it gets exactly 10 in the first minute of the clock and the
//! rest only once the next minute begins. A node whose `--limit` differs from the
//! running nodes' is refused at start. `--limit llm=Ntok/min` is the cluster's budget
//! of estimated tokens a minute, checked the same way; `Ntok/s` stays per shard.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use spool_postgres::Cluster;
use spool_postgres::cluster::{Budget, shard_for};

mod support;

use support::Server;
use support::cluster::{self, Node, StandInLlm, TestCluster};

const TOKEN: &str = "serve-cluster-limits-token-0123456789";

/// The shards of the clusters, one per node.
const SHARDS: u32 = 3;

/// One call the stand-in got: when (milliseconds since the Unix epoch) and from which
/// shard (its task's id >> 44).
#[derive(Clone, Copy, Debug)]
struct Call {
    at_ms: u128,
    shard: u64,
}

/// What the stand-in saw: the calls it has now, the most it had at once, and every
/// call in the order they came.
#[derive(Debug, Default)]
struct Seen {
    now: u32,
    most: u32,
    calls: Vec<Call>,
}

/// A stand-in OpenAI-compatible LLM: each call is answered with a final text after
/// `work`, by a thread of its own, so calls overlap as they come.
struct StandIn {
    url: String,
    seen: Arc<Mutex<Seen>>,
    _server: StandInLlm,
}

impl StandIn {
    fn start(work: Duration) -> StandIn {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let counted = Arc::clone(&seen);
        let server = StandInLlm::start(40, move |mut request| {
            let at_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("after 1970")
                .as_millis();
            // `X-Spool-Request-Key: TASK:NUMBER`; a task's shard is its id >> 44.
            let shard = request
                .headers()
                .iter()
                .find(|h| h.field.equiv("X-Spool-Request-Key"))
                .and_then(|h| h.value.as_str().split(':').next()?.parse::<u64>().ok())
                .map_or(u64::MAX, |task| task >> 44);
            {
                let mut seen = counted.lock().expect("the count");
                seen.now += 1;
                seen.most = seen.most.max(seen.now);
                seen.calls.push(Call { at_ms, shard });
            }
            let counted = Arc::clone(&counted);
            thread::spawn(move || {
                let mut body = String::new();
                let _ = request.as_reader().read_to_string(&mut body);
                // The work the call takes, so that calls overlap.
                thread::sleep(work);
                counted.lock().expect("the count").now -= 1;
                let _ = cluster::reply(request, "chatcmpl-1", "done", 5);
            });
        });
        StandIn {
            url: format!("{}/v1", server.base()),
            seen,
            _server: server,
        }
    }

    /// The most calls it had at once, and every call so far.
    fn seen(&self) -> (u32, u32, Vec<Call>) {
        let seen = self.seen.lock().expect("the count");
        (seen.now, seen.most, seen.calls.clone())
    }

    /// Waits up to `limit` until it has been called `n` times and has no call open.
    fn wait_calls(&self, n: usize, limit: Duration) -> Vec<Call> {
        let deadline = Instant::now() + limit;
        loop {
            let (now, _, calls) = self.seen();
            if calls.len() >= n && now == 0 {
                return calls;
            }
            assert!(
                Instant::now() < deadline,
                "the stand-in got {} of {n} calls within {limit:?}",
                calls.len()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A new cluster of [`SHARDS`] shards in a database named `name`, and its token file.
fn cluster(name: &str) -> TestCluster {
    TestCluster::init(name, SHARDS, TOKEN)
}

/// A node called `name` under `--limit limit`, talking to the LLM at `llm`.
fn node<'a>(cluster: &'a TestCluster, name: &'a str, limit: &'a str, llm: &'a str) -> Node<'a> {
    Node::new(&cluster.url, &cluster.token_file, name)
        .args(["--limit", limit])
        .env("OPENAI_BASE_URL", llm)
}

/// Starts three nodes under `--limit limit` talking to `llm`, and waits until each
/// runs one shard.
fn three_nodes(cluster: &TestCluster, limit: &str, llm: &StandIn) -> Vec<Server> {
    let nodes: Vec<Server> = ["node-a", "node-b", "node-c"]
        .into_iter()
        .map(|name| node(cluster, name, limit, &llm.url).start())
        .collect();
    let agent = support::client(Duration::from_secs(30));
    cluster::wait_cluster(
        &agent,
        &nodes[0].addr,
        TOKEN,
        Duration::from_secs(30),
        "the nodes do not each run a shard",
        |c| cluster::holders(c).len() == 3,
    );
    nodes
}

/// Submits `per_shard` agents' tasks for each shard, to the nodes in turn.
fn submit(nodes: &[Server], per_shard: usize) {
    let agent = support::client(Duration::from_secs(30));
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    let mut sent = 0;
    for i in 0.. {
        let name = format!("agent-{i}");
        let count = counts.entry(shard_for(&name, SHARDS)).or_default();
        if *count == per_shard {
            if counts.len() == SHARDS as usize && counts.values().all(|c| *c == per_shard) {
                return;
            }
            continue;
        }
        *count += 1;
        let addr = &nodes[sent % nodes.len()].addr;
        sent += 1;
        let body =
            json!({"type": "agent", "input": {"prompt": format!("task {i}")}, "agent": name});
        let (status, answer) = cluster::submit(&agent, addr, TOKEN, &format!("key-{i}"), &body);
        assert_eq!(status, 202, "{answer}");
    }
}

/// Runs `spool ARGS` with `env`, which must end within 30 s: its exit code and stderr.
fn run_to_end(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let log = dir.path().join("stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
        .env_remove("OPENAI_BASE_URL")
        .envs(env.iter().copied())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("a log file"))
        .spawn()
        .expect("the spool binary starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("the node is waited for") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "spool serve did not end; it said:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        thread::sleep(Duration::from_millis(10));
    };
    (
        status.code(),
        std::fs::read_to_string(&log).expect("the log"),
    )
}

#[test]
fn three_nodes_under_llm_2_never_have_more_than_2_calls_in_flight_together() {
    let shared = cluster("serve_cluster_limits_in_flight");
    let llm = StandIn::start(Duration::from_millis(80));
    let nodes = three_nodes(&shared, "llm=2", &llm);

    // 60 agents' tasks, 20 in each shard: each shard alone may have 2 calls at once.
    submit(&nodes, 20);
    let calls = llm.wait_calls(60, Duration::from_secs(60));
    let (_, most, _) = llm.seen();
    assert_eq!(calls.len(), 60, "one call per task");
    assert_eq!(most, 2, "the most calls the stand-in had at once");
    let shards: BTreeSet<u64> = calls.iter().map(|call| call.shard).collect();
    assert_eq!(shards, BTreeSet::from([0, 1, 2]));

    // A node under another limit, or under none, is refused while these run.
    for limit in ["llm=3", "tool:calc=1"] {
        let node_d = node(&shared, "node-d", limit, &llm.url);
        let (code, said) = run_to_end(&node_d.command_line(), node_d.environment());
        let what = if limit == "llm=3" {
            "this node's --limit gives 3 in flight"
        } else {
            "this node's --limit gives no limit"
        };
        let expected = format!(
            "spool serve: the nodes running now (node-a, node-b, node-c) keep llm to 2 in \
             flight across the cluster, and {what}: start every node with the same --limit for \
             llm (to change it, stop them all first)\n"
        );
        assert_eq!(code, Some(2), "{said}");
        assert!(said.ends_with(&expected), "{limit}: it said:\n{said}");
    }
    // Stopped, each node gives its slice back at once.
    for node in nodes {
        node.stop();
    }
    let (slices, _) = Cluster::connect(&shared.url)
        .expect("the cluster")
        .slices("llm")
        .expect("the slices");
    let released: Vec<(&str, bool, u32)> = slices
        .iter()
        .map(|slice| (slice.node.as_str(), slice.expired, slice.in_flight))
        .collect();
    assert_eq!(
        released,
        [
            ("node-a", true, 0),
            ("node-b", true, 0),
            ("node-c", true, 0)
        ]
    );
}

#[test]
fn three_nodes_under_llm_10_per_minute_send_10_in_a_minute_of_the_clock_together() {
    let shared = cluster("serve_cluster_limits_per_minute");
    let llm = StandIn::start(Duration::from_millis(20));
    let nodes = three_nodes(&shared, "llm=10/min", &llm);

    // The first 10 calls go within seconds: starting early in a minute keeps them in
    // it, whatever the machine's pace.
    let second = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs()
            % 60
    };
    let deadline = Instant::now() + Duration::from_secs(61);
    while !(1..40).contains(&second()) {
        assert!(Instant::now() < deadline, "the clock stands still");
        thread::sleep(Duration::from_millis(100));
    }
    // 30 agents' tasks, 10 in each shard: each shard alone may send 10 a minute.
    submit(&nodes, 10);
    // The 11th call waits for the next minute.
    let calls = llm.wait_calls(11, Duration::from_secs(80));
    let minute = |call: &Call| call.at_ms / 60_000;
    let first = minute(&calls[0]);
    let in_first = calls.iter().filter(|call| minute(call) == first).count();
    assert_eq!(in_first, 10, "calls in the first minute: {calls:?}");
    assert_eq!(minute(&calls[10]), first + 1, "{calls:?}");
    let shards: BTreeSet<u64> = calls[..10].iter().map(|call| call.shard).collect();
    assert!(
        shards.len() > 1,
        "the first minute's calls came from {shards:?}"
    );
    for node in nodes {
        node.stop();
    }
}

#[test]
fn a_tokens_per_minute_limit_is_the_clusters_budget_and_a_node_under_another_is_refused() {
    let shared = cluster("serve_cluster_limits_tokens");
    let llm = StandIn::start(Duration::from_millis(20));
    let node_a = node(&shared, "node-a", "llm=9000tok/min", &llm.url)
        .args(["--limit", "tool:search=100tok/s"])
        .start();
    node_a.wait_log("llm is kept to 9000 tokens a minute across the cluster");
    node_a.wait_log(
        "--limit tool:search=100tok/s holds per shard, not across the cluster: a cluster-wide budget \
         counts per minute (give Ntok/min)",
    );
    let of_db = Cluster::connect(&shared.url).expect("the cluster");
    assert_eq!(
        of_db.budget("llm").expect("the budget"),
        Some(Budget::new().tokens_per_minute(9000))
    );
    // Once the node is live, a node under another token budget is refused.
    let agent = support::client(Duration::from_secs(30));
    cluster::wait_cluster(
        &agent,
        &node_a.addr,
        TOKEN,
        Duration::from_secs(30),
        "node-a never showed as live",
        |c| c["nodes"].as_array().is_some_and(|nodes| !nodes.is_empty()),
    );
    let node_b = node(&shared, "node-b", "llm=8000tok/min", &llm.url);
    let (code, said) = run_to_end(&node_b.command_line(), node_b.environment());
    let expected = "spool serve: the nodes running now (node-a) keep llm to 9000 tokens a minute \
                    across the cluster, and this node's --limit gives 8000 tokens a minute: \
                    start every node with the same --limit for llm (to change it, stop them \
                    all first)\n";
    assert_eq!(code, Some(2), "{said}");
    assert!(said.ends_with(expected), "it said:\n{said}");
    node_a.stop();
}

/// Budgets would be counted per shard on a cluster: a node given `--budget` or
/// `--prices` refuses to start, saying so, before it joins.
#[test]
fn a_node_refuses_budgets() {
    let shared = cluster("serve_cluster_limits_budgets");
    let node = Node::new(&shared.url, &shared.token_file, "node-a").args(["--budget", "day=$1"]);
    let (code, said) = run_to_end(&node.command_line(), node.environment());
    let expected = "spool serve: --budget and --prices are not taken by a cluster's node (each \
                    shard would count its own spend): the database holds a cluster; run without \
                    them, or serve a store of its own\n";
    assert_eq!(code, Some(2), "{said}");
    assert!(said.ends_with(expected), "it said:\n{said}");
    let of_db = Cluster::connect(&shared.url).expect("the cluster");
    let live = of_db
        .live_nodes(Duration::from_secs(60))
        .expect("the nodes");
    assert!(live.is_empty(), "{live:?}");
}
