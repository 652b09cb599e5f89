//! The what-if's table and JSON for a journal of the built-in agent recorded in virtual
//! time (so its figures are exact): under FIFO, priority and fair share.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use clap::Parser;
use spool_core::{Kind, NewTask, Priority};
use spool_test::{Mock, TestScheduler};

use super::*;
use crate::agent::ReactAgent;
use crate::cli::{Cli, Command};

const MS: Duration = Duration::from_millis(1);

/// A run of six built-in agents on the test scheduler, with the demo's scripted model
/// and tools (every LLM call 5-14 ms by agent, every tool 2 ms): under fair share, at
/// most two LLM calls at once. Three work for the team `batch` at low priority, two for
/// `ui` at high priority, one for `ops`.
pub(super) fn recorded_journal() -> Journal {
    let config = Config::new()
        .policy(PolicyChoice::FairShare)
        .requests(RequestLimits::new().max_in_flight(Kind::Llm, 2));
    let mut test = TestScheduler::with_config(config);
    test.record_journal().unwrap();
    test.mock_with_latency_fn(
        Kind::Llm,
        Mock::Fn(Box::new(crate::demo::executors::scripted_llm(42))),
        |out| MS * (5 + 3 * (out.key.task().get() % 4) as u32),
    );
    let functions = crate::agent::tools::function_tools();
    for tool in ["search", "read_file", "calc"] {
        let functions = functions.clone();
        test.mock_with_latency(
            Kind::tool(tool),
            Mock::Fn(Box::new(move |out| {
                functions.call(tool, out.request.payload.value())
            })),
            2 * MS,
        );
    }
    let teams = [
        ("batch", Priority::Low),
        ("batch", Priority::Low),
        ("batch", Priority::Low),
        ("ui", Priority::High),
        ("ui", Priority::High),
        ("ops", Priority::Normal),
    ];
    for (i, (team, priority)) in teams.into_iter().enumerate() {
        let agent = ReactAgent::new(format!("agent-{i}"), "What is 6 times 7?".to_owned());
        test.submit(NewTask::new(agent).agent(team).priority(priority));
    }
    test.run_until_quiet();
    test.journal().unwrap()
}

/// The what-if options of `spool replay j ARGS`.
fn options(args: &[&str]) -> WhatIfArgs {
    let line = ["spool", "replay", "j"]
        .into_iter()
        .chain(args.iter().copied());
    match Cli::try_parse_from(line).unwrap().command {
        Command::Replay(args) => args.what_if,
        other => panic!("{other:?}"),
    }
}

fn table(journal: &Journal, args: &[&str]) -> String {
    compare("j", journal, &options(args)).unwrap()
}

/// Under the recorded rules (a what-if option that changes nothing), the what-if run
/// is the recorded one: the journal was recorded in virtual time too.
#[test]
fn under_the_recorded_rules_both_columns_agree() {
    let journal = recorded_journal();
    let text = table(&journal, &["--policy", "fair-share"]);
    for line in text.lines().skip(3) {
        let cells: Vec<&str> = line.split("  ").filter(|c| !c.is_empty()).collect();
        if let [_, recorded, what_if] = cells[..]
            && !line.starts_with("unmatched")
        {
            assert_eq!(recorded.trim(), what_if.trim(), "{line}");
        }
    }
    assert!(
        text.contains("\npolicy          fair-share       fair-share\n"),
        "{text}"
    );
}

/// `--json`: both runs' figures, durations in milliseconds.
#[test]
fn json_has_both_runs() {
    let journal = recorded_journal();
    let text = compare(
        "j",
        &journal,
        &options(&["--policy", "fifo", "--max-running", "2", "--json"]),
    )
    .unwrap();
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["journal"], "j");
    assert_eq!(value["arrivals"], 6);
    assert_eq!(value["recorded"]["policy"], "fair-share");
    assert_eq!(value["recorded"]["limits"], "--limit llm=2");
    assert_eq!(value["recorded"]["makespan_ms"], 73.0);
    assert_eq!(value["what_if"]["policy"], "fifo");
    assert_eq!(value["what_if"]["limits"], "--max-running 2 --limit llm=2");
    assert_eq!(value["what_if"]["makespan_ms"], 85.0);
    assert_eq!(
        value["what_if"]["agents"]["ui"],
        json!({"tasks": 2, "p50_ms": 24.0, "p95_ms": 43.0, "max_ms": 43.0})
    );
    assert_eq!(value["what_if"]["unmatched"], json!([]));
}

/// `--agent-limit llm=1`: each team at most one LLM call at once, beside the recorded
/// cap of two; `batch`'s three tasks then call one at a time, and the run is longer.
#[test]
fn an_agent_limit_holds_each_team_to_its_share() {
    let journal = recorded_journal();
    let text = compare(
        "j",
        &journal,
        &options(&["--agent-limit", "llm=1", "--json"]),
    )
    .unwrap();
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["recorded"]["limits"], "--limit llm=2");
    assert_eq!(
        value["what_if"]["limits"],
        "--limit llm=2 --agent-limit llm=1"
    );
    assert_eq!(value["recorded"]["makespan_ms"], 73.0);
    assert_eq!(value["what_if"]["makespan_ms"], 88.0);
    assert_eq!(value["what_if"]["unmatched"], json!([]));
}

/// A kind limited twice is a usage error, said before the journal is read.
#[test]
fn a_kind_limited_twice_is_a_usage_error() {
    let journal = recorded_journal();
    let failure = compare(
        "j",
        &journal,
        &options(&["--limit", "llm=2", "--limit", "llm=60/min"]),
    )
    .unwrap_err();
    assert_eq!(
        format!("{failure:?}"),
        "Usage(\"--limit llm is given twice; give each kind once, its parts comma-separated\")"
    );
}

/// The fixture `tests/fixtures/whatif.journal`, whose tables the binary's tests check
/// under FIFO, priority and fair share, is this recording: it gives the same tables.
/// `cargo test -p spool-cli --bin spool write_whatif_fixture -- --ignored` writes it
/// again.
#[test]
fn the_fixture_is_this_recording() {
    let bytes = std::fs::read(FIXTURE).unwrap();
    let fixture = Journal::decode(&bytes).unwrap();
    let stale = "tests/fixtures/whatif.journal is not this recording (was the journal or \
                 snapshot format changed?): write it again with `cargo test -p spool-cli \
                 --bin spool write_whatif_fixture -- --ignored`";
    if let Err(error) = Workload::from_journal(&fixture, &registry()) {
        panic!("{stale}: {error}");
    }
    let journal = recorded_journal();
    let mut tables = Vec::new();
    for policy in ["fifo", "priority", "fair-share"] {
        let args = ["--policy", policy, "--max-running", "2"];
        let table = table(&fixture, &args);
        assert_eq!(table, self::table(&journal, &args), "{policy}: {stale}");
        tables.push(table);
    }
    // Each policy its own figures.
    assert_ne!(tables[0], tables[1]);
    assert_ne!(tables[1], tables[2]);
    assert_ne!(tables[0], tables[2]);
}

/// Writes the fixture again (see [`the_fixture_is_this_recording`]).
#[test]
#[ignore = "writes tests/fixtures/whatif.journal"]
fn write_whatif_fixture() {
    std::fs::write(FIXTURE, recorded_journal().encode().unwrap()).unwrap();
}

/// Where the fixture is.
const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/whatif.journal");

/// Asks the LLM once, and once more if its answer came after 15 ms (a path that
/// depends on time).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Hurried {
    asked: u32,
}

impl spool_core::AgentTask for Hurried {
    fn poll(&mut self, cx: &mut spool_core::TaskContext<'_>) -> spool_core::Step {
        while let Some(answer) = cx.take_answer() {
            if let Err(error) = answer.result {
                return spool_core::Step::fail(error.to_string());
            }
        }
        let late = cx.now().as_duration() > 15 * MS;
        if self.asked == 0 || (self.asked == 1 && late) {
            self.asked += 1;
            cx.llm(json!("go"));
            return spool_core::Step::Wait;
        }
        spool_core::Step::done(self.asked)
    }
    fn type_name(&self) -> &'static str {
        "hurried"
    }
    fn save(&self) -> Result<spool_core::SavedTask, spool_core::StateError> {
        spool_core::SavedTask::serde(self)
    }
}

/// Requests the recorded run never sent are counted in the table and named under it:
/// with one LLM call at a time, the second and third tasks are answered after 15 ms
/// and ask again; those requests are answered with an error, and the tasks fail.
#[test]
fn unmatched_requests_are_named_under_the_table() {
    let mut test = TestScheduler::with_config(Config::new());
    test.record_journal().unwrap();
    test.mock_with_latency(Kind::Llm, Mock::Fixed(json!("ok")), 10 * MS);
    for _ in 0..3 {
        test.submit(NewTask::new(Hurried { asked: 0 }).agent("rush"));
    }
    test.run_until_quiet();
    let registry = spool_core::TaskRegistry::new().with_serde::<Hurried>("hurried");
    let workload = Workload::from_journal(&test.journal().unwrap(), &registry).unwrap();
    let limits = RequestLimits::new().max_in_flight(Kind::Llm, 1);
    let what_if = workload.run_under(Config::new().requests(limits.clone()));
    let report = Report {
        journal: "rush.journal".to_owned(),
        arrivals: workload.arrivals(),
        recorded: Side {
            stats: workload.recorded(),
            limits: limits_text(workload.task_limits(), workload.request_limits()),
        },
        what_if: Side {
            stats: &what_if,
            limits: limits_text(&TaskLimits::new(), &limits),
        },
    };
    assert_eq!(
        report.table(),
        "\
what-if: the workload of rush.journal (3 tasks submitted) under other rules, in virtual time

                recorded       what-if
policy          fifo           fifo
limits          none           --limit llm=1
tasks           3              3
completed       3              1
failed          0              2
canceled        0              0
makespan        10.0ms         30.0ms
wait p50        0.0ms          20.0ms
wait p95        0.0ms          20.0ms
requests sent   3              5
429s            0              0
peak in flight  3              1
unmatched       -              2

waits by agent (p50 / p95)
  rush (3)      0.0ms / 0.0ms  20.0ms / 20.0ms

unmatched: 2 requests the recorded run never sent, answered with an error: task 2 request \
2 (llm), task 3 request 2 (llm)
"
    );
}
