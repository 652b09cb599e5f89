//! OpenTelemetry traces for spool: a span for every task, every LLM request and every
//! tool call, in the GenAI semantic conventions (`gen_ai.*`) with spool's own
//! attributes (`spool.*`), exported over OTLP/HTTP to a collector.
//!
//! A task's span is the root of a trace, or a child of the span of the task that
//! spawned it; its requests' spans are its children: one tree per task and its
//! children. Spans carry the wall-clock times things happened in the loop.
//!
//! Nothing is built unless the environment names a collector
//! (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`): then
//! [`install`] adds an observer to the runtime (see
//! [`RuntimeBuilder::observe`](spool_runtime::RuntimeBuilder::observe)) and starts the
//! exporter's thread; otherwise it leaves the builder as it is.
//!
//! # Example
//! ```no_run
//! use spool_otel::OtelSettings;
//! use spool_runtime::Runtime;
//!
//! let builder = Runtime::builder();
//! let (builder, otel) = match OtelSettings::from_env()? {
//!     Some(settings) => {
//!         let (builder, otel) = spool_otel::install(builder, &settings.model("gpt-4o-mini"))?;
//!         (builder, Some(otel))
//!     }
//!     None => (builder, None),
//! };
//! let mut runtime = builder.build();
//! runtime.run_until_idle();
//! drop(runtime); // the spans of tasks still open end as unfinished
//! if let Some(otel) = otel {
//!     otel.shutdown()?; // the last spans are posted
//! }
//! # Ok::<(), spool_otel::OtelError>(())
//! ```

#![forbid(unsafe_code)]
#![deny(unused_must_use)]

mod client;
mod export;
mod genai;
mod settings;
mod spans;

pub use export::Otel;
pub use settings::{
    DEFAULT_PROVIDER, DEFAULT_SERVICE_NAME, DEFAULT_TIMEOUT, ENDPOINT_VAR, OtelError, OtelSettings,
    TRACES_ENDPOINT_VAR, WireFormat,
};

use spool_runtime::RuntimeBuilder;

/// Starts the exporter `settings` describe and adds to `builder` the observer that
/// hands it the runtime's spans.
///
/// # Errors
/// [`OtelError::Exporter`] if the exporter cannot be built.
pub fn install(
    builder: RuntimeBuilder,
    settings: &OtelSettings,
) -> Result<(RuntimeBuilder, Otel), OtelError> {
    let otel = Otel::start(settings)?;
    Ok((otel.observe(builder), otel))
}

/// [`install`] with the settings of the process's environment, if it names a
/// collector, passed through `configure` (to name the provider and the model); the
/// builder as it was, and `None`, if not: then nothing is built and no thread started.
///
/// # Errors
/// [`OtelError`] if a variable cannot be used or the exporter cannot be built.
pub fn install_from_env(
    builder: RuntimeBuilder,
    configure: impl FnOnce(OtelSettings) -> OtelSettings,
) -> Result<(RuntimeBuilder, Option<Otel>), OtelError> {
    install_from_lookup(builder, |name| std::env::var(name).ok(), configure)
}

/// As [`install_from_env`], with the variables read through `lookup`.
///
/// # Errors
/// As [`install_from_env`].
pub fn install_from_lookup(
    builder: RuntimeBuilder,
    lookup: impl Fn(&str) -> Option<String>,
    configure: impl FnOnce(OtelSettings) -> OtelSettings,
) -> Result<(RuntimeBuilder, Option<Otel>), OtelError> {
    match OtelSettings::from_lookup(lookup)? {
        Some(settings) => {
            let (builder, otel) = install(builder, &configure(settings))?;
            Ok((builder, Some(otel)))
        }
        None => Ok((builder, None)),
    }
}
