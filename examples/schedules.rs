//! A schedule on the threaded runtime, journaled to a store: a task type for its runs,
//! a schedule every second that keeps its session, three runs watched from another
//! thread through a handle, then the store read back as the next process would.
//!
//! `cargo run --example schedules` (about three seconds).

use std::error::Error;
use std::path::Path;
use std::thread;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use spool::Runtime;
use spool::core::{
    AgentTask, SavedTask, ScheduleDef, Spec, StateError, Step, TaskContext, TaskRegistry, Value,
};
use spool::store::Store;

/// A run: answers with one message saying how many the session had before it.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Standup {
    /// The run's input: `"session": {"id", "messages"}` is added by the scheduler.
    #[serde(default)]
    session: Option<Value>,
}

impl AgentTask for Standup {
    fn poll(&mut self, _cx: &mut TaskContext<'_>) -> Step {
        let seen = self
            .session
            .as_ref()
            .and_then(|s| s["messages"].as_array())
            .map_or(0, Vec::len);
        // A run that completes with `"messages"` adds them to its session.
        Step::done(json!({"messages": [format!("stand-up #{} (saw {seen})", seen + 1)]}))
    }

    fn type_name(&self) -> &'static str {
        "standup"
    }

    fn save(&self) -> Result<SavedTask, StateError> {
        SavedTask::serde(self)
    }
}

/// Runs the schedule three times on a store at `path`, then reads the store back as the
/// next process would; the lines to print.
pub(crate) fn run(path: &Path) -> Result<Vec<String>, Box<dyn Error>> {
    let mut lines = Vec::new();
    // The task types runs are made of, by name, from the schedule's input.
    let registry = TaskRegistry::new().with_serde::<Standup>("standup");
    // Every checkpoint first checks that the live tasks' states round-trip.
    let mut runtime = Runtime::builder()
        .registry(registry.clone())
        .check_round_trip(true)
        .journal(Store::open(path)?)
        .checkpoint_every(2)
        .build();
    // Returns once the new schedule is durable in the store.
    let every = Spec::Every(Spec::parse_every("1s")?);
    runtime.put_schedule(ScheduleDef::new("standup", every, "standup", json!({})))?;

    // The loop runs on this thread; another watches through a handle and stops it.
    let handle = runtime.handle();
    let watcher = thread::spawn(move || {
        loop {
            let status = handle.schedule("standup")?.map(|info| info.status);
            if status.is_some_and(|s| s.runs >= 3 && s.running.is_empty()) {
                return handle.shutdown();
            }
            thread::sleep(Duration::from_millis(20));
        }
    });
    runtime.run();
    watcher.join().map_err(|_| "the watcher panicked")??;
    let status = runtime.schedule("standup").ok_or("no schedule")?.status;
    let session = runtime
        .session(status.session.as_deref().ok_or("no session")?)
        .ok_or("no session")?;
    lines.push(format!("runs {}, missed {}", status.runs, status.missed));
    for message in &session.messages {
        lines.push(format!("  {}", message.as_str().unwrap_or_default()));
    }
    assert_eq!(status.runs, 3);
    assert_eq!(session.messages.len(), 3);
    // One more checkpoint, checked like the others; a failed check is an error here.
    runtime.checkpoint()?;
    drop(runtime);

    // The next process goes on from the store: same schedule, same counts; the fires it
    // missed while down would be due at once (the catch-up policy says which run).
    let store = Store::open(path)?;
    let journal = store.recover()?.ok_or("an empty store")?;
    let runtime = Runtime::builder()
        .recover(&journal, &registry)?
        .journal(store)
        .try_build()?;
    let again = runtime.schedule("standup").ok_or("no schedule")?.status;
    let next = again
        .next_run
        .map_or_else(|| "none".to_owned(), |at| at.to_string());
    lines.push(format!(
        "after a restart: runs {}, next run {next}",
        again.runs
    ));
    assert_eq!(again.runs, 3);
    Ok(lines)
}

fn main() -> Result<(), Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    for line in run(&dir.path().join("schedules.spool"))? {
        println!("{line}");
    }
    Ok(())
}
