//! Next fires in UTC: strictness, the calendar, ranges, steps, lists, names, the day rule.

use std::time::Duration;

use crate::{cron, fires, ts};
use spool_core::Spec;

#[test]
fn next_after_is_strictly_after() {
    let spec = cron("*/5 * * * *", "UTC");
    assert_eq!(
        fires(&spec, "2027-01-01T00:00:00Z", 2),
        ["2027-01-01T00:05:00Z", "2027-01-01T00:10:00Z"]
    );
    // A sub-second past a fire is past it; a sub-second before it is not.
    assert_eq!(
        fires(&spec, "2027-01-01T00:05:00.000000001Z", 1),
        ["2027-01-01T00:10:00Z"]
    );
    assert_eq!(
        fires(&spec, "2027-01-01T00:04:59.999Z", 1),
        ["2027-01-01T00:05:00Z"]
    );
}

/// Everyday expressions: weekdays at 9, every two hours, Sundays at 14:30.
#[test]
fn weekday_two_hourly_and_weekly_examples() {
    // `0 9 * * 1-5` after Thursday 2026-01-29 10:00Z: Friday 09:00.
    assert_eq!(
        fires(&cron("0 9 * * 1-5", "UTC"), "2026-01-29T10:00:00Z", 1),
        ["2026-01-30T09:00:00Z"]
    );
    // After Friday 2027-01-01 10:00Z: Monday 2027-01-04.
    assert_eq!(
        fires(&cron("0 9 * * 1-5", "UTC"), "2027-01-01T10:00:00Z", 1),
        ["2027-01-04T09:00:00Z"]
    );
    assert_eq!(
        fires(&cron("0 */2 * * *", "UTC"), "2027-01-01T01:00:00Z", 3),
        [
            "2027-01-01T02:00:00Z",
            "2027-01-01T04:00:00Z",
            "2027-01-01T06:00:00Z"
        ]
    );
    // 2027-01-03 is the first Sunday of 2027.
    assert_eq!(
        fires(&cron("30 14 * * 0", "UTC"), "2027-01-01T00:00:00Z", 2),
        ["2027-01-03T14:30:00Z", "2027-01-10T14:30:00Z"]
    );
}

#[test]
fn a_leap_day_job_fires_only_in_leap_years() {
    assert_eq!(
        fires(&cron("0 0 29 2 *", "UTC"), "2027-01-01T00:00:00Z", 3),
        [
            "2028-02-29T00:00:00Z",
            "2032-02-29T00:00:00Z",
            "2036-02-29T00:00:00Z"
        ]
    );
    // 2100 is not a leap year: 2096 is followed by 2104.
    assert_eq!(
        fires(&cron("0 0 29 2 *", "UTC"), "2096-03-01T00:00:00Z", 1),
        ["2104-02-29T00:00:00Z"]
    );
}

#[test]
fn a_month_end_job_skips_shorter_months() {
    assert_eq!(
        fires(&cron("0 0 31 * *", "UTC"), "2027-01-01T00:00:00Z", 5),
        [
            "2027-01-31T00:00:00Z",
            "2027-03-31T00:00:00Z",
            "2027-05-31T00:00:00Z",
            "2027-07-31T00:00:00Z",
            "2027-08-31T00:00:00Z",
        ]
    );
    assert_eq!(
        fires(&cron("0 0 30 * *", "UTC"), "2027-01-30T00:00:00Z", 2),
        ["2027-03-30T00:00:00Z", "2027-04-30T00:00:00Z"]
    );
}

#[test]
fn ranges_steps_and_lists() {
    // Minutes 10, 25, 40 of hours 8 and 20.
    assert_eq!(
        fires(
            &cron("10-40/15 8,20 * * *", "UTC"),
            "2027-01-01T08:10:00Z",
            4
        ),
        [
            "2027-01-01T08:25:00Z",
            "2027-01-01T08:40:00Z",
            "2027-01-01T20:10:00Z",
            "2027-01-01T20:25:00Z"
        ]
    );
    // Every third hour from 1 to 10: 1, 4, 7, 10.
    assert_eq!(
        fires(&cron("0 1-10/3 * * *", "UTC"), "2027-01-01T07:00:00Z", 3),
        [
            "2027-01-01T10:00:00Z",
            "2027-01-02T01:00:00Z",
            "2027-01-02T04:00:00Z"
        ]
    );
    // Quarterly: the first of January, April, July and October.
    assert_eq!(
        fires(&cron("0 0 1 */3 *", "UTC"), "2027-01-01T00:00:00Z", 3),
        [
            "2027-04-01T00:00:00Z",
            "2027-07-01T00:00:00Z",
            "2027-10-01T00:00:00Z"
        ]
    );
}

#[test]
fn names_sunday_as_seven_and_nicknames() {
    // Sundays in January and July: after the last one in January, the first in July.
    assert_eq!(
        fires(&cron("0 6 * jan,JUL Sun", "UTC"), "2027-01-31T06:00:00Z", 2),
        ["2027-07-04T06:00:00Z", "2027-07-11T06:00:00Z"]
    );
    assert_eq!(
        fires(&cron("0 0 * * 7", "UTC"), "2027-01-01T00:00:00Z", 1),
        ["2027-01-03T00:00:00Z"]
    );
    assert_eq!(
        fires(&cron("0 0 * * 5-7", "UTC"), "2027-01-01T00:00:00Z", 3),
        [
            "2027-01-02T00:00:00Z",
            "2027-01-03T00:00:00Z",
            "2027-01-08T00:00:00Z"
        ]
    );
    assert_eq!(
        fires(&cron("@daily", "UTC"), "2027-01-01T00:00:00Z", 1),
        ["2027-01-02T00:00:00Z"]
    );
    assert_eq!(
        fires(&cron("@weekly", "UTC"), "2027-01-01T00:00:00Z", 1),
        ["2027-01-03T00:00:00Z"]
    );
    assert_eq!(
        fires(&cron("@yearly", "UTC"), "2027-01-01T00:00:00Z", 1),
        ["2028-01-01T00:00:00Z"]
    );
}

#[test]
fn both_day_fields_restricted_match_either() {
    // The 13th, or any Friday (2027-01-01 is a Friday; the 13th is a Wednesday).
    assert_eq!(
        fires(&cron("0 12 13 * FRI", "UTC"), "2027-01-01T12:00:00Z", 3),
        [
            "2027-01-08T12:00:00Z",
            "2027-01-13T12:00:00Z",
            "2027-01-15T12:00:00Z"
        ]
    );
    // One field `*` or `?`: only the other counts.
    assert_eq!(
        fires(&cron("0 12 13 * *", "UTC"), "2027-01-01T12:00:00Z", 2),
        ["2027-01-13T12:00:00Z", "2027-02-13T12:00:00Z"]
    );
    assert_eq!(
        fires(&cron("0 12 ? * FRI", "UTC"), "2027-01-01T12:00:00Z", 2),
        ["2027-01-08T12:00:00Z", "2027-01-15T12:00:00Z"]
    );
    // A step is a restriction, even one that starts with `*`: odd days or Mondays.
    assert_eq!(
        fires(&cron("0 0 */2 * MON", "UTC"), "2027-01-01T00:00:00Z", 3),
        [
            "2027-01-03T00:00:00Z",
            "2027-01-04T00:00:00Z",
            "2027-01-05T00:00:00Z"
        ]
    );
}

#[test]
fn every_five_minutes_fires_105120_times_in_2027() {
    let spec = cron("*/5 * * * *", "UTC");
    let end = ts("2028-01-01T00:00:00Z");
    // Start one second before the year so its first instant counts.
    let mut at = ts("2026-12-31T23:59:59Z");
    let mut count = 0;
    while let Some(next) = spec.next_after(at) {
        if next >= end {
            break;
        }
        count += 1;
        at = next;
    }
    assert_eq!(count, 105_120);
    assert_eq!(at.to_string(), "2027-12-31T23:55:00Z");
}

#[test]
fn every_and_once() {
    let every = Spec::Every(Duration::from_secs(90));
    assert_eq!(
        fires(&every, "2027-01-01T00:00:00Z", 2),
        ["2027-01-01T00:01:30Z", "2027-01-01T00:03:00Z"]
    );
    assert_eq!(
        Spec::Every(Duration::ZERO).next_after(ts("2027-01-01T00:00:00Z")),
        None
    );

    let once = Spec::Once(ts("2027-06-01T12:00:00Z"));
    assert_eq!(
        once.next_after(ts("2027-06-01T11:59:59.999Z")),
        Some(ts("2027-06-01T12:00:00Z"))
    );
    assert_eq!(once.next_after(ts("2027-06-01T12:00:00Z")), None);
}

#[test]
fn parse_every_reads_units_largest_first() {
    for (text, secs) in [
        ("60m", 3_600),
        ("1h30m", 5_400),
        ("90s", 90),
        ("2h", 7_200),
        ("1d", 86_400),
        ("1d2h3m4s", 93_784),
        (" 15m ", 900),
        ("366d", 366 * 86_400),
        ("365d24h", 366 * 86_400),
    ] {
        assert_eq!(
            Spec::parse_every(text),
            Ok(Duration::from_secs(secs)),
            "{text}"
        );
    }
}
