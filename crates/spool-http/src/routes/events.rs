//! The event stream: one Server-Sent Event per trace event, its `id` the event's
//! sequence number. A client that reconnects with `Last-Event-ID` gets every event
//! after it that the ring still holds; if the ring no longer holds the one right
//! after it, or the id is beyond the newest event there is, an `event: gap` comes
//! first, saying from where events resume.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse as _;
use axum::response::sse::{Event, KeepAlive, Sse};
use serde::{Deserialize, Serialize};
use spool_core::TraceEvent;
use utoipa::IntoParams;

use crate::problem::Problem;
use crate::state::AppState;
use crate::views::ViewsHandle;

/// How many events one SSE batch carries at most.
const BATCH: usize = 512;

/// The filter of `GET /v1/events`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    /// Only this task's events.
    pub(crate) task: Option<u64>,
}

/// One trace event as sent.
#[derive(Debug, Serialize)]
struct EventBody {
    seq: u64,
    time_ms: u128,
    task: u64,
    from: String,
    to: String,
    cause: String,
}

/// An event id as `Last-Event-ID` gives it: 1 to 19 ASCII digits, nothing else (the
/// document's pattern, so what it allows the server takes).
fn event_id(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// An `event: gap`: the events after `after` up to `resumes_at` are not in the stream.
#[derive(Debug, PartialEq, Eq)]
struct Gap {
    after: u64,
    resumes_at: u64,
}

/// Where a stream resumed after event `after` goes on, given the oldest and newest
/// events the ring holds: `None` when it goes on right after it. The event after
/// `after` may be gone from the ring (it resumes at the oldest kept), or `after` may
/// be beyond the newest event there is (an id from another store, or made up: it
/// resumes after the newest, with the events published from now on).
fn resume_gap(after: u64, first: Option<u64>, last: Option<u64>) -> Option<Gap> {
    let (first, last) = (first?, last?);
    if after > last {
        Some(Gap {
            after,
            resumes_at: last + 1,
        })
    } else if first > after.saturating_add(1) {
        Some(Gap {
            after,
            resumes_at: first,
        })
    } else {
        None
    }
}

fn event(e: &TraceEvent) -> Event {
    let body = EventBody {
        seq: e.seq,
        time_ms: e.time.as_duration().as_millis(),
        task: e.task.get(),
        from: e.from.to_string(),
        to: e.to.to_string(),
        cause: e.cause.to_string(),
    };
    Event::default()
        .id(e.seq.to_string())
        .event("transition")
        .data(serde_json::to_string(&body).unwrap_or_default())
}

/// The trace as Server-Sent Events (`event: transition`, `id: SEQ`); resumable with
/// `Last-Event-ID`.
#[utoipa::path(get, path = "/v1/events", operation_id = "stream_events", params(EventsQuery,
    ("Last-Event-ID" = Option<String>, Header, nullable = false, min_length = 1, max_length = 19, pattern = "^[0-9]{1,19}$",
        description = "Resume after this event: its id (`id:` of the event), 1 to 19 digits")),
    responses(
        (status = 200, description = "text/event-stream: one event per trace event", content_type = "text/event-stream", headers(
            ("X-Spool-Events-After" = u64, description = "The sequence number after which the stream starts: its Last-Event-ID, or the newest event when it had none"),
        )),
        (status = 400, description = "`Last-Event-ID` is not an event's id, or the query is not `task=ID`", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn stream(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, Problem> {
    let Query(query) = query.map_err(|e| Problem::bad_request(e.body_text()))?;
    let last = match headers.get("last-event-id") {
        None => None,
        Some(value) => Some(event_id(value.as_bytes()).ok_or_else(|| {
            Problem::bad_request("Last-Event-ID must be an event's id (1 to 19 digits)")
        })?),
    };
    let views = state.inner.views.clone();
    let task = query.task;
    // Without Last-Event-ID the stream starts at what the ring holds now.
    let start = match last {
        Some(seq) => seq,
        None => views.with_ring(|ring| ring.last_seq()).unwrap_or(0),
    };
    let published = views.subscribe();
    let closing = state.inner.closing.subscribe();
    // A resumed stream checks its start against the ring once the ring holds events
    // (a server just started publishes none before its first turn).
    let checked = last.is_none();
    let stream = futures::stream::unfold(
        (start, checked, published, closing, Vec::<Event>::new()),
        move |(mut after, mut checked, mut published, mut closing, mut queue)| {
            let views = views.clone();
            async move {
                loop {
                    if let Some(next) = queue.pop() {
                        return Some((
                            Ok::<Event, Infallible>(next),
                            (after, checked, published, closing, queue),
                        ));
                    }
                    let batch = next_batch(&views, &mut after, &mut checked, task);
                    if !batch.is_empty() {
                        queue = batch;
                        continue;
                    }
                    if *closing.borrow() {
                        return None;
                    }
                    tokio::select! {
                        changed = published.changed() => if changed.is_err() { return None },
                        _ = closing.changed() => return None,
                    }
                }
            }
        },
    );
    let sse = Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)));
    // Where the stream starts (the id after which its first event comes): what a
    // client merging several streams needs to resume one that has sent nothing yet.
    let mut response = sse.into_response();
    response
        .headers_mut()
        .insert(START_HEADER, axum::http::HeaderValue::from(start));
    Ok(response)
}

/// The response header of `GET /v1/events` giving the sequence number after which the
/// stream starts: its `Last-Event-ID`, or the newest event when it had none.
pub const START_HEADER: &str = "x-spool-events-after";

/// The next events for a stream that has sent those up to `after` (only `task`'s, if
/// given), and moves `after` past them; a `gap` event comes before them if the ring has
/// dropped events the stream had not sent. They are in reverse order, for the stream
/// to pop: the last goes out first. A resumed stream (`checked` false) checks its
/// start against the ring once the ring holds events.
fn next_batch(
    views: &ViewsHandle,
    after: &mut u64,
    checked: &mut bool,
    task: Option<u64>,
) -> Vec<Event> {
    let (gap, events, newest) = views.with_ring(|ring| {
        let gap = if *checked {
            None
        } else {
            resume_gap(*after, ring.first_seq(), ring.last_seq())
        };
        *checked = *checked || ring.last_seq().is_some();
        if let Some(gap) = &gap {
            *after = gap.resumes_at - 1;
        }
        let events = ring.after(*after, BATCH, |e| task.is_none_or(|t| e.task.get() == t));
        (gap, events, ring.last_seq())
    });
    let mut batch: Vec<Event> = Vec::new();
    if let Some(gap) = gap {
        batch.push(Event::default().event("gap").data(format!(
            "{{\"after\":{},\"resumes_at\":{}}}",
            gap.after, gap.resumes_at
        )));
    }
    if let Some(last) = events.last() {
        *after = last.seq;
    } else if let Some(newest) = newest.filter(|n| *n > *after && task.is_some()) {
        // Skip over what was filtered out, so a filtered stream moves on.
        *after = newest;
    }
    batch.extend(events.iter().map(event));
    batch.reverse();
    batch
}
