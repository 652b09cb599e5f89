//! Schedules from Python: a schedule's definition from keyword arguments, and schedules
//! as plain dicts (their JSON, as the HTTP API shows them).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::Value;
use spool_core::{CronSpec, Overlap, ScheduleDef, SessionMode, Spec, TaskRegistry};

use crate::convert::{from_py, to_py};
use crate::options::{priority, seconds};

/// What `Runtime.schedule` takes.
#[derive(Debug, Default)]
pub(crate) struct Given {
    pub(crate) slug: String,
    pub(crate) agent: String,
    pub(crate) input: Option<Value>,
    pub(crate) cron: Option<String>,
    pub(crate) tz: Option<String>,
    pub(crate) every: Option<f64>,
    pub(crate) at: Option<String>,
    pub(crate) session: Option<String>,
    pub(crate) overlap: Option<String>,
    pub(crate) tenant: Option<String>,
    pub(crate) priority: Option<String>,
    pub(crate) enabled: bool,
    pub(crate) pause_after_failures: Option<u32>,
}

fn bad(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}

/// The schedule `given` describes, checked against `registry`'s agents.
pub(crate) fn definition(given: Given, registry: &TaskRegistry) -> PyResult<ScheduleDef> {
    if !registry.knows(&given.agent) {
        return Err(bad(format!(
            "no agent named `{}` (the runtime's agents: {})",
            given.agent,
            registry.type_names().join(", ")
        )));
    }
    let spec = match (&given.cron, given.every, &given.at) {
        (Some(cron), None, None) => Spec::Cron(
            CronSpec::parse(cron, given.tz.as_deref().unwrap_or("UTC"))
                .map_err(|e| bad(e.to_string()))?,
        ),
        (None, Some(every), None) => Spec::Every(seconds("every", every)?),
        (None, None, Some(at)) => Spec::Once(
            at.parse::<jiff::Timestamp>()
                .map_err(|e| bad(format!("at: not an RFC 3339 instant: {e}")))?,
        ),
        _ => {
            return Err(bad(
                "give one of cron=\"EXPR\" (with tz=), every=SECONDS or at=\"RFC 3339 instant\"",
            ));
        }
    };
    let session = match given.session.as_deref() {
        None | Some("persist") => SessionMode::Persist,
        Some("fresh") => SessionMode::Fresh,
        Some(other) => match other.strip_prefix("shared:") {
            Some(id) => SessionMode::Shared(id.to_owned()),
            None => {
                return Err(bad(format!(
                    "session {other:?}: use \"persist\", \"fresh\" or \"shared:ID\""
                )));
            }
        },
    };
    let input = given
        .input
        .unwrap_or_else(|| Value::Object(Default::default()));
    let mut def = ScheduleDef::new(given.slug, spec, given.agent, input)
        .session(session)
        .enabled(given.enabled);
    if let Some(overlap) = given.overlap {
        def = def.overlap(Overlap::parse(&overlap).map_err(|e| bad(e.to_string()))?);
    }
    if let Some(tenant) = given.tenant {
        def = def.agent(tenant);
    }
    if let Some(p) = given.priority {
        def = def.priority(priority(&p)?);
    }
    if let Some(n) = given.pause_after_failures {
        def = def.pause_after_failures(n);
    }
    def.check().map_err(|e| bad(e.to_string()))?;
    Ok(def)
}

/// `value` (a schedule's or session's record) as Python, through its JSON.
pub(crate) fn as_py<'py>(
    py: Python<'py>,
    value: &impl serde::Serialize,
) -> PyResult<Bound<'py, PyAny>> {
    let json = serde_json::to_value(value).map_err(|e| bad(e.to_string()))?;
    to_py(py, &json)
}

/// The input from Python, if given.
pub(crate) fn input_of(input: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Value>> {
    input.map(from_py).transpose()
}
