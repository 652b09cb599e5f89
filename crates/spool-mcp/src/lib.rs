//! Model Context Protocol servers as spool executors, with the official Rust SDK
//! (`rmcp`, client side).
//!
//! [`McpConfig`] reads the `mcpServers` JSON that MCP clients use: a `command` for a
//! stdio server, a `url` for a streamable HTTP one. [`McpExecutor::start`] starts
//! every server, lists its tools ([`McpTool`], offered to the model as
//! `SERVER__TOOL` with the server's JSON schema) and serves each tool's kind
//! (`tool:SERVER__TOOL`): calls are requests like any other — limited, journaled,
//! timed out, canceled (MCP's `notifications/cancelled` reaches the server) — and a
//! server that stops is started again with back-off, its calls in flight failing with
//! a typed [`CallError`]. [`McpExecutor::shutdown`] (or dropping the last clone) stops
//! the servers, a stdio server with its whole process group.
//!
//! ```no_run
//! use spool_core::Executor;
//! use spool_mcp::{McpConfig, McpExecutor};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = McpConfig::parse(r#"{"mcpServers": {
//!     "files": {"command": "mcp-server-files", "args": ["/srv/docs"]},
//!     "search": {"url": "http://127.0.0.1:8000/mcp", "timeout": 20}
//! }}"#)?;
//! let mcp = McpExecutor::start(&config)?;
//! for tool in mcp.tools() {
//!     println!("{} ({})", tool.offered, tool.kind());
//! }
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

mod call;
pub mod config;
pub mod error;
mod executor;
mod group;
mod server;
mod supervisor;

pub use call::CANCELED_REASON;
pub use config::{ConfigError, McpConfig, ServerConfig, Transport};
pub use error::{CallError, StartError};
pub use executor::{McpExecutor, McpTool};

/// The examples of `docs/mcp.md`, compiled with the crate's doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/mcp.md")]
pub struct DocsMcp;
