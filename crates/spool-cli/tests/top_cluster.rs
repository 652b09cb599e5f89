//! `spool top` on a cluster node, in a real terminal: two `spool serve` nodes share the
//! two shards of a cluster on a throwaway PostgreSQL; `spool top` (tmux, 100 × 30) on
//! one of them shows the cluster's panel — each node with the shard it holds, each
//! shard with its owner — and shard 0's queue; `]` shows shard 1's, where a task of an
//! agent of shard 1 waits on its LLM call, and its detail follows its events from that
//! shard. tmux is installed by `scripts/test-deps.sh` if missing; the test never skips.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool_pgtest::PgCluster;
use spool_postgres::Cluster;
use spool_postgres::cluster::shard_for;

mod support;

use support::Server;

const TOKEN: &str = "top-cluster-test-token-0123456789";

/// A tmux server of the test's own (its socket in the test's directory), killed with
/// its sessions when dropped.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command.arg("-S").arg(&self.socket);
        command
    }

    fn run(&self, args: &[&str]) {
        let status = self.command().args(args).status().unwrap();
        assert!(status.success(), "tmux {args:?}: {status}");
    }

    fn screen(&self) -> String {
        let out = self
            .command()
            .args(["capture-pane", "-p", "-t", "top"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Reads the pane until `done` accepts it twice in a row; fails with the last
    /// screen at the deadline.
    fn wait_for(&self, what: &str, within: Duration, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        loop {
            let screen = self.screen();
            if done(&screen) && screen == last {
                return screen;
            }
            last = screen.clone();
            assert!(
                Instant::now() < deadline,
                "no {what} on screen within {within:?}; it shows:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self
            .command()
            .arg("kill-server")
            .stderr(Stdio::null())
            .status();
    }
}

/// tmux, installed by `scripts/test-deps.sh` if missing.
fn ensure_tmux() {
    let present = || {
        Command::new("tmux")
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if present() {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-deps.sh");
    let status = Command::new("bash").arg(&script).status();
    assert!(
        present(),
        "tmux is missing and {} did not install it ({status:?})",
        script.display()
    );
}

/// A node called `name` on the cluster at `url`, its LLM answering after 20 s (a task
/// stays waiting on its call while the test looks).
fn node(url: &str, token_file: &Path, name: &str) -> Server {
    Server::start([
        "serve",
        "--addr",
        "127.0.0.1:0",
        "--llm-latency-ms",
        "20000",
        "--postgres",
        url,
        "--token-file",
        token_file.to_str().unwrap(),
        "--node-id",
        name,
        "--lease-ttl",
        "2s",
    ])
}

/// The line of `screen` that contains `needle`.
fn line_with<'a>(screen: &'a str, needle: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in\n{screen}"))
}

#[test]
fn spool_top_on_a_node_shows_the_nodes_the_shards_and_each_shards_queue() {
    ensure_tmux();
    let url = PgCluster::shared()
        .create_database("top_cluster_nodes")
        .unwrap();
    Cluster::init(&url, 2).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let a = node(&url, &token_file, "node-a");
    let _b = node(&url, &token_file, "node-b");
    let agent = support::client(Duration::from_secs(30));

    // Each node holds one shard.
    let deadline = Instant::now() + Duration::from_secs(30);
    let owners = loop {
        let (status, cluster) = support::get(&agent, &a.addr, TOKEN, "/v1/cluster");
        let owners: Vec<Option<String>> = cluster["shards"]
            .as_array()
            .map(|shards| {
                shards
                    .iter()
                    .map(|s| s["owner"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let mut held: Vec<&str> = owners.iter().flatten().map(String::as_str).collect();
        held.sort_unstable();
        if status == 200 && held == ["node-a", "node-b"] {
            break owners;
        }
        assert!(Instant::now() < deadline, "the cluster is {cluster}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let holder = |shard: usize| owners[shard].clone().unwrap();

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

    let tmux = Tmux {
        socket: dir.path().join("tmux"),
    };
    let top = format!(
        "'{}' top --addr http://{} --token-file '{}'; echo top-exited-$?; exec sleep 600",
        env!("CARGO_BIN_EXE_spool"),
        a.addr,
        token_file.display()
    );
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "100",
        "-y",
        "30",
        "sh",
        "-c",
        &top,
    ]);

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
