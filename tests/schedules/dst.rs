//! Schedules across daylight-saving changes, run in virtual time: the fires a
//! schedule's runs record (each run's `schedule.fire`), in New York and London.

use serde_json::json;
use spool::core::{CronSpec, ScheduleDef, SessionMode, Spec};

use crate::support::{at, minutes};

/// The nominal fires of a schedule `expr` in `tz` over `hours` from `start` (UTC).
fn fires(start: &str, expr: &str, tz: &str, hours: u64) -> Vec<String> {
    let mut t = at(start);
    let spec = Spec::Cron(CronSpec::parse(expr, tz).unwrap());
    let def = ScheduleDef::new("s", spec, "note", json!({"text": "s"})).session(SessionMode::Fresh);
    t.put_schedule(def).unwrap();
    let mut out = Vec::new();
    for _ in 0..hours * 4 {
        t.advance(minutes(15));
        let fire = t
            .schedule("s")
            .unwrap()
            .status
            .last_fire
            .map(|f| f.to_string());
        if let Some(fire) = fire
            && out.last() != Some(&fire)
        {
            out.push(fire);
        }
    }
    out
}

#[test]
fn new_york_spring_forward_a_fixed_time_in_the_gap_runs_once_at_three() {
    assert_eq!(
        fires("2027-03-13T12:00:00Z", "30 2 * * *", "America/New_York", 48),
        ["2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z"]
    );
}

#[test]
fn new_york_fall_back_a_fixed_time_in_the_fold_runs_once() {
    assert_eq!(
        fires("2027-11-06T12:00:00Z", "30 1 * * *", "America/New_York", 48),
        ["2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z"]
    );
}

#[test]
fn new_york_fall_back_a_step_job_runs_in_each_real_half_hour() {
    assert_eq!(
        fires(
            "2027-11-07T04:45:00Z",
            "*/30 * * * *",
            "America/New_York",
            2
        ),
        [
            "2027-11-07T05:00:00Z",
            "2027-11-07T05:30:00Z",
            "2027-11-07T06:00:00Z",
            "2027-11-07T06:30:00Z"
        ]
    );
}

#[test]
fn london_spring_forward_the_skipped_hour_of_a_step_job_does_not_run() {
    // 01:00 GMT becomes 02:00 BST: local 01:00 and 01:30 never happen.
    assert_eq!(
        fires("2027-03-28T00:20:00Z", "*/30 * * * *", "Europe/London", 2),
        [
            "2027-03-28T00:30:00Z",
            "2027-03-28T01:00:00Z",
            "2027-03-28T01:30:00Z",
            "2027-03-28T02:00:00Z"
        ]
    );
}

#[test]
fn london_a_fixed_time_in_the_gap_and_in_the_fold_runs_once() {
    assert_eq!(
        fires("2027-03-27T12:00:00Z", "30 1 * * *", "Europe/London", 48),
        ["2027-03-28T01:00:00Z", "2027-03-29T00:30:00Z"]
    );
    assert_eq!(
        fires("2027-10-30T12:00:00Z", "30 1 * * *", "Europe/London", 48),
        ["2027-10-31T00:30:00Z", "2027-11-01T01:30:00Z"]
    );
}
