//! Tasks: submit, read, list with filters and a cursor, cancel; the task types; every
//! bad input with its exact problem; idempotency under concurrent repeats.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Api, Setup, TOKEN, problem, request, script_schema};

#[test]
fn a_task_is_submitted_read_and_listed() {
    let api = Api::start();
    let answer = api.call(
        "POST",
        "/v1/tasks",
        Some(r#"{"type": "script", "input": {"steps": 2}, "agent": "alice", "priority": "high"}"#),
    );
    assert_eq!(answer.status, 202, "{answer:?}");
    assert_eq!(
        answer.json,
        json!({"id": 1, "admission": {"status": "ready"}})
    );
    let task = api.wait_for("/v1/tasks/1", |t| t["state"] == "completed");
    assert_eq!(task["type"], "script");
    assert_eq!(task["agent"], "alice");
    assert_eq!(task["priority"], "high");
    assert_eq!(task["error"], Value::Null);
    assert_eq!(
        task["result"],
        json!({"answers": [{"echo": {"step": 1}}, {"echo": {"step": 2}}]})
    );
    // Its time waiting on the LLM is counted by kind.
    assert!(task["timing"]["waiting_ms"].get("llm").is_some(), "{task}");
    let list = api.call("GET", "/v1/tasks", None);
    assert_eq!(list.status, 200);
    assert_eq!(list.json["tasks"].as_array().map(Vec::len), Some(1));
    assert_eq!(list.json["next_cursor"], Value::Null);
}

/// A task read before the views have published it (the reader was just answered its
/// id) is read from the loop, with the same timeline the views will show.
#[test]
fn a_task_read_before_it_is_published_has_its_timeline() {
    // After its first, the views are not published again within the test.
    let api = Api::with(Setup {
        publish_every: Duration::from_secs(3600),
        ..Setup::default()
    });
    // The first publication (`ok 0` before it), before the task.
    api.wait_for_text("/healthz", |text| text != "ok 0\n");
    let answer = api.call(
        "POST",
        "/v1/tasks",
        Some(r#"{"type": "script", "input": {"steps": 2, "sleep_ms": 20}}"#),
    );
    assert_eq!(answer.status, 202, "{answer:?}");
    let task = api.wait_for("/v1/tasks/1", |t| t["state"] == "completed");
    let timeline = task["timeline"].as_array().expect("a timeline");
    // Its waits in order. The time it ran between them may be too short to show: then
    // the running interval is dropped and its two request waits are one interval (the
    // loop reads the clock once a turn, so an answer and the step it wakes can share an
    // instant).
    let mut waits: Vec<&str> = timeline
        .iter()
        .map(|i| i["wait"].as_str().unwrap_or("?"))
        .filter(|w| *w != "running")
        .collect();
    waits.dedup();
    assert_eq!(waits, ["timer", "request"], "{task}");
    // ... tiling its life from its submission.
    assert_eq!(timeline[0]["start_ms"], 0, "{task}");
    for pair in timeline.windows(2) {
        assert_eq!(pair[0]["end_ms"], pair[1]["start_ms"], "{task}");
    }
    assert!(
        task["timing"]["waiting_ms"]["timer"].as_u64() >= Some(20),
        "{task}"
    );
    // The list is the views': the task is not in it yet.
    let list = api.call("GET", "/v1/tasks", None);
    assert_eq!(list.json["tasks"], json!([]), "{:?}", list.json);
}

/// Read right after its submission, while the loop publishes every 2 ms and runs 40
/// other tasks, a task's timeline always starts at its submission and a completed one
/// shows its LLM call: whether the views or the loop answer, and whatever was published
/// between the views' read and the loop's.
#[test]
fn a_task_read_as_it_is_published_has_its_whole_timeline() {
    let api = Api::with(Setup {
        publish_every: Duration::from_millis(2),
        ..Setup::default()
    });
    let busy = json!({"type": "script", "input": {"steps": 20}}).to_string();
    for _ in 0..40 {
        assert_eq!(api.call("POST", "/v1/tasks", Some(&busy)).status, 202);
    }
    let one = json!({"type": "script", "input": {"steps": 1}}).to_string();
    for _ in 0..150 {
        let answer = api.call("POST", "/v1/tasks", Some(&one));
        assert_eq!(answer.status, 202, "{answer:?}");
        let id = answer.json["id"].as_u64().expect("an id");
        let task = api.call("GET", &format!("/v1/tasks/{id}"), None).json;
        let timeline = task["timeline"].as_array().expect("a timeline");
        if let Some(first) = timeline.first() {
            assert_eq!(first["start_ms"], 0, "{task}");
        }
        if task["state"] == "completed" {
            assert!(timeline.iter().any(|i| i["wait"] == "request"), "{task}");
        }
    }
}

#[test]
fn the_list_filters_by_state_and_agent_and_pages_with_a_cursor() {
    let api = Api::start();
    for i in 0..5 {
        let agent = if i % 2 == 0 { "even" } else { "odd" };
        let body = json!({"type": "script", "input": {"steps": 0}, "agent": agent}).to_string();
        assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    }
    // One that waits: it sleeps an hour.
    let body = json!({"type": "script", "input": {"steps": 0, "sleep_ms": 3_600_000}}).to_string();
    assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    api.wait_for("/v1/tasks?state=completed", |p| {
        p["tasks"].as_array().map(Vec::len) == Some(5)
    });
    let ids = |page: &Value| -> Vec<u64> {
        page["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_u64().unwrap())
            .collect()
    };
    let even = api.call("GET", "/v1/tasks?agent=even", None);
    assert_eq!(ids(&even.json), [1, 3, 5]);
    let waiting = api.wait_for("/v1/tasks?state=waiting", |p| p["tasks"] != json!([]));
    assert_eq!(ids(&waiting), [6]);
    let first = api.call("GET", "/v1/tasks?limit=4", None);
    assert_eq!(ids(&first.json), [1, 2, 3, 4]);
    assert_eq!(first.json["next_cursor"], "4");
    let second = api.call("GET", "/v1/tasks?limit=4&cursor=4", None);
    assert_eq!(ids(&second.json), [5, 6]);
    assert_eq!(second.json["next_cursor"], Value::Null);
    api.call("GET", "/v1/tasks?state=sleeping", None).assert_problem(
        400,
        problem(400, "bad-request", "Bad request", "unknown state `sleeping` (expected one of ready, running, waiting, queued, blocked, completed, failed, canceled)"),
    );
    api.call("GET", "/v1/tasks?cursor=abc", None)
        .assert_problem(
            400,
            problem(
                400,
                "bad-request",
                "Bad request",
                "the cursor is not one this server gave",
            ),
        );
    api.call("GET", "/v1/tasks?limit=0", None).assert_problem(
        400,
        problem(
            400,
            "bad-request",
            "Bad request",
            "limit must be from 1 to 1000",
        ),
    );
}

#[test]
fn a_task_is_canceled_once() {
    let api = Api::start();
    let body = json!({"type": "script", "input": {"steps": 0, "sleep_ms": 3_600_000}}).to_string();
    assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    let canceled = api.call("POST", "/v1/tasks/1/cancel", None);
    assert_eq!(canceled.status, 202, "{canceled:?}");
    assert_eq!(canceled.json, json!({"id": 1, "state": "canceled"}));
    let task = api.wait_for("/v1/tasks/1", |t| t["state"] == "canceled");
    assert_eq!(task["error"], "canceled on request");
    api.call("POST", "/v1/tasks/1/cancel", None).assert_problem(
        409,
        problem(
            409,
            "conflict",
            "Conflict",
            "task 1 has already ended (canceled)",
        ),
    );
    api.call("POST", "/v1/tasks/99/cancel", None)
        .assert_problem(404, problem(404, "not-found", "Not found", "no task 99"));
}

#[test]
fn an_unknown_task_is_404() {
    let api = Api::start();
    api.call("GET", "/v1/tasks/42", None).assert_problem(
        404,
        problem(
            404,
            "not-found",
            "Not found",
            "no task 42 (never submitted, or ended and evicted)",
        ),
    );
    api.call("GET", "/v1/tasks/x1", None).assert_problem(
        404,
        problem(
            404,
            "not-found",
            "Not found",
            "no task `x1`: task ids are numbers",
        ),
    );
}

#[test]
fn the_task_types_list_their_schemas() {
    let api = Api::start();
    let types = api.call("GET", "/v1/task-types", None);
    assert_eq!(types.status, 200);
    assert_eq!(
        types.json,
        json!([
            {"name": "chain", "input_schema": null},
            {"name": "script", "input_schema": script_schema()}
        ])
    );
}

/// A task is listed as the type it was submitted as, not its body's (`chain` makes a
/// `script`), and read with its timeline: a live task's one interval is open and ends
/// at the view's time; a completed task's intervals follow one another from its
/// submission to its end. The list leaves timelines out.
#[test]
fn a_task_has_the_type_it_was_submitted_as_and_a_timeline() {
    let api = Api::start();
    let body = json!({"type": "chain", "input": {"steps": 0, "sleep_ms": 3_600_000}}).to_string();
    assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    let last = |t: &Value| t["timeline"].as_array().and_then(|l| l.last()).cloned();
    let task = api.wait_for("/v1/tasks/1", |t| {
        last(t).is_some_and(|i| i["wait"] == "timer")
    });
    assert_eq!(task["type"], "chain", "{task}");
    // Polled (for well under a millisecond: it may show as 0 ms of `running`), then
    // asleep until the view's time.
    let timeline = task["timeline"].as_array().unwrap();
    let (asleep, before) = timeline.split_last().unwrap();
    assert_eq!(asleep["wait"], "timer", "{task}");
    assert_eq!(asleep["kind"], Value::Null, "{task}");
    assert_eq!(asleep["end_ms"], task["age_ms"], "{task}");
    assert_eq!(asleep["open"], true, "{task}");
    assert_eq!(timeline[0]["start_ms"], 0, "{task}");
    for interval in before {
        assert_eq!(
            (&interval["wait"], &interval["open"]),
            (&json!("running"), &json!(false))
        );
    }
    assert_eq!(
        (
            &task["timing"]["queued_ms"],
            &task["timing"]["rate_limited_ms"]
        ),
        (&json!(0), &json!(0))
    );
    let waiting: Vec<&String> = task["timing"]["waiting_ms"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(waiting, ["timer"], "{task}");
    // The loop is idle (the task sleeps an hour) and publishes nothing, yet the open
    // interval and the age go on growing: they are taken at the time of the read.
    let slept = asleep["end_ms"].as_u64().unwrap();
    let later = api.wait_for("/v1/tasks/1", |t| {
        last(t).is_some_and(|i| i["end_ms"].as_u64().unwrap() > slept + 20)
    });
    let asleep = last(&later).unwrap();
    assert_eq!(asleep["end_ms"], later["age_ms"], "{later}");
    assert_eq!(asleep["open"], true, "{later}");
    let list = api.call("GET", "/v1/tasks", None);
    assert_eq!(list.json["tasks"][0]["type"], "chain", "{list:?}");
    assert_eq!(list.json["tasks"][0].get("timeline"), None, "{list:?}");

    let body = json!({"type": "chain", "input": {"steps": 2, "confirm": true}}).to_string();
    assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    let task = api.wait_for("/v1/tasks/2", |t| {
        last(t).is_some_and(|i| i["kind"] == "confirm")
    });
    assert_eq!(last(&task).unwrap()["open"], true, "{task}");
    api.wait_for("/v1/confirmations", |c| {
        c.as_array().is_some_and(|c| c.len() == 1)
    });
    let answer = api.call(
        "POST",
        "/v1/confirmations/2.1",
        Some(r#"{"answer": {"approved": true}}"#),
    );
    assert_eq!(answer.status, 202, "{answer:?}");
    let task = api.wait_for("/v1/tasks/2", |t| t["state"] == "completed");
    assert_eq!(task["type"], "chain");
    let timeline = task["timeline"].as_array().unwrap();
    assert_eq!(timeline[0]["start_ms"], 0, "{task}");
    for pair in timeline.windows(2) {
        assert_eq!(pair[0]["end_ms"], pair[1]["start_ms"], "{task}");
        assert_eq!(pair[0]["open"], false, "{task}");
    }
    assert_eq!(timeline.last().unwrap()["open"], false, "{task}");
    let waits: BTreeSet<(String, String)> = timeline
        .iter()
        .map(|i| (i["wait"].to_string(), i["kind"].to_string()))
        .collect();
    for kind in ["confirm", "llm"] {
        assert!(
            waits.contains(&("\"request\"".to_owned(), format!("\"{kind}\""))),
            "{task}"
        );
    }
    // The totals are the intervals' sums, to the millisecond.
    let sum = |wait: &str, kind: Value| -> u64 {
        timeline
            .iter()
            .filter(|i| i["wait"] == wait && i["kind"] == kind)
            .map(|i| i["end_ms"].as_u64().unwrap() - i["start_ms"].as_u64().unwrap())
            .sum()
    };
    let timing = &task["timing"];
    assert_eq!(
        timing["waiting_ms"]["llm"],
        sum("request", json!("llm")),
        "{task}"
    );
    assert_eq!(
        timing["waiting_ms"]["confirm"],
        sum("request", json!("confirm")),
        "{task}"
    );
    assert_eq!(timing["running_ms"], sum("running", Value::Null), "{task}");
    assert_eq!(
        timeline.last().unwrap()["end_ms"],
        sum("request", json!("llm"))
            + sum("request", json!("confirm"))
            + sum("running", Value::Null),
        "{task}"
    );
}

#[test]
fn malformed_json_is_400() {
    let api = Api::start();
    api.call("POST", "/v1/tasks", Some(r#"{"type": "script", "input": "#))
        .assert_problem(
            400,
            problem(
                400,
                "bad-request",
                "Bad request",
                "the body is not valid JSON: EOF while parsing a value at line 1 column 28",
            ),
        );
    api.call("POST", "/v1/tasks", Some(r#"{"input": {}}"#)).assert_problem(
        400,
        problem(400, "bad-request", "Bad request", "the body does not have the expected shape: missing field `type` at line 1 column 13"),
    );
    api.call("POST", "/v1/tasks", None).assert_problem(
        400,
        problem(
            400,
            "bad-request",
            "Bad request",
            "the request body is empty; a JSON object was expected",
        ),
    );
}

#[test]
fn an_unknown_task_type_is_422() {
    let api = Api::start();
    let answer = api.call(
        "POST",
        "/v1/tasks",
        Some(r#"{"type": "nope", "input": {}}"#),
    );
    let mut body = problem(
        422,
        "invalid",
        "Invalid request",
        "/type: unknown task type `nope` (known: chain, script)",
    );
    body["errors"] =
        json!([{"path": "/type", "message": "unknown task type `nope` (known: chain, script)"}]);
    answer.assert_problem(422, body);
}

#[test]
fn input_against_its_schema_lists_every_violation() {
    let api = Api::start();
    let answer = api.call(
        "POST",
        "/v1/tasks",
        Some(r#"{"type": "script", "input": {"steps": 99, "confirm": "yes", "color": "red"}, "priority": "urgent", "deadline": "soon"}"#),
    );
    assert_eq!(answer.status, 422, "{answer:?}");
    assert_eq!(answer.content_type, "application/problem+json");
    let errors = answer.json["errors"].as_array().unwrap();
    // Every violation, each with its path (the input's in the schema checker's order).
    let mut paths: Vec<&str> = errors.iter().map(|e| e["path"].as_str().unwrap()).collect();
    paths.sort_unstable();
    assert_eq!(
        paths,
        [
            "/deadline",
            "/input/color",
            "/input/confirm",
            "/input/steps",
            "/priority"
        ],
        "{}",
        answer.text
    );
    assert!(
        answer.json["detail"]
            .as_str()
            .unwrap()
            .starts_with("5 problems: /input/")
    );
    let message = |path: &str| {
        errors
            .iter()
            .find(|e| e["path"] == path)
            .map(|e| e["message"].clone())
            .unwrap()
    };
    // The input's violations in words, not the schema's keywords.
    assert_eq!(
        [
            message("/input/color"),
            message("/input/confirm"),
            message("/input/steps"),
        ],
        [
            "property is not allowed",
            "expected a boolean, got \"yes\"",
            "must be at most 50, got 99",
        ]
    );
    assert_eq!(
        message("/priority"),
        "unknown priority `urgent` (expected low, normal, high or critical)"
    );
    assert_eq!(
        message("/deadline"),
        "interval \"soon\": unexpected \"soon\" (write a number and a unit, like 90s, 60m, 1h30m, 2h or 1d)"
    );
    // Nothing was submitted.
    assert_eq!(api.call("GET", "/v1/tasks/1", None).status, 404);
}

#[test]
fn a_huge_body_is_413() {
    let api = Api::with(Setup {
        body_limit: 1024,
        ..Setup::default()
    });
    let big = json!({"type": "script", "input": {"steps": 1, "pad": "x".repeat(4096)}}).to_string();
    api.call("POST", "/v1/tasks", Some(&big)).assert_problem(
        413,
        problem(
            413,
            "too-large",
            "Request body too large",
            "the request body is over the limit of 1024 bytes",
        ),
    );
}

#[test]
fn a_full_queue_is_429_with_retry_after() {
    let api = Api::with(Setup {
        max_queued: Some(1),
        ..Setup::default()
    });
    let sleeper =
        json!({"type": "script", "input": {"steps": 0, "sleep_ms": 3_600_000}}).to_string();
    // One runs (max_running 1), one queues, the third finds the queue full.
    assert_eq!(
        api.call("POST", "/v1/tasks", Some(&sleeper)).json["admission"]["status"],
        "ready"
    );
    let queued = api.call("POST", "/v1/tasks", Some(&sleeper));
    assert_eq!(queued.json["admission"]["status"], "queued", "{queued:?}");
    assert_eq!(queued.json["admission"]["position"], 1);
    let full = api.call("POST", "/v1/tasks", Some(&sleeper));
    full.assert_problem(
        429,
        problem(
            429,
            "too-many-requests",
            "Too many requests",
            "the queue is full (1 tasks): task 3 was not accepted; try again later",
        ),
    );
    assert_eq!(full.header("retry-after"), Some("1"));
    let queue = api.wait_for("/v1/queue", |q| q["queued"] == 1);
    assert_eq!(
        (&queue["running"], &queue["max_running"]),
        (&json!(1), &json!(1))
    );
    assert_eq!(queue["details"][1]["waits_on"], "slot");
    let metrics = api.call("GET", "/metrics", None);
    assert!(
        metrics
            .text
            .lines()
            .any(|l| l == "spool_http_too_many_requests_total 1"),
        "{}",
        metrics.text
    );
}

#[test]
fn the_same_idempotency_key_from_8_threads_100_times_makes_one_task() {
    let api = Arc::new(Api::start());
    let body = json!({"type": "script", "input": {"steps": 1}}).to_string();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let api = Arc::clone(&api);
            let body = body.clone();
            std::thread::spawn(move || {
                let per = if t < 4 { 13 } else { 12 };
                (0..per)
                    .map(|_| {
                        let answer = request(
                            "POST",
                            &format!("{}/v1/tasks", api.base),
                            Some(TOKEN),
                            &[("Idempotency-Key", "order-7")],
                            Some(&body),
                        );
                        assert!(matches!(answer.status, 200 | 202), "{answer:?}");
                        (answer.status, answer.json["id"].as_u64().unwrap())
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let answers: Vec<(u16, u64)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(answers.len(), 100);
    let ids: BTreeSet<u64> = answers.iter().map(|(_, id)| *id).collect();
    assert_eq!(ids, BTreeSet::from([1]));
    assert_eq!(answers.iter().filter(|(s, _)| *s == 202).count(), 1);
    // The table holds that one task and no rejected repeats.
    let list = api.wait_for("/v1/tasks", |p| p["tasks"][0]["state"] == "completed");
    assert_eq!(list["tasks"].as_array().map(Vec::len), Some(1));
    let again = api.call("POST", "/v1/tasks", Some(&body));
    assert_eq!(again.json["id"], 2, "without the key, a new task");
}
