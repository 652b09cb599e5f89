//! The OpenAPI document, generated from the handlers' and bodies' annotations
//! (`utoipa`), never kept by hand; then completed, per server, with what only the
//! server knows or `utoipa` cannot say: the task types it has, who needs the token
//! (every guarded operation documents its `401`), the choices a body's strings are
//! checked against, and the one-of shapes of the schedule bodies.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::{Value, json};
use spool_core::TaskRegistry;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::problem::{FieldError, Problem};
use crate::routes::confirmations::{AnswerBody, ConfirmationBody};
use crate::routes::history::{AnswerEdit, EditBody, ForkBody, ForkOriginBody, Forked};
use crate::routes::queue::{
    BackoffBody, BudgetHeldBody, GateBody, KindRequestsBody, QueueBody, QueueDetailBody,
    WaitingBody, WindowUseBody,
};
use crate::routes::schedules::{
    CatchUpBody, RetryBody, ScheduleBody, ScheduleOutcome, SchedulePatchBody, SchedulePutBody,
    ScheduleStatusBody, SpecBody,
};
use crate::routes::sessions::SessionBody;
use crate::routes::tasks::body::{
    IntervalBody, SpendBody, TaskBody, TaskPage, TaskTypeBody, TimingBody,
};
use crate::routes::tasks::{AdmissionBody, Canceled, SubmitBody, Submitted};
use crate::state::{Access, AppState};
use crate::views::STATE_TAGS;

/// The API's OpenAPI 3.1 description.
#[derive(Debug, OpenApi)]
#[openapi(
    info(title = "spool", description = "The HTTP API of spool: tasks, schedules, confirmations, the queue, events and metrics. Every error is RFC 9457 application/problem+json."),
    paths(
        crate::routes::tasks::submit, crate::routes::tasks::list, crate::routes::tasks::get,
        crate::routes::tasks::cancel, crate::routes::tasks::types,
        crate::routes::history::get, crate::routes::history::fork,
        crate::routes::confirmations::list, crate::routes::confirmations::answer,
        crate::routes::schedules::list, crate::routes::schedules::get, crate::routes::schedules::put,
        crate::routes::schedules::patch, crate::routes::schedules::delete, crate::routes::schedules::run,
        crate::routes::schedules::pause, crate::routes::schedules::resume,
        crate::routes::sessions::get, crate::routes::sessions::delete,
        crate::routes::queue::get, crate::routes::events::stream,
        crate::routes::ops::healthz, crate::routes::ops::metrics,
        document,
    ),
    components(schemas(
        Problem, FieldError, SubmitBody, Submitted, Canceled, AdmissionBody, TaskBody, TaskPage, TimingBody, IntervalBody, TaskTypeBody,
        ConfirmationBody, AnswerBody, QueueBody, QueueDetailBody, WaitingBody, BackoffBody, GateBody, WindowUseBody, KindRequestsBody,
        ScheduleBody, SchedulePutBody, SchedulePatchBody, ScheduleStatusBody, RetryBody, SpecBody, CatchUpBody, ScheduleOutcome,
        SessionBody, ForkBody, EditBody, AnswerEdit, Forked, ForkOriginBody, SpendBody, BudgetHeldBody,
    )),
    modifiers(&Bearer),
    security(("bearer" = [])),
)]
pub struct ApiDoc;

/// Declares the bearer token.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", operation_id = "openapi", responses((status = 200, description = "The OpenAPI document", content_type = "application/json")))]
pub(crate) async fn document(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        in_conventional_order(&for_server(&state)),
    )
}

/// The top-level fields of an OpenAPI document in the order readers expect them
/// (the specification's own): what it is, then its paths, then what they refer to.
const TOP_LEVEL_ORDER: [&str; 9] = [
    "openapi",
    "info",
    "jsonSchemaDialect",
    "servers",
    "paths",
    "webhooks",
    "components",
    "security",
    "tags",
];

/// `doc` as JSON text with its top-level fields in [`TOP_LEVEL_ORDER`] (any other
/// after them, by name). A `Value`'s object keeps its keys sorted, which would put
/// `components` first; the fields below the top level stay sorted.
fn in_conventional_order(doc: &Value) -> String {
    let Some(fields) = doc.as_object() else {
        return doc.to_string();
    };
    let mut names: Vec<&str> = TOP_LEVEL_ORDER
        .iter()
        .copied()
        .filter(|name| fields.contains_key(*name))
        .collect();
    names.extend(
        fields
            .keys()
            .map(String::as_str)
            .filter(|name| !TOP_LEVEL_ORDER.contains(name)),
    );
    let members: Vec<String> = names
        .iter()
        .map(|name| format!("{}:{}", Value::from(*name), fields[*name]))
        .collect();
    format!("{{{}}}", members.join(","))
}

/// The problem+json content of an error response.
fn problem_content() -> Value {
    json!({"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}})
}

/// How an interval is written (`Spec::parse_every`, without surrounding spaces).
const INTERVAL_PATTERN: &str = "^([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?$";

/// [`ApiDoc`] completed for this server.
fn for_server(state: &AppState) -> Value {
    let inner = &state.inner;
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_else(|_| json!({}));
    let types: Vec<&str> = inner.registry.type_names();
    guard(&mut doc, &inner.access);
    camel_case_links(&mut doc);
    parameters(&mut doc);
    let schemas = &mut doc["components"]["schemas"];
    choices(schemas, &types);
    let typed = |key: &str| input_branches(&inner.registry, &types, key);
    schemas["SubmitBody"]["oneOf"] = json!(typed("type"));
    schedule_bodies(
        schemas,
        typed("task_type"),
        inner.prompt_type.as_deref(),
        &inner.registry,
    );
    closed_specs(schemas);
    history_schemas(&mut doc);
    doc
}

/// The shape of a task's history (`spool_core::TaskHistory` as serde writes it, which
/// `utoipa` cannot derive from the core), and the history route's answer as one.
fn history_schemas(doc: &mut Value) {
    let id = json!({"type": "integer", "minimum": 0});
    let any = json!({});
    let error = json!({"type": "object", "description": "The error, tagged by its kind"});
    let tagged = |tag: &str, value: &Value| {
        json!({"type": "object", "required": [tag], "properties": {tag: value},
            "additionalProperties": false})
    };
    let step = json!({
        "type": "object",
        "description": "One poll of the task.",
        "required": ["step", "at", "answers", "children_ended", "requests", "spawned", "end"],
        "properties": {
            "step": {"type": "integer", "minimum": 0, "description": "Its number within the task, from 0"},
            "at": {"type": "integer", "minimum": 0, "description": "When it ran: the runtime's clock, in nanoseconds"},
            "answers": {"type": "array", "description": "The answers that had arrived for it", "items": {
                "type": "object", "required": ["request", "result"], "properties": {
                    "request": {"type": "integer", "minimum": 1},
                    "result": {"oneOf": [tagged("Ok", &any), tagged("Err", &error)]},
                }}},
            "children_ended": {"type": "array", "items": id, "description": "Children whose outcome had arrived"},
            "requests": {"type": "array", "description": "The requests it made", "items": {
                "type": "object", "required": ["number", "kind", "payload"], "properties": {
                    "number": {"type": "integer", "minimum": 1},
                    "kind": {"type": "string"},
                    "payload": any,
                }}},
            "spawned": {"type": "array", "items": id, "description": "Children it spawned"},
            "end": {"oneOf": [
                {"type": "string", "enum": ["Yielded", "Waiting"]},
                tagged("Returned", &any),
                tagged("Failed", &error),
            ]},
        },
    });
    let history = json!({
        "type": "object",
        "description": "A task's steps, read from the store.",
        "required": ["task", "type_name", "agent", "submitted_at", "input", "origin", "steps", "end"],
        "properties": {
            "task": id,
            "type_name": {"type": "string"},
            "agent": {"type": "string"},
            "submitted_at": {"type": "integer", "minimum": 0, "description": "The runtime's clock, in nanoseconds"},
            "input": {"description": "What it was submitted with, if its type keeps an input"},
            "origin": {"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/ForkOriginBody"}],
                "description": "For a fork: the task and step it was forked from"},
            "steps": {"type": "array", "items": {"$ref": "#/components/schemas/HistoryStep"}},
            "end": {"oneOf": [
                {"type": "string", "enum": ["Live"]},
                tagged("Completed", &any),
                tagged("Failed", &error),
                tagged("Canceled", &json!({"type": "string"})),
            ]},
        },
    });
    doc["components"]["schemas"]["HistoryStep"] = step;
    doc["components"]["schemas"]["TaskHistory"] = history;
    let ok = &mut doc["paths"]["/v1/tasks/{id}/history"]["get"]["responses"]["200"];
    if ok.is_object() {
        ok["content"] =
            json!({"application/json": {"schema": {"$ref": "#/components/schemas/TaskHistory"}}});
    }
}

/// The parameters' ranges and choices: task ids are u64 (the whole range, not
/// int64's), and a list's `state` is one of the state tags.
fn parameters(doc: &mut Value) {
    let id = json!({"type": "integer", "minimum": 0, "maximum": u64::MAX});
    for (path, method, name) in [
        ("/v1/tasks/{id}", "get", "id"),
        ("/v1/tasks/{id}/cancel", "post", "id"),
        ("/v1/tasks/{id}/history", "get", "id"),
        ("/v1/tasks/{id}/fork", "post", "id"),
        ("/v1/events", "get", "task"),
    ] {
        if let Some(parameters) = doc["paths"][path][method]["parameters"].as_array_mut() {
            for parameter in parameters.iter_mut().filter(|p| p["name"] == name) {
                parameter["schema"] = id.clone();
            }
        }
    }
    if let Some(parameters) =
        doc["paths"]["/v1/schedules/{slug}"]["put"]["parameters"].as_array_mut()
    {
        for parameter in parameters
            .iter_mut()
            .filter(|p| p["name"] == "If-None-Match")
        {
            parameter["schema"] = json!({"type": "string", "enum": ["*"]});
        }
    }
    if let Some(parameters) = doc["paths"]["/v1/tasks"]["get"]["parameters"].as_array_mut() {
        for parameter in parameters.iter_mut().filter(|p| p["name"] == "state") {
            parameter["schema"]["enum"] = json!(STATE_TAGS);
        }
    }
}

/// The choices the bodies' strings are checked against: a submission's type is one
/// of this server's `types`, and so is a schedule's task type.
fn choices(schemas: &mut Value, types: &[&str]) {
    schemas["SubmitBody"]["properties"]["type"]["enum"] = json!(types);
    schemas["SubmitBody"]["properties"]["type"]["minLength"] = json!(1);
    schemas["SubmitBody"]["properties"]["priority"]["enum"] =
        json!(["low", "normal", "high", "critical", null]);
    for body in ["SchedulePutBody", "SchedulePatchBody"] {
        let properties = &mut schemas[body]["properties"];
        properties["task_type"]["enum"] = json!(
            types
                .iter()
                .map(|t| json!(t))
                .chain([Value::Null])
                .collect::<Vec<_>>()
        );
        properties["overlap"]["enum"] = json!([
            "skip",
            "buffer-one",
            "buffer-all",
            "cancel-other",
            "allow-all",
            null
        ]);
        properties["session"]["pattern"] =
            json!("^(persist|fresh|shared:[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)$");
        properties["priority"]["enum"] = json!(["low", "normal", "high", "critical", null]);
        // Not blank: a character other than white space.
        properties["agent"]["pattern"] = json!("\\S");
    }
}

/// The one-of branches of a body naming its type in `key`: its input fits its type's
/// input schema (one branch per type that has one; the input must be given when that
/// schema requires members, as `{}` would not fit), and one branch for the types
/// without a schema.
fn input_branches(registry: &TaskRegistry, types: &[&str], key: &str) -> Vec<Value> {
    let mut branches = Vec::new();
    let mut schemaless = Vec::new();
    for name in types {
        match registry.input_schema(name) {
            Some(schema) => {
                let needs_input = schema["required"].as_array().is_some_and(|r| !r.is_empty());
                let required: Vec<&str> = if needs_input {
                    vec![key, "input"]
                } else {
                    vec![key]
                };
                branches.push(json!({"required": required,
                    "properties": {key: {"const": name}, "input": schema}}));
            }
            None => schemaless.push(*name),
        }
    }
    if !schemaless.is_empty() {
        branches.push(json!({"required": [key], "properties": {key: {"enum": schemaless}}}));
    }
    branches
}

/// The schedule bodies' one-of shapes. PUT: a task type (with its input: `typed`, its
/// branches) or a prompt (the input of `prompt_type`), exactly one of them; PATCH: not
/// both. A null counts as not given, as it does for the server.
fn schedule_bodies(
    schemas: &mut Value,
    mut typed: Vec<Value>,
    prompt_type: Option<&str>,
    registry: &TaskRegistry,
) {
    let prompt = json!({"required": ["prompt"], "properties": {"prompt": {"type": "string"}}});
    if prompt_type.is_some() {
        let mut alone = prompt.clone();
        alone["properties"]["input"] = json!({"type": "null"});
        // The prompt becomes the input `{"prompt": ...}` of the prompt type.
        let prompt_schema = prompt_type
            .and_then(|t| registry.input_schema(t))
            .map(|schema| schema["properties"]["prompt"].clone())
            .filter(Value::is_object);
        if let Some(schema) = prompt_schema {
            alone["properties"]["prompt"] = schema;
        }
        typed.push(alone);
    } else {
        schemas["SchedulePutBody"]["properties"]["prompt"] = json!({"type": "null",
            "description": "This server has no prompt type: give `task_type` and `input`"});
        schemas["SchedulePatchBody"]["properties"]["prompt"] = json!({"type": "null",
            "description": "This server has no prompt type: give `task_type` and `input`"});
    }
    schemas["SchedulePutBody"]["oneOf"] = json!(typed);
    schemas["SchedulePatchBody"]["not"] = json!({"required": ["task_type", "prompt"],
        "properties": {"task_type": {"type": "string"}, "prompt": {"type": "string"}}});
}

/// The schedule specs take no member they do not name, nested ones neither; intervals
/// are written `1d2h3m4s` (each unit at most once, largest first).
fn closed_specs(schemas: &mut Value) {
    let interval = json!({"type": "string", "minLength": 2, "pattern": INTERVAL_PATTERN,
        "description": "An interval from 1 s to 366 days: `90s`, `5m`, `1h30m`, `1d`"});
    if let Some(variants) = schemas["SpecBody"]["oneOf"].as_array_mut() {
        for variant in variants {
            variant["additionalProperties"] = json!(false);
            if variant["properties"]["every"].is_object() {
                variant["properties"]["every"] = interval.clone();
            }
        }
    }
    if let Some(variants) = schemas["CatchUpBody"]["oneOf"].as_array_mut() {
        for variant in variants.iter_mut().filter(|v| v["type"] == "object") {
            variant["additionalProperties"] = json!(false);
            variant["properties"]["all"] = interval.clone();
        }
    }
}

/// `utoipa` 5.5 writes a link's fields in snake case (`operation_id`); OpenAPI spells
/// them `operationId`, `operationRef`, `requestBody`.
fn camel_case_links(doc: &mut Value) {
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    let responses = paths
        .values_mut()
        .filter_map(Value::as_object_mut)
        .flat_map(|operations| operations.values_mut())
        .filter_map(|operation| operation["responses"].as_object_mut())
        .flat_map(|responses| responses.values_mut());
    for response in responses {
        let Some(links) = response.get_mut("links").and_then(Value::as_object_mut) else {
            continue;
        };
        for link in links.values_mut().filter_map(Value::as_object_mut) {
            for (snake, camel) in [
                ("operation_id", "operationId"),
                ("operation_ref", "operationRef"),
                ("request_body", "requestBody"),
            ] {
                if let Some(value) = link.remove(snake) {
                    link.insert(camel.to_owned(), value);
                }
            }
        }
    }
}

/// Documents who needs the token: a `401` (and `security`) on every operation the
/// server guards, none on those it leaves open.
fn guard(doc: &mut Value, access: &Access) {
    doc["components"]["responses"]["Unauthorized"] = json!({
        "description": "No token, or not the server's (`Authorization: Bearer <token>`)",
        "content": problem_content(),
    });
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for operations in paths.values_mut() {
        let Some(operations) = operations.as_object_mut() else {
            continue;
        };
        for (method, operation) in operations.iter_mut() {
            let declared_open = operation["security"] == json!([{}]);
            let guarded = !declared_open
                && match access {
                    Access::Token(_) => true,
                    Access::PublicRead(_) => method != "get" && method != "head",
                    Access::Open => false,
                };
            if guarded {
                operation["responses"]["401"] =
                    json!({"$ref": "#/components/responses/Unauthorized"});
            } else {
                operation["security"] = json!([{}]);
            }
        }
    }
}
