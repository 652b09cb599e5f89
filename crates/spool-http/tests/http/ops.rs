//! `/metrics`, `/v1/queue` and `/v1/openapi.json`.

use std::time::Duration;

use serde_json::{Value, json};
use spool_core::{AgentKindLimits, Kind, RequestLimits};
use spool_http::Access;

use crate::support::{self, Api, Setup, problem};

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
        "spool_requests_total{kind=\"llm\",outcome=\"ok\"} 2",
        "spool_requests_total{kind=\"llm\",outcome=\"error\"} 0",
        "spool_requests_total{kind=\"llm\",outcome=\"backed_off\"} 0",
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

/// Answers are counted by kind and outcome: a value, an error, a 429 that sent the
/// request back to its gate (and the retry's answer counted as what it was).
#[test]
fn requests_are_counted_by_outcome() {
    let api = Api::start();
    // Step 2 of 3 answered 429 once then answered; the other task's step 2 fails.
    let limited = json!({"type": "script", "input": {"steps": 3, "rate_limit_at": 2}});
    let failing = json!({"type": "script", "input": {"steps": 3, "fail_at": 2}});
    for body in [&limited, &failing] {
        let answer = api.call("POST", "/v1/tasks", Some(&body.to_string()));
        assert_eq!(answer.status, 202, "{answer:?}");
    }
    api.wait_for("/v1/tasks/1", |t| t["state"] == "completed");
    let failed = api.wait_for("/v1/tasks/2", |t| t["state"] == "failed");
    assert!(
        failed["error"].to_string().contains("the model is down"),
        "{failed}"
    );
    let metrics = api.wait_for_text("/metrics", |text| {
        text.contains("spool_tasks{state=\"failed\"} 1")
            && text.contains("spool_tasks{state=\"completed\"} 1")
    });
    let lines: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("spool_requests_total"))
        .collect();
    // Task 1: three answers and a back-off; task 2: one answer, then the error.
    assert_eq!(
        lines,
        [
            "spool_requests_total{kind=\"llm\",outcome=\"backed_off\"} 1",
            "spool_requests_total{kind=\"llm\",outcome=\"error\"} 1",
            "spool_requests_total{kind=\"llm\",outcome=\"ok\"} 4",
        ],
        "{metrics}"
    );
    assert!(metrics.contains("spool_rate_limited_total 1"), "{metrics}");
}

/// Ended tasks' waits, durations and request waits are Prometheus histograms: with one
/// slot, the second task waits for the first (which sleeps a second); a third, refused
/// (the queue holds one), is not a task that ran and is not counted.
#[test]
fn ended_tasks_fill_the_wait_and_duration_histograms() {
    let api = Api::with(Setup {
        max_queued: Some(1),
        ..Setup::default()
    });
    let first = json!({"type": "script", "input": {"steps": 1, "sleep_ms": 1000}});
    let second = json!({"type": "script", "input": {"steps": 1}});
    for (body, status) in [(&first, 202), (&second, 202), (&second, 429)] {
        let answer = api.call("POST", "/v1/tasks", Some(&body.to_string()));
        assert_eq!(answer.status, status, "{answer:?}");
    }
    // Both ended, in the views the metrics are read from.
    let metrics = api.wait_for_text("/metrics", |text| {
        text.contains("spool_tasks{state=\"completed\"} 2")
    });
    let sample = |name: &str| -> Option<u64> {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    };
    for (name, want) in [
        // The first waited for nothing; the second for most of the first's second.
        ("spool_task_wait_seconds_bucket{le=\"0.005\"}", 1),
        ("spool_task_wait_seconds_bucket{le=\"0.25\"}", 1),
        ("spool_task_wait_seconds_bucket{le=\"60\"}", 2),
        ("spool_task_wait_seconds_bucket{le=\"+Inf\"}", 2),
        ("spool_task_wait_seconds_count", 2),
        // The first lasted a second; the second until after the first had ended.
        ("spool_task_duration_seconds_bucket{le=\"0.25\"}", 0),
        ("spool_task_duration_seconds_bucket{le=\"+Inf\"}", 2),
        // One LLM call each.
        (
            "spool_request_wait_seconds_bucket{kind=\"llm\",le=\"+Inf\"}",
            2,
        ),
        ("spool_request_wait_seconds_count{kind=\"llm\"}", 2),
    ] {
        assert_eq!(sample(name), Some(want), "{name} in\n{metrics}");
    }
    assert!(
        metrics.contains("# TYPE spool_request_wait_seconds histogram"),
        "{metrics}"
    );
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

/// Each agent 1 LLM request in flight and 10 a minute, beside the kind's cap of 2: two
/// tasks of the default agent that each make one slow call: one request is out, the
/// other waits apart for the agent's share (not held at the gate), and the gate shows
/// the agents' limits.
#[test]
fn the_queue_shows_each_agents_limits_on_a_kind() {
    let share = AgentKindLimits::new()
        .max_in_flight(1)
        .window(10, Duration::from_secs(60));
    let api = Api::with(Setup {
        llm_delay: Duration::from_millis(400),
        requests: Some(
            RequestLimits::new()
                .max_in_flight(Kind::Llm, 2)
                .agent_limit(Kind::Llm, share),
        ),
        ..Setup::default()
    });
    let body = json!({"type": "script", "input": {"steps": 1}}).to_string();
    for _ in 0..2 {
        assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    }
    let queue = api.wait_for("/v1/queue", |q| q["gates"][0]["waiting_for_agents"] == 1);
    assert_eq!(
        queue["gates"],
        json!([{
            "kind": "llm",
            "in_flight": 1,
            "max_in_flight": 2,
            "held": 0,
            "window": null,
            "tokens": null,
            "backoff_ms": null,
            "backoff_hits": 0,
            "agent_max_in_flight": 1,
            "agent_window_max": 10,
            "agent_window_ms": 60_000,
            "waiting_for_agents": 1
        }])
    );
}

/// The value of the sample `name` (with its labels) in a `/metrics` text.
fn sample(metrics: &str, name: &str) -> Option<u64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Six tasks making one slow LLM call each under a cap of four: in flight means sent
/// to an executor and not answered, everywhere. The per-kind gauge never reads more
/// than the cap while the calls go (polled until every task ended), and once four are
/// out and two held, `/v1/queue`'s counts, its counts by kind, its gate and the gauges
/// all say four in flight and two held.
#[test]
fn requests_in_flight_never_exceed_the_cap_and_every_count_agrees() {
    let api = Api::with(Setup {
        llm_delay: Duration::from_millis(300),
        requests: Some(RequestLimits::new().max_in_flight(Kind::Llm, 4)),
        ..Setup::default()
    });
    let body = json!({"type": "script", "input": {"steps": 1}}).to_string();
    for _ in 0..6 {
        assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    }
    let queue = api.wait_for("/v1/queue", |q| q["held_requests"] == 2);
    assert_eq!(
        (&queue["in_flight"], &queue["held_requests"]),
        (&json!(4), &json!(2)),
        "{queue}"
    );
    assert_eq!(
        queue["by_kind"],
        json!([{"kind": "llm", "in_flight": 4, "held": 2}])
    );
    assert_eq!(
        (&queue["gates"][0]["in_flight"], &queue["gates"][0]["held"]),
        (&json!(4), &json!(2))
    );
    let metrics = api.wait_for_text("/metrics", |text| {
        sample(text, "spool_requests_held{kind=\"llm\"}") == Some(2)
    });
    assert_eq!(
        sample(&metrics, "spool_requests_in_flight{kind=\"llm\"}"),
        Some(4),
        "{metrics}"
    );
    // Until every task ended: never more in flight than the cap.
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = api.call("GET", "/metrics", None).text;
        let in_flight = sample(&metrics, "spool_requests_in_flight{kind=\"llm\"}");
        assert!(in_flight.is_some_and(|n| n <= 4), "{metrics}");
        seen.extend(in_flight);
        if metrics.contains("spool_tasks{state=\"completed\"} 6") {
            assert_eq!(in_flight, Some(0), "{metrics}");
            assert_eq!(
                sample(&metrics, "spool_requests_held{kind=\"llm\"}"),
                Some(0)
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{metrics}");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        seen.contains(&2),
        "the last two calls were seen in flight: {seen:?}"
    );
}

/// Under fifo the queue's rows come in submission order, whatever their levels, each
/// with its position in that order.
#[test]
fn under_fifo_the_queue_lists_tasks_by_submission_whatever_their_priority() {
    let api = Api::start();
    for priority in ["low", "high", "normal", "critical"] {
        let body = json!({"type": "script", "input": {"steps": 0, "sleep_ms": 3_600_000},
            "priority": priority})
        .to_string();
        assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    }
    let queue = api.wait_for("/v1/queue", |q| q["waiting"]["timer"] == 4);
    assert_eq!(queue["policy"], "fifo");
    let rows: Vec<(&Value, &Value, &Value)> = queue["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (&d["position"], &d["id"], &d["priority"]))
        .collect();
    assert_eq!(
        rows,
        [
            (&json!(1), &json!(1), &json!("low")),
            (&json!(2), &json!(2), &json!("high")),
            (&json!(3), &json!(3), &json!("normal")),
            (&json!(4), &json!(4), &json!("critical")),
        ]
    );
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
            "/v1/sessions/{id}",
            "/v1/task-types",
            "/v1/tasks",
            "/v1/tasks/{id}",
            "/v1/tasks/{id}/cancel",
            "/v1/tasks/{id}/fork",
            "/v1/tasks/{id}/history",
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

/// Every operation but `/healthz` answers `401` without the token, and says so with the shared `Unauthorized` response; the operation ids are
/// unique (the links name them).
#[test]
fn the_document_says_which_operations_need_the_token() {
    let api = Api::start();
    let doc = api.call("GET", "/v1/openapi.json", None).json;
    let unauthorized = json!({"$ref": "#/components/responses/Unauthorized"});
    let mut guarded = Vec::new();
    let mut ids = Vec::new();
    for (path, operations) in doc["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            ids.push(operation["operationId"].as_str().unwrap().to_owned());
            if operation["responses"]["401"] == unauthorized {
                guarded.push(format!("{method} {path}"));
            } else {
                assert_eq!(operation["security"], json!([{}]), "{method} {path}");
                assert!(operation["responses"]["401"].is_null(), "{method} {path}");
            }
        }
    }
    assert_eq!(guarded.len(), 23, "{guarded:?}");
    assert!(!guarded.contains(&"get /healthz".to_owned()));
    let count = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), count, "operation ids repeat: {ids:?}");
    assert_eq!(
        doc["components"]["responses"]["Unauthorized"]["content"]["application/problem+json"]["schema"]
            ["$ref"],
        "#/components/schemas/Problem"
    );
    // What the document says is what happens.
    let answer = support::request("GET", &format!("{}/v1/queue", api.base), None, &[], None);
    assert_eq!(answer.status, 401);

    // With public reads, only the writes need it.
    let open = Api::with(Setup {
        access: Access::PublicRead(support::TOKEN.to_owned()),
        ..Setup::default()
    });
    let doc = open.call("GET", "/v1/openapi.json", None).json;
    assert_eq!(doc["paths"]["/v1/queue"]["get"]["security"], json!([{}]));
    assert!(doc["paths"]["/v1/queue"]["get"]["responses"]["401"].is_null());
    assert_eq!(
        doc["paths"]["/v1/tasks"]["post"]["responses"]["401"],
        unauthorized
    );
}

/// The parameters' and bodies' constraints, as the server checks them (schemathesis
/// found each of these missing).
#[test]
fn the_document_carries_what_the_server_checks() {
    let api = Api::start();
    let doc = api.call("GET", "/v1/openapi.json", None).json;
    let parameter = |path: &str, method: &str, name: &str| -> Value {
        doc["paths"][path][method]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} on {method} {path}"))
    };
    let slug_schema = json!({"type": "string", "minLength": 1, "maxLength": 63,
        "pattern": "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"});
    for (path, method) in [
        ("/v1/schedules/{slug}", "get"),
        ("/v1/schedules/{slug}", "put"),
        ("/v1/schedules/{slug}", "patch"),
        ("/v1/schedules/{slug}", "delete"),
        ("/v1/schedules/{slug}/run", "post"),
        ("/v1/schedules/{slug}/pause", "post"),
        ("/v1/schedules/{slug}/resume", "post"),
    ] {
        assert_eq!(
            parameter(path, method, "slug")["schema"],
            slug_schema,
            "{method} {path}"
        );
        assert!(
            doc["paths"][path][method]["responses"]["422"].is_object(),
            "{method} {path}: no 422 for a bad slug"
        );
    }
    for (path, method) in [
        ("/v1/schedules/{slug}", "put"),
        ("/v1/schedules/{slug}", "patch"),
        ("/v1/confirmations/{key}", "post"),
        ("/v1/tasks", "post"),
    ] {
        assert!(
            doc["paths"][path][method]["responses"]["400"].is_object(),
            "{method} {path}"
        );
        assert!(
            doc["paths"][path][method]["responses"]["413"].is_object(),
            "{method} {path}"
        );
    }
    let key = parameter("/v1/tasks", "post", "Idempotency-Key");
    assert_eq!(key["required"], false);
    assert_eq!(
        key["schema"],
        json!({"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]{1,255}$"})
    );
    let last = parameter("/v1/events", "get", "Last-Event-ID");
    assert_eq!(
        last["schema"],
        json!({"type": "string", "minLength": 1, "maxLength": 39,
            "pattern": "^[0-9]{1,19}(:[0-9]{1,19})?$"})
    );
    assert!(doc["paths"]["/v1/events"]["get"]["responses"]["400"].is_object());
    assert_eq!(
        parameter("/v1/events", "get", "task")["schema"],
        json!({"type": "integer", "minimum": 0, "maximum": u64::MAX})
    );
    assert_eq!(
        parameter("/v1/tasks", "get", "cursor")["schema"]["pattern"],
        "^[0-9]{1,19}$"
    );
    assert_eq!(
        parameter("/v1/tasks", "get", "state")["schema"]["enum"],
        json!([
            "ready",
            "running",
            "waiting",
            "queued",
            "blocked",
            "completed",
            "failed",
            "canceled"
        ])
    );

    let schemas = &doc["components"]["schemas"];
    // The types are this server's; each one's input fits its schema.
    assert_eq!(
        schemas["SubmitBody"]["properties"]["type"]["enum"],
        json!(["chain", "script"])
    );
    assert_eq!(
        schemas["SubmitBody"]["oneOf"],
        json!([
            {"required": ["type", "input"],
                "properties": {"type": {"const": "script"}, "input": support::script_schema()}},
            // `chain` declares no input schema: any input.
            {"required": ["type"], "properties": {"type": {"enum": ["chain"]}}}
        ])
    );
    assert_eq!(
        schemas["SubmitBody"]["properties"]["priority"]["enum"],
        json!(["low", "normal", "high", "critical", null])
    );
    // Bodies refuse unknown members, nested ones too.
    for body in [
        "SubmitBody",
        "SchedulePutBody",
        "SchedulePatchBody",
        "AnswerBody",
    ] {
        assert_eq!(schemas[body]["additionalProperties"], false, "{body}");
    }
    let specs = schemas["SpecBody"]["oneOf"].as_array().unwrap();
    assert_eq!(specs.len(), 3);
    assert!(
        specs.iter().all(|s| s["additionalProperties"] == false),
        "{specs:?}"
    );
    assert_eq!(specs[2]["properties"]["at"]["format"], "date-time");
    assert_eq!(
        specs[1]["properties"]["every"]["pattern"],
        "^([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?$"
    );
    // PUT: a task type with its input, or a prompt without one.
    assert_eq!(
        schemas["SchedulePutBody"]["oneOf"],
        json!([
            {"required": ["task_type", "input"],
             "properties": {"task_type": {"const": "script"}, "input": support::script_schema()}},
            {"required": ["task_type"], "properties": {"task_type": {"enum": ["chain"]}}},
            {"required": ["prompt"], "properties": {"prompt": {"type": "string"}, "input": {"type": "null"}}},
        ])
    );
    // The answer to a confirmation is any JSON.
    assert_eq!(
        schemas["AnswerBody"]["properties"]["answer"].get("type"),
        None
    );

    // Links chain real ids: a submission to its task, a schedule to its operations.
    let links = &doc["paths"]["/v1/tasks"]["post"]["responses"]["202"]["links"];
    assert_eq!(
        links["get_task"],
        json!({"operationId": "get_task", "parameters": {"id": "$response.body#/id"},
            "description": "The task submitted"})
    );
    assert_eq!(links["cancel_task"]["operationId"], "cancel_task");
    let links = doc["paths"]["/v1/schedules/{slug}"]["put"]["responses"]["201"]["links"]
        .as_object()
        .unwrap();
    let targets: Vec<&str> = links
        .values()
        .map(|l| l["operationId"].as_str().unwrap())
        .collect();
    assert_eq!(
        targets,
        [
            "delete_schedule",
            "get_schedule",
            "patch_schedule",
            "pause_schedule",
            "resume_schedule",
            "run_schedule"
        ]
    );
    assert!(
        links
            .values()
            .all(|l| l["parameters"] == json!({"slug": "$response.body#/slug"}))
    );
    assert_eq!(
        doc["paths"]["/v1/tasks/{id}/cancel"]["post"]["responses"]["202"]["content"]["application/json"]
            ["schema"]["$ref"],
        "#/components/schemas/Canceled"
    );
}

/// The server takes exactly what those constraints allow: what schemathesis found it
/// taking beyond them (or refusing within them) is fixed on the server's side.
#[test]
fn the_server_takes_exactly_what_the_document_allows() {
    let api = Api::start();
    let submit = |key: &str| {
        support::request(
            "POST",
            &format!("{}/v1/tasks", api.base),
            Some(support::TOKEN),
            &[("Idempotency-Key", key)],
            Some(r#"{"type": "script", "input": {"steps": 0}}"#),
        )
    };
    // Visible ASCII only: a space inside a key is refused.
    submit("a b").assert_problem(
        400,
        problem(
            400,
            "bad-request",
            "Bad request",
            "the Idempotency-Key header must be 1 to 255 visible ASCII characters",
        ),
    );
    assert_eq!(submit(&"k".repeat(255)).status, 202);
    // A cursor and an event id are digits, nothing else (Rust's parse would take `+1`).
    api.call("GET", "/v1/tasks?cursor=%2B1", None)
        .assert_problem(
            400,
            problem(
                400,
                "bad-request",
                "Bad request",
                "the cursor is not one this server gave",
            ),
        );
    let events = support::request(
        "GET",
        &format!("{}/v1/events", api.base),
        Some(support::TOKEN),
        &[("Last-Event-ID", "+1")],
        None,
    );
    events.assert_problem(
        400,
        problem(
            400,
            "bad-request",
            "Bad request",
            "Last-Event-ID must be an event's id (1 to 19 digits)",
        ),
    );
    // JSON Schema's integers include 2.0; intervals have no spaces around them.
    let put = api.call(
        "PUT",
        "/v1/schedules/nightly",
        Some(r#"{"task_type": "script", "input": {"steps": 0}, "schedule": {"type": "interval", "every": "1h"}, "pause_after_failures": 2.0}"#),
    );
    assert_eq!(put.status, 201, "{put:?}");
    assert_eq!(put.json["pause_after_failures"], 2);
    let spaced = api.call(
        "PATCH",
        "/v1/schedules/nightly",
        Some(r#"{"schedule": {"type": "interval", "every": " 1h"}}"#),
    );
    assert_eq!(spaced.status, 422, "{spaced:?}");
    assert_eq!(spaced.json["errors"][0]["path"], "/schedule/every");
    let half = api.call(
        "PATCH",
        "/v1/schedules/nightly",
        Some(r#"{"pause_after_failures": 2.5}"#),
    );
    assert_eq!(half.status, 400, "{half:?}");
}
