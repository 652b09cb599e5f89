//! The book of spend a scheduler with budgets keeps: per task, per agent and for the
//! current day, and the LLM requests held until the next day's budget. Plain data
//! with no clock: the scheduler tells it which day it is.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Budget, BudgetScope, Budgets, OnSpent, Spend, Usage};
use crate::id::{AgentId, RequestKey, TaskId};

/// Seconds in a day.
pub(crate) const DAY_SECS: i64 = 24 * 60 * 60;

/// What a new LLM request meets: nothing spent (it goes), or a budget spent.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// It goes.
    Go,
    /// It fails: the `scope`'s `budget` is spent (`spend`).
    Fail(BudgetScope, Budget, Spend),
    /// It waits for the next day.
    Wait,
}

/// Spend and held requests, with the budgets they are checked against.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Book {
    pub(crate) budgets: Budgets,
    /// The spend of each task in the table, by id: an entry goes when its task leaves
    /// the table (forgotten, or evicted by retention).
    pub(crate) tasks: BTreeMap<TaskId, Spend>,
    /// Each agent's spend, by agent id.
    pub(crate) agents: Vec<Spend>,
    /// The day `today` is the spend of (see `Scheduler::budget_day`).
    pub(crate) day: i64,
    /// The spend of `day`.
    pub(crate) today: Spend,
    /// LLM requests held until the day after `held_day`, in the order they were held.
    pub(crate) held: Vec<RequestKey>,
    pub(crate) held_day: i64,
    /// During a replay, the usage a `Usage` entry gave for the next answer.
    pub(crate) announced: Option<(RequestKey, Usage)>,
}

impl Book {
    /// A book for `budgets`, nothing spent.
    pub(crate) fn new(budgets: Budgets) -> Book {
        Book {
            budgets,
            ..Book::default()
        }
    }

    /// Counts `usage` of an answer to task `task` (if it is still in the table) of
    /// `agent`, on `day`.
    pub(crate) fn charge(&mut self, task: Option<(TaskId, AgentId)>, usage: &Usage, day: i64) {
        let cost = self.budgets.prices.cost(usage);
        if let Some((id, agent)) = task {
            self.tasks.entry(id).or_default().add(usage, cost);
            let at = agent.0 as usize;
            if self.agents.len() <= at {
                self.agents.resize(at + 1, Spend::default());
            }
            self.agents[at].add(usage, cost);
        }
        if day != self.day {
            self.day = day;
            self.today = Spend::default();
        }
        self.today.add(usage, cost);
    }

    /// The spend of `day`.
    pub(crate) fn day_spend(&self, day: i64) -> Spend {
        if day == self.day {
            self.today
        } else {
            Spend::default()
        }
    }

    /// What an LLM request of task `task` of `agent` meets on `day`: the task's budget
    /// first, then the agent's, then the day's.
    pub(crate) fn verdict(&self, task: TaskId, agent: AgentId, day: i64) -> Verdict {
        let b = &self.budgets;
        let checks = [
            (BudgetScope::Task, b.task, self.tasks.get(&task).copied()),
            (
                BudgetScope::Agent,
                b.agent,
                self.agents.get(agent.0 as usize).copied(),
            ),
            (BudgetScope::Day, b.day, Some(self.day_spend(day))),
        ];
        for (scope, budget, spend) in checks {
            let (Some(budget), spend) = (budget, spend.unwrap_or_default()) else {
                continue;
            };
            if budget.spent_by(&spend) {
                if scope == BudgetScope::Day && b.on_day_spent == OnSpent::Wait {
                    return Verdict::Wait;
                }
                return Verdict::Fail(scope, budget, spend);
            }
        }
        Verdict::Go
    }

    /// Whether any budget caps anything.
    pub(crate) fn caps(&self) -> bool {
        self.budgets.task.is_some() || self.budgets.agent.is_some() || self.budgets.day.is_some()
    }

    /// The book as a snapshot keeps it: the spend of the tasks `in_table` says are in
    /// the table, and the held requests, their keys naming no index.
    pub(crate) fn record(&self, in_table: impl Fn(TaskId) -> bool) -> BudgetRecord {
        BudgetRecord {
            budgets: Some(self.budgets.clone()),
            tasks: self
                .tasks
                .iter()
                .filter(|(id, _)| in_table(**id))
                .map(|(id, spend)| (*id, *spend))
                .collect(),
            agents: self.agents.clone(),
            day: self.day,
            today: self.today,
            held: self
                .held
                .iter()
                .map(|k| RequestKey::new(k.task(), k.number(), u32::MAX))
                .collect(),
            held_day: self.held_day,
        }
    }

    /// The book a snapshot's `record` keeps (with its budgets), if it has budgets.
    pub(crate) fn from_record(record: &BudgetRecord) -> Option<Book> {
        let budgets = record.budgets.clone()?;
        Some(Book {
            budgets,
            tasks: record.tasks.iter().copied().collect(),
            agents: record.agents.clone(),
            day: record.day,
            today: record.today,
            held: record.held.clone(),
            held_day: record.held_day,
            announced: None,
        })
    }
}

/// The budgets of a snapshot and what was spent (`budgets: None`: a scheduler without
/// budgets, which counts nothing).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BudgetRecord {
    pub(crate) budgets: Option<Budgets>,
    pub(crate) tasks: Vec<(TaskId, Spend)>,
    pub(crate) agents: Vec<Spend>,
    pub(crate) day: i64,
    pub(crate) today: Spend,
    pub(crate) held: Vec<RequestKey>,
    pub(crate) held_day: i64,
}

impl BudgetRecord {
    /// Whether the snapshot has budgets (and so needs format version 6).
    pub(crate) fn is_set(&self) -> bool {
        self.budgets.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_budget_is_checked_before_the_agent_and_the_day() {
        let budgets = Budgets::new()
            .per_task(Budget::tokens(10))
            .per_agent(Budget::tokens(15))
            .per_day(Budget::tokens(20))
            .on_day_spent(OnSpent::Wait);
        let mut book = Book::new(budgets);
        let (one, two, agent) = (TaskId(1), TaskId(2), AgentId(1));
        book.charge(Some((one, agent)), &Usage::new(6, 4, "m"), 0);
        let spent = book.tasks[&one];
        assert_eq!(
            book.verdict(one, agent, 0),
            Verdict::Fail(BudgetScope::Task, Budget::tokens(10), spent)
        );
        assert_eq!(book.verdict(two, agent, 0), Verdict::Go);
        book.charge(Some((two, agent)), &Usage::new(5, 0, "m"), 0);
        assert!(matches!(
            book.verdict(two, agent, 0),
            Verdict::Fail(BudgetScope::Agent, _, _)
        ));
        book.charge(None, &Usage::new(5, 0, "m"), 0);
        assert_eq!(book.verdict(two, AgentId(2), 0), Verdict::Wait);
        // A new day: its budget is whole again.
        assert_eq!(book.verdict(two, AgentId(2), 1), Verdict::Go);
    }
}
