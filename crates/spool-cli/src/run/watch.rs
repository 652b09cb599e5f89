//! The lines `spool run` prints on stderr: one when a schedule's run starts, one when
//! it ends. A thread asks the runtime's handle for the schedules' status every
//! [`EVERY`] and prints what changed: the loop itself prints nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use jiff::Timestamp;
use spool_core::{TaskId, TaskState};
use spool_runtime::RuntimeHandle;

/// How often the watcher looks.
const EVERY: Duration = Duration::from_millis(100);

/// The longest answer shown, in characters.
const ANSWER_CHARS: usize = 120;

/// The thread that prints run lines.
#[derive(Debug)]
pub(super) struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching the runtime behind `handle`.
    pub(super) fn start(handle: RuntimeHandle) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = thread::Builder::new()
            .name("spool-run-lines".to_owned())
            .spawn(move || watch(&handle, &stopping))
            .ok();
        Watcher { stop, thread }
    }

    /// Stops the thread and waits for it.
    pub(super) fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn watch(handle: &RuntimeHandle, stop: &AtomicBool) {
    // The runs seen going, by schedule.
    let mut going: BTreeMap<String, BTreeSet<TaskId>> = BTreeMap::new();
    let mut first = true;
    while !stop.load(Ordering::Relaxed) {
        let Ok(schedules) = handle.schedules() else {
            return;
        };
        for info in schedules {
            let now: BTreeSet<TaskId> = info.status.running.iter().copied().collect();
            let seen = going.entry(info.def.slug.clone()).or_default();
            for id in now.difference(seen) {
                let fire = info
                    .status
                    .last_fire
                    .map_or_else(String::new, |f| format!(", fire {f}"));
                let what = if first { "going" } else { "started" };
                line(&format!("{}: run {what} (task {id}{fire})", info.def.slug));
            }
            for id in seen.difference(&now) {
                let id = *id;
                // An error in words: a missed deadline in wall-clock time.
                let read = handle.query(move |rt| {
                    let state = rt.task_state(id);
                    let text = match (&state, rt.scheduler().task(id)) {
                        (Some(TaskState::Completed(Err(error))), Some(info)) => {
                            Some(rt.describe_error(error, info.created_at))
                        }
                        _ => None,
                    };
                    (state, text)
                });
                let (state, text) = read.unwrap_or((None, None));
                let said = match text {
                    Some(error) => format!("failed: {error}"),
                    None => ended(state),
                };
                line(&format!("{}: run ended (task {id}): {said}", info.def.slug));
            }
            *seen = now;
        }
        first = false;
        thread::sleep(EVERY);
    }
}

/// How a run ended, in a few words.
fn ended(state: Option<TaskState>) -> String {
    match state {
        Some(TaskState::Completed(Ok(value))) => {
            let answer = value["answer"].as_str().unwrap_or_default();
            let mut shown: String = answer.chars().take(ANSWER_CHARS).collect();
            if answer.chars().count() > ANSWER_CHARS {
                shown.push('…');
            }
            format!("ok: {shown}")
        }
        Some(TaskState::Completed(Err(error))) => format!("failed: {error}"),
        Some(TaskState::Canceled(reason)) => format!("canceled: {reason}"),
        Some(other) => format!("{other:?}"),
        None => "its result is no longer kept".to_owned(),
    }
}

/// Prints `text` after the time. Its slugs, answers and errors came from outside: their
/// control characters are written visibly.
fn line(text: &str) {
    crate::logs::say(&format!(
        "{} {}",
        Timestamp::now().strftime("%H:%M:%S"),
        crate::terminal::safe(text)
    ));
}
