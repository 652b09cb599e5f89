//! Recurring runs: a schedule starts a registered task type with a JSON
//! input at set times — a cron expression in a time zone, an interval, or one instant
//! ([`Spec`]) — and keeps its status; a session keeps a conversation between runs.
//!
//! The types here are what a user gives and reads. The schedule table lives in the
//! [`Scheduler`](crate::Scheduler): a schedule's next fire is a timer in its timer
//! queue, its operations are journaled inputs, and both are in its snapshots, so a
//! fire happens exactly once across crashes and replays the same in virtual time.
//! `docs/schedules.md` gives the semantics with examples.

mod table;

use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::id::TaskId;
use crate::priority::Priority;
use crate::spec::Spec;

pub(crate) use table::{Anchor, Entry, RunRef, Schedules, SchedulesRecord, Trimmer, due_fires};
pub use table::{message_bytes, trim_session};

/// The longest slug: 63 characters, as a DNS label.
pub const MAX_SLUG_LEN: usize = 63;

/// The delay before a run that found its session busy tries again, by default (an
/// hour).
pub const DEFAULT_BUSY_RETRY: Duration = Duration::from_secs(3600);

/// The most fires `buffer-all` keeps waiting for a schedule; a fire beyond it is
/// counted missed.
pub const MAX_BUFFERED: usize = 1000;

/// The most messages a session keeps by default.
pub const DEFAULT_SESSION_MESSAGES: usize = 200;

/// The most bytes of messages a session keeps by default (1 MiB; see
/// [`message_bytes`]).
pub const DEFAULT_SESSION_BYTES: usize = 1 << 20;

/// How much a session keeps: at most `max_messages` messages and `max_bytes` bytes of
/// messages (each message counted as its compact JSON, [`message_bytes`]). When a
/// run's messages are added to a session and it is over either limit, the session is
/// trimmed ([`trim_session`], or the embedder's [`SessionTrimmer`]).
///
/// # Example
/// ```
/// use spool_core::{Config, SessionLimits};
///
/// let config = Config::new().session_limits(SessionLimits::new(50, 256 * 1024));
/// assert_eq!(config.session_limits.max_messages, 50);
/// assert_eq!(SessionLimits::default(), SessionLimits::new(200, 1 << 20));
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionLimits {
    /// The most messages kept.
    pub max_messages: usize,
    /// The most bytes of messages kept.
    pub max_bytes: usize,
}

impl SessionLimits {
    /// At most `max_messages` messages and `max_bytes` bytes.
    pub fn new(max_messages: usize, max_bytes: usize) -> SessionLimits {
        SessionLimits {
            max_messages,
            max_bytes,
        }
    }

    /// Whether `messages` are over either limit.
    pub fn exceeded_by(&self, messages: &[Value]) -> bool {
        messages.len() > self.max_messages
            || messages.iter().map(message_bytes).sum::<usize>() > self.max_bytes
    }
}

impl Default for SessionLimits {
    /// [`DEFAULT_SESSION_MESSAGES`] messages, [`DEFAULT_SESSION_BYTES`] bytes.
    fn default() -> SessionLimits {
        SessionLimits::new(DEFAULT_SESSION_MESSAGES, DEFAULT_SESSION_BYTES)
    }
}

/// An embedder's own way to shorten a session that went over its
/// [limits](SessionLimits) — a summary message in place of the oldest turns, say —
/// instead of the default rule ([`trim_session`]).
///
/// It runs inside the scheduler, on the loop's thread, when a run's messages are
/// added: it must be deterministic (the same messages give the same result, on every
/// run and replay) and do no I/O. A summariser that asks an LLM must run as a task
/// instead (a schedule of its own, say, that reads the session and writes a summary
/// into its own input), not here. A recovering runtime must be given the same trimmer
/// before it replays its journal.
///
/// What it returns is the session. If that is still over the limits, the default
/// rule trims it further, so a session never stays over them.
///
/// # Example
/// ```
/// use serde_json::json;
/// use spool_core::{SessionLimits, SessionTrimmer, Value};
///
/// /// Keeps the newest half, after one system message that counts what was dropped.
/// struct Summary;
///
/// impl SessionTrimmer for Summary {
///     fn trim(&self, _session: &str, messages: Vec<Value>, _limits: SessionLimits) -> Vec<Value> {
///         let keep = messages.len() / 2;
///         let dropped = messages.len() - keep;
///         let mut out = vec![json!({"role": "system", "content": format!("{dropped} earlier messages")})];
///         out.extend(messages.into_iter().skip(dropped));
///         out
///     }
/// }
/// ```
pub trait SessionTrimmer: Send + Sync {
    /// The messages session `session` keeps, given all of them (oldest first, the
    /// run's just added) and the limits they are over.
    fn trim(&self, session: &str, messages: Vec<Value>, limits: SessionLimits) -> Vec<Value>;
}

impl<F> SessionTrimmer for F
where
    F: Fn(&str, Vec<Value>, SessionLimits) -> Vec<Value> + Send + Sync,
{
    fn trim(&self, session: &str, messages: Vec<Value>, limits: SessionLimits) -> Vec<Value> {
        self(session, messages, limits)
    }
}

/// Checks a schedule's slug: 1 to 63 lower-case ASCII letters, digits and `-`, not
/// starting or ending with `-` ("../etc", "a/b" and "" are refused).
///
/// # Errors
/// [`ScheduleError::BadSlug`] saying what is wrong.
///
/// # Example
/// ```
/// use spool_core::check_slug;
/// assert!(check_slug("daily-standup").is_ok());
/// assert_eq!(
///     check_slug("../etc").unwrap_err().to_string(),
///     "bad schedule slug \"../etc\": only lower-case letters, digits and '-' are allowed"
/// );
/// ```
pub fn check_slug(slug: &str) -> Result<(), ScheduleError> {
    let bad = |why: &str| ScheduleError::BadSlug {
        slug: slug.to_owned(),
        reason: why.to_owned(),
    };
    if slug.is_empty() {
        return Err(bad("it is empty"));
    }
    if slug.len() > MAX_SLUG_LEN {
        return Err(bad("it is longer than 63 characters"));
    }
    if !slug
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(bad("only lower-case letters, digits and '-' are allowed"));
    }
    if slug.starts_with('-') || slug.ends_with('-') {
        return Err(bad("it starts or ends with '-'"));
    }
    Ok(())
}

/// What a schedule does when a fire comes while an earlier run is still going (by
/// default a schedule never runs twice at once). The names are Temporal's.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Overlap {
    /// The fire does not run; it is counted in [`ScheduleStatus::missed`].
    #[default]
    Skip,
    /// The fire waits, and runs when the run going ends; one waits at most (a later
    /// fire while one waits is counted missed).
    BufferOne,
    /// Every fire waits its turn (up to [`MAX_BUFFERED`]); they run one after another.
    BufferAll,
    /// The run going is canceled and the fire runs.
    CancelOther,
    /// The fire runs beside the run going.
    AllowAll,
}

impl Overlap {
    /// Its name, as the CLI and the API spell it.
    pub fn name(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer-one",
            Overlap::BufferAll => "buffer-all",
            Overlap::CancelOther => "cancel-other",
            Overlap::AllowAll => "allow-all",
        }
    }

    /// The policy named `name`.
    ///
    /// # Errors
    /// [`ScheduleError::BadOverlap`] for another name.
    pub fn parse(name: &str) -> Result<Overlap, ScheduleError> {
        [
            Overlap::Skip,
            Overlap::BufferOne,
            Overlap::BufferAll,
            Overlap::CancelOther,
            Overlap::AllowAll,
        ]
        .into_iter()
        .find(|o| o.name() == name)
        .ok_or_else(|| ScheduleError::BadOverlap(name.to_owned()))
    }
}

/// What a schedule does with the fires it missed while nothing ran (the process was
/// down, or the loop stalled): when several fires are due at once.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CatchUp {
    /// The most recent missed fire runs once, now; the others are counted missed
    /// (an overdue schedule runs once on start-up, without backfilling).
    #[default]
    Latest,
    /// None of them runs; all are counted missed.
    None,
    /// Each missed fire within `window` before now runs (oldest first, through the
    /// overlap policy); older ones are counted missed.
    All {
        /// How far back missed fires still run.
        window: Duration,
    },
}

/// Whether a schedule's runs keep a conversation from one run to the next.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionMode {
    /// Runs share the schedule's own session, made at its first run (and made again
    /// if it is deleted).
    #[default]
    Persist,
    /// Each run starts with no session.
    Fresh,
    /// Runs share the session with this id, which other schedules may name too (made
    /// if it does not exist).
    Shared(String),
}

/// A schedule, as given: what it starts and when.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScheduleDef {
    /// Its name: see [`check_slug`].
    pub slug: String,
    /// The registered task type each run is made of.
    pub task_type: String,
    /// The run's input. If it is a JSON object, each run gets it with
    /// `"schedule": {"slug", "fire"}` added (the nominal fire time, RFC 3339), and with
    /// a session `"session": {"id", "messages"}`; with a session it must be an object.
    #[serde(with = "json_text")]
    pub input: Value,
    /// Whether it fires (a paused schedule keeps its status and fires nothing).
    pub enabled: bool,
    /// When it fires.
    pub spec: Spec,
    /// Its session use.
    pub session: SessionMode,
    /// A fire while a run is going.
    pub overlap: Overlap,
    /// Fires missed while nothing ran.
    pub catch_up: CatchUp,
    /// Pause itself after this many runs in a row failed (`None`: never).
    pub pause_after_failures: Option<u32>,
    /// How long a run that found its session busy waits before it tries again.
    pub busy_retry: Duration,
    /// The agent its runs run as (`None`: the default agent).
    pub agent: Option<String>,
    /// Its runs' priority (`None`: normal).
    pub priority: Option<Priority>,
}

impl ScheduleDef {
    /// A schedule named `slug` that starts `task_type` with `input` at the times of
    /// `spec`: enabled, its own persistent session, [`Overlap::Skip`],
    /// [`CatchUp::Latest`], never pausing itself, retrying a busy session after an hour.
    pub fn new(
        slug: impl Into<String>,
        spec: Spec,
        task_type: impl Into<String>,
        input: Value,
    ) -> ScheduleDef {
        ScheduleDef {
            slug: slug.into(),
            task_type: task_type.into(),
            input,
            enabled: true,
            spec,
            session: SessionMode::default(),
            overlap: Overlap::default(),
            catch_up: CatchUp::default(),
            pause_after_failures: None,
            busy_retry: DEFAULT_BUSY_RETRY,
            agent: None,
            priority: None,
        }
    }

    /// With this session use.
    #[must_use]
    pub fn session(mut self, session: SessionMode) -> ScheduleDef {
        self.session = session;
        self
    }

    /// With this overlap policy.
    #[must_use]
    pub fn overlap(mut self, overlap: Overlap) -> ScheduleDef {
        self.overlap = overlap;
        self
    }

    /// With this catch-up policy.
    #[must_use]
    pub fn catch_up(mut self, catch_up: CatchUp) -> ScheduleDef {
        self.catch_up = catch_up;
        self
    }

    /// Enabled or paused.
    #[must_use]
    pub fn enabled(mut self, enabled: bool) -> ScheduleDef {
        self.enabled = enabled;
        self
    }

    /// Pausing itself after `n` failed runs in a row.
    #[must_use]
    pub fn pause_after_failures(mut self, n: u32) -> ScheduleDef {
        self.pause_after_failures = Some(n);
        self
    }

    /// Retrying a run whose session was busy after `delay`.
    #[must_use]
    pub fn busy_retry(mut self, delay: Duration) -> ScheduleDef {
        self.busy_retry = delay;
        self
    }

    /// Its runs run as `agent`.
    #[must_use]
    pub fn agent(mut self, agent: impl Into<String>) -> ScheduleDef {
        self.agent = Some(agent.into());
        self
    }

    /// Its runs have `priority`.
    #[must_use]
    pub fn priority(mut self, priority: Priority) -> ScheduleDef {
        self.priority = Some(priority);
        self
    }

    /// Checks what can be checked without the registry: the slug, a session's input
    /// being an object, a shared session's id, the retry delay.
    ///
    /// # Errors
    /// The [`ScheduleError`] saying what is wrong.
    pub fn check(&self) -> Result<(), ScheduleError> {
        check_slug(&self.slug)?;
        if self.session != SessionMode::Fresh && !self.input.is_object() {
            return Err(ScheduleError::BadInput {
                slug: self.slug.clone(),
                reason: "with a session, the input must be a JSON object (the run gets a \
                         \"session\" member added)"
                    .to_owned(),
            });
        }
        if let SessionMode::Shared(id) = &self.session {
            check_session_id(id)?;
        }
        if self.busy_retry.is_zero() {
            return Err(ScheduleError::BadInput {
                slug: self.slug.clone(),
                reason: "busy_retry must be more than zero".to_owned(),
            });
        }
        Ok(())
    }
}

/// A partial update of a schedule: the fields given replace the schedule's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SchedulePatch {
    /// A new task type.
    pub task_type: Option<String>,
    /// A new input.
    #[serde(with = "json_text_opt")]
    pub input: Option<Value>,
    /// Enabled or paused.
    pub enabled: Option<bool>,
    /// A new spec.
    pub spec: Option<Spec>,
    /// A new session use.
    pub session: Option<SessionMode>,
    /// A new overlap policy.
    pub overlap: Option<Overlap>,
    /// A new catch-up policy.
    pub catch_up: Option<CatchUp>,
    /// A new failure limit (`Some(None)`: never pause).
    pub pause_after_failures: Option<Option<u32>>,
    /// A new busy-session retry delay.
    pub busy_retry: Option<Duration>,
}

impl SchedulePatch {
    /// An empty patch.
    pub fn new() -> SchedulePatch {
        SchedulePatch::default()
    }

    /// `def` with the patch applied.
    pub fn apply(&self, def: &ScheduleDef) -> ScheduleDef {
        let mut def = def.clone();
        if let Some(t) = &self.task_type {
            def.task_type.clone_from(t);
        }
        if let Some(input) = &self.input {
            def.input = input.clone();
        }
        if let Some(enabled) = self.enabled {
            def.enabled = enabled;
        }
        if let Some(spec) = &self.spec {
            def.spec = spec.clone();
        }
        if let Some(session) = &self.session {
            def.session = session.clone();
        }
        if let Some(overlap) = self.overlap {
            def.overlap = overlap;
        }
        if let Some(catch_up) = self.catch_up {
            def.catch_up = catch_up;
        }
        if let Some(limit) = self.pause_after_failures {
            def.pause_after_failures = limit;
        }
        if let Some(delay) = self.busy_retry {
            def.busy_retry = delay;
        }
        def
    }
}

/// How a run ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunResult {
    /// It completed.
    Success,
    /// It failed, was canceled, or could not start.
    Error,
}

/// A schedule's status: how its last run went, and more.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScheduleStatus {
    /// Its next fire (`None`: paused, or a one-shot that fired).
    pub next_run: Option<Timestamp>,
    /// When its last run started.
    pub last_run: Option<Timestamp>,
    /// The nominal fire time of its last run.
    pub last_fire: Option<Timestamp>,
    /// How its last run ended (`None`: none ended yet).
    pub last_result: Option<RunResult>,
    /// Why its last run failed, or why a fire could not run.
    pub last_error: Option<String>,
    /// Its session (`None`: none yet, or fresh sessions).
    pub session: Option<String>,
    /// Runs started.
    pub runs: u64,
    /// Runs in a row that failed.
    pub consecutive_failures: u32,
    /// Fires that did not run (skipped by the overlap or catch-up policy).
    pub missed: u64,
    /// Its runs going now.
    pub running: Vec<TaskId>,
    /// Fires waiting for the run going to end.
    pub buffered: Vec<Timestamp>,
    /// A fire whose session was busy, and when it tries again: `(nominal, at)`.
    pub retry: Option<(Timestamp, Timestamp)>,
    /// Why it paused itself, if it did.
    pub paused_reason: Option<String>,
}

/// A schedule and its status, as listed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// What it is.
    pub def: ScheduleDef,
    /// When it was made.
    pub created_at: Timestamp,
    /// When it was last changed.
    pub updated_at: Timestamp,
    /// How it is doing.
    pub status: ScheduleStatus,
}

/// A session: a named conversation runs continue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionInfo {
    /// Its id.
    pub id: String,
    /// Its messages, oldest first.
    #[serde(with = "json_text_vec")]
    pub messages: Vec<Value>,
    /// The task using it now, if one is.
    pub holder: Option<TaskId>,
    /// When it was made.
    pub created_at: Timestamp,
    /// When messages were last added.
    pub updated_at: Timestamp,
}

/// What a schedule operation did not do, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The slug is not one.
    #[error("bad schedule slug {slug:?}: {reason}")]
    BadSlug {
        /// The slug given.
        slug: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No schedule has this slug.
    #[error("no schedule is named {0:?}")]
    NotFound(String),
    /// The task type is not registered.
    #[error("schedule {slug:?}: the task type {task_type:?} is not registered")]
    UnknownType {
        /// The schedule.
        slug: String,
        /// The type named.
        task_type: String,
    },
    /// The input does not fit.
    #[error("schedule {slug:?}: bad input: {reason}")]
    BadInput {
        /// The schedule.
        slug: String,
        /// What is wrong.
        reason: String,
    },
    /// The overlap policy's name is not one.
    #[error(
        "unknown overlap policy {0:?} (expected skip, buffer-one, buffer-all, cancel-other or allow-all)"
    )]
    BadOverlap(String),
    /// The session id is not one.
    #[error("bad session id {id:?}: {reason}")]
    BadSession {
        /// The id given.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No session has this id.
    #[error("no session has the id {0:?}")]
    NoSession(String),
    /// The session is held by a running task.
    #[error("session {id:?} is busy: task {holder} is using it")]
    SessionBusy {
        /// The session.
        id: String,
        /// The task using it.
        holder: TaskId,
    },
    /// The scheduler was never told the wall-clock time.
    #[error(
        "the scheduler has no wall clock: call set_wall_clock before using schedules \
         (the runtime does it when it starts)"
    )]
    NoWallClock,
    /// Journaling the operation needs the scheduler to save it, and it could not.
    #[error("schedule {slug:?}: {reason}")]
    NotSaveable {
        /// The schedule.
        slug: String,
        /// Why.
        reason: String,
    },
}

/// Checks a session id: as a slug.
///
/// # Errors
/// [`ScheduleError::BadSession`].
pub fn check_session_id(id: &str) -> Result<(), ScheduleError> {
    check_slug(id).map_err(|e| match e {
        ScheduleError::BadSlug { slug, reason } => ScheduleError::BadSession { id: slug, reason },
        other => other,
    })
}

/// What a fire or a trigger did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FireOutcome {
    /// A run started as this task.
    Started(TaskId),
    /// It waits for the run going to end.
    Buffered,
    /// It did not run (counted missed).
    Skipped,
    /// Its session was busy: it tries again at this time.
    Delayed(Timestamp),
    /// It could not start (the schedule's status says why).
    Failed(String),
}

/// Serde for a `Value` as JSON text (postcard cannot carry a `Value` itself).
mod json_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use serde_json::Value;

    pub(crate) fn serialize<S: Serializer>(value: &Value, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&value.to_string())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        let text = String::deserialize(d)?;
        serde_json::from_str(&text).map_err(serde::de::Error::custom)
    }
}

/// Serde for an optional `Value` as JSON text.
mod json_text_opt {
    use serde::{Deserialize, Deserializer, Serializer};
    use serde_json::Value;

    pub(crate) fn serialize<S: Serializer>(value: &Option<Value>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => s.serialize_some(&v.to_string()),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| serde_json::from_str(&text).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// Serde for a list of `Value`s as JSON text.
pub(crate) mod json_text_vec {
    use serde::{Deserialize, Deserializer, Serializer};
    use serde_json::Value;

    pub(crate) fn serialize<S: Serializer>(values: &[Value], s: S) -> Result<S::Ok, S::Error> {
        let text = serde_json::to_string(values).map_err(serde::ser::Error::custom)?;
        s.serialize_str(&text)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Value>, D::Error> {
        let text = String::deserialize(d)?;
        match serde_json::from_str(&text).map_err(serde::de::Error::custom)? {
            Value::Array(values) => Ok(values),
            _ => Err(serde::de::Error::custom(
                "a session's messages are a JSON array",
            )),
        }
    }
}
