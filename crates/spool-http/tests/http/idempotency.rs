//! An Idempotency-Key names one request: a repeat of that request is told of the task
//! it made (`200`), the key with a different request is refused (`422`, naming the
//! key and the task), and a restarted server, recovered from its journal, still
//! tells them apart.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use spool_core::{Kind, MemoryJournal};
use spool_http::{AppState, Server};
use spool_runtime::{Runtime, RuntimeBuilder, from_fn};

use crate::support::{Api, TOKEN, problem, registry, request};

/// The 422 for key `key`, first used for the request that made task `task`.
fn reused(key: &str, task: u64) -> Value {
    problem(
        422,
        "idempotency-key-reused",
        "Idempotency-Key reused",
        &format!(
            "the Idempotency-Key \"{key}\" was used for a different request (task {task}); \
             send a new key for a new request"
        ),
    )
}

fn post(base: &str, key: &str, body: &Value) -> crate::support::Answer {
    request(
        "POST",
        &format!("{base}/v1/tasks"),
        Some(TOKEN),
        &[("Idempotency-Key", key)],
        Some(&body.to_string()),
    )
}

#[test]
fn fifty_requests_with_one_key_make_one_task_and_refuse_every_other_body() {
    let api = Arc::new(Api::start());
    let first = json!({"type": "script", "input": {"steps": 0}});
    let answer = post(&api.base, "k1", &first);
    assert_eq!((answer.status, &answer.json["id"]), (202, &json!(1)));
    // 49 more at once: 24 repeats of the first body (its members in another order
    // for half of them), 25 with other prompts.
    let threads: Vec<_> = (0..49)
        .map(|i| {
            let api = Arc::clone(&api);
            std::thread::spawn(move || {
                let body = if i % 2 == 0 {
                    if i % 4 == 0 {
                        json!({"input": {"steps": 0}, "type": "script"})
                    } else {
                        json!({"type": "script", "input": {"steps": 0}})
                    }
                } else {
                    json!({"type": "script", "input": {"steps": 0, "sleep_ms": i}})
                };
                let body = if i == 48 {
                    json!({"type": "script", "input": {"steps": 1}, "priority": "high", "agent": "other"})
                } else {
                    body
                };
                (i, post(&api.base, "k1", &body))
            })
        })
        .collect();
    let mut repeats = 0;
    let mut refused = 0;
    for thread in threads {
        let (i, answer) = thread.join().unwrap();
        if i % 2 == 0 && i != 48 {
            assert_eq!(answer.status, 200, "{answer:?}");
            assert_eq!(answer.json["id"], 1);
            assert_eq!(answer.json["admission"]["status"], "existing");
            repeats += 1;
        } else {
            assert_eq!(answer.content_type, "application/problem+json");
            assert_eq!((answer.status, answer.json.clone()), (422, reused("k1", 1)));
            refused += 1;
        }
    }
    assert_eq!((repeats, refused), (24, 25));
    // The table holds the one task: no rejected repeats, nothing from the others.
    let list = api.wait_for("/v1/tasks", |p| p["tasks"][0]["state"] == "completed");
    let ids: BTreeSet<u64> = list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, BTreeSet::from([1]));
    // After it ended, the same body is still a repeat, another still refused.
    let again = post(&api.base, "k1", &first);
    assert_eq!(
        (again.status, &again.json["id"], &again.json["admission"]),
        (
            200,
            &json!(1),
            &json!({"status": "existing", "state": "completed"})
        )
    );
    let other = post(
        &api.base,
        "k1",
        &json!({"type": "script", "input": {"steps": 2}}),
    );
    assert_eq!((other.status, other.json), (422, reused("k1", 1)));
}

/// A runtime journaled to `journal` (going on from `recovered`, if given), served on
/// a loopback port; returns the server, the base URL and the runtime's thread.
fn serve(
    journal: &MemoryJournal,
    recovered: Option<&spool_core::Journal>,
) -> (
    Server,
    String,
    std::thread::JoinHandle<()>,
    spool_runtime::RuntimeHandle,
) {
    let mut builder: RuntimeBuilder = Runtime::builder()
        .registry(registry())
        .executor(Kind::Llm, from_fn(|_| Ok(json!("ok"))));
    if let Some(recovered) = recovered {
        builder = builder.recover(recovered, &registry()).unwrap();
    }
    let builder = builder.journal(journal.clone());
    let (builder, views) = spool_http::publish_views(
        builder,
        Duration::from_millis(5),
        spool_http::DEFAULT_EVENT_RING,
    );
    let mut runtime = builder.try_build().unwrap();
    let handle = runtime.handle();
    let state = AppState::new(handle.clone(), registry(), views, TOKEN).unwrap();
    let server = Server::builder()
        .addr(([127, 0, 0, 1], 0).into())
        .start(state)
        .unwrap();
    let base = format!("http://{}", server.addr());
    let thread = std::thread::spawn(move || {
        runtime.run();
    });
    (server, base, thread, handle)
}

#[test]
fn a_key_reused_with_another_body_is_refused_after_a_restart() {
    let journal = MemoryJournal::new();
    let (server, base, thread, handle) = serve(&journal, None);
    let first = json!({"type": "script", "input": {"steps": 1}, "agent": "alice"});
    assert_eq!(post(&base, "order-9", &first).status, 202);
    assert_eq!(post(&base, "order-9", &first).status, 200);
    handle.shutdown().unwrap();
    server.shutdown();
    thread.join().unwrap();

    // The second life, recovered from the journal of the first.
    let recorded = journal.journal().unwrap();
    let (server, base, thread, handle) = serve(&MemoryJournal::new(), Some(&recorded));
    let other = json!({"type": "script", "input": {"steps": 1}, "agent": "bob"});
    let answer = post(&base, "order-9", &other);
    assert_eq!((answer.status, answer.json), (422, reused("order-9", 1)));
    let answer = post(&base, "order-9", &first);
    assert_eq!((answer.status, &answer.json["id"]), (200, &json!(1)));
    handle.shutdown().unwrap();
    server.shutdown();
    thread.join().unwrap();
}
