//! `spool run --mcp FILE`: the built-in agent calls a real MCP server's tool, over stdio
//! and over streamable HTTP. The server is built with rmcp (spool-mcp's test server:
//! this test binary started again as a stdio server, or a thread of it serving HTTP on
//! 127.0.0.1); a chat-completions server on 127.0.0.1 plays the model, which asks for the
//! tool `calc__add` and then answers with what the tool said. A bad configuration is
//! refused at start with the server and the field named. A stdio server that does not
//! exit when its input ends, and its child, are ended when `spool run` or `spool serve`
//! stops on SIGTERM.
//!
//! The binary has its own `main` (no libtest): run with `SPOOL_MCP_TEST_SERVER=stdio` it
//! is the stdio server, whose standard output must carry nothing but JSON-RPC.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "mcp")]
#[path = "../../spool-mcp/tests/support/server.rs"]
mod server;

use std::process::ExitCode;

#[cfg(not(feature = "mcp"))]
fn main() -> ExitCode {
    println!("\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
    ExitCode::SUCCESS
}

#[cfg(feature = "mcp")]
fn main() -> ExitCode {
    match std::env::var(server::SERVE_VAR).as_deref() {
        Ok("stdio") => {
            server::serve_stdio();
            return ExitCode::SUCCESS;
        }
        Ok(server::STUBBORN) => server::serve_stubborn(),
        Ok(server::LINGER) => server::linger(),
        _ => {}
    }
    let tests: [(&str, fn()); 6] = [
        (
            "the_agent_calls_an_mcp_tool_over_stdio",
            tests::the_agent_calls_an_mcp_tool_over_stdio,
        ),
        (
            "the_agent_calls_an_mcp_tool_over_http",
            tests::the_agent_calls_an_mcp_tool_over_http,
        ),
        (
            "serve_offers_and_calls_the_tools",
            serve::serve_offers_and_calls_the_tools,
        ),
        (
            "a_bad_configuration_is_refused_naming_the_field",
            tests::a_bad_configuration_is_refused_naming_the_field,
        ),
        (
            "run_ends_its_stdio_servers_on_sigterm",
            stop::run_ends_its_stdio_servers_on_sigterm,
        ),
        (
            "serve_ends_its_stdio_servers_on_sigterm",
            stop::serve_ends_its_stdio_servers_on_sigterm,
        ),
    ];
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let (mut passed, mut failed, mut filtered) = (0, 0, 0);
    for (name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            filtered += 1;
            continue;
        }
        match std::panic::catch_unwind(test) {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    let verdict = if failed == 0 { "ok" } else { "FAILED" };
    println!(
        "\ntest result: {verdict}. {passed} passed; {failed} failed; 0 ignored; 0 measured; {filtered} filtered out"
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(feature = "mcp")]
mod tests {
    use std::io::{BufRead, BufReader};
    use std::path::Path;
    use std::process::{Child, Command, Stdio};
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};
    use std::thread;
    use std::time::{Duration, Instant};

    use serde_json::{Value, json};

    use super::server;

    /// How long anything here may take before the test counts it as hung.
    pub(crate) const LIMIT: Duration = Duration::from_secs(30);

    /// The model: asks for `calc__add` with 2 and 3; once the tool has answered, says
    /// what it said.
    fn model(body: &Value) -> Value {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let said = messages
            .iter()
            .find(|m| m["role"] == "tool")
            .and_then(|m| m["content"].as_str());
        let message = match said {
            None => json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "calc__add", "arguments": "{\"a\":2,\"b\":3}"}},
            ]}),
            Some(said) => json!({"role": "assistant", "content": format!("The tool said {said}.")}),
        };
        json!({
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })
    }

    /// Serves chat completions with [`model`] on 127.0.0.1 for the rest of the process;
    /// returns its URL and the bodies it received.
    pub(crate) fn start_model() -> (String, Arc<Mutex<Vec<Value>>>) {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("a port on 127.0.0.1");
        let port = server.server_addr().to_ip().expect("an IP address").port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let bodies = received.clone();
        thread::spawn(move || {
            for mut request in server.incoming_requests() {
                let mut text = String::new();
                let _ = request.as_reader().read_to_string(&mut text);
                let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                let answer = model(&body);
                bodies.lock().expect("not poisoned").push(body);
                let header = tiny_http::Header::from_bytes("Content-Type", "application/json")
                    .expect("a valid header");
                let _ = request.respond(
                    tiny_http::Response::from_string(answer.to_string()).with_header(header),
                );
            }
        });
        (format!("http://127.0.0.1:{port}"), received)
    }

    fn spool(args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_spool"))
            .args(args)
            .output()
            .expect("spool runs")
    }

    fn ok(args: &[&str]) {
        let out = spool(args);
        assert!(
            out.status.success(),
            "spool {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Kills `spool run` when dropped, pass or fail.
    pub(crate) struct Running(pub(crate) Child);

    impl Drop for Running {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Runs the schedule `sum` of a new store once under `spool run --mcp CONFIG`
    /// against the model; returns `spool run`'s stderr up to the run's end, and the
    /// bodies the model received.
    fn run_once(config: &Value, dir: &Path) -> (Vec<String>, Vec<Value>) {
        let (model_url, received) = start_model();
        let store = dir.join("mcp.spool");
        let store = store.to_str().expect("a UTF-8 path");
        let config_path = dir.join("mcp.json");
        std::fs::write(&config_path, config.to_string()).expect("the configuration is written");
        ok(&[
            "schedule",
            "add",
            "sum",
            "--every",
            "1h",
            "--prompt",
            "add 2 and 3",
            "--store",
            store,
        ]);
        ok(&["schedule", "run", "sum", "--store", store]);
        let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
            .args(["run", "--store", store, "--mcp"])
            .arg(&config_path)
            .env("OPENAI_BASE_URL", &model_url)
            .env("OPENAI_MODEL", "test-model")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spool run starts");
        let stderr = child.stderr.take().expect("stderr is piped");
        let running = Running(child);
        let (lines_tx, lines_rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + LIMIT;
        let mut lines = Vec::new();
        while !lines.iter().any(|l: &String| l.contains("sum: run ended")) {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines_rx.recv_timeout(left) {
                Ok(line) => lines.push(line),
                Err(_) => panic!("no end of the run within {LIMIT:?}: {lines:#?}"),
            }
        }
        drop(running);
        let bodies = received.lock().expect("not poisoned").clone();
        (lines, bodies)
    }

    /// What every `spool run` test checks: the tools listed at start, and the run's
    /// answer made from the tool's result; then [`check_bodies`].
    fn check(lines: &[String], bodies: &[Value]) {
        assert!(
            lines.iter().any(|l| l.ends_with(&listed("spool run"))),
            "{lines:#?}"
        );
        let ended = lines
            .iter()
            .find(|l| l.contains("sum: run ended"))
            .expect("the run ended");
        assert!(ended.ends_with(": ok: The tool said 5."), "{ended}");
        check_bodies(bodies);
    }

    /// The line `command` says at start of the test server's tools.
    pub(crate) fn listed(command: &str) -> String {
        format!(
            "{command}: MCP server calc: 5 tools (calc__add, calc__echo, calc__fail, calc__hang, calc__crash)"
        )
    }

    /// What the model received: two turns; the tools offered, the MCP tool with its
    /// schema; the tool's answer in the second turn.
    pub(crate) fn check_bodies(bodies: &[Value]) {
        assert_eq!(bodies.len(), 2, "two turns of the model: {bodies:#?}");
        let offered: Vec<&Value> = bodies[0]["tools"]
            .as_array()
            .expect("tools are offered")
            .iter()
            .map(|tool| &tool["function"]["name"])
            .collect();
        assert_eq!(
            offered,
            [
                "search",
                "read_file",
                "calc",
                "calc__add",
                "calc__echo",
                "calc__fail",
                "calc__hang",
                "calc__crash"
            ]
        );
        assert_eq!(
            bodies[0]["tools"][3],
            json!({"type": "function", "function": {
                "name": "calc__add",
                "description": "Add two integers.",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"],
                },
            }})
        );
        let tool_message = bodies[1]["messages"]
            .as_array()
            .and_then(|messages| messages.iter().find(|m| m["role"] == "tool"))
            .expect("the tool's answer goes back to the model");
        assert_eq!(tool_message["content"], "5");
    }

    /// The lines of the server's log.
    fn log_lines(log: &Path) -> Vec<String> {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    pub(crate) fn the_agent_calls_an_mcp_tool_over_stdio() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = dir.path().join("server.log");
        let exe = std::env::current_exe().expect("the test binary's path");
        let config = json!({"mcpServers": {"calc": {
            "command": exe,
            "env": {server::SERVE_VAR: "stdio", server::LOG_VAR: log},
        }}});
        let (lines, bodies) = run_once(&config, dir.path());
        check(&lines, &bodies);
        let calls: Vec<String> = log_lines(&log)
            .into_iter()
            .filter(|l| l.starts_with("call"))
            .collect();
        assert_eq!(calls, ["call add"]);
    }

    pub(crate) fn the_agent_calls_an_mcp_tool_over_http() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = dir.path().join("server.log");
        let url = server::serve_http(Some(log.clone()));
        let config = json!({"mcpServers": {"calc": {"type": "http", "url": url}}});
        let (lines, bodies) = run_once(&config, dir.path());
        check(&lines, &bodies);
        assert_eq!(log_lines(&log), ["call add"]);
    }

    pub(crate) fn a_bad_configuration_is_refused_naming_the_field() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = dir.path().join("bad.spool");
        let config = dir.path().join("bad.json");
        std::fs::write(
            &config,
            r#"{"mcpServers": {"files": {"command": "mcp-files", "args": [1]}}}"#,
        )
        .expect("the configuration is written");
        let out = Command::new(env!("CARGO_BIN_EXE_spool"))
            .args(["run", "-q", "--store"])
            .arg(&store)
            .arg("--mcp")
            .arg(&config)
            .env_remove("OPENAI_BASE_URL")
            .output()
            .expect("spool runs");
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "spool run: MCP server `files`: `args[0]` must be a string, not a number (1)\n"
        );
    }
}

/// `spool serve --mcp`: the tools are listed at start, and a task submitted over HTTP
/// calls one.
#[cfg(feature = "mcp")]
mod serve {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpStream;
    use std::process::{Command, Stdio};
    use std::thread;
    use std::time::{Duration, Instant};

    use serde_json::{Value, json};

    use super::server;
    use super::tests::{Running, check_bodies, listed, start_model};

    const TOKEN: &str = "s3cret-token-for-the-mcp-test";

    /// One request over a fresh connection: the status and the body.
    fn call(addr: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
        let mut stream = TcpStream::connect(addr).expect("the server takes connections");
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .expect("the request is sent");
        let mut text = String::new();
        stream.read_to_string(&mut text).expect("an answer");
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
        (status, serde_json::from_str(body).unwrap_or(Value::Null))
    }

    pub(crate) fn serve_offers_and_calls_the_tools() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = dir.path().join("server.log");
        let url = server::serve_http(Some(log.clone()));
        let config = dir.path().join("mcp.json");
        std::fs::write(
            &config,
            json!({"mcpServers": {"calc": {"url": url}}}).to_string(),
        )
        .expect("the configuration is written");
        std::fs::write(dir.path().join("token"), TOKEN).expect("the token is written");
        let (model_url, received) = start_model();
        let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
            .args(["serve", "--addr", "127.0.0.1:0", "--store"])
            .arg(dir.path().join("s.spool"))
            .arg("--token-file")
            .arg(dir.path().join("token"))
            .arg("--mcp")
            .arg(&config)
            .env("OPENAI_BASE_URL", &model_url)
            .env("OPENAI_MODEL", "test-model")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spool serve starts");
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr is piped"));
        let _running = Running(child);
        let mut before = Vec::new();
        let addr = loop {
            let mut line = String::new();
            assert!(
                stderr.read_line(&mut line).expect("stderr is read") > 0,
                "spool serve ended early: {before:#?}"
            );
            if let Some(addr) = line.trim().strip_prefix("listening on http://") {
                break addr.to_owned();
            }
            before.push(line.trim_end().to_owned());
        };
        assert!(before.contains(&listed("spool serve")), "{before:#?}");
        let (status, submitted) = call(
            &addr,
            "POST",
            "/v1/tasks",
            r#"{"type": "agent", "input": {"prompt": "add 2 and 3"}}"#,
        );
        assert_eq!(status, 202, "{submitted}");
        let path = format!("/v1/tasks/{}", submitted["id"]);
        let deadline = Instant::now() + super::tests::LIMIT;
        let task = loop {
            let (status, task) = call(&addr, "GET", &path, "");
            if status == 200 && task["state"] == "completed" {
                break task;
            }
            assert!(Instant::now() < deadline, "{status} {task}");
            thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(task["result"]["answer"], "The tool said 5.");
        assert_eq!(
            task["timing"]["waiting_ms"]
                .as_object()
                .map(|w| w.contains_key("tool:calc__add")),
            Some(true),
            "{task}"
        );
        check_bodies(&received.lock().expect("not poisoned"));
        assert_eq!(
            std::fs::read_to_string(&log).unwrap_or_default(),
            "call add\n"
        );
    }
}

/// `spool run --mcp` and `spool serve --mcp` stopped by SIGTERM: a stdio server that
/// goes on after its input ends, and the child it started, are ended before spool exits.
#[cfg(feature = "mcp")]
mod stop {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::sync::mpsc;
    use std::thread;
    use std::time::{Duration, Instant};

    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::Pid;
    use serde_json::json;

    use super::server;
    use super::tests::{LIMIT, Running};

    /// Kills what is left of the server's process group when dropped, pass or fail.
    struct Group(u32);

    impl Drop for Group {
        fn drop(&mut self) {
            if let Ok(pgid) = i32::try_from(self.0) {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            }
        }
    }

    /// Starts `spool ARGS --mcp CONFIG` with the stubborn server, waits for the line
    /// that says it runs (it holds `ready`), sends it SIGTERM, and checks that once it
    /// has exited neither the server nor its child runs.
    fn ends_its_servers(args: &[&str], ready: &str) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = dir.path().join("server.log");
        let exe = std::env::current_exe().expect("the test binary's path");
        let config = dir.path().join("mcp.json");
        let servers = json!({"mcpServers": {"calc": {
            "command": exe,
            "env": {server::SERVE_VAR: server::STUBBORN, server::LOG_VAR: log},
        }}});
        std::fs::write(&config, servers.to_string()).expect("the configuration is written");
        let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
            .args(args)
            .arg("--store")
            .arg(dir.path().join("s.spool"))
            .arg("--mcp")
            .arg(&config)
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spool starts");
        let stderr = child.stderr.take().expect("stderr is piped");
        let spool = Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
        let mut running = Running(child);
        let (lines_tx, lines_rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + LIMIT;
        let mut lines = Vec::new();
        while !lines.iter().any(|l: &String| l.contains(ready)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines_rx.recv_timeout(left) {
                Ok(line) => lines.push(line),
                Err(_) => panic!("no `{ready}` within {LIMIT:?}: {lines:#?}"),
            }
        }
        let noted: Vec<String> = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        // The server notes both before it answers the start that spool waited for.
        let (leader, child) = server::stubborn_pids(&noted).expect("the server's pids");
        let _group = Group(leader);
        assert!(server::runs(leader) && server::runs(child), "{noted:?}");
        kill(spool, Signal::SIGTERM).expect("spool takes the signal");
        let status = loop {
            if let Some(status) = running.0.try_wait().expect("spool is waited for") {
                break status;
            }
            assert!(Instant::now() < deadline, "spool did not stop: {lines:#?}");
            thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "{status:?}: {lines:#?}");
        assert_eq!(
            (server::runs(leader), server::runs(child)),
            (false, false),
            "the server ({leader}) and its child ({child}) outlived spool"
        );
    }

    pub(crate) fn run_ends_its_stdio_servers_on_sigterm() {
        ends_its_servers(&["run"], "Ctrl-C to stop");
    }

    pub(crate) fn serve_ends_its_stdio_servers_on_sigterm() {
        ends_its_servers(&["serve", "--addr", "127.0.0.1:0"], "listening on http://");
    }
}
