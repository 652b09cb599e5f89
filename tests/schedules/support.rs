//! What the schedule tests share: a run task type, and a test scheduler whose virtual
//! time starts at a given wall-clock instant.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use spool::core::{AgentTask, SavedTask, StateError, Step, TaskContext, TaskRegistry, Value};
use spool_test::TestScheduler;

/// A run: optionally sleeps `run_ms` (a run that outlasts its interval), then fails if
/// `fail`, else completes adding one message saying `text` and how many messages its
/// session had.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Note {
    #[serde(default)]
    pub(crate) text: String,
    #[serde(default)]
    pub(crate) run_ms: u64,
    #[serde(default)]
    pub(crate) fail: bool,
    #[serde(default)]
    pub(crate) session: Option<SessionIn>,
    #[serde(default)]
    pub(crate) slept: bool,
}

/// The session a run is given.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct SessionIn {
    pub(crate) id: String,
    pub(crate) messages: Vec<Value>,
}

impl AgentTask for Note {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if self.run_ms > 0 && !self.slept {
            self.slept = true;
            cx.sleep(Duration::from_millis(self.run_ms));
            return Step::Wait;
        }
        if self.fail {
            return Step::fail(format!("{} failed", self.text));
        }
        let seen = self.session.as_ref().map_or(0, |s| s.messages.len());
        Step::done(json!({
            "messages": [{ "role": "assistant", "content": format!("{} (saw {seen})", self.text) }]
        }))
    }

    fn type_name(&self) -> &'static str {
        "note"
    }

    fn save(&self) -> Result<SavedTask, StateError> {
        SavedTask::serde(self)
    }
}

/// The registry of the run types.
pub(crate) fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<Note>("note")
}

/// A test scheduler at `wall`, with the run types.
pub(crate) fn at(wall: &str) -> TestScheduler {
    let mut t = TestScheduler::new();
    t.set_registry(registry());
    t.set_wall_clock(wall.parse().expect("an RFC 3339 instant"));
    t
}

/// A duration of `m` minutes.
pub(crate) fn minutes(m: u64) -> Duration {
    Duration::from_secs(60 * m)
}

/// Advances `t` minute by minute for `total` minutes, writing a line each time the
/// schedule `slug`'s runs, missed count, waiting fires or last result change:
/// `HH:MM runs=R missed=M running=[..] buffered=[HH:MM..] result=..`.
pub(crate) fn log_minutes(t: &mut TestScheduler, slug: &str, total: u64) -> String {
    let mut out = String::new();
    let mut last = String::new();
    for _ in 0..total {
        t.advance(minutes(1));
        let Some(info) = t.schedule(slug) else {
            out.push_str("(deleted)\n");
            break;
        };
        let s = info.status;
        let hm = |ts: &jiff::Timestamp| ts.to_string()[11..16].to_owned();
        let line = format!(
            "runs={} missed={} running={:?} buffered={:?} retry={:?} result={:?} error={:?}",
            s.runs,
            s.missed,
            s.running.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
            s.buffered.iter().map(hm).collect::<Vec<_>>(),
            s.retry.map(|(n, a)| (hm(&n), hm(&a))),
            s.last_result,
            s.last_error,
        );
        if line != last {
            let now = t.wall_clock().expect("a wall clock");
            out.push_str(&format!("{} {line}\n", hm(&now)));
            last = line;
        }
    }
    out
}
