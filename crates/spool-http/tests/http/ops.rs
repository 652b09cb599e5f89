//! `/metrics`, `/v1/queue` and `/v1/openapi.json`.

use std::time::Duration;

use serde_json::{Value, json};
use spool_core::{Kind, RequestLimits};

use crate::support::{Api, Setup};

#[test]
fn metrics_are_prometheus_text() {
    let api = Api::start();
    let body = json!({"type": "script", "input": {"steps": 2}}).to_string();
    assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    api.wait_for("/v1/tasks/1", |t| t["state"] == "completed");
    let metrics = api.call("GET", "/metrics", None);
    assert_eq!(metrics.status, 200);
    assert_eq!(
        metrics.content_type,
        "text/plain; version=0.0.4; charset=utf-8"
    );
    for line in [
        "spool_tasks{state=\"completed\"} 1",
        "spool_tasks_submitted_total 1",
        "spool_requests_total{kind=\"llm\",outcome=\"answered\"} 2",
        "spool_queue_depth 0",
        "# TYPE spool_loop_turn_seconds summary",
    ] {
        assert!(
            metrics.text.lines().any(|l| l == line),
            "no `{line}` in\n{}",
            metrics.text
        );
    }
}

#[test]
fn the_queue_shows_state_and_details() {
    let api = Api::start();
    let body =
        json!({"type": "script", "input": {"steps": 0, "sleep_ms": 3_600_000}, "agent": "bob"})
            .to_string();
    assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    let queue = api.wait_for("/v1/queue", |q| q["waiting"]["timer"] == 1);
    assert_eq!(queue["running"], 1);
    assert_eq!(queue["details"][0]["id"], 1);
    assert_eq!(queue["details"][0]["waits_on"], "timer");
    assert_eq!(queue["details"][0]["agent"], "bob");
    assert_eq!(queue["details"][0]["state"], "waiting");
    assert_eq!(queue["stats"]["submitted"], 1);
    // The loop is idle (the task sleeps an hour) and publishes nothing: the wait shown
    // still grows with the time since the views were published.
    let first = queue["details"][0]["since_ms"].as_u64().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let later = api.call("GET", "/v1/queue", None).json;
    let since = later["details"][0]["since_ms"].as_u64().unwrap();
    assert!(since >= first + 300, "{first} then {since}");
    let age = later["details"][0]["age_ms"].as_u64().unwrap();
    assert!(age >= since, "age {age} < since {since}");
}

/// With one LLM request in flight at a time and ten a minute, two tasks that each make
/// one slow call: one request is out, the other held at the gate; the queue names the
/// policy, shows the gate as it is, and says what each task waits on.
#[test]
fn the_queue_shows_each_gate_and_what_each_task_waits_on() {
    let api = Api::with(Setup {
        llm_delay: Duration::from_millis(400),
        requests: Some(RequestLimits::new().max_in_flight(Kind::Llm, 1).window(
            Kind::Llm,
            10,
            Duration::from_secs(60),
        )),
        ..Setup::default()
    });
    let body = json!({"type": "script", "input": {"steps": 1}}).to_string();
    for _ in 0..2 {
        assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    }
    let queue = api.wait_for("/v1/queue", |q| q["gates"][0]["held"] == 1);
    assert_eq!(queue["policy"], "fifo");
    assert_eq!(queue["max_running"], Value::Null);
    assert_eq!(
        queue["gates"],
        json!([{
            "kind": "llm",
            "in_flight": 1,
            "max_in_flight": 1,
            "held": 1,
            "window": {"used": 1, "max": 10, "per_ms": 60_000},
            "tokens": null,
            "backoff_ms": null,
            "backoff_hits": 0
        }])
    );
    let waits: Vec<(&Value, &Value)> = queue["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (&d["id"], &d["waits_on"]))
        .collect();
    assert_eq!(
        waits,
        [(&json!(1), &json!("llm")), (&json!(2), &json!("llm"))]
    );
    for detail in queue["details"].as_array().unwrap() {
        assert!(detail["since_ms"].as_u64().unwrap() < 60_000, "{detail}");
    }
}

#[test]
fn the_openapi_document_names_every_endpoint() {
    let api = Api::start();
    let doc = api.call("GET", "/v1/openapi.json", None);
    assert_eq!(doc.status, 200);
    assert!(doc.json["openapi"].as_str().unwrap().starts_with("3."));
    let paths: Vec<&String> = doc.json["paths"].as_object().unwrap().keys().collect();
    assert_eq!(
        paths,
        [
            "/healthz",
            "/metrics",
            "/v1/confirmations",
            "/v1/confirmations/{key}",
            "/v1/events",
            "/v1/openapi.json",
            "/v1/queue",
            "/v1/schedules",
            "/v1/schedules/{slug}",
            "/v1/schedules/{slug}/pause",
            "/v1/schedules/{slug}/resume",
            "/v1/schedules/{slug}/run",
            "/v1/task-types",
            "/v1/tasks",
            "/v1/tasks/{id}",
            "/v1/tasks/{id}/cancel",
        ]
    );
    // Each operation says what its errors look like.
    assert_eq!(
        doc.json["paths"]["/v1/tasks"]["post"]["responses"]["422"]["content"]["application/problem+json"]
            ["schema"]["$ref"],
        "#/components/schemas/Problem"
    );
    assert!(doc.json["components"]["schemas"]["Problem"].is_object());
    // The list's filters and the event stream's are query parameters, not path ones
    // (schemathesis found them documented `in: path`, required).
    let places = |path: &str| -> Vec<(String, String)> {
        doc.json["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_owned(),
                    p["in"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    assert!(
        places("/v1/tasks").iter().all(|(_, at)| at == "query"),
        "{:?}",
        places("/v1/tasks")
    );
    assert!(
        places("/v1/events")
            .iter()
            .any(|(name, at)| name == "task" && at == "query")
    );
    // `/healthz` needs no token, and says so.
    assert_eq!(
        doc.json["paths"]["/healthz"]["get"]["security"],
        serde_json::json!([{}])
    );
}
