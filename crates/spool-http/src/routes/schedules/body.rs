//! The bodies of the schedule routes: what PUT and PATCH take, and a schedule with
//! its status as every route gives it back.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use spool_core::{CatchUp, ScheduleInfo, SessionMode, Spec, Value};
use utoipa::ToSchema;

/// When a schedule fires.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum SpecBody {
    /// A cron expression (five fields) on a time zone's wall clock.
    Cron {
        /// `minute hour day month weekday`, e.g. `0 9 * * 1-5`.
        expression: String,
        /// An IANA zone (default `UTC`).
        tz: Option<String>,
    },
    /// Every interval: `90s`, `5m`, `1h30m`, `1d`.
    Interval {
        /// The interval.
        every: String,
    },
    /// Once, at an RFC 3339 instant.
    Once {
        /// The instant.
        #[schema(format = DateTime)]
        at: String,
    },
}

/// What a schedule does when it is overdue after downtime.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CatchUpBody {
    /// Run the latest missed fire once (overdue-once; the default).
    Latest,
    /// Run none.
    None,
    /// Run every missed fire within a window (`6h`).
    All(String),
}

/// The body of `PUT /v1/schedules/{slug}` (a whole replacement).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SchedulePutBody {
    /// The task type each run makes (or give `prompt`).
    pub task_type: Option<String>,
    /// A prompt for the server's prompt type (`spool serve`: the built-in `agent`).
    pub prompt: Option<String>,
    /// The run's input (with `task_type`).
    #[schema(value_type = Option<Object>)]
    pub input: Option<Value>,
    /// Whether it fires (default true).
    pub enabled: Option<bool>,
    /// When it fires.
    pub schedule: SpecBody,
    /// `persist` (default: one conversation across runs), `fresh`, or `shared:ID`.
    pub session: Option<String>,
    /// `skip` (default), `buffer-one`, `buffer-all`, `cancel-other`, `allow-all`.
    pub overlap: Option<String>,
    /// Overdue fires after downtime.
    pub catch_up: Option<CatchUpBody>,
    /// Pause itself after this many failed runs in a row.
    #[serde(default, deserialize_with = "crate::whole::optional_u32")]
    #[schema(value_type = Option<u64>, maximum = 4294967295_u64)]
    pub pause_after_failures: Option<u32>,
    /// The agent its runs run as, for fairness and per-agent limits (default: the
    /// default agent).
    pub agent: Option<String>,
    /// Its runs' priority: `low`, `normal` (default), `high` or `critical`.
    pub priority: Option<String>,
}

/// The body of `PATCH /v1/schedules/{slug}`: the fields to change.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SchedulePatchBody {
    /// See [`SchedulePutBody`].
    pub task_type: Option<String>,
    /// See [`SchedulePutBody`].
    pub prompt: Option<String>,
    /// See [`SchedulePutBody`].
    #[schema(value_type = Option<Object>)]
    pub input: Option<Value>,
    /// See [`SchedulePutBody`].
    pub enabled: Option<bool>,
    /// See [`SchedulePutBody`].
    pub schedule: Option<SpecBody>,
    /// See [`SchedulePutBody`].
    pub session: Option<String>,
    /// See [`SchedulePutBody`].
    pub overlap: Option<String>,
    /// See [`SchedulePutBody`].
    pub catch_up: Option<CatchUpBody>,
    /// See [`SchedulePutBody`].
    #[serde(default, deserialize_with = "crate::whole::optional_u32")]
    #[schema(value_type = Option<u64>, maximum = 4294967295_u64)]
    pub pause_after_failures: Option<u32>,
    /// See [`SchedulePutBody`].
    pub agent: Option<String>,
    /// See [`SchedulePutBody`].
    pub priority: Option<String>,
}

/// How a schedule is doing.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleStatusBody {
    /// Its next fire (none: paused or done).
    pub next_run: Option<String>,
    /// When its last run started.
    pub last_run: Option<String>,
    /// `success` or `error`.
    pub last_result: Option<String>,
    /// Why its last run failed.
    pub last_error: Option<String>,
    /// Its session's id.
    pub session: Option<String>,
    /// Runs started.
    pub runs: u64,
    /// Failed runs in a row.
    pub consecutive_failures: u32,
    /// Fires that did not run.
    pub missed: u64,
    /// Its runs going now (task ids).
    pub running: Vec<u64>,
    /// Why it paused itself.
    pub paused_reason: Option<String>,
    /// The nominal fire time of its last run.
    pub last_fire: Option<String>,
    /// Fires waiting for the run going to end (their nominal times, oldest first).
    pub buffered: Vec<String>,
    /// A fire whose session was busy, and when it tries again.
    pub retry: Option<RetryBody>,
}

/// A fire that waits for its session, and when it tries again.
#[derive(Debug, Serialize, ToSchema)]
pub struct RetryBody {
    /// The fire's nominal time.
    pub fire: String,
    /// When it tries again.
    pub at: String,
}

/// A schedule and its status.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleBody {
    /// Its name.
    pub slug: String,
    /// The task type its runs make.
    pub task_type: String,
    /// Their input.
    #[schema(value_type = Object)]
    pub input: Value,
    /// Whether it fires.
    pub enabled: bool,
    /// When.
    pub schedule: SpecBody,
    /// `persist`, `fresh` or `shared:ID`.
    pub session: String,
    /// The overlap policy.
    pub overlap: String,
    /// The catch-up policy.
    pub catch_up: CatchUpBody,
    /// Pause after this many failures in a row.
    pub pause_after_failures: Option<u32>,
    /// The agent its runs run as (`null`: the default agent).
    pub agent: Option<String>,
    /// Its runs' priority: `low`, `normal`, `high` or `critical`.
    pub priority: String,
    /// When it was made.
    pub created_at: String,
    /// When it was last changed.
    pub updated_at: String,
    /// How it is doing.
    pub status: ScheduleStatusBody,
}

impl From<&ScheduleInfo> for ScheduleBody {
    fn from(info: &ScheduleInfo) -> ScheduleBody {
        let def = &info.def;
        let s = &info.status;
        ScheduleBody {
            slug: def.slug.clone(),
            task_type: def.task_type.clone(),
            input: def.input.clone(),
            enabled: def.enabled,
            schedule: match &def.spec {
                Spec::Cron(cron) => SpecBody::Cron {
                    expression: cron.expression().to_owned(),
                    tz: Some(cron.time_zone().to_owned()),
                },
                Spec::Every(every) => SpecBody::Interval {
                    every: interval_text(*every),
                },
                Spec::Once(at) => SpecBody::Once { at: at.to_string() },
            },
            session: match &def.session {
                SessionMode::Persist => "persist".to_owned(),
                SessionMode::Fresh => "fresh".to_owned(),
                SessionMode::Shared(id) => format!("shared:{id}"),
            },
            overlap: def.overlap.name().to_owned(),
            catch_up: match def.catch_up {
                CatchUp::None => CatchUpBody::None,
                CatchUp::All { window } => CatchUpBody::All(interval_text(window)),
                _ => CatchUpBody::Latest,
            },
            pause_after_failures: def.pause_after_failures,
            agent: def.agent.clone(),
            priority: def.priority.unwrap_or_default().to_string(),
            created_at: info.created_at.to_string(),
            updated_at: info.updated_at.to_string(),
            status: ScheduleStatusBody {
                next_run: s.next_run.map(|t| t.to_string()),
                last_run: s.last_run.map(|t| t.to_string()),
                last_result: s.last_result.map(|r| {
                    match r {
                        spool_core::RunResult::Success => "success",
                        _ => "error",
                    }
                    .to_owned()
                }),
                last_error: s.last_error.clone(),
                session: s.session.clone(),
                runs: s.runs,
                consecutive_failures: s.consecutive_failures,
                missed: s.missed,
                running: s.running.iter().map(|id| id.get()).collect(),
                paused_reason: s.paused_reason.clone(),
                last_fire: s.last_fire.map(|t| t.to_string()),
                buffered: s.buffered.iter().map(ToString::to_string).collect(),
                retry: s.retry.map(|(fire, at)| RetryBody {
                    fire: fire.to_string(),
                    at: at.to_string(),
                }),
            },
        }
    }
}

/// What `POST /v1/schedules/{slug}/run` did.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleOutcome {
    /// The schedule.
    pub slug: String,
    /// `started`, `buffered`, `skipped`, `delayed` or `failed`.
    pub status: String,
    /// The run's task, if one started.
    pub task: Option<u64>,
    /// When a delayed fire tries again, or why one failed.
    pub detail: Option<String>,
}

/// `1h30m`, `90s`: the interval as `Spec::parse_every` reads it.
fn interval_text(every: Duration) -> String {
    let mut secs = every.as_secs();
    if secs == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}
