//! The observer that turns what the loop does into spans: one per task (a trace's root,
//! or a child of the span of the task that spawned it), one per request under its
//! task's. A span is handed to the exporter whole when it ends, with the times things
//! happened; its ids are chosen when it starts, so a task's place in the tree can be
//! settled after its first request was seen (the loop reports a turn's transitions
//! after the requests it let out).

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, SpanData, SpanEvents, SpanLinks, SpanProcessor,
};
use spool_core::{Cause, OutboundRequest, Phase, Response, TaskId, TaskState, TraceEvent};
use spool_runtime::{Observed, Observer};

use crate::genai::{self, Usage};

/// The observer: open task and request spans, by task.
pub(crate) struct SpanObserver {
    sink: Arc<dyn SpanProcessor>,
    ids: RandomIdGenerator,
    scope: InstrumentationScope,
    provider: String,
    model: Option<String>,
    tasks: BTreeMap<TaskId, TaskSpan>,
}

impl fmt::Debug for SpanObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpanObserver")
            .field("open_tasks", &self.tasks.len())
            .finish_non_exhaustive()
    }
}

/// A task's span while the task lives.
struct TaskSpan {
    span_id: SpanId,
    /// Its trace and parent span, once its first transition showed whether a task
    /// spawned it.
    place: Option<Place>,
    start: SystemTime,
    name: String,
    attributes: Vec<KeyValue>,
    /// Its requests' spans, by request number, while they are out.
    requests: BTreeMap<u32, RequestSpan>,
    /// Request spans that ended before its place was settled.
    ended: Vec<Ended>,
    /// The tool calls its last LLM answer asked for and no request carried yet: name
    /// and call id, in the order asked.
    calls: VecDeque<(String, Option<String>)>,
    /// Tokens its LLM requests used, as their answers report them.
    usage: Usage,
}

#[derive(Copy, Clone)]
struct Place {
    trace_id: TraceId,
    parent: SpanId,
}

/// A request's span while the request is out.
struct RequestSpan {
    span_id: SpanId,
    start: SystemTime,
    started: genai::Started,
    llm: bool,
}

/// A span that ended, waiting for its place in the tree.
struct Ended {
    span_id: SpanId,
    name: String,
    kind: SpanKind,
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
    status: Status,
}

impl SpanObserver {
    /// An observer that hands finished spans to `sink`, naming `provider` as LLM
    /// requests' provider and `model` as their model when the payload names none.
    pub(crate) fn new(
        sink: Arc<dyn SpanProcessor>,
        provider: String,
        model: Option<String>,
    ) -> SpanObserver {
        SpanObserver {
            sink,
            ids: RandomIdGenerator::default(),
            scope: InstrumentationScope::builder("spool")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            provider,
            model,
            tasks: BTreeMap::new(),
        }
    }

    /// Task `id`'s span, opened at `at` if this is the first sight of the task.
    fn task(&mut self, observed: &Observed<'_>, id: TaskId, at: SystemTime) -> &mut TaskSpan {
        let ids = &self.ids;
        self.tasks.entry(id).or_insert_with(|| {
            let info = observed.scheduler().task(id);
            let agent = info.as_ref().map(|t| t.agent.clone());
            let type_name = info.map(|t| t.type_name.into_owned());
            let mut attributes = vec![
                KeyValue::new(genai::OPERATION, "invoke_agent"),
                KeyValue::new("spool.task.id", task_number(id)),
            ];
            if let Some(agent) = &agent {
                attributes.push(KeyValue::new("gen_ai.agent.name", agent.clone()));
                attributes.push(KeyValue::new("spool.agent", agent.clone()));
            }
            if let Some(type_name) = type_name {
                attributes.push(KeyValue::new("spool.task.type", type_name));
            }
            TaskSpan {
                span_id: ids.new_span_id(),
                place: None,
                start: at,
                name: agent.map_or_else(
                    || "invoke_agent".to_owned(),
                    |a| format!("invoke_agent {a}"),
                ),
                attributes,
                requests: BTreeMap::new(),
                ended: Vec::new(),
                calls: VecDeque::new(),
                usage: Usage::default(),
            }
        })
    }

    /// Settles the place of task `id` at its first transition `event`: under the span
    /// of the task that spawned it, or the root of a new trace. Its request spans that
    /// ended meanwhile are handed out.
    fn place(&mut self, id: TaskId, event: &TraceEvent, at: SystemTime) {
        let parent = match event.cause {
            Cause::Spawned(parent) => self
                .tasks
                .get(&parent)
                .and_then(|p| p.place.map(|place| (place.trace_id, p.span_id))),
            _ => None,
        };
        let place = match parent {
            Some((trace_id, parent)) => Place { trace_id, parent },
            None => Place {
                trace_id: self.ids.new_trace_id(),
                parent: SpanId::INVALID,
            },
        };
        let Some(task) = self.tasks.get_mut(&id) else {
            return;
        };
        task.place = Some(place);
        task.start = task.start.min(at);
        let ended = std::mem::take(&mut task.ended);
        let parent = task.span_id;
        for span in ended {
            self.export(place.trace_id, parent, span);
        }
    }

    /// Ends task `id`'s span at `at` with the transition `event` that ended it, ending
    /// its requests still out as canceled.
    fn end_task(
        &mut self,
        observed: &Observed<'_>,
        id: TaskId,
        event: &TraceEvent,
        at: SystemTime,
    ) {
        let Some(mut task) = self.tasks.remove(&id) else {
            return;
        };
        let Some(place) = task.place else {
            return;
        };
        for request in std::mem::take(&mut task.requests).into_values() {
            let mut span = request.ended(at);
            span.attributes
                .push(KeyValue::new("spool.request.outcome", "canceled"));
            self.export(place.trace_id, task.span_id, span);
        }
        let (outcome, status) = match event.to {
            Phase::Completed => ("ok", Status::Unset),
            Phase::Failed => {
                let description = match observed.scheduler().task_state(id) {
                    Some(TaskState::Completed(Err(error))) => error.to_string(),
                    _ => event.cause.to_string(),
                };
                ("error", Status::error(description))
            }
            _ => ("canceled", Status::Unset),
        };
        task.attributes
            .push(KeyValue::new("spool.task.outcome", outcome));
        task.attributes
            .push(KeyValue::new("spool.task.cause", event.cause.to_string()));
        self.export_task(task, place, at, status);
    }

    fn export_task(&self, mut task: TaskSpan, place: Place, end: SystemTime, status: Status) {
        if let Some(n) = task.usage.input {
            task.attributes
                .push(KeyValue::new("gen_ai.usage.input_tokens", n));
        }
        if let Some(n) = task.usage.output {
            task.attributes
                .push(KeyValue::new("gen_ai.usage.output_tokens", n));
        }
        let span = Ended {
            span_id: task.span_id,
            name: task.name,
            kind: SpanKind::Internal,
            start: task.start,
            end,
            attributes: task.attributes,
            status,
        };
        self.export(place.trace_id, place.parent, span);
    }

    /// Hands `span` to the exporter, in trace `trace_id` under `parent`.
    fn export(&self, trace_id: TraceId, parent: SpanId, span: Ended) {
        let context = SpanContext::new(
            trace_id,
            span.span_id,
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        );
        self.sink.on_end(SpanData {
            span_context: context,
            parent_span_id: parent,
            parent_span_is_remote: false,
            span_kind: span.kind,
            name: Cow::Owned(span.name),
            start_time: span.start,
            end_time: span.end.max(span.start),
            attributes: span.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: span.status,
            instrumentation_scope: self.scope.clone(),
        });
    }
}

impl RequestSpan {
    /// The span, ended at `end` (its outcome and status still to add).
    fn ended(self, end: SystemTime) -> Ended {
        Ended {
            span_id: self.span_id,
            name: self.started.name,
            kind: self.started.kind,
            start: self.start,
            end,
            attributes: self.started.attributes,
            status: Status::Unset,
        }
    }
}

impl Observer for SpanObserver {
    fn on_request(&mut self, observed: &Observed<'_>, out: &OutboundRequest) {
        let now = observed.wall_now();
        let span_id = self.ids.new_span_id();
        let (provider, model) = (self.provider.clone(), self.model.clone());
        let task = self.task(observed, out.key.task(), now);
        let kind = &out.request.kind;
        let call_id = kind.tool_name().and_then(|name| {
            let at = task.calls.iter().position(|(n, _)| n == name)?;
            task.calls.remove(at).and_then(|(_, id)| id)
        });
        let payload = out.request.payload.value();
        let mut started = genai::started(
            kind,
            payload,
            &provider,
            model.as_deref(),
            call_id.as_deref(),
        );
        started.attributes.extend([
            KeyValue::new("spool.task.id", task_number(out.key.task())),
            KeyValue::new("spool.request.kind", kind.to_string()),
            KeyValue::new("spool.request.number", i64::from(out.key.number())),
        ]);
        let request = RequestSpan {
            span_id,
            start: now,
            started,
            llm: *kind == spool_core::Kind::Llm,
        };
        task.requests.insert(out.key.number(), request);
    }

    fn on_answer(&mut self, observed: &Observed<'_>, response: &Response) {
        let now = observed.wall_now();
        let Some(task) = self.tasks.get_mut(&response.key.task()) else {
            return;
        };
        let number = response.key.number();
        let Some(request) = task.requests.remove(&number) else {
            return;
        };
        let llm = request.llm;
        let mut span = request.ended(now);
        match &response.result {
            Ok(answer) => {
                if llm {
                    let used = genai::answered_llm(answer, &mut span.attributes);
                    task.usage.input = sum(task.usage.input, used.input);
                    task.usage.output = sum(task.usage.output, used.output);
                    task.calls = genai::tool_calls(answer).collect();
                }
                span.attributes
                    .push(KeyValue::new("spool.request.outcome", "ok"));
            }
            Err(error) => {
                span.attributes
                    .push(KeyValue::new("error.type", genai::error_type(error)));
                span.attributes
                    .push(KeyValue::new("spool.request.outcome", "error"));
                span.status = Status::error(error.to_string());
            }
        }
        match task.place {
            Some(place) => {
                let parent = task.span_id;
                self.export(place.trace_id, parent, span);
            }
            None => task.ended.push(span),
        }
    }

    fn on_events(&mut self, observed: &Observed<'_>, events: &[TraceEvent]) {
        for event in events {
            let at = observed.wall_time(event.time);
            let placed = self.task(observed, event.task, at).place.is_some();
            if !placed {
                self.place(event.task, event, at);
            }
            if matches!(event.to, Phase::Completed | Phase::Failed | Phase::Canceled) {
                self.end_task(observed, event.task, event, at);
            }
        }
    }
}

impl Drop for SpanObserver {
    /// Ends the spans of the tasks still open (the runtime stopped while they were
    /// live: they go on after a restart, in a new trace) as unfinished, now.
    fn drop(&mut self) {
        let now = SystemTime::now();
        for (_, mut task) in std::mem::take(&mut self.tasks) {
            let place = task.place.unwrap_or(Place {
                trace_id: self.ids.new_trace_id(),
                parent: SpanId::INVALID,
            });
            for span in std::mem::take(&mut task.ended) {
                self.export(place.trace_id, task.span_id, span);
            }
            for request in std::mem::take(&mut task.requests).into_values() {
                let mut span = request.ended(now);
                span.attributes
                    .push(KeyValue::new("spool.request.outcome", "unfinished"));
                self.export(place.trace_id, task.span_id, span);
            }
            task.attributes
                .push(KeyValue::new("spool.task.outcome", "unfinished"));
            self.export_task(task, place, now, Status::Unset);
        }
    }
}

fn task_number(id: TaskId) -> i64 {
    i64::try_from(id.get()).unwrap_or(i64::MAX)
}

fn sum(total: Option<i64>, more: Option<i64>) -> Option<i64> {
    match (total, more) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    }
}
