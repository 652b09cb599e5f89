//! The tests' MCP server, built with rmcp's server side: tools `add`, `echo`, `fail`
//! (answers with `isError`), `hang` (answers only when canceled), `crash` (exits in
//! the middle of the call). Over stdio (`serve_stdio`, in a process of its own) or
//! streamable HTTP on 127.0.0.1 (`serve_http`). Each line of its log file (given by
//! `SPOOL_MCP_TEST_LOG`, or to `serve_http`) says what it saw: `start PID`, `call TOOL`,
//! `cancelled REASON`. A stubborn stdio server (`serve_stubborn`) starts a child and
//! does not exit when its input ends.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    ContentBlock, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// The environment variable that makes the test binary serve over stdio instead of
/// running its tests.
pub(crate) const SERVE_VAR: &str = "SPOOL_MCP_TEST_SERVER";
/// The environment variable naming the server's log file.
pub(crate) const LOG_VAR: &str = "SPOOL_MCP_TEST_LOG";

/// The server's tools and its log.
#[derive(Clone, Debug)]
pub(crate) struct TestServer {
    log: Option<PathBuf>,
}

impl TestServer {
    fn note(&self, line: &str) {
        let Some(path) = &self.log else { return };
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(file, "{line}");
        }
    }
}

fn schema(value: Value) -> Arc<serde_json::Map<String, Value>> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(serde_json::Map::new()),
    }
}

/// The tools the server lists, in this order.
pub(crate) fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "add",
            "Add two integers.",
            schema(json!({
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            })),
        ),
        Tool::new(
            "echo",
            "Say the text back.",
            schema(json!({
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            })),
        ),
        Tool::new("fail", "Always fails.", schema(json!({"type": "object"}))),
        Tool::new(
            "hang",
            "Never answers until canceled.",
            schema(json!({"type": "object"})),
        ),
        Tool::new(
            "crash",
            "Exits the server in the middle of the call.",
            schema(json!({"type": "object"})),
        ),
    ]
}

fn text(content: impl Into<String>) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(content.into())]).into()
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.note(&format!("call {}", request.name));
        let args = Value::Object(request.arguments.unwrap_or_default());
        match &*request.name {
            "add" => {
                let (a, b) = (args["a"].as_i64(), args["b"].as_i64());
                match (a, b) {
                    (Some(a), Some(b)) => Ok(text((a + b).to_string())),
                    _ => Ok(CallToolResult::error(vec![ContentBlock::text(
                        "add takes integers a and b",
                    )])
                    .into()),
                }
            }
            "echo" => Ok(text(args["text"].as_str().unwrap_or_default())),
            "fail" => {
                Ok(CallToolResult::error(vec![ContentBlock::text("the disk is on fire")]).into())
            }
            "hang" => {
                context.ct.cancelled().await;
                Ok(text("canceled"))
            }
            "crash" => std::process::exit(3),
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }

    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        self.note(&format!(
            "cancelled {}",
            notification.reason.unwrap_or_default()
        ));
    }
}

/// Serves on the standard input and output until the client goes; the log file is
/// `SPOOL_MCP_TEST_LOG`'s.
pub(crate) fn serve_stdio() {
    let server = TestServer {
        log: std::env::var_os(LOG_VAR).map(PathBuf::from),
    };
    server.note(&format!("start {}", std::process::id()));
    serve_on_stdio(server);
}

/// `SERVE_VAR`'s value for a stdio server that starts a child ([`LINGER`]), and goes on
/// running after its input ends: a server that must be stopped by its group's signals.
pub(crate) const STUBBORN: &str = "stubborn";

/// `SERVE_VAR`'s value for the child of a [`STUBBORN`] server: it only waits.
pub(crate) const LINGER: &str = "linger";

/// The [`STUBBORN`] server: notes `start PID` and `child PID`, serves until its input
/// ends, notes `input ended`, and waits for a signal.
pub(crate) fn serve_stubborn() -> ! {
    let server = TestServer {
        log: std::env::var_os(LOG_VAR).map(PathBuf::from),
    };
    server.note(&format!("start {}", std::process::id()));
    let child = std::env::current_exe().and_then(|exe| {
        std::process::Command::new(exe)
            .env(SERVE_VAR, LINGER)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
    });
    match child {
        Ok(child) => server.note(&format!("child {}", child.id())),
        Err(error) => eprintln!("the test server's child did not start: {error}"),
    }
    serve_on_stdio(server.clone());
    server.note("input ended");
    linger();
}

/// Waits for ever (for a signal).
pub(crate) fn linger() -> ! {
    loop {
        std::thread::park();
    }
}

/// Whether process `pid` is running (a zombie is not), from `/proc`.
pub(crate) fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, fields)| fields.split_whitespace().next())
            .is_some_and(|state| !matches!(state, "Z" | "X" | "x"))
    })
}

/// The numbers after `start ` and `child ` in a [`STUBBORN`] server's log lines.
pub(crate) fn stubborn_pids(lines: &[String]) -> Option<(u32, u32)> {
    let pid = |prefix: &str| {
        lines
            .iter()
            .find_map(|line| line.strip_prefix(prefix)?.parse().ok())
    };
    Some((pid("start ")?, pid("child ")?))
}

/// Serves `server` on the standard input and output until the client goes.
fn serve_on_stdio(server: TestServer) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        match server.serve(rmcp::transport::stdio()).await {
            Ok(running) => {
                let _ = running.waiting().await;
            }
            Err(error) => eprintln!("the test server did not start: {error}"),
        }
    });
}

/// Serves streamable HTTP on 127.0.0.1 from a thread of its own, for the life of the
/// process; returns the endpoint's URL.
pub(crate) fn serve_http(log: Option<PathBuf>) -> String {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let server = TestServer { log };
            let service: StreamableHttpService<TestServer, LocalSessionManager> =
                StreamableHttpService::new(
                    move || Ok(server.clone()),
                    Arc::new(LocalSessionManager::default()),
                    StreamableHttpServerConfig::default(),
                );
            let router = axum::Router::new().nest_service("/mcp", service);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("a port on 127.0.0.1");
            let addr = listener.local_addr().expect("an address");
            let _ = sender.send(format!("http://{addr}/mcp"));
            let _ = axum::serve(listener, router).await;
        });
    });
    receiver.recv().expect("the HTTP server starts")
}
