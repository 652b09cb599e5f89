//! OpenTelemetry for `spool run` and `spool serve`: when the environment names a
//! collector (`OTEL_EXPORTER_OTLP_ENDPOINT`), the runtime's tasks, LLM requests and
//! tool calls are exported to it as spans (see `spool-otel`); otherwise nothing is
//! built. The spans left are posted when the command stops.

use spool_otel::Otel;
use spool_runtime::RuntimeBuilder;

use crate::demo::Llm;
use crate::stored::Failure;

/// `builder` with the spans' observer if the environment names a collector, and the
/// exporter to finish at the end; says where spans go. `command` names the command in
/// the log line.
pub(crate) fn install(
    builder: RuntimeBuilder,
    llm: &Llm,
    command: &str,
) -> Result<(RuntimeBuilder, Option<Otel>), Failure> {
    let (builder, otel) = spool_otel::install_from_env(builder, |settings| match llm {
        Llm::Real(config) => settings.model(config.model.clone()),
        Llm::Scripted => settings.provider("spool-scripted").model("scripted"),
    })
    .map_err(|e| Failure::Usage(format!("cannot export traces: {e}")))?;
    if let Some(otel) = &otel {
        tracing::info!("{command}: exporting traces to {}", otel.traces_url());
    }
    Ok((builder, otel))
}

/// Posts the spans not yet posted (the runtime is gone: the spans of its tasks still
/// open are among them) and stops the exporter.
pub(crate) fn finish(otel: Option<Otel>, command: &str) {
    if let Some(otel) = otel {
        if let Err(error) = otel.shutdown() {
            tracing::warn!("{command}: the last spans were not exported: {error}");
        }
    }
}
