//! One call of a tool: wait for its server, send `tools/call`, and end with the
//! result, the server's stop, the timeout or spool's cancel — the last two sending
//! MCP's `notifications/cancelled` for the request.

use std::borrow::Cow;
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::CallError;
use crate::server::{ServerLink, wait_up};

/// The reason sent with MCP's `notifications/cancelled` when spool cancels a call.
pub const CANCELED_REASON: &str = "canceled by spool: the task no longer wants the answer";

/// A tool of a server, and the name the model knows it by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// `server__tool`.
    pub(crate) offered: String,
    /// The tool's name on its server.
    pub(crate) tool: String,
}

/// How a call ended early, before its answer.
enum Ended {
    Answer(Result<Box<ServerResult>, String>),
    Stopped,
    TimedOut,
    Canceled,
}

/// Calls `target` on `server` with `arguments`, within the server's timeout, unless
/// `cancel` fires first.
pub(crate) async fn call(
    server: &ServerLink,
    target: &Target,
    arguments: Value,
    cancel: oneshot::Receiver<()>,
) -> Result<Value, CallError> {
    let timeout = server.config.timeout;
    let deadline = Instant::now() + timeout;
    let arguments = match arguments {
        Value::Object(map) => Some(map),
        Value::Null => None,
        other => {
            return Err(CallError::Arguments {
                tool: target.offered.clone(),
                found: kind_of(&other).to_owned(),
            });
        }
    };
    // Only a sent cancel cancels: a sender dropped unsent (its entry replaced by a
    // request sent again with the same key) leaves the call to go on.
    let cancel = async move {
        if cancel.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::pin!(cancel);
    let mut params = CallToolRequestParams::new(Cow::Owned(target.tool.clone()));
    params.arguments = arguments;
    let stopped = || CallError::ServerStopped {
        server: server.config.name.clone(),
        tool: target.offered.clone(),
    };
    // A request that could not be handed to the connection (it closed in between) never
    // reached the server: it waits for the next connection, within the deadline.
    let (peer, mut handle) = loop {
        let peer = tokio::select! {
            up = wait_up(server, deadline) => up.map_err(|reason| CallError::ServerDown {
                server: server.config.name.clone(),
                reason,
                after: timeout,
            })?,
            () = &mut cancel => return Err(CallError::Canceled),
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params.clone()));
        match peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
        {
            Ok(handle) => break (peer, handle),
            Err(_) if peer.is_transport_closed() => continue,
            Err(_) => return Err(stopped()),
        }
    };
    let ended = tokio::select! {
        answer = &mut handle.rx => match answer {
            Ok(answer) => Ended::Answer(answer.map(Box::new).map_err(|error| error.to_string())),
            // The connection's task dropped the request: the server stopped.
            Err(_) => Ended::Stopped,
        },
        () = tokio::time::sleep_until(deadline) => Ended::TimedOut,
        () = &mut cancel => Ended::Canceled,
    };
    match ended {
        Ended::Answer(Ok(result)) => match *result {
            ServerResult::CallToolResult(result) => answer(target, result),
            ServerResult::EmptyResult(_) => Ok(Value::String(String::new())),
            other => Err(CallError::Protocol {
                server: server.config.name.clone(),
                tool: target.offered.clone(),
                message: format!("the answer is not a tool's result: {other:?}"),
            }),
        },
        Ended::Answer(Err(message)) if peer.is_transport_closed() => {
            tracing::debug!(
                "call of `{}` ended with the connection: {message}",
                target.offered
            );
            Err(stopped())
        }
        Ended::Answer(Err(message)) => Err(CallError::Protocol {
            server: server.config.name.clone(),
            tool: target.offered.clone(),
            message,
        }),
        Ended::Stopped => Err(stopped()),
        Ended::TimedOut => {
            let reason = format!("timed out after {}", seconds(timeout));
            let _ = handle.cancel(Some(reason)).await;
            Err(CallError::Timeout {
                tool: target.offered.clone(),
                after: timeout,
            })
        }
        Ended::Canceled => {
            let _ = handle.cancel(Some(CANCELED_REASON.to_owned())).await;
            Err(CallError::Canceled)
        }
    }
}

/// The task's answer from a tool's result: its `structuredContent` when it has one,
/// else its text (the text blocks joined by newlines) when every block is text, else
/// the content blocks as MCP gives them. A result with `isError` is
/// [`CallError::Tool`], with its text.
fn answer(target: &Target, result: CallToolResult) -> Result<Value, CallError> {
    let texts: Option<Vec<&str>> = result
        .content
        .iter()
        .map(|block| block.as_text().map(|text| text.text.as_str()))
        .collect();
    let text = texts.map(|texts| texts.join("\n"));
    if result.is_error == Some(true) {
        let message = match text {
            Some(text) => text,
            None => serde_json::to_string(&result.content).unwrap_or_default(),
        };
        return Err(CallError::Tool {
            tool: target.offered.clone(),
            message,
        });
    }
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    match text {
        Some(text) => Ok(Value::String(text)),
        None => serde_json::to_value(&result.content).map_err(|error| CallError::Tool {
            tool: target.offered.clone(),
            message: format!("its content cannot be written as JSON: {error}"),
        }),
    }
}

/// `1.5 s`, for the reason of a timeout's cancel.
fn seconds(duration: Duration) -> String {
    format!("{} s", duration.as_secs_f64())
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
