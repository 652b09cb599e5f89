//! The `/metrics` text (the Prometheus text format, version 0.0.4): a table of metric
//! families — each a name, a type, a help line and how its samples are read from the
//! views — written in order by one loop.

use std::collections::BTreeMap;
use std::fmt::{Display, Write as _};

use spool_core::{QueueState, SpendReport};

use crate::histogram::Histogram;
use crate::views::{STATE_TAGS, Views, state_tag};

/// The metrics text of `views`, with `too_many` submissions answered 429.
pub(super) fn text(views: &Views, too_many: u64) -> String {
    let source = Source { views, too_many };
    let mut out = String::new();
    for family in FAMILIES {
        let queue = match family.read {
            Read::Views(_) => None,
            Read::Queue(_) => match &views.queue {
                Some(queue) => Some(queue),
                // No queue published yet: the family is left out, help and type too.
                None => continue,
            },
            // Without budgets nothing is counted: the family is left out.
            Read::Spend(_) if views.spend.is_none() => continue,
            Read::Spend(_) => None,
        };
        let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
        let _ = writeln!(
            out,
            "# TYPE {} {}",
            family.name,
            family.metric_type.as_str()
        );
        let mut samples = Samples {
            out: &mut out,
            name: family.name,
        };
        match (family.read, queue) {
            (Read::Views(read), _) => read(&source, &mut samples),
            (Read::Queue(read), Some(queue)) => read(&source, queue, &mut samples),
            (Read::Queue(_), None) => {}
            (Read::Spend(read), _) => {
                if let Some(spend) = &views.spend {
                    read(spend, &mut samples);
                }
            }
        }
    }
    out
}

/// What the families are read from.
struct Source<'v> {
    views: &'v Views,
    /// Submissions answered 429 (counted by the server, not the loop).
    too_many: u64,
}

/// A Prometheus metric type.
#[derive(Clone, Copy)]
enum MetricType {
    Counter,
    Gauge,
    Histogram,
    Summary,
}

impl MetricType {
    fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::Summary => "summary",
        }
    }
}

/// How a family's samples are read.
#[derive(Clone, Copy)]
enum Read {
    /// From the views.
    Views(fn(&Source<'_>, &mut Samples<'_>)),
    /// From the views' queue: the family is there only once the loop published one.
    Queue(fn(&Source<'_>, &QueueState, &mut Samples<'_>)),
    /// From the spend: the family is there only when the scheduler has budgets.
    Spend(fn(&SpendReport, &mut Samples<'_>)),
}

/// One metric family.
struct MetricFamily {
    name: &'static str,
    metric_type: MetricType,
    help: &'static str,
    read: Read,
}

/// A family read from the views.
const fn of_views(
    name: &'static str,
    metric_type: MetricType,
    help: &'static str,
    read: fn(&Source<'_>, &mut Samples<'_>),
) -> MetricFamily {
    MetricFamily {
        name,
        metric_type,
        help,
        read: Read::Views(read),
    }
}

/// A family read from the views' queue.
const fn of_queue(
    name: &'static str,
    metric_type: MetricType,
    help: &'static str,
    read: fn(&Source<'_>, &QueueState, &mut Samples<'_>),
) -> MetricFamily {
    MetricFamily {
        name,
        metric_type,
        help,
        read: Read::Queue(read),
    }
}

/// A family read from the spend.
const fn of_spend(
    name: &'static str,
    metric_type: MetricType,
    help: &'static str,
    read: fn(&SpendReport, &mut Samples<'_>),
) -> MetricFamily {
    MetricFamily {
        name,
        metric_type,
        help,
        read: Read::Spend(read),
    }
}

/// Every family `/metrics` writes, in the order it writes them.
const FAMILIES: &[MetricFamily] = &[
    of_views(
        "spool_tasks",
        MetricType::Gauge,
        "Tasks in the table by state.",
        tasks_by_state,
    ),
    of_views(
        "spool_tasks_submitted_total",
        MetricType::Counter,
        "Tasks submitted.",
        |s, out| out.one(s.views.stats.submitted),
    ),
    of_views(
        "spool_tasks_completed_total",
        MetricType::Counter,
        "Tasks that completed with a value.",
        |s, out| out.one(s.views.stats.completed),
    ),
    of_views(
        "spool_tasks_failed_total",
        MetricType::Counter,
        "Tasks that completed with an error.",
        |s, out| out.one(s.views.stats.failed),
    ),
    of_views(
        "spool_tasks_canceled_total",
        MetricType::Counter,
        "Tasks canceled.",
        |s, out| out.one(s.views.stats.canceled),
    ),
    of_views(
        "spool_tasks_rejected_total",
        MetricType::Counter,
        "Submissions rejected.",
        |s, out| out.one(s.views.stats.rejected),
    ),
    of_views(
        "spool_polls_total",
        MetricType::Counter,
        "Task polls.",
        |s, out| out.one(s.views.stats.polls),
    ),
    of_views(
        "spool_requests_sent_total",
        MetricType::Counter,
        "Requests sent out.",
        |s, out| out.one(s.views.stats.requests),
    ),
    of_views(
        "spool_answers_total",
        MetricType::Counter,
        "Answers delivered.",
        |s, out| out.one(s.views.stats.answers),
    ),
    of_views(
        "spool_answers_dropped_total",
        MetricType::Counter,
        "Answers dropped (late or unknown).",
        |s, out| out.one(s.views.stats.dropped_answers),
    ),
    of_views(
        "spool_rate_limited_total",
        MetricType::Counter,
        "429 answers backed off from, and submissions told rate_limited.",
        |s, out| out.one(s.views.stats.rate_limited),
    ),
    of_views(
        "spool_deadlines_exceeded_total",
        MetricType::Counter,
        "Tasks failed by their deadline.",
        |s, out| out.one(s.views.stats.deadlines_exceeded),
    ),
    of_views(
        "spool_requests_total",
        MetricType::Counter,
        "Answers by request kind and outcome: ok, error, or backed_off (a 429 that sent the request back to its gate).",
        |s, out| {
            for ((kind, outcome), n) in &s.views.requests.by_kind {
                out.sample("", &[("kind", kind), ("outcome", outcome)], n);
            }
        },
    ),
    of_queue(
        "spool_requests_in_flight",
        MetricType::Gauge,
        "Requests sent to an executor and not answered, by kind (held ones not counted).",
        |s, queue, out| {
            for (kind, (in_flight, _)) in requests_by_kind(s.views, queue) {
                out.sample("", &[("kind", &kind)], in_flight);
            }
        },
    ),
    of_queue(
        "spool_requests_held",
        MetricType::Gauge,
        "Requests held back by a limiter (at their kind's gate or behind their agent's cap), by kind.",
        |s, queue, out| {
            for (kind, (_, held)) in requests_by_kind(s.views, queue) {
                out.sample("", &[("kind", &kind)], held);
            }
        },
    ),
    of_queue(
        "spool_queue_depth",
        MetricType::Gauge,
        "Tasks waiting for a slot.",
        |_, queue, out| out.one(queue.queued),
    ),
    of_queue(
        "spool_queue_blocked",
        MetricType::Gauge,
        "Tasks waiting for dependencies.",
        |_, queue, out| out.one(queue.blocked),
    ),
    of_queue(
        "spool_queue_ready",
        MetricType::Gauge,
        "Tasks in the run queue.",
        |_, queue, out| out.one(queue.ready),
    ),
    of_queue(
        "spool_rate_limited",
        MetricType::Gauge,
        "1 while a rate limit holds anything back.",
        |_, queue, out| out.one(u8::from(queue.rate_limited)),
    ),
    of_queue(
        "spool_backoff_seconds",
        MetricType::Gauge,
        "Seconds left of a kind's 429 back-off.",
        |s, queue, out| {
            for (kind, until) in &queue.backoffs {
                let left = until.saturating_since(s.views.now).as_secs_f64();
                out.sample("", &[("kind", &kind.to_string())], left);
            }
        },
    ),
    of_views(
        "spool_task_wait_seconds",
        MetricType::Histogram,
        "Each ended task's time waiting for a slot or a rate limit.",
        |s, out| out.histogram(&[], &s.views.histograms.wait),
    ),
    of_views(
        "spool_task_duration_seconds",
        MetricType::Histogram,
        "Each ended task's time from its submission to its end.",
        |s, out| out.histogram(&[], &s.views.histograms.duration),
    ),
    of_views(
        "spool_request_wait_seconds",
        MetricType::Histogram,
        "Each wait of a task on one request, by kind (observed when the task ends).",
        |s, out| {
            for (kind, waits) in &s.views.histograms.request_wait {
                out.histogram(&[("kind", kind)], waits);
            }
        },
    ),
    of_views(
        "spool_loop_turn_seconds",
        MetricType::Summary,
        "The run loop's turns.",
        |s, out| {
            out.sample("_sum", &[], s.views.turns.total.as_secs_f64());
            out.sample("_count", &[], s.views.turns.turns);
        },
    ),
    of_views(
        "spool_loop_turn_seconds_max",
        MetricType::Gauge,
        "The longest turn so far.",
        |s, out| out.one(s.views.turns.max.as_secs_f64()),
    ),
    of_views(
        "spool_views_generation",
        MetricType::Counter,
        "Publications of the views.",
        |s, out| out.one(s.views.generation),
    ),
    of_views(
        "spool_http_too_many_requests_total",
        MetricType::Counter,
        "Submissions answered 429 (a full queue).",
        |s, out| out.one(s.too_many),
    ),
    of_spend(
        "spool_spend_tokens_total",
        MetricType::Counter,
        "LLM tokens the provider reported, by agent and direction (input, output).",
        |spend, out| {
            for (agent, s) in &spend.agents {
                out.sample(
                    "",
                    &[("agent", agent), ("direction", "input")],
                    s.input_tokens,
                );
                out.sample(
                    "",
                    &[("agent", agent), ("direction", "output")],
                    s.output_tokens,
                );
            }
        },
    ),
    of_spend(
        "spool_spend_cost_usd_total",
        MetricType::Counter,
        "The cost of those tokens in US dollars by the prices per model, by agent.",
        |spend, out| {
            for (agent, s) in &spend.agents {
                out.sample("", &[("agent", agent)], usd(s.micro_usd));
            }
        },
    ),
    of_spend(
        "spool_spend_day_tokens",
        MetricType::Gauge,
        "LLM tokens of the current UTC day, by direction.",
        |spend, out| {
            let date = day_label(spend);
            let labels = |direction| [("date", date.as_str()), ("direction", direction)];
            out.sample("", &labels("input"), spend.today.input_tokens);
            out.sample("", &labels("output"), spend.today.output_tokens);
        },
    ),
    of_spend(
        "spool_spend_day_cost_usd",
        MetricType::Gauge,
        "The cost of the current UTC day's tokens in US dollars.",
        |spend, out| {
            out.sample(
                "",
                &[("date", &day_label(spend))],
                usd(spend.today.micro_usd),
            )
        },
    ),
    of_spend(
        "spool_budget_held_requests",
        MetricType::Gauge,
        "LLM requests held until the next day's budget.",
        |spend, out| out.one(spend.held),
    ),
];

/// Micro-dollars as dollars, printed exactly (`0.000525`).
fn usd(micro: u64) -> String {
    let text = format!("{}.{:06}", micro / 1_000_000, micro % 1_000_000);
    let text = text.trim_end_matches('0');
    text.strip_suffix('.').unwrap_or(text).to_owned()
}

/// The current day's date (`2026-11-27`), or `unknown` for a scheduler without a
/// wall clock.
fn day_label(spend: &SpendReport) -> String {
    spend
        .date
        .map_or_else(|| "unknown".to_owned(), |d| d.to_string())
}

/// Every state with its tasks in the table (zero for a state none is in).
fn tasks_by_state(s: &Source<'_>, out: &mut Samples<'_>) {
    let mut by_state: BTreeMap<&str, u64> = STATE_TAGS.iter().map(|t| (*t, 0)).collect();
    for row in s.views.tasks.values() {
        *by_state.entry(state_tag(&row.state)).or_insert(0) += 1;
    }
    for (tag, n) in &by_state {
        out.sample("", &[("state", tag)], n);
    }
}

/// Each kind with a gate, or with requests in flight or held: `(in flight, held)`, by
/// kind.
fn requests_by_kind(views: &Views, queue: &QueueState) -> BTreeMap<String, (usize, usize)> {
    let mut kinds: BTreeMap<String, (usize, usize)> = views
        .gates
        .iter()
        .map(|g| (g.kind.to_string(), (0, 0)))
        .collect();
    for k in &queue.by_kind {
        kinds.insert(k.kind.to_string(), (k.in_flight, k.held));
    }
    kinds
}

/// Writes one family's samples.
struct Samples<'o> {
    out: &'o mut String,
    name: &'static str,
}

impl Samples<'_> {
    /// The family's one sample: `NAME VALUE`.
    fn one(&mut self, value: impl Display) {
        self.sample("", &[], value);
    }

    /// `NAME{SUFFIX}{label="value",...} VALUE` (no braces without labels), each label
    /// value escaped.
    fn sample(&mut self, suffix: &str, labels: &[(&str, &str)], value: impl Display) {
        let _ = write!(self.out, "{}{suffix}", self.name);
        for (i, (label, text)) in labels.iter().enumerate() {
            let open = if i == 0 { "{" } else { "," };
            let _ = write!(self.out, "{open}{label}=\"{}\"", escape(text));
        }
        let close = if labels.is_empty() { "" } else { "}" };
        let _ = writeln!(self.out, "{close} {value}");
    }

    /// A histogram's samples: a bucket for each bound (`labels` then its `le`), the
    /// sum, the count.
    fn histogram(&mut self, labels: &[(&str, &str)], h: &Histogram) {
        for (le, n) in h.buckets() {
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample("_bucket", &with_le, n);
        }
        self.sample("_sum", labels, h.sum().as_secs_f64());
        self.sample("_count", labels, h.count());
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests;
