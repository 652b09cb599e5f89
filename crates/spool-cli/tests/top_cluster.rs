//! `spool top` on a cluster node, in a real terminal: two `spool serve` nodes share the
//! two shards of a cluster on a throwaway PostgreSQL; `spool top` (tmux, 100 × 30) on
//! one of them shows the cluster's panel — each node with the shard it holds, each
//! shard with its owner — and shard 0's queue; `]` shows shard 1's, where a task of an
//! agent of shard 1 waits on its LLM call, and its detail follows its events from that
//! shard. tmux is installed by `scripts/test-deps.sh` if missing; the test never skips.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool_postgres::cluster::shard_for;

mod support;

use support::Server;
use support::cluster::{Node, TestCluster, wait_one_shard_each};
use support::tmux::{Tmux, ensure_tmux, line_with};

const TOKEN: &str = "top-cluster-test-token-0123456789";

/// A node called `name` on the cluster at `url`, its LLM answering after 20 s (a task
/// stays waiting on its call while the test looks).
fn node(url: &str, token_file: &Path, name: &str) -> Server {
    Node::new(url, token_file, name)
        .llm_latency_ms("20000")
        .start()
}

#[test]
fn spool_top_on_a_node_shows_the_nodes_the_shards_and_each_shards_queue() {
    ensure_tmux();
    let TestCluster {
        url,
        dir,
        token_file,
    } = TestCluster::init("top_cluster_nodes", 2, TOKEN);
    let a = node(&url, &token_file, "node-a");
    let _b = node(&url, &token_file, "node-b");
    let agent = support::client(Duration::from_secs(30));

    // Each node holds one shard.
    let cluster = wait_one_shard_each(&agent, &a.addr, TOKEN, &["node-a", "node-b"]);
    let holder = |shard: usize| {
        cluster["shards"][shard]["owner"]
            .as_str()
            .unwrap()
            .to_owned()
    };

    // A task of an agent of shard 1, sent to node-a, waits on its LLM call.
    let name = (0..)
        .map(|i| format!("agent-{i}"))
        .find(|name| shard_for(name, 2) == 1)
        .unwrap();
    let mut response = agent
        .post(format!("http://{}/v1/tasks", a.addr))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .send_json(json!({"type": "agent", "input": {"prompt": "hello"}, "agent": name}))
        .unwrap();
    assert_eq!(response.status().as_u16(), 202);
    let submitted: Value = response.body_mut().read_json().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let id = loop {
        // Sent through shard 1's inbox when node-b holds it: its id once it is taken.
        if let Some(id) = submitted["id"].as_u64() {
            break id;
        }
        let (_, page) = support::get(&agent, &a.addr, TOKEN, "/v1/tasks");
        if let Some(id) = page["tasks"][0]["id"].as_u64() {
            break id;
        }
        assert!(Instant::now() < deadline, "the task was not made: {page}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(id >> 44, 1, "task {id} is shard 1's");

    let tmux = Tmux::top(dir.path(), &a.addr, &token_file, "100", "30");

    // Shard 0's queue, empty; the nodes with their shards, the shards with their owners.
    let first = tmux.wait_for("the cluster", Duration::from_secs(30), |s| {
        s.contains("· connected · shard 0 of 2")
            && s.contains("Cluster via node-a")
            && s.contains("no live tasks")
            && s.contains("▶ 0 ")
    });
    println!("{first}");
    assert!(
        line_with(&first, "Tasks ").contains("┌ Tasks 0 of 0 · shard 0 · sort policy "),
        "{first}"
    );
    for (node, shard) in [("node-a", 0), ("node-b", 1)] {
        let held = if holder(0) == node { "0" } else { "1" };
        let line = line_with(&first, &format!("││{node} "));
        assert!(
            line.contains(&format!("││{node:<11} {held:<8} ")),
            "{node} holds shard {held}: {line}"
        );
        let row = line_with(&first, &format!(" {shard} {} ", holder(shard)));
        assert!(row.ends_with("│"), "{row}");
    }

    // `]`: shard 1's queue, with the task waiting on its call; its detail follows its
    // events from shard 1.
    tmux.run(&["send-keys", "-t", "top", "]"]);
    // Its id is written `SHARD:NUMBER`.
    let short = format!("1:{}", id - (1 << 44));
    let second = tmux.wait_for("shard 1's queue", Duration::from_secs(30), |s| {
        s.contains("· connected · shard 1 of 2")
            && s.contains("Tasks 1 of 1 · shard 1 ")
            && s.contains(&format!("▶{short} "))
            && s.contains("▶ 1 ")
    });
    println!("{second}");
    assert!(
        line_with(&second, &format!("▶{short} ")).contains(&format!(" {name} ")),
        "{second}"
    );
    tmux.run(&["send-keys", "-t", "top", "Enter"]);
    let detail = tmux.wait_for("the task's trace", Duration::from_secs(30), |s| {
        s.contains(&format!("┌ Task {id} ({short}) ")) && s.contains("Running → Waiting(llm)")
    });
    println!("{detail}");
    assert!(!detail.contains("Trace (0 events)"), "{detail}");

    tmux.run(&["send-keys", "-t", "top", "Escape"]);
    tmux.run(&["send-keys", "-t", "top", "q"]);
    tmux.wait_for("top's exit", Duration::from_secs(10), |s| {
        s.contains("top-exited-0")
    });
}
