//! `spool history TASK`: a task's steps as a store keeps them (`--store PATH`,
//! `--postgres URL`) or as a running server gives them (`--addr URL`), a table or
//! JSON; and `spool fork TASK --at N`: a fork of it made by a running server.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::{Value, json};
use spool_core::{HistoryEnd, StepEnd, TaskHistory, TaskId};
use spool_durable::DurableStore;
use spool_runtime::StoreHistory;

use crate::cli::history::{ForkArgs, HistoryArgs};
use crate::cli::location::Location;
use crate::remote::{AddrError, Client, Endpoint};
use crate::stored::{Failure, failed, open_task_postgres};
use crate::terminal::safe;

/// The longest payload or answer a table cell shows, in characters: longer ones are
/// cut, with `…`.
const SHORT: usize = 48;

/// `spool history`.
pub(crate) fn run(args: &HistoryArgs) -> ExitCode {
    match read(args) {
        Ok(history) => {
            if args.json {
                match serde_json::to_string_pretty(&history) {
                    Ok(text) => outln!("{text}"),
                    Err(e) => return failed("cannot write the history", e).report("spool history"),
                }
            } else {
                out!("{}", table(&history));
            }
            ExitCode::SUCCESS
        }
        Err(failure) => failure.report("spool history"),
    }
}

/// The history `args` name, from the store or the server they give.
fn read(args: &HistoryArgs) -> Result<TaskHistory, Failure> {
    let task = TaskId::from_raw(args.task);
    if let Some(addr) = &args.addr {
        return from_server(&client(addr, args.token_file.as_deref())?, task);
    }
    let location = args.location.location().ok_or_else(|| {
        Failure::Usage(
            "no history to read: name a store with --store PATH or --postgres URL (or \
             SPOOL_DATABASE_URL), or a running server with --addr URL"
                .to_owned(),
        )
    })?;
    from_store(&location, task)
}

/// The history of `task` in the store at `location` (on a cluster's database, the
/// store of the task's shard), read without writing to it nor taking its lock (a
/// running `spool serve` or `spool run` may be writing it); its
/// tasks are rebuilt with the built-in task types (those of `spool run` and `spool
/// serve`).
fn from_store(location: &Location, task: TaskId) -> Result<TaskHistory, Failure> {
    let store: Arc<dyn DurableStore> = match location {
        Location::Sqlite(path) => {
            if !path.exists() {
                return Err(Failure::Failed(format!(
                    "there is no store at {}",
                    path.display()
                )));
            }
            Arc::new(
                spool_store::Store::open_read_only(path)
                    .map_err(|e| failed("cannot open the store", e))?,
            )
        }
        Location::Postgres(url) => Arc::from(open_task_postgres(url, task.get())?),
    };
    StoreHistory::new(store, crate::agent::registry())
        .history(task)
        .map_err(|e| Failure::Failed(e.to_string()))
}

/// A client of the server at `addr`: a URL that is not one is a usage error.
fn client(addr: &str, token_file: Option<&Path>) -> Result<Client, Failure> {
    let endpoint = Endpoint::from_options(addr, token_file).map_err(|error| match error {
        AddrError::BadAddr(_) => Failure::Usage(error.to_string()),
        AddrError::Token { .. } => Failure::Failed(error.to_string()),
    })?;
    Ok(Client::new(endpoint))
}

/// `GET /v1/tasks/{task}/history`.
fn from_server(client: &Client, task: TaskId) -> Result<TaskHistory, Failure> {
    let base = &client.endpoint.base;
    let path = format!("/v1/tasks/{task}/history");
    let (status, text) = client
        .call("GET", &path, None)
        .map_err(|e| Failure::Failed(e.said_of(base)))?;
    if status != 200 {
        return Err(Failure::Failed(refused(base, status, &text)));
    }
    serde_json::from_str(&text)
        .map_err(|e| Failure::Failed(format!("GET {path}: not the API's history: {e}")))
}

/// What a server's error answer says: its problem's detail, with the status.
fn refused(base: &str, status: u16, text: &str) -> String {
    let detail = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v["detail"].as_str().map(str::to_owned))
        .unwrap_or_else(|| text.chars().take(200).collect());
    format!("the server at {base} answered {status}: {}", safe(&detail))
}

/// `spool fork`.
pub(crate) fn fork(args: &ForkArgs) -> ExitCode {
    match make_fork(args) {
        Ok(line) => {
            outln!("{line}");
            ExitCode::SUCCESS
        }
        Err(failure) => failure.report("spool fork"),
    }
}

/// Asks the server to fork; the line to print.
fn make_fork(args: &ForkArgs) -> Result<String, Failure> {
    let edit = edit_of(args)?;
    let Some(addr) = &args.addr else {
        return Err(Failure::Usage(
            "a fork is made only through a running server (its runtime runs the fork): \
             give --addr http://HOST:PORT and --token-file FILE"
                .to_owned(),
        ));
    };
    let client = client(addr, args.token_file.as_deref())?;
    let base = &client.endpoint.base;
    let body = json!({"at": args.at, "edit": edit});
    let (status, text) = client
        .call(
            "POST",
            &format!("/v1/tasks/{}/fork", args.task),
            Some(&body),
        )
        .map_err(|e| Failure::Failed(e.said_of(base)))?;
    if status != 201 {
        return Err(Failure::Failed(refused(base, status, &text)));
    }
    let id = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["id"].as_u64())
        .ok_or_else(|| Failure::Failed(format!("the server at {base} answered no fork id")))?;
    Ok(format!(
        "task {id}: forked from task {} at step {}",
        args.task, args.at
    ))
}

/// The body's `edit`: `--answer REQ=JSON`, `--input JSON`, or `null`.
fn edit_of(args: &ForkArgs) -> Result<Value, Failure> {
    let parse = |what: &str, text: &str| {
        serde_json::from_str::<Value>(text)
            .map_err(|e| Failure::Usage(format!("{what} is not JSON: {e}")))
    };
    if let Some(answer) = &args.answer {
        let bad = || {
            Failure::Usage(format!(
                "--answer {answer:?}: expected REQ=JSON, a request number and its answer as \
                 JSON (--answer 3='\"yes\"')"
            ))
        };
        let (request, value) = answer.split_once('=').ok_or_else(bad)?;
        let request: u32 = request.trim().parse().map_err(|_| bad())?;
        let result = parse(&format!("--answer {request}="), value)?;
        return Ok(json!({"answer": {"request": request, "result": result}}));
    }
    if let Some(input) = &args.input {
        return Ok(json!({"input": parse("--input", input)?}));
    }
    Ok(Value::Null)
}

/// The history as a table: a line on the task, then one row per step — its number,
/// its time since the submission, what it received, what it asked for, how it ended.
pub(crate) fn table(history: &TaskHistory) -> String {
    let mut out = format!(
        "task {}: {}, agent {}; {}\n",
        history.task,
        safe(&history.type_name),
        safe(&history.agent),
        ended(&history.end)
    );
    if let Some(origin) = &history.origin {
        out.push_str(&format!(
            "forked from task {} at step {}\n",
            origin.task, origin.step
        ));
    }
    if let Some(input) = &history.input {
        out.push_str(&format!("input: {}\n", short(input)));
    }
    let mut rows = vec![[
        "STEP".to_owned(),
        "TIME".to_owned(),
        "RECEIVED".to_owned(),
        "ASKED".to_owned(),
        "END".to_owned(),
    ]];
    for step in &history.steps {
        let since = step.at.saturating_since(history.submitted_at);
        let mut received: Vec<String> = step
            .answers
            .iter()
            .map(|a| match &a.result {
                Ok(value) => format!("#{} {}", a.request, short(value)),
                Err(error) => format!("#{} error: {}", a.request, safe(&error.to_string())),
            })
            .collect();
        received.extend(
            step.children_ended
                .iter()
                .map(|c| format!("task {c} ended")),
        );
        let mut asked: Vec<String> = step
            .requests
            .iter()
            .map(|r| format!("#{} {} {}", r.number, r.kind, short(&r.payload)))
            .collect();
        asked.extend(step.spawned.iter().map(|c| format!("spawned task {c}")));
        rows.push([
            step.step.to_string(),
            format!("+{:.3}s", since.as_secs_f64()),
            cell(&received),
            cell(&asked),
            step_end(&step.end),
        ]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let mut line = String::new();
        for (i, text) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(text);
            } else {
                line.push_str(&format!("{text:<width$}  ", width = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A table cell of several items: `-` for none.
fn cell(items: &[String]) -> String {
    if items.is_empty() {
        "-".to_owned()
    } else {
        items.join("; ")
    }
}

/// `value` as compact JSON, cut to [`SHORT`] characters, safe for a terminal.
fn short(value: &Value) -> String {
    let text = value.to_string();
    let cut: String = if text.chars().count() > SHORT {
        let mut cut: String = text.chars().take(SHORT - 1).collect();
        cut.push('…');
        cut
    } else {
        text
    };
    safe(&cut).into_owned()
}

/// How a step ended, in a word or two.
fn step_end(end: &StepEnd) -> String {
    match end {
        StepEnd::Yielded => "yielded".to_owned(),
        StepEnd::Waiting => "waits".to_owned(),
        StepEnd::Returned(value) => format!("returned {}", short(value)),
        StepEnd::Failed(error) => format!("failed: {}", safe(&error.to_string())),
        other => format!("{other:?}"),
    }
}

/// How the task ended, or that it is live.
fn ended(end: &HistoryEnd) -> String {
    match end {
        HistoryEnd::Live => "live".to_owned(),
        HistoryEnd::Completed(value) => format!("completed: {}", short(value)),
        HistoryEnd::Failed(error) => format!("failed: {}", safe(&error.to_string())),
        HistoryEnd::Canceled(reason) => format!("canceled: {}", safe(reason)),
        other => format!("{other:?}"),
    }
}
