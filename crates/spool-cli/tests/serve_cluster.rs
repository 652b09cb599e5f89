//! `spool serve --postgres` on a cluster's database: each process is a node, and any
//! node answers for every shard — submissions placed by agent (through other shards'
//! inboxes when the node does not run them), tasks read from any node, lists gathered
//! from every shard, keys cluster-wide, and a node stopped with SIGTERM hands its
//! shards over at once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool_postgres::cluster::shard_for;

mod support;

use support::cluster::{self, Node, TestCluster, holders, list_tasks, one_shard_each};

const TOKEN: &str = "serve-cluster-test-token-0123456789";

/// How long the test waits for the cluster to be as it expects.
const WAIT: Duration = Duration::from_secs(30);

/// Node `name` of the cluster at `url`, on a free loopback port, with leases of `ttl`,
/// its built-in LLM answering after 5 ms.
fn node<'a>(url: &'a str, token_file: &'a Path, name: &'a str, ttl: &'a str) -> Node<'a> {
    Node::new(url, token_file, name)
        .ttl(ttl)
        .llm_latency_ms("5")
}

fn client() -> ureq::Agent {
    support::client(Duration::from_secs(30))
}

fn get(agent: &ureq::Agent, addr: &str, path: &str) -> (u16, Value) {
    support::get(agent, addr, TOKEN, path)
}

fn submit(agent: &ureq::Agent, addr: &str, key: &str, body: &Value) -> (u16, Value) {
    cluster::submit(agent, addr, TOKEN, key, body)
}

/// Every completed task, gathered from every shard through `addr`, page by page.
fn completed(agent: &ureq::Agent, addr: &str) -> Vec<Value> {
    list_tasks(agent, addr, TOKEN, "state=completed&limit=7")
}

#[test]
fn any_node_takes_any_request_and_a_stopped_node_hands_its_shards_over() {
    let TestCluster {
        url,
        dir,
        token_file,
    } = TestCluster::init("serve_cluster_any_node", 4, TOKEN);
    let mut a = node(&url, &token_file, "node-a", "2s").start();
    let b = node(&url, &token_file, "node-b", "2s").start();
    let agent = client();
    let cluster = cluster::wait_cluster(
        &agent,
        &a.addr,
        TOKEN,
        WAIT,
        "two nodes share four shards",
        |c| {
            let h = holders(c);
            h.get("node-a").map(Vec::len) == Some(2) && h.get("node-b").map(Vec::len) == Some(2)
        },
    );
    let of_a: BTreeSet<u64> = holders(&cluster)["node-a"]
        .iter()
        .map(|&shard| u64::from(shard))
        .collect();

    // A node named as a running one, or with another token, is refused at start.
    let other_token = dir.path().join("other-token");
    std::fs::write(&other_token, "another-token-0123456789abcdef").expect("written");
    for (name, file, said) in [
        (
            "node-b",
            &token_file,
            "a node named `node-b` is running (its heartbeat is",
        ),
        (
            "node-c",
            &other_token,
            "this node's token is not the one the nodes running now (node-a, node-b) share: \
             start every node with the same --token-file (to change it, stop them all first)",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_spool"))
            .args([
                "serve",
                "--addr",
                "127.0.0.1:0",
                "--postgres",
                &url,
                "--token-file",
            ])
            .arg(file)
            .args(["--node-id", name, "--lease-ttl", "2s"])
            .env_remove("OPENAI_BASE_URL")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("spool runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(said), "{stderr}");
    }

    // 24 agents' tasks, sent to the two nodes in turn: each lands in its agent's shard,
    // whichever node took it, and is answered with its id.
    let mut ids = BTreeMap::new();
    for i in 0..24 {
        let addr = if i % 2 == 0 { &a.addr } else { &b.addr };
        let agent_name = format!("agent-{i}");
        let body =
            json!({"type": "agent", "input": {"prompt": format!("task {i}")}, "agent": agent_name});
        let (status, answer) = submit(&agent, addr, &format!("key-{i}"), &body);
        assert_eq!(status, 202, "{answer}");
        let id = answer["id"].as_u64().expect("an id");
        let shard = u64::from(shard_for(&agent_name, 4));
        assert_eq!(id >> 44, shard, "task {id} of {agent_name}");
        ids.insert(i, id);
    }
    let distinct: BTreeSet<u64> = ids.values().copied().collect();
    assert_eq!(distinct.len(), 24);

    // The same key again, on the other node: the same task, no second one.
    let body = json!({"type": "agent", "input": {"prompt": "task 0"}, "agent": "agent-0"});
    for addr in [&a.addr, &b.addr] {
        let (status, answer) = submit(&agent, addr, "key-0", &body);
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["id"].as_u64(), Some(ids[&0]), "{answer}");
        assert_eq!(answer["admission"]["status"], json!("existing"), "{answer}");
    }
    // The key with another request is refused, as a lone server refuses it, by either
    // node.
    let other = json!({"type": "agent", "input": {"prompt": "another"}, "agent": "agent-0"});
    for addr in [&a.addr, &b.addr] {
        let (status, answer) = submit(&agent, addr, "key-0", &other);
        assert_eq!(status, 422, "{answer}");
        assert_eq!(
            answer["type"],
            json!("https://spool.invalid/problems/idempotency-key-reused"),
            "{answer}"
        );
    }
    // A client that sends the headers nodes pass requests with is answered as any
    // client: the key is still the agent's shard's, and without a token nothing.
    let mut response = agent
        .post(format!("http://{}/v1/tasks", a.addr))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .header("Idempotency-Key", "key-0")
        .header("x-spool-shard", ((ids[&0] >> 44) ^ 1).to_string())
        .header("x-spool-forwarded-by", "node-b")
        .header("x-spool-hop", "0".repeat(64))
        .send_json(&body)
        .expect("the node answers");
    let answer: Value = response.body_mut().read_json().unwrap_or(Value::Null);
    assert_eq!(response.status().as_u16(), 200, "{answer}");
    assert_eq!(answer["id"].as_u64(), Some(ids[&0]), "{answer}");
    let response = agent
        .get(format!("http://{}/v1/tasks", a.addr))
        .header("x-spool-shard", "0")
        .header("x-spool-forwarded-by", "node-b")
        .call()
        .expect("the node answers");
    assert_eq!(response.status().as_u16(), 401);
    // HEAD of a gathered list answers as GET does, without the body.
    let response = agent
        .head(format!("http://{}/v1/tasks", b.addr))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .call()
        .expect("the node answers");
    assert_eq!(response.status().as_u16(), 200);

    // Every task completes, and the list gathered from every shard shows each once,
    // by id, from either node.
    let deadline = Instant::now() + Duration::from_secs(60);
    while completed(&agent, &a.addr).len() < 24 {
        assert!(Instant::now() < deadline, "not every task completed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let listed: Vec<u64> = completed(&agent, &b.addr)
        .iter()
        .map(|t| t["id"].as_u64().expect("an id"))
        .collect();
    let mut sorted: Vec<u64> = distinct.iter().copied().collect();
    sorted.sort_unstable();
    assert_eq!(listed, sorted);
    for id in ids.values() {
        for addr in [&a.addr, &b.addr] {
            let (status, task) = get(&agent, addr, &format!("/v1/tasks/{id}"));
            assert_eq!(status, 200, "{task}");
            assert_eq!(task["state"], json!("completed"), "{task}");
        }
    }
    // Per-shard reads name their shard; the node's own metrics carry it.
    let (status, problem) = get(&agent, &a.addr, "/v1/queue");
    assert_eq!(status, 400, "{problem}");
    for shard in 0..4 {
        let (status, queue) = get(&agent, &b.addr, &format!("/v1/queue?shard={shard}"));
        assert_eq!(status, 200, "{queue}");
    }

    // SIGTERM: node-a stops, hands its shards over at once, and node-b serves them.
    let status = a.terminate();
    assert!(
        status.success(),
        "node-a did not stop cleanly:\n{}",
        a.log()
    );
    let cluster = cluster::wait_cluster(
        &agent,
        &b.addr,
        TOKEN,
        WAIT,
        "node-b holds every shard",
        |c| holders(c).get("node-b").map(Vec::len) == Some(4),
    );
    assert!(!holders(&cluster).contains_key("node-a"), "{cluster}");
    for (i, id) in &ids {
        if of_a.contains(&(id >> 44)) {
            let (status, task) = get(&agent, &b.addr, &format!("/v1/tasks/{id}"));
            assert_eq!(status, 200, "task {i}: {task}");
            assert_eq!(task["state"], json!("completed"), "{task}");
        }
    }
    b.stop();
}

/// An event stream read raw: the blocks it sent, each as its `id`, `event` and data.
struct Events {
    stream: std::io::BufReader<std::net::TcpStream>,
}

/// One block of a stream.
#[derive(Debug)]
struct Block {
    id: Option<String>,
    event: String,
    data: Value,
}

impl Events {
    /// Opens `GET /v1/events` on the node at `addr`, after `last` if given.
    fn open(addr: &str, last: Option<&str>) -> Events {
        use std::io::{BufRead, Write};
        let mut stream = std::net::TcpStream::connect(addr).expect("the node takes connections");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("a timeout");
        let last = last.map_or(String::new(), |id| format!("Last-Event-ID: {id}\r\n"));
        write!(
            stream,
            "GET /v1/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n{last}\r\n"
        )
        .expect("the request is sent");
        let mut stream = std::io::BufReader::new(stream);
        let mut line = String::new();
        stream.read_line(&mut line).expect("a status line");
        if !line.starts_with("HTTP/1.1 200") {
            use std::io::Read;
            let mut rest = String::new();
            let _ = stream.read_to_string(&mut rest);
            panic!("{line}{rest}");
        }
        loop {
            line.clear();
            stream.read_line(&mut line).expect("a header");
            if line == "\r\n" {
                return Events { stream };
            }
        }
    }

    /// The next block with an event (keep-alives and chunk sizes passed over).
    fn next(&mut self) -> Block {
        use std::io::BufRead;
        let (mut id, mut event, mut data) = (None, None, String::new());
        let mut line = String::new();
        loop {
            line.clear();
            self.stream
                .read_line(&mut line)
                .expect("the stream goes on");
            let text = line.trim_end_matches(['\r', '\n']);
            if let Some(value) = text.strip_prefix("id: ") {
                id = Some(value.to_owned());
            } else if let Some(value) = text.strip_prefix("event: ") {
                event = Some(value.to_owned());
            } else if let Some(value) = text.strip_prefix("data: ") {
                data.push_str(value);
            } else if text.is_empty()
                && let Some(event) = event.take()
            {
                let data = serde_json::from_str(&data).unwrap_or(Value::Null);
                return Block { id, event, data };
            }
        }
    }
}

/// Without `?shard=`, a node streams every shard's events in one stream whose ids name
/// every shard's position; a client that reconnects to another node with the last id
/// it saw gets every later event of every shard once, and none it had.
#[test]
fn one_event_stream_covers_every_shard_and_resumes_on_another_node() {
    let TestCluster {
        url,
        dir: _dir,
        token_file,
    } = TestCluster::init("serve_cluster_events", 2, TOKEN);
    let a = node(&url, &token_file, "node-a", "2s")
        .args(["--shutdown-timeout", "30"])
        .start();
    let b = node(&url, &token_file, "node-b", "2s").start();
    let agent = client();
    cluster::wait_cluster(&agent, &a.addr, TOKEN, WAIT, "one shard each", |c| {
        one_shard_each(c, &["node-a", "node-b"])
    });
    let mut events = Events::open(&a.addr, None);
    let start = events.next();
    assert_eq!(start.event, "start");
    let first_id = start.id.expect("the start names the positions");
    // Agents that land in each shard.
    let agents: Vec<String> = (0..40)
        .map(|i| format!("agent-{i}"))
        .filter(|name| shard_for(name, 2) == 0)
        .take(2)
        .chain(
            (0..40)
                .map(|i| format!("agent-{i}"))
                .filter(|name| shard_for(name, 2) == 1)
                .take(2),
        )
        .collect();
    for (i, name) in agents.iter().enumerate() {
        let body = json!({"type": "agent", "input": {"prompt": format!("p{i}")}, "agent": name});
        let (status, answer) = submit(&agent, &b.addr, &format!("ev-{i}"), &body);
        assert_eq!(status, 202, "{answer}");
    }
    // Read some events, then go to the other node with the last id seen.
    let mut seen: Vec<(u64, u64)> = Vec::new();
    let mut last = first_id.clone();
    for _ in 0..6 {
        let block = events.next();
        assert_eq!(block.event, "transition", "{block:?}");
        let seq = block.data["seq"].as_u64().expect("a seq");
        let task = block.data["task"].as_u64().expect("a task");
        seen.push((task >> 44, seq));
        last = block.id.expect("an id");
    }
    drop(events);
    let mut events = Events::open(&b.addr, Some(&last));
    assert_eq!(events.next().event, "start");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut completed = 0;
    while completed < agents.len() {
        assert!(
            Instant::now() < deadline,
            "not every task completed: {seen:?}"
        );
        let block = events.next();
        assert_eq!(block.event, "transition", "{block:?}");
        let seq = block.data["seq"].as_u64().expect("a seq");
        let task = block.data["task"].as_u64().expect("a task");
        seen.push((task >> 44, seq));
        if block.data["to"]
            .as_str()
            .is_some_and(|to| to.starts_with("Completed"))
        {
            completed += 1;
        }
    }
    // Each shard's events once each, in order, with no hole after where the stream
    // started.
    for shard in 0..2u64 {
        let seqs: Vec<u64> = seen
            .iter()
            .filter(|(s, _)| *s == shard)
            .map(|(_, q)| *q)
            .collect();
        assert!(!seqs.is_empty(), "no event of shard {shard}: {seen:?}");
        let from: u64 = first_id
            .split(',')
            .find_map(|p| p.strip_prefix(&format!("{shard}:")))
            .and_then(|n| n.parse().ok())
            .expect("the shard's position");
        let expected: Vec<u64> = (from + 1..=from + seqs.len() as u64).collect();
        assert_eq!(seqs, expected, "shard {shard}");
    }
    drop(events);
    // A stream node-a passes on from node-b's shard does not hold node-a's stop: the
    // stop ends it and hands node-a's shard over at once, well before its 30 s
    // shutdown timeout would cut the connection.
    let of_b = holders(&cluster::wait_cluster(
        &agent,
        &a.addr,
        TOKEN,
        WAIT,
        "the cluster",
        |_| true,
    ))["node-b"][0];
    let mut passed = std::net::TcpStream::connect(&a.addr).expect("node-a takes connections");
    std::io::Write::write_all(
        &mut passed,
        format!(
            "GET /v1/events?shard={of_b} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer \
             {TOKEN}\r\n\r\n",
            a.addr
        )
        .as_bytes(),
    )
    .expect("the request is sent");
    let mut head = [0u8; 12];
    std::io::Read::read_exact(&mut passed, &mut head).expect("the stream begins");
    assert_eq!(&head, b"HTTP/1.1 200");
    let stopping = Instant::now();
    a.stop();
    assert!(
        stopping.elapsed() < Duration::from_secs(15),
        "node-a took {:?} to stop",
        stopping.elapsed()
    );
    b.stop();
}
