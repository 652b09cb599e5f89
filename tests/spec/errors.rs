//! Every way a spec can be refused, with its exact message.

use spool_core::{CronField, CronSpec, FieldProblem, Spec, SpecError};

fn cron_error(expr: &str) -> String {
    CronSpec::parse(expr, "UTC").unwrap_err().to_string()
}

#[test]
fn bad_fields_name_the_field() {
    let cases = [
        ("61 * * * *", "minute: 61 is out of range 0-59"),
        ("* 24 * * *", "hour: 24 is out of range 0-23"),
        ("* * 0 * *", "day-of-month: 0 is out of range 1-31"),
        ("* * 32 * *", "day-of-month: 32 is out of range 1-31"),
        ("* * * 13 *", "month: 13 is out of range 1-12"),
        ("* * * 0 *", "month: 0 is out of range 1-12"),
        ("* * * * 8", "day-of-week: 8 is out of range 0-7"),
        (
            "99999999999999999999 * * * *",
            "minute: 99999999999999999999 is out of range 0-59",
        ),
        ("0-60 * * * *", "minute: 60 is out of range 0-59"),
        ("* 1,2,25 * * *", "hour: 25 is out of range 0-23"),
        ("x * * * *", "minute: \"x\" is not a number"),
        (
            "* * * FOO *",
            "month: \"FOO\" is not a number or a name (JAN-DEC)",
        ),
        (
            "* * * * FUN",
            "day-of-week: \"FUN\" is not a number or a name (SUN-SAT)",
        ),
        (
            "* * * MON *",
            "month: \"MON\" is not a number or a name (JAN-DEC)",
        ),
        (
            "* * * * JAN",
            "day-of-week: \"JAN\" is not a number or a name (SUN-SAT)",
        ),
        ("-5 * * * *", "minute: \"\" is not a number"),
        ("1,,2 * * * *", "minute: empty item in list \"1,,2\""),
        ("1, * * * *", "minute: empty item in list \"1,\""),
        (
            "*,5 * * * *",
            "minute: \"*,5\": * names every value and cannot be one item of a list",
        ),
        (
            "* * ?,5 * *",
            "day-of-month: \"?,5\": * names every value and cannot be one item of a list",
        ),
        (
            "* 5-2 * * *",
            "hour: \"5-2\" is a reversed range (start after end)",
        ),
        (
            "* * * DEC-JAN *",
            "month: \"DEC-JAN\" is a reversed range (start after end)",
        ),
        (
            "*/0 * * * *",
            "minute: step \"0\" must be a whole number from 1 to 59",
        ),
        (
            "*/60 * * * *",
            "minute: step \"60\" must be a whole number from 1 to 59",
        ),
        (
            "* */24 * * *",
            "hour: step \"24\" must be a whole number from 1 to 23",
        ),
        (
            "*/ * * * *",
            "minute: step \"\" must be a whole number from 1 to 59",
        ),
        (
            "*/x * * * *",
            "minute: step \"x\" must be a whole number from 1 to 59",
        ),
        (
            "5/15 * * * *",
            "minute: \"5/15\": a step needs * or a range before it (write 5-59/15)",
        ),
        (
            "* * L * *",
            "day-of-month: \"L\" is not supported (numbers, names, *, ranges a-b, steps */n and a-b/n, and lists are)",
        ),
        (
            "* * 15W * *",
            "day-of-month: \"15W\" is not supported (numbers, names, *, ranges a-b, steps */n and a-b/n, and lists are)",
        ),
        (
            "* * * * 5#3",
            "day-of-week: \"5#3\" is not supported (numbers, names, *, ranges a-b, steps */n and a-b/n, and lists are)",
        ),
        (
            "* * * * 5L",
            "day-of-week: \"5L\" is not supported (numbers, names, *, ranges a-b, steps */n and a-b/n, and lists are)",
        ),
        (
            "? * * * *",
            "minute: \"?\" is not supported (numbers, names, *, ranges a-b, steps */n and a-b/n, and lists are)",
        ),
    ];
    for (expr, message) in cases {
        assert_eq!(cron_error(expr), message, "{expr}");
    }
}

#[test]
fn field_errors_are_typed() {
    assert_eq!(
        CronSpec::parse("0 0 * 13 *", "UTC"),
        Err(SpecError::Field {
            field: CronField::Month,
            problem: FieldProblem::OutOfRange {
                value: "13".to_string(),
                min: 1,
                max: 12
            },
        })
    );
}

#[test]
fn wrong_field_counts_nicknames_and_impossible_days() {
    let cases = [
        (
            "* * *",
            "expected 5 fields (minute hour day-of-month month day-of-week), found 3",
        ),
        (
            "",
            "expected 5 fields (minute hour day-of-month month day-of-week), found 0",
        ),
        (
            "   ",
            "expected 5 fields (minute hour day-of-month month day-of-week), found 0",
        ),
        (
            "0 * * * * *",
            "expected 5 fields (minute hour day-of-month month day-of-week), found 6; a seconds or year field is not supported",
        ),
        (
            "0 0 * * * * 2027",
            "expected 5 fields (minute hour day-of-month month day-of-week), found 7; a seconds or year field is not supported",
        ),
        (
            "@reboot",
            "unknown nickname \"@reboot\" (use @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)",
        ),
        (
            "0 0 30 2 *",
            "\"0 0 30 2 *\" never fires: no month it names has the day of the month it names",
        ),
        (
            "0 0 31 4,6,9,11 *",
            "\"0 0 31 4,6,9,11 *\" never fires: no month it names has the day of the month it names",
        ),
    ];
    for (expr, message) in cases {
        assert_eq!(cron_error(expr), message, "{expr:?}");
    }
}

#[test]
fn unknown_time_zones_are_refused() {
    assert_eq!(
        CronSpec::parse("0 9 * * *", "Mars/Olympus")
            .unwrap_err()
            .to_string(),
        "unknown time zone \"Mars/Olympus\""
    );
    assert_eq!(
        CronSpec::parse("0 9 * * *", "").unwrap_err(),
        SpecError::UnknownTimeZone(String::new())
    );
    // The field is checked first.
    assert_eq!(cron_error("61 * * * *"), "minute: 61 is out of range 0-59");
    // Names are looked up without regard to case and read back as the database spells them.
    let spec = CronSpec::parse("0 9 * * *", "america/new_york").unwrap();
    assert_eq!(spec.time_zone(), "America/New_York");
    assert_eq!(spec.expression(), "0 9 * * *");
}

#[test]
fn bad_intervals() {
    let cases = [
        (
            "",
            "interval \"\": is empty (write a number and a unit, like 90s, 60m, 1h30m, 2h or 1d)",
        ),
        ("60", "interval \"60\": 60 has no unit (use d, h, m or s)"),
        (
            "1x",
            "interval \"1x\": unexpected \"x\" (write a number and a unit, like 90s, 60m, 1h30m, 2h or 1d)",
        ),
        (
            "h",
            "interval \"h\": unexpected \"h\" (write a number and a unit, like 90s, 60m, 1h30m, 2h or 1d)",
        ),
        (
            "-5m",
            "interval \"-5m\": unexpected \"-5m\" (write a number and a unit, like 90s, 60m, 1h30m, 2h or 1d)",
        ),
        (
            "1.5h",
            "interval \"1.5h\": unexpected \".5h\" (write a number and a unit, like 90s, 60m, 1h30m, 2h or 1d)",
        ),
        (
            "30m1h",
            "interval \"30m1h\": units must each appear once, largest first (d, h, m, s)",
        ),
        (
            "1h1h",
            "interval \"1h1h\": units must each appear once, largest first (d, h, m, s)",
        ),
        ("0m", "interval \"0m\": must be more than zero"),
        ("0d0s", "interval \"0d0s\": must be more than zero"),
        ("367d", "interval \"367d\": must be at most 366 days"),
        ("366d1s", "interval \"366d1s\": must be at most 366 days"),
        (
            "99999999999999999999d",
            "interval \"99999999999999999999d\": must be at most 366 days",
        ),
    ];
    for (text, message) in cases {
        assert_eq!(
            Spec::parse_every(text).unwrap_err().to_string(),
            message,
            "{text:?}"
        );
    }
}
