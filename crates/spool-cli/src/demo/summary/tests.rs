//! The summary's lines and verdict, exactly, for the outcomes a healthy scripted run
//! never shows: failed checks, and a real endpoint's answers and retries.

use std::collections::BTreeMap;
use std::time::Duration;

use spool_exec::AttemptCounts;
use spool_runtime::{RunReport, Runtime};

use super::{Provider, Tally, summary};

/// A report of `requests` requests (`answers` answered, `rate_limited` backed off), 300
/// steps in 1.5 s.
fn report(requests: u64, answers: u64, rate_limited: u64) -> RunReport {
    let mut runtime = Runtime::builder()
        .try_build()
        .expect("an empty runtime builds");
    let mut report = runtime.run_until_idle();
    report.steps = 300;
    report.elapsed = Duration::from_millis(1500);
    report.stats.requests = requests;
    report.stats.answers = answers;
    report.stats.rate_limited = rate_limited;
    report.stats.peak_ready = 7;
    report.stats.peak_in_flight = 9;
    report
}

/// What a real endpoint's executor counted.
fn counts(attempts: u64, retries: u64, rate_limited: u64) -> AttemptCounts {
    let mut counts = AttemptCounts::default();
    counts.attempts = attempts;
    counts.retries = retries;
    counts.rate_limited = rate_limited;
    counts
}

/// `(agent-i, what)` for each of `agents`.
fn numbered(agents: std::ops::Range<usize>, what: &str) -> Vec<(String, String)> {
    agents
        .map(|i| (format!("agent-{i}"), what.to_owned()))
        .collect()
}

/// What `summary` prints, and whether it says every check held.
fn printed(
    agents: usize,
    report: &RunReport,
    tally: &Tally,
    served: &[(&'static str, u64)],
    provider: &Provider,
) -> (String, bool) {
    let served: BTreeMap<&str, u64> = served.iter().copied().collect();
    let mut out = Vec::new();
    let ok = summary(&mut out, agents, report, tally, &served, provider).expect("writes to memory");
    (String::from_utf8(out).expect("the summary is UTF-8"), ok)
}

#[test]
fn a_scripted_run_that_fails_every_check_says_each_and_fails() {
    let tally = Tally {
        completed: 6,
        failed: 1,
        canceled: 1,
        unfinished: 2,
        verified: 2,
        evicted: 1,
        mismatches: (0..7).map(|i| format!("agent-{i}: wrong")).collect(),
        answers: numbered(0..6, "42"),
    };
    let provider = Provider {
        refused: 3,
        llm_peak: 33,
        resumed: false,
        real: false,
        endpoint: None,
    };
    let served = [("llm", 20), ("tool:calc", 4)];
    let (out, ok) = printed(12, &report(25, 24, 3), &tally, &served, &provider);
    let expected = [
        "tasks:      6 completed ok, 1 failed, 1 canceled, 2 unfinished, 1 ended with their results evicted after the retention\n",
        "requests:   25 (llm: 17, tool:calc: 4)\n",
        "peaks:      7 tasks ready, 9 requests in flight at once\n",
        "limits:     at most 32 LLM calls at the provider at once (the most it saw: 33); 3 calls refused with 429, backed off and sent again\n",
        "wall time:  1.500 s\n",
        "steps:      300 (200 steps/s)\n",
        "check:      FAILED: the scheduler sent 25 requests, backed off 3 times and took 24 answers (0 dropped); executors served 24 and refused 3\n",
        "check:      FAILED: the provider held 33 LLM calls at once, over the limit of 32\n",
        "check:      FAILED: 2 of 12 answers match, 7 do not, 3 missing\n",
        "  agent-0: wrong\n",
        "  agent-1: wrong\n",
        "  agent-2: wrong\n",
        "  agent-3: wrong\n",
        "  agent-4: wrong\n",
        "  … and 2 more\n",
    ]
    .concat();
    assert_eq!(out, expected);
    assert!(!ok);
}

#[test]
fn a_scripted_run_whose_answers_all_match_passes() {
    let tally = Tally {
        completed: 3,
        verified: 3,
        evicted: 1,
        answers: numbered(0..3, "42"),
        ..Tally::default()
    };
    let provider = Provider {
        refused: 2,
        llm_peak: 4,
        resumed: true,
        ..Provider::default()
    };
    let served = [("llm", 5), ("tool:search", 1)];
    let (out, ok) = printed(4, &report(4, 4, 2), &tally, &served, &provider);
    let expected = [
        "tasks:      3 completed ok, 0 failed, 0 canceled, 1 ended with their results evicted after the retention\n",
        "requests:   4 (in the whole run; this process: llm: 3, tool:search: 1)\n",
        "peaks:      7 tasks ready, 9 requests in flight at once\n",
        "limits:     at most 32 LLM calls at the provider at once (the most it saw: 4); 2 calls refused with 429, backed off and sent again\n",
        "wall time:  1.500 s\n",
        "steps:      300 (200 steps/s)\n",
        "check:      ok, 3/4 answers match their script (calc results recomputed), 1 evicted\n",
    ]
    .concat();
    assert_eq!(out, expected);
    assert!(ok);
}

#[test]
fn a_real_endpoint_shows_its_answers_and_what_the_server_saw() {
    let mut answers = numbered(0..12, "short");
    answers[1].1 = "é".repeat(201);
    let tally = Tally {
        completed: 12,
        verified: 12,
        answers,
        ..Tally::default()
    };
    let provider = Provider {
        refused: 2,
        llm_peak: 0,
        resumed: false,
        real: true,
        endpoint: Some(counts(30, 3, 5)),
    };
    let served = [("llm", 26)];
    let (out, ok) = printed(12, &report(24, 24, 2), &tally, &served, &provider);
    let expected = [
        "tasks:      12 completed ok, 0 failed, 0 canceled\n",
        "requests:   24 (llm: 24)\n",
        "peaks:      7 tasks ready, 9 requests in flight at once\n",
        "limits:     at most 32 LLM calls at the provider at once; 2 calls refused with 429, backed off and sent again; 3 more refused past the back-off bounds and failed to their tasks\n",
        "server:     30 requests sent to the server (3 retries of 5xx/connection errors, 5 answered 429)\n",
        "wall time:  1.500 s\n",
        "steps:      300 (200 steps/s)\n",
        "answers:\n",
        "  agent-0: short\n",
        &format!("  agent-1: {}…\n", "é".repeat(200)),
        "  agent-2: short\n",
        "  agent-3: short\n",
        "  agent-4: short\n",
        "  agent-5: short\n",
        "  agent-6: short\n",
        "  agent-7: short\n",
        "  agent-8: short\n",
        "  agent-9: short\n",
        "  … and 2 more\n",
        "check:      ok, 12/12 agents finished with an answer (a real LLM: answers are not checked against scripts)\n",
    ]
    .concat();
    assert_eq!(out, expected);
    assert!(ok);
}

#[test]
fn a_real_endpoint_that_left_agents_without_an_answer_fails() {
    let tally = Tally {
        completed: 1,
        failed: 1,
        unfinished: 1,
        verified: 1,
        mismatches: vec!["agent-1: failed: refused".to_owned()],
        answers: numbered(0..1, "yes"),
        ..Tally::default()
    };
    let provider = Provider {
        real: true,
        ..Provider::default()
    };
    let served = [("llm", 2)];
    let (out, ok) = printed(3, &report(2, 2, 0), &tally, &served, &provider);
    let expected = [
        "tasks:      1 completed ok, 1 failed, 0 canceled, 1 unfinished\n",
        "requests:   2 (llm: 2)\n",
        "peaks:      7 tasks ready, 9 requests in flight at once\n",
        "limits:     at most 32 LLM calls at the provider at once; 0 calls refused with 429, backed off and sent again\n",
        "wall time:  1.500 s\n",
        "steps:      300 (200 steps/s)\n",
        "answers:\n",
        "  agent-0: yes\n",
        "check:      FAILED: 1 of 3 agents finished with an answer, 1 failed, 1 unfinished\n",
        "  agent-1: failed: refused\n",
    ]
    .concat();
    assert_eq!(out, expected);
    assert!(!ok);
}
