//! The whole `/metrics` text of a small run on virtual time, pinned byte for byte:
//! every family, label and number the views give it, in order.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use spool_core::{
    Config, Delivery, Kind, NewTask, Request, RequestError, RequestKey, RequestLimits, Scheduler,
    Step, TaskId, TaskLimits, Time, Timeline, task_fn,
};
use spool_runtime::TurnStats;
use spool_test::{Mock, TestScheduler};

use super::text;
use crate::histogram::TaskHistograms;
use crate::views::{RequestCounts, TaskRow, TaskRows, Views};

/// A task that makes `request`, then completes with its answer (or fails with its
/// error).
fn ask(name: &'static str, request: Request) -> NewTask {
    let mut request = Some(request);
    NewTask::new(task_fn(name, move |cx| {
        if let Some(request) = request.take() {
            cx.request(request);
            return Step::Wait;
        }
        match cx.take_answer() {
            Some(answer) => Step::Done(
                answer
                    .result
                    .map_err(|error| error.into_task_error(answer.number)),
            ),
            None => Step::Wait,
        }
    }))
}

/// The views of `ts` as the publisher makes them, at generation 7, with the loop's
/// turns given (they are measured on the wall clock, not on the test's).
fn views_of(ts: &TestScheduler) -> Views {
    let core = ts.core();
    let mut timelines: BTreeMap<_, Timeline> = BTreeMap::new();
    for event in ts.trace_events() {
        timelines.entry(event.task).or_default().take(event);
    }
    let mut tasks = TaskRows::default();
    let mut histograms = TaskHistograms::default();
    for info in core.tasks() {
        let timeline = timelines.remove(&info.id).unwrap_or_default();
        if let Some(end) = timeline.ended() {
            let _ = histograms.observe(&timeline, info.created_at, end);
        }
        tasks.insert(TaskRow::new(info, Vec::new(), timeline));
    }
    let mut turns = TurnStats::default();
    turns.turns = 12;
    turns.total = Duration::from_micros(2_500);
    turns.max = Duration::from_micros(750);
    Views {
        generation: 7,
        now: core.now(),
        tasks,
        queue: Some(core.queue_state()),
        gates: core.gates(),
        requests: RequestCounts::of(core.trace().answers()),
        histograms,
        stats: core.stats().clone(),
        turns,
        ..Views::default()
    }
}

/// Three tasks run at once; the LLM takes one request at a time. At 0 s a task asks
/// the LLM, one lists files (answered at 300 ms), one searches with a tool whose name
/// needs escaping (never answered), and four wait in the queue; one of them is canceled
/// there. At 300 ms the lister completes, a task fails, and a task's LLM request is held
/// at its kind's gate; at 500 ms the LLM answers the first, the held request goes and
/// another is held; at 1 s the LLM answers that one 429 with `Retry-After: 5s`. The
/// text is read at 2 s, with 4 s of the back-off left.
#[test]
fn the_metrics_text_of_a_small_run_is_pinned() {
    let config = Config::new()
        .record_trace(true)
        .limits(TaskLimits::new().max_running(3))
        .requests(RequestLimits::new().max_in_flight(Kind::Llm, 1));
    let mut ts = TestScheduler::with_scheduler(Scheduler::new(config));
    let search = Kind::tool("find \\\"it\"\n");
    ts.hold(Kind::Llm);
    ts.hold(search.clone());
    let ls = Kind::tool("ls");
    ts.mock_with_latency(ls.clone(), Mock::Fixed(json!(["a.txt"])), ms(300));
    let asker = ts.submit(ask("asker", Request::new(Kind::Llm, json!("question"))));
    ts.submit(ask("lister", Request::new(ls, json!({}))));
    ts.submit(ask("searcher", Request::new(search, json!({}))));
    ts.submit(NewTask::new(task_fn("failing", |_cx| Step::fail("no"))));
    let canceled = ts.submit(ask("second", Request::new(Kind::Llm, json!("question"))));
    let third = ts.submit(ask("third", Request::new(Kind::Llm, json!("question"))));
    ts.submit(ask("fourth", Request::new(Kind::Llm, json!("question"))));
    ts.submit(ask("fifth", Request::new(Kind::Llm, json!("question"))));
    ts.step_until_idle();
    assert_eq!(ts.cancel(canceled), Ok(()));
    ts.step_until_idle();
    ts.advance(ms(300));
    ts.step_until_idle();
    ts.advance(ms(200));
    assert_eq!(ts.answer(held(&ts, asker), "answer"), Delivery::Delivered);
    ts.step_until_idle();
    ts.advance(ms(500));
    let refused = Err(RequestError::RateLimited {
        retry_after: Some(Duration::from_secs(5)),
    });
    assert_eq!(ts.respond(held(&ts, third), refused), Delivery::BackedOff);
    ts.step_until_idle();
    ts.advance(ms(1_000));
    assert_eq!(ts.now(), Time::from_duration(ms(2_000)));

    assert_eq!(text(&views_of(&ts), 3), PINNED);
}

/// Before the loop has published a queue, the families read from it are left out,
/// help and type too; the others are written as they are with one.
#[test]
fn without_a_queue_its_families_are_left_out() {
    let from_queue = [
        "spool_requests_in_flight",
        "spool_requests_held",
        "spool_queue_depth",
        "spool_queue_blocked",
        "spool_queue_ready",
        "spool_rate_limited",
        "spool_backoff_seconds",
    ];
    let types = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .map(str::to_owned)
            .collect()
    };
    let expected: Vec<String> = types(PINNED)
        .into_iter()
        .filter(|t| !from_queue.iter().any(|q| t.split(' ').next() == Some(q)))
        .collect();
    let text = text(&Views::default(), 0);
    assert_eq!(types(&text), expected);
    assert_eq!(expected.len(), types(PINNED).len() - from_queue.len());
    assert!(
        text.contains("\nspool_tasks{state=\"queued\"} 0\n"),
        "{text}"
    );
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The key of the request `task` made that the test holds.
fn held(ts: &TestScheduler, task: TaskId) -> RequestKey {
    let key = ts
        .held_requests()
        .iter()
        .map(|h| h.request.key)
        .find(|key| key.task() == task);
    key.unwrap_or_else(|| panic!("task {task} has no request held"))
}

/// The whole text the run above gives.
const PINNED: &str = r##"# HELP spool_tasks Tasks in the table by state.
# TYPE spool_tasks gauge
spool_tasks{state="blocked"} 0
spool_tasks{state="canceled"} 1
spool_tasks{state="completed"} 2
spool_tasks{state="failed"} 1
spool_tasks{state="queued"} 1
spool_tasks{state="ready"} 0
spool_tasks{state="running"} 0
spool_tasks{state="waiting"} 3
# HELP spool_tasks_submitted_total Tasks submitted.
# TYPE spool_tasks_submitted_total counter
spool_tasks_submitted_total 8
# HELP spool_tasks_completed_total Tasks that completed with a value.
# TYPE spool_tasks_completed_total counter
spool_tasks_completed_total 2
# HELP spool_tasks_failed_total Tasks that completed with an error.
# TYPE spool_tasks_failed_total counter
spool_tasks_failed_total 1
# HELP spool_tasks_canceled_total Tasks canceled.
# TYPE spool_tasks_canceled_total counter
spool_tasks_canceled_total 1
# HELP spool_tasks_rejected_total Submissions rejected.
# TYPE spool_tasks_rejected_total counter
spool_tasks_rejected_total 0
# HELP spool_polls_total Task polls.
# TYPE spool_polls_total counter
spool_polls_total 8
# HELP spool_requests_sent_total Requests sent out.
# TYPE spool_requests_sent_total counter
spool_requests_sent_total 5
# HELP spool_answers_total Answers delivered.
# TYPE spool_answers_total counter
spool_answers_total 2
# HELP spool_answers_dropped_total Answers dropped (late or unknown).
# TYPE spool_answers_dropped_total counter
spool_answers_dropped_total 0
# HELP spool_rate_limited_total 429 answers backed off from, and submissions told rate_limited.
# TYPE spool_rate_limited_total counter
spool_rate_limited_total 1
# HELP spool_deadlines_exceeded_total Tasks failed by their deadline.
# TYPE spool_deadlines_exceeded_total counter
spool_deadlines_exceeded_total 0
# HELP spool_requests_total Answers by request kind and outcome: ok, error, or backed_off (a 429 that sent the request back to its gate).
# TYPE spool_requests_total counter
spool_requests_total{kind="llm",outcome="backed_off"} 1
spool_requests_total{kind="llm",outcome="error"} 0
spool_requests_total{kind="llm",outcome="ok"} 1
spool_requests_total{kind="tool:ls",outcome="backed_off"} 0
spool_requests_total{kind="tool:ls",outcome="error"} 0
spool_requests_total{kind="tool:ls",outcome="ok"} 1
# HELP spool_requests_in_flight Requests sent to an executor and not answered, by kind (held ones not counted).
# TYPE spool_requests_in_flight gauge
spool_requests_in_flight{kind="llm"} 0
spool_requests_in_flight{kind="tool:find \\\"it\"\n"} 1
# HELP spool_requests_held Requests held back by a limiter (at their kind's gate or behind their agent's cap), by kind.
# TYPE spool_requests_held gauge
spool_requests_held{kind="llm"} 2
spool_requests_held{kind="tool:find \\\"it\"\n"} 0
# HELP spool_queue_depth Tasks waiting for a slot.
# TYPE spool_queue_depth gauge
spool_queue_depth 1
# HELP spool_queue_blocked Tasks waiting for dependencies.
# TYPE spool_queue_blocked gauge
spool_queue_blocked 0
# HELP spool_queue_ready Tasks in the run queue.
# TYPE spool_queue_ready gauge
spool_queue_ready 0
# HELP spool_rate_limited 1 while a rate limit holds anything back.
# TYPE spool_rate_limited gauge
spool_rate_limited 1
# HELP spool_backoff_seconds Seconds left of a kind's 429 back-off.
# TYPE spool_backoff_seconds gauge
spool_backoff_seconds{kind="llm"} 4
# HELP spool_task_wait_seconds Each ended task's time waiting for a slot or a rate limit.
# TYPE spool_task_wait_seconds histogram
spool_task_wait_seconds_bucket{le="0.005"} 3
spool_task_wait_seconds_bucket{le="0.01"} 3
spool_task_wait_seconds_bucket{le="0.025"} 3
spool_task_wait_seconds_bucket{le="0.05"} 3
spool_task_wait_seconds_bucket{le="0.1"} 3
spool_task_wait_seconds_bucket{le="0.25"} 3
spool_task_wait_seconds_bucket{le="0.5"} 4
spool_task_wait_seconds_bucket{le="1"} 4
spool_task_wait_seconds_bucket{le="2.5"} 4
spool_task_wait_seconds_bucket{le="5"} 4
spool_task_wait_seconds_bucket{le="10"} 4
spool_task_wait_seconds_bucket{le="30"} 4
spool_task_wait_seconds_bucket{le="60"} 4
spool_task_wait_seconds_bucket{le="120"} 4
spool_task_wait_seconds_bucket{le="300"} 4
spool_task_wait_seconds_bucket{le="+Inf"} 4
spool_task_wait_seconds_sum 0.3
spool_task_wait_seconds_count 4
# HELP spool_task_duration_seconds Each ended task's time from its submission to its end.
# TYPE spool_task_duration_seconds histogram
spool_task_duration_seconds_bucket{le="0.005"} 1
spool_task_duration_seconds_bucket{le="0.01"} 1
spool_task_duration_seconds_bucket{le="0.025"} 1
spool_task_duration_seconds_bucket{le="0.05"} 1
spool_task_duration_seconds_bucket{le="0.1"} 1
spool_task_duration_seconds_bucket{le="0.25"} 1
spool_task_duration_seconds_bucket{le="0.5"} 4
spool_task_duration_seconds_bucket{le="1"} 4
spool_task_duration_seconds_bucket{le="2.5"} 4
spool_task_duration_seconds_bucket{le="5"} 4
spool_task_duration_seconds_bucket{le="10"} 4
spool_task_duration_seconds_bucket{le="30"} 4
spool_task_duration_seconds_bucket{le="60"} 4
spool_task_duration_seconds_bucket{le="120"} 4
spool_task_duration_seconds_bucket{le="300"} 4
spool_task_duration_seconds_bucket{le="+Inf"} 4
spool_task_duration_seconds_sum 1.1
spool_task_duration_seconds_count 4
# HELP spool_request_wait_seconds Each wait of a task on one request, by kind (observed when the task ends).
# TYPE spool_request_wait_seconds histogram
spool_request_wait_seconds_bucket{kind="llm",le="0.005"} 0
spool_request_wait_seconds_bucket{kind="llm",le="0.01"} 0
spool_request_wait_seconds_bucket{kind="llm",le="0.025"} 0
spool_request_wait_seconds_bucket{kind="llm",le="0.05"} 0
spool_request_wait_seconds_bucket{kind="llm",le="0.1"} 0
spool_request_wait_seconds_bucket{kind="llm",le="0.25"} 0
spool_request_wait_seconds_bucket{kind="llm",le="0.5"} 1
spool_request_wait_seconds_bucket{kind="llm",le="1"} 1
spool_request_wait_seconds_bucket{kind="llm",le="2.5"} 1
spool_request_wait_seconds_bucket{kind="llm",le="5"} 1
spool_request_wait_seconds_bucket{kind="llm",le="10"} 1
spool_request_wait_seconds_bucket{kind="llm",le="30"} 1
spool_request_wait_seconds_bucket{kind="llm",le="60"} 1
spool_request_wait_seconds_bucket{kind="llm",le="120"} 1
spool_request_wait_seconds_bucket{kind="llm",le="300"} 1
spool_request_wait_seconds_bucket{kind="llm",le="+Inf"} 1
spool_request_wait_seconds_sum{kind="llm"} 0.5
spool_request_wait_seconds_count{kind="llm"} 1
spool_request_wait_seconds_bucket{kind="tool:ls",le="0.005"} 0
spool_request_wait_seconds_bucket{kind="tool:ls",le="0.01"} 0
spool_request_wait_seconds_bucket{kind="tool:ls",le="0.025"} 0
spool_request_wait_seconds_bucket{kind="tool:ls",le="0.05"} 0
spool_request_wait_seconds_bucket{kind="tool:ls",le="0.1"} 0
spool_request_wait_seconds_bucket{kind="tool:ls",le="0.25"} 0
spool_request_wait_seconds_bucket{kind="tool:ls",le="0.5"} 1
spool_request_wait_seconds_bucket{kind="tool:ls",le="1"} 1
spool_request_wait_seconds_bucket{kind="tool:ls",le="2.5"} 1
spool_request_wait_seconds_bucket{kind="tool:ls",le="5"} 1
spool_request_wait_seconds_bucket{kind="tool:ls",le="10"} 1
spool_request_wait_seconds_bucket{kind="tool:ls",le="30"} 1
spool_request_wait_seconds_bucket{kind="tool:ls",le="60"} 1
spool_request_wait_seconds_bucket{kind="tool:ls",le="120"} 1
spool_request_wait_seconds_bucket{kind="tool:ls",le="300"} 1
spool_request_wait_seconds_bucket{kind="tool:ls",le="+Inf"} 1
spool_request_wait_seconds_sum{kind="tool:ls"} 0.3
spool_request_wait_seconds_count{kind="tool:ls"} 1
# HELP spool_loop_turn_seconds The run loop's turns.
# TYPE spool_loop_turn_seconds summary
spool_loop_turn_seconds_sum 0.0025
spool_loop_turn_seconds_count 12
# HELP spool_loop_turn_seconds_max The longest turn so far.
# TYPE spool_loop_turn_seconds_max gauge
spool_loop_turn_seconds_max 0.00075
# HELP spool_views_generation Publications of the views.
# TYPE spool_views_generation counter
spool_views_generation 7
# HELP spool_http_too_many_requests_total Submissions answered 429 (a full queue).
# TYPE spool_http_too_many_requests_total counter
spool_http_too_many_requests_total 3
"##;
