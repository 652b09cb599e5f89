//! Where spans go and how, read from OpenTelemetry's standard environment variables:
//! with no endpoint there is nothing to export to, and nothing is built.

use std::collections::BTreeMap;
use std::time::Duration;

/// The variable naming the collector's base URL (`/v1/traces` is added to it).
pub const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The variable naming the traces URL itself (used as it is; it wins over
/// [`ENDPOINT_VAR`]).
pub const TRACES_ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";

/// The longest a post of spans may take unless a timeout variable says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The service name spans are exported under unless `OTEL_SERVICE_NAME` (or
/// `service.name` in `OTEL_RESOURCE_ATTRIBUTES`) names another.
pub const DEFAULT_SERVICE_NAME: &str = "spool";

/// The `gen_ai.provider.name` of LLM requests unless [`OtelSettings::provider`] says
/// otherwise: the OpenAI-compatible executor's.
pub const DEFAULT_PROVIDER: &str = "openai";

/// How spans are encoded on the wire.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireFormat {
    /// `http/protobuf`, the default.
    Protobuf,
    /// `http/json`.
    Json,
}

/// Where and how spans are exported, and what LLM requests are said to ask.
///
/// # Example
/// ```
/// use spool_otel::OtelSettings;
///
/// let vars = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")];
/// let lookup = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
/// let settings = OtelSettings::from_lookup(lookup).unwrap().expect("an endpoint");
/// assert_eq!(settings.traces_url(), "http://127.0.0.1:4318/v1/traces");
///
/// // No endpoint: nothing to export to.
/// assert!(OtelSettings::from_lookup(|_| None).unwrap().is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtelSettings {
    pub(crate) traces_url: String,
    pub(crate) format: WireFormat,
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) timeout: Duration,
    /// The service name to set, unless the resource attributes name one.
    pub(crate) service_name: Option<String>,
    pub(crate) provider: String,
    pub(crate) model: Option<String>,
}

/// What is wrong with the OpenTelemetry variables.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// An endpoint that is not an `http://` or `https://` URL.
    #[error("{var}={value:?} is not an http:// or https:// URL")]
    InvalidEndpoint {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// A protocol spool does not export with (it exports over HTTP only).
    #[error("{var}={value:?}: spool exports http/protobuf (the default) or http/json")]
    UnsupportedProtocol {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// A timeout that is not a whole number of milliseconds.
    #[error("{var}={value:?} is not a whole number of milliseconds")]
    InvalidTimeout {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// A header list that is not `name=value` pairs separated by commas.
    #[error("{var}: {entry:?} is not a name=value pair")]
    InvalidHeader {
        /// The variable.
        var: &'static str,
        /// The entry that is not a pair.
        entry: String,
    },
    /// The OTLP exporter could not be built, in its own words.
    #[error("the OTLP exporter could not be built: {0}")]
    Exporter(String),
}

impl OtelSettings {
    /// The settings the process's environment gives, or `None` if it names no
    /// endpoint ([`ENDPOINT_VAR`], [`TRACES_ENDPOINT_VAR`]), if `OTEL_SDK_DISABLED` is
    /// `true`, or if `OTEL_TRACES_EXPORTER` is `none`.
    ///
    /// # Errors
    /// [`OtelError`] naming the variable that cannot be used.
    pub fn from_env() -> Result<Option<OtelSettings>, OtelError> {
        OtelSettings::from_lookup(|name| std::env::var(name).ok())
    }

    /// As [`from_env`](OtelSettings::from_env), with the variables read through
    /// `lookup` (an empty value counts as unset).
    ///
    /// # Errors
    /// [`OtelError`] naming the variable that cannot be used.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<OtelSettings>, OtelError> {
        let var = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
            || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"))
        {
            return Ok(None);
        }
        let traces_url = match (var(TRACES_ENDPOINT_VAR), var(ENDPOINT_VAR)) {
            (Some(url), _) => checked_url(TRACES_ENDPOINT_VAR, url.trim())?,
            (None, Some(base)) => {
                let base = checked_url(ENDPOINT_VAR, base.trim())?;
                format!("{}/v1/traces", base.trim_end_matches('/'))
            }
            (None, None) => return Ok(None),
        };
        let format =
            signal_var(&var, "PROTOCOL").map_or(Ok(WireFormat::Protobuf), |(name, v)| {
                match v.trim() {
                    "http/protobuf" => Ok(WireFormat::Protobuf),
                    "http/json" => Ok(WireFormat::Json),
                    _ => Err(OtelError::UnsupportedProtocol {
                        var: name,
                        value: v,
                    }),
                }
            })?;
        let timeout = match signal_var(&var, "TIMEOUT") {
            Some((name, v)) => {
                v.trim()
                    .parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| OtelError::InvalidTimeout {
                        var: name,
                        value: v,
                    })?
            }
            None => DEFAULT_TIMEOUT,
        };
        let headers = match signal_var(&var, "HEADERS") {
            Some((name, v)) => parse_headers(name, &v)?,
            None => BTreeMap::new(),
        };
        let named_in_attributes = var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attributes| {
            attributes
                .split(',')
                .any(|pair| pair.trim_start().starts_with("service.name="))
        });
        let service_name = match var("OTEL_SERVICE_NAME") {
            Some(name) => Some(name.trim().to_owned()),
            None if named_in_attributes => None,
            None => Some(DEFAULT_SERVICE_NAME.to_owned()),
        };
        Ok(Some(OtelSettings {
            traces_url,
            format,
            headers,
            timeout,
            service_name,
            provider: DEFAULT_PROVIDER.to_owned(),
            model: None,
        }))
    }

    /// Names the provider LLM requests go to (`gen_ai.provider.name`; default
    /// [`DEFAULT_PROVIDER`]).
    #[must_use]
    pub fn provider(mut self, name: impl Into<String>) -> Self {
        self.provider = name.into();
        self
    }

    /// Names the model LLM requests ask when their payload names none (the executor's
    /// configured model), for `gen_ai.request.model` and the span's name.
    #[must_use]
    pub fn model(mut self, name: impl Into<String>) -> Self {
        self.model = Some(name.into());
        self
    }

    /// The URL spans are posted to.
    pub fn traces_url(&self) -> &str {
        &self.traces_url
    }

    /// How spans are encoded.
    pub fn wire_format(&self) -> WireFormat {
        self.format
    }

    /// How long a post may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The headers sent with every post (`OTEL_EXPORTER_OTLP_HEADERS`), by name.
    pub fn headers(&self) -> &BTreeMap<String, String> {
        &self.headers
    }

    /// The service name set on the spans' resource, if spool sets one (`None` when
    /// `OTEL_RESOURCE_ATTRIBUTES` names it).
    pub fn service_name(&self) -> Option<&str> {
        self.service_name.as_deref()
    }
}

/// The traces' own variable of a setting (`OTEL_EXPORTER_OTLP_TRACES_{what}`) or else
/// the general one (`OTEL_EXPORTER_OTLP_{what}`), with its name.
fn signal_var(var: &impl Fn(&str) -> Option<String>, what: &str) -> Option<(&'static str, String)> {
    let (traces, general): (&'static str, &'static str) = match what {
        "PROTOCOL" => (
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        "TIMEOUT" => (
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ),
        _ => (
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "OTEL_EXPORTER_OTLP_HEADERS",
        ),
    };
    var(traces)
        .map(|v| (traces, v))
        .or_else(|| var(general).map(|v| (general, v)))
}

fn checked_url(var: &'static str, value: &str) -> Result<String, OtelError> {
    let rest = value
        .strip_prefix("http://")
        .or_else(|| value.strip_prefix("https://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Ok(value.to_owned()),
        _ => Err(OtelError::InvalidEndpoint {
            var,
            value: value.to_owned(),
        }),
    }
}

/// `name=value,name=value`, values percent-decoded as the specification says.
fn parse_headers(var: &'static str, list: &str) -> Result<BTreeMap<String, String>, OtelError> {
    let mut headers = BTreeMap::new();
    for entry in list.split(',').filter(|e| !e.trim().is_empty()) {
        let Some((name, value)) = entry.split_once('=') else {
            return Err(OtelError::InvalidHeader {
                var,
                entry: entry.trim().to_owned(),
            });
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(OtelError::InvalidHeader {
                var,
                entry: entry.trim().to_owned(),
            });
        }
        headers.insert(name.to_owned(), percent_decoded(value.trim()));
    }
    Ok(headers)
}

fn percent_decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                let (h, l) = (hex(h).unwrap_or(0), hex(l).unwrap_or(0));
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<Option<OtelSettings>, OtelError> {
        OtelSettings::from_lookup(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn without_an_endpoint_there_is_nothing_to_export_to() {
        assert_eq!(settings(&[]), Ok(None));
        assert_eq!(settings(&[("OTEL_SERVICE_NAME", "svc")]), Ok(None));
        assert_eq!(settings(&[(ENDPOINT_VAR, "  ")]), Ok(None));
    }

    #[test]
    fn disabled_sdk_or_exporter_none_builds_nothing() {
        let url = (ENDPOINT_VAR, "http://127.0.0.1:4318");
        assert_eq!(settings(&[url, ("OTEL_SDK_DISABLED", "true")]), Ok(None));
        assert_eq!(settings(&[url, ("OTEL_TRACES_EXPORTER", "none")]), Ok(None));
    }

    #[test]
    fn the_base_endpoint_gets_the_traces_path_and_the_traces_endpoint_is_kept() {
        let base = settings(&[(ENDPOINT_VAR, "http://collector:4318/")])
            .unwrap()
            .unwrap();
        assert_eq!(base.traces_url(), "http://collector:4318/v1/traces");
        let own = settings(&[
            (ENDPOINT_VAR, "http://collector:4318"),
            (TRACES_ENDPOINT_VAR, "https://otel.example/custom"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(own.traces_url(), "https://otel.example/custom");
        assert_eq!(own.wire_format(), WireFormat::Protobuf);
        assert_eq!(own.timeout(), DEFAULT_TIMEOUT);
        assert_eq!(own.service_name(), Some("spool"));
    }

    #[test]
    fn protocol_timeout_headers_and_service_name_follow_the_variables() {
        let s = settings(&[
            (ENDPOINT_VAR, "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b, x-team = blue"),
            ("OTEL_SERVICE_NAME", "agents"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(s.wire_format(), WireFormat::Json);
        assert_eq!(s.timeout(), Duration::from_millis(2500));
        let headers: Vec<_> = s.headers().iter().collect();
        assert_eq!(
            headers,
            [
                (&"api-key".to_owned(), &"a b".to_owned()),
                (&"x-team".to_owned(), &"blue".to_owned())
            ]
        );
        assert_eq!(s.service_name(), Some("agents"));
        let from_attributes = settings(&[
            (ENDPOINT_VAR, "http://c:4318"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment=prod,service.name=mine",
            ),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(from_attributes.service_name(), None);
    }

    #[test]
    fn unusable_variables_are_named() {
        assert_eq!(
            settings(&[(ENDPOINT_VAR, "collector:4318")])
                .unwrap_err()
                .to_string(),
            "OTEL_EXPORTER_OTLP_ENDPOINT=\"collector:4318\" is not an http:// or https:// URL"
        );
        assert_eq!(
            settings(&[
                (ENDPOINT_VAR, "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            ])
            .unwrap_err()
            .to_string(),
            "OTEL_EXPORTER_OTLP_PROTOCOL=\"grpc\": spool exports http/protobuf (the default) or \
             http/json"
        );
        assert_eq!(
            settings(&[
                (ENDPOINT_VAR, "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "5s")
            ])
            .unwrap_err(),
            OtelError::InvalidTimeout {
                var: "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                value: "5s".to_owned()
            }
        );
        assert_eq!(
            settings(&[
                (ENDPOINT_VAR, "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "a=1,broken")
            ])
            .unwrap_err()
            .to_string(),
            "OTEL_EXPORTER_OTLP_HEADERS: \"broken\" is not a name=value pair"
        );
    }
}
