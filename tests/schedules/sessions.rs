//! Sessions (runs of a schedule sharing a conversation) and what a run's failure does.

use insta::assert_snapshot;
use serde_json::json;
use spool::core::{
    CronSpec, FireOutcome, RunResult, ScheduleDef, ScheduleError, SessionMode, Spec,
};

use crate::support::{at, log_minutes, minutes};

fn every(m: u64) -> Spec {
    Spec::Every(minutes(m))
}

#[test]
fn a_fresh_schedule_keeps_no_session() {
    let mut t = at("2027-01-01T00:00:00Z");
    let def =
        ScheduleDef::new("f", every(10), "note", json!({"text": "f"})).session(SessionMode::Fresh);
    t.put_schedule(def).unwrap();
    t.advance(minutes(30));
    let s = t.schedule("f").unwrap().status;
    assert_eq!((s.runs, s.session.clone()), (3, None));
    assert!(t.sessions().is_empty());
}

#[test]
fn a_busy_session_delays_the_run_by_the_retry_delay() {
    let mut t = at("2027-01-01T00:00:00Z");
    // `long` holds the shared session from 00:10 to 00:50; `short` wants it at 00:15
    // and waits 20 minutes (its retry delay) at a time; its fires meanwhile are missed
    // (a fire waiting for its session counts as a run going).
    let once = Spec::Once("2027-01-01T00:10:00Z".parse().unwrap());
    let long = ScheduleDef::new(
        "long",
        once,
        "note",
        json!({"text": "long", "run_ms": 2_400_000}),
    )
    .session(SessionMode::Shared("desk".into()));
    let short = ScheduleDef::new("short", every(15), "note", json!({"text": "short"}))
        .session(SessionMode::Shared("desk".into()))
        .busy_retry(minutes(20));
    t.put_schedule(long).unwrap();
    t.put_schedule(short).unwrap();
    assert_snapshot!(log_minutes(&mut t, "short", 75), @r#"
00:01 runs=0 missed=0 running=[] buffered=[] retry=None result=None error=None
00:15 runs=0 missed=0 running=[] buffered=[] retry=Some(("00:15", "00:35")) result=Some(Error) error=Some("session desk is busy (task 1 is using it); the run for 2027-01-01T00:15:00Z tries again at 2027-01-01T00:35:00Z")
00:30 runs=0 missed=1 running=[] buffered=[] retry=Some(("00:15", "00:35")) result=Some(Error) error=Some("session desk is busy (task 1 is using it); the run for 2027-01-01T00:15:00Z tries again at 2027-01-01T00:35:00Z")
00:35 runs=0 missed=1 running=[] buffered=[] retry=Some(("00:15", "00:55")) result=Some(Error) error=Some("session desk is busy (task 1 is using it); the run for 2027-01-01T00:15:00Z tries again at 2027-01-01T00:55:00Z")
00:45 runs=0 missed=2 running=[] buffered=[] retry=Some(("00:15", "00:55")) result=Some(Error) error=Some("session desk is busy (task 1 is using it); the run for 2027-01-01T00:15:00Z tries again at 2027-01-01T00:55:00Z")
00:55 runs=1 missed=2 running=[] buffered=[] retry=None result=Some(Success) error=None
01:00 runs=2 missed=2 running=[] buffered=[] retry=None result=Some(Success) error=None
01:15 runs=3 missed=2 running=[] buffered=[] retry=None result=Some(Success) error=None
"#);
    let desk = t.session("desk").unwrap();
    let said: Vec<&str> = desk
        .messages
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        said,
        [
            "long (saw 0)",
            "short (saw 1)",
            "short (saw 2)",
            "short (saw 3)"
        ]
    );
}

#[test]
fn a_deleted_session_is_made_again_and_the_status_says_so() {
    let mut t = at("2027-01-01T00:00:00Z");
    let def = ScheduleDef::new("p", every(10), "note", json!({"text": "p"}));
    t.put_schedule(def).unwrap();
    t.advance(minutes(10));
    let first = t.schedule("p").unwrap().status.session.unwrap();
    assert_eq!(first, "s-1");
    t.delete_session("s-1").unwrap();
    assert_eq!(
        t.delete_session("s-1"),
        Err(ScheduleError::NoSession("s-1".into()))
    );
    t.advance(minutes(10));
    let s = t.schedule("p").unwrap().status;
    assert_eq!(s.session.as_deref(), Some("s-2"));
    // The run succeeded, in the new session.
    assert_eq!(s.last_error, None);
    assert_eq!(s.last_result, Some(RunResult::Success));
    assert_eq!(
        t.session("s-2").unwrap().messages[0]["content"],
        "p (saw 0)"
    );
}

#[test]
fn a_session_in_use_cannot_be_deleted() {
    let mut t = at("2027-01-01T00:00:00Z");
    let def = ScheduleDef::new(
        "p",
        every(10),
        "note",
        json!({"text": "p", "run_ms": 60_000}),
    );
    t.put_schedule(def).unwrap();
    t.advance(minutes(10));
    let holder = t.schedule("p").unwrap().status.running[0];
    assert_eq!(
        t.delete_session("s-1"),
        Err(ScheduleError::SessionBusy {
            id: "s-1".into(),
            holder
        })
    );
}

#[test]
fn failing_runs_are_recorded_and_the_schedule_pauses_itself_after_three() {
    let mut t = at("2027-01-01T00:00:00Z");
    let def = ScheduleDef::new(
        "bad",
        every(10),
        "note",
        json!({"text": "bad", "fail": true}),
    )
    .pause_after_failures(3);
    let fine = ScheduleDef::new("fine", every(10), "note", json!({"text": "fine"}));
    t.put_schedule(def).unwrap();
    t.put_schedule(fine).unwrap();
    t.advance(minutes(60));
    let s = t.schedule("bad").unwrap();
    assert!(!s.def.enabled);
    assert_eq!(s.status.runs, 3);
    assert_eq!(s.status.consecutive_failures, 3);
    assert_eq!(s.status.last_result, Some(RunResult::Error));
    assert_eq!(s.status.last_error.as_deref(), Some("bad failed"));
    assert_eq!(
        s.status.paused_reason.as_deref(),
        Some("paused itself after 3 failed runs in a row")
    );
    assert_eq!(s.status.next_run, None);
    // A failed run's messages are not added to its session.
    assert!(t.session("s-1").unwrap().messages.is_empty());
    // The other schedule went on.
    assert_eq!(t.schedule("fine").unwrap().status.runs, 6);
    // Resumed, it fires from now on, and a success clears the count.
    let mut patch = spool::core::SchedulePatch::new();
    patch.input = Some(json!({"text": "ok"}));
    t.patch_schedule("bad", patch).unwrap();
    t.resume_schedule("bad").unwrap();
    let s = t.schedule("bad").unwrap().status;
    assert_eq!(
        (s.paused_reason.clone(), s.next_run.unwrap().to_string()),
        (None, "2027-01-01T01:10:00Z".to_owned())
    );
    t.advance(minutes(10));
    let s = t.schedule("bad").unwrap().status;
    assert_eq!(
        (s.runs, s.consecutive_failures, s.last_result),
        (4, 0, Some(RunResult::Success))
    );
}

#[test]
fn trigger_runs_now_through_the_overlap_policy() {
    let mut t = at("2027-01-01T00:00:00Z");
    let spec = Spec::Cron(CronSpec::parse("0 9 * * 1-5", "UTC").unwrap());
    let def = ScheduleDef::new(
        "standup",
        spec,
        "note",
        json!({"text": "s", "run_ms": 60_000}),
    );
    t.put_schedule(def).unwrap();
    let started = t.trigger_schedule("standup").unwrap();
    let FireOutcome::Started(run) = started else {
        panic!("{started:?}");
    };
    // The run knows what it runs for while it goes.
    let (slug, fire) = t.core().schedule_run(run).unwrap();
    assert_eq!(
        (slug.as_str(), fire.to_string().as_str()),
        ("standup", "2027-01-01T00:00:00Z")
    );
    assert_eq!(t.trigger_schedule("standup").unwrap(), FireOutcome::Skipped);
    let s = t.schedule("standup").unwrap().status;
    assert_eq!((s.runs, s.missed), (1, 1));
    // Its timing is its own: 2027-01-01 is a Friday.
    assert_eq!(s.next_run.unwrap().to_string(), "2027-01-01T09:00:00Z");
}
