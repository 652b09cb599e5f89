//! `spool schedule ... --addr URL`: the store commands made of a running server's HTTP
//! API calls (`/v1/schedules`, `/v1/sessions`, `/v1/tasks`), so that a live deployment
//! is managed without stopping it. What the API answers is read back into the core's
//! [`ScheduleInfo`] and printed as a store's schedules are ([`show`]).

use serde::Deserialize;
use serde_json::{Value, json};
use spool_core::{
    CatchUp, CronSpec, Overlap, Priority, RunResult, ScheduleDef, ScheduleInfo, ScheduleStatus,
    SessionMode, Spec, TaskId,
};

use super::show;
use super::{Change, not_found};
use crate::remote::Client;
use crate::stored::Failure;

/// A schedule as the API gives it (`ScheduleBody`).
#[derive(Debug, Deserialize)]
struct ScheduleBody {
    slug: String,
    task_type: String,
    input: Value,
    enabled: bool,
    schedule: SpecBody,
    session: String,
    overlap: String,
    catch_up: CatchUpBody,
    pause_after_failures: Option<u32>,
    agent: Option<String>,
    priority: String,
    created_at: String,
    updated_at: String,
    status: StatusBody,
}

/// When it fires, as the API spells it.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum SpecBody {
    Cron {
        expression: String,
        tz: Option<String>,
    },
    Interval {
        every: String,
    },
    Once {
        at: String,
    },
}

/// Its catch-up policy, as the API spells it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum CatchUpBody {
    Latest,
    None,
    All(String),
}

/// Its status, as the API gives it.
#[derive(Debug, Deserialize)]
struct StatusBody {
    next_run: Option<String>,
    last_run: Option<String>,
    last_result: Option<String>,
    last_error: Option<String>,
    session: Option<String>,
    runs: u64,
    consecutive_failures: u32,
    missed: u64,
    running: Vec<u64>,
    paused_reason: Option<String>,
    last_fire: Option<String>,
    buffered: Vec<String>,
    retry: Option<RetryBody>,
}

/// A fire waiting for its busy session, as the API gives it.
#[derive(Debug, Deserialize)]
struct RetryBody {
    fire: String,
    at: String,
}

/// A page of `GET /v1/tasks`: only what the runs need of each task.
#[derive(Debug, Deserialize)]
struct TaskPage {
    tasks: Vec<TaskRow>,
    next_cursor: Option<String>,
}

/// A task of the list.
#[derive(Debug, Deserialize)]
struct TaskRow {
    id: u64,
    result: Option<Value>,
    #[serde(default)]
    result_omitted: bool,
}

/// What `POST /v1/schedules/{slug}/run` answers.
#[derive(Debug, Deserialize)]
struct Outcome {
    status: String,
    task: Option<u64>,
    detail: Option<String>,
}

/// The part of a session `show` prints.
#[derive(Debug, Deserialize)]
struct SessionBody {
    message_count: usize,
}

/// The most tasks a page of the list holds (the API's largest page).
const PAGE: usize = 1000;

/// A running server, reached through its HTTP API.
#[derive(Debug)]
pub(super) struct Server {
    client: Client,
}

impl Server {
    /// The server `client` calls.
    pub(super) fn new(client: Client) -> Server {
        Server { client }
    }

    /// `spool schedule list`.
    pub(super) fn list(&self, json: bool) -> Result<String, Failure> {
        let bodies: Vec<ScheduleBody> = self.read("/v1/schedules")?;
        let schedules = bodies
            .into_iter()
            .map(info)
            .collect::<Result<Vec<_>, _>>()?;
        if json {
            let all = schedules.iter().map(show::info_json).collect();
            return Ok(format!("{}\n", super::pretty(&Value::Array(all))?));
        }
        Ok(show::table(&schedules))
    }

    /// `spool schedule show SLUG`.
    pub(super) fn show(&self, slug: &str, json: bool) -> Result<String, Failure> {
        let info = self.schedule(slug)?;
        let messages = match &info.status.session {
            Some(id) => self.session_messages(id)?,
            None => None,
        };
        if json {
            let mut value = show::info_json(&info);
            value["session_messages"] = json!(messages.unwrap_or(0));
            return Ok(format!("{}\n", super::pretty(&value)?));
        }
        Ok(show::details(&info, messages))
    }

    /// `spool schedule runs SLUG`: the runs going (their fire is not in the API, so
    /// `null`) and the completed tasks whose result names the schedule, by task id.
    pub(super) fn runs(&self, slug: &str, json: bool) -> Result<String, Failure> {
        let info = self.schedule(slug)?;
        let mut runs: Vec<(u64, Value)> = info
            .status
            .running
            .iter()
            .map(|id| {
                let id = id.get();
                let run = json!({"task": id, "fire": null, "state": "running", "answer": null});
                (id, run)
            })
            .collect();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("/v1/tasks?state=completed&limit={PAGE}&cursor={c}"),
                None => format!("/v1/tasks?state=completed&limit={PAGE}"),
            };
            let page: TaskPage = self.read(&path)?;
            for task in page.tasks {
                let result = match (task.result, task.result_omitted) {
                    (_, true) => self.full_result(task.id)?,
                    (result, false) => result,
                };
                let Some(value) = result.filter(|v| v["schedule"]["slug"] == slug) else {
                    continue;
                };
                let run = json!({
                    "task": task.id,
                    "fire": value["schedule"]["fire"],
                    "state": "ok",
                    "answer": value["answer"],
                });
                runs.push((task.id, run));
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        runs.sort_by_key(|(id, _)| *id);
        let runs: Vec<Value> = runs.into_iter().map(|(_, run)| run).collect();
        if json {
            return Ok(format!("{}\n", super::pretty(&Value::Array(runs))?));
        }
        Ok(show::runs_table(&runs, info.status.runs))
    }

    /// `spool schedule add`: made with `PUT` and `If-None-Match: *`, so that the
    /// server refuses it (412), changing nothing, if the schedule exists, however
    /// recently it was made.
    pub(super) fn add(&self, def: &ScheduleDef) -> Result<String, Failure> {
        let slug = def.slug.as_str();
        let path = format!("/v1/schedules/{slug}");
        let (status, text) = self
            .client
            .put_new(&path, &put_body(def))
            .map_err(|error| Failure::Failed(error.said_of(&self.client.endpoint.base)))?;
        match status {
            200 | 201 => {}
            412 => return Err(super::exists(slug)),
            _ => return Err(self.answered(status, &text)),
        }
        let info = info(parse(&path, &text)?)?;
        Ok(format!(
            "added {slug} ({}); next run {}\n",
            show::when(&info.def.spec),
            show::instant(info.status.next_run)
        ))
    }

    /// `pause`, `resume`, `rm` and `run` of `slug`.
    pub(super) fn change(&self, slug: &str, change: Change) -> Result<String, Failure> {
        let path = format!("/v1/schedules/{slug}");
        let (method, path) = match change {
            Change::Pause => ("POST", format!("{path}/pause")),
            Change::Resume => ("POST", format!("{path}/resume")),
            Change::Delete => ("DELETE", path),
            Change::Trigger => ("POST", format!("{path}/run")),
        };
        let (status, text) = self.call(method, &path, None)?;
        match status {
            200 | 202 | 204 => {}
            404 => return Err(not_found(slug)),
            _ => return Err(self.answered(status, &text)),
        }
        Ok(match change {
            Change::Pause => format!("paused {slug}\n"),
            Change::Resume => {
                let info = info(parse(&path, &text)?)?;
                format!(
                    "resumed {slug}; next run {}\n",
                    show::instant(info.status.next_run)
                )
            }
            Change::Delete => format!("removed {slug}\n"),
            Change::Trigger => triggered(slug, parse(&path, &text)?)?,
        })
    }

    /// The schedule `slug`, or the store command's refusal if there is none.
    fn schedule(&self, slug: &str) -> Result<ScheduleInfo, Failure> {
        let path = format!("/v1/schedules/{slug}");
        match self.call("GET", &path, None)? {
            (200, text) => info(parse(&path, &text)?),
            (404, _) => Err(not_found(slug)),
            (status, text) => Err(self.answered(status, &text)),
        }
    }

    /// The number of messages of session `id`; `None` if it is gone.
    fn session_messages(&self, id: &str) -> Result<Option<usize>, Failure> {
        let path = format!("/v1/sessions/{id}");
        match self.call("GET", &path, None)? {
            (200, text) => Ok(Some(parse::<SessionBody>(&path, &text)?.message_count)),
            (404, _) => Ok(None),
            (status, text) => Err(self.answered(status, &text)),
        }
    }

    /// The whole result of task `id` (the list leaves out a large one).
    fn full_result(&self, id: u64) -> Result<Option<Value>, Failure> {
        let task: TaskRow = self.read(&format!("/v1/tasks/{id}"))?;
        Ok(task.result)
    }

    /// `GET path` as JSON; any status but 200 is refused with what the server said.
    fn read<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, Failure> {
        match self.call("GET", path, None)? {
            (200, text) => parse(path, &text),
            (status, text) => Err(self.answered(status, &text)),
        }
    }

    /// `method path`: the status and the body, or why there is no answer.
    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, String), Failure> {
        self.client
            .call(method, path, body)
            .map_err(|error| Failure::Failed(error.said_of(&self.client.endpoint.base)))
    }

    /// A refusal from the server: its status, and the problem's detail (or the start
    /// of the body).
    fn answered(&self, status: u16, text: &str) -> Failure {
        let detail = serde_json::from_str::<Value>(text)
            .ok()
            .and_then(|v| v["detail"].as_str().map(str::to_owned))
            .unwrap_or_else(|| text.chars().take(200).collect());
        Failure::Failed(format!(
            "the server at {} answered {status}: {detail}",
            self.client.endpoint.base
        ))
    }
}

/// `text`, the answer to `path`, as JSON of type `T`.
fn parse<T: serde::de::DeserializeOwned>(path: &str, text: &str) -> Result<T, Failure> {
    serde_json::from_str(text)
        .map_err(|e| Failure::Failed(format!("{path}: not the API's JSON: {e}")))
}

/// What `spool schedule run` says of the API's outcome.
fn triggered(slug: &str, outcome: Outcome) -> Result<String, Failure> {
    let detail = outcome.detail.unwrap_or_default();
    Ok(match (outcome.status.as_str(), outcome.task) {
        ("started", Some(id)) => format!("{slug}: run started as task {id}\n"),
        ("buffered", _) => format!("{slug}: a run is going; this one runs after it\n"),
        ("skipped", _) => {
            format!("{slug}: a run is going; skipped (overlap skip), counted missed\n")
        }
        ("delayed", _) => format!("{slug}: {detail}\n"),
        ("failed", _) => {
            return Err(crate::stored::failed("the run could not start", detail));
        }
        (other, _) => format!("{slug}: {other} {detail}\n"),
    })
}

/// The body of `PUT /v1/schedules/{slug}` that makes `def`.
fn put_body(def: &ScheduleDef) -> Value {
    let schedule = match &def.spec {
        Spec::Cron(cron) => {
            json!({"type": "cron", "expression": cron.expression(), "tz": cron.time_zone()})
        }
        Spec::Every(every) => json!({"type": "interval", "every": show::duration(*every)}),
        Spec::Once(at) => json!({"type": "once", "at": at.to_string()}),
    };
    let session = match &def.session {
        SessionMode::Fresh => "fresh".to_owned(),
        SessionMode::Shared(id) => format!("shared:{id}"),
        _ => "persist".to_owned(),
    };
    let catch_up = match def.catch_up {
        CatchUp::None => json!("none"),
        CatchUp::All { window } => json!({"all": show::duration(window)}),
        _ => json!("latest"),
    };
    let mut body = json!({
        "prompt": def.input.get("prompt"),
        "schedule": schedule,
        "session": session,
        "overlap": def.overlap.name(),
        "catch_up": catch_up,
    });
    if let Some(n) = def.pause_after_failures {
        body["pause_after_failures"] = json!(n);
    }
    if let Some(agent) = &def.agent {
        body["agent"] = json!(agent);
    }
    if let Some(priority) = def.priority {
        body["priority"] = json!(priority.to_string());
    }
    body
}

/// The priority the API names.
fn priority(text: &str) -> Option<Priority> {
    match text {
        "low" => Some(Priority::Low),
        "normal" => Some(Priority::Normal),
        "high" => Some(Priority::High),
        "critical" => Some(Priority::Critical),
        _ => None,
    }
}

/// A schedule the API gave, as the core's [`ScheduleInfo`].
fn info(body: ScheduleBody) -> Result<ScheduleInfo, Failure> {
    let bad = |what: &str, why: String| {
        Failure::Failed(format!(
            "the server's schedule {:?}: {what} is not one: {why}",
            body.slug
        ))
    };
    let instant = |what: &str, text: &str| {
        text.parse::<jiff::Timestamp>()
            .map_err(|e| bad(what, e.to_string()))
    };
    let instants =
        |what: &str, text: &Option<String>| text.as_deref().map(|t| instant(what, t)).transpose();
    let spec = match &body.schedule {
        SpecBody::Cron { expression, tz } => {
            CronSpec::parse(expression, tz.as_deref().unwrap_or("UTC"))
                .map(Spec::Cron)
                .map_err(|e| bad("its cron expression", e.to_string()))?
        }
        SpecBody::Interval { every } => Spec::parse_every(every)
            .map(Spec::Every)
            .map_err(|e| bad("its interval", e.to_string()))?,
        SpecBody::Once { at } => Spec::Once(instant("its instant", at)?),
    };
    let session = match body.session.as_str() {
        "persist" => SessionMode::Persist,
        "fresh" => SessionMode::Fresh,
        other => match other.strip_prefix("shared:") {
            Some(id) => SessionMode::Shared(id.to_owned()),
            None => return Err(bad("its session", other.to_owned())),
        },
    };
    let overlap = Overlap::parse(&body.overlap).map_err(|e| bad("its overlap", e.to_string()))?;
    let catch_up = match &body.catch_up {
        CatchUpBody::Latest => CatchUp::Latest,
        CatchUpBody::None => CatchUp::None,
        CatchUpBody::All(window) => Spec::parse_every(window)
            .map(|window| CatchUp::All { window })
            .map_err(|e| bad("its catch-up window", e.to_string()))?,
    };
    let mut def = ScheduleDef::new(
        body.slug.clone(),
        spec,
        body.task_type.clone(),
        body.input.clone(),
    )
    .enabled(body.enabled)
    .session(session)
    .overlap(overlap)
    .catch_up(catch_up);
    if let Some(n) = body.pause_after_failures {
        def = def.pause_after_failures(n);
    }
    if let Some(agent) = &body.agent {
        def = def.agent(agent.clone());
    }
    let priority =
        priority(&body.priority).ok_or_else(|| bad("its priority", body.priority.clone()))?;
    def = def.priority(priority);
    let s = &body.status;
    let mut status = ScheduleStatus::default();
    status.next_run = instants("its next run", &s.next_run)?;
    status.last_run = instants("its last run", &s.last_run)?;
    status.last_result = match s.last_result.as_deref() {
        None => None,
        Some("success") => Some(RunResult::Success),
        Some(_) => Some(RunResult::Error),
    };
    status.last_error = s.last_error.clone();
    status.session = s.session.clone();
    status.runs = s.runs;
    status.consecutive_failures = s.consecutive_failures;
    status.missed = s.missed;
    status.running = s.running.iter().map(|id| TaskId::from_raw(*id)).collect();
    status.paused_reason = s.paused_reason.clone();
    status.last_fire = instants("its last fire", &s.last_fire)?;
    status.buffered = s
        .buffered
        .iter()
        .map(|fire| instant("a buffered fire", fire))
        .collect::<Result<_, _>>()?;
    status.retry = match &s.retry {
        Some(retry) => Some((
            instant("its retried fire", &retry.fire)?,
            instant("its retry", &retry.at)?,
        )),
        None => None,
    };
    // The core's ScheduleInfo is made only by the core: it is put together through its
    // serde form, which it reads back.
    let whole = json!({
        "def": serde_json::to_value(&def).map_err(|e| bad("its definition", e.to_string()))?,
        "created_at": instant("its creation", &body.created_at)?,
        "updated_at": instant("its last change", &body.updated_at)?,
        "status": serde_json::to_value(&status).map_err(|e| bad("its status", e.to_string()))?,
    });
    serde_json::from_value(whole).map_err(|e| bad("its whole", e.to_string()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{ScheduleBody, info, put_body};
    use crate::schedule::show;

    /// A schedule as `GET /v1/schedules/{slug}` gives it.
    fn body() -> serde_json::Value {
        json!({
            "slug": "standup",
            "task_type": "agent",
            "input": {"prompt": "Summarise"},
            "enabled": false,
            "schedule": {"type": "cron", "expression": "0 9 * * 1-5", "tz": "America/New_York"},
            "session": "fresh",
            "overlap": "buffer-one",
            "catch_up": {"all": "6h"},
            "pause_after_failures": 3,
            "agent": "night-shift",
            "priority": "high",
            "created_at": "2026-11-26T09:00:00Z",
            "updated_at": "2026-11-26T10:00:00Z",
            "status": {
                "next_run": null,
                "last_run": "2026-11-26T09:00:00.5Z",
                "last_result": "error",
                "last_error": "boom",
                "session": null,
                "runs": 4,
                "consecutive_failures": 2,
                "missed": 1,
                "running": [7],
                "paused_reason": "failed 3 times",
                "last_fire": "2026-11-26T09:00:00Z",
                "buffered": ["2026-11-26T09:05:00Z"],
                "retry": {"fire": "2026-11-26T08:00:00Z", "at": "2026-11-26T10:00:00Z"}
            }
        })
    }

    /// A schedule the API gives is read back whole, and printed as a store's.
    #[test]
    fn a_schedule_of_the_api_prints_as_a_stores() {
        let body: ScheduleBody = serde_json::from_value(body()).expect("the API's shape");
        let info = info(body).expect("read back");
        assert_eq!(
            show::details(&info, None),
            "slug                   standup\n\
             prompt                 \"Summarise\"\n\
             when                   cron \"0 9 * * 1-5\" in America/New_York\n\
             enabled                false\n\
             overlap                buffer-one\n\
             catch-up               all:6h\n\
             agent                  night-shift\n\
             priority               high\n\
             created                2026-11-26T09:00:00Z\n\
             next run               - (paused)\n\
             last run               2026-11-26T09:00:00.5Z\n\
             last fire              2026-11-26T09:00:00Z\n\
             last result            error\n\
             last error             boom\n\
             runs                   4\n\
             missed                 1\n\
             consecutive failures   2\n\
             running                7\n\
             paused because         failed 3 times\n\
             session                -\n"
        );
        let json = show::info_json(&info);
        assert_eq!(
            (
                &json["agent"],
                &json["priority"],
                &json["status"]["last_fire"]
            ),
            (
                &json!("night-shift"),
                &json!("high"),
                &json!("2026-11-26T09:00:00Z")
            )
        );
        assert_eq!(
            (&json["status"]["buffered"], &json["status"]["retry"]),
            (
                &json!(["2026-11-26T09:05:00Z"]),
                &json!({"fire": "2026-11-26T08:00:00Z", "at": "2026-11-26T10:00:00Z"})
            )
        );
        assert_eq!(json["pause_after_failures"], 3);
        assert_eq!(json["session_mode"], "fresh");
    }

    /// A problem the server answers is said with its status and its `detail`, which
    /// the report prints with its control characters written visibly; a body that is
    /// not a problem is quoted (its start).
    #[test]
    fn a_refusal_quotes_the_problems_detail() {
        let server = super::Server::new(crate::remote::Client::new(crate::remote::Endpoint {
            base: "http://127.0.0.1:7420".to_owned(),
            token: None,
        }));
        let problem = json!({"status": 409, "detail": "busy \u{1b}]0;pwned\u{7}"}).to_string();
        let failure = server.answered(409, &problem);
        assert_eq!(
            crate::terminal::safe(&failure.to_string()),
            "the server at http://127.0.0.1:7420 answered 409: busy \\x1b]0;pwned\\x07"
        );
        assert_eq!(
            server.answered(502, "Bad Gateway").to_string(),
            "the server at http://127.0.0.1:7420 answered 502: Bad Gateway"
        );
    }

    /// What `add` puts is what the API takes, in its spelling.
    #[test]
    fn add_puts_the_apis_spelling() {
        let body: ScheduleBody = serde_json::from_value(body()).expect("the API's shape");
        let info = info(body).expect("read back");
        assert_eq!(
            put_body(&info.def),
            json!({
                "prompt": "Summarise",
                "schedule": {"type": "cron", "expression": "0 9 * * 1-5", "tz": "America/New_York"},
                "session": "fresh",
                "overlap": "buffer-one",
                "catch_up": {"all": "6h"},
                "pause_after_failures": 3,
                "agent": "night-shift",
                "priority": "high",
            })
        );
    }
}
