//! The shape of documents as clients read them: the OpenAPI document's top-level order
//! and the task list's `next_cursor`, present on every page.

use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::json;

use crate::support::Api;

/// The keys of a JSON object's top level, in the order the text has them.
fn top_level_keys(text: &str) -> Vec<String> {
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
            let mut keys = Vec::new();
            while let Some((key, IgnoredAny)) = map.next_entry::<String, IgnoredAny>()? {
                keys.push(key);
            }
            Ok(keys)
        }
    }
    serde_json::Deserializer::from_str(text)
        .deserialize_map(Keys)
        .unwrap()
}

#[test]
fn the_openapi_document_begins_with_its_version_and_info() {
    let api = Api::start();
    let doc = api.call("GET", "/v1/openapi.json", None);
    assert_eq!(doc.status, 200);
    assert_eq!(doc.content_type, "application/json");
    assert_eq!(
        top_level_keys(&doc.text),
        ["openapi", "info", "paths", "components", "security"]
    );
    assert!(
        doc.text.starts_with("{\"openapi\":\"3.1.0\",\"info\":{"),
        "{}",
        &doc.text[..80]
    );
    // Below the top level the text is the same document.
    assert_eq!(doc.json["info"]["title"], "spool");
}

#[test]
fn next_cursor_is_null_on_the_last_page_and_required_in_the_schema() {
    let api = Api::start();
    let body = json!({"type": "script", "input": {"steps": 1}}).to_string();
    for _ in 0..3 {
        assert_eq!(api.call("POST", "/v1/tasks", Some(&body)).status, 202);
    }
    // The list is read from the published views, which a single task's read does not
    // wait for: wait until the list holds all three.
    api.wait_for("/v1/tasks", |page| {
        page["tasks"]
            .as_array()
            .is_some_and(|tasks| tasks.len() == 3)
    });
    let first = api.call("GET", "/v1/tasks?limit=2", None);
    assert_eq!(first.json["next_cursor"], "2");
    let last = api.call("GET", "/v1/tasks?limit=2&cursor=2", None);
    assert_eq!(top_level_keys(&last.text), ["tasks", "next_cursor"]);
    assert!(
        last.text.ends_with(",\"next_cursor\":null}"),
        "{}",
        last.text
    );
    let doc = api.call("GET", "/v1/openapi.json", None).json;
    let page = &doc["components"]["schemas"]["TaskPage"];
    assert_eq!(page["required"], json!(["tasks", "next_cursor"]));
    assert_eq!(
        page["properties"]["next_cursor"]["type"],
        json!(["string", "null"])
    );
}
