//! A recorded run as a regression test: the journal checked against changed code
//! names the first step that asks something else.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::{Value, json};
use spool_core::{AsyncTask, Cx, Journal, Outcome, TaskId, TaskRegistry};
use spool_test::{JournalCheckError, TestScheduler, check_journal};

/// Asks the LLM three times, each time with the answers so far.
async fn planner(cx: Cx, topic: Value) -> Outcome {
    let mut notes: Vec<Value> = Vec::new();
    for turn in 1..=3 {
        notes.push(
            cx.llm(json!({"topic": topic, "turn": turn, "notes": notes}))
                .await?,
        );
        cx.sleep(Duration::from_secs(1)).await;
    }
    Ok(json!(notes))
}

/// The same, but its third turn asks in other words.
async fn reworded(cx: Cx, topic: Value) -> Outcome {
    let mut notes: Vec<Value> = Vec::new();
    for turn in 1..=3 {
        let ask = if turn == 3 {
            json!({"topic": topic, "turn": turn, "notes": notes, "style": "brief"})
        } else {
            json!({"topic": topic, "turn": turn, "notes": notes})
        };
        notes.push(cx.llm(ask).await?);
        cx.sleep(Duration::from_secs(1)).await;
    }
    Ok(json!(notes))
}

/// Stops after its first turn.
async fn hasty(cx: Cx, topic: Value) -> Outcome {
    Ok(cx
        .llm(json!({"topic": topic, "turn": 1, "notes": []}))
        .await?)
}

fn recorded() -> Journal {
    let mut ts = TestScheduler::new();
    ts.mock_llm([json!("one"), json!("two"), json!("three")]);
    ts.record_journal().unwrap();
    ts.spawn(AsyncTask::replayable("planner", json!("tides"), planner));
    ts.run_until_quiet();
    // What a store keeps goes through bytes.
    Journal::decode(&ts.journal().unwrap().encode().unwrap()).unwrap()
}

#[test]
fn the_same_code_replays_clean() {
    let registry = TaskRegistry::new().with_async("planner", planner);
    let report = check_journal(&recorded(), &registry).unwrap();
    assert_eq!((report.compared, report.unchecked), (3, 0));
}

#[test]
fn changed_code_is_named_at_its_first_divergent_step() {
    let registry = TaskRegistry::new().with_async("planner", reworded);
    let Err(JournalCheckError::Diverged(divergence)) = check_journal(&recorded(), &registry) else {
        panic!("the reworded third turn must diverge");
    };
    assert_eq!(
        (divergence.task, divergence.step, divergence.request),
        (TaskId::from_raw(1), 4, 3)
    );
    insta::assert_snapshot!(divergence.to_string());
}

#[test]
fn code_that_stops_early_is_named_too() {
    let registry = TaskRegistry::new().with_async("planner", hasty);
    let Err(JournalCheckError::Diverged(divergence)) = check_journal(&recorded(), &registry) else {
        panic!("stopping after one turn must diverge");
    };
    assert_eq!((divergence.request, divergence.step), (2, 2));
    insta::assert_snapshot!(divergence.to_string());
}

#[test]
fn an_unknown_task_type_is_a_replay_error() {
    let err = check_journal(&recorded(), &TaskRegistry::new()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the journal does not replay: entry 0: the submitted task could not be rebuilt: the registry does not know the type `planner`"
    );
}
