//! Schedules: create, read, list, patch, run now, pause, resume, delete; their runs'
//! agent and priority and the status of their fires; create-only with
//! `If-None-Match: *`; a bad cron expression, agent or priority and a traversal slug
//! with their exact problems.

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::{Value, json};

use crate::support::{Api, TOKEN, problem, request};

fn invalid(detail: &str, errors: Value) -> Value {
    let mut body = problem(422, "invalid", "Invalid request", detail);
    body["errors"] = errors;
    body
}

#[test]
fn a_schedule_is_made_read_changed_run_paused_resumed_and_deleted() {
    let api = Api::start();
    let put = api.call(
        "PUT",
        "/v1/schedules/nightly",
        Some(r#"{"task_type": "script", "input": {"steps": 1}, "schedule": {"type": "cron", "expression": "0 3 * * *", "tz": "Europe/Paris"}, "overlap": "buffer-one"}"#),
    );
    assert_eq!(put.status, 201, "{put:?}");
    assert_eq!(put.json["slug"], "nightly");
    assert_eq!(
        put.json["schedule"],
        json!({"type": "cron", "expression": "0 3 * * *", "tz": "Europe/Paris"})
    );
    assert_eq!(put.json["overlap"], "buffer-one");
    assert!(put.json["status"]["next_run"].is_string());
    let again = api.call(
        "PUT",
        "/v1/schedules/nightly",
        Some(r#"{"task_type": "script", "input": {"steps": 0}, "schedule": {"type": "interval", "every": "1h30m"}}"#),
    );
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.json["input"], json!({"steps": 0}));
    assert_eq!(
        again.json["schedule"],
        json!({"type": "interval", "every": "1h30m"})
    );
    let list = api.wait_for("/v1/schedules", |l| l[0]["schedule"]["type"] == "interval");
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    assert_eq!(
        api.call("GET", "/v1/schedules/nightly", None).json["slug"],
        "nightly"
    );
    let patched = api.call(
        "PATCH",
        "/v1/schedules/nightly",
        Some(r#"{"enabled": false}"#),
    );
    assert_eq!(patched.status, 200);
    assert_eq!(patched.json["enabled"], false);
    let patched = api.call(
        "PATCH",
        "/v1/schedules/nightly",
        Some(r#"{"enabled": true, "task_type": "script", "input": {"steps": 2}}"#),
    );
    assert_eq!(patched.json["input"], json!({"steps": 2}));
    let run = api.call("POST", "/v1/schedules/nightly/run", None);
    assert_eq!(run.status, 202, "{run:?}");
    assert_eq!(run.json["status"], "started");
    let task = run.json["task"].as_u64().unwrap();
    let done = api.wait_for(&format!("/v1/tasks/{task}"), |t| t["state"] == "completed");
    assert_eq!(done["type"], "script");
    let paused = api.call("POST", "/v1/schedules/nightly/pause", None);
    assert_eq!(paused.status, 200);
    assert_eq!(paused.json["enabled"], false);
    let resumed = api.call("POST", "/v1/schedules/nightly/resume", None);
    assert_eq!(resumed.json["enabled"], true);
    assert_eq!(
        api.call("DELETE", "/v1/schedules/nightly", None).status,
        204
    );
    for (method, path) in [
        ("GET", "/v1/schedules/nightly"),
        ("DELETE", "/v1/schedules/nightly"),
        ("POST", "/v1/schedules/nightly/run"),
        ("POST", "/v1/schedules/nightly/pause"),
    ] {
        let answer = api.call(method, path, None);
        assert_eq!(answer.status, 404, "{method} {path}: {answer:?}");
        answer.assert_problem(
            404,
            problem(
                404,
                "not-found",
                "Not found",
                "no schedule is named `nightly`",
            ),
        );
    }
}

#[test]
fn a_bad_cron_expression_is_422_naming_the_field() {
    let api = Api::start();
    api.call(
        "PUT",
        "/v1/schedules/bad",
        Some(r#"{"task_type": "script", "input": {"steps": 0}, "schedule": {"type": "cron", "expression": "0 25 * * *"}}"#),
    )
    .assert_problem(
        422,
        invalid(
            "/schedule/expression: hour: 25 is out of range 0-23",
            json!([{"path": "/schedule/expression", "message": "hour: 25 is out of range 0-23"}]),
        ),
    );
    api.call(
        "PUT",
        "/v1/schedules/bad",
        Some(r#"{"task_type": "nope", "schedule": {"type": "interval", "every": "0m"}, "overlap": "sometimes"}"#),
    )
    .assert_problem(
        422,
        invalid(
            "3 problems: /task_type: unknown task type `nope`; /schedule/every: interval \"0m\": must be more than zero; /overlap: unknown overlap policy \"sometimes\" (expected skip, buffer-one, buffer-all, cancel-other or allow-all)",
            json!([
                {"path": "/task_type", "message": "unknown task type `nope`"},
                {"path": "/schedule/every", "message": "interval \"0m\": must be more than zero"},
                {"path": "/overlap", "message": "unknown overlap policy \"sometimes\" (expected skip, buffer-one, buffer-all, cancel-other or allow-all)"},
            ]),
        ),
    );
    // A prompt is made the prompt type's input, which its schema checks.
    let prompt = api.call(
        "PUT",
        "/v1/schedules/bad",
        Some(r#"{"prompt": "hello", "schedule": {"type": "interval", "every": "1h"}}"#),
    );
    assert_eq!(prompt.status, 422, "{prompt:?}");
    let mut paths: Vec<&str> = prompt.json["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    paths.sort_unstable();
    assert_eq!(paths, ["/input/prompt", "/input/steps"], "{}", prompt.text);
    assert_eq!(api.call("GET", "/v1/schedules", None).json, json!([]));
}

/// Sends `GET path` as it is, no client normalizing it, and returns the status line
/// and the body.
fn raw_get(addr: &str, path: &str) -> (String, Value) {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let status = text.lines().next().unwrap_or_default().to_owned();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn a_traversal_slug_is_422() {
    let api = Api::start();
    let expected = invalid(
        "/slug: bad schedule slug \"../etc\": only lower-case letters, digits and '-' are allowed",
        json!([{"path": "/slug", "message": "bad schedule slug \"../etc\": only lower-case letters, digits and '-' are allowed"}]),
    );
    let (status, body) = raw_get(&api.addr(), "/v1/schedules/..%2Fetc");
    assert_eq!(status, "HTTP/1.1 422 Unprocessable Entity");
    assert_eq!(body, expected);
    let put = api.call(
        "PUT",
        "/v1/schedules/..%2Fetc",
        Some(r#"{"prompt": "x", "schedule": {"type": "interval", "every": "1h"}}"#),
    );
    put.assert_problem(422, expected);
    // A literal `../` never reaches the schedules: it is another path.
    let (status, _) = raw_get(&api.addr(), "/v1/schedules/../etc");
    assert_eq!(status, "HTTP/1.1 404 Not Found");
}

/// The status members a schedule that has not fired has, beyond its counts.
fn quiet_fires(status: &Value) -> (Value, Value, Value) {
    (
        status["last_fire"].clone(),
        status["buffered"].clone(),
        status["retry"].clone(),
    )
}

#[test]
fn a_schedules_agent_and_priority_are_taken_kept_changed_and_given_to_its_runs() {
    let api = Api::start();
    let put = api.call(
        "PUT",
        "/v1/schedules/nightly",
        Some(r#"{"task_type": "script", "input": {"steps": 1}, "schedule": {"type": "interval", "every": "1h"}, "agent": "night-shift", "priority": "high"}"#),
    );
    assert_eq!(put.status, 201, "{put:?}");
    assert_eq!(
        (&put.json["agent"], &put.json["priority"]),
        (&json!("night-shift"), &json!("high"))
    );
    assert_eq!(
        quiet_fires(&put.json["status"]),
        (Value::Null, json!([]), Value::Null)
    );
    let read = api.call("GET", "/v1/schedules/nightly", None);
    assert_eq!(
        (&read.json["agent"], &read.json["priority"]),
        (&json!("night-shift"), &json!("high"))
    );
    // A patch of the priority alone keeps the agent; one of neither keeps both.
    let patched = api.call(
        "PATCH",
        "/v1/schedules/nightly",
        Some(r#"{"priority": "low"}"#),
    );
    assert_eq!(patched.status, 200, "{patched:?}");
    assert_eq!(
        (&patched.json["agent"], &patched.json["priority"]),
        (&json!("night-shift"), &json!("low"))
    );
    let patched = api.call(
        "PATCH",
        "/v1/schedules/nightly",
        Some(r#"{"overlap": "allow-all", "agent": "day-shift"}"#),
    );
    assert_eq!(
        (
            &patched.json["agent"],
            &patched.json["priority"],
            &patched.json["overlap"]
        ),
        (&json!("day-shift"), &json!("low"), &json!("allow-all"))
    );
    let patched = api.call(
        "PATCH",
        "/v1/schedules/nightly",
        Some(r#"{"enabled": true}"#),
    );
    assert_eq!(
        (&patched.json["agent"], &patched.json["priority"]),
        (&json!("day-shift"), &json!("low"))
    );
    // Its runs are the agent's, at its priority, and the fire they ran is its last.
    let run = api.call("POST", "/v1/schedules/nightly/run", None);
    assert_eq!(run.json["status"], "started", "{run:?}");
    let task = run.json["task"].as_u64().unwrap();
    let done = api.wait_for(&format!("/v1/tasks/{task}"), |t| t["state"] == "completed");
    assert_eq!(
        (&done["agent"], &done["priority"]),
        (&json!("day-shift"), &json!("low"))
    );
    let read = api.call("GET", "/v1/schedules/nightly", None);
    let fire = read.json["status"]["last_fire"]
        .as_str()
        .unwrap_or_default();
    assert!(fire.parse::<jiff::Timestamp>().is_ok(), "{read:?}");
    assert_eq!(
        (
            &read.json["status"]["buffered"],
            &read.json["status"]["retry"]
        ),
        (&json!([]), &Value::Null)
    );
    // A whole replacement without them is the default agent at normal priority.
    let put = api.call(
        "PUT",
        "/v1/schedules/nightly",
        Some(r#"{"task_type": "script", "input": {"steps": 1}, "schedule": {"type": "interval", "every": "1h"}}"#),
    );
    assert_eq!(put.status, 200, "{put:?}");
    assert_eq!(
        (&put.json["agent"], &put.json["priority"]),
        (&Value::Null, &json!("normal"))
    );
}

#[test]
fn a_blank_agent_and_an_unknown_priority_are_422_naming_the_fields() {
    let api = Api::start();
    let errors = json!([
        {"path": "/agent", "message": "an agent's name is not blank (leave `agent` out for the default agent)"},
        {"path": "/priority", "message": "unknown priority `urgent` (expected low, normal, high or critical)"},
    ]);
    let detail = "2 problems: /agent: an agent's name is not blank (leave `agent` out for the default agent); /priority: unknown priority `urgent` (expected low, normal, high or critical)";
    api.call(
        "PUT",
        "/v1/schedules/bad",
        Some(r#"{"task_type": "script", "input": {"steps": 0}, "schedule": {"type": "interval", "every": "1h"}, "agent": " ", "priority": "urgent"}"#),
    )
    .assert_problem(422, invalid(detail, errors.clone()));
    assert_eq!(api.call("GET", "/v1/schedules", None).json, json!([]));
    let put = api.call(
        "PUT",
        "/v1/schedules/good",
        Some(r#"{"task_type": "script", "input": {"steps": 0}, "schedule": {"type": "interval", "every": "1h"}, "agent": "a"}"#),
    );
    assert_eq!(put.status, 201, "{put:?}");
    api.call(
        "PATCH",
        "/v1/schedules/good",
        Some(r#"{"agent": " ", "priority": "urgent"}"#),
    )
    .assert_problem(422, invalid(detail, errors));
    let read = api.call("GET", "/v1/schedules/good", None);
    assert_eq!(
        (&read.json["agent"], &read.json["priority"]),
        (&json!("a"), &json!("normal"))
    );
}

#[test]
fn if_none_match_star_creates_only_and_a_taken_slug_is_412_with_nothing_changed() {
    let api = Api::start();
    let url = format!("http://{}/v1/schedules/nightly", api.addr());
    let first = r#"{"task_type": "script", "input": {"steps": 1}, "schedule": {"type": "interval", "every": "1h"}}"#;
    let second = r#"{"task_type": "script", "input": {"steps": 2}, "schedule": {"type": "interval", "every": "2h"}, "agent": "other"}"#;
    let star = [("If-None-Match", "*")];
    let made = request("PUT", &url, Some(TOKEN), &star, Some(first));
    assert_eq!(made.status, 201, "{made:?}");
    request("PUT", &url, Some(TOKEN), &star, Some(second)).assert_problem(
        412,
        problem(
            412,
            "exists",
            "Precondition Failed",
            "a schedule named `nightly` exists already (If-None-Match: *)",
        ),
    );
    let read = api.call("GET", "/v1/schedules/nightly", None);
    assert_eq!(
        (
            &read.json["input"],
            &read.json["schedule"],
            &read.json["agent"],
            &read.json["updated_at"]
        ),
        (
            &json!({"steps": 1}),
            &json!({"type": "interval", "every": "1h"}),
            &Value::Null,
            &made.json["updated_at"]
        )
    );
    // Only `*` is understood; without the header a PUT replaces as before.
    request(
        "PUT",
        &url,
        Some(TOKEN),
        &[("If-None-Match", "\"abc\"")],
        Some(second),
    )
    .assert_problem(
        400,
        problem(
            400,
            "bad-request",
            "Bad request",
            "If-None-Match: only `*` is taken here (create the schedule only if it does not exist)",
        ),
    );
    // The body is checked before the slug: a bad one is 422 as without the header.
    let list_input = r#"{"task_type": "chain", "input": [1], "schedule": {"type": "interval", "every": "1h"}, "session": "fresh"}"#;
    request("PUT", &url, Some(TOKEN), &star, Some(list_input)).assert_problem(
        422,
        invalid(
            "/input: a schedule's input is a JSON object",
            json!([{"path": "/input", "message": "a schedule's input is a JSON object"}]),
        ),
    );
    api.call("PATCH", "/v1/schedules/nightly", Some(r#"{"input": [1]}"#))
        .assert_problem(
            422,
            invalid(
                "/input: a schedule's input is a JSON object",
                json!([{"path": "/input", "message": "a schedule's input is a JSON object"}]),
            ),
        );
    let replaced = api.call("PUT", "/v1/schedules/nightly", Some(second));
    assert_eq!(replaced.status, 200, "{replaced:?}");
    assert_eq!(replaced.json["agent"], "other");
    // The document says so.
    let doc = api.call("GET", "/v1/openapi.json", None).json;
    let put = &doc["paths"]["/v1/schedules/{slug}"]["put"];
    let header = put["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "If-None-Match")
        .cloned();
    assert_eq!(
        header.map(|h| (h["in"].clone(), h["schema"].clone())),
        Some((json!("header"), json!({"type": "string", "enum": ["*"]})))
    );
    assert!(put["responses"]["412"].is_object(), "{put}");
    let schemas = &doc["components"]["schemas"];
    for body in ["SchedulePutBody", "SchedulePatchBody"] {
        assert_eq!(
            schemas[body]["properties"]["priority"]["enum"],
            json!(["low", "normal", "high", "critical", null]),
            "{body}"
        );
        assert_eq!(
            schemas[body]["properties"]["agent"]["pattern"], "\\S",
            "{body}"
        );
    }
    let status = &schemas["ScheduleStatusBody"]["properties"];
    for member in ["last_fire", "buffered", "retry"] {
        assert!(status[member].is_object(), "{member}: {status}");
    }
}
