//! The budget options `spool serve` and `spool run` share: `--budget SCOPE=AMOUNT[,wait]`
//! (repeatable, a scope once) and `--prices FILE`, parsed into the core's
//! [`Budgets`].
//!
//! A prices file is JSON: each model's US dollars per million tokens in and out,
//! `{"gpt-4o": {"input": 2.5, "output": 10}, "gpt-4o-mini": {"input": 0.15, "output": 0.6}}`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Deserialize;
use spool_core::{Amount, BudgetScope, BudgetSpec, Budgets, ModelPrice, OnSpent, Prices};

/// The budget options of `spool serve` and `spool run`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Args)]
pub(crate) struct BudgetArgs {
    /// Cap LLM spend: SCOPE is task, agent or day (UTC); AMOUNT
    /// is tokens (50000-tokens, 50k-tokens, 2m-tokens) or US
    /// dollars ($20, 20usd); over it, a task's next LLM request
    /// fails, or with ,wait (day only) waits for the next day;
    /// e.g. --budget task=50k-tokens --budget day=$20,wait
    /// (repeatable, a scope once)
    #[arg(
        long = "budget",
        value_name = "SCOPE=AMOUNT",
        value_parser = parse_budget,
        verbatim_doc_comment,
        display_order = 104,
    )]
    pub(crate) budgets: Vec<BudgetSpec>,
    /// Prices per model for cost budgets, a JSON file of US
    /// dollars per million tokens:
    /// {"gpt-4o": {"input": 2.5, "output": 10}}; a model
    /// without a price costs nothing (its tokens still count)
    #[arg(long, value_name = "FILE", verbatim_doc_comment, display_order = 105)]
    pub(crate) prices: Option<PathBuf>,
}

/// Parses `SCOPE=AMOUNT[,wait]` (clap's value parser for `--budget`).
fn parse_budget(text: &str) -> Result<BudgetSpec, String> {
    text.parse::<BudgetSpec>().map_err(|e| e.to_string())
}

/// One model's price as a prices file writes it: dollars per million tokens.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceEntry {
    input: f64,
    output: f64,
}

impl BudgetArgs {
    /// The budgets these options give: `None` without `--budget` and `--prices` (no
    /// spend is counted then).
    ///
    /// # Errors
    /// A scope given twice, or a prices file that cannot be read or is not prices,
    /// in words.
    pub(crate) fn budgets(&self) -> Result<Option<Budgets>, String> {
        if self.budgets.is_empty() && self.prices.is_none() {
            return Ok(None);
        }
        let mut budgets = Budgets::new();
        let mut seen: Vec<BudgetScope> = Vec::new();
        for spec in &self.budgets {
            if seen.contains(&spec.scope) {
                return Err(format!(
                    "--budget {}= is given twice; give each scope once",
                    spec.scope
                ));
            }
            seen.push(spec.scope);
            budgets = budgets.with(*spec);
        }
        if let Some(path) = &self.prices {
            budgets = budgets.prices(read_prices(path)?);
        }
        Ok(Some(budgets))
    }
}

/// `budgets` as the options write them, for the line `spool run` and `spool serve`
/// print at start: `; budgets --budget task=50000-tokens --budget day=$20,wait, 2
/// models priced` (empty for none).
pub(crate) fn described(budgets: Option<&Budgets>) -> String {
    let Some(budgets) = budgets else {
        return String::new();
    };
    let mut words = Vec::new();
    let scopes = [
        (BudgetScope::Task, budgets.task),
        (BudgetScope::Agent, budgets.agent),
        (BudgetScope::Day, budgets.day),
    ];
    for (scope, budget) in scopes {
        let Some(budget) = budget else {
            continue;
        };
        let amount = match budget.limit {
            Amount::Tokens(n) => format!("{n}-tokens"),
            Amount::MicroUsd(n) => {
                let text = format!("{}.{:06}", n / 1_000_000, n % 1_000_000);
                let text = text.trim_end_matches('0');
                format!("${}", text.strip_suffix('.').unwrap_or(text))
            }
        };
        let wait = if scope == BudgetScope::Day && budgets.on_day_spent == OnSpent::Wait {
            ",wait"
        } else {
            ""
        };
        words.push(format!("--budget {scope}={amount}{wait}"));
    }
    let priced = budgets.prices.models().count();
    words.push(format!(
        "{priced} model{} priced",
        if priced == 1 { "" } else { "s" }
    ));
    format!("; budgets {}", words.join(" "))
}

/// The prices in the file at `path`.
fn read_prices(path: &Path) -> Result<Prices, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--prices {}: cannot read it: {e}", path.display()))?;
    parse_prices(&text).map_err(|e| format!("--prices {}: {e}", path.display()))
}

/// Prices from a prices file's text.
fn parse_prices(text: &str) -> Result<Prices, String> {
    let entries: BTreeMap<String, PriceEntry> = serde_json::from_str(text).map_err(|e| {
        format!(
            "not prices ({e}); write {{\"MODEL\": {{\"input\": USD_PER_MILLION, \"output\": USD_PER_MILLION}}}}"
        )
    })?;
    let mut prices = Prices::new();
    for (model, entry) in entries {
        let fits = |usd: f64| usd.is_finite() && usd >= 0.0;
        if !fits(entry.input) || !fits(entry.output) {
            return Err(format!("the price of `{model}` is negative"));
        }
        prices = prices.model(
            model,
            ModelPrice::usd_per_million(entry.input, entry.output),
        );
    }
    Ok(prices)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use spool_core::Budget;

    use super::*;

    #[test]
    fn budgets_and_prices_make_the_cores_budgets() {
        let args = BudgetArgs {
            budgets: vec![
                "task=50k-tokens".parse().unwrap(),
                "day=$20,wait".parse().unwrap(),
            ],
            prices: None,
        };
        let budgets = args.budgets().unwrap().unwrap();
        assert_eq!(budgets.task, Some(Budget::tokens(50_000)));
        assert_eq!(budgets.day, Some(Budget::micro_usd(20_000_000)));
        assert_eq!(budgets.on_day_spent, OnSpent::Wait);
        assert_eq!(BudgetArgs::default().budgets(), Ok(None));
        let twice = BudgetArgs {
            budgets: vec!["day=$1".parse().unwrap(), "day=$2".parse().unwrap()],
            prices: None,
        };
        assert_eq!(
            twice.budgets(),
            Err("--budget day= is given twice; give each scope once".to_owned())
        );
    }

    #[test]
    fn budgets_are_described_as_the_options_write_them() {
        let args = BudgetArgs {
            budgets: vec![
                "task=50k-tokens".parse().unwrap(),
                "day=$20.5,wait".parse().unwrap(),
            ],
            prices: None,
        };
        let budgets = args.budgets().unwrap();
        assert_eq!(
            described(budgets.as_ref()),
            "; budgets --budget task=50000-tokens --budget day=$20.5,wait 0 models priced"
        );
        assert_eq!(described(None), "");
    }

    #[test]
    fn a_prices_file_gives_dollars_per_million_tokens() {
        let prices = parse_prices(r#"{"gpt-4o": {"input": 2.5, "output": 10}}"#).unwrap();
        assert_eq!(
            prices.price_of("gpt-4o-2024-08-06"),
            Some(ModelPrice::usd_per_million(2.5, 10.0))
        );
        assert_eq!(
            parse_prices(r#"{"m": {"input": -1, "output": 1}}"#),
            Err("the price of `m` is negative".to_owned())
        );
        assert!(
            parse_prices(r#"{"m": {"in": 1}}"#)
                .unwrap_err()
                .starts_with("not prices (unknown field `in`")
        );
    }
}
