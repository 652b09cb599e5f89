//! The export: finished spans go to a batch processor, whose thread posts them to the
//! collector over OTLP/HTTP. [`Otel`] is the handle that flushes it and shuts it down.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SpanProcessor};

use spool_runtime::RuntimeBuilder;

use crate::client::UreqClient;
use crate::settings::{OtelError, OtelSettings, WireFormat};
use crate::spans::SpanObserver;

/// How long a shutdown waits for the last spans to be posted.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// The exporter of a runtime's spans: its batch processor's thread, and where it posts.
///
/// Dropping it (or [`shutdown`](Otel::shutdown)) posts the spans not yet posted and
/// stops the thread; drop the runtime first, so that the spans of tasks still open are
/// among them.
pub struct Otel {
    processor: Arc<BatchSpanProcessor>,
    traces_url: String,
    /// What LLM requests' spans name as their provider and default model.
    provider: String,
    model: Option<String>,
    shut: bool,
}

impl fmt::Debug for Otel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Otel")
            .field("traces_url", &self.traces_url)
            .finish_non_exhaustive()
    }
}

impl Otel {
    /// Builds the OTLP exporter `settings` describe and starts its batch processor (a
    /// thread); [`observe`](Otel::observe) then adds runtimes to it.
    ///
    /// # Errors
    /// [`OtelError::Exporter`] if the exporter cannot be built.
    pub fn start(settings: &OtelSettings) -> Result<Otel, OtelError> {
        let protocol = match settings.format {
            WireFormat::Protobuf => Protocol::HttpBinary,
            WireFormat::Json => Protocol::HttpJson,
        };
        let headers: HashMap<String, String> = settings
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(UreqClient::new(settings.timeout))
            .with_endpoint(settings.traces_url.clone())
            .with_protocol(protocol)
            .with_timeout(settings.timeout)
            .with_headers(headers)
            .build()
            .map_err(|e| OtelError::Exporter(e.to_string()))?;
        let mut resource = Resource::builder();
        if let Some(name) = &settings.service_name {
            resource = resource.with_service_name(name.clone());
        }
        let mut processor = BatchSpanProcessor::builder(exporter).build();
        processor.set_resource(&resource.build());
        Ok(Otel {
            processor: Arc::new(processor),
            traces_url: settings.traces_url.clone(),
            provider: settings.provider.clone(),
            model: settings.model.clone(),
            shut: false,
        })
    }

    /// Where spans are posted.
    pub fn traces_url(&self) -> &str {
        &self.traces_url
    }

    /// Adds to `builder` an observer that exports its runtime's spans through this
    /// exporter: [`install`](crate::install) does it for one runtime; a process with
    /// several (a cluster node's shards) calls it for each of the others.
    #[must_use]
    pub fn observe(&self, builder: RuntimeBuilder) -> RuntimeBuilder {
        let observer = SpanObserver::new(
            self.processor.clone(),
            self.provider.clone(),
            self.model.clone(),
        );
        builder.observe(observer)
    }

    /// Posts the spans finished so far, and waits until they are posted.
    ///
    /// # Errors
    /// [`OtelError::Exporter`] with the exporter's words if they could not be.
    pub fn flush(&self) -> Result<(), OtelError> {
        self.processor
            .force_flush()
            .map_err(|e| OtelError::Exporter(e.to_string()))
    }

    /// Posts what is left and stops the processor's thread (dropping does it too).
    ///
    /// # Errors
    /// [`OtelError::Exporter`] with the exporter's words if the last spans could not be
    /// posted.
    pub fn shutdown(mut self) -> Result<(), OtelError> {
        self.shut = true;
        self.processor
            .shutdown_with_timeout(SHUTDOWN_TIMEOUT)
            .map_err(|e| OtelError::Exporter(e.to_string()))
    }
}

impl Drop for Otel {
    fn drop(&mut self) {
        if !self.shut
            && let Err(error) = self.processor.shutdown_with_timeout(SHUTDOWN_TIMEOUT)
        {
            tracing::warn!(target: "spool::otel", "the last spans were not exported: {error}");
        }
    }
}
