//! `spool serve --postgres` nodes of a cluster against a real (scripted) endpoint that
//! streams: the pieces of an answer reach a node's event stream as `event: delta`, in
//! order and before the answer's trace events, whichever node runs the task's shard;
//! a client that reconnects to another node with a piece's id mid-answer gets the
//! pieces it missed, then the answer.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool_postgres::cluster::shard_for;

mod support;

#[path = "../../spool-exec/tests/support/sse_server.rs"]
mod sse_server;

use sse_server::{Answer, Script, SseServer};
use support::cluster::{self, Node, TestCluster, holders, one_shard_each};

const TOKEN: &str = "serve-cluster-stream-test-token-0123";

/// How long the test waits for the cluster to be as it expects.
const WAIT: Duration = Duration::from_secs(30);

/// An event stream read raw: the blocks it sent, each within [`WAIT`] of opening it.
struct Events {
    stream: BufReader<TcpStream>,
    deadline: Instant,
}

/// One block of a stream: its `id`, `event` and data.
#[derive(Debug)]
struct Block {
    id: Option<String>,
    event: String,
    data: Value,
}

impl Events {
    /// Opens `GET PATH` (an event stream) on the node at `addr`, after `last` if given.
    fn open(addr: &str, path: &str, last: Option<&str>) -> Events {
        let mut stream = TcpStream::connect(addr).expect("the node takes connections");
        stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .expect("a timeout");
        let last = last.map_or(String::new(), |id| format!("Last-Event-ID: {id}\r\n"));
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n{last}\r\n"
        )
        .expect("the request is sent");
        let mut stream = BufReader::new(stream);
        let mut line = String::new();
        stream.read_line(&mut line).expect("a status line");
        if !line.starts_with("HTTP/1.1 200") {
            let mut rest = String::new();
            let _ = stream.read_to_string(&mut rest);
            panic!("{line}{rest}");
        }
        loop {
            line.clear();
            stream.read_line(&mut line).expect("a header");
            if line == "\r\n" {
                return Events {
                    stream,
                    deadline: Instant::now() + WAIT,
                };
            }
        }
    }

    /// The next block with an event (keep-alives and chunk sizes passed over); fails
    /// once the stream's deadline has passed.
    fn next(&mut self) -> Block {
        let (mut id, mut event, mut data) = (None, None, String::new());
        let mut line = String::new();
        loop {
            // A read that times out keeps what it read of the line, and is tried again
            // until the deadline.
            match self.stream.read_line(&mut line) {
                Ok(0) => panic!("the event stream ended"),
                Ok(_) if line.ends_with('\n') => {}
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    assert!(
                        Instant::now() < self.deadline,
                        "no event within {WAIT:?}; the line so far: {line:?}"
                    );
                    continue;
                }
                Err(e) => panic!("the stream is read: {e}"),
            }
            let text = std::mem::take(&mut line);
            let text = text.trim_end_matches(['\r', '\n']);
            if let Some(value) = text.strip_prefix("id: ") {
                id = Some(value.to_owned());
            } else if let Some(value) = text.strip_prefix("event: ") {
                event = Some(value.to_owned());
            } else if let Some(value) = text.strip_prefix("data: ") {
                data.push_str(value);
            } else if text.is_empty() {
                if let Some(event) = event.take() {
                    let data = serde_json::from_str(&data).unwrap_or(Value::Null);
                    return Block { id, event, data };
                }
                id = None;
                data.clear();
            }
        }
    }

    /// The blocks of task `task` up to its answer's transition (`Waiting(llm)` to
    /// `Ready`), that one included: the other tasks' and the `start` are passed over.
    fn until_answered(&mut self, task: u64) -> Vec<Block> {
        let mut blocks = Vec::new();
        loop {
            let block = self.next();
            if block.data["task"] != task {
                continue;
            }
            let answered = block.event == "transition" && block.data["from"] == "Waiting(llm)";
            blocks.push(block);
            if answered {
                return blocks;
            }
        }
    }
}

/// The position of shard `shard` in a merged stream's id (`0:15:7,1:0`): what follows
/// `SHARD:`.
fn position_of(id: &str, shard: u64) -> String {
    id.split(',')
        .find_map(|pair| pair.strip_prefix(&format!("{shard}:")))
        .unwrap_or_else(|| panic!("{id} names no position of shard {shard}"))
        .to_owned()
}

/// Waits up to 60 s for task `id` to end; its view.
fn ended(agent: &ureq::Agent, addr: &str, id: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, task) = support::get(agent, addr, TOKEN, &format!("/v1/tasks/{id}"));
        if status == 200 && matches!(task["state"].as_str(), Some("completed" | "failed")) {
            return task;
        }
        assert!(Instant::now() < deadline, "task {id} did not end: {task}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two nodes, a shard each: a task of node-a's shard streams its answer; node-b's
/// merged `/v1/events` shows the first pieces as `event: delta` (passed on from
/// node-a), each id naming the shard's last trace event and the piece; reconnected to
/// node-a's `?task=` stream with the last piece's id, the client gets the rest of the
/// pieces, in order, once each, then the answer's transition.
#[test]
fn a_nodes_event_stream_carries_the_pieces_of_an_answer_and_resumes_them_on_another_node() {
    let TestCluster {
        url,
        dir: _dir,
        token_file,
    } = TestCluster::init("serve_cluster_stream_pieces", 2, TOKEN);
    let script = Script::text(30);
    let gate = Arc::new(Mutex::new(false));
    let held = Arc::clone(&gate);
    // The role and the first five pieces, then nothing until the test lets the rest go.
    let endpoint = SseServer::start(move |seen, count| {
        if count == 0 {
            Answer::Held {
                events: script.events(),
                before: 6,
                gate: Arc::clone(&held),
            }
        } else {
            Answer::for_request(&script, seen, Duration::ZERO)
        }
    });
    let a = Node::new(&url, &token_file, "node-a")
        .env("OPENAI_BASE_URL", &endpoint.url)
        .start();
    let b = Node::new(&url, &token_file, "node-b")
        .env("OPENAI_BASE_URL", &endpoint.url)
        .start();
    let agent = support::client(Duration::from_secs(30));
    let held_by = holders(&cluster::wait_cluster(
        &agent,
        &a.addr,
        TOKEN,
        WAIT,
        "one shard each",
        |c| one_shard_each(c, &["node-a", "node-b"]),
    ));
    let shard = u64::from(held_by["node-a"][0]);
    let name = (0..)
        .map(|i| format!("streamer-{i}"))
        .find(|name| u64::from(shard_for(name, 2)) == shard)
        .expect("an agent of node-a's shard");

    let mut events = Events::open(&b.addr, "/v1/events", None);
    assert_eq!(events.next().event, "start");
    let body = json!({"type": "agent", "input": {"prompt": "count to thirty"}, "agent": name});
    let (status, submitted) = cluster::submit(&agent, &a.addr, TOKEN, "stream-1", &body);
    assert_eq!(status, 202, "{submitted}");
    let id = submitted["id"].as_u64().expect("an id");
    assert_eq!(id >> 44, shard);

    // The request goes out, then its first five pieces, each naming the transition
    // sent before it and its own number.
    let mut last = String::new();
    let mut asked = None;
    let mut pieces = Vec::new();
    while pieces.len() < 5 {
        let block = events.next();
        if block.data["task"] != id {
            continue;
        }
        let block_id = block.id.clone().expect("an id");
        if block.event == "transition" && block.data["to"] == "Waiting(llm)" {
            asked = Some(block.data["seq"].as_u64().expect("a seq"));
        } else if block.event == "delta" {
            let asked = asked.expect("the request's transition comes before its pieces");
            let position = position_of(&block_id, shard);
            let (seq, number) = position.split_once(':').expect("SEQ:N");
            assert_eq!(seq, asked.to_string(), "{block:?}");
            assert!(number.parse::<u64>().is_ok(), "{block:?}");
            pieces.push(block.data.clone());
        }
        last = block_id;
    }
    drop(events);
    let expected = |from: usize, to: usize| -> Vec<Value> {
        (from..to)
            .map(|i| json!({"task": id, "request": 1, "seq": i, "text": format!("t{i} ")}))
            .collect()
    };
    assert_eq!(pieces, expected(0, 5));

    // Mid-answer, on the other node, only this task's stream, after the last piece.
    let mut events = Events::open(
        &a.addr,
        &format!("/v1/events?task={id}"),
        Some(last.as_str()),
    );
    *gate.lock().expect("the gate") = true;
    let blocks = events.until_answered(id);
    let (answer, pieces) = blocks.split_last().expect("the answer's transition");
    assert_eq!(answer.data["cause"], "answer to request 1", "{answer:?}");
    assert!(
        pieces.iter().all(|b| b.event == "delta"),
        "only pieces before the answer: {blocks:?}"
    );
    let pieces: Vec<Value> = pieces.iter().map(|b| b.data.clone()).collect();
    assert_eq!(pieces, expected(5, 30));
    drop(events);

    let task = ended(&agent, &b.addr, id);
    assert_eq!(task["state"], "completed", "{task}");
    let whole = Script::text(30).whole_answer()["content"].clone();
    let whole = whole.as_str().expect("text").to_owned();
    assert!(task["result"].to_string().contains(&whole), "{task}");
    assert_eq!(endpoint.seen().len(), 1);
    a.stop();
    b.stop();
}
