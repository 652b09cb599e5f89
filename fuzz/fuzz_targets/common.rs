//! What both targets do with a snapshot that decodes.

use serde::{Deserialize, Serialize};
use spool_core::{AgentTask, SavedTask, Scheduler, Snapshot, Step, TaskContext, TaskRegistry};

/// A task whose state is its fields, registered under the names the test snapshots
/// use, so that restores get as far as rebuilding bodies.
#[derive(Serialize, Deserialize)]
pub struct Fields {
    #[serde(default)]
    left: u32,
}

impl AgentTask for Fields {
    fn poll(&mut self, _cx: &mut TaskContext<'_>) -> Step {
        self.left = self.left.saturating_sub(1);
        Step::done(self.left)
    }

    fn type_name(&self) -> &'static str {
        "asker"
    }

    fn save(&self) -> Result<SavedTask, String> {
        SavedTask::serde(self)
    }
}

pub fn registry() -> TaskRegistry {
    ["asker", "sleeper", "failer", "caller", "parent", "worker"]
        .into_iter()
        .fold(TaskRegistry::new(), |r, name| r.with_serde::<Fields>(name))
}

/// Lists the snapshot, restores it, and lists and snapshots what restores.
pub fn exercise(snapshot: &Snapshot) {
    let _ = snapshot.rows();
    let _ = snapshot.stats();
    if let Ok(restored) = Scheduler::restore(snapshot, &registry()) {
        let _ = restored.tasks().count();
        let _ = restored.queue_state();
        let _ = restored.snapshot().map(|s| s.encode());
    }
}
