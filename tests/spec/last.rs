//! Catch-up after downtime: the latest fire in `(since, at]`, found without walking
//! every missed fire.

use std::time::{Duration, Instant};

use jiff::SignedDuration;
use spool_core::{SeededRng, Spec};

use crate::{cron, ts};

fn last(spec: &Spec, since: &str, at: &str) -> Option<String> {
    spec.last_between(ts(since), ts(at)).map(|t| t.to_string())
}

#[test]
fn a_minute_schedule_down_for_two_centuries_answers_at_once() {
    // One backward search, not a walk over every missed fire: walking the 105 million
    // minutes of two centuries would take minutes; the search takes well under a
    // millisecond in release builds. The bound leaves an unoptimised build on a busy
    // machine a thousand times what it needs, and still catches a walk.
    let bound = Duration::from_secs(1);
    let spec = cron("* * * * *", "UTC");
    let started = Instant::now();
    let found = last(&spec, "2027-01-01T00:00:30Z", "2227-01-01T00:00:30Z");
    let took = started.elapsed();
    assert_eq!(found.as_deref(), Some("2227-01-01T00:00:00Z"));
    assert!(took < bound, "took {took:?}");

    let every = Spec::Every(Duration::from_secs(60));
    let started = Instant::now();
    assert_eq!(
        every
            .last_between(ts("2027-01-01T00:00:30Z"), ts("2227-01-01T00:00:30Z"))
            .map(|t| t.to_string()),
        Some("2227-01-01T00:00:30Z".to_string())
    );
    let took = started.elapsed();
    assert!(took < bound, "took {took:?}");
}

#[test]
fn cron_bounds_are_exclusive_then_inclusive() {
    let spec = cron("0 9 * * *", "UTC");
    assert_eq!(
        last(&spec, "2027-01-01T09:00:00Z", "2027-01-05T12:00:00Z").as_deref(),
        Some("2027-01-05T09:00:00Z")
    );
    // A fire at `at` counts; a fire at `since` does not.
    assert_eq!(
        last(&spec, "2027-01-04T09:00:00Z", "2027-01-05T09:00:00Z").as_deref(),
        Some("2027-01-05T09:00:00Z")
    );
    assert_eq!(
        last(&spec, "2027-01-05T09:00:00Z", "2027-01-05T12:00:00Z"),
        None
    );
    assert_eq!(
        last(&spec, "2027-01-05T09:00:00Z", "2027-01-05T09:00:00Z"),
        None
    );
    assert_eq!(
        last(&spec, "2027-01-06T00:00:00Z", "2027-01-05T00:00:00Z"),
        None
    );
    // A leap-day job over a decade's outage.
    assert_eq!(
        last(
            &cron("0 0 29 2 *", "UTC"),
            "2027-01-01T00:00:00Z",
            "2037-01-01T00:00:00Z"
        )
        .as_deref(),
        Some("2036-02-29T00:00:00Z")
    );
}

#[test]
fn cron_catch_up_across_the_clock_changes() {
    let ny = |expr| cron(expr, "America/New_York");
    // The gap's fixed-time fire is 03:00 EDT.
    assert_eq!(
        last(
            &ny("30 2 * * *"),
            "2027-03-13T12:00:00Z",
            "2027-03-14T12:00:00Z"
        )
        .as_deref(),
        Some("2027-03-14T07:00:00Z")
    );
    // The fold's fixed-time fire is the first 01:30 (EDT), even after the second.
    assert_eq!(
        last(
            &ny("30 1 * * *"),
            "2027-11-07T00:00:00Z",
            "2027-11-07T06:45:00Z"
        )
        .as_deref(),
        Some("2027-11-07T05:30:00Z")
    );
    // A step job's latest fire in the fold is in its second half.
    assert_eq!(
        last(
            &ny("*/15 * * * *"),
            "2027-11-07T00:00:00Z",
            "2027-11-07T06:20:00Z"
        )
        .as_deref(),
        Some("2027-11-07T06:15:00Z")
    );
    assert_eq!(
        last(
            &cron("30 1 * * *", "Europe/London"),
            "2027-03-27T12:00:00Z",
            "2027-03-28T12:00:00Z"
        )
        .as_deref(),
        Some("2027-03-28T01:00:00Z")
    );
}

#[test]
fn every_counts_from_since_and_once_is_in_or_out() {
    let every = Spec::Every(Duration::from_secs(3_600));
    assert_eq!(
        last(&every, "2027-01-01T00:10:00Z", "2027-01-01T05:00:00Z").as_deref(),
        Some("2027-01-01T04:10:00Z")
    );
    assert_eq!(
        last(&every, "2027-01-01T00:10:00Z", "2027-01-01T01:10:00Z").as_deref(),
        Some("2027-01-01T01:10:00Z")
    );
    assert_eq!(
        last(&every, "2027-01-01T00:10:00Z", "2027-01-01T01:09:59Z"),
        None
    );
    assert_eq!(
        last(
            &Spec::Every(Duration::ZERO),
            "2027-01-01T00:00:00Z",
            "2028-01-01T00:00:00Z"
        ),
        None
    );

    let once = Spec::Once(ts("2027-06-01T12:00:00Z"));
    assert_eq!(
        last(&once, "2027-06-01T00:00:00Z", "2027-06-01T12:00:00Z").as_deref(),
        Some("2027-06-01T12:00:00Z")
    );
    assert_eq!(
        last(&once, "2027-06-01T12:00:00Z", "2027-06-02T00:00:00Z"),
        None
    );
    assert_eq!(
        last(&once, "2027-06-01T00:00:00Z", "2027-06-01T11:59:59Z"),
        None
    );
}

/// `last_between` must agree with walking `next_after` from `since`, in every zone and
/// across both clock changes: random windows of up to two days around each change.
#[test]
fn last_between_agrees_with_walking_next_after() {
    let exprs = [
        "30 2 * * *",
        "30 1 * * *",
        "0 1 * * *",
        "0 2 * * *",
        "0 0 * * *",
        "*/15 * * * *",
        "0 * * * *",
        "0,30 1-2 * * *",
        "45 */2 * * SUN",
        "0 9 1,15 * MON",
    ];
    let zones = ["UTC", "America/New_York", "Europe/London"];
    let changes = [
        "2027-03-14T07:00:00Z",
        "2027-11-07T06:00:00Z",
        "2027-03-28T01:00:00Z",
        "2027-10-31T01:00:00Z",
    ];
    let mut rng = SeededRng::new(0x5bec);
    for round in 0..600 {
        let expr = exprs[rng.below(exprs.len() as u64) as usize];
        let zone = zones[rng.below(zones.len() as u64) as usize];
        let change = ts(changes[rng.below(changes.len() as u64) as usize]);
        let spec = cron(expr, zone);
        let since = change + SignedDuration::from_secs(rng.below(2 * 86_400) as i64 - 86_400);
        let at = since + SignedDuration::from_secs(rng.below(2 * 86_400) as i64);
        let mut walked = None;
        let mut cursor = since;
        while let Some(next) = spec.next_after(cursor) {
            if next > at {
                break;
            }
            walked = Some(next);
            cursor = next;
        }
        assert_eq!(
            spec.last_between(since, at),
            walked,
            "round {round}: {expr} in {zone}, since {since}, at {at}"
        );
    }
}
