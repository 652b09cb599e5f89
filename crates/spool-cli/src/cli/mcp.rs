//! `--mcp FILE`, which `spool run` and `spool serve` share: MCP servers whose tools the
//! built-in agent offers to its model.

use std::path::PathBuf;

use clap::Args;

/// The MCP servers to start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Args)]
pub(crate) struct McpArgs {
    /// MCP servers whose tools the agent offers: a JSON file
    /// in the `mcpServers` format of MCP clients (a `command`
    /// for a stdio server, a `url` for HTTP; docs/mcp.md)
    #[arg(long = "mcp", value_name = "FILE", verbatim_doc_comment)]
    pub(crate) config: Option<PathBuf>,
}
