//! A spec serializes as the text a user wrote and parses again on the way back in.

use std::time::Duration;

use spool_core::Spec;

use crate::{cron, ts};

#[test]
fn specs_round_trip_through_json() {
    let specs = [
        (
            cron("0 9 * * 1-5", "America/New_York"),
            r#"{"Cron":{"cron":"0 9 * * 1-5","tz":"America/New_York"}}"#,
        ),
        (
            Spec::Every(Duration::from_secs(5_400)),
            r#"{"Every":{"secs":5400,"nanos":0}}"#,
        ),
        (
            Spec::Once(ts("2027-06-01T12:00:00Z")),
            r#"{"Once":"2027-06-01T12:00:00Z"}"#,
        ),
    ];
    for (spec, json) in specs {
        assert_eq!(serde_json::to_string(&spec).unwrap(), json);
        let back: Spec = serde_json::from_str(json).unwrap();
        assert_eq!(back, spec);
        // The parsed pattern came back too, not just the text.
        assert_eq!(
            back.next_after(ts("2027-01-01T15:00:00Z")),
            spec.next_after(ts("2027-01-01T15:00:00Z"))
        );
    }
}

#[test]
fn bad_specs_are_refused_with_the_spec_error_message() {
    let refused = [
        (
            r#"{"Cron":{"cron":"61 * * * *","tz":"UTC"}}"#,
            "minute: 61 is out of range 0-59",
        ),
        (
            r#"{"Cron":{"cron":"* * *","tz":"UTC"}}"#,
            "expected 5 fields (minute hour day-of-month month day-of-week), found 3",
        ),
        (
            r#"{"Cron":{"cron":"0 9 * * *","tz":"Mars/Olympus"}}"#,
            "unknown time zone \"Mars/Olympus\"",
        ),
        (r#"{"Cron":{"cron":"0 9 * * *"}}"#, "missing field `tz`"),
    ];
    for (json, message) in refused {
        let err = serde_json::from_str::<Spec>(json).unwrap_err().to_string();
        assert!(err.starts_with(message), "{json}: {err}");
    }
}
