//! `spool serve` with `OTEL_EXPORTER_OTLP_ENDPOINT` exports the built-in agent's spans to
//! the collector it names — here a receiver on loopback taking `http/json` — and posts
//! the last ones when it stops: the task's span at the root, its LLM requests and tool
//! call under it.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;

use support::{Server, client, get_ok};

/// A receiver of OTLP/HTTP JSON posts on loopback: it keeps each body.
struct Receiver {
    addr: String,
    bodies: Arc<Mutex<Vec<(String, Value)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Receiver {
    fn start() -> Receiver {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let addr = format!("http://{}", server.server_addr());
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (kept, stopped) = (bodies.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                let Ok(Some(mut request)) = server.recv_timeout(Duration::from_millis(50)) else {
                    continue;
                };
                let mut body = String::new();
                let _ = std::io::Read::read_to_string(request.as_reader(), &mut body);
                let status = match serde_json::from_str::<Value>(&body) {
                    Ok(value) => {
                        kept.lock().unwrap().push((request.url().to_owned(), value));
                        200
                    }
                    Err(_) => 400,
                };
                let _ = request
                    .respond(tiny_http::Response::from_string("{}").with_status_code(status));
            }
        });
        Receiver {
            addr,
            bodies,
            stop,
            thread: Some(thread),
        }
    }

    /// Every span received, with the service name of its resource.
    fn spans(&self) -> Vec<(String, Value)> {
        let mut spans = Vec::new();
        for (_, body) in self.bodies.lock().unwrap().iter() {
            for resource in body["resourceSpans"].as_array().into_iter().flatten() {
                let service = resource["resource"]["attributes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|kv| kv["key"] == "service.name")
                    .and_then(|kv| kv["value"]["stringValue"].as_str())
                    .unwrap_or_default()
                    .to_owned();
                for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                    for span in scope["spans"].as_array().into_iter().flatten() {
                        spans.push((service.clone(), span.clone()));
                    }
                }
            }
        }
        spans
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A span's attributes, by key, as text.
fn attributes(span: &Value) -> BTreeMap<String, String> {
    span["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|kv| {
            let value = &kv["value"];
            let text = match (
                value.get("stringValue"),
                value.get("intValue"),
                value.get("arrayValue"),
            ) {
                (Some(s), _, _) => s.as_str().unwrap_or_default().to_owned(),
                (_, Some(n), _) => n.as_str().map_or_else(|| n.to_string(), str::to_owned),
                (_, _, Some(array)) => array["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v["stringValue"].as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                _ => value.to_string(),
            };
            (kv["key"].as_str().unwrap_or_default().to_owned(), text)
        })
        .collect()
}

#[test]
fn spool_serve_exports_the_agents_spans_to_the_collector_it_names() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.spool");
    let token_file = dir.path().join("token");
    let token = "a-token-for-the-otel-test-0123456789";
    std::fs::write(&token_file, token).unwrap();
    let server = Server::start_with(
        [
            "serve".as_ref(),
            "--addr".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--store".as_ref(),
            store.as_os_str(),
            "--token-file".as_ref(),
            token_file.as_os_str(),
        ],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.addr.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_SERVICE_NAME", "spool-cli-test"),
        ],
    );
    assert!(
        server.log().contains(&format!(
            "spool serve: exporting traces to {}/v1/traces\n",
            receiver.addr
        )),
        "{}",
        server.log()
    );
    let agent = client(Duration::from_secs(20));
    let answer: Value = agent
        .post(format!("http://{}/v1/tasks", server.addr))
        .header("Authorization", format!("Bearer {token}"))
        .send_json(json!({"type": "agent", "input": {"prompt": "Q3 revenue"}}))
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap();
    let id = answer["id"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let task = get_ok(&agent, &server.addr, token, &format!("/v1/tasks/{id}"));
        if task["state"] == "completed" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the task did not complete: {task}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The spans are posted by the time it has stopped.
    server.stop();

    let spans = receiver.spans();
    let mut names: Vec<&str> = spans
        .iter()
        .map(|(_, s)| s["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "chat scripted",
            "chat scripted",
            "execute_tool search",
            "invoke_agent default"
        ]
    );
    assert!(spans.iter().all(|(service, _)| service == "spool-cli-test"));
    let root = &spans
        .iter()
        .find(|(_, s)| s["name"] == "invoke_agent default")
        .unwrap()
        .1;
    assert_eq!(root["parentSpanId"], "");
    for (_, span) in &spans {
        assert_eq!(span["traceId"], root["traceId"]);
        if span["name"] != "invoke_agent default" {
            assert_eq!(span["parentSpanId"], root["spanId"], "{span}");
        }
    }
    let task = id.to_string();
    assert_eq!(
        attributes(root),
        BTreeMap::from(
            [
                ("gen_ai.operation.name", "invoke_agent"),
                ("gen_ai.agent.name", "default"),
                ("spool.agent", "default"),
                ("spool.task.id", task.as_str()),
                ("spool.task.type", "agent"),
                ("spool.task.outcome", "ok"),
                ("spool.task.cause", "returned"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        )
    );
    let search = &spans
        .iter()
        .find(|(_, s)| s["name"] == "execute_tool search")
        .unwrap()
        .1;
    assert_eq!(
        attributes(search),
        BTreeMap::from(
            [
                ("gen_ai.operation.name", "execute_tool"),
                ("gen_ai.tool.name", "search"),
                ("gen_ai.tool.type", "function"),
                ("gen_ai.tool.call.id", "call_1"),
                ("spool.task.id", task.as_str()),
                ("spool.request.kind", "tool:search"),
                ("spool.request.number", "2"),
                ("spool.request.outcome", "ok"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        )
    );
    let mut chats: Vec<BTreeMap<String, String>> = spans
        .iter()
        .filter(|(_, s)| s["name"] == "chat scripted")
        .map(|(_, s)| attributes(s))
        .collect();
    chats.sort_by_key(|a| a["spool.request.number"].clone());
    let chat = |number: &str, finish: &str| {
        BTreeMap::from(
            [
                ("gen_ai.operation.name", "chat"),
                ("gen_ai.provider.name", "spool-scripted"),
                ("gen_ai.request.model", "scripted"),
                ("gen_ai.response.finish_reasons", finish),
                ("spool.task.id", task.as_str()),
                ("spool.request.kind", "llm"),
                ("spool.request.number", number),
                ("spool.request.outcome", "ok"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
        )
    };
    assert_eq!(chats, [chat("1", "tool_calls"), chat("3", "stop")]);
}

#[test]
fn a_cluster_node_exports_the_spans_of_its_shards_and_posts_the_last_when_it_stops() {
    use support::cluster::{self, Node, TestCluster, holders};
    const TOKEN: &str = "otel-cluster-test-token-0123456789";
    let receiver = Receiver::start();
    let TestCluster {
        url,
        dir: _dir,
        token_file,
    } = TestCluster::init("otel_cluster_node", 2, TOKEN);
    let server = Node::new(&url, &token_file, "node-a")
        .llm_latency_ms("5")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.addr)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .start();
    assert!(
        server.log().contains(&format!(
            "spool serve: exporting traces to {}/v1/traces\n",
            receiver.addr
        )),
        "{}",
        server.log()
    );
    let agent = client(Duration::from_secs(30));
    cluster::wait_cluster(
        &agent,
        &server.addr,
        TOKEN,
        Duration::from_secs(30),
        "the node holds both shards",
        |c| holders(c).get("node-a").map(Vec::len) == Some(2),
    );
    let (status, answer) = cluster::submit(
        &agent,
        &server.addr,
        TOKEN,
        "otel-run-1",
        &json!({"type": "agent", "input": {"prompt": "Q3 revenue"}}),
    );
    assert!((200..300).contains(&status), "{status} {answer}");
    let id = answer["id"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let task = get_ok(&agent, &server.addr, TOKEN, &format!("/v1/tasks/{id}"));
        if task["state"] == "completed" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the task did not complete: {task}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.stop();

    let spans = receiver.spans();
    let mut names: Vec<&str> = spans
        .iter()
        .map(|(_, s)| s["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "chat scripted",
            "chat scripted",
            "execute_tool search",
            "invoke_agent default"
        ]
    );
    let root = &spans
        .iter()
        .find(|(_, s)| s["name"] == "invoke_agent default")
        .unwrap()
        .1;
    assert_eq!(attributes(root)["spool.task.id"], id.to_string());
    for (_, span) in &spans {
        assert_eq!(span["traceId"], root["traceId"]);
    }
}
