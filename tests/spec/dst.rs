//! Daylight-saving changes in 2027. New York: 2027-03-14 02:00 EST jumps to 03:00 EDT
//! (07:00Z), 2027-11-07 02:00 EDT falls back to 01:00 EST (06:00Z), so 01:00-01:59
//! happens at 05:xxZ (EDT) and again at 06:xxZ (EST). London: 2027-03-28 01:00 GMT jumps
//! to 02:00 BST (01:00Z), 2027-10-31 02:00 BST falls back to 01:00 GMT (01:00Z), so
//! 01:00-01:59 happens at 00:xxZ (BST) and again at 01:xxZ (GMT).
//!
//! Fixed-time jobs (one minute, one hour) run once a day: in a gap at the first instant
//! after it, in a fold at the first occurrence. Wildcard and step jobs follow the real
//! clock: skipped local times never run, repeated ones run in each real instant.

use crate::{cron, fires};

const NY: &str = "America/New_York";
const LONDON: &str = "Europe/London";

#[test]
fn new_york_fixed_time_in_the_spring_gap_runs_right_after_it() {
    // 02:30 does not exist on 2027-03-14: 03:00 EDT, then 02:30 EDT as usual.
    assert_eq!(
        fires(&cron("30 2 * * *", NY), "2027-03-13T00:00:00Z", 3),
        [
            "2027-03-13T07:30:00Z",
            "2027-03-14T07:00:00Z",
            "2027-03-15T06:30:00Z"
        ]
    );
    assert_eq!(
        fires(&cron("0 2 * * *", NY), "2027-03-13T12:00:00Z", 1),
        ["2027-03-14T07:00:00Z"]
    );
}

#[test]
fn new_york_fixed_time_in_the_autumn_fold_runs_once_at_the_first_occurrence() {
    // 01:30 EDT (05:30Z); not again at 01:30 EST (06:30Z).
    assert_eq!(
        fires(&cron("30 1 * * *", NY), "2027-11-06T00:00:00Z", 3),
        [
            "2027-11-06T05:30:00Z",
            "2027-11-07T05:30:00Z",
            "2027-11-08T06:30:00Z"
        ]
    );
    // Asked from inside the fold, between the two 01:30s: the next day.
    assert_eq!(
        fires(&cron("30 1 * * *", NY), "2027-11-07T05:45:00Z", 1),
        ["2027-11-08T06:30:00Z"]
    );
    assert_eq!(
        fires(&cron("30 1 * * *", NY), "2027-11-07T06:15:00Z", 1),
        ["2027-11-08T06:30:00Z"]
    );
}

#[test]
fn new_york_step_jobs_skip_the_gap_and_repeat_the_fold() {
    // 01:45 EST, then 03:00 EDT: 02:00-02:45 never happen.
    assert_eq!(
        fires(&cron("*/15 * * * *", NY), "2027-03-14T06:30:00Z", 3),
        [
            "2027-03-14T06:45:00Z",
            "2027-03-14T07:00:00Z",
            "2027-03-14T07:15:00Z"
        ]
    );
    // 01:00-01:45 EDT, then 01:00-01:45 EST: every 15 real minutes throughout.
    assert_eq!(
        fires(&cron("*/15 * * * *", NY), "2027-11-07T04:45:00Z", 10),
        [
            "2027-11-07T05:00:00Z",
            "2027-11-07T05:15:00Z",
            "2027-11-07T05:30:00Z",
            "2027-11-07T05:45:00Z",
            "2027-11-07T06:00:00Z",
            "2027-11-07T06:15:00Z",
            "2027-11-07T06:30:00Z",
            "2027-11-07T06:45:00Z",
            "2027-11-07T07:00:00Z",
            "2027-11-07T07:15:00Z",
        ]
    );
}

#[test]
fn new_york_hourly_jobs_skip_the_gap_and_repeat_the_fold() {
    // 00:00 EST, 01:00 EST, 03:00 EDT, 04:00 EDT: there is no 02:00.
    assert_eq!(
        fires(&cron("0 * * * *", NY), "2027-03-14T04:30:00Z", 4),
        [
            "2027-03-14T05:00:00Z",
            "2027-03-14T06:00:00Z",
            "2027-03-14T07:00:00Z",
            "2027-03-14T08:00:00Z"
        ]
    );
    // 00:00 EDT, 01:00 EDT, 01:00 EST, 02:00 EST.
    assert_eq!(
        fires(&cron("0 * * * *", NY), "2027-11-07T03:30:00Z", 4),
        [
            "2027-11-07T04:00:00Z",
            "2027-11-07T05:00:00Z",
            "2027-11-07T06:00:00Z",
            "2027-11-07T07:00:00Z"
        ]
    );
}

#[test]
fn new_york_a_list_of_minutes_is_not_a_fixed_time() {
    // Two minutes in the gap hour: a wildcard-style job, so neither runs on 2027-03-14.
    assert_eq!(
        fires(&cron("0,30 2 * * *", NY), "2027-03-13T12:00:00Z", 2),
        ["2027-03-15T06:00:00Z", "2027-03-15T06:30:00Z"]
    );
    // In the fold both minutes run in both real hours.
    assert_eq!(
        fires(&cron("0,30 1 * * *", NY), "2027-11-07T04:00:00Z", 5),
        [
            "2027-11-07T05:00:00Z",
            "2027-11-07T05:30:00Z",
            "2027-11-07T06:00:00Z",
            "2027-11-07T06:30:00Z",
            "2027-11-08T06:00:00Z",
        ]
    );
}

#[test]
fn london_fixed_time_in_the_spring_gap_runs_right_after_it() {
    // 01:30 does not exist on 2027-03-28: 02:00 BST (01:00Z).
    assert_eq!(
        fires(&cron("30 1 * * *", LONDON), "2027-03-27T00:00:00Z", 3),
        [
            "2027-03-27T01:30:00Z",
            "2027-03-28T01:00:00Z",
            "2027-03-29T00:30:00Z"
        ]
    );
    assert_eq!(
        fires(&cron("0 1 * * *", LONDON), "2027-03-27T12:00:00Z", 1),
        ["2027-03-28T01:00:00Z"]
    );
    // A job just before the gap runs once, not also after it (croner 4.0.3's fix).
    assert_eq!(
        fires(&cron("0 0 * * *", LONDON), "2027-03-27T12:00:00Z", 2),
        ["2027-03-28T00:00:00Z", "2027-03-28T23:00:00Z"]
    );
}

#[test]
fn london_fixed_time_in_the_autumn_fold_runs_once_at_the_first_occurrence() {
    // 01:30 BST (00:30Z); not again at 01:30 GMT (01:30Z).
    assert_eq!(
        fires(&cron("30 1 * * *", LONDON), "2027-10-30T12:00:00Z", 2),
        ["2027-10-31T00:30:00Z", "2027-11-01T01:30:00Z"]
    );
    assert_eq!(
        fires(&cron("30 1 * * *", LONDON), "2027-10-31T00:45:00Z", 1),
        ["2027-11-01T01:30:00Z"]
    );
}

#[test]
fn london_step_jobs_skip_the_gap_and_repeat_the_fold() {
    // 00:30 GMT, then 02:00 BST: 01:00 and 01:30 never happen.
    assert_eq!(
        fires(&cron("*/30 * * * *", LONDON), "2027-03-28T00:00:00Z", 3),
        [
            "2027-03-28T00:30:00Z",
            "2027-03-28T01:00:00Z",
            "2027-03-28T01:30:00Z"
        ]
    );
    // 01:00 and 01:30 BST, then 01:00 and 01:30 GMT.
    assert_eq!(
        fires(&cron("*/30 * * * *", LONDON), "2027-10-30T23:30:00Z", 5),
        [
            "2027-10-31T00:00:00Z",
            "2027-10-31T00:30:00Z",
            "2027-10-31T01:00:00Z",
            "2027-10-31T01:30:00Z",
            "2027-10-31T02:00:00Z",
        ]
    );
}

#[test]
fn london_hourly_jobs_skip_the_gap_and_repeat_the_fold() {
    // 00:00 GMT, then 02:00 BST.
    assert_eq!(
        fires(&cron("0 * * * *", LONDON), "2027-03-27T23:30:00Z", 3),
        [
            "2027-03-28T00:00:00Z",
            "2027-03-28T01:00:00Z",
            "2027-03-28T02:00:00Z"
        ]
    );
    // 01:00 BST, 01:00 GMT, 02:00 GMT.
    assert_eq!(
        fires(&cron("0 * * * *", LONDON), "2027-10-30T23:30:00Z", 3),
        [
            "2027-10-31T00:00:00Z",
            "2027-10-31T01:00:00Z",
            "2027-10-31T02:00:00Z"
        ]
    );
}
