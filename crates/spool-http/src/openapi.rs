//! The OpenAPI document, generated from the handlers' and bodies' annotations
//! (`utoipa`), never kept by hand.

use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::problem::{FieldError, Problem};
use crate::routes::tasks::{
    AdmissionBody, IntervalBody, SubmitBody, Submitted, TaskBody, TaskPage, TaskTypeBody,
    TimingBody,
};
use crate::routes::{
    AnswerBody, BackoffBody, CatchUpBody, ConfirmationBody, QueueBody, QueueDetailBody,
    ScheduleBody, ScheduleOutcome, SchedulePatchBody, SchedulePutBody, ScheduleStatusBody,
    SpecBody, WaitingBody,
};

/// The API's OpenAPI 3.1 description.
#[derive(Debug, OpenApi)]
#[openapi(
    info(title = "spool", description = "The HTTP API of spool: tasks, schedules, confirmations, the queue, events and metrics. Every error is RFC 9457 application/problem+json."),
    paths(
        crate::routes::tasks::submit, crate::routes::tasks::list, crate::routes::tasks::get,
        crate::routes::tasks::cancel, crate::routes::tasks::types,
        crate::routes::confirmations::list, crate::routes::confirmations::answer,
        crate::routes::schedules::list, crate::routes::schedules::get, crate::routes::schedules::put,
        crate::routes::schedules::patch, crate::routes::schedules::delete, crate::routes::schedules::run,
        crate::routes::schedules::pause, crate::routes::schedules::resume,
        crate::routes::queue::get, crate::routes::events::stream,
        crate::routes::ops::healthz, crate::routes::ops::metrics,
        document,
    ),
    components(schemas(
        Problem, FieldError, SubmitBody, Submitted, AdmissionBody, TaskBody, TaskPage, TimingBody, IntervalBody, TaskTypeBody,
        ConfirmationBody, AnswerBody, QueueBody, QueueDetailBody, WaitingBody, BackoffBody,
        ScheduleBody, SchedulePutBody, SchedulePatchBody, ScheduleStatusBody, SpecBody, CatchUpBody, ScheduleOutcome,
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
#[utoipa::path(get, path = "/v1/openapi.json", responses((status = 200, description = "The OpenAPI document", content_type = "application/json")))]
pub(crate) async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
