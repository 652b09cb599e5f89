//! The examples' outputs, from the functions their `main`s print.

#[allow(dead_code)]
#[path = "../../examples/quickstart.rs"]
mod quickstart;

#[allow(dead_code)]
#[path = "../../examples/schedules.rs"]
mod schedules;

#[test]
fn quickstart_gives_each_agent_its_own_word() {
    let (lines, report) = quickstart::run();
    assert_eq!(
        lines,
        [
            r#"task 1: "APPLE""#,
            r#"task 2: "BIRCH""#,
            r#"task 3: "CEDAR""#,
            r#"task 4: "DELTA""#,
            r#"task 5: "EMBER""#,
            r#"task 6: "FJORD""#,
            r#"task 7: "GROVE""#,
            r#"task 8: "HERON""#,
            r#"task 9: "IRIS""#,
            r#"task 10: "JUNIPER""#,
        ]
    );
    assert!(
        report.steps >= 20,
        "two polls at least per agent: {report:?}"
    );
}

#[test]
fn schedules_prints_for_people() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let lines = schedules::run(&dir.path().join("schedules.spool")).expect("the example runs");
    assert_eq!(
        lines[..4],
        [
            "runs 3, missed 0",
            "  stand-up #1 (saw 0)",
            "  stand-up #2 (saw 1)",
            "  stand-up #3 (saw 2)",
        ]
    );
    assert_eq!(lines.len(), 5, "{lines:#?}");
    // The next fire is a time of day that depends on when the test runs: its shape.
    let next = lines[4]
        .strip_prefix("after a restart: runs 3, next run ")
        .unwrap_or_else(|| panic!("{:?}", lines[4]));
    assert!(
        next.len() >= 20 && next.ends_with('Z') && next.as_bytes()[10] == b'T',
        "an RFC 3339 instant in UTC: {next:?}"
    );
}
