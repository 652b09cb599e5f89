//! The dashboard's side of the HTTP API, on threads of its own: one polls the JSON
//! endpoints about every 500 ms (and the watched task), backing off while the server
//! is gone; another follows the watched task's event stream. They report
//! [`Update`]s over a channel and take [`Command`]s over another; they end when the
//! dashboard drops its ends.

use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use serde::Deserialize;

use super::app::Command;
use super::model::{Queue, Schedule, Task, TraceLine, Update};
use crate::remote::{Endpoint, ReadError};

/// How often the JSON endpoints are read.
const POLL_EVERY: Duration = Duration::from_millis(500);
/// The task list (for the wait percentiles) is read every this many polls.
const TASKS_EVERY: u64 = 4;
/// The most tasks read for the percentiles (pages of 1000).
const TASKS_READ: usize = 5000;
/// The longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

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
                    wait = MAX_BACKOFF;
                    Update::Unauthorized(format!("the server answered {status}"))
                }
                Err(error) => {
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
                        task,
                        Arc::clone(&self.stream),
                        generation,
                        self.updates.clone(),
                    );
                }
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
        let queue: Queue = self.endpoint.get(&self.agent, "/v1/queue")?;
        let schedules: Vec<Schedule> = self.endpoint.get(&self.agent, "/v1/schedules")?;
        let tasks = if self.polls % TASKS_EVERY == 0 {
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
        })
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
/// `generation`, reconnecting from the last event seen.
fn follow(
    endpoint: Endpoint,
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
                let _ = read_events(&endpoint, &agent, task, &mut last, &current, &updates);
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
    task: u64,
    last: &mut u64,
    current: &dyn Fn() -> bool,
    updates: &Sender<Update>,
) -> Result<(), ReadError> {
    let request = endpoint
        .request("GET", &format!("/v1/events?task={task}"))
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
            }
        } else if line.is_empty() {
            event.clear();
        }
    }
    Ok(())
}
