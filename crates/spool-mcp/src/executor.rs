//! [`McpExecutor`]: the servers of a configuration, started together, their tools
//! listed once, and every call a request of kind `tool:SERVER__TOOL` served on the
//! executor's own tokio runtime and answered through a `Replier`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Map, Value, json};
use spool_core::{CancelSignal, Executor, Kind, OutboundRequest, Replies, RequestKey, Response};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::call::{Target, call};
use crate::config::McpConfig;
use crate::error::{CallError, StartError};
use crate::server::{ServerLink, first_start, list_tools};
use crate::supervisor::Supervisor;

/// The longest name a model takes for a tool (OpenAI's limit).
const MAX_TOOL_NAME: usize = 64;

/// A tool of an MCP server, as it is offered to the model.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct McpTool {
    /// The server it is on.
    pub server: String,
    /// Its name on that server.
    pub name: String,
    /// The name the model knows it by, and its request kind's (`tool:` and this):
    /// `SERVER__NAME`, with any character of `NAME` other than a letter, a digit, `_` or
    /// `-` written `_`.
    pub offered: String,
    /// What it does, as the server says.
    pub description: Option<String>,
    /// The JSON schema of its arguments.
    pub input_schema: Value,
}

impl McpTool {
    /// The kind of its requests: `tool:SERVER__NAME`.
    pub fn kind(&self) -> Kind {
        Kind::tool(self.offered.clone())
    }

    /// The tool in the OpenAI chat-completions `tools` format:
    /// `{"type": "function", "function": {"name", "description", "parameters"}}`.
    pub fn definition(&self) -> Value {
        let mut function = Map::new();
        function.insert("name".to_owned(), json!(self.offered));
        if let Some(description) = &self.description {
            function.insert("description".to_owned(), json!(description));
        }
        function.insert("parameters".to_owned(), self.input_schema.clone());
        json!({"type": "function", "function": function})
    }
}

/// The executor of MCP tools. Clones share the servers and the calls in flight: give
/// each kind of [`McpExecutor::tools`] a clone.
///
/// Every call is a request like any other: limited, journaled, timed out after its
/// server's `timeout` and canceled with its task; a timeout or a cancel sends MCP's
/// `notifications/cancelled` for the call. A server that stops is started again after
/// a pause (`restart_base`, doubled for each stop in a row, at most `restart_max`); the
/// calls it had in flight fail with [`CallError::ServerStopped`] and are not sent
/// again, and calls made while it is down wait for it, within their timeout.
///
/// The servers run until [`McpExecutor::shutdown`], or until the last clone is dropped:
/// a stdio server is then ended with everything in its process group.
#[derive(Clone)]
pub struct McpExecutor {
    shared: Arc<Shared>,
}

struct Shared {
    /// Runs every server's connection and every call, on threads of its own; dropped
    /// (with the last clone), it stops the servers.
    supervisor: Supervisor,
    servers: BTreeMap<String, Arc<ServerLink>>,
    tools: Vec<McpTool>,
    /// By offered name: the tool's server and its name there.
    targets: BTreeMap<String, (Arc<ServerLink>, Target)>,
    /// The calls in flight, by request: each call's number (so that a call ends only
    /// its own entry) and what cancels it.
    calls: Mutex<HashMap<RequestKey, (u64, oneshot::Sender<()>)>>,
    /// The number of the next call.
    next_call: AtomicU64,
}

impl fmt::Debug for McpExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpExecutor")
            .field("servers", &self.shared.servers.keys().collect::<Vec<_>>())
            .field("tools", &self.shared.targets.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl McpExecutor {
    /// Starts every server of `config` and lists its tools; returns once all are up
    /// and listed. Each server has its `timeout` to start and list its tools.
    ///
    /// # Errors
    /// [`StartError::Server`] naming the first server that did not start (its first
    /// try failed, or it took longer than its timeout) and why; [`StartError::Clash`]
    /// if two tools would be offered under one name.
    pub fn start(config: &McpConfig) -> Result<McpExecutor, StartError> {
        install_crypto();
        // Dropped on an error below, it stops the servers started so far.
        let supervisor = Supervisor::new()?;
        let servers: BTreeMap<String, Arc<ServerLink>> = config
            .servers
            .iter()
            .filter_map(|server| Some((server.name.clone(), supervisor.supervise(server.clone())?)))
            .collect();
        let runtime = supervisor
            .runtime()
            .ok_or_else(|| StartError::Runtime("it is shutting down".to_owned()))?;
        let listed = runtime.block_on(async {
            let mut listed = Vec::new();
            for server in servers.values() {
                let failed = |reason| StartError::Server {
                    server: server.config.name.clone(),
                    reason,
                };
                let deadline = Instant::now() + server.config.timeout;
                let peer = first_start(server, deadline).await.map_err(failed)?;
                let tools = tokio::time::timeout_at(deadline, list_tools(&peer))
                    .await
                    .map_err(|_| failed("it did not list its tools in time".to_owned()))?
                    .map_err(failed)?;
                listed.push((server.clone(), tools));
            }
            Ok(listed)
        });
        let listed = listed?;
        let mut tools = Vec::new();
        let mut targets = BTreeMap::new();
        for (server, listed) in listed {
            for tool in listed {
                let offered = offered_name(&server.config.name, &tool.name);
                if offered.len() > MAX_TOOL_NAME {
                    tracing::warn!(
                        "MCP tool `{}` of server `{}` is left out: `{offered}` is longer than {MAX_TOOL_NAME} characters",
                        tool.name,
                        server.config.name
                    );
                    continue;
                }
                let target = Target {
                    offered: offered.clone(),
                    tool: tool.name.to_string(),
                };
                if let Some((other, clash)) = targets.get(&offered) {
                    let other: &Arc<ServerLink> = other;
                    let clash: &Target = clash;
                    return Err(StartError::Clash {
                        name: offered,
                        first: format!("{}/{}", other.config.name, clash.tool),
                        second: format!("{}/{}", server.config.name, tool.name),
                    });
                }
                tools.push(McpTool {
                    server: server.config.name.clone(),
                    name: tool.name.to_string(),
                    offered: offered.clone(),
                    description: tool.description.as_deref().map(str::to_owned),
                    input_schema: Value::Object((*tool.input_schema).clone()),
                });
                targets.insert(offered, (server.clone(), target));
            }
        }
        Ok(McpExecutor {
            shared: Arc::new(Shared {
                supervisor,
                servers,
                tools,
                targets,
                calls: Mutex::new(HashMap::new()),
                next_call: AtomicU64::new(0),
            }),
        })
    }

    /// The servers' tools, server by server in name order, each server's in the order
    /// it listed them.
    pub fn tools(&self) -> &[McpTool] {
        &self.shared.tools
    }

    /// The tools in the OpenAI chat-completions `tools` format, as
    /// [`McpTool::definition`] gives each.
    pub fn definitions(&self) -> Vec<Value> {
        self.shared.tools.iter().map(McpTool::definition).collect()
    }

    /// How many times the server `name` was started (connected and initialized) so
    /// far: 1 after [`McpExecutor::start`], one more for each restart. `None` for a
    /// server that is not in the configuration.
    pub fn starts(&self, name: &str) -> Option<u64> {
        self.shared
            .servers
            .get(name)
            .map(|server| *server.starts.borrow())
    }

    /// Stops every server, for good, and returns once each has ended: its connection
    /// is closed (a stdio server's standard input with it); a stdio server's process
    /// group (the server and what it started) that still runs 2 s later gets SIGTERM,
    /// and SIGKILL 2 s after that. Calls in flight fail with
    /// [`CallError::ServerStopped`], later ones with [`CallError::ServerDown`]. The
    /// last clone of the executor, dropped, does the same. Calling it again, or on
    /// another clone, returns at once (or waits for the stop under way).
    pub fn shutdown(&self) {
        self.shared.supervisor.stop();
    }

    /// The calls in flight.
    pub fn in_flight(&self) -> usize {
        self.shared
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Executor for McpExecutor {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        let key = request.key;
        let name = request.request.kind.tool_name().unwrap_or_default();
        let Some((server, target)) = self.shared.targets.get(name) else {
            let error = CallError::Protocol {
                server: String::new(),
                tool: name.to_owned(),
                message: "no MCP server offers this tool".to_owned(),
            };
            replies.send(Response::err(key, error.into_request_error()));
            return;
        };
        let (server, target) = (server.clone(), target.clone());
        let (cancel, canceled) = oneshot::channel();
        let number = self.shared.next_call.fetch_add(1, Ordering::Relaxed);
        self.shared
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, (number, cancel));
        let replier = replies.replier();
        let shared = Arc::downgrade(&self.shared);
        let arguments = request.request.payload.value().clone();
        let Some(runtime) = self.shared.supervisor.runtime() else {
            return;
        };
        runtime.spawn(async move {
            let result = call(&server, &target, arguments, canceled).await;
            if let Some(shared) = shared.upgrade() {
                let mut calls = shared.calls.lock().unwrap_or_else(PoisonError::into_inner);
                if calls.get(&key).is_some_and(|(n, _)| *n == number) {
                    calls.remove(&key);
                }
            }
            // A canceled call's answer is not wanted.
            if !matches!(result, Err(CallError::Canceled)) {
                replier.send(Response::new(
                    key,
                    result.map_err(CallError::into_request_error),
                ));
            }
        });
    }

    fn cancel(&mut self, signal: CancelSignal, _replies: &mut Replies<'_>) {
        let cancel = self
            .shared
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&signal.key);
        if let Some((_, cancel)) = cancel {
            let _ = cancel.send(());
        }
    }
}

/// `SERVER__TOOL`, the tool's characters outside `[A-Za-z0-9_-]` written `_`.
fn offered_name(server: &str, tool: &str) -> String {
    let tool: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{server}__{tool}")
}

/// HTTPS servers are reached with rustls, whose crypto is `ring` here; installed once
/// per process (an embedder's own choice, made first, stays).
fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_is_offered_under_its_servers_name() {
        assert_eq!(offered_name("files", "read_file"), "files__read_file");
        assert_eq!(offered_name("gh", "issues.list v2"), "gh__issues_list_v2");
    }
}
