//! The event stream: one Server-Sent Event per trace event, its `id` the event's
//! sequence number. A client that reconnects with `Last-Event-ID` gets every event
//! after it that the ring still holds; if the ring no longer holds the one right
//! after it, or the id is beyond the newest event there is, an `event: gap` comes
//! first, saying from where events resume.
//!
//! Pieces of answers under way (`event: delta`, from the [`DeltaHub`]) go between
//! them, each before the trace events of its request's answer; a piece's id is
//! `SEQ:N`, the trace event sent before it and its own number, so that a stream
//! resumed from it goes on with both. Each server process numbers its pieces from a
//! base of its own, so a piece's id from another process is told apart.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse as _;
use axum::response::sse::{Event, KeepAlive, Sse};
use serde::{Deserialize, Serialize};
use spool_core::TraceEvent;
use utoipa::IntoParams;

use crate::deltas::{DeltaHub, KeptDelta};
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

/// A `Last-Event-ID`: a trace event's id (`SEQ`), or a piece's (`SEQ:N`).
fn resume_id(value: &[u8]) -> Option<(u64, Option<u64>)> {
    match value.iter().position(|b| *b == b':') {
        None => Some((event_id(value)?, None)),
        Some(at) => Some((event_id(&value[..at])?, Some(event_id(&value[at + 1..])?))),
    }
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

/// A piece of an answer under way as an event: `event: delta`, `id: SEQ:N` (`SEQ` the
/// trace event the stream sent before it).
fn delta_event(after: u64, delta: &KeptDelta) -> Event {
    Event::default()
        .id(format!("{after}:{}", delta.number))
        .event("delta")
        .data(&*delta.data)
}

/// Where a stream stands: the trace events and the pieces it has sent.
struct Cursor {
    /// The trace event sent last.
    after: u64,
    /// Whether a resumed stream's start has been checked against the ring.
    checked: bool,
    /// The piece sent last.
    delta_after: u64,
    /// Whether the stream still catches up from a `Last-Event-ID` (then only pieces of
    /// requests still live are sent).
    catching_up: bool,
}

/// The trace as Server-Sent Events (`event: transition`, `id: SEQ`), with the pieces
/// of answers under way (`event: delta`, `id: SEQ:N`); resumable with `Last-Event-ID`.
#[utoipa::path(get, path = "/v1/events", operation_id = "stream_events", params(EventsQuery,
    ("Last-Event-ID" = Option<String>, Header, nullable = false, min_length = 1, max_length = 39, pattern = "^[0-9]{1,19}(:[0-9]{1,19})?$",
        description = "Resume after this event: its id (`id:` of the event), `SEQ` (1 to 19 digits) for a trace event or `SEQ:N` for a piece of an answer")),
    responses(
        (status = 200, description = "text/event-stream: one event per trace event (`transition`), and one per piece of an answer under way (`delta`)", content_type = "text/event-stream", headers(
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
        Some(value) => Some(resume_id(value.as_bytes()).ok_or_else(|| {
            Problem::bad_request("Last-Event-ID must be an event's id (1 to 19 digits)")
        })?),
    };
    let views = state.inner.views.clone();
    let deltas = state.inner.deltas.clone();
    let task = query.task;
    // Without Last-Event-ID the stream starts at what the ring holds now.
    let start = match last {
        Some((seq, _)) => seq,
        None => views.with_ring(|ring| ring.last_seq()).unwrap_or(0),
    };
    let delta_after = pieces_after(last, &deltas);
    let added = deltas.subscribe();
    let published = views.subscribe();
    let closing = state.inner.closing.subscribe();
    // A resumed stream checks its start against the ring once the ring holds events
    // (a server just started publishes none before its first turn).
    let cursor = Cursor {
        after: start,
        checked: last.is_none(),
        delta_after,
        catching_up: last.is_some(),
    };
    let stream = futures::stream::unfold(
        (cursor, published, added, closing, Vec::<Event>::new()),
        move |(mut cursor, mut published, mut added, mut closing, mut queue)| {
            let views = views.clone();
            let deltas = deltas.clone();
            async move {
                loop {
                    if let Some(next) = queue.pop() {
                        return Some((
                            Ok::<Event, Infallible>(next),
                            (cursor, published, added, closing, queue),
                        ));
                    }
                    let batch = next_batch(&views, &deltas, &mut cursor, task);
                    if !batch.is_empty() {
                        queue = batch;
                        continue;
                    }
                    if *closing.borrow() {
                        return None;
                    }
                    tokio::select! {
                        changed = published.changed() => if changed.is_err() { return None },
                        changed = added.changed() => if changed.is_err() { return None },
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

/// The number of the piece after which a stream resumed from `last` (its
/// `Last-Event-ID`, if any) sends pieces: after a piece's id this hub gave, the
/// pieces after it; after an id it never gave (one of an earlier process of the
/// server, or made up) or a trace event's id, every piece kept of the requests still
/// live; without `Last-Event-ID`, those to come.
fn pieces_after(last: Option<(u64, Option<u64>)>, deltas: &DeltaHub) -> u64 {
    match last {
        None => deltas.newest(),
        Some((_, Some(number))) if deltas.gave(number) => number,
        Some(_) => 0,
    }
}

/// The response header of `GET /v1/events` giving the sequence number after which the
/// stream starts: its `Last-Event-ID`, or the newest event when it had none.
pub const START_HEADER: &str = "x-spool-events-after";

/// The next events for a stream at `cursor` (only `task`'s, if given), and moves the
/// cursor past them: the pieces of answers that came since the last batch, then the
/// trace events; a `gap` event comes first if the ring has dropped trace events the
/// stream had not sent. They are in reverse order, for the stream to pop: the last
/// goes out first. A resumed stream (`checked` false) checks its start against the
/// ring once the ring holds events.
///
/// The trace events are taken before the pieces: a piece is kept before its request's
/// answer reaches the loop, so every piece of an answer whose trace events are taken
/// is kept by then, and goes out before them.
fn next_batch(
    views: &ViewsHandle,
    deltas: &DeltaHub,
    cursor: &mut Cursor,
    task: Option<u64>,
) -> Vec<Event> {
    let Cursor {
        after,
        checked,
        delta_after,
        catching_up,
    } = cursor;
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
    let pieces = deltas.after(*delta_after, task, std::mem::take(catching_up));
    let mut batch: Vec<Event> = Vec::new();
    if let Some(gap) = &gap {
        batch.push(Event::default().event("gap").data(format!(
            "{{\"after\":{},\"resumes_at\":{}}}",
            gap.after, gap.resumes_at
        )));
    }
    // The pieces' ids name the trace event sent before them (after a gap, the one
    // the stream resumes after).
    let sent_before = *after;
    if let Some(last) = pieces.last() {
        *delta_after = last.number;
    }
    batch.extend(pieces.iter().map(|piece| delta_event(sent_before, piece)));
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;
    use spool_core::{Delta, RequestKey};
    use spool_runtime::Progress;

    use super::{pieces_after, resume_id};
    use crate::deltas::DeltaHub;

    /// A hub that has kept three pieces of one request still under way.
    fn three_pieces() -> DeltaHub {
        let hub = DeltaHub::new(16);
        let key: RequestKey =
            serde_json::from_value(json!({"task": 1, "number": 1, "slot": 0})).unwrap();
        for (seq, text) in ["a", "b", "c"].into_iter().enumerate() {
            let delta = Delta::text(seq as u64, text);
            hub.take(&Progress::Delta { key, delta: &delta });
        }
        hub
    }

    /// Streams a piece of its answer, then panics.
    struct BreaksMidway;

    impl spool_core::Executor for BreaksMidway {
        fn execute(
            &mut self,
            request: spool_core::OutboundRequest,
            replies: &mut spool_core::Replies<'_>,
        ) {
            replies
                .replier()
                .progress(request.key, Delta::text(0, "Hel"));
            panic!("the executor breaks midway");
        }
    }

    #[test]
    fn a_request_failed_for_a_dead_executor_leaves_no_live_pieces() {
        let builder =
            spool_runtime::Runtime::builder().executor(spool_core::Kind::Llm, BreaksMidway);
        let (builder, hub) = crate::deltas::publish_deltas(builder, 16);
        let mut runtime = builder.build();
        runtime
            .submit(spool_core::NewTask::new(spool_core::async_task(
                "once",
                |cx| async move {
                    cx.llm(json!("one")).await?;
                    Ok(json!("done"))
                },
            )))
            .unwrap();
        runtime.run_until_idle();
        assert_eq!(hub.after(0, None, false).len(), 1);
        assert!(hub.after(0, None, true).is_empty());
    }

    #[test]
    fn a_pieces_id_from_another_process_gets_every_piece_kept_of_live_requests() {
        let earlier = three_pieces();
        let now = three_pieces();
        let texts = |after: u64| -> Vec<String> {
            now.after(after, None, true)
                .iter()
                .map(|piece| {
                    let data: serde_json::Value = serde_json::from_str(&piece.data).unwrap();
                    data["text"].as_str().unwrap().to_owned()
                })
                .collect()
        };
        // The first piece of the earlier process: not one of this process's pieces.
        let theirs = earlier.after(0, None, true)[0].number;
        assert_eq!(
            texts(pieces_after(Some((0, Some(theirs))), &now)),
            ["a", "b", "c"]
        );
        // This process's first piece: the stream goes on after it.
        let ours = now.after(0, None, true)[0].number;
        assert_eq!(texts(pieces_after(Some((0, Some(ours))), &now)), ["b", "c"]);
        // Without a piece's id: every piece kept of live requests, or none of those
        // that came before the stream opened.
        assert_eq!(texts(pieces_after(Some((0, None)), &now)), ["a", "b", "c"]);
        assert!(texts(pieces_after(None, &now)).is_empty());
    }

    #[test]
    fn a_resume_id_is_a_trace_events_or_a_pieces() {
        assert_eq!(resume_id(b"5"), Some((5, None)));
        assert_eq!(resume_id(b"5:7"), Some((5, Some(7))));
        for bad in [&b"5:"[..], b":7", b"5:7:9", b"+1", b"5 :7", b""] {
            assert_eq!(resume_id(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
