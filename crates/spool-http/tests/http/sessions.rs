//! `GET` and `DELETE /v1/sessions/{id}`: a session is read with its holder, refused
//! deletion while a run uses it (`409`), deleted once the run ended (`204`), and gone
//! after (`404`); an id that is not one is `422`.

use serde_json::json;

use crate::support::{Api, problem};

#[test]
fn a_session_is_deleted_once_its_run_has_ended() {
    let api = Api::start();
    let put = api.call(
        "PUT",
        "/v1/schedules/chat",
        Some(r#"{"task_type": "script", "input": {"steps": 0, "sleep_ms": 600000}, "schedule": {"type": "interval", "every": "1h"}}"#),
    );
    assert_eq!(put.status, 201, "{put:?}");
    let run = api.call("POST", "/v1/schedules/chat/run", None);
    assert_eq!(run.status, 202, "{run:?}");
    let task = run.json["task"].as_u64().unwrap();

    let session = api.call("GET", "/v1/sessions/s-1", None);
    assert_eq!(session.status, 200, "{session:?}");
    assert_eq!(
        (
            &session.json["id"],
            &session.json["messages"],
            &session.json["message_count"],
            &session.json["bytes"],
            &session.json["holder"],
        ),
        (
            &json!("s-1"),
            &json!([]),
            &json!(0),
            &json!(0),
            &json!(task)
        )
    );
    // While the run uses it, it stays.
    api.call("DELETE", "/v1/sessions/s-1", None).assert_problem(
        409,
        problem(
            409,
            "conflict",
            "Conflict",
            &format!(
                "session \"s-1\" is busy: task {task} is using it; delete it once the run has ended"
            ),
        ),
    );
    let cancel = api.call("POST", &format!("/v1/tasks/{task}/cancel"), None);
    assert_eq!(cancel.status, 202, "{cancel:?}");
    let deleted = api.call("DELETE", "/v1/sessions/s-1", None);
    assert_eq!((deleted.status, deleted.text.as_str()), (204, ""));

    let gone = problem(404, "not-found", "Not found", "no session has the id `s-1`");
    api.call("GET", "/v1/sessions/s-1", None)
        .assert_problem(404, gone.clone());
    api.call("DELETE", "/v1/sessions/s-1", None)
        .assert_problem(404, gone);
    // The schedule says it makes a new one at its next run.
    let schedule = api.call("GET", "/v1/schedules/chat", None);
    assert_eq!(schedule.json["status"]["session"], "s-1");
}

#[test]
fn a_session_id_that_is_not_one_is_refused() {
    let api = Api::start();
    let mut body = problem(
        422,
        "invalid",
        "Invalid request",
        "/id: bad session id \"Not_One\": only lower-case letters, digits and '-' are allowed",
    );
    body["errors"] = json!([{
        "path": "/id",
        "message": "bad session id \"Not_One\": only lower-case letters, digits and '-' are allowed"
    }]);
    for method in ["GET", "DELETE"] {
        api.call(method, "/v1/sessions/Not_One", None)
            .assert_problem(422, body.clone());
    }
}
