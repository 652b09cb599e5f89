//! `--mcp FILE` of `spool run` and `spool serve`: the MCP servers of the file are
//! started before the runtime, their tools are offered to the built-in agent's model
//! beside the demo's, and each tool's kind (`tool:SERVER__TOOL`) is served by the
//! servers' executor ([`started`]). The servers are stopped when the command's
//! [`Servers`] goes: when it stops, on a signal or an error.

use std::path::Path;

use crate::stored::Failure;

#[cfg(feature = "mcp")]
static STARTED: std::sync::OnceLock<spool_mcp::McpExecutor> = std::sync::OnceLock::new();

/// The MCP servers started by [`start`], if any.
#[cfg(feature = "mcp")]
pub(crate) fn started() -> Option<&'static spool_mcp::McpExecutor> {
    STARTED.get()
}

/// The MCP servers [`start`] started, stopped when this goes: the command holds it
/// until it returns, whether it stopped or failed.
#[derive(Debug)]
#[must_use = "the servers are stopped when this is dropped"]
pub(crate) struct Servers {
    #[cfg(feature = "mcp")]
    started: bool,
}

impl Drop for Servers {
    /// Stops the MCP servers started, and returns once they have ended (a stdio server
    /// with what it started: see `McpExecutor::shutdown`).
    fn drop(&mut self) {
        #[cfg(feature = "mcp")]
        if let Some(mcp) = STARTED.get().filter(|_| self.started) {
            mcp.shutdown();
        }
    }
}

/// Starts the MCP servers of the configuration at `path` (none without one), offers
/// their tools to the agent, and says which on stderr (`command: MCP server NAME: N
/// tools (...)`). They run until the [`Servers`] returned goes.
///
/// # Errors
/// A usage failure for a configuration that cannot be read or is wrong (naming the
/// server and the field); a failure for a server that does not start.
#[cfg(feature = "mcp")]
pub(crate) fn start(path: Option<&Path>, command: &str) -> Result<Servers, Failure> {
    use spool_mcp::{McpConfig, McpExecutor};
    let Some(path) = path else {
        return Ok(Servers { started: false });
    };
    let config = McpConfig::read(path).map_err(|error| Failure::Usage(error.to_string()))?;
    let mcp = McpExecutor::start(&config).map_err(|error| Failure::Failed(error.to_string()))?;
    if let Err(error) = crate::agent::offer_tools(mcp.definitions()) {
        mcp.shutdown();
        return Err(Failure::Failed(error));
    }
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
    STARTED.set(mcp).map_err(|mcp| {
        mcp.shutdown();
        Failure::Failed("the MCP servers were started already".to_owned())
    })?;
    Ok(Servers { started: true })
}

/// Without the `mcp` feature, `--mcp` is refused.
///
/// # Errors
/// A usage failure when `path` is given.
#[cfg(not(feature = "mcp"))]
pub(crate) fn start(path: Option<&Path>, command: &str) -> Result<Servers, Failure> {
    match path {
        None => Ok(Servers {}),
        Some(_) => Err(Failure::Usage(format!(
            "--mcp: this {command} was built without MCP support (the `mcp` feature)"
        ))),
    }
}
