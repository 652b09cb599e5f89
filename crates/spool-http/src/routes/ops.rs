//! Operations: `/healthz` (no token) and `/metrics` in the Prometheus text format, both
//! from the views.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::histogram::Histogram;
use crate::state::AppState;
use crate::views::{STATE_TAGS, Views, state_tag};

/// `ok N` (N: the publications of the views so far) once the loop has published its
/// views; `503` `starting 0` before: the API's reads are not answered yet.
#[utoipa::path(get, path = "/healthz", operation_id = "healthz", security(()), responses(
    (status = 200, description = "`ok N`: ready, N publications so far", content_type = "text/plain"),
    (status = 503, description = "`starting 0`: the views are not published yet", content_type = "text/plain"),
))]
pub(crate) async fn healthz(State(state): State<AppState>) -> Response {
    let views = state.inner.views.latest();
    if views.generation == 0 {
        let mut response = (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "starting 0\n".to_owned(),
        )
            .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    }
    format!("ok {}\n", views.generation).into_response()
}

/// The metrics, in the Prometheus text format (version 0.0.4).
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", responses((status = 200, description = "Prometheus text", content_type = "text/plain")))]
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    let views = state.inner.views.latest();
    let too_many = state
        .inner
        .too_many
        .load(std::sync::atomic::Ordering::Relaxed);
    let mut response = text(&views, too_many).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// The metrics text of `views`, with `too_many` submissions answered 429.
fn text(views: &Views, too_many: u64) -> String {
    let mut out = String::new();
    let mut by_state: BTreeMap<&str, u64> = STATE_TAGS.iter().map(|t| (*t, 0)).collect();
    for row in views.tasks.values() {
        *by_state.entry(state_tag(&row.state)).or_insert(0) += 1;
    }
    family(
        &mut out,
        "spool_tasks",
        "gauge",
        "Tasks in the table by state.",
    );
    for (tag, n) in &by_state {
        let _ = writeln!(out, "spool_tasks{{state=\"{tag}\"}} {n}");
    }
    let s = &views.stats;
    for (name, help, value) in [
        (
            "spool_tasks_submitted_total",
            "Tasks submitted.",
            s.submitted,
        ),
        (
            "spool_tasks_completed_total",
            "Tasks that completed with a value.",
            s.completed,
        ),
        (
            "spool_tasks_failed_total",
            "Tasks that completed with an error.",
            s.failed,
        ),
        ("spool_tasks_canceled_total", "Tasks canceled.", s.canceled),
        (
            "spool_tasks_rejected_total",
            "Submissions rejected.",
            s.rejected,
        ),
        ("spool_polls_total", "Task polls.", s.polls),
        (
            "spool_requests_sent_total",
            "Requests sent out.",
            s.requests,
        ),
        ("spool_answers_total", "Answers delivered.", s.answers),
        (
            "spool_answers_dropped_total",
            "Answers dropped (late or unknown).",
            s.dropped_answers,
        ),
        (
            "spool_rate_limited_total",
            "429 answers backed off from, and submissions told rate_limited.",
            s.rate_limited,
        ),
        (
            "spool_deadlines_exceeded_total",
            "Tasks failed by their deadline.",
            s.deadlines_exceeded,
        ),
    ] {
        family(&mut out, name, "counter", help);
        let _ = writeln!(out, "{name} {value}");
    }
    family(
        &mut out,
        "spool_requests_total",
        "counter",
        "Answers by request kind and outcome: ok, error, or backed_off (a 429 that sent the request back to its gate).",
    );
    for ((kind, outcome), n) in &views.requests.by_kind {
        let _ = writeln!(
            out,
            "spool_requests_total{{kind=\"{}\",outcome=\"{outcome}\"}} {n}",
            escape(kind)
        );
    }
    if let Some(q) = &views.queue {
        // Both by kind: each kind with a gate, or with requests in flight or held.
        let mut kinds: BTreeMap<String, (usize, usize)> = views
            .gates
            .iter()
            .map(|g| (g.kind.to_string(), (0, 0)))
            .collect();
        for k in &q.by_kind {
            kinds.insert(k.kind.to_string(), (k.in_flight, k.held));
        }
        for (name, help, held) in [
            (
                "spool_requests_in_flight",
                "Requests sent to an executor and not answered, by kind (held ones not counted).",
                false,
            ),
            (
                "spool_requests_held",
                "Requests held back by a limiter (at their kind's gate or behind their agent's cap), by kind.",
                true,
            ),
        ] {
            family(&mut out, name, "gauge", help);
            for (kind, (in_flight, held_n)) in &kinds {
                let n = if held { held_n } else { in_flight };
                let _ = writeln!(out, "{name}{{kind=\"{}\"}} {n}", escape(kind));
            }
        }
        for (name, help, value) in [
            ("spool_queue_depth", "Tasks waiting for a slot.", q.queued),
            (
                "spool_queue_blocked",
                "Tasks waiting for dependencies.",
                q.blocked,
            ),
            ("spool_queue_ready", "Tasks in the run queue.", q.ready),
        ] {
            family(&mut out, name, "gauge", help);
            let _ = writeln!(out, "{name} {value}");
        }
        family(
            &mut out,
            "spool_rate_limited",
            "gauge",
            "1 while a rate limit holds anything back.",
        );
        let _ = writeln!(out, "spool_rate_limited {}", u8::from(q.rate_limited));
        family(
            &mut out,
            "spool_backoff_seconds",
            "gauge",
            "Seconds left of a kind's 429 back-off.",
        );
        for (kind, until) in &q.backoffs {
            let left = until.saturating_since(views.now).as_secs_f64();
            let _ = writeln!(
                out,
                "spool_backoff_seconds{{kind=\"{}\"}} {left}",
                escape(&kind.to_string())
            );
        }
    }
    let h = &views.histograms;
    family(
        &mut out,
        "spool_task_wait_seconds",
        "histogram",
        "Each ended task's time waiting for a slot or a rate limit.",
    );
    histogram(&mut out, "spool_task_wait_seconds", "", &h.wait);
    family(
        &mut out,
        "spool_task_duration_seconds",
        "histogram",
        "Each ended task's time from its submission to its end.",
    );
    histogram(&mut out, "spool_task_duration_seconds", "", &h.duration);
    family(
        &mut out,
        "spool_request_wait_seconds",
        "histogram",
        "Each wait of a task on one request, by kind (observed when the task ends).",
    );
    for (kind, waits) in &h.request_wait {
        let label = format!("kind=\"{}\",", escape(kind));
        histogram(&mut out, "spool_request_wait_seconds", &label, waits);
    }
    let t = &views.turns;
    family(
        &mut out,
        "spool_loop_turn_seconds",
        "summary",
        "The run loop's turns.",
    );
    let _ = writeln!(out, "spool_loop_turn_seconds_sum {}", t.total.as_secs_f64());
    let _ = writeln!(out, "spool_loop_turn_seconds_count {}", t.turns);
    family(
        &mut out,
        "spool_loop_turn_seconds_max",
        "gauge",
        "The longest turn so far.",
    );
    let _ = writeln!(out, "spool_loop_turn_seconds_max {}", t.max.as_secs_f64());
    family(
        &mut out,
        "spool_views_generation",
        "counter",
        "Publications of the views.",
    );
    let _ = writeln!(out, "spool_views_generation {}", views.generation);
    family(
        &mut out,
        "spool_http_too_many_requests_total",
        "counter",
        "Submissions answered 429 (a full queue).",
    );
    let _ = writeln!(out, "spool_http_too_many_requests_total {too_many}");
    out
}

/// A histogram's samples: `labels` (empty, or `name="value",` pairs each ending with a
/// comma) go before each bucket's `le`.
fn histogram(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    for (le, n) in h.buckets() {
        let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{le}\"}} {n}");
    }
    let labels = labels.trim_end_matches(',');
    let labels = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let _ = writeln!(out, "{name}_sum{labels} {}", h.sum().as_secs_f64());
    let _ = writeln!(out, "{name}_count{labels} {}", h.count());
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests;
