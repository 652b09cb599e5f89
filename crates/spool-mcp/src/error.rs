//! What can go wrong: starting the servers ([`StartError`]) and one call
//! ([`CallError`]), and how a call's error reaches the task (a [`RequestError`]).

use std::time::Duration;

use spool_core::RequestError;

/// Why the servers could not be started.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The executor's own runtime could not be made.
    #[error("cannot start the MCP client's runtime: {0}")]
    Runtime(String),
    /// A server did not start, or did not list its tools, in time.
    #[error("MCP server `{server}` did not start: {reason}")]
    Server {
        /// The server.
        server: String,
        /// What went wrong the last time it was tried.
        reason: String,
    },
    /// Two tools would be offered under one name.
    #[error("MCP tools `{first}` and `{second}` would both be offered as `{name}`")]
    Clash {
        /// The name both would have.
        name: String,
        /// One tool, as `server/tool`.
        first: String,
        /// The other.
        second: String,
    },
}

/// Why one call of an MCP tool gave no result. The task receives it as a
/// [`RequestError`] (see [`CallError::into_request_error`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The tool ran and answered with `isError: true`: its own error, which an agent
    /// hands back to the model.
    #[error("MCP tool `{tool}` reported an error: {message}")]
    Tool {
        /// The tool, as the model knows it (`server__tool`).
        tool: String,
        /// The text of its answer.
        message: String,
    },
    /// The arguments are not a JSON object (or null), as MCP requires.
    #[error("the arguments of MCP tool `{tool}` must be an object, not {found}")]
    Arguments {
        /// The tool.
        tool: String,
        /// What was given instead.
        found: String,
    },
    /// No answer within the server's timeout; `notifications/cancelled` was sent.
    #[error("MCP tool `{tool}` gave no answer within {after:?}")]
    Timeout {
        /// The tool.
        tool: String,
        /// The server's timeout.
        after: Duration,
    },
    /// The server stopped (exited, or its connection closed) while the call was out.
    /// The call is not sent again: the tool may have done part of its work.
    #[error(
        "MCP server `{server}` stopped during the call of `{tool}`; the call was not sent again"
    )]
    ServerStopped {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
    },
    /// The server was not running for the whole timeout (it is being restarted).
    #[error("MCP server `{server}` is not running (last: {reason}); waited {after:?}")]
    ServerDown {
        /// The server.
        server: String,
        /// Why it stopped, or why it could not be started again.
        reason: String,
        /// How long the call waited for it.
        after: Duration,
    },
    /// The server answered with a JSON-RPC error, or with something that is not a
    /// tool's result.
    #[error("MCP server `{server}` refused the call of `{tool}`: {message}")]
    Protocol {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// The server's error.
        message: String,
    },
    /// The task no longer wants the answer; `notifications/cancelled` was sent.
    #[error("canceled")]
    Canceled,
}

impl CallError {
    /// The error as the task receives it: [`RequestError::Timeout`] for a timeout,
    /// [`RequestError::InvalidArguments`] for arguments that are not an object,
    /// [`RequestError::Canceled`], and [`RequestError::Failed`] with this error's
    /// message for the rest.
    pub fn into_request_error(self) -> RequestError {
        match self {
            CallError::Timeout { after, .. } => RequestError::Timeout { after },
            CallError::Arguments { .. } => RequestError::InvalidArguments {
                message: self.to_string(),
            },
            CallError::Canceled => RequestError::Canceled,
            other => RequestError::failed(other.to_string()),
        }
    }
}

impl From<CallError> for RequestError {
    fn from(error: CallError) -> RequestError {
        error.into_request_error()
    }
}
