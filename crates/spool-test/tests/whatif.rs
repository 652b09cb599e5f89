//! What-if runs: a workload recorded on the test scheduler, read back from its journal,
//! gives the recorded run's own figures, and runs under other policies and limits with
//! exact, different figures; requests the recorded run never sent are unmatched.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use spool_core::{
    AgentTask, BackoffConfig, Config, Journal, Kind, NewTask, PolicyChoice, Priority, RequestError,
    RequestLimits, SavedTask, StateError, Step, TaskContext, TaskId, TaskLimits, TaskRegistry,
    Timeline,
};
use spool_test::{Mock, RunStats, TestScheduler, Workload};

/// Asks the LLM `calls` times, one after the other; then, if `late_after_ms` is set and
/// the clock is past it, once more (a path that depends on time). Fails on an error.
#[derive(Debug, Serialize, Deserialize)]
struct Job {
    calls: u32,
    made: u32,
    late_after_ms: Option<u64>,
}

impl Job {
    fn new(calls: u32) -> Job {
        Job {
            calls,
            made: 0,
            late_after_ms: None,
        }
    }
}

impl AgentTask for Job {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        while let Some(answer) = cx.take_answer() {
            if let Err(error) = answer.result {
                return Step::fail(error.to_string());
            }
        }
        let late = self
            .late_after_ms
            .is_some_and(|ms| cx.now().as_duration() > Duration::from_millis(ms));
        if self.made < self.calls || (late && self.made == self.calls) {
            self.made += 1;
            cx.llm(json!({ "n": self.made }));
            return Step::Wait;
        }
        Step::done(self.made)
    }
    fn type_name(&self) -> &'static str {
        "job"
    }
    fn save(&self) -> Result<SavedTask, StateError> {
        SavedTask::serde(self)
    }
}

fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<Job>("job")
}

const MS: Duration = Duration::from_millis(1);

/// The recorded run's rules: FIFO, two LLM calls at once, a 5 ms back-off.
fn recorded_config() -> Config {
    let mut backoff = BackoffConfig::default();
    backoff.base = 5 * MS;
    backoff.max = 40 * MS;
    Config::new().policy(PolicyChoice::Fifo).requests(
        RequestLimits::new()
            .max_in_flight(Kind::Llm, 2)
            .backoff(backoff),
    )
}

/// Records the workload: a `batch` agent's four three-call jobs (low priority) and an
/// `ui` agent's two one-call jobs (high priority) at 0 ms, one more `ui` job at 5 ms
/// (this one late after 60 ms); every call takes 10 ms, 12 ms or 14 ms by task, and the
/// second call of task 2 is first refused with a 429.
fn record() -> (TestScheduler, Journal) {
    let mut test = TestScheduler::with_config(recorded_config());
    test.record_journal().unwrap();
    let mut refused = false;
    test.mock_with_latency_fn(
        Kind::Llm,
        Mock::Fn(Box::new(move |out| {
            if out.key.task().get() == 2 && out.key.number() == 2 && !refused {
                refused = true;
                return Err(RequestError::RateLimited {
                    retry_after: Some(5 * MS),
                });
            }
            Ok(json!("ok"))
        })),
        |out| MS * (10 + 2 * (out.key.task().get() % 3) as u32),
    );
    for _ in 0..4 {
        test.submit(
            NewTask::new(Job::new(3))
                .agent("batch")
                .priority(Priority::Low),
        );
    }
    for _ in 0..2 {
        test.submit(
            NewTask::new(Job::new(2))
                .agent("ui")
                .priority(Priority::High),
        );
    }
    for _ in 0..2 {
        test.submit(NewTask::new(Job::new(2)).agent("report"));
    }
    test.advance(5 * MS);
    let mut late = Job::new(1);
    late.late_after_ms = Some(60);
    test.submit(NewTask::new(late).agent("ui").priority(Priority::High));
    test.run_until_quiet();
    let journal = test.journal().unwrap();
    (test, journal)
}

/// A run's figures on a few lines, for exact comparison.
fn show(stats: &RunStats) -> String {
    let mut out = format!(
        "{}: {} tasks, {} completed, {} failed; makespan {:?}; wait p50 {:?} p95 {:?}; \
         {} requests, {} 429s, peak {}; {} unmatched\n",
        stats.policy,
        stats.tasks,
        stats.completed,
        stats.failed,
        stats.makespan,
        stats.waits.p50,
        stats.waits.p95,
        stats.requests,
        stats.rate_limited,
        stats.peak_in_flight,
        stats.unmatched.len()
    );
    for (agent, waits) in &stats.agents {
        writeln!(
            out,
            "  {agent}: {} tasks, p50 {:?} p95 {:?} max {:?}",
            waits.tasks, waits.p50, waits.p95, waits.max
        )
        .unwrap();
    }
    out
}

/// The recorded side is the recorded run's own figures: its stats, its requests and
/// 429s as the mocks saw them, and each task's wait as its own timeline gives it.
#[test]
fn the_recorded_side_is_the_recorded_runs_figures() {
    let (test, journal) = record();
    let workload = Workload::from_journal(&journal, &registry()).unwrap();
    let recorded = workload.recorded();
    assert_eq!(workload.arrivals(), 9);
    assert_eq!(recorded.policy, "fifo");
    assert_eq!(recorded.tasks, 9);
    assert_eq!(recorded.completed, test.stats().completed);
    assert_eq!(recorded.failed, test.stats().failed);
    assert_eq!(recorded.peak_in_flight, test.stats().peak_in_flight);
    assert_eq!(recorded.requests, test.sent_requests().len() as u64);
    let refused = test
        .delivered_answers()
        .iter()
        .filter(|a| matches!(a.result, Err(RequestError::RateLimited { .. })))
        .count();
    assert_eq!((recorded.rate_limited, refused), (1, 1));
    // Each agent's waits, from each task's timeline in the test scheduler's trace.
    let events = test.trace_events();
    let mut waits: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
    let mut last_end = Duration::ZERO;
    for id in 1..=9 {
        let timeline = Timeline::of(TaskId::from_raw(id), events);
        let end = timeline.ended().unwrap();
        last_end = last_end.max(end.as_duration());
        let totals = timeline.totals(end);
        let agent = match id {
            1..=4 => "batch",
            5 | 6 | 9 => "ui",
            _ => "report",
        };
        waits
            .entry(agent.to_owned())
            .or_default()
            .push(totals.queued + totals.blocked + totals.rate_limited);
    }
    assert_eq!(recorded.makespan, last_end);
    for (agent, mut waits) in waits {
        waits.sort();
        let got = &recorded.agents[&agent];
        assert_eq!(got.tasks, waits.len(), "{agent}");
        assert_eq!(got.max, *waits.last().unwrap(), "{agent}");
        assert_eq!(got.p50, waits[(waits.len() - 1) / 2], "{agent}");
    }
    assert_eq!(
        show(recorded),
        "fifo: 9 tasks, 9 completed, 0 failed; makespan 143ms; wait p50 56ms p95 94ms; \
         22 requests, 1 429s, peak 2; 0 unmatched
  batch: 4 tasks, p50 87ms p95 94ms max 94ms
  report: 2 tasks, p50 46ms p95 56ms max 56ms
  ui: 3 tasks, p50 19ms p95 20ms max 20ms
"
    );
}

/// Under the recorded rules the what-if run is the recorded run again: the test
/// scheduler runs in virtual time too, polls take no time in either.
#[test]
fn under_the_recorded_rules_the_run_is_the_recorded_one() {
    let (_, journal) = record();
    let workload = Workload::from_journal(&journal, &registry()).unwrap();
    assert_eq!(workload.run_under(recorded_config()), *workload.recorded());
}

/// At most two tasks running at once under FIFO, priority and fair share: each gives
/// its own exact figures, the same on every run.
#[test]
fn each_policy_gives_its_own_exact_figures() {
    let (_, journal) = record();
    let workload = Workload::from_journal(&journal, &registry()).unwrap();
    let under = |policy: PolicyChoice| {
        let config = recorded_config()
            .policy(policy)
            .limits(TaskLimits::new().max_running(2));
        workload.run_under(config)
    };
    let fifo = under(PolicyChoice::Fifo);
    let priority = under(PolicyChoice::Priority);
    let fair = under(PolicyChoice::FairShare);
    assert_eq!(under(PolicyChoice::Priority), priority);
    // Two tasks run at once: the order they get a slot in is the policy's. Each
    // run's `ui` job submitted at 5 ms ends after 60 ms and asks once more than it did
    // in the recorded run: that request is unmatched, answered with an error, and the
    // job fails.
    assert_eq!(
        show(&fifo),
        "fifo: 9 tasks, 8 completed, 1 failed; makespan 142ms; wait p50 66ms p95 116ms; \
         23 requests, 1 429s, peak 2; 1 unmatched
  batch: 4 tasks, p50 5ms p95 61ms max 61ms
  report: 2 tasks, p50 97ms p95 114ms max 114ms
  ui: 3 tasks, p50 94ms p95 116ms max 116ms
"
    );
    assert_eq!(
        show(&priority),
        "priority: 9 tasks, 8 completed, 1 failed; makespan 145ms; wait p50 61ms p95 109ms; \
         23 requests, 1 429s, peak 2; 1 unmatched
  batch: 4 tasks, p50 5ms p95 109ms max 109ms
  report: 2 tasks, p50 74ms p95 81ms max 81ms
  ui: 3 tasks, p50 59ms p95 61ms max 61ms
"
    );
    assert_eq!(
        show(&fair),
        "fair-share: 9 tasks, 8 completed, 1 failed; makespan 137ms; wait p50 64ms p95 122ms; \
         23 requests, 1 429s, peak 2; 1 unmatched
  batch: 4 tasks, p50 5ms p95 91ms max 91ms
  report: 2 tasks, p50 84ms p95 108ms max 108ms
  ui: 3 tasks, p50 64ms p95 122ms max 122ms
"
    );
    let late = &fifo.unmatched[0];
    assert_eq!(
        (late.task, late.number, &late.kind),
        (TaskId::from_raw(9), 2, &Kind::Llm)
    );
}

/// A journal that starts from a scheduler already holding tasks has no arrivals for
/// them: refused, saying why.
#[test]
fn a_journal_that_starts_with_tasks_is_refused() {
    let mut test = TestScheduler::with_config(recorded_config());
    test.mock_with_latency(Kind::Llm, Mock::Fixed(json!("ok")), 10 * MS);
    test.submit(NewTask::new(Job::new(1)));
    test.record_journal().unwrap();
    test.run_until_quiet();
    let journal = test.journal().unwrap();
    assert_eq!(
        Workload::from_journal(&journal, &registry())
            .unwrap_err()
            .to_string(),
        "the journal starts from a snapshot holding 1 tasks, whose arrivals it does not have: \
         a what-if run needs a journal that starts from an empty scheduler (as `spool demo \
         --journal` records)"
    );
    assert_eq!(
        Workload::from_journal(&journal, &TaskRegistry::new())
            .unwrap_err()
            .to_string(),
        "the journal's starting snapshot: task 1 has type `job`, which the registry does not know"
    );
}

/// Asks the LLM once, then spawns a `Job` of `child_calls` calls, waits for it, and
/// ends with what it returned.
#[derive(Debug, Serialize, Deserialize)]
struct Parent {
    child_calls: u32,
    child: Option<TaskId>,
    asked: bool,
}

impl AgentTask for Parent {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if let Some(child) = self.child {
            return match cx.take_child_result(child) {
                Some(Ok(value)) => Step::done(value),
                Some(Err(error)) => Step::fail(error.to_string()),
                None => Step::Wait,
            };
        }
        if !self.asked {
            self.asked = true;
            cx.llm(json!("plan"));
            return Step::Wait;
        }
        let child = cx.spawn(NewTask::new(Job::new(self.child_calls)));
        cx.join(child);
        self.child = Some(child);
        Step::Wait
    }
    fn type_name(&self) -> &'static str {
        "parent"
    }
    fn save(&self) -> Result<SavedTask, StateError> {
        SavedTask::serde(self)
    }
}

/// A child is its parent's child in both runs, whatever id it gets. Recorded: task 1's
/// first answer takes 14 ms and task 2's 10 ms, so task 2 spawns first (its child is
/// task 3, with one call) and task 1 second (task 4, two calls). With one LLM call at a
/// time, task 1 is answered first and its child is task 3: matched by id it would ask
/// for a second answer task 3 never had; matched by parent it has its own.
#[test]
fn children_keep_their_answers_under_other_ids() {
    let mut test = TestScheduler::with_config(Config::new());
    test.record_journal().unwrap();
    test.mock_with_latency_fn(Kind::Llm, Mock::Fixed(json!("ok")), |out| {
        match out.key.task().get() {
            1 => 14 * MS,
            2 => 10 * MS,
            _ => 5 * MS,
        }
    });
    for child_calls in [2, 1] {
        test.submit(NewTask::new(Parent {
            child_calls,
            child: None,
            asked: false,
        }));
    }
    test.run_until_quiet();
    let journal = test.journal().unwrap();
    let registry = registry().with_serde::<Parent>("parent");
    let workload = Workload::from_journal(&journal, &registry).unwrap();
    assert_eq!(show(workload.recorded()), RECORDED_FAMILY);
    let what_if = workload
        .run_under(Config::new().requests(RequestLimits::new().max_in_flight(Kind::Llm, 1)));
    assert_eq!(
        show(&what_if),
        "fifo: 4 tasks, 4 completed, 0 failed; makespan 39ms; wait p50 5ms p95 15ms; \
         5 requests, 0 429s, peak 1; 0 unmatched
  default: 4 tasks, p50 5ms p95 15ms max 15ms
"
    );
}

/// The recorded run of `children_keep_their_answers_under_other_ids`.
const RECORDED_FAMILY: &str = "fifo: 4 tasks, 4 completed, 0 failed; makespan 24ms; \
                               wait p50 0ns p95 0ns; 5 requests, 0 429s, peak 2; 0 unmatched
  default: 4 tasks, p50 0ns p95 0ns max 0ns
";

/// A task that cannot be rebuilt for the what-if run (its decoder refuses it this
/// time) is left out, and the tasks submitted with it still stand for their own
/// recorded tasks: the second task of the batch, with two calls, gets its own two
/// answers, not the first task's one.
#[test]
fn a_task_left_out_leaves_the_others_their_answers() {
    let mut test = TestScheduler::with_config(Config::new());
    test.record_journal().unwrap();
    test.mock_with_latency(Kind::Llm, Mock::Fixed(json!("ok")), 10 * MS);
    test.submit_all(vec![NewTask::new(Job::new(1)), NewTask::new(Job::new(2))])
        .unwrap();
    test.run_until_quiet();
    let journal = test.journal().unwrap();
    // The recording rebuilds both tasks (decodes 1 and 2); the what-if run refuses the
    // first (decode 3).
    let decoded = std::sync::atomic::AtomicUsize::new(0);
    let registry = TaskRegistry::new().with("job", move |bytes| {
        if decoded.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 2 {
            return Err(StateError::Unsaveable("refused this time".to_owned()));
        }
        let job: Job = SavedTask::decode_serde(bytes)?;
        Ok(Box::new(job))
    });
    let workload = Workload::from_journal(&journal, &registry).unwrap();
    let what_if = workload.run_under(Config::new());
    assert_eq!(
        show(&what_if),
        "fifo: 1 tasks, 1 completed, 0 failed; makespan 20ms; wait p50 0ns p95 0ns; \
         2 requests, 0 429s, peak 1; 0 unmatched
  default: 1 tasks, p50 0ns p95 0ns max 0ns
"
    );
}

/// Cancellations and deadlines from outside are inputs too: at 5 ms task 1 is
/// canceled and task 2 given a deadline at 15 ms. The what-if run does the same to
/// the tasks that stand for them, at the same times.
#[test]
fn cancellations_and_deadlines_from_outside_are_inputs() {
    let mut test = TestScheduler::with_config(Config::new());
    test.record_journal().unwrap();
    test.mock_with_latency(Kind::Llm, Mock::Fixed(json!("ok")), 10 * MS);
    let ids: Vec<TaskId> = (0..3)
        .map(|_| test.submit(NewTask::new(Job::new(3))))
        .collect();
    test.advance(5 * MS);
    test.cancel(ids[0]).unwrap();
    let deadline = test.now() + 10 * MS;
    test.core_mut().set_deadline(ids[1], deadline).unwrap();
    test.run_until_quiet();
    let workload = Workload::from_journal(&test.journal().unwrap(), &registry()).unwrap();
    let recorded = workload.recorded();
    assert_eq!(
        (recorded.completed, recorded.failed, recorded.canceled),
        (1, 1, 1)
    );
    assert_eq!(workload.run_under(Config::new()), *recorded);
}
