//! Confirmations: a task's question listed, answered over HTTP, and the task going on
//! with the answer.

use serde_json::json;

use crate::support::{Api, problem};

#[test]
fn a_confirmation_is_listed_and_answered() {
    let api = Api::start();
    let body = json!({"type": "script", "input": {"steps": 1, "confirm": true}}).to_string();
    assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    let list = api.wait_for("/v1/confirmations", |c| {
        c.as_array().is_some_and(|c| c.len() == 1)
    });
    assert_eq!(list[0]["key"], "1.1");
    assert_eq!(list[0]["task"], 1);
    assert_eq!(list[0]["question"], json!({"question": "go on?"}));
    let answered = api.call(
        "POST",
        "/v1/confirmations/1.1",
        Some(r#"{"answer": {"approved": true}}"#),
    );
    assert_eq!(answered.status, 202, "{answered:?}");
    assert_eq!(answered.json, json!({"key": "1.1", "answered": true}));
    let task = api.wait_for("/v1/tasks/1", |t| t["state"] == "completed");
    assert_eq!(
        task["result"],
        json!({"answers": [{"approved": true}, {"echo": {"step": 1}}]})
    );
    assert_eq!(
        api.wait_for("/v1/confirmations", |c| c == &json!([])),
        json!([])
    );
    api.call("POST", "/v1/confirmations/1.1", Some(r#"{"answer": true}"#))
        .assert_problem(
            404,
            problem(
                404,
                "not-found",
                "Not found",
                "no confirmation `1.1` is waiting (answered already, or never asked)",
            ),
        );
    api.call("POST", "/v1/confirmations/1.1", Some(r#"{"answr": true}"#)).assert_problem(
        400,
        problem(400, "bad-request", "Bad request", "the body does not have the expected shape: unknown field `answr`, expected `answer` at line 1 column 8"),
    );
}
