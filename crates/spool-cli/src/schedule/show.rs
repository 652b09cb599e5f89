//! How `spool schedule` prints schedules: a table, one schedule's details, and JSON.

use std::fmt::Write as _;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};
use spool_core::{
    CatchUp, RunResult, ScheduleInfo, Scheduler, SessionInfo, SessionMode, Spec, TaskState,
};

use crate::terminal::safe;

/// When a spec fires, in a few words: `cron "0 9 * * 1-5" in America/New_York`,
/// `every 1m30s`, `once at 2027-01-01T09:00:00Z`.
pub(super) fn when(spec: &Spec) -> String {
    match spec {
        Spec::Cron(cron) => format!("cron {:?} in {}", cron.expression(), cron.time_zone()),
        Spec::Every(interval) => format!("every {}", duration(*interval)),
        Spec::Once(at) => format!("once at {at}"),
    }
}

/// An interval as `--every` takes it: `1h30m`, `90ms`, `2s`.
pub(super) fn duration(d: Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s, ms) = (secs / 3600, secs / 60 % 60, secs % 60, d.subsec_millis());
    let mut out = String::new();
    for (n, unit) in [(h, "h"), (m, "m"), (s, "s"), (u64::from(ms), "ms")] {
        if n > 0 {
            let _ = write!(out, "{n}{unit}");
        }
    }
    if out.is_empty() {
        out.push_str("0s");
    }
    out
}

/// An instant, or `-`.
pub(super) fn instant(at: Option<Timestamp>) -> String {
    at.map_or_else(|| "-".to_owned(), |t| t.to_string())
}

fn result(r: Option<RunResult>) -> &'static str {
    match r {
        Some(RunResult::Success) => "ok",
        Some(RunResult::Error) => "error",
        None => "-",
    }
}

/// A schedule as JSON: what it is, and its status.
pub(super) fn info_json(info: &ScheduleInfo) -> Value {
    let def = &info.def;
    let spec = match &def.spec {
        Spec::Cron(cron) => json!({"cron": cron.expression(), "tz": cron.time_zone()}),
        Spec::Every(d) => {
            json!({"every": duration(*d), "every_ms": u64::try_from(d.as_millis()).unwrap_or(u64::MAX)})
        }
        Spec::Once(at) => json!({"once": at.to_string()}),
    };
    let session = match &def.session {
        SessionMode::Persist => json!("persist"),
        SessionMode::Fresh => json!("fresh"),
        SessionMode::Shared(id) => json!({"shared": id}),
    };
    let catch_up = match def.catch_up {
        CatchUp::Latest => json!("latest"),
        CatchUp::None => json!("none"),
        CatchUp::All { window } => json!({"all": duration(window)}),
    };
    let s = &info.status;
    json!({
        "slug": def.slug,
        "task_type": def.task_type,
        "prompt": def.input.get("prompt"),
        "input": def.input,
        "spec": spec,
        "enabled": def.enabled,
        "overlap": def.overlap.name(),
        "session_mode": session,
        "catch_up": catch_up,
        "pause_after_failures": def.pause_after_failures,
        "created_at": info.created_at.to_string(),
        "updated_at": info.updated_at.to_string(),
        "status": {
            "next_run": s.next_run.map(|t| t.to_string()),
            "last_run": s.last_run.map(|t| t.to_string()),
            "last_fire": s.last_fire.map(|t| t.to_string()),
            "last_result": s.last_result.map(|r| result(Some(r))),
            "last_error": s.last_error,
            "session": s.session,
            "runs": s.runs,
            "consecutive_failures": s.consecutive_failures,
            "missed": s.missed,
            "running": s.running.iter().map(|t| t.get()).collect::<Vec<_>>(),
            "buffered": s.buffered.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "retry": s.retry.map(|(nominal, at)| json!({"fire": nominal.to_string(), "at": at.to_string()})),
            "paused_reason": s.paused_reason,
        },
    })
}

/// The schedules as a table, one line each.
pub(super) fn table(schedules: &[ScheduleInfo]) -> String {
    let mut out = format!(
        "{:<20} {:<9} {:<40} {:<22} {:<22} {:<6} {:>5} {:>6}\n",
        "SLUG", "STATE", "WHEN", "NEXT RUN", "LAST RUN", "RESULT", "RUNS", "MISSED"
    );
    for info in schedules {
        let s = &info.status;
        let state = match (info.def.enabled, s.running.is_empty()) {
            (_, false) => "running",
            (true, true) => "enabled",
            (false, true) => "paused",
        };
        let short = |t: Option<Timestamp>| {
            t.map_or_else(
                || "-".to_owned(),
                |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            )
        };
        let _ = writeln!(
            out,
            "{:<20} {:<9} {:<40} {:<22} {:<22} {:<6} {:>5} {:>6}",
            safe(&info.def.slug),
            state,
            when(&info.def.spec),
            if info.def.enabled {
                short(s.next_run)
            } else {
                "-".to_owned()
            },
            short(s.last_run),
            result(s.last_result),
            s.runs,
            s.missed
        );
    }
    let _ = writeln!(out, "{} schedules", schedules.len());
    out
}

/// One schedule in full, with its session. Its values (a last error, a reason) may
/// hold text from outside: their control characters are written visibly.
pub(super) fn details(info: &ScheduleInfo, session: Option<&SessionInfo>) -> String {
    let (def, s) = (&info.def, &info.status);
    let mut out = String::new();
    let mut row = |name: &str, value: String| {
        let _ = writeln!(out, "{name:<22} {}", safe(&value));
    };
    row("slug", def.slug.clone());
    row(
        "prompt",
        def.input
            .get("prompt")
            .map_or_else(|| def.input.to_string(), ToString::to_string),
    );
    row("when", when(&def.spec));
    row("enabled", def.enabled.to_string());
    row("overlap", def.overlap.name().to_owned());
    row("created", info.created_at.to_string());
    row(
        "next run",
        if def.enabled {
            instant(s.next_run)
        } else {
            "- (paused)".to_owned()
        },
    );
    row("last run", instant(s.last_run));
    row("last fire", instant(s.last_fire));
    row("last result", result(s.last_result).to_owned());
    if let Some(error) = &s.last_error {
        row("last error", error.clone());
    }
    row("runs", s.runs.to_string());
    row("missed", s.missed.to_string());
    row("consecutive failures", s.consecutive_failures.to_string());
    if !s.running.is_empty() {
        let ids: Vec<String> = s.running.iter().map(ToString::to_string).collect();
        row("running", ids.join(", "));
    }
    if let Some(reason) = &s.paused_reason {
        row("paused because", reason.clone());
    }
    match (s.session.as_deref(), session) {
        (Some(id), Some(session)) => {
            row(
                "session",
                format!("{id} ({} messages)", session.messages.len()),
            );
        }
        (Some(id), None) => row("session", format!("{id} (gone: the next run makes one)")),
        (None, _) => row("session", "-".to_owned()),
    }
    out
}

/// The runs of `info` that `scheduler` still holds: those going, and those that
/// completed (their result names the fire they ran for), by task id.
pub(super) fn runs(scheduler: &Scheduler, info: &ScheduleInfo) -> Vec<Value> {
    let slug = info.def.slug.as_str();
    let mut runs: Vec<(u64, Value)> = scheduler
        .tasks()
        .filter_map(|task| {
            let id = task.id.get();
            if info.status.running.contains(&task.id) {
                let fire = scheduler
                    .schedule_run(task.id)
                    .map(|(_, fire)| fire.to_string());
                return Some((
                    id,
                    json!({"task": id, "fire": fire, "state": "running", "answer": null}),
                ));
            }
            match &task.state {
                TaskState::Completed(Ok(value)) if value["schedule"]["slug"] == slug => Some((
                    id,
                    json!({
                        "task": id,
                        "fire": value["schedule"]["fire"],
                        "state": "ok",
                        "answer": value["answer"],
                    }),
                )),
                _ => None,
            }
        })
        .collect();
    runs.sort_by_key(|(id, _)| *id);
    runs.into_iter().map(|(_, run)| run).collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use spool_core::{Config, ScheduleDef, Scheduler, Spec, Time};

    /// A last error and a pause reason that would retitle the terminal and turn it red
    /// are printed with their control characters spelled out.
    #[test]
    fn control_characters_in_a_schedule_are_printed_visibly() {
        let mut scheduler = Scheduler::new(Config::new());
        let wall: jiff::Timestamp = "2026-11-26T09:00:00Z".parse().expect("a time");
        scheduler.set_wall_clock(Time::ZERO, wall);
        scheduler.set_registry(crate::demo::registry());
        let def = ScheduleDef::new(
            "standup".to_owned(),
            Spec::Every(Duration::from_secs(60)),
            crate::demo::AGENT_TYPE,
            json!({"prompt": "notes\u{1b}[2J"}),
        );
        scheduler.put_schedule(Time::ZERO, def).expect("added");
        let mut info = scheduler.schedule("standup").expect("the schedule");
        info.status.last_error = Some("tool said \u{1b}]0;pwned\u{7}\u{1b}[31mx".to_owned());
        info.status.paused_reason = Some("\r\u{1b}[31mfake line".to_owned());
        let shown = super::details(&info, None);
        assert!(!shown.contains(['\u{1b}', '\u{7}', '\r']), "{shown:?}");
        let rows: Vec<&str> = shown
            .lines()
            .filter(|l| {
                l.starts_with("prompt") || l.starts_with("last error") || l.starts_with("paused")
            })
            .collect();
        assert_eq!(
            rows,
            [
                r#"prompt                 "notes\u001b[2J""#,
                r"last error             tool said \x1b]0;pwned\x07\x1b[31mx",
                r"paused because         \x0d\x1b[31mfake line",
            ]
        );
    }
}
