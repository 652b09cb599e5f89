//! A process killed with SIGKILL at an arbitrary moment loses nothing it acknowledged:
//! every submission that returned, and every result it saw, is in what the store
//! recovers, and the recovered run finishes every task with its one right result.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use spool_core::{NewTask, TaskState};
use spool_runtime::Runtime;
use spool_store::Store;

use crate::tasks::{Stopper, Worker, builder, llm_answer, registry, tool_answer};

/// Set to the store's path in the child process's environment.
const CHILD_STORE: &str = "SPOOL_STORE_CRASH_CHILD_STORE";
/// Set to the child's life number, to name its tasks.
const CHILD_LIFE: &str = "SPOOL_STORE_CRASH_CHILD_LIFE";

/// Steps of every worker the child submits.
const STEPS: u32 = 4;

/// A runtime on the store at `path`, recovered from it if it holds a journal.
fn open_runtime(path: &str) -> Runtime {
    let store = Store::open(path).unwrap();
    let builder = builder(&Stopper::default(), 200, false).checkpoint_every(7);
    match store.recover().unwrap() {
        Some(journal) => builder
            .recover(&journal, &registry())
            .unwrap()
            .journal(store)
            .build(),
        None => builder.journal(store).build(),
    }
}

/// The child's side of `a_killed_process_loses_nothing_it_acknowledged`: recovers the
/// store its parent names, then submits workers one by one, printing each submission
/// once it is acknowledged and each result once seen, until killed (or, if its
/// parent is gone, for at most 20 seconds).
#[test]
#[ignore = "the child process of crash::a_killed_process_loses_nothing_it_acknowledged"]
fn crash_child() {
    let (Ok(path), Ok(life)) = (std::env::var(CHILD_STORE), std::env::var(CHILD_LIFE)) else {
        return;
    };
    let mut runtime = open_runtime(&path);
    runtime.run_until_idle();
    let started = std::time::Instant::now();
    for i in 0.. {
        let name = format!("w{life}-{i}");
        let id = runtime
            .submit(NewTask::new(Worker::new(&name, STEPS, None)))
            .unwrap()
            .id;
        println!("submitted {name}");
        runtime.run_until_idle();
        if let Some(TaskState::Completed(Ok(value))) = runtime.task_state(id) {
            println!("done {name} {value}");
        }
        if started.elapsed() > Duration::from_secs(20) {
            break;
        }
    }
}

/// What a worker named `name` ends with: its answers are functions of its requests.
fn expected_result(name: &str) -> Value {
    let mut log: Vec<String> = Vec::new();
    for step in 0..STEPS {
        let answer = if step % 3 == 2 {
            tool_answer(&json!({"worker": name, "items": step}))
        } else {
            llm_answer(&json!({"worker": name, "log": log}), 200)
        };
        log.push(answer.as_str().unwrap().to_owned());
    }
    json!({"name": name, "log": log})
}

/// Runs a child on the store at `path` until it has printed `lines` lines, kills it
/// with SIGKILL, and returns every line it printed.
fn run_and_kill(path: &Path, life: u32, lines: usize) -> Vec<String> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "crash::crash_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_STORE, path)
        .env(CHILD_LIFE, life.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    while seen.len() < lines {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => {
                if line.starts_with("submitted ") || line.starts_with("done ") {
                    seen.push(line);
                }
            }
            Err(e) => panic!("the child stopped printing after {} lines: {e}", seen.len()),
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
    // What it printed before it died is acknowledged too.
    seen.extend(
        rx.try_iter()
            .filter(|l| l.starts_with("submitted ") || l.starts_with("done ")),
    );
    seen
}

/// Three lives of a process writing to one store, each killed with SIGKILL at an
/// arbitrary moment (wherever it is after printing its 40th, 70th or 100th line):
/// after each kill the store verifies, and in the end every task any life was told
/// was submitted is in the recovered run, every result a life saw is the result the
/// recovered run has, and the recovered run finishes every task with its right result.
#[cfg(unix)]
#[test]
fn a_killed_process_loses_nothing_it_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.spool");
    let mut submitted = Vec::new();
    let mut seen_done = BTreeMap::new();
    for (life, lines) in [(1, 40), (2, 70), (3, 100)] {
        for line in run_and_kill(&path, life, lines) {
            let mut words = line.splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("submitted"), Some(name), None) => submitted.push(name.to_owned()),
                (Some("done"), Some(name), Some(value)) => {
                    let value: Value = serde_json::from_str(value).unwrap();
                    seen_done.insert(name.to_owned(), value);
                }
                _ => panic!("a line the child does not print: {line}"),
            }
        }
        Store::open(&path).unwrap().verify().unwrap();
    }
    assert!(submitted.len() >= 100, "{} submissions", submitted.len());

    let path = path.to_str().unwrap();
    let mut runtime = open_runtime(path);
    runtime.run_until_idle();
    let snapshot = runtime.scheduler().snapshot().unwrap();
    let mut results = BTreeMap::new();
    for row in snapshot.rows() {
        let Some(TaskState::Completed(Ok(value))) = runtime.task_state(row.id) else {
            panic!("task {} did not complete: {}", row.id, row.state);
        };
        let name = value["name"].as_str().unwrap().to_owned();
        assert_eq!(value, expected_result(&name), "{name}");
        assert!(results.insert(name, value).is_none(), "a task ran twice");
    }
    println!(
        "{} submissions and {} results acknowledged over three lives; {} tasks recovered",
        submitted.len(),
        seen_done.len(),
        results.len()
    );
    for name in &submitted {
        assert!(
            results.contains_key(name),
            "{name} was acknowledged but lost"
        );
    }
    for (name, value) in &seen_done {
        assert_eq!(results.get(name), Some(value), "{name}");
    }
}
