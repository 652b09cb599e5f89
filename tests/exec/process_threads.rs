//! The subprocess tool's helper threads end when its runs do, even when a process that
//! left the run's group (`setsid`) keeps the pipes open: the process's thread count
//! comes back to where it was.
//!
//! A binary of its own, with one test: it counts the threads of the whole process,
//! which tests running beside it would change.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;
use spool_core::{Kind, TaskState};
use spool_exec::{ProcessConfig, ProcessTool};
use spool_runtime::Runtime;

#[path = "common/process.rs"]
mod common;
use common::{KillOnDrop, ask};

/// How many runs leave a process holding their pipes.
const RUNS: usize = 4;

/// The threads of this process, from /proc.
fn threads() -> usize {
    fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn no_thread_outlives_the_runs_when_a_process_left_the_group_with_the_pipes() {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = (0..RUNS)
        .map(|i| dir.path().join(format!("escapee{i}")))
        .collect();
    let _cleanup = KillOnDrop(files.clone());
    let before = threads();

    // Each run starts a process in a session of its own holding stdin, stdout and
    // stderr for 30 s, waits until it wrote its pid to the file named by the run's
    // argument, prints `hi` and exits. Half the runs give input that is never read.
    let config = ProcessConfig::new(
        "run() { setsid sh -c 'echo $$ > \"$1\"; exec sleep 30' escapee \"$1\" & \
         while [ ! -s \"$1\" ]; do sleep 0.01; done; echo hi; }; run",
    )
    .shell(true)
    .timeout(Duration::from_secs(8));
    let mut runtime = Runtime::builder()
        .executor(Kind::tool("cmd"), ProcessTool::new(config))
        .build();
    let input = "x".repeat(300_000);
    let ids: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(i, file)| {
            let mut payload = json!({"args": [file.to_str().unwrap()]});
            if i % 2 == 1 {
                payload["stdin"] = json!(input);
            }
            runtime.submit(ask(payload)).unwrap().id
        })
        .collect();
    let started = Instant::now();
    runtime.run_until_idle();
    let took = started.elapsed();
    let states: Vec<_> = ids.iter().map(|id| runtime.task_state(*id)).collect();
    let during = threads();
    drop(runtime);

    // The processes still run and hold the pipes; the threads go all the same.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut after = threads();
    while after != before && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
        after = threads();
    }
    for file in &files {
        let pid = fs::read_to_string(file).unwrap();
        assert!(
            fs::metadata(format!("/proc/{}", pid.trim())).is_ok(),
            "the process {} that left the group is gone: the test proves nothing",
            pid.trim()
        );
    }
    assert_eq!(
        after, before,
        "threads: {before} before the runs, {during} after them, {after} after dropping the runtime"
    );

    // And each answer came in time, with the output.
    let answer = json!({
        "status": 0,
        "signal": null,
        "stdout": "hi\n",
        "stderr": "",
        "truncated": {"stdout": false, "stderr": false},
    });
    for state in states {
        assert_eq!(state, Some(TaskState::Completed(Ok(answer.clone()))));
    }
    assert!(took < Duration::from_secs(4), "answered after {took:?}");
}
