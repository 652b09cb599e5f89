//! Budgets in virtual time: the exact trace of a run whose budget is spent mid-run —
//! the next LLM request fails with the typed error, or waits for the next day — and the
//! same run across a snapshot and restore, which must give the same trace.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use spool_core::{
    AgentTask, Amount, Budget, BudgetScope, Budgets, Config, ModelPrice, NewTask, OnSpent, Prices,
    RequestError, Response, SavedTask, Scheduler, Spend, StateError, Step, TaskContext, TaskError,
    TaskId, TaskRegistry, TaskState, Time, Trace, Usage,
};

/// Asks the model `rounds` times, one question after the other. An answer that is an
/// error ends the task: with the error (`handles: false`), or with what it has so far
/// (`handles: true`).
#[derive(Debug, Serialize, Deserialize)]
struct Asker {
    asked: u32,
    rounds: u32,
    handles: bool,
}

impl AgentTask for Asker {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if let Some(answer) = cx.take_answer()
            && let Err(error) = answer.result
        {
            if self.handles {
                return Step::done(
                    json!({ "answers": self.asked - 1, "stopped": error.to_string() }),
                );
            }
            return Step::Done(Err(TaskError::Request {
                number: answer.number,
                error,
            }));
        }
        if self.asked == self.rounds {
            return Step::done(json!({ "answers": self.asked }));
        }
        self.asked += 1;
        cx.llm(json!({ "messages": [{ "role": "user", "content": format!("question {}", self.asked) }] }));
        Step::Wait
    }
    fn type_name(&self) -> &'static str {
        "asker"
    }
    fn save(&self) -> Result<SavedTask, StateError> {
        SavedTask::serde(self)
    }
}

fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<Asker>("asker")
}

/// Every answer takes a second and used 30 tokens in and 10 out of `gpt-4o`.
fn usage() -> Usage {
    Usage::new(30, 10, "gpt-4o")
}

/// $2.50 and $10 per million tokens in and out: an answer costs $0.000175.
fn prices() -> Prices {
    Prices::new().model("gpt-4o", ModelPrice::usd_per_million(2.5, 10.0))
}

/// Runs `s` until nothing is left to do or the time would pass `until`: steps, answers
/// one request a second, and moves to the next timer when idle. Returns the time it
/// stopped at.
fn run(s: &mut Scheduler, mut now: Time, until: Time) -> Time {
    let mut out = Vec::new();
    loop {
        while s.step(now).is_some() {}
        while let Some(request) = s.poll_request() {
            out.push(request.key);
        }
        if !out.is_empty() {
            if now + Duration::from_secs(1) > until {
                return now;
            }
            now = now + Duration::from_secs(1);
            // The request with the lowest number (then task) first: an order the
            // requests have whichever process sent them, so a restored run answers as
            // the straight one does.
            out.sort_by_key(|k| (k.number(), k.task()));
            let key = out.remove(0);
            let answer = Response::ok(key, json!("an answer")).with_usage(usage());
            let _ = s.handle_response(now, answer);
            continue;
        }
        match s.poll_timeout() {
            Some(at) if at <= until => {
                now = at.max(now);
                s.handle_timeout(now);
            }
            _ => return now,
        }
    }
}

/// A scheduler with `budgets` recording its trace, and the tasks of `tasks` submitted at
/// time zero (agent, rounds, handles).
fn scheduler(budgets: Budgets, tasks: &[(&'static str, u32, bool)]) -> (Scheduler, Vec<TaskId>) {
    let mut s = Scheduler::new(Config::new().record_trace(true).budgets(budgets));
    let mut ids = Vec::new();
    for (agent, rounds, handles) in tasks {
        let task = Asker {
            asked: 0,
            rounds: *rounds,
            handles: *handles,
        };
        ids.push(
            s.submit(Time::ZERO, NewTask::new(task).agent(*agent))
                .unwrap()
                .id,
        );
    }
    (s, ids)
}

/// Runs `s` to the end straight, and again from a snapshot taken at `cut` and
/// restored: both traces must be the same. Returns the straight run's scheduler.
fn straight_and_restored(
    make: impl Fn() -> (Scheduler, Vec<TaskId>),
    cut: Time,
) -> (Scheduler, Vec<TaskId>) {
    let end = Time::from_duration(Duration::from_secs(3 * 24 * 60 * 60));
    let (mut straight, ids) = make();
    run(&mut straight, Time::ZERO, end);

    let (mut first, _) = make();
    let at = run(&mut first, Time::ZERO, cut);
    // Requests held for a budget keep the scheduler's counts whole.
    assert_eq!(first.check_invariants(), Ok(()));
    let snapshot = first.snapshot().unwrap();
    let bytes = snapshot.encode().unwrap();
    let mut restored =
        Scheduler::restore(&spool_core::Snapshot::decode(&bytes).unwrap(), &registry()).unwrap();
    let _ = restored.resend_in_flight();
    run(&mut restored, at, end);
    let mut whole = first.trace().events().to_vec();
    whole.extend_from_slice(restored.trace().events());
    assert_eq!(
        Trace::render(&whole),
        Trace::render(straight.trace().events()),
        "the restored run's trace differs from the straight run's"
    );
    assert_eq!(restored.trace().hash(), straight.trace().hash());
    for id in &ids {
        assert_eq!(restored.task_spend(*id), straight.task_spend(*id));
    }
    (straight, ids)
}

/// A task budget of 100 tokens: the third answer takes the task to 120, so its fourth
/// request fails at once, unsent, with the typed error; one task ends with it, the
/// other goes on without the model.
#[test]
fn a_spent_task_budget_fails_the_next_llm_request() {
    let make = || {
        let budgets = Budgets::new()
            .per_task(Budget::tokens(100))
            .prices(prices());
        scheduler(budgets, &[("acme", 5, false), ("globex", 5, true)])
    };
    let (s, ids) = straight_and_restored(make, Time::from_duration(Duration::from_secs(3)));
    insta::assert_snapshot!("task_budget_fails", Trace::render(s.trace().events()));
    let spent = RequestError::BudgetSpent {
        scope: BudgetScope::Task,
        spent: Amount::Tokens(120),
        budget: Amount::Tokens(100),
    };
    assert_eq!(
        s.task_state(ids[0]),
        Some(TaskState::Completed(Err(TaskError::Request {
            number: 4,
            error: spent.clone()
        })))
    );
    assert_eq!(
        s.task_state(ids[1]),
        Some(TaskState::Completed(Ok(json!({
            "answers": 3,
            "stopped": "the task's budget is spent: 120 tokens of 100 tokens"
        }))))
    );
    let mut expected = Spend::default();
    expected.input_tokens = 90;
    expected.output_tokens = 30;
    expected.micro_usd = 525;
    expected.answers = 3;
    assert_eq!(s.task_spend(ids[0]), Some(expected));
    let report = s.spend().unwrap();
    assert_eq!(report.today.tokens(), 240);
    assert_eq!(report.today.micro_usd, 1_050);
    assert_eq!(report.held, 0);
}

/// A day budget of $0.0005 that waits: the third answer of the day takes the day to
/// $0.000525, so the next request of either task is held until the next day begins
/// (no wall clock: day 1 begins at 24h), then both go on.
#[test]
fn a_spent_day_budget_holds_requests_until_the_next_day() {
    let make = || {
        let budgets = Budgets::new()
            .per_day(Budget::cost_usd(0.0005))
            .on_day_spent(OnSpent::Wait)
            .prices(prices());
        scheduler(budgets, &[("acme", 3, false), ("globex", 3, false)])
    };
    // Cut while the requests wait for the next day.
    let (s, ids) = straight_and_restored(make, Time::from_duration(Duration::from_secs(60)));
    insta::assert_snapshot!("day_budget_waits", Trace::render(s.trace().events()));
    for id in ids {
        assert_eq!(
            s.task_state(id),
            Some(TaskState::Completed(Ok(json!({ "answers": 3 }))))
        );
    }
    let report = s.spend().unwrap();
    // Day 0 spent four answers (three reached the budget, one was in flight); day 1
    // the two held requests'.
    assert_eq!(report.today.answers, 2);
    assert_eq!(report.today.micro_usd, 350);
    assert_eq!(report.agents[1].0, "acme");
    assert_eq!(report.agents[1].1.answers, 3);
}

/// The format version in the snapshot's header.
fn format_of(bytes: &[u8]) -> u16 {
    u16::from_le_bytes([bytes[8], bytes[9]])
}

/// A scheduler without budgets snapshots in format 5, as before budgets were; with
/// budgets, in format 6, and its restore goes on with the same spend. Other budgets
/// set on the restored scheduler keep that spend.
#[test]
fn only_a_scheduler_with_budgets_writes_format_6() {
    let (mut plain, _) = scheduler(Budgets::new(), &[]);
    plain.set_budgets(None);
    let bytes = plain.snapshot().unwrap().encode().unwrap();
    assert_eq!(format_of(&bytes), 5);
    let restored =
        Scheduler::restore(&spool_core::Snapshot::decode(&bytes).unwrap(), &registry()).unwrap();
    assert_eq!(restored.spend(), None);

    let budgets = Budgets::new()
        .per_task(Budget::tokens(1_000))
        .prices(prices());
    let (mut s, ids) = scheduler(budgets, &[("acme", 3, false)]);
    let at = run(
        &mut s,
        Time::ZERO,
        Time::from_duration(Duration::from_secs(1)),
    );
    let bytes = s.snapshot().unwrap().encode().unwrap();
    assert_eq!(format_of(&bytes), 6);
    let mut restored =
        Scheduler::restore(&spool_core::Snapshot::decode(&bytes).unwrap(), &registry()).unwrap();
    assert_eq!(restored.task_spend(ids[0]), s.task_spend(ids[0]));
    assert_eq!(restored.task_spend(ids[0]).unwrap().tokens(), 40);
    // Under a task budget of 40 tokens, spent already: the request in flight is sent
    // again and answered (it was let out before), the next one fails.
    restored.set_budgets(Some(Budgets::new().per_task(Budget::tokens(40))));
    let _ = restored.resend_in_flight();
    run(
        &mut restored,
        at,
        Time::from_duration(Duration::from_secs(60)),
    );
    assert_eq!(restored.task_spend(ids[0]).unwrap().tokens(), 80);
    assert!(matches!(
        restored.task_state(ids[0]),
        Some(TaskState::Completed(Err(TaskError::Request {
            number: 3,
            ..
        })))
    ));
}

/// A task's spend is kept while the task is in the table, and let go with it: after
/// `forget`, and after its retention runs out.
#[test]
fn a_tasks_spend_leaves_with_the_task() {
    let budgets = Budgets::new().per_task(Budget::tokens(1_000));
    let mut s = Scheduler::new(
        Config::new()
            .budgets(budgets)
            .retention(Duration::from_secs(600)),
    );
    let ask = || Asker {
        asked: 0,
        rounds: 1,
        handles: false,
    };
    let forgotten = s.submit(Time::ZERO, NewTask::new(ask())).unwrap().id;
    let evicted = s.submit(Time::ZERO, NewTask::new(ask())).unwrap().id;
    let at = run(
        &mut s,
        Time::ZERO,
        Time::from_duration(Duration::from_secs(10)),
    );
    assert_eq!(s.task_spend(forgotten).unwrap().tokens(), 40);
    assert_eq!(s.task_spend(evicted).unwrap().tokens(), 40);
    assert!(s.forget(forgotten).is_some());
    assert_eq!(s.task_spend(forgotten), None);
    // Still within its retention: its spend is there.
    assert_eq!(s.task_spend(evicted).unwrap().tokens(), 40);
    // Retention runs out with the next clock move.
    s.handle_timeout(at + Duration::from_secs(3_600));
    assert_eq!(s.task_state(evicted), None);
    assert_eq!(s.task_spend(evicted), None);
    // The agent's and the day's spend keep both tasks' answers.
    let report = s.spend().unwrap();
    assert_eq!(report.today.tokens(), 80);
    assert_eq!(report.agents[0].1.tokens(), 80);
}

/// A task whose LLM request is held for the next day's budget is canceled: the
/// request is no longer counted as held, as a restored scheduler would not count it.
#[test]
fn a_held_request_of_a_canceled_task_is_not_counted() {
    let budgets = Budgets::new()
        .per_day(Budget::tokens(40))
        .on_day_spent(OnSpent::Wait);
    let (mut s, ids) = scheduler(budgets, &[("acme", 3, false)]);
    let at = run(
        &mut s,
        Time::ZERO,
        Time::from_duration(Duration::from_secs(60)),
    );
    let report = s.spend().unwrap();
    assert_eq!(report.held, 1);
    assert!(report.held_until.is_some());
    s.cancel(at, ids[0], spool_core::CancelReason::Requested)
        .unwrap();
    let report = s.spend().unwrap();
    assert_eq!(report.held, 0);
    assert_eq!(report.held_until, None);
    let bytes = s.snapshot().unwrap().encode().unwrap();
    let restored =
        Scheduler::restore(&spool_core::Snapshot::decode(&bytes).unwrap(), &registry()).unwrap();
    assert_eq!(restored.spend().unwrap().held, 0);
    assert_eq!(s.poll_timeout(), None);
}

/// A scheduler restored without budgets resends its requests, then gets a task budget
/// already spent: the first new LLM request is checked, as a replay checks it.
#[test]
fn budgets_set_after_a_resend_check_the_next_request() {
    let mut s = Scheduler::new(Config::new());
    let task = Asker {
        asked: 0,
        rounds: 1,
        handles: false,
    };
    let id = s.submit(Time::ZERO, NewTask::new(task)).unwrap().id;
    let bytes = s.snapshot().unwrap().encode().unwrap();
    let mut restored =
        Scheduler::restore(&spool_core::Snapshot::decode(&bytes).unwrap(), &registry()).unwrap();
    assert_eq!(restored.resend_in_flight(), 0);
    restored.set_budgets(Some(Budgets::new().per_task(Budget::tokens(0))));
    while restored.step(Time::ZERO).is_some() {}
    assert!(restored.poll_request().is_none());
    assert_eq!(
        restored.task_state(id),
        Some(TaskState::Completed(Err(TaskError::Request {
            number: 1,
            error: RequestError::BudgetSpent {
                scope: BudgetScope::Task,
                spent: Amount::Tokens(0),
                budget: Amount::Tokens(0),
            }
        })))
    );
}
