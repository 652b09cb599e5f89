//! `--mcp FILE` of `spool run` and `spool serve`: the MCP servers of the file are
//! started before the runtime, their tools are offered to the built-in agent's model
//! beside the demo's, and each tool's kind (`tool:SERVER__TOOL`) is served by the
//! servers' executor ([`started`]), for the rest of the process.

use std::path::Path;

use crate::stored::Failure;

#[cfg(feature = "mcp")]
static STARTED: std::sync::OnceLock<spool_mcp::McpExecutor> = std::sync::OnceLock::new();

/// The MCP servers started by [`start`], if any.
#[cfg(feature = "mcp")]
pub(crate) fn started() -> Option<&'static spool_mcp::McpExecutor> {
    STARTED.get()
}

/// Starts the MCP servers of the configuration at `path` (none without one), offers
/// their tools to the agent, and says which on stderr (`command: MCP server NAME: N
/// tools (...)`).
///
/// # Errors
/// A usage failure for a configuration that cannot be read or is wrong (naming the
/// server and the field); a failure for a server that does not start.
#[cfg(feature = "mcp")]
pub(crate) fn start(path: Option<&Path>, command: &str) -> Result<(), Failure> {
    use spool_mcp::{McpConfig, McpExecutor};
    let Some(path) = path else {
        return Ok(());
    };
    let config = McpConfig::read(path).map_err(|error| Failure::Usage(error.to_string()))?;
    let mcp = McpExecutor::start(&config).map_err(|error| Failure::Failed(error.to_string()))?;
    crate::agent::offer_tools(mcp.definitions()).map_err(Failure::Failed)?;
    for server in &config.servers {
        let tools: Vec<&str> = mcp
            .tools()
            .iter()
            .filter(|tool| tool.server == server.name)
            .map(|tool| tool.offered.as_str())
            .collect();
        tracing::info!(
            "{command}: MCP server {}: {} ({})",
            server.name,
            crate::output::counted(tools.len(), "tool"),
            tools.join(", ")
        );
    }
    STARTED
        .set(mcp)
        .map_err(|_| Failure::Failed("the MCP servers were started already".to_owned()))
}

/// Without the `mcp` feature, `--mcp` is refused.
///
/// # Errors
/// A usage failure when `path` is given.
#[cfg(not(feature = "mcp"))]
pub(crate) fn start(path: Option<&Path>, command: &str) -> Result<(), Failure> {
    match path {
        None => Ok(()),
        Some(_) => Err(Failure::Usage(format!(
            "--mcp: this {command} was built without MCP support (the `mcp` feature)"
        ))),
    }
}
