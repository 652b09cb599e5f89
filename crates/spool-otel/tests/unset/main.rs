//! Without an endpoint in the environment nothing is built: no exporter, no thread, and
//! nothing reaches a collector. (A binary of its own: it counts the process's threads.)

#[path = "../otlp/receiver.rs"]
#[allow(dead_code)]
mod receiver;
#[path = "../otlp/workload.rs"]
mod workload;

/// The batch processor's thread, as `/proc` names it (cut to 15 bytes).
const EXPORT_THREAD: &str = "OpenTelemetry.T";

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

#[test]
fn without_an_endpoint_no_exporter_is_built_and_nothing_is_sent() {
    // Everything but the endpoint: the service name, headers, a protocol.
    let vars = [
        ("OTEL_SERVICE_NAME", "spool-test"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-test=yes"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
    ];
    let lookup = |name: &str| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    };
    let before = thread_names().len();
    let (builder, otel) =
        spool_otel::install_from_lookup(workload::builder(), lookup, |s| s.model("gpt-test"))
            .expect("nothing to install");
    assert!(otel.is_none());
    assert_eq!(thread_names().len(), before, "no thread was started");
    // A collector on loopback, started only now: its own threads start lazily.
    let receiver = receiver::Receiver::start();
    let mut runtime = builder.build();
    let submission = workload::run(&mut runtime);
    assert!(matches!(
        runtime.task_state(submission.id),
        Some(spool_core::TaskState::Completed(Ok(_)))
    ));
    assert!(!thread_names().iter().any(|t| t == EXPORT_THREAD));
    drop(runtime);
    assert!(receiver.posts().is_empty());
}
