//! `spool inspect --addr URL`: the task table of a running server, from its HTTP API:
//! the tasks it lists (`GET /v1/tasks`, every page, by id) and its counters (`GET
//! /v1/queue`), printed as a store's table is.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde::Deserialize;

use super::{Counters, Row, print_rows};
use crate::remote::{AddrError, Client, Endpoint};
use crate::stored::Failure;

/// A task as the list gives it: what the table shows of it.
#[derive(Debug, Deserialize)]
struct TaskBody {
    id: u64,
    #[serde(rename = "type")]
    task_type: String,
    agent: String,
    priority: String,
    state_detail: String,
    age_ms: u64,
}

/// A page of `GET /v1/tasks`.
#[derive(Debug, Deserialize)]
struct TaskPage {
    tasks: Vec<TaskBody>,
    next_cursor: Option<String>,
}

/// What the table needs of `GET /v1/queue`.
#[derive(Debug, Deserialize)]
struct QueueBody {
    stats: Counters,
}

/// The most tasks a page holds (the API's largest page).
const PAGE: usize = 1000;

/// `spool inspect --addr URL`.
pub(super) fn run(addr: &str, token_file: Option<&Path>) -> ExitCode {
    let printed = Endpoint::from_options(addr, token_file)
        .map_err(|error| match error {
            // A URL that is not one is a usage error, as clap's own.
            AddrError::BadAddr(_) => Failure::Usage(error.to_string()),
            AddrError::Token { .. } => Failure::Failed(error.to_string()),
        })
        .and_then(|endpoint| read(&Client::new(endpoint)))
        .and_then(|(base, rows, counters)| {
            let now = jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string();
            let mut out = Vec::new();
            std::io::Write::write_fmt(
                &mut out,
                format_args!("the server at {base}: its tasks as its API lists them:\n"),
            )
            .and_then(|()| print_rows(&mut out, &rows, &counters, &now))
            .map_err(|e| Failure::Failed(e.to_string()))?;
            Ok(String::from_utf8_lossy(&out).into_owned())
        });
    match printed {
        Ok(text) => {
            out!("{text}");
            ExitCode::SUCCESS
        }
        Err(failure) => failure.report("spool inspect"),
    }
}

/// The server's address, its tasks as rows, and its counters.
fn read(client: &Client) -> Result<(String, Vec<Row>, Counters), Failure> {
    let base = client.endpoint.base.clone();
    let get = |path: &str| -> Result<String, Failure> {
        match client.call("GET", path, None) {
            Ok((200, text)) => Ok(text),
            Ok((status, text)) => {
                let detail = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v["detail"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| text.chars().take(200).collect());
                Err(Failure::Failed(format!(
                    "the server at {base} answered {status}: {detail}"
                )))
            }
            Err(error) => Err(Failure::Failed(error.said_of(&base))),
        }
    };
    let parse =
        |path: &str, text: &str| Failure::Failed(format!("{path}: not the API's JSON: {text}"));
    let mut rows = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/tasks?limit={PAGE}&cursor={c}"),
            None => format!("/v1/tasks?limit={PAGE}"),
        };
        let page: TaskPage =
            serde_json::from_str(&get(&path)?).map_err(|e| parse(&path, &e.to_string()))?;
        rows.extend(page.tasks.into_iter().map(|task| Row {
            id: task.id,
            agent: task.agent,
            type_name: task.task_type,
            priority: task.priority,
            age: Duration::from_millis(task.age_ms),
            state: task.state_detail,
        }));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let queue: QueueBody =
        serde_json::from_str(&get("/v1/queue")?).map_err(|e| parse("/v1/queue", &e.to_string()))?;
    Ok((base, rows, queue.stats))
}
