//! Token and cost budgets: what a provider reports an LLM answer used ([`Usage`]), what
//! that costs by the prices per model ([`Prices`]), and the caps on spend per task, per
//! agent and per day ([`Budgets`]).
//!
//! Money is counted in whole micro-dollars (millionths of a US dollar), never in
//! floating point: the same usage gives the same spend on every machine. Dollars
//! written as decimals are turned into micro-dollars once, when a budget or a price is
//! made.

mod book;

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub(crate) use book::{Book, BudgetRecord, DAY_SECS, Verdict};

/// What one LLM answer used, as its provider reported it (the OpenAI `usage` object
/// and the answer's `model`). Carried on the [`Response`](crate::Response) and
/// journaled with it, so a replay counts the same spend.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Usage {
    /// Tokens of the prompt (`prompt_tokens`).
    pub input_tokens: u64,
    /// Tokens of the answer (`completion_tokens`).
    pub output_tokens: u64,
    /// The model the request asked for, whose prices cost the usage (the LLM
    /// executor takes the payload's `model`, else its own configured model).
    pub model: String,
}

impl Usage {
    /// Usage of `input_tokens` in and `output_tokens` out by `model`.
    pub fn new(input_tokens: u64, output_tokens: u64, model: impl Into<String>) -> Usage {
        Usage {
            input_tokens,
            output_tokens,
            model: model.into(),
        }
    }

    /// Tokens in and out.
    pub fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// The price of a model, in micro-dollars per million tokens in and out.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ModelPrice {
    /// Micro-dollars per million input (prompt) tokens.
    pub input_per_million: u64,
    /// Micro-dollars per million output (completion) tokens.
    pub output_per_million: u64,
}

impl ModelPrice {
    /// A price in US dollars per million tokens in and out (`2.5, 10.0` for $2.50 and
    /// $10 per million), rounded to the micro-dollar; a negative or non-finite price is
    /// taken as 0.
    pub fn usd_per_million(input: f64, output: f64) -> ModelPrice {
        ModelPrice {
            input_per_million: micro_usd(input),
            output_per_million: micro_usd(output),
        }
    }

    /// What `usage` costs at this price, in micro-dollars, rounded to the nearest.
    pub fn cost(&self, usage: &Usage) -> u64 {
        let nano = u128::from(usage.input_tokens) * u128::from(self.input_per_million)
            + u128::from(usage.output_tokens) * u128::from(self.output_per_million);
        u64::try_from((nano + 500_000) / 1_000_000).unwrap_or(u64::MAX)
    }
}

/// Prices by model name. A model is priced by its own name, or else by the longest
/// name priced that it starts with followed by `-` (`gpt-4o` prices
/// `gpt-4o-2024-08-06`); a model with no price costs nothing: its tokens count against
/// token budgets, not against cost budgets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prices {
    models: BTreeMap<String, ModelPrice>,
}

impl Prices {
    /// No prices.
    pub fn new() -> Prices {
        Prices::default()
    }

    /// Sets the price of `model`.
    #[must_use]
    pub fn model(mut self, model: impl Into<String>, price: ModelPrice) -> Prices {
        self.models.insert(model.into(), price);
        self
    }

    /// The price `model` is charged at, if it has one.
    pub fn price_of(&self, model: &str) -> Option<ModelPrice> {
        if let Some(price) = self.models.get(model) {
            return Some(*price);
        }
        self.models
            .range::<str, _>((Bound::Unbounded, Bound::Included(model)))
            .rev()
            .find(|(name, _)| {
                model
                    .strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.starts_with('-'))
            })
            .map(|(_, price)| *price)
    }

    /// What `usage` costs, in micro-dollars (0 for a model with no price).
    pub fn cost(&self, usage: &Usage) -> u64 {
        self.price_of(&usage.model).map_or(0, |p| p.cost(usage))
    }

    /// The models priced, by name.
    pub fn models(&self) -> impl Iterator<Item = (&str, &ModelPrice)> {
        self.models
            .iter()
            .map(|(name, price)| (name.as_str(), price))
    }

    /// Whether no model has a price.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }
}

/// An amount of spend: tokens, or micro-dollars.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Amount {
    /// Tokens in and out.
    Tokens(u64),
    /// Millionths of a US dollar.
    MicroUsd(u64),
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Amount::Tokens(n) => write!(f, "{n} tokens"),
            Amount::MicroUsd(n) => write!(f, "${}.{:06}", n / 1_000_000, n % 1_000_000),
        }
    }
}

/// What was spent: tokens in and out, and their cost.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Spend {
    /// Input (prompt) tokens.
    pub input_tokens: u64,
    /// Output (completion) tokens.
    pub output_tokens: u64,
    /// Their cost in micro-dollars, by the prices (unpriced models add nothing).
    pub micro_usd: u64,
    /// LLM answers counted.
    pub answers: u64,
}

impl Spend {
    /// Tokens in and out.
    pub fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// Adds `usage`, costing `micro_usd`.
    pub(crate) fn add(&mut self, usage: &Usage, micro_usd: u64) {
        self.input_tokens = self.input_tokens.saturating_add(usage.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(usage.output_tokens);
        self.micro_usd = self.micro_usd.saturating_add(micro_usd);
        self.answers = self.answers.saturating_add(1);
    }

    /// The spend measured as `budget` measures it.
    pub fn measured(&self, budget: Budget) -> Amount {
        match budget.limit {
            Amount::Tokens(_) => Amount::Tokens(self.tokens()),
            Amount::MicroUsd(_) => Amount::MicroUsd(self.micro_usd),
        }
    }
}

/// One budget: a cap on tokens or on cost.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// The cap.
    pub limit: Amount,
}

impl Budget {
    /// At most `tokens` tokens in and out.
    pub fn tokens(tokens: u64) -> Budget {
        Budget {
            limit: Amount::Tokens(tokens),
        }
    }

    /// At most `usd` US dollars, rounded to the micro-dollar (a negative or non-finite
    /// amount is 0).
    pub fn cost_usd(usd: f64) -> Budget {
        Budget::micro_usd(micro_usd(usd))
    }

    /// At most `micro_usd` millionths of a US dollar.
    pub fn micro_usd(micro_usd: u64) -> Budget {
        Budget {
            limit: Amount::MicroUsd(micro_usd),
        }
    }

    /// Whether `spend` has reached the cap (spent ≥ budget).
    pub fn spent_by(&self, spend: &Spend) -> bool {
        spend.measured(*self) >= self.limit
    }
}

/// What a budget caps: one task's spend, one agent's, or the spend of a day.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum BudgetScope {
    /// The task's own spend, over its life.
    Task,
    /// The spend of every task of the task's agent, over the scheduler's life.
    Agent,
    /// The spend of every task in one UTC calendar day.
    Day,
}

impl fmt::Display for BudgetScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BudgetScope::Task => "task",
            BudgetScope::Agent => "agent",
            BudgetScope::Day => "day",
        })
    }
}

/// What a task's next LLM request does once the day's budget is spent.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum OnSpent {
    /// It fails at once with
    /// [`RequestError::BudgetSpent`](crate::RequestError::BudgetSpent).
    #[default]
    Fail,
    /// It waits, held, until the next day's budget, then goes.
    Wait,
}

/// The budgets of a scheduler: caps on LLM spend per task, per agent and per day, the
/// prices that turn tokens into cost, and what a request does when the day's budget is
/// spent.
///
/// A budget is checked when a task makes an LLM request: if its task's, its agent's or
/// the day's spend has reached its budget, the request does not go. It fails with
/// [`RequestError::BudgetSpent`](crate::RequestError::BudgetSpent), which the task
/// takes as the answer — or, for the day's budget with [`OnSpent::Wait`], it waits
/// for the next day. The request in flight when a budget is crossed still finishes
/// (its spend is counted): budgets stop the next request, not the current one.
///
/// Spend is counted from the [`Usage`] on LLM answers whenever a scheduler has
/// budgets, even with no cap set (`Budgets::new()` counts and caps nothing).
///
/// # Example
/// ```
/// use spool_core::{Budget, Budgets, ModelPrice, OnSpent, Prices};
///
/// let budgets = Budgets::new()
///     .per_task(Budget::tokens(50_000))
///     .per_agent(Budget::cost_usd(5.0))
///     .per_day(Budget::cost_usd(20.0))
///     .on_day_spent(OnSpent::Wait)
///     .prices(Prices::new().model("gpt-4o", ModelPrice::usd_per_million(2.5, 10.0)));
/// assert_eq!(budgets.day, Some(Budget::micro_usd(20_000_000)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Budgets {
    /// The cap on each task's spend.
    pub task: Option<Budget>,
    /// The cap on each agent's spend.
    pub agent: Option<Budget>,
    /// The cap on each day's spend, all agents together.
    pub day: Option<Budget>,
    /// What a request does when the day's budget is spent (task and agent budgets
    /// never renew, so a request over them always fails).
    pub on_day_spent: OnSpent,
    /// The prices by model.
    pub prices: Prices,
}

impl Budgets {
    /// No caps, no prices: spend is counted (tokens only).
    pub fn new() -> Budgets {
        Budgets::default()
    }

    /// Caps each task's spend.
    #[must_use]
    pub fn per_task(mut self, budget: Budget) -> Budgets {
        self.task = Some(budget);
        self
    }

    /// Caps each agent's spend.
    #[must_use]
    pub fn per_agent(mut self, budget: Budget) -> Budgets {
        self.agent = Some(budget);
        self
    }

    /// Caps each UTC day's spend.
    #[must_use]
    pub fn per_day(mut self, budget: Budget) -> Budgets {
        self.day = Some(budget);
        self
    }

    /// Sets what a request does once the day's budget is spent.
    #[must_use]
    pub fn on_day_spent(mut self, on_spent: OnSpent) -> Budgets {
        self.on_day_spent = on_spent;
        self
    }

    /// Sets the prices.
    #[must_use]
    pub fn prices(mut self, prices: Prices) -> Budgets {
        self.prices = prices;
        self
    }

    /// Sets one budget from its text, as `spool run --budget` takes it (see
    /// [`BudgetSpec`]).
    #[must_use]
    pub fn with(mut self, spec: BudgetSpec) -> Budgets {
        match spec.scope {
            BudgetScope::Task => self.task = Some(spec.budget),
            BudgetScope::Agent => self.agent = Some(spec.budget),
            BudgetScope::Day => {
                self.day = Some(spec.budget);
                self.on_day_spent = spec.on_spent;
            }
        }
        self
    }
}

/// What a scheduler with budgets has counted: each agent's spend, the current day's,
/// and how many LLM requests wait for the next day's budget
/// ([`Scheduler::spend`](crate::Scheduler::spend)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpendReport {
    /// Each agent's spend, by name, in agent order (agents that spent nothing
    /// included).
    pub agents: Vec<(String, Spend)>,
    /// The current day: its UTC date when the scheduler knows the wall clock, else
    /// `None` (days are then counted from the scheduler's time zero).
    pub date: Option<jiff::civil::Date>,
    /// The current day's spend.
    pub today: Spend,
    /// LLM requests held until the next day's budget.
    pub held: usize,
    /// When the held requests go, in the scheduler's time (`None` if none is held).
    pub held_until: Option<crate::time::Time>,
}

/// One budget as text: `SCOPE=AMOUNT[,wait]`, where `SCOPE` is `task`, `agent` or
/// `day`, and `AMOUNT` is tokens (`50000-tokens`, `50k-tokens`, `2m-tokens`) or US
/// dollars (`$20`, `20usd`, `0.5usd`); `,wait` (day only) has requests wait for the
/// next day instead of failing, `,fail` is the default.
///
/// # Example
/// ```
/// use spool_core::{Budget, BudgetScope, BudgetSpec, OnSpent};
///
/// let spec: BudgetSpec = "task=50k-tokens".parse().unwrap();
/// assert_eq!((spec.scope, spec.budget), (BudgetScope::Task, Budget::tokens(50_000)));
/// let spec: BudgetSpec = "day=$20,wait".parse().unwrap();
/// assert_eq!(spec.budget, Budget::micro_usd(20_000_000));
/// assert_eq!(spec.on_spent, OnSpent::Wait);
/// assert_eq!(
///     "agent=5usd,wait".parse::<BudgetSpec>().unwrap_err().to_string(),
///     "`agent=5usd,wait`: only the day's budget can wait (a task's or an agent's never renews)"
/// );
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BudgetSpec {
    /// What it caps.
    pub scope: BudgetScope,
    /// The cap.
    pub budget: Budget,
    /// What a request over it does.
    pub on_spent: OnSpent,
}

/// Why a budget's text is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{text}`: {problem}")]
pub struct BudgetSpecError {
    text: String,
    problem: String,
}

impl FromStr for BudgetSpec {
    type Err = BudgetSpecError;

    fn from_str(text: &str) -> Result<BudgetSpec, BudgetSpecError> {
        let error = |problem: &str| BudgetSpecError {
            text: text.to_owned(),
            problem: problem.to_owned(),
        };
        let (scope, rest) = text
            .split_once('=')
            .ok_or_else(|| error("expected SCOPE=AMOUNT, like task=50k-tokens or day=$20"))?;
        let scope = match scope.trim() {
            "task" => BudgetScope::Task,
            "agent" => BudgetScope::Agent,
            "day" => BudgetScope::Day,
            _ => return Err(error("the scope is task, agent or day")),
        };
        let (amount, on_spent) = match rest.split_once(',') {
            None => (rest, OnSpent::Fail),
            Some((amount, "fail")) => (amount, OnSpent::Fail),
            Some((amount, "wait")) => (amount, OnSpent::Wait),
            Some(_) => return Err(error("after the amount comes `,wait` or `,fail`")),
        };
        if on_spent == OnSpent::Wait && scope != BudgetScope::Day {
            return Err(error(
                "only the day's budget can wait (a task's or an agent's never renews)",
            ));
        }
        let budget = parse_amount(amount.trim()).ok_or_else(|| {
            error("the amount is tokens (50000-tokens, 50k-tokens, 2m-tokens) or dollars ($20, 20usd)")
        })?;
        Ok(BudgetSpec {
            scope,
            budget,
            on_spent,
        })
    }
}

/// `50k-tokens`, `$20`, `0.5usd`: a budget, if the text is one.
fn parse_amount(text: &str) -> Option<Budget> {
    if let Some(count) = text.strip_suffix("-tokens") {
        let (digits, scale) = match count.strip_suffix(['k', 'K']) {
            Some(digits) => (digits, 1_000),
            None => match count.strip_suffix(['m', 'M']) {
                Some(digits) => (digits, 1_000_000),
                None => (count, 1),
            },
        };
        let n: u64 = digits.parse().ok()?;
        return n.checked_mul(scale).map(Budget::tokens);
    }
    let dollars = text
        .strip_prefix('$')
        .or_else(|| text.strip_suffix("usd"))?;
    let usd: f64 = dollars.parse().ok()?;
    (usd.is_finite() && usd >= 0.0).then(|| Budget::cost_usd(usd))
}

/// US dollars as whole micro-dollars, rounded; a negative or non-finite amount is 0.
fn micro_usd(usd: f64) -> u64 {
    if usd.is_finite() && usd > 0.0 {
        // `as` saturates at u64::MAX for amounts too large to count.
        (usd * 1_000_000.0).round() as u64
    } else {
        0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_model_is_priced_by_its_name_or_the_longest_name_it_extends() {
        let prices = Prices::new()
            .model("gpt-4o", ModelPrice::usd_per_million(2.5, 10.0))
            .model("gpt-4o-mini", ModelPrice::usd_per_million(0.15, 0.6));
        let usage = |model: &str| Usage::new(1_000, 500, model);
        // 1000 × $2.50/M + 500 × $10/M = $0.0025 + $0.005.
        assert_eq!(prices.cost(&usage("gpt-4o")), 7_500);
        assert_eq!(prices.cost(&usage("gpt-4o-2024-08-06")), 7_500);
        // 1000 × $0.15/M + 500 × $0.60/M = $0.00015 + $0.0003.
        assert_eq!(prices.cost(&usage("gpt-4o-mini-2024-07-18")), 450);
        assert_eq!(prices.cost(&usage("gpt-4omni")), 0);
        assert_eq!(prices.cost(&usage("llama3")), 0);
    }

    #[test]
    fn amounts_read_and_print_as_people_write_them() {
        let parse = |text: &str| text.parse::<BudgetSpec>().map(|s| s.budget);
        assert_eq!(parse("task=1200-tokens"), Ok(Budget::tokens(1_200)));
        assert_eq!(parse("agent=2M-tokens"), Ok(Budget::tokens(2_000_000)));
        assert_eq!(parse("day=0.5usd"), Ok(Budget::micro_usd(500_000)));
        assert_eq!(Amount::MicroUsd(20_012_345).to_string(), "$20.012345");
        assert_eq!(Amount::Tokens(7).to_string(), "7 tokens");
        assert_eq!(
            parse("week=$1").unwrap_err().to_string(),
            "`week=$1`: the scope is task, agent or day"
        );
        assert_eq!(
            parse("day=20 dollars").unwrap_err().to_string(),
            "`day=20 dollars`: the amount is tokens (50000-tokens, 50k-tokens, 2m-tokens) or dollars ($20, 20usd)"
        );
        assert_eq!(
            parse("day=$-1").unwrap_err().to_string(),
            "`day=$-1`: the amount is tokens (50000-tokens, 50k-tokens, 2m-tokens) or dollars ($20, 20usd)"
        );
    }

    #[test]
    fn a_budget_is_spent_once_spend_reaches_it() {
        let mut spend = Spend::default();
        spend.add(&Usage::new(60, 39, "m"), 5);
        assert!(!Budget::tokens(100).spent_by(&spend));
        spend.add(&Usage::new(1, 0, "m"), 0);
        assert!(Budget::tokens(100).spent_by(&spend));
        assert!(Budget::micro_usd(5).spent_by(&spend));
        assert!(!Budget::micro_usd(6).spent_by(&spend));
    }
}
