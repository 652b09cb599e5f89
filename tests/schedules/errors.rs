//! Bad schedule operations: each a typed error saying what was wrong; nothing changes.

use serde_json::json;
use spool::core::{ScheduleDef, ScheduleError, Spec, check_slug};
use spool_test::TestScheduler;

use crate::support::{at, minutes, registry};

fn def(slug: &str) -> ScheduleDef {
    ScheduleDef::new(slug, Spec::Every(minutes(5)), "note", json!({"text": "x"}))
}

#[test]
fn bad_slugs_are_refused_by_name() {
    let mut t = at("2027-01-01T00:00:00Z");
    for (slug, message) in [
        (
            "../etc",
            "bad schedule slug \"../etc\": only lower-case letters, digits and '-' are allowed",
        ),
        (
            "a/b",
            "bad schedule slug \"a/b\": only lower-case letters, digits and '-' are allowed",
        ),
        ("", "bad schedule slug \"\": it is empty"),
        (
            "Daily",
            "bad schedule slug \"Daily\": only lower-case letters, digits and '-' are allowed",
        ),
        ("-x", "bad schedule slug \"-x\": it starts or ends with '-'"),
    ] {
        assert_eq!(t.put_schedule(def(slug)).unwrap_err().to_string(), message);
    }
    let long = "a".repeat(64);
    assert_eq!(
        check_slug(&long).unwrap_err().to_string(),
        format!("bad schedule slug \"{long}\": it is longer than 63 characters")
    );
    assert!(check_slug(&"a".repeat(63)).is_ok());
    assert!(t.schedules().is_empty());
}

#[test]
fn unknown_types_bad_inputs_and_unknown_slugs() {
    let mut t = at("2027-01-01T00:00:00Z");
    let unknown = ScheduleDef::new("u", Spec::Every(minutes(5)), "nope", json!({}));
    assert_eq!(
        t.put_schedule(unknown).unwrap_err().to_string(),
        "schedule \"u\": the task type \"nope\" is not registered"
    );
    // With a session, the input must be an object.
    let list = ScheduleDef::new("l", Spec::Every(minutes(5)), "note", json!([1]));
    assert_eq!(
        t.put_schedule(list).unwrap_err().to_string(),
        "schedule \"l\": bad input: with a session, the input must be a JSON object (the run gets a \"session\" member added)"
    );
    // The type refuses the input.
    let wrong = ScheduleDef::new("w", Spec::Every(minutes(5)), "note", json!({"text": 5}));
    let error = t.put_schedule(wrong).unwrap_err().to_string();
    assert!(
        error.starts_with("schedule \"w\": bad input: the task type \"note\" refused its input: "),
        "{error}"
    );
    for (result, slug) in [
        (t.pause_schedule("ghost"), "ghost"),
        (t.resume_schedule("ghost"), "ghost"),
        (t.delete_schedule("ghost"), "ghost"),
    ] {
        assert_eq!(result, Err(ScheduleError::NotFound(slug.into())));
    }
    assert_eq!(
        t.trigger_schedule("ghost"),
        Err(ScheduleError::NotFound("ghost".into()))
    );
    assert!(t.schedules().is_empty());
}

#[test]
fn without_a_wall_clock_schedules_are_refused() {
    let mut t = TestScheduler::new();
    t.set_registry(registry());
    assert_eq!(t.put_schedule(def("a")), Err(ScheduleError::NoWallClock));
}

#[test]
fn a_bad_patch_changes_nothing() {
    let mut t = at("2027-01-01T00:00:00Z");
    t.put_schedule(def("a")).unwrap();
    let before = t.schedule("a").unwrap();
    let mut patch = spool::core::SchedulePatch::new();
    patch.task_type = Some("nope".into());
    assert!(t.patch_schedule("a", patch).is_err());
    assert_eq!(t.schedule("a").unwrap(), before);
    t.advance(minutes(5));
    assert_eq!(t.schedule("a").unwrap().status.runs, 1);
}

#[test]
fn create_schedule_checks_the_definition_first_and_makes_only_a_new_one() {
    let mut t = at("2027-01-01T00:00:00Z");
    let now = t.now();
    t.core_mut().record_journal(true);
    while t.core_mut().poll_journal().is_some() {}
    assert_eq!(t.core_mut().create_schedule(now, def("a")), Ok(true));
    assert!(
        t.core_mut().poll_journal().is_some(),
        "the creation is journaled"
    );
    while t.core_mut().poll_journal().is_some() {}
    let made = t.schedules();
    // A taken slug: nothing changes, nothing is journaled.
    let other = ScheduleDef::new("a", Spec::Every(minutes(9)), "note", json!({"text": "y"}));
    assert_eq!(t.core_mut().create_schedule(now, other), Ok(false));
    assert_eq!(t.schedules(), made);
    assert_eq!(t.core_mut().poll_journal(), None);
    // A definition put_schedule refuses is refused, taken slug or not.
    let unknown = ScheduleDef::new("a", Spec::Every(minutes(5)), "nope", json!({}));
    assert_eq!(
        t.core_mut().create_schedule(now, unknown),
        Err(ScheduleError::UnknownType {
            slug: "a".to_owned(),
            task_type: "nope".to_owned(),
        })
    );
    assert_eq!(t.schedules(), made);
}
