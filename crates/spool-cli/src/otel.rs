//! OpenTelemetry for `spool run` and `spool serve`: when the environment names a
//! collector (`OTEL_EXPORTER_OTLP_ENDPOINT`), the runtime's tasks, LLM requests and
//! tool calls are exported to it as spans (see `spool-otel`); otherwise nothing is
//! built. The spans left are posted when the command stops.

use spool_otel::{Otel, OtelSettings};
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
    let otel = start(llm, command)?;
    let builder = match &otel {
        Some(otel) => otel.observe(builder),
        None => builder,
    };
    Ok((builder, otel))
}

/// The exporter, if the environment names a collector, for the runtimes `llm` serves
/// (each added with [`Otel::observe`]: a cluster node's shards); says where spans go.
pub(crate) fn start(llm: &Llm, command: &str) -> Result<Option<Otel>, Failure> {
    let unusable = |e: spool_otel::OtelError| Failure::Usage(format!("cannot export traces: {e}"));
    let Some(settings) = OtelSettings::from_env().map_err(unusable)? else {
        return Ok(None);
    };
    let settings = match llm {
        Llm::Real(config) => settings.model(config.model.clone()),
        Llm::Scripted => settings.provider("spool-scripted").model("scripted"),
    };
    let otel = Otel::start(&settings).map_err(unusable)?;
    tracing::info!("{command}: exporting traces to {}", otel.traces_url());
    Ok(Some(otel))
}

/// Posts the spans not yet posted (the runtime is gone: the spans of its tasks still
/// open are among them) and stops the exporter.
pub(crate) fn finish(otel: Option<Otel>, command: &str) {
    if let Some(otel) = otel
        && let Err(error) = otel.shutdown()
    {
        tracing::warn!("{command}: the last spans were not exported: {error}");
    }
}

/// [`finish`] for an exporter shared with runtimes' makers: now if they are gone,
/// else when the last of them goes (dropping it posts what is left).
#[cfg(feature = "serve")]
pub(crate) fn finish_shared(otel: Option<std::sync::Arc<Otel>>, command: &str) {
    if let Some(otel) = otel
        && let Ok(otel) = std::sync::Arc::try_unwrap(otel)
    {
        finish(Some(otel), command);
    }
}
