//! A recorded run as a regression test: the journal checked against changed code
//! names the first step that asks something else.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::{Value, json};
use spool_core::{AsyncTask, Cx, Journal, Outcome, TaskId, TaskRegistry};
use spool_test::{JournalCheckError, TestScheduler, check_journal};

/// Asks the LLM `turns` times about `topic`, each time with the answers so far (in
/// brief from `brief_from` on), a second apart; gives the answers.
async fn ask_turns(
    cx: &Cx,
    topic: &Value,
    turns: u32,
    brief_from: impl Fn(u32) -> bool,
) -> Result<Vec<Value>, spool_core::TaskError> {
    let mut notes: Vec<Value> = Vec::new();
    for turn in 1..=turns {
        let mut ask = json!({"topic": topic, "turn": turn, "notes": notes});
        if brief_from(turn) {
            ask["style"] = json!("brief");
        }
        notes.push(cx.llm(ask).await?);
        cx.sleep(Duration::from_secs(1)).await;
    }
    Ok(notes)
}

/// Asks the LLM three times, each time with the answers so far.
async fn planner(cx: Cx, topic: Value) -> Outcome {
    Ok(json!(ask_turns(&cx, &topic, 3, |_| false).await?))
}

/// The same, but its third turn asks in other words.
async fn reworded(cx: Cx, topic: Value) -> Outcome {
    Ok(json!(ask_turns(&cx, &topic, 3, |turn| turn == 3).await?))
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
        (TaskId::from_raw(1), 4, Some(3))
    );
    insta::assert_snapshot!(divergence.to_string());
}

#[test]
fn code_that_stops_early_is_named_too() {
    let registry = TaskRegistry::new().with_async("planner", hasty);
    let Err(JournalCheckError::Diverged(divergence)) = check_journal(&recorded(), &registry) else {
        panic!("stopping after one turn must diverge");
    };
    assert_eq!((divergence.request, divergence.step), (Some(2), 2));
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

/// The reworded third turn behind `cx.patched`: runs recorded before it replay the old
/// turn, runs started after take the new one.
async fn patched(cx: Cx, topic: Value) -> Outcome {
    let brief = |turn| turn == 3 && cx.patched("brief-third-turn");
    Ok(json!(ask_turns(&cx, &topic, 3, brief).await?))
}

#[test]
fn a_patched_change_replays_old_runs_clean_and_new_runs_take_it() {
    let registry = TaskRegistry::new().with_async("planner", patched);
    // The run recorded before the change replays clean with the patched code.
    let report = check_journal(&recorded(), &registry).unwrap();
    assert_eq!(report.compared, 3);
    // A new run takes the new branch, and its own journal checks clean too.
    let mut ts = TestScheduler::new();
    ts.mock_llm([json!("one"), json!("two"), json!("three")]);
    ts.record_journal().unwrap();
    let id = ts.spawn(AsyncTask::replayable("planner", json!("tides"), patched));
    ts.run_until_quiet();
    let third = ts.sent_requests()[2].key;
    assert_eq!((third.task(), third.number()), (id, 3));
    let journal = ts.journal().unwrap();
    assert!(journal.entries.iter().any(|e| matches!(
        e,
        spool_core::JournalEntry::Patched { task, name } if *task == id && name == "brief-third-turn"
    )));
    check_journal(&journal, &registry).unwrap();
    // Without the patch, that new run is what diverges: it asked in other words.
    let old = TaskRegistry::new().with_async("planner", planner);
    let Err(JournalCheckError::Diverged(divergence)) = check_journal(&journal, &old) else {
        panic!("the new run took the new branch");
    };
    assert_eq!(divergence.request, Some(3));
}

/// A test scheduler whose LLM answers "ok" and keeps the third request's payload.
fn keeping_third() -> (
    TestScheduler,
    std::sync::Arc<std::sync::Mutex<Option<Value>>>,
) {
    let mut ts = TestScheduler::new();
    let third = std::sync::Arc::new(std::sync::Mutex::new(None));
    let kept = std::sync::Arc::clone(&third);
    ts.mock_llm_fn(move |out| {
        if out.key.number() == 3 {
            *kept.lock().unwrap() = Some(out.request.payload.value().clone());
        }
        Ok(json!("ok"))
    });
    (ts, third)
}

/// Runs `ts` until the task has made `n` requests.
fn until_requests(ts: &mut TestScheduler, n: usize) {
    while ts.sent_requests().len() < n {
        if !ts.step() {
            ts.advance(Duration::from_secs(1));
        }
    }
}

#[test]
fn a_restored_task_replays_its_record_on_the_old_branch() {
    let registry = TaskRegistry::new().with_async("planner", patched);
    // A run of the old code past its third turn, restored under the patched code: its
    // record asked the old third turn, which the replay of its polls asks again (a
    // restore that asked the new one would fail as nondeterminism).
    let (mut old, _) = keeping_third();
    let id = old.spawn(AsyncTask::replayable("planner", json!("tides"), planner));
    until_requests(&mut old, 3);
    let snapshot = old.snapshot().unwrap();
    let (mut restored, _) = keeping_third();
    *restored.core_mut() = spool_core::Scheduler::restore(&snapshot, &registry).unwrap();
    restored.run_until_quiet();
    assert_eq!(
        restored.task_state(id),
        spool_core::TaskState::Completed(Ok(json!(["ok", "ok", "ok"])))
    );
    // One restored before its third turn runs that turn live, with the new code.
    let (mut old, _) = keeping_third();
    let id = old.spawn(AsyncTask::replayable("planner", json!("tides"), planner));
    until_requests(&mut old, 2);
    let snapshot = old.snapshot().unwrap();
    let (mut restored, third) = keeping_third();
    *restored.core_mut() = spool_core::Scheduler::restore(&snapshot, &registry).unwrap();
    restored.run_until_quiet();
    assert!(restored.task_state(id).is_ok());
    assert_eq!(
        third.lock().unwrap().clone(),
        Some(json!({"topic": "tides", "turn": 3, "notes": ["ok", "ok"], "style": "brief"}))
    );
    // A run of the patched code restored after it took the change keeps it: its
    // record says so.
    let (mut new, _) = keeping_third();
    let id = new.spawn(AsyncTask::replayable("planner", json!("tides"), patched));
    until_requests(&mut new, 3);
    let snapshot = new.snapshot().unwrap();
    let restored = spool_core::Scheduler::restore(&snapshot, &registry).unwrap();
    assert!(matches!(
        restored.task_state(id),
        Some(spool_core::TaskState::Waiting(_))
    ));
}

/// Decides the change `x`, then panics.
async fn decides_then_panics(cx: Cx, _input: Value) -> Outcome {
    let _ = cx.patched("x");
    panic!("on purpose");
}

/// Asks with the branch it takes for `x`.
async fn asks_its_branch(cx: Cx, _input: Value) -> Outcome {
    let taken = cx.patched("x");
    Ok(cx.llm(json!({"taken": taken})).await?)
}

#[test]
fn a_task_that_panics_leaves_its_decisions_to_no_other() {
    let registry = TaskRegistry::new()
        .with_async("panics", decides_then_panics)
        .with_async("asks", asks_its_branch);
    let mut ts = TestScheduler::new();
    ts.mock_llm([json!("ok")]);
    ts.record_journal().unwrap();
    ts.spawn(AsyncTask::replayable(
        "panics",
        json!(null),
        decides_then_panics,
    ));
    let asker = ts.spawn(AsyncTask::replayable("asks", json!(null), asks_its_branch));
    ts.run_until_quiet();
    let journal = ts.journal().unwrap();
    // The asker decided for itself, live: the new branch, journaled as its own.
    let patched: Vec<_> = journal
        .entries
        .iter()
        .filter_map(|e| match e {
            spool_core::JournalEntry::Patched { task, name } => Some((*task, name.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(patched, [(asker, "x")]);
    check_journal(&journal, &registry).unwrap();
}

#[test]
fn a_task_live_at_the_journal_s_start_counts_its_steps_from_there() {
    let mut ts = TestScheduler::new();
    ts.mock_llm([json!("one"), json!("two"), json!("three")]);
    ts.spawn(AsyncTask::replayable("planner", json!("tides"), planner));
    until_requests(&mut ts, 2);
    ts.record_journal().unwrap();
    ts.run_until_quiet();
    let journal = ts.journal().unwrap();
    let registry = TaskRegistry::new().with_async("planner", reworded);
    let Err(JournalCheckError::Diverged(divergence)) = check_journal(&journal, &registry) else {
        panic!("the reworded third turn must diverge");
    };
    assert!(divergence.since_start);
    assert_eq!(divergence.request, Some(3));
    let first = divergence.to_string();
    let first = first.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "task 1 diverges at step {} of the journal (request 3, journal entry {}):",
            divergence.step, divergence.entry
        )
    );
}

#[test]
fn a_fork_replays_its_origin_on_the_branches_the_origin_took() {
    // Recorded by the code before the change; forked by the code that has it, after
    // its last step: the fork replays the origin's old third turn from the tape.
    let mut ts = TestScheduler::new();
    ts.mock_llm([json!("one"), json!("two"), json!("three")]);
    ts.record_journal().unwrap();
    let id = ts.spawn(AsyncTask::replayable("planner", json!("tides"), planner));
    ts.run_until_quiet();
    let registry = TaskRegistry::new().with_async("planner", patched);
    let steps = ts.history(id, &registry).unwrap().steps.len() as u32;
    let fork = ts
        .fork(id, steps, spool_core::Edit::None, &registry)
        .unwrap();
    ts.run_until_quiet();
    let (_, playback) = ts.core().fork_origin(fork).unwrap();
    assert_eq!((playback.played, playback.diverged_at), (3, None));
    assert_eq!(
        ts.task_state(fork),
        spool_core::TaskState::Completed(Ok(json!(["one", "two", "three"])))
    );
    assert_eq!(ts.sent_requests().len(), 3, "the fork sent nothing");
}

/// Asks what `planner` asks, then a fourth turn.
async fn longer(cx: Cx, topic: Value) -> Outcome {
    Ok(json!(ask_turns(&cx, &topic, 4, |_| false).await?))
}

/// Asks what `planner` asks, and returns something else.
async fn other_result(cx: Cx, topic: Value) -> Outcome {
    let notes = ask_turns(&cx, &topic, 3, |_| false).await?;
    Ok(json!({"count": notes.len()}))
}

#[test]
fn code_that_asks_more_or_returns_otherwise_is_named_at_its_ending() {
    for (agent, got) in [
        (
            TaskRegistry::new().with_async("planner", longer),
            "  got:      not ended: Waiting(Request(Llm))",
        ),
        (
            TaskRegistry::new().with_async("planner", other_result),
            "  got:      ended: {\"count\":3}",
        ),
    ] {
        let Err(JournalCheckError::Diverged(divergence)) = check_journal(&recorded(), &agent)
        else {
            panic!("it must diverge at its ending");
        };
        assert_eq!(divergence.request, None);
        let text = divergence.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("task 1 diverges at step "), "{text}");
        assert!(lines[0].contains(" (its ending, journal entry "), "{text}");
        assert_eq!(lines[1], "  recorded: ended: [\"one\",\"two\",\"three\"]");
        assert_eq!(lines[2], got);
    }
    // The recorded code's ending matches.
    let same = TaskRegistry::new().with_async("planner", planner);
    assert_eq!(check_journal(&recorded(), &same).unwrap().endings, 1);
}
