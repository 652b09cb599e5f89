//! What the task routes answer with: a task's body, its timing and timeline, a page of
//! them, a task type; and the list's query.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use spool_core::{TaskState, Totals, Value, Wait};
use utoipa::{IntoParams, ToSchema};

use crate::millis::millis;
use crate::routes::history::ForkOriginBody;
use crate::views::{TaskRow, result_of, state_tag};

/// When a body is read: the scheduler's time of the view, and the wall-clock instant
/// of a scheduler time (`base` is the wall clock at `at`), so that a task's
/// submission and deadline read in wall-clock time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadAt {
    /// The time of the view (open intervals end, ages are taken, here).
    pub(crate) now: spool_core::Time,
    /// A scheduler time whose wall-clock instant is known.
    pub(crate) at: spool_core::Time,
    /// Its wall-clock instant, if known.
    pub(crate) base: Option<jiff::Timestamp>,
}

impl ReadAt {
    /// As of now, by the views' publication.
    pub(crate) fn of(views: &crate::views::Views) -> ReadAt {
        ReadAt {
            now: views.read_now(),
            at: views.now,
            base: views.wall_clock,
        }
    }

    /// The wall-clock instant of the scheduler's time `t`.
    pub(crate) fn wall(&self, t: spool_core::Time) -> Option<jiff::Timestamp> {
        let base = self.base?;
        if t >= self.at {
            base.checked_add(t.saturating_since(self.at)).ok()
        } else {
            base.checked_sub(self.at.saturating_since(t)).ok()
        }
    }
}

/// Where a task's time went, in milliseconds: the sums of its timeline's intervals by
/// wait (each `end_ms - start_ms`).
#[derive(Debug, Serialize, ToSchema)]
pub struct TimingBody {
    /// Waiting for a slot.
    pub queued_ms: u64,
    /// Waiting for dependencies.
    pub blocked_ms: u64,
    /// Waiting on a request held back by a rate limit: backing off after a 429, or
    /// held at its kind's gate (a window, token or in-flight limit, its agent's cap).
    pub rate_limited_ms: u64,
    /// Waiting for requests, by kind (`llm`, `tool:search`, `confirm`; `several` for
    /// more than one at once), for a timer (`timer`) and for children (`children`).
    pub waiting_ms: BTreeMap<String, u64>,
    /// Ready or being polled.
    pub running_ms: u64,
}

impl TimingBody {
    /// The totals of `row`'s timeline as of `now`, summed from its intervals in whole
    /// milliseconds since the submission, so that they add up to what the timeline
    /// shows (each interval's `end_ms - start_ms`), rounding included.
    fn of(row: &TaskRow, now: spool_core::Time) -> TimingBody {
        let mut totals = Totals::default();
        for interval in row.timeline.intervals(now) {
            let start = millis(interval.start.saturating_since(row.created_at));
            let end = millis(interval.end.saturating_since(row.created_at));
            totals.add(
                &interval.wait,
                std::time::Duration::from_millis(end.saturating_sub(start)),
            );
        }
        TimingBody::from_totals(&totals)
    }

    fn from_totals(t: &Totals) -> TimingBody {
        TimingBody {
            queued_ms: millis(t.queued),
            blocked_ms: millis(t.blocked),
            rate_limited_ms: millis(t.rate_limited),
            waiting_ms: t
                .waiting
                .iter()
                .map(|(k, d)| (k.clone(), millis(*d)))
                .collect(),
            running_ms: millis(t.running),
        }
    }
}

/// One interval of a task's timeline: what its time went to from `start_ms` to
/// `end_ms`, in milliseconds since its submission.
#[derive(Debug, Serialize, ToSchema)]
pub struct IntervalBody {
    /// `queued` (for a slot), `blocked` (on dependencies), `rate_limited` (a request
    /// held back by a 429 back-off or its kind's gate), `request` (one request of
    /// `kind`), `requests` (several at once), `timer`, `children` or `running` (ready
    /// or being polled).
    pub wait: String,
    /// The request kind, for `request` and `rate_limited`: `llm`, `confirm` (a person),
    /// `tool:NAME`, or a custom kind; `null` otherwise (and for `rate_limited` when the
    /// kind held is not known).
    pub kind: Option<String>,
    /// For `requests`, how many.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// When it began, in milliseconds since the task was submitted.
    pub start_ms: u64,
    /// When it ended, in milliseconds since the task was submitted (for the open
    /// interval, the time of the view).
    pub end_ms: u64,
    /// Whether it is still going on (the last interval of a live task, as of the view).
    pub open: bool,
}

impl IntervalBody {
    fn list(row: &TaskRow, now: spool_core::Time) -> Vec<IntervalBody> {
        let open = row.timeline.ended().is_none();
        let last = row.timeline.len().saturating_sub(1);
        row.timeline
            .intervals(now)
            .enumerate()
            .map(|(i, interval)| IntervalBody {
                wait: interval.wait.name().to_owned(),
                kind: interval.wait.kind().map(ToString::to_string),
                count: match interval.wait {
                    Wait::Requests(n) => Some(n),
                    _ => None,
                },
                start_ms: millis(interval.start.saturating_since(row.created_at)),
                end_ms: millis(interval.end.saturating_since(row.created_at)),
                open: open && i == last,
            })
            .collect()
    }
}

/// A task.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskBody {
    /// Its id.
    pub id: u64,
    /// Its type.
    #[serde(rename = "type")]
    pub task_type: String,
    /// Its agent.
    pub agent: String,
    /// Its priority level.
    pub priority: String,
    /// `ready`, `running`, `waiting`, `queued`, `blocked`, `completed`, `failed` or
    /// `canceled`.
    pub state: String,
    /// The state in words (what it waits for, why it failed).
    pub state_detail: String,
    /// Its result, once completed. In the list, only a result of at most 4 KiB of
    /// JSON: a larger one is `null` there, with `result_omitted`.
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// The length of its result's JSON, in bytes, once completed with one.
    pub result_bytes: Option<u64>,
    /// Only in the list, and only when true: the result is larger than 4 KiB and left
    /// out; `GET /v1/tasks/{id}` has it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub result_omitted: bool,
    /// Its error, once failed or canceled.
    pub error: Option<String>,
    /// Its requests in flight: sent to an executor and not answered (a request held
    /// back by a limit is not counted).
    pub in_flight: u32,
    /// When it was submitted, by the wall clock (RFC 3339, UTC, to the millisecond):
    /// after a restart on a store, still the first submission's instant. `null` only
    /// if the server knows no wall clock.
    pub submitted_at: Option<String>,
    /// Milliseconds since it was submitted, as of the view (the time the server was
    /// down included, for a task restored from a store).
    pub age_ms: u64,
    /// Milliseconds from its submission to its end, or for a live task to the view
    /// (then `age_ms`): its whole life, which `timing` may not cover — a task restored
    /// from a store has no timing before the restart. `null` for a task that had
    /// already ended when the server restarted (when it ended is not kept).
    pub total_ms: Option<u64>,
    /// Where its time went.
    pub timing: TimingBody,
    /// Its timeline: where its time went, interval by interval, oldest first, from its
    /// submission (or, for a task restored from a store, from the restart: the time
    /// before is not in this process's trace; an ended one has none). A live
    /// task's last interval ends at the time of the view and is `open`. Only in
    /// `GET /v1/tasks/{id}`; the list leaves it out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Vec<IntervalBody>>,
    /// For a fork (`POST /v1/tasks/{id}/fork`): the task and step it was forked from;
    /// absent for any other task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOriginBody>,
    /// What it spent on LLM answers: present when the server counts spend (it was
    /// started with `--budget` or `--prices`) and the task spent anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spend: Option<SpendBody>,
}

/// What a task spent on LLM answers, from its provider's `usage`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SpendBody {
    /// Input (prompt) tokens.
    pub input_tokens: u64,
    /// Output (completion) tokens.
    pub output_tokens: u64,
    /// Input and output tokens.
    pub tokens: u64,
    /// Their cost in millionths of a US dollar, by the prices per model (a model with
    /// no price costs nothing).
    pub cost_micro_usd: u64,
    /// The same cost in US dollars.
    pub cost_usd: f64,
    /// LLM answers counted.
    pub answers: u64,
}

impl SpendBody {
    /// The body of `spend`.
    pub(crate) fn of(spend: &spool_core::Spend) -> SpendBody {
        SpendBody {
            input_tokens: spend.input_tokens,
            output_tokens: spend.output_tokens,
            tokens: spend.tokens(),
            cost_micro_usd: spend.micro_usd,
            cost_usd: spend.micro_usd as f64 / 1_000_000.0,
            answers: spend.answers,
        }
    }
}

impl TaskBody {
    /// The task with its timeline, for `GET /v1/tasks/{id}`.
    pub(crate) fn with_timeline(row: &TaskRow, at: ReadAt) -> TaskBody {
        let mut body = TaskBody::from_row(row, at);
        body.timeline = Some(IntervalBody::list(row, at.now));
        body
    }

    /// The task as the list shows it: without its timeline (its totals only), and
    /// without a result larger than [`LIST_RESULT_MAX`] (`result_omitted` instead), so
    /// that a page of rows does not copy large results.
    pub(crate) fn list_row(row: &TaskRow, at: ReadAt) -> TaskBody {
        let large = row.result_bytes.is_some_and(|n| n > LIST_RESULT_MAX);
        TaskBody::of(row, at, !large)
    }

    /// The task without its timeline (its totals only), with its result.
    pub(crate) fn from_row(row: &TaskRow, at: ReadAt) -> TaskBody {
        TaskBody::of(row, at, true)
    }

    fn of(row: &TaskRow, at: ReadAt, with_result: bool) -> TaskBody {
        let now = at.now;
        let error = match &row.state {
            // A missed deadline in wall-clock time, and from the submission.
            TaskState::Completed(Err(error)) => {
                Some(error.describe(row.created_at, |t| at.wall(t)))
            }
            TaskState::Canceled(reason) => Some(reason.to_string()),
            _ => None,
        };
        TaskBody {
            id: row.id.get(),
            task_type: row.type_name.clone(),
            agent: row.agent.clone(),
            priority: row.priority.to_string(),
            state: state_tag(&row.state).to_owned(),
            state_detail: match &row.state {
                TaskState::Completed(Ok(_)) => "Completed(ok)".to_owned(),
                other => other.to_string(),
            },
            result: result_of(&row.state).filter(|_| with_result).cloned(),
            result_bytes: row.result_bytes,
            result_omitted: !with_result,
            error,
            in_flight: row.in_flight,
            submitted_at: at.wall(row.created_at).map(|t| {
                t.round(jiff::Unit::Millisecond)
                    .unwrap_or(t)
                    .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
                    .to_string()
            }),
            age_ms: millis(now.saturating_since(row.created_at)),
            total_ms: if row.state.is_terminal() {
                row.timeline
                    .ended()
                    .map(|end| millis(end.saturating_since(row.created_at)))
            } else {
                Some(millis(now.saturating_since(row.created_at)))
            },
            timing: TimingBody::of(row, now),
            timeline: None,
            forked_from: row.forked_from.map(|origin| ForkOriginBody {
                task: origin.task.get(),
                step: origin.step,
            }),
            spend: row.spend.as_ref().map(SpendBody::of),
        }
    }
}

/// The longest result's JSON a list row carries, in bytes (4 KiB).
pub(crate) const LIST_RESULT_MAX: u64 = 4096;

/// The filters and page of `GET /v1/tasks`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// Only tasks in this state (`ready`, `running`, `waiting`, `queued`, `blocked`,
    /// `completed`, `failed`, `canceled`).
    pub(crate) state: Option<String>,
    /// Only this agent's tasks.
    pub(crate) agent: Option<String>,
    /// At most this many (1 to 1000, default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub(crate) limit: Option<usize>,
    /// Where the previous page ended (its `next_cursor`).
    #[param(min_length = 1, max_length = 19, pattern = "^[0-9]{1,19}$")]
    pub(crate) cursor: Option<String>,
}

/// A page of tasks, by id.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskPage {
    /// The tasks.
    pub tasks: Vec<TaskBody>,
    /// Give it as `cursor` for the next page; `null` on the last (always present).
    #[schema(required = true)]
    pub next_cursor: Option<String>,
}

/// A registered task type.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskTypeBody {
    /// Its name.
    pub name: String,
    /// The JSON schema its input must fit, if it declares one.
    #[schema(value_type = Option<Object>)]
    pub input_schema: Option<Value>,
}
