//! How `spool schedule` prints schedules: a table, one schedule's details, and JSON.

use std::fmt::Write as _;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};
use spool_core::{
    CatchUp, RunResult, ScheduleDef, ScheduleInfo, Scheduler, SessionMode, Spec, TaskState,
};

use crate::output::counted;
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

/// The agent a schedule's runs run as: its own, or the default agent's name.
fn agent(def: &ScheduleDef) -> &str {
    def.agent.as_deref().unwrap_or(DEFAULT_AGENT)
}

/// The name of the agent of a task submitted without one.
const DEFAULT_AGENT: &str = "default";

/// A schedule's runs' priority (normal unless it says another).
fn priority(def: &ScheduleDef) -> String {
    def.priority.unwrap_or_default().to_string()
}

/// A catch-up policy as `--catch-up` takes it: `latest`, `none`, `all:6h`.
pub(super) fn catch_up(policy: CatchUp) -> String {
    match policy {
        CatchUp::Latest => "latest".to_owned(),
        CatchUp::None => "none".to_owned(),
        CatchUp::All { window } => format!("all:{}", duration(window)),
    }
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
        "agent": agent(def),
        "priority": priority(def),
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

/// How a column's cells line up.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Align {
    Left,
    Right,
}

/// `rows` (the first one the header) as columns as wide as their widest cell, two
/// spaces apart; the last column is not padded. Each cell is text made safe to print
/// already, measured in characters.
fn columns(align: &[Align], rows: &[Vec<String>]) -> String {
    let mut widths = vec![0; align.len()];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, ((cell, width), align)) in row.iter().zip(&widths).zip(align).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = " ".repeat(width - cell.chars().count());
            let last = i + 1 == row.len();
            match align {
                Align::Right => {
                    line.push_str(&pad);
                    line.push_str(cell);
                }
                Align::Left if last => line.push_str(cell),
                Align::Left => {
                    line.push_str(cell);
                    line.push_str(&pad);
                }
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The schedules as a table, one line each, and how many there are.
pub(super) fn table(schedules: &[ScheduleInfo]) -> String {
    use Align::{Left, Right};
    let short = |t: Option<Timestamp>| {
        t.map_or_else(
            || "-".to_owned(),
            |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        )
    };
    let mut rows = vec![
        [
            "SLUG", "STATE", "WHEN", "AGENT", "PRIORITY", "NEXT RUN", "LAST RUN", "RESULT", "RUNS",
            "MISSED",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for info in schedules {
        let s = &info.status;
        let state = match (info.def.enabled, s.running.is_empty()) {
            (_, false) => "running",
            (true, true) => "enabled",
            (false, true) => "paused",
        };
        rows.push(vec![
            safe(&info.def.slug).into_owned(),
            state.to_owned(),
            safe(&when(&info.def.spec)).into_owned(),
            safe(agent(&info.def)).into_owned(),
            priority(&info.def),
            if info.def.enabled {
                short(s.next_run)
            } else {
                "-".to_owned()
            },
            short(s.last_run),
            result(s.last_result).to_owned(),
            s.runs.to_string(),
            s.missed.to_string(),
        ]);
    }
    let mut out = columns(
        &[Left, Left, Left, Left, Left, Left, Left, Left, Right, Right],
        &rows,
    );
    let _ = writeln!(out, "{}", counted(schedules.len(), "schedule"));
    out
}

/// The runs `runs` gave as a table (task, fire, state, answer), and how many there
/// are of the `started` runs in all. The answers came from a model: their control
/// characters are written visibly.
pub(super) fn runs_table(runs: &[Value], started: u64) -> String {
    use Align::{Left, Right};
    let text = |value: &Value| match value {
        Value::String(text) => safe(text).into_owned(),
        Value::Null => "-".to_owned(),
        other => safe(&other.to_string()).into_owned(),
    };
    let mut rows = vec![
        ["TASK", "FIRE", "STATE", "ANSWER"]
            .map(str::to_owned)
            .to_vec(),
    ];
    rows.extend(runs.iter().map(|run| {
        vec![
            text(&run["task"]),
            text(&run["fire"]),
            text(&run["state"]),
            text(&run["answer"]),
        ]
    }));
    let mut out = columns(&[Right, Left, Left, Left], &rows);
    let _ = writeln!(
        out,
        "{} held ({started} started in all)",
        counted(runs.len(), "run")
    );
    out
}

/// One schedule in full, with the number of messages of its session (`None`: the
/// session is gone). Its values (a last error, a reason) may hold text from outside:
/// their control characters are written visibly.
pub(super) fn details(info: &ScheduleInfo, session: Option<usize>) -> String {
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
    row("catch-up", catch_up(def.catch_up));
    row("agent", agent(def).to_owned());
    row("priority", priority(def));
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
        (Some(id), Some(messages)) => row("session", format!("{id} ({messages} messages)")),
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

    /// The runs' columns are as wide as their widest cell, the answers' control
    /// characters are written visibly, and one run is "1 run".
    #[test]
    fn runs_line_up_and_are_counted_in_words() {
        let runs = [
            json!({"task": 7, "fire": "2026-11-26T09:00:00Z", "state": "ok",
                "answer": "Run 1: fine"}),
            json!({"task": 1234, "fire": "2026-11-26T10:00:00.5Z", "state": "running",
                "answer": null}),
            json!({"task": 12, "fire": null, "state": "ok", "answer": "a\u{1b}[2Jb\nc"}),
        ];
        assert_eq!(
            super::runs_table(&runs, 5),
            "TASK  FIRE                    STATE    ANSWER\n\
             \x20  7  2026-11-26T09:00:00Z    ok       Run 1: fine\n\
             1234  2026-11-26T10:00:00.5Z  running  -\n\
             \x20 12  -                       ok       a\\x1b[2Jb\\x0ac\n\
             3 runs held (5 started in all)\n"
        );
        assert_eq!(
            super::runs_table(&runs[..1], 1),
            "TASK  FIRE                  STATE  ANSWER\n\
             \x20  7  2026-11-26T09:00:00Z  ok     Run 1: fine\n\
             1 run held (1 started in all)\n"
        );
        assert_eq!(
            super::runs_table(&[], 0),
            "TASK  FIRE  STATE  ANSWER\n0 runs held (0 started in all)\n"
        );
    }

    /// The list's columns are as wide as their widest cell, the counts right-aligned.
    #[test]
    fn the_list_lines_up_whatever_the_names() {
        let mut scheduler = Scheduler::new(Config::new());
        let wall: jiff::Timestamp = "2026-11-26T09:00:00Z".parse().expect("a time");
        scheduler.set_wall_clock(Time::ZERO, wall);
        scheduler.set_registry(crate::agent::registry());
        for (slug, every) in [("a-rather-long-schedule-name", 90), ("tick", 3600)] {
            let def = ScheduleDef::new(
                slug.to_owned(),
                Spec::Every(Duration::from_secs(every)),
                crate::agent::AGENT_TYPE,
                json!({"prompt": "hi"}),
            );
            scheduler.put_schedule(Time::ZERO, def).expect("added");
        }
        assert_eq!(
            super::table(&scheduler.schedules()),
            "SLUG                         STATE    WHEN         AGENT    PRIORITY  NEXT RUN              \
             LAST RUN  RESULT  RUNS  MISSED\n\
             a-rather-long-schedule-name  enabled  every 1m30s  default  normal    2026-11-26T09:01:30Z  \
             -         -          0       0\n\
             tick                         enabled  every 1h     default  normal    2026-11-26T10:00:00Z  \
             -         -          0       0\n\
             2 schedules\n"
        );
        assert_eq!(
            super::table(&scheduler.schedules()[1..]).lines().last(),
            Some("1 schedule")
        );
    }

    /// A last error and a pause reason that would retitle the terminal and turn it red
    /// are printed with their control characters spelled out.
    #[test]
    fn control_characters_in_a_schedule_are_printed_visibly() {
        let mut scheduler = Scheduler::new(Config::new());
        let wall: jiff::Timestamp = "2026-11-26T09:00:00Z".parse().expect("a time");
        scheduler.set_wall_clock(Time::ZERO, wall);
        scheduler.set_registry(crate::agent::registry());
        let def = ScheduleDef::new(
            "standup".to_owned(),
            Spec::Every(Duration::from_secs(60)),
            crate::agent::AGENT_TYPE,
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
