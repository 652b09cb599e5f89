//! The queue (`queue_state` and `queue_details`), from the views.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use spool_core::{GateView, Stats, TaskState};
use utoipa::ToSchema;

use crate::millis::millis;
use crate::problem::Problem;
use crate::state::AppState;
use crate::views::state_tag;
use crate::waits::WaitSummary;

/// Waiting tasks by what they wait for.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct WaitingBody {
    /// For requests.
    pub requests: usize,
    /// For a timer.
    pub timer: usize,
    /// For children.
    pub children: usize,
    /// For a slot.
    pub slot: usize,
    /// For dependencies.
    pub dependencies: usize,
}

/// One live task in the queue.
#[derive(Debug, Serialize, ToSchema)]
pub struct QueueDetailBody {
    /// Its place in the policy's order, from 1: the order the run-queue policy would
    /// pick the live tasks in if all were waiting to go now (the order of `details`).
    pub position: usize,
    /// Its id.
    pub id: u64,
    /// Its agent.
    pub agent: String,
    /// Its type.
    #[serde(rename = "type")]
    pub task_type: String,
    /// Its priority level.
    pub priority: String,
    /// Its state (as in `GET /v1/tasks`).
    pub state: String,
    /// Milliseconds since it was submitted.
    pub age_ms: u64,
    /// Ancestors.
    pub depth: u32,
    /// Iteration, from 1.
    pub iteration: u32,
    /// Its score, under a policy that computes one.
    pub score: Option<i64>,
    /// What it waits on, while it waits: a request kind (`llm`, `tool:search`,
    /// `confirm`), `N requests`, `timer`, `N children`, `slot`, `N dependencies`.
    pub waits_on: Option<String>,
    /// Milliseconds since it entered its current state.
    pub since_ms: u64,
}

/// A window's use: what it counted in the last `per_ms`, of at most `max`.
#[derive(Debug, Serialize, ToSchema)]
pub struct WindowUseBody {
    /// Requests (or estimated tokens) sent in the window.
    pub used: u64,
    /// The most it takes.
    pub max: u64,
    /// Its length, in milliseconds.
    pub per_ms: u64,
}

/// One request kind's gate: what it has out, what waits at it, how full its limits are.
#[derive(Debug, Serialize, ToSchema)]
pub struct GateBody {
    /// The request kind.
    pub kind: String,
    /// Requests of the kind in flight: let go by the gate and not answered (never
    /// more than its cap).
    pub in_flight: u32,
    /// Its cap on requests in flight, if it has one.
    pub max_in_flight: Option<u32>,
    /// Requests waiting at the gate (for room, a window or a back-off's end).
    pub held: usize,
    /// Its sliding window of requests, if it has one.
    pub window: Option<WindowUseBody>,
    /// Its window of estimated tokens, if it has one.
    pub tokens: Option<WindowUseBody>,
    /// Milliseconds until its back-off after a 429 ends, while it backs off.
    pub backoff_ms: Option<u64>,
    /// 429s in a row since its last success.
    pub backoff_hits: u32,
    /// Each agent's cap on its requests of the kind in flight (`--agent-limit`), if it
    /// has one (left out otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_max_in_flight: Option<u32>,
    /// Each agent's window of requests of the kind (`--agent-limit`): at most this many
    /// sent in any `agent_window_ms`, if it has one (left out otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_window_max: Option<u32>,
    /// The length of each agent's window of requests of the kind, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_window_ms: Option<u64>,
    /// Requests waiting apart for their agent's share of the kind (not in `held`);
    /// left out when agents are not limited in the kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for_agents: Option<usize>,
}

/// One request kind's requests: in flight, and held back.
#[derive(Debug, Serialize, ToSchema)]
pub struct KindRequestsBody {
    /// The request kind.
    pub kind: String,
    /// Its requests in flight: sent to an executor (let go by its gate, if it has
    /// one) and not answered.
    pub in_flight: usize,
    /// Its requests held back: made, not answered, not sent yet.
    pub held: usize,
}

/// The queue at a glance, and one row per live task, in the policy's order.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct QueueBody {
    /// Tasks started and not ended.
    pub running: usize,
    /// The most tasks started at once, if limited.
    pub max_running: Option<usize>,
    /// Tasks waiting for a slot.
    pub queued: usize,
    /// Tasks waiting for dependencies.
    pub blocked: usize,
    /// Tasks in the run queue.
    pub ready: usize,
    /// Waiting tasks by reason.
    pub waiting: WaitingBody,
    /// Requests in flight: sent to an executor (let go by their kind's gate, if it has
    /// one) and not answered. Held requests are not counted here.
    pub in_flight: usize,
    /// Requests held back: waiting at their kind's gate (for room under its cap, a
    /// window, or a 429 back-off's end), behind their agent's cap, or for the next
    /// day's budget (`budget_held`).
    pub held_requests: usize,
    /// `in_flight` and `held_requests` by request kind (kinds with any), by kind.
    pub by_kind: Vec<KindRequestsBody>,
    /// Whether a rate limit holds anything back now.
    pub rate_limited: bool,
    /// Kinds backing off after a 429, with the milliseconds left.
    pub backoffs: Vec<BackoffBody>,
    /// The counters over the whole run (a store keeps them across restarts;
    /// `total_wait` is over every task that got a slot; the wait statistics shown are
    /// `waits`).
    #[schema(value_type = Object)]
    pub stats: Stats,
    /// The wait statistics (average, median, 95th percentile, longest), all over the
    /// latest tasks that ended, with one definition of a wait: for a slot or a rate
    /// limit. The web page and `spool top` show these.
    pub waits: WaitSummary,
    /// The run-queue policy (`fifo`, `priority`, `computed`, `fair-share`, or an
    /// embedder's own): `details` come in its order.
    pub policy: String,
    /// Every request kind's gate, by kind (a kind has one once it is limited or once a
    /// 429 backed it off).
    pub gates: Vec<GateBody>,
    /// The live tasks, in the policy's order (each row's `position`): the order it
    /// would pick them in if all were waiting to go now. Fifo: by submission;
    /// priority: by level, then by submission; computed: by score; fair share: the
    /// agent with the smallest share of running tasks first.
    pub details: Vec<QueueDetailBody>,
    /// LLM requests held until the next UTC day's budget: present on a server with
    /// budgets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_held: Option<BudgetHeldBody>,
}

/// LLM requests waiting for the next day's budget (the day's was spent).
#[derive(Debug, Serialize, ToSchema)]
pub struct BudgetHeldBody {
    /// How many.
    pub requests: usize,
    /// Milliseconds until they go (the next UTC day); `null` when none is held.
    pub remaining_ms: Option<u64>,
}

/// A kind backing off after a 429.
#[derive(Debug, Serialize, ToSchema)]
pub struct BackoffBody {
    /// The request kind.
    pub kind: String,
    /// Milliseconds until it sends again.
    pub remaining_ms: u64,
}

/// The queue's state and details.
#[utoipa::path(get, path = "/v1/queue", operation_id = "get_queue", responses(
    (status = 200, body = QueueBody),
    (status = 503, description = "Starting: the views are not published yet (`Retry-After`)", body = Problem, content_type = "application/problem+json"),
))]
pub(crate) async fn get(State(state): State<AppState>) -> Json<QueueBody> {
    let views = state.inner.views.latest();
    let Some(queue) = &views.queue else {
        return Json(QueueBody::default());
    };
    // The scheduler's time now: the views' plus their age (an idle loop publishes
    // nothing, and a wait shown must still grow).
    let now = views.read_now();
    Json(QueueBody {
        running: queue.running,
        max_running: views.max_running,
        queued: queue.queued,
        blocked: queue.blocked,
        ready: queue.ready,
        waiting: WaitingBody {
            requests: queue.waiting.requests,
            timer: queue.waiting.timer,
            children: queue.waiting.children,
            slot: queue.waiting.slot,
            dependencies: queue.waiting.dependencies,
        },
        in_flight: queue.in_flight,
        held_requests: queue.held_requests,
        by_kind: queue
            .by_kind
            .iter()
            .map(|k| KindRequestsBody {
                kind: k.kind.to_string(),
                in_flight: k.in_flight,
                held: k.held,
            })
            .collect(),
        rate_limited: queue.rate_limited,
        backoffs: queue
            .backoffs
            .iter()
            .map(|(kind, until)| BackoffBody {
                kind: kind.to_string(),
                remaining_ms: millis(until.saturating_since(now)),
            })
            .collect(),
        stats: queue.stats.clone(),
        waits: views.waits,
        policy: views.policy.to_owned(),
        gates: views.gates.iter().map(|g| gate_body(g, now)).collect(),
        budget_held: views.spend.as_ref().map(|spend| BudgetHeldBody {
            requests: spend.held,
            remaining_ms: spend.held_until.map(|at| millis(at.saturating_since(now))),
        }),
        details: views
            .details
            .iter()
            .zip(1..)
            .map(|((d, agent), position)| QueueDetailBody {
                position,
                id: d.id.get(),
                agent: agent.clone(),
                task_type: d.type_name.to_owned(),
                priority: d.priority.to_string(),
                state: state_tag(&d.state).to_owned(),
                age_ms: millis(d.age + now.saturating_since(views.now)),
                depth: d.depth,
                iteration: d.iteration,
                score: d.score,
                waits_on: match &d.state {
                    TaskState::Waiting(reason) => Some(reason.to_string()),
                    _ => None,
                },
                since_ms: views.tasks.get(&d.id).map_or(0, |row| {
                    let since = row.timeline.since().unwrap_or(row.created_at);
                    millis(now.saturating_since(since))
                }),
            })
            .collect(),
    })
}

fn gate_body(gate: &GateView, now: spool_core::Time) -> GateBody {
    GateBody {
        kind: gate.kind.to_string(),
        in_flight: gate.in_flight,
        max_in_flight: gate.max_in_flight,
        held: gate.held,
        window: gate.window.map(|(used, max, per)| WindowUseBody {
            used: used.into(),
            max: max.into(),
            per_ms: millis(per),
        }),
        tokens: gate.tokens.map(|(used, max, per)| WindowUseBody {
            used,
            max,
            per_ms: millis(per),
        }),
        backoff_ms: gate
            .backoff_until
            .map(|until| millis(until.saturating_since(now))),
        backoff_hits: gate.backoff_hits,
        agent_max_in_flight: gate.agent_limits.and_then(|l| l.max_in_flight),
        agent_window_max: gate.agent_limits.and_then(|l| l.window).map(|(max, _)| max),
        agent_window_ms: gate
            .agent_limits
            .and_then(|l| l.window)
            .map(|(_, per)| millis(per)),
        waiting_for_agents: gate
            .agent_limits
            .is_some()
            .then_some(gate.waiting_for_agents),
    }
}
