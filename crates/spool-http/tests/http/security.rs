//! The token: none, a wrong one, `--public-read`; unknown paths and methods.

use serde_json::json;
use spool_http::Access;

use crate::support::{Api, Setup, TOKEN, problem, request};

#[test]
fn no_token_and_a_wrong_token_are_401() {
    let api = Api::start();
    for (path, method, body) in [
        ("/v1/tasks", "GET", None),
        (
            "/v1/tasks",
            "POST",
            Some(r#"{"type": "script", "input": {"steps": 0}}"#),
        ),
        ("/metrics", "GET", None),
        ("/v1/events", "GET", None),
        ("/v1/openapi.json", "GET", None),
    ] {
        let url = format!("{}{path}", api.base);
        let none = request(method, &url, None, &[], body);
        none.assert_problem(
            401,
            problem(
                401,
                "unauthorized",
                "Unauthorized",
                "this request needs the header `Authorization: Bearer <token>`",
            ),
        );
        assert_eq!(
            none.header("www-authenticate"),
            Some("Bearer realm=\"spool\"")
        );
        request(method, &url, Some("test-token-0123456788"), &[], body).assert_problem(
            401,
            problem(
                401,
                "unauthorized",
                "Unauthorized",
                "the bearer token is not the server's",
            ),
        );
    }
    // Nothing was submitted.
    assert_eq!(api.call("GET", "/v1/tasks", None).json["tasks"], json!([]));
    // The health check needs none.
    let health = request("GET", &format!("{}/healthz", api.base), None, &[], None);
    assert_eq!(health.status, 200);
    assert!(health.text.starts_with("ok "), "{health:?}");
}

#[test]
fn public_read_opens_the_gets_only() {
    let api = Api::with(Setup {
        access: Access::PublicRead(TOKEN.to_owned()),
        ..Setup::default()
    });
    let url = format!("{}/v1/tasks", api.base);
    assert_eq!(request("GET", &url, None, &[], None).status, 200);
    request(
        "POST",
        &url,
        None,
        &[],
        Some(r#"{"type": "script", "input": {"steps": 0}}"#),
    )
    .assert_problem(
        401,
        problem(
            401,
            "unauthorized",
            "Unauthorized",
            "this request needs the header `Authorization: Bearer <token>`",
        ),
    );
    assert_eq!(
        request(
            "POST",
            &url,
            Some(TOKEN),
            &[],
            Some(r#"{"type": "script", "input": {"steps": 0}}"#)
        )
        .status,
        202
    );
}

#[test]
fn unknown_paths_and_methods_are_problems() {
    let api = Api::start();
    api.call("GET", "/v1/nothing", None).assert_problem(
        404,
        problem(
            404,
            "not-found",
            "Not found",
            "no endpoint at /v1/nothing; see /v1/openapi.json",
        ),
    );
    api.call("DELETE", "/v1/tasks", None).assert_problem(
        405,
        problem(
            405,
            "method-not-allowed",
            "Method not allowed",
            "/v1/tasks does not take DELETE",
        ),
    );
}
