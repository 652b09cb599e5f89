//! The spans of one agent run, as an OTLP receiver on loopback gets them: one tree
//! (task → LLM requests and tool calls, and the child task under its parent) with
//! the GenAI conventions' attributes.

mod receiver;
mod workload;

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use serde_json::json;
use spool_core::TaskState;

use receiver::{Receiver, attributes};

/// The batch processor's thread, as `/proc` names it (cut to 15 bytes).
const EXPORT_THREAD: &str = "OpenTelemetry.T";

/// The names of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                .map(|name| name.trim().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn only<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found = named(spans, name);
    assert_eq!(
        found.len(),
        1,
        "one span named {name:?} in {:#?}",
        names(spans)
    );
    found[0]
}

/// The spans as a tree, children in the order they started (then by request number):
/// each span's name, kind, status and the attributes that tell it apart.
fn render(spans: &[Span]) -> String {
    fn walk(spans: &[Span], parent: &[u8], depth: usize, out: &mut String) {
        let mut children: Vec<&Span> = spans
            .iter()
            .filter(|s| s.parent_span_id == parent)
            .collect();
        children.sort_by_key(|s| {
            let number = attributes(s)
                .get("spool.request.number")
                .and_then(|n| n.parse::<u32>().ok());
            (s.start_time_unix_nano, number)
        });
        for span in children {
            let a = attributes(span);
            let mut line = format!("{}{}", "  ".repeat(depth), span.name);
            let kind = if span.kind == SpanKind::Client as i32 {
                "client"
            } else {
                "internal"
            };
            line.push_str(&format!(" ({kind}"));
            for key in [
                "spool.task.id",
                "spool.request.number",
                "gen_ai.tool.call.id",
                "gen_ai.usage.input_tokens",
                "gen_ai.usage.output_tokens",
                "gen_ai.response.finish_reasons",
                "spool.task.outcome",
                "spool.request.outcome",
            ] {
                if let Some(value) = a.get(key) {
                    line.push_str(&format!(", {key}={value}"));
                }
            }
            if let Some(status) = span
                .status
                .as_ref()
                .filter(|s| s.code == StatusCode::Error as i32)
            {
                line.push_str(&format!(", error: {}", status.message));
            }
            line.push_str(")\n");
            out.push_str(&line);
            walk(spans, &span.span_id, depth + 1, out);
        }
    }
    let mut out = String::new();
    walk(spans, &[], 0, &mut out);
    out
}

fn names(spans: &[Span]) -> Vec<&str> {
    spans.iter().map(|s| s.name.as_str()).collect()
}

#[test]
fn an_agent_run_arrives_as_one_tree_with_its_gen_ai_attributes() {
    let receiver = Receiver::start();
    let vars = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.addr().to_owned()),
        ("OTEL_SERVICE_NAME", "spool-test".to_owned()),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-test=yes".to_owned()),
    ];
    let lookup = |name: &str| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    };
    let (builder, otel) =
        spool_otel::install_from_lookup(workload::builder(), lookup, |s| s.model("gpt-test"))
            .expect("installed");
    let otel = otel.expect("an endpoint is named: an exporter");
    assert!(thread_names().iter().any(|t| t == EXPORT_THREAD));
    let mut runtime = builder.build();
    let root_id = workload::run(&mut runtime).id;
    assert_eq!(
        runtime.task_state(root_id),
        Some(TaskState::Completed(Ok(
            json!({"answer": "42", "summary": "a summary"})
        )))
    );
    drop(runtime);
    otel.shutdown().expect("flushed");

    let spans = receiver.spans(7);
    assert_eq!(spans.len(), 7, "{:#?}", names(&spans));
    let posts = receiver.posts();
    for post in &posts {
        assert_eq!(post.path, "/v1/traces");
        assert_eq!(post.content_type, "application/x-protobuf");
        assert_eq!(post.headers.get("x-test").map(String::as_str), Some("yes"));
        for resource in &post.request.resource_spans {
            let service = resource
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
                .and_then(|kv| kv.value.as_ref())
                .map(receiver::text);
            assert_eq!(service.as_deref(), Some("spool-test"));
        }
    }

    // The tree as a whole, in the order the run went.
    let tree = render(&spans);
    println!("{tree}");
    let root_task = root_id.get().to_string();
    let child_task = (root_id.get() + 1).to_string();
    assert_eq!(
        tree,
        format!(
            "invoke_agent alice (internal, spool.task.id={root_task}, gen_ai.usage.input_tokens=42, \
             gen_ai.usage.output_tokens=12, spool.task.outcome=ok)\n\
             \x20 chat gpt-test (client, spool.task.id={root_task}, spool.request.number=1, \
             gen_ai.usage.input_tokens=12, gen_ai.usage.output_tokens=8, \
             gen_ai.response.finish_reasons=[tool_calls], spool.request.outcome=ok)\n\
             \x20 execute_tool search (internal, spool.task.id={root_task}, \
             spool.request.number=2, gen_ai.tool.call.id=call_1, spool.request.outcome=ok)\n\
             \x20 execute_tool calc (internal, spool.task.id={root_task}, spool.request.number=3, \
             gen_ai.tool.call.id=call_2, spool.request.outcome=error, error: invalid arguments: \
             division by zero)\n\
             \x20 invoke_agent writer (internal, spool.task.id={child_task}, \
             gen_ai.usage.input_tokens=5, gen_ai.usage.output_tokens=3, spool.task.outcome=ok)\n\
             \x20   chat small-model (client, spool.task.id={child_task}, spool.request.number=1, \
             gen_ai.usage.input_tokens=5, gen_ai.usage.output_tokens=3, \
             gen_ai.response.finish_reasons=[stop], spool.request.outcome=ok)\n\
             \x20 chat gpt-test (client, spool.task.id={root_task}, spool.request.number=4, \
             gen_ai.usage.input_tokens=30, gen_ai.usage.output_tokens=4, \
             gen_ai.response.finish_reasons=[stop], spool.request.outcome=ok)\n"
        )
    );

    // The tree: one trace; the researcher at its root, its requests and its child
    // under it, the child's request under the child.
    let root = only(&spans, "invoke_agent alice");
    let child = only(&spans, "invoke_agent writer");
    let plan_and_answer = named(&spans, "chat gpt-test");
    assert_eq!(plan_and_answer.len(), 2);
    let (plan, answer) =
        if plan_and_answer[0].start_time_unix_nano <= plan_and_answer[1].start_time_unix_nano {
            (plan_and_answer[0], plan_and_answer[1])
        } else {
            (plan_and_answer[1], plan_and_answer[0])
        };
    let search = only(&spans, "execute_tool search");
    let calc = only(&spans, "execute_tool calc");
    let summarize = only(&spans, "chat small-model");
    assert!(spans.iter().all(|s| s.trace_id == root.trace_id));
    assert_eq!(root.trace_id.len(), 16);
    assert!(root.parent_span_id.is_empty());
    for span in [plan, search, calc, child, answer] {
        assert_eq!(
            span.parent_span_id, root.span_id,
            "{} under the root",
            span.name
        );
    }
    assert_eq!(summarize.parent_span_id, child.span_id);
    let mut ids: Vec<&[u8]> = spans.iter().map(|s| s.span_id.as_slice()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 7, "every span has an id of its own");

    // The times: each span within its parent's, in the order the run went.
    for span in &spans {
        assert!(
            span.start_time_unix_nano <= span.end_time_unix_nano,
            "{}",
            span.name
        );
    }
    for (inner, outer) in [
        (plan, root),
        (search, root),
        (calc, root),
        (child, root),
        (answer, root),
        (summarize, child),
    ] {
        assert!(outer.start_time_unix_nano <= inner.start_time_unix_nano);
        assert!(inner.end_time_unix_nano <= outer.end_time_unix_nano);
    }
    assert!(plan.end_time_unix_nano <= search.start_time_unix_nano);
    assert!(search.end_time_unix_nano <= child.start_time_unix_nano);
    assert!(child.end_time_unix_nano <= answer.start_time_unix_nano);

    // The kinds and statuses: a model call is a client span; the refused tool call
    // is an error.
    for span in [plan, summarize, answer] {
        assert_eq!(span.kind, SpanKind::Client as i32);
    }
    for span in [root, child, search, calc] {
        assert_eq!(span.kind, SpanKind::Internal as i32);
    }
    let calc_status = calc.status.clone().unwrap_or_default();
    assert_eq!(calc_status.code, StatusCode::Error as i32);
    assert_eq!(calc_status.message, "invalid arguments: division by zero");
    for span in [root, child, plan, search, summarize, answer] {
        let status = span.status.clone().unwrap_or_default();
        assert_eq!(status.code, StatusCode::Unset as i32, "{}", span.name);
    }

    // The attributes, exactly.
    assert_eq!(
        attributes(root),
        map(&[
            ("gen_ai.operation.name", "invoke_agent"),
            ("gen_ai.agent.name", "alice"),
            ("gen_ai.usage.input_tokens", "42"),
            ("gen_ai.usage.output_tokens", "12"),
            ("spool.agent", "alice"),
            ("spool.task.id", &root_task),
            ("spool.task.type", "researcher"),
            ("spool.task.outcome", "ok"),
            ("spool.task.cause", "returned"),
        ])
    );
    assert_eq!(
        attributes(child),
        map(&[
            ("gen_ai.operation.name", "invoke_agent"),
            ("gen_ai.agent.name", "writer"),
            ("gen_ai.usage.input_tokens", "5"),
            ("gen_ai.usage.output_tokens", "3"),
            ("spool.agent", "writer"),
            ("spool.task.id", &child_task),
            ("spool.task.type", "summarizer"),
            ("spool.task.outcome", "ok"),
            ("spool.task.cause", "returned"),
        ])
    );
    assert_eq!(
        attributes(plan),
        map(&[
            ("gen_ai.operation.name", "chat"),
            ("gen_ai.provider.name", "openai"),
            ("gen_ai.request.model", "gpt-test"),
            ("gen_ai.request.temperature", "0"),
            ("gen_ai.response.model", "gpt-test-0613"),
            ("gen_ai.response.id", "resp-1"),
            ("gen_ai.response.finish_reasons", "[tool_calls]"),
            ("gen_ai.usage.input_tokens", "12"),
            ("gen_ai.usage.output_tokens", "8"),
            ("spool.task.id", &root_task),
            ("spool.request.kind", "llm"),
            ("spool.request.number", "1"),
            ("spool.request.outcome", "ok"),
        ])
    );
    assert_eq!(
        attributes(search),
        map(&[
            ("gen_ai.operation.name", "execute_tool"),
            ("gen_ai.tool.name", "search"),
            ("gen_ai.tool.type", "function"),
            ("gen_ai.tool.call.id", "call_1"),
            ("spool.task.id", &root_task),
            ("spool.request.kind", "tool:search"),
            ("spool.request.number", "2"),
            ("spool.request.outcome", "ok"),
        ])
    );
    assert_eq!(
        attributes(calc),
        map(&[
            ("gen_ai.operation.name", "execute_tool"),
            ("gen_ai.tool.name", "calc"),
            ("gen_ai.tool.type", "function"),
            ("gen_ai.tool.call.id", "call_2"),
            ("error.type", "invalid_arguments"),
            ("spool.task.id", &root_task),
            ("spool.request.kind", "tool:calc"),
            ("spool.request.number", "3"),
            ("spool.request.outcome", "error"),
        ])
    );
    assert_eq!(
        attributes(summarize),
        map(&[
            ("gen_ai.operation.name", "chat"),
            ("gen_ai.provider.name", "openai"),
            ("gen_ai.request.model", "small-model"),
            ("gen_ai.response.model", "small-model-001"),
            ("gen_ai.response.finish_reasons", "[stop]"),
            ("gen_ai.usage.input_tokens", "5"),
            ("gen_ai.usage.output_tokens", "3"),
            ("spool.task.id", &child_task),
            ("spool.request.kind", "llm"),
            ("spool.request.number", "1"),
            ("spool.request.outcome", "ok"),
        ])
    );
    assert_eq!(
        attributes(answer),
        map(&[
            ("gen_ai.operation.name", "chat"),
            ("gen_ai.provider.name", "openai"),
            ("gen_ai.request.model", "gpt-test"),
            ("gen_ai.response.model", "gpt-test-0613"),
            ("gen_ai.response.finish_reasons", "[stop]"),
            ("gen_ai.usage.input_tokens", "30"),
            ("gen_ai.usage.output_tokens", "4"),
            ("spool.task.id", &root_task),
            ("spool.request.kind", "llm"),
            ("spool.request.number", "4"),
            ("spool.request.outcome", "ok"),
        ])
    );
}

/// The spans a run of `task` on `builder` exports, once the runtime is dropped and the
/// exporter shut down: every span of `n` or more.
fn exported(
    builder: spool_runtime::RuntimeBuilder,
    n: usize,
    run: impl FnOnce(&mut spool_runtime::Runtime),
) -> Vec<Span> {
    let receiver = Receiver::start();
    let vars = [("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.addr().to_owned())];
    let lookup = |name: &str| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    };
    let (builder, otel) = spool_otel::install_from_lookup(builder, lookup, |s| s.model("gpt-test"))
        .expect("installed");
    let mut runtime = builder.build();
    run(&mut runtime);
    drop(runtime);
    otel.expect("an exporter").shutdown().expect("flushed");
    receiver.spans(n)
}

#[test]
fn a_request_answered_429_and_sent_again_is_two_spans() {
    use spool_core::{Kind, NewTask, RequestError, async_task};
    use std::sync::atomic::{AtomicU32, Ordering};
    let calls = AtomicU32::new(0);
    let builder = spool_runtime::Runtime::builder().executor(
        Kind::Llm,
        spool_runtime::from_fn(move |_req| {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                Err(RequestError::RateLimited {
                    retry_after: Some(std::time::Duration::from_millis(5)),
                })
            } else {
                Ok(
                    json!({"content": "ok", "tool_calls": [], "finish_reason": "stop",
                          "usage": null}),
                )
            }
        }),
    );
    let spans = exported(builder, 3, |runtime| {
        let task = NewTask::new(async_task("asker", |cx| async move {
            Ok(cx.llm(json!({"messages": []})).await?)
        }))
        .agent("alice");
        let id = runtime.submit(task).expect("submitted").id;
        runtime.run_until_idle();
        assert!(matches!(
            runtime.task_state(id),
            Some(TaskState::Completed(Ok(_)))
        ));
    });
    let tree = render(&spans);
    assert_eq!(
        tree,
        "invoke_agent alice (internal, spool.task.id=1, spool.task.outcome=ok)\n\
         \x20 chat gpt-test (client, spool.task.id=1, spool.request.number=1, \
         spool.request.outcome=error, error: rate limited by the provider, retry after 5ms)\n\
         \x20 chat gpt-test (client, spool.task.id=1, spool.request.number=1, \
         gen_ai.response.finish_reasons=[stop], spool.request.outcome=ok)\n"
    );
    let first = named(&spans, "chat gpt-test")
        .into_iter()
        .min_by_key(|s| s.start_time_unix_nano)
        .expect("a first attempt");
    assert_eq!(
        attributes(first).get("error.type").map(String::as_str),
        Some("rate_limited")
    );
}

#[test]
fn a_canceled_task_ends_its_span_and_its_request_s_as_canceled() {
    use spool_core::{NewTask, async_task};
    let spans = exported(spool_runtime::Runtime::builder(), 2, |runtime| {
        let task = NewTask::new(async_task("asker", |cx| async move {
            Ok(cx.confirm(json!("go on?")).await?)
        }))
        .agent("alice");
        let id = runtime.submit(task).expect("submitted").id;
        runtime.run_until_idle();
        assert_eq!(runtime.pending_confirmations().len(), 1);
        runtime.cancel(id).expect("canceled");
        runtime.run_until_idle();
        assert!(matches!(
            runtime.task_state(id),
            Some(TaskState::Canceled(_))
        ));
    });
    assert_eq!(
        render(&spans),
        "invoke_agent alice (internal, spool.task.id=1, spool.task.outcome=canceled)\n\
         \x20 confirm (internal, spool.task.id=1, spool.request.number=1, \
         spool.request.outcome=canceled)\n"
    );
    let root = only(&spans, "invoke_agent alice");
    assert_eq!(
        attributes(root).get("spool.task.cause").map(String::as_str),
        Some("canceled on request")
    );
}

#[test]
fn two_runtimes_export_through_one_exporter_each_task_its_own_trace() {
    let receiver = Receiver::start();
    let vars = [("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.addr().to_owned())];
    let lookup = |name: &str| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    };
    let (first, otel) =
        spool_otel::install_from_lookup(workload::builder(), lookup, |s| s.model("gpt-test"))
            .expect("installed");
    let otel = otel.expect("an exporter");
    let second = otel.observe(workload::builder());
    let (mut first, mut second) = (first.build(), second.build());
    workload::run(&mut first);
    workload::run(&mut second);
    drop((first, second));
    otel.shutdown().expect("flushed");
    let spans = receiver.spans(14);
    assert_eq!(spans.len(), 14);
    let roots = named(&spans, "invoke_agent alice");
    assert_eq!(roots.len(), 2);
    assert_ne!(roots[0].trace_id, roots[1].trace_id);
    for root in roots {
        let tree: Vec<&Span> = spans
            .iter()
            .filter(|s| s.trace_id == root.trace_id)
            .collect();
        assert_eq!(tree.len(), 7);
    }
}
