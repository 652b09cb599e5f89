//! Load: 10,000 LLM requests from 500 agents (500 tasks, 20 sequential requests each)
//! through the HTTP executor (a pool of 48 workers) against a tiny_http server on
//! 127.0.0.1 that answers at once, under `max_in_flight(Kind::Llm, 32)`: every answer
//! is the right one, and the server — counting the requests it holds (taken and not
//! yet answered) and the connections open to it — never sees more than 32.
//!
//! Answered at once, few requests are ever at the server together, so two shorter
//! runs show the count is real: with each answer held 20 ms the limit is reached
//! exactly (32 at once, never 33), and with no limit the server sees more than 32 (up
//! to the 48 workers).
//!
//! `cargo test --test exec-load -- --nocapture` prints the wall time, the
//! throughput and the most concurrency seen (see docs/performance.md).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use spool_core::{Config, Kind, NewTask, RequestLimits, TaskError, TaskState, async_task};
use spool_exec::{OpenAiConfig, OpenAiExecutor};
use spool_runtime::Runtime;

#[path = "common/warm_up.rs"]
mod warm_up;
use warm_up::grow_connection_threads;

const WORKERS: usize = 48;
const MAX_IN_FLIGHT: u32 = 32;
/// More handler threads than workers, so that the server takes (and counts) every
/// request the executor could send at once.
const HANDLERS: usize = 64;

/// Serializes the runs of the tests in this file.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// What the server counted.
#[derive(Default)]
struct Counters {
    requests: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// The most connections to the server's port established at once, sampled every
    /// millisecond from the kernel's table (`/proc/net/tcp`).
    max_connections: AtomicUsize,
    /// The client ports seen: how many connections were opened in all.
    peers: Mutex<HashSet<u16>>,
    /// Requests whose body was not what a task sends.
    bad: Mutex<Vec<String>>,
}

/// The answer to `{"model": "load-model", "messages": [{"role": "user", "content": C}]}`:
/// "echo: C".
fn answer(body: &str) -> Option<Value> {
    let request: Value = serde_json::from_str(body).ok()?;
    if request["model"] != "load-model" {
        return None;
    }
    let content = request["messages"][0]["content"].as_str()?;
    Some(json!({
        "id": "chatcmpl-load",
        "object": "chat.completion",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": format!("echo: {content}")},
            "finish_reason": "stop",
        }],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }))
}

/// Connections to `port` on this machine that are established, from the kernel's
/// table, less those from the ports in `except`; `None` where there is no such table.
fn established(port: u16, except: &HashSet<u16>) -> Option<usize> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let local = format!(":{port:04X}");
    // The table is read in pages and may list a connection twice if it changes
    // between them: count each connection once.
    let open: HashSet<(&str, &str)> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let local_address = fields.nth(1)?;
            let remote_address = fields.next()?;
            let state = fields.next()?;
            let remote_port = remote_address
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok())?;
            (local_address.ends_with(&local) && state == "01" && !except.contains(&remote_port))
                .then_some((local_address, remote_address))
        })
        .collect();
    Some(open.len())
}

/// A loopback chat-completions server that echoes, holding each answer `hold`.
struct LoadServer {
    port: u16,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl LoadServer {
    fn start(hold: Duration) -> LoadServer {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind 127.0.0.1"));
        let port = server.server_addr().to_ip().expect("an IP address").port();
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads: Vec<JoinHandle<()>> = (0..HANDLERS)
            .map(|_| {
                let (server, counters, stop) = (server.clone(), counters.clone(), stop.clone());
                thread::spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        let Ok(Some(mut request)) = server.recv_timeout(Duration::from_millis(20))
                        else {
                            continue;
                        };
                        if request.url() == "/warm-up" {
                            let _ = request.respond(tiny_http::Response::from_string("ok"));
                            continue;
                        }
                        let now = counters.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        counters.max_in_flight.fetch_max(now, Ordering::SeqCst);
                        counters.requests.fetch_add(1, Ordering::SeqCst);
                        if let Some(peer) = request.remote_addr() {
                            counters.peers.lock().expect("lock").insert(peer.port());
                        }
                        let mut body = String::new();
                        let _ = request.as_reader().read_to_string(&mut body);
                        let response = match answer(&body) {
                            Some(answer) => tiny_http::Response::from_string(answer.to_string()),
                            None => {
                                counters.bad.lock().expect("lock").push(body);
                                tiny_http::Response::from_string("{}").with_status_code(400)
                            }
                        };
                        thread::sleep(hold);
                        // Answered: no longer held, whatever the client does next.
                        counters.in_flight.fetch_sub(1, Ordering::SeqCst);
                        let _ = request.respond(response);
                    }
                })
            })
            .collect();
        let warm_up = grow_connection_threads(port, WORKERS + 8);
        // Let the warm-up connections close before counting connections.
        thread::sleep(Duration::from_millis(100));
        let (sampler_counters, sampler_stop) = (counters.clone(), stop.clone());
        threads.push(thread::spawn(move || {
            while !sampler_stop.load(Ordering::SeqCst) {
                if let Some(open) = established(port, &warm_up) {
                    sampler_counters
                        .max_connections
                        .fetch_max(open, Ordering::SeqCst);
                }
                thread::sleep(Duration::from_millis(1));
            }
        }));
        LoadServer {
            port,
            counters,
            stop,
            threads,
        }
    }
}

impl Drop for LoadServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// What a run measured.
#[derive(Debug)]
struct Run {
    requests: usize,
    wall: Duration,
    max_in_flight: usize,
    max_connections: usize,
    opened: usize,
}

impl Run {
    fn per_second(&self) -> f64 {
        self.requests as f64 / self.wall.as_secs_f64()
    }
}

/// `agents` tasks, each making `per_agent` requests one after another and checking
/// every answer, through a pool of 48 workers; `limit` caps LLM requests in flight.
fn run(agents: usize, per_agent: usize, limit: Option<u32>, hold: Duration) -> Run {
    // One run at a time: the two cores are the measurement's.
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = LoadServer::start(hold);
    let config = OpenAiConfig::new(format!("http://127.0.0.1:{}/v1", server.port), "load-model")
        .timeout(Duration::from_secs(10))
        .max_retries(0)
        .workers(WORKERS);
    let mut limits = RequestLimits::new();
    if let Some(limit) = limit {
        limits = limits.max_in_flight(Kind::Llm, limit);
    }
    let builder = Runtime::builder().config(Config::new().requests(limits));
    let executor = OpenAiExecutor::new(config);
    let mut runtime = builder
        .pool(Kind::Llm, WORKERS, move || executor.clone())
        .build();
    let ids: Vec<_> = (0..agents)
        .map(|agent| {
            let task = async_task("agent", move |cx| async move {
                for n in 0..per_agent {
                    let content = format!("agent {agent} request {n}");
                    let answer = cx
                        .llm(json!({"messages": [{"role": "user", "content": content}]}))
                        .await?;
                    if answer["content"] != json!(format!("echo: {content}")) {
                        return Err(TaskError::Failed {
                            message: format!("`{content}` was answered {answer}"),
                        });
                    }
                }
                Ok(json!(per_agent))
            });
            let task = NewTask::new(task).agent(format!("agent-{agent}"));
            runtime.submit(task).expect("submitted").id
        })
        .collect();

    let started = Instant::now();
    let report = runtime.run_until_idle();
    let wall = started.elapsed();

    for id in &ids {
        assert_eq!(
            runtime.task_state(*id),
            Some(TaskState::Completed(Ok(json!(per_agent)))),
            "task {id}"
        );
    }
    let total = agents * per_agent;
    let counters = &server.counters;
    let bad = counters.bad.lock().expect("lock");
    assert!(
        bad.is_empty(),
        "bad requests: {:?}",
        &bad[..bad.len().min(3)]
    );
    assert_eq!(counters.requests.load(Ordering::SeqCst), total);
    assert_eq!(report.stats.requests, total as u64);
    assert_eq!(report.stats.answers, total as u64);
    let run = Run {
        requests: total,
        wall,
        max_in_flight: counters.max_in_flight.load(Ordering::SeqCst),
        max_connections: counters.max_connections.load(Ordering::SeqCst),
        opened: counters.peers.lock().expect("lock").len(),
    };
    println!(
        "{} requests from {agents} agents, {WORKERS} workers, max_in_flight {limit:?}, answers \
         held {hold:?}: {:.2?} wall, {:.0} requests/s; the server saw at most {} requests at \
         once and {} connections open ({} opened in all)",
        run.requests,
        run.wall,
        run.per_second(),
        run.max_in_flight,
        run.max_connections,
        run.opened
    );
    run
}

#[test]
fn ten_thousand_requests_from_500_agents_never_exceed_32_at_the_server() {
    let run = run(500, 20, Some(MAX_IN_FLIGHT), Duration::ZERO);
    let limit = MAX_IN_FLIGHT as usize;
    assert!(run.max_in_flight <= limit, "{run:?}");
    assert!(run.max_connections <= limit, "{run:?}");
    assert!(run.wall < Duration::from_secs(60), "{run:?}");
}

#[test]
fn held_answers_fill_exactly_the_limit_and_without_it_the_server_sees_more() {
    let held = Duration::from_millis(20);
    let limited = run(100, 10, Some(MAX_IN_FLIGHT), held);
    assert_eq!(limited.max_in_flight, MAX_IN_FLIGHT as usize, "{limited:?}");
    assert!(
        limited.max_connections <= MAX_IN_FLIGHT as usize,
        "{limited:?}"
    );
    // 1,000 requests, 32 at a time, 20 ms each: at least 625 ms.
    assert!(limited.wall >= Duration::from_millis(625), "{limited:?}");

    // Without the limit the server sees more than 32 at once (48 when the two cores
    // keep up), so the count above would have caught a 33rd.
    let unlimited = run(100, 10, None, held);
    assert!(
        unlimited.max_in_flight > MAX_IN_FLIGHT as usize && unlimited.max_in_flight <= WORKERS,
        "{unlimited:?}"
    );
    assert!(unlimited.max_connections <= WORKERS, "{unlimited:?}");
}
