//! The dashboard's side of the HTTP API, on threads of its own: one polls the JSON
//! endpoints about every 500 ms (and the watched task), backing off while the server
//! is gone; another follows the watched task's event stream. They report
//! [`Update`]s over a channel and take [`Command`]s over another; they end when the
//! dashboard drops its ends.

use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use serde::Deserialize;

use super::app::Command;
use super::live::LiveDelta;
use super::model::{Cluster, Queue, Schedule, Task, TraceLine, Update, shard_of_task};
use crate::remote::{Endpoint, ReadError};

/// How often the JSON endpoints are read.
const POLL_EVERY: Duration = Duration::from_millis(500);
/// The task list (for the wait percentiles) is read every this many polls.
const TASKS_EVERY: u64 = 4;
/// The most tasks read for the percentiles (pages of 1000).
const TASKS_READ: usize = 5000;
/// The longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What the poller knows of the server's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Not asked yet, or asked before the last failure (a restart may change it).
    Unknown,
    /// A lone server: `GET /v1/cluster` answered 404.
    Lone,
    /// A cluster node.
    Node,
}

/// `GET /v1/queue`: on a cluster node, of one shard (`?shard=N`, which a node with
/// more than one shard requires).
fn queue_path(node: bool, shard: u32) -> String {
    if node {
        format!("/v1/queue?shard={shard}")
    } else {
        "/v1/queue".to_owned()
    }
}

/// A task's event stream: on a cluster node, of the shard that made it (the top bits
/// of its id).
fn events_path(task: u64, node: bool) -> String {
    if node {
        format!("/v1/events?task={task}&shard={}", shard_of_task(task))
    } else {
        format!("/v1/events?task={task}")
    }
}

/// A page of `GET /v1/tasks`.
#[derive(Debug, Deserialize)]
struct Page {
    tasks: Vec<Task>,
    next_cursor: Option<String>,
}

/// The threads' ends the dashboard holds.
#[derive(Debug)]
pub(crate) struct Client {
    pub(crate) commands: Sender<Command>,
    pub(crate) updates: Receiver<Update>,
}

/// Starts the poller for `endpoint`.
pub(crate) fn start(endpoint: Endpoint) -> std::io::Result<Client> {
    let (commands, command_rx) = std::sync::mpsc::channel();
    let (update_tx, updates) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("spool-top-poll".to_owned())
        .spawn(move || Poller::new(endpoint, update_tx).run(&command_rx))?;
    Ok(Client { commands, updates })
}

/// The polling thread's state.
struct Poller {
    endpoint: Endpoint,
    agent: ureq::Agent,
    updates: Sender<Update>,
    watched: Option<u64>,
    /// Bumped at each change of the watched task: a stream of an older one ends.
    stream: Arc<AtomicU64>,
    polls: u64,
    failures: u32,
    kind: Kind,
    /// Whether the server is known to be a cluster node, for the event streams, which
    /// read it at each connection.
    node: Arc<AtomicBool>,
    /// The shard whose queue is read on a cluster node.
    shard: u32,
}

impl Poller {
    fn new(endpoint: Endpoint, updates: Sender<Update>) -> Poller {
        Poller {
            endpoint,
            agent: Endpoint::agent(Some(Duration::from_secs(3))),
            updates,
            watched: None,
            stream: Arc::new(AtomicU64::new(0)),
            polls: 0,
            failures: 0,
            kind: Kind::Unknown,
            node: Arc::new(AtomicBool::new(false)),
            shard: 0,
        }
    }

    fn run(mut self, commands: &Receiver<Command>) {
        let mut wait = Duration::ZERO;
        loop {
            match commands.recv_timeout(wait) {
                Ok(command) => {
                    if !self.command(command) {
                        return;
                    }
                    // Answer the person at once: a watched task's detail now.
                    wait = Duration::ZERO;
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {}
            }
            let update = match self.poll() {
                Ok(update) => {
                    self.failures = 0;
                    wait = POLL_EVERY;
                    update
                }
                Err(ReadError::Unauthorized(status)) => {
                    self.kind = Kind::Unknown;
                    wait = MAX_BACKOFF;
                    Update::Unauthorized(format!("the server answered {status}"))
                }
                Err(error) => {
                    self.kind = Kind::Unknown;
                    self.failures += 1;
                    // 0.5 s, 1 s, 2 s, 4 s, then every 5 s.
                    wait = POLL_EVERY
                        .saturating_mul(1 << self.failures.saturating_sub(1).min(4))
                        .min(MAX_BACKOFF);
                    Update::Gone {
                        error: error.to_string(),
                        attempt: self.failures,
                    }
                }
            };
            if self.updates.send(update).is_err() {
                return;
            }
        }
    }

    /// Carries out `command`; false once the dashboard is gone.
    fn command(&mut self, command: Command) -> bool {
        match command {
            Command::Watch(task) => {
                self.watched = task;
                let generation = self.stream.fetch_add(1, Ordering::SeqCst) + 1;
                if let Some(task) = task {
                    follow(
                        self.endpoint.clone(),
                        Arc::clone(&self.node),
                        task,
                        Arc::clone(&self.stream),
                        generation,
                        self.updates.clone(),
                    );
                }
                true
            }
            Command::Shard(shard) => {
                self.shard = shard;
                true
            }
            Command::Cancel(id) => {
                let path = format!("/v1/tasks/{id}/cancel");
                let message = match self.endpoint.call(&self.agent, "POST", &path) {
                    Ok((202, _)) => format!("task {id} canceled"),
                    Ok((status, text)) => {
                        let detail = serde_json::from_str::<serde_json::Value>(&text)
                            .ok()
                            .and_then(|v| v["detail"].as_str().map(str::to_owned))
                            .unwrap_or(text);
                        format!("cancel of task {id}: {status} {detail}")
                    }
                    Err(error) => format!("cancel of task {id} failed: {error}"),
                };
                self.updates.send(Update::Status(message)).is_ok()
            }
        }
    }

    fn poll(&mut self) -> Result<Update, ReadError> {
        let cluster = self.cluster()?;
        let shard = match &cluster {
            // A shard the cluster has, whatever was asked.
            Some(cluster) => self.shard.min(cluster.shard_count() - 1),
            None => 0,
        };
        let path = queue_path(cluster.is_some(), shard);
        let queue: Queue = self.endpoint.get(&self.agent, &path)?;
        let schedules: Vec<Schedule> = self.endpoint.get(&self.agent, "/v1/schedules")?;
        let tasks = if self.polls.is_multiple_of(TASKS_EVERY) {
            Some(self.tasks()?)
        } else {
            None
        };
        self.polls += 1;
        if let Some(id) = self.watched {
            let path = format!("/v1/tasks/{id}");
            let task = match self.endpoint.call(&self.agent, "GET", &path)? {
                (200, text) => serde_json::from_str::<Task>(&text)
                    .map(Box::new)
                    .map(Some)
                    .map_err(|e| ReadError::Unexpected(format!("GET {path}: {e}")))?,
                _ => None,
            };
            let _ = self.updates.send(Update::Task(id, task));
        }
        Ok(Update::Polled {
            queue: Box::new(queue),
            schedules,
            tasks,
            cluster: cluster.map(Box::new),
            shard,
        })
    }

    /// `GET /v1/cluster` on a cluster node; `None` on a lone server, which answers 404
    /// there and is not asked again until a poll fails (it may come back as a node).
    fn cluster(&mut self) -> Result<Option<Cluster>, ReadError> {
        if self.kind == Kind::Lone {
            return Ok(None);
        }
        let path = "/v1/cluster";
        match self.endpoint.call(&self.agent, "GET", path)? {
            (404, _) => {
                self.kind = Kind::Lone;
                self.node.store(false, Ordering::SeqCst);
                Ok(None)
            }
            (200, text) => {
                let cluster = serde_json::from_str::<Cluster>(&text)
                    .map_err(|e| ReadError::Unexpected(format!("GET {path}: {e}")))?;
                self.kind = Kind::Node;
                self.node.store(true, Ordering::SeqCst);
                Ok(Some(cluster))
            }
            (status, text) => Err(ReadError::Unexpected(format!(
                "GET {path} answered {status}: {}",
                text.chars().take(200).collect::<String>()
            ))),
        }
    }

    /// The tasks the server holds, oldest first, at most [`TASKS_READ`].
    fn tasks(&self) -> Result<Vec<Task>, ReadError> {
        let mut tasks = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("/v1/tasks?limit=1000&cursor={c}"),
                None => "/v1/tasks?limit=1000".to_owned(),
            };
            let page: Page = self.endpoint.get(&self.agent, &path)?;
            tasks.extend(page.tasks);
            match page.next_cursor {
                Some(next) if tasks.len() < TASKS_READ => cursor = Some(next),
                _ => return Ok(tasks),
            }
        }
    }
}

/// Follows task `task`'s events on a thread of its own while `stream` is at
/// `generation`, reconnecting from the last event seen (from its shard when `node`
/// says the server is a cluster node).
fn follow(
    endpoint: Endpoint,
    node: Arc<AtomicBool>,
    task: u64,
    stream: Arc<AtomicU64>,
    generation: u64,
    updates: Sender<Update>,
) {
    let report = updates.clone();
    let spawned = std::thread::Builder::new()
        .name("spool-top-events".to_owned())
        .spawn(move || {
            let agent = Endpoint::agent(None);
            let mut last = 0u64;
            let current = || stream.load(Ordering::SeqCst) == generation;
            while current() {
                let path = events_path(task, node.load(Ordering::SeqCst));
                let _ = read_events(&endpoint, &agent, &path, &mut last, &current, &updates);
                if !current() {
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        });
    if let Err(error) = spawned {
        let _ = report.send(Update::Status(format!(
            "cannot follow task {task}'s events: {error}"
        )));
    }
}

/// Reads one connection of the event stream; returns when it ends, fails, or is no
/// longer wanted.
fn read_events(
    endpoint: &Endpoint,
    agent: &ureq::Agent,
    path: &str,
    last: &mut u64,
    current: &dyn Fn() -> bool,
    updates: &Sender<Update>,
) -> Result<(), ReadError> {
    let request = endpoint
        .request("GET", path)
        .header("Last-Event-ID", last.to_string())
        .body(())
        .map_err(|e| ReadError::Unexpected(e.to_string()))?;
    let response = agent
        .run(request)
        .map_err(|e| ReadError::Transport(e.to_string()))?;
    if response.status().as_u16() != 200 {
        return Err(ReadError::Unexpected(format!(
            "GET /v1/events answered {}",
            response.status()
        )));
    }
    let reader = BufReader::new(response.into_body().into_reader());
    let mut event = String::new();
    for line in reader.lines() {
        let line = line.map_err(|e| ReadError::Transport(e.to_string()))?;
        if !current() {
            return Ok(());
        }
        if let Some(name) = line.strip_prefix("event: ") {
            event = name.to_owned();
        } else if let Some(data) = line.strip_prefix("data: ") {
            if event == "transition" {
                if let Ok(trace) = serde_json::from_str::<TraceLine>(data) {
                    *last = (*last).max(trace.seq);
                    if updates.send(Update::Event(trace)).is_err() {
                        return Ok(());
                    }
                }
            } else if event == "delta" {
                // A piece of an answer being streamed; resuming from the last trace
                // event sends the pieces still kept again, which the model drops.
                if let Ok(delta) = serde_json::from_str::<LiveDelta>(data)
                    && updates.send(Update::Delta(delta)).is_err()
                {
                    return Ok(());
                }
            }
        } else if line.is_empty() {
            event.clear();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn the_queue_and_a_tasks_events_name_the_shard_on_a_cluster_node_only() {
        assert_eq!(queue_path(false, 3), "/v1/queue");
        assert_eq!(queue_path(true, 3), "/v1/queue?shard=3");
        let id = (2u64 << 44) + 5;
        assert_eq!(events_path(id, false), format!("/v1/events?task={id}"));
        assert_eq!(
            events_path(id, true),
            format!("/v1/events?task={id}&shard=2")
        );
    }

    /// A stand-in on loopback: a cluster node of four shards whose queue of shard N
    /// runs N tasks (and refuses `/v1/queue` without a shard, as a node does), or a
    /// lone server (404 at `/v1/cluster`) running 9. It records the paths asked.
    struct StandIn {
        base: String,
        node: Arc<AtomicBool>,
        paths: Arc<Mutex<Vec<String>>>,
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl StandIn {
        fn start() -> StandIn {
            let server = tiny_http::Server::http("127.0.0.1:0").expect("a port on 127.0.0.1");
            let port = server.server_addr().to_ip().expect("an IP address").port();
            let node = Arc::new(AtomicBool::new(true));
            let paths = Arc::new(Mutex::new(Vec::new()));
            let stop = Arc::new(AtomicBool::new(false));
            let (is_node, seen, stopping) = (node.clone(), paths.clone(), stop.clone());
            let thread = std::thread::spawn(move || {
                while !stopping.load(Ordering::SeqCst) {
                    let Ok(Some(request)) = server.recv_timeout(Duration::from_millis(20)) else {
                        continue;
                    };
                    let path = request.url().to_owned();
                    seen.lock().expect("the paths").push(path.clone());
                    let (status, body) = answer(&path, is_node.load(Ordering::SeqCst));
                    let _ = request
                        .respond(tiny_http::Response::from_string(body).with_status_code(status));
                }
            });
            StandIn {
                base: format!("http://127.0.0.1:{port}"),
                node,
                paths,
                stop,
                thread: Some(thread),
            }
        }

        fn paths(&self) -> Vec<String> {
            std::mem::take(&mut *self.paths.lock().expect("the paths"))
        }
    }

    impl Drop for StandIn {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
    }

    fn answer(path: &str, node: bool) -> (u16, String) {
        let shards: Vec<serde_json::Value> = (0..4)
            .map(|s| serde_json::json!({"shard": s, "owner": "a", "epoch": 1}))
            .collect();
        match (path, node) {
            ("/v1/cluster", true) => (
                200,
                serde_json::json!({"node": "a", "shards": shards, "nodes": []}).to_string(),
            ),
            ("/v1/queue", false) => (200, r#"{"running": 9}"#.to_owned()),
            ("/v1/queue", true) => (400, r#"{"detail": "name a shard"}"#.to_owned()),
            ("/v1/schedules", _) => (200, "[]".to_owned()),
            ("/v1/tasks?limit=1000", _) => {
                (200, r#"{"tasks": [], "next_cursor": null}"#.to_owned())
            }
            (path, true) => match path.strip_prefix("/v1/queue?shard=") {
                Some(n) => (200, format!(r#"{{"running": {n}}}"#)),
                None => (404, "{}".to_owned()),
            },
            _ => (404, "{}".to_owned()),
        }
    }

    /// The shard and the queue's running count of one poll, and whether it was a node's.
    fn poll(poller: &mut Poller) -> (u32, u64, bool) {
        match poller.poll() {
            Ok(Update::Polled {
                queue,
                cluster,
                shard,
                ..
            }) => (shard, queue.running, cluster.is_some()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_node_is_asked_for_one_shards_queue_and_a_lone_server_once_for_the_cluster() {
        let api = StandIn::start();
        let endpoint = Endpoint {
            base: api.base.clone(),
            token: None,
        };
        let (updates, _kept) = std::sync::mpsc::channel();
        let mut poller = Poller::new(endpoint.clone(), updates.clone());
        assert_eq!(poll(&mut poller), (0, 0, true));
        assert!(poller.command(Command::Shard(2)));
        assert_eq!(poll(&mut poller), (2, 2, true));
        // A shard past the cluster's last is its last.
        assert!(poller.command(Command::Shard(9)));
        assert_eq!(poll(&mut poller), (3, 3, true));
        assert_eq!(
            api.paths(),
            [
                "/v1/cluster",
                "/v1/queue?shard=0",
                "/v1/schedules",
                "/v1/tasks?limit=1000",
                "/v1/cluster",
                "/v1/queue?shard=2",
                "/v1/schedules",
                "/v1/cluster",
                "/v1/queue?shard=3",
                "/v1/schedules",
            ]
        );
        assert!(poller.node.load(Ordering::SeqCst));

        // A lone server is asked for the cluster once, and its queue without a shard.
        api.node.store(false, Ordering::SeqCst);
        let mut poller = Poller::new(endpoint, updates);
        assert_eq!(poll(&mut poller), (0, 9, false));
        assert_eq!(poll(&mut poller), (0, 9, false));
        assert_eq!(
            api.paths(),
            [
                "/v1/cluster",
                "/v1/queue",
                "/v1/schedules",
                "/v1/tasks?limit=1000",
                "/v1/queue",
                "/v1/schedules",
            ]
        );
        assert!(!poller.node.load(Ordering::SeqCst));
    }
}
