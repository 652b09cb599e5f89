//! A session's limits: a persisted session is trimmed, oldest turns first and whole,
//! to its message and byte limits as runs add to it; an embedder's trimmer replaces the
//! default rule; snapshots and replays keep the limits and trim the same way.

use serde::{Deserialize, Serialize};
use serde_json::json;
use spool::core::{
    AgentTask, Config, SavedTask, ScheduleDef, SessionLimits, Spec, StateError, Step, TaskContext,
    TaskRegistry, Value, message_bytes,
};
use spool_test::TestScheduler;

use crate::support::{SessionIn, minutes};

/// A run that adds one chat turn to its session: the user's `prompt` (with `pad`
/// bytes of padding), an assistant's tool call, the tool's result and the answer —
/// four messages in the OpenAI chat format.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Chat {
    #[serde(default)]
    prompt: String,
    #[serde(default)]
    pad: usize,
    #[serde(default)]
    session: Option<SessionIn>,
    #[serde(default)]
    schedule: Option<Value>,
}

impl AgentTask for Chat {
    fn poll(&mut self, _cx: &mut TaskContext<'_>) -> Step {
        let fire = self
            .schedule
            .as_ref()
            .and_then(|s| s["fire"].as_str())
            .unwrap_or("?")
            .to_owned();
        let user = format!("{} at {}{}", self.prompt, fire, " ".repeat(self.pad));
        Step::done(json!({"answer": "ok", "messages": [
            {"role": "user", "content": user},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "notes.txt"},
            {"role": "assistant", "content": "ok"},
        ]}))
    }

    fn type_name(&self) -> &'static str {
        "chat"
    }

    fn save(&self) -> Result<SavedTask, StateError> {
        SavedTask::serde(self)
    }
}

fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<Chat>("chat")
}

fn scheduler(config: Config) -> TestScheduler {
    let mut t = TestScheduler::with_config(config);
    t.set_registry(registry());
    t.set_wall_clock("2027-01-01T00:00:00Z".parse().unwrap());
    t
}

fn chat_every_minute(pad: usize) -> ScheduleDef {
    ScheduleDef::new(
        "chat",
        Spec::Every(minutes(1)),
        "chat",
        json!({"prompt": "hi", "pad": pad}),
    )
}

/// The session's messages as `role` letters, a turn a word: `uata uata`.
fn shape(messages: &[Value]) -> String {
    let mut out = String::new();
    for m in messages {
        let role = m["role"].as_str().unwrap_or("?");
        if role == "user" && !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&role[..1]);
    }
    out
}

/// The fire time of the first turn a session holds.
fn first_fire(messages: &[Value]) -> String {
    messages[0]["content"].as_str().unwrap()[6..26].to_owned()
}

#[test]
fn a_persisted_session_keeps_at_most_200_messages_by_default_dropping_whole_turns() {
    let mut t = scheduler(Config::new());
    t.put_schedule(chat_every_minute(0)).unwrap();
    // 60 runs of 4 messages: 240, over the default 200 from the 51st run on.
    t.advance(minutes(60));
    assert_eq!(t.schedule("chat").unwrap().status.runs, 60);
    let session = t.session("s-1").unwrap();
    assert_eq!(session.messages.len(), 200);
    // The 50 newest turns, each whole; the oldest kept is the 11th run's.
    assert_eq!(shape(&session.messages), vec!["uata"; 50].join(" "));
    assert_eq!(first_fire(&session.messages), "2027-01-01T00:11:00Z");
}

#[test]
fn the_byte_limit_drops_the_oldest_turns_until_the_rest_fits() {
    let limits = SessionLimits::new(1000, 10_000);
    let mut t = scheduler(Config::new().session_limits(limits));
    // Each turn is a little over 3 KB: three fit in 10,000 bytes, four do not.
    t.put_schedule(chat_every_minute(3000)).unwrap();
    t.advance(minutes(10));
    let session = t.session("s-1").unwrap();
    let bytes: usize = session.messages.iter().map(message_bytes).sum();
    assert_eq!(shape(&session.messages), "uata uata uata");
    assert!((9_000..=10_000).contains(&bytes), "{bytes}");
    assert_eq!(first_fire(&session.messages), "2027-01-01T00:08:00Z");
}

#[test]
fn a_turn_alone_over_the_byte_limit_is_kept_whole_and_alone() {
    let limits = SessionLimits::new(1000, 1_000);
    let mut t = scheduler(Config::new().session_limits(limits));
    t.put_schedule(chat_every_minute(5000)).unwrap();
    t.advance(minutes(5));
    let session = t.session("s-1").unwrap();
    assert_eq!(shape(&session.messages), "uata");
    assert_eq!(first_fire(&session.messages), "2027-01-01T00:05:00Z");
}

#[test]
fn an_embedders_trimmer_replaces_the_default_rule_and_the_default_bounds_what_it_keeps() {
    let limits = SessionLimits::new(8, 1 << 20);
    let mut t = scheduler(Config::new().session_limits(limits));
    // Keeps a summary, then the newest turn; the summary counts the messages dropped
    // (the summary before it included).
    t.core_mut().set_session_trimmer(Some(std::sync::Arc::new(
        |id: &str, messages: Vec<Value>, limits: SessionLimits| {
            let keep = 4;
            let dropped = messages.len() - keep;
            let mut out = vec![json!({"role": "system", "content": format!("{id}: {dropped} dropped, at most {}", limits.max_messages)})];
            out.extend(messages.into_iter().skip(dropped));
            out
        },
    )));
    t.put_schedule(chat_every_minute(0)).unwrap();
    t.advance(minutes(3));
    let session = t.session("s-1").unwrap();
    // Run 3 made 12 messages: the trimmer kept a summary and the newest turn.
    assert_eq!(shape(&session.messages), "s uata");
    assert_eq!(session.messages[0]["content"], "s-1: 8 dropped, at most 8");
    // Run 4 made 9 (the summary, two turns): a new summary and the newest turn.
    t.advance(minutes(1));
    let session = t.session("s-1").unwrap();
    assert_eq!(shape(&session.messages), "s uata");
    assert_eq!(session.messages[0]["content"], "s-1: 5 dropped, at most 8");
    assert_eq!(first_fire(&session.messages[1..]), "2027-01-01T00:04:00Z");

    // A trimmer that keeps everything is overruled by the default rule.
    t.core_mut().set_session_trimmer(Some(std::sync::Arc::new(
        |_: &str, messages: Vec<Value>, _: SessionLimits| messages,
    )));
    t.advance(minutes(1));
    let session = t.session("s-1").unwrap();
    assert_eq!(shape(&session.messages), "uata uata");
}

#[test]
fn snapshots_and_replays_keep_the_limits_and_trim_alike() {
    let limits = SessionLimits::new(10, 1 << 20);
    let mut t = scheduler(Config::new().session_limits(limits));
    t.record_journal().unwrap();
    t.put_schedule(chat_every_minute(0)).unwrap();
    t.advance(minutes(7));
    assert_eq!(shape(&t.session("s-1").unwrap().messages), "uata uata");
    // Restored from a snapshot, it keeps trimming to 10 messages.
    let snapshot = t.snapshot().unwrap();
    let mut restored = TestScheduler::restore(&snapshot, &registry()).unwrap();
    assert_eq!(restored.core().session_limits(), limits);
    restored.advance(minutes(3));
    t.advance(minutes(3));
    assert_eq!(restored.sessions(), t.sessions());
    assert_eq!(shape(&t.session("s-1").unwrap().messages), "uata uata");
    // A replay of the journal reaches the same sessions.
    let journal = t.journal().unwrap();
    let replay = TestScheduler::replay(&journal, &registry()).unwrap();
    assert_eq!(replay.divergence, None);
    assert_eq!(replay.scheduler.sessions(), t.sessions());
    assert_eq!(replay.scheduler.session_limits(), limits);
}

#[test]
fn a_replay_given_the_same_trimmer_trims_as_the_recorded_run_did() {
    let summary = || -> std::sync::Arc<dyn spool::core::SessionTrimmer> {
        std::sync::Arc::new(|_: &str, messages: Vec<Value>, _: SessionLimits| {
            let mut kept = vec![json!({"role": "system", "content": "summary"})];
            kept.extend(messages.into_iter().rev().take(4).rev());
            kept
        })
    };
    let mut t = scheduler(Config::new().session_limits(SessionLimits::new(6, 1 << 20)));
    t.record_journal().unwrap();
    t.core_mut().set_session_trimmer(Some(summary()));
    t.put_schedule(chat_every_minute(0)).unwrap();
    t.advance(minutes(5));
    assert_eq!(shape(&t.session("s-1").unwrap().messages), "s uata");
    let journal = t.journal().unwrap();
    let replay = spool::core::Scheduler::replay_with(&journal, &registry(), |core| {
        core.set_session_trimmer(Some(summary()));
    })
    .unwrap();
    assert_eq!(replay.divergence, None);
    assert_eq!(replay.scheduler.sessions(), t.sessions());
    // Without it, the default rule trims the replay: another session.
    let plain = TestScheduler::replay(&journal, &registry()).unwrap();
    assert_eq!(shape(&plain.scheduler.sessions()[0].messages), "uata");
}
