//! Shared by the subprocess tool's tests (`process.rs`, `process_threads.rs`): a task
//! that calls the tool once, and a guard that kills what left the tool's reach.

use std::fs;
use std::path::PathBuf;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use spool_core::{NewTask, Step, task_fn};

/// A task that calls the tool `cmd` once with `payload` and ends with its answer.
pub(crate) fn ask(payload: Value) -> NewTask {
    let mut asked = false;
    NewTask::new(task_fn("ask", move |cx| {
        if !asked {
            asked = true;
            cx.tool("cmd", payload.clone());
            return Step::Wait;
        }
        match cx.take_answer() {
            Some(answer) => Step::Done(answer.result.map_err(|e| e.into_task_error(1))),
            None => Step::fail("resumed without an answer"),
        }
    }))
}

/// Kills, when dropped, the processes whose pids are in the files: they left the tool's
/// groups (`setsid`), out of its reach, so a test cleans up after itself, pass or fail.
pub(crate) struct KillOnDrop(pub(crate) Vec<PathBuf>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for file in &self.0 {
            if let Some(pid) = fs::read_to_string(file)
                .ok()
                .and_then(|text| text.trim().parse::<i32>().ok())
            {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}
