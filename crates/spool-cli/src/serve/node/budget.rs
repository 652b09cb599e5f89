//! A node's part in the cluster-wide request budgets that `--limit` gives: for each
//! kind with an in-flight cap, a per-minute window or a tokens-per-minute window, the
//! node checks (or sets) the
//! cluster's budget for the kind, and keeps the executors of that kind in every shard
//! it runs to its slice of the budget ([`BudgetedExecutor`]), the slices leased and
//! renewed by one [`NodeBudget`] for the whole node.
//!
//! Every node of a cluster must run under the same budgets: a node that finds other
//! live nodes refuses to start when the cluster's budget of a kind is not the one its
//! `--limit` gives; a node that finds none sets the budgets its `--limit` gives (and
//! clears those it does not), so that a cluster stopped as a whole can start again with
//! other limits. Per-second and per-hour windows (of requests or of tokens) stay per
//! shard.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use spool_cluster::budget::{BudgetOptions, BudgetedExecutor, NodeBudget};
use spool_core::{CancelSignal, Executor, Kind, OutboundRequest, Replies, Time};
use spool_postgres::Cluster;
use spool_postgres::cluster::Budget;

use crate::cli::limits::Limits;
use crate::run::{AGENT_TOOLS, WrapExecutor};
use crate::stored::{Failure, failed};

/// The window a request limit of `--limit` must have to be a cluster-wide budget.
const MINUTE: Duration = Duration::from_secs(60);

/// The node's budgets: the kinds kept to the cluster's budgets and the node's slices of
/// them. Wraps the executors of those kinds ([`WrapExecutor`]); the slices are
/// released once the node's runtimes and its `make` closure, which hold this, are gone.
#[derive(Clone, Debug)]
pub(crate) struct Budgets {
    /// The kinds with a cluster-wide budget, by their names.
    kinds: Arc<BTreeSet<String>>,
    /// The node's slices, if any kind has a budget.
    slices: Option<Arc<NodeBudget>>,
}

impl Budgets {
    /// Checks the cluster's budgets against those `limits` give (or sets them, when no
    /// other node than `node` is live: heard from within `ttl`), and starts leasing
    /// the node's slices of them, which live `ttl` unless renewed.
    ///
    /// # Errors
    /// [`Failure::Usage`] if another node is live and a kind's budget in the cluster
    /// is not the one `limits` gives; [`Failure::Failed`] if the cluster cannot be
    /// read or written.
    pub(crate) fn start(
        url: &str,
        node: &str,
        limits: &Limits,
        ttl: Duration,
    ) -> Result<Budgets, Failure> {
        let cluster =
            Cluster::connect(url).map_err(|e| failed("cannot read the cluster's budgets", e))?;
        let others: Vec<String> = cluster
            .live_nodes(ttl)
            .map_err(|e| failed("cannot read the cluster's nodes", e))?
            .into_iter()
            .filter(|other| other != node)
            .collect();
        let mut kinds = BTreeSet::new();
        for kind in budgeted_kinds(limits) {
            let name = kind.to_string();
            let mine = budget_of(limits, &kind);
            let current = cluster
                .budget(&name)
                .map_err(|e| failed(&format!("cannot read the cluster's budget of {name}"), e))?
                .unwrap_or_default();
            if current != mine {
                if !others.is_empty() {
                    return Err(Failure::Usage(format!(
                        "the nodes running now ({}) keep {name} to {} across the cluster, and \
                         this node's --limit gives {}: start every node with the same --limit \
                         for {name} (to change it, stop them all first)",
                        others.join(", "),
                        described(current),
                        described(mine),
                    )));
                }
                cluster.set_budget(&name, mine).map_err(|e| {
                    failed(&format!("cannot set the cluster's budget of {name}"), e)
                })?;
            }
            if mine != Budget::new() {
                tracing::info!(
                    target: "spool::serve",
                    "spool serve: {name} is kept to {} across the cluster",
                    described(mine)
                );
                kinds.insert(name);
            }
        }
        warn_per_shard(limits);
        let slices = if kinds.is_empty() {
            None
        } else {
            let options = BudgetOptions::new().ttl(ttl);
            let slices = NodeBudget::start(url, node, options)
                .map_err(|e| failed("cannot start leasing the cluster's budgets", e))?;
            Some(Arc::new(slices))
        };
        Ok(Budgets {
            kinds: Arc::new(kinds),
            slices,
        })
    }
}

/// The kinds whose cluster-wide budget a node checks: the built-in agent's (the LLM and
/// its tools) and any other `limits` names, in order.
fn budgeted_kinds(limits: &Limits) -> BTreeSet<Kind> {
    let mut kinds: BTreeSet<Kind> = AGENT_TOOLS.into_iter().map(Kind::tool).collect();
    kinds.insert(Kind::Llm);
    kinds.extend(limits.requests.kinds.keys().cloned());
    kinds
}

/// The cluster-wide budget `limits` give `kind`: its in-flight cap, and its request
/// and token windows if they are per minute.
fn budget_of(limits: &Limits, kind: &Kind) -> Budget {
    let Some(limit) = limits.requests.kinds.get(kind) else {
        return Budget::new();
    };
    let mut budget = Budget::new();
    if let Some(max) = limit.max_in_flight {
        budget = budget.in_flight(max);
    }
    if let Some((max, MINUTE)) = limit.window {
        budget = budget.per_minute(max);
    }
    if let Some((max, MINUTE)) = limit.tokens {
        budget = budget.tokens_per_minute(max);
    }
    budget
}

/// A budget in words: `2 in flight and 60 a minute and 90000 tokens a minute`, `no
/// limit`.
fn described(budget: Budget) -> String {
    let parts: Vec<String> = [
        budget.in_flight.map(|max| format!("{max} in flight")),
        budget.per_minute.map(|max| format!("{max} a minute")),
        budget
            .tokens_per_minute
            .map(|max| format!("{max} tokens a minute")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        "no limit".to_owned()
    } else {
        parts.join(" and ")
    }
}

/// Says which request and token windows stay per shard: those per second or per hour
/// (a cluster-wide budget counts per minute).
fn warn_per_shard(limits: &Limits) {
    for (kind, limit) in &limits.requests.kinds {
        if let Some((max, per)) = limit.window
            && per != MINUTE
        {
            tracing::warn!(
                target: "spool::serve",
                "spool serve: --limit {kind}={max}/{} holds per shard, not across the \
                 cluster: a cluster-wide budget counts per minute (give N/min)",
                unit(per)
            );
        }
        if let Some((max, per)) = limit.tokens
            && per != MINUTE
        {
            tracing::warn!(
                target: "spool::serve",
                "spool serve: --limit {kind}={max}tok/{} holds per shard, not across the \
                 cluster: a cluster-wide budget counts per minute (give Ntok/min)",
                unit(per)
            );
        }
    }
}

/// The unit `--limit` gives a window other than a minute in: `s` or `h`.
fn unit(per: Duration) -> &'static str {
    if per == Duration::from_secs(1) {
        "s"
    } else {
        "h"
    }
}

impl WrapExecutor for Budgets {
    type Wrapped<E: Executor> = Kept<E>;

    fn wrap<E: Executor>(&self, kind: &Kind, executor: E) -> Kept<E> {
        match &self.slices {
            Some(slices) if self.kinds.contains(&kind.to_string()) => {
                Kept::Budgeted(BudgetedExecutor::new(executor, slices))
            }
            _ => Kept::Free(executor),
        }
    }
}

/// An executor of the node's runtimes: kept to the node's slice of its kind's budget,
/// or free when the kind has none.
#[derive(Debug)]
pub(crate) enum Kept<E: Executor> {
    /// The kind has no cluster-wide budget.
    Free(E),
    /// The kind has one.
    Budgeted(BudgetedExecutor<E>),
}

impl<E: Executor> Executor for Kept<E> {
    fn execute(&mut self, request: OutboundRequest, replies: &mut Replies<'_>) {
        match self {
            Kept::Free(executor) => executor.execute(request, replies),
            Kept::Budgeted(executor) => executor.execute(request, replies),
        }
    }

    fn cancel(&mut self, signal: CancelSignal, replies: &mut Replies<'_>) {
        match self {
            Kept::Free(executor) => executor.cancel(signal, replies),
            Kept::Budgeted(executor) => executor.cancel(signal, replies),
        }
    }

    fn poll(&mut self, now: Time, replies: &mut Replies<'_>) -> Option<Time> {
        match self {
            Kept::Free(executor) => executor.poll(now, replies),
            Kept::Budgeted(executor) => executor.poll(now, replies),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::limits::LimitArgs;

    fn limits(specs: &[&str]) -> Limits {
        LimitArgs {
            limits: specs
                .iter()
                .map(|spec| spec.parse().expect("a limit"))
                .collect(),
            ..LimitArgs::default()
        }
        .limits()
        .expect("limits")
    }

    #[test]
    fn a_budget_is_the_in_flight_cap_and_the_per_minute_window() {
        let given = limits(&[
            "llm=2,60/min,9000tok/min",
            "tool:search=5/s,100tok/s",
            "tool:calc=3",
            "tool:fetch=500tok/h",
            "tool:read_file=4000tok/min",
        ]);
        assert_eq!(
            budget_of(&given, &Kind::Llm),
            Budget::new()
                .in_flight(2)
                .per_minute(60)
                .tokens_per_minute(9000)
        );
        assert_eq!(budget_of(&given, &Kind::tool("fetch")), Budget::new());
        assert_eq!(
            budget_of(&given, &Kind::tool("read_file")),
            Budget::new().tokens_per_minute(4000)
        );
        assert_eq!(budget_of(&given, &Kind::tool("search")), Budget::new());
        assert_eq!(
            budget_of(&given, &Kind::tool("calc")),
            Budget::new().in_flight(3)
        );
        assert_eq!(budget_of(&given, &Kind::tool("write_file")), Budget::new());
        let kinds: Vec<String> = budgeted_kinds(&limits(&["tool:fetch=1"]))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            kinds,
            [
                "llm",
                "tool:calc",
                "tool:fetch",
                "tool:read_file",
                "tool:search"
            ]
        );
    }

    #[test]
    fn a_budget_is_said_in_words() {
        assert_eq!(described(Budget::new()), "no limit");
        assert_eq!(described(Budget::new().in_flight(2)), "2 in flight");
        assert_eq!(described(Budget::new().per_minute(60)), "60 a minute");
        assert_eq!(
            described(Budget::new().in_flight(2).per_minute(60)),
            "2 in flight and 60 a minute"
        );
        assert_eq!(
            described(Budget::new().per_minute(60).tokens_per_minute(90_000)),
            "60 a minute and 90000 tokens a minute"
        );
    }
}
