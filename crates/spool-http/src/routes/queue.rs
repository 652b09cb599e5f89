//! The queue (seed 000's `queue_state` and `queue_details`), from the views.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use spool_core::Stats;
use utoipa::ToSchema;

use crate::routes::millis;
use crate::state::AppState;
use crate::views::state_tag;

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
}

/// The queue at a glance, and one row per live task, highest priority first.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct QueueBody {
    /// Tasks started and not ended.
    pub running: usize,
    /// Tasks waiting for a slot.
    pub queued: usize,
    /// Tasks waiting for dependencies.
    pub blocked: usize,
    /// Tasks in the run queue.
    pub ready: usize,
    /// Waiting tasks by reason.
    pub waiting: WaitingBody,
    /// Requests made and not answered.
    pub in_flight: usize,
    /// Requests held back by a limiter.
    pub held_requests: usize,
    /// Whether a rate limit holds anything back now.
    pub rate_limited: bool,
    /// Kinds backing off after a 429, with the milliseconds left.
    pub backoffs: Vec<BackoffBody>,
    /// The counters.
    #[schema(value_type = Object)]
    pub stats: Stats,
    /// The live tasks.
    pub details: Vec<QueueDetailBody>,
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
#[utoipa::path(get, path = "/v1/queue", operation_id = "get_queue", responses((status = 200, body = QueueBody)))]
pub(crate) async fn get(State(state): State<AppState>) -> Json<QueueBody> {
    let views = state.inner.views.latest();
    let Some(queue) = &views.queue else {
        return Json(QueueBody::default());
    };
    Json(QueueBody {
        running: queue.running,
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
        rate_limited: queue.rate_limited,
        backoffs: queue
            .backoffs
            .iter()
            .map(|(kind, until)| BackoffBody {
                kind: kind.to_string(),
                remaining_ms: millis(until.saturating_since(views.now)),
            })
            .collect(),
        stats: queue.stats.clone(),
        details: views
            .details
            .iter()
            .map(|(d, agent)| QueueDetailBody {
                id: d.id.get(),
                agent: agent.clone(),
                task_type: d.type_name.to_owned(),
                priority: d.priority.to_string(),
                state: state_tag(&d.state).to_owned(),
                age_ms: millis(d.age),
                depth: d.depth,
                iteration: d.iteration,
                score: d.score,
            })
            .collect(),
    })
}
