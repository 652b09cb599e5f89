//! A schedule fires on time, records its runs, keeps its session.

use serde_json::json;
use spool::core::{CronSpec, RunResult, ScheduleDef, Spec};

use crate::support::{at, minutes};

fn cron(expr: &str, tz: &str) -> Spec {
    Spec::Cron(CronSpec::parse(expr, tz).unwrap())
}

#[test]
fn every_five_minutes_for_an_hour_is_twelve_runs() {
    let mut t = at("2027-01-01T00:00:00Z");
    let def = ScheduleDef::new(
        "tick",
        cron("*/5 * * * *", "UTC"),
        "note",
        json!({"text": "tick"}),
    );
    assert_eq!(t.put_schedule(def), Ok(true));
    assert_eq!(
        t.schedule("tick")
            .unwrap()
            .status
            .next_run
            .unwrap()
            .to_string(),
        "2027-01-01T00:05:00Z"
    );
    t.advance(minutes(60));
    let status = t.schedule("tick").unwrap().status;
    assert_eq!(status.runs, 12);
    assert_eq!(status.missed, 0);
    assert_eq!(status.last_result, Some(RunResult::Success));
    assert_eq!(
        status.last_fire.unwrap().to_string(),
        "2027-01-01T01:00:00Z"
    );
    assert_eq!(status.next_run.unwrap().to_string(), "2027-01-01T01:05:00Z");
    // The session kept every run's message, each run seeing the ones before.
    let session = t.session(status.session.as_deref().unwrap()).unwrap();
    assert_eq!(session.messages.len(), 12);
    assert_eq!(session.messages[11]["content"], "tick (saw 11)");
}
