//! What the benchmarks share: the agent workload of the durable and cluster benchmarks,
//! a database of one run on a throwaway PostgreSQL, and reading the environment and
//! taking medians. Each benchmark is a crate of its own (`harness = false`) that
//! includes this with `mod common;` and uses part of it.

// Each benchmark uses part of this.
#![allow(dead_code)]

pub(crate) mod agent;
pub(crate) mod database;

use std::str::FromStr;

/// The median of `values` (the upper one of an even count).
pub(crate) fn median<T: Clone + PartialOrd>(values: &[T]) -> T {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    sorted[sorted.len() / 2].clone()
}

/// The one of `items` whose `key` is the median of theirs (the upper one of an even
/// count).
pub(crate) fn median_by<T, K: Clone + PartialOrd>(items: &[T], key: impl Fn(&T) -> K) -> &T {
    let middle = median(&items.iter().map(&key).collect::<Vec<_>>());
    items
        .iter()
        .find(|item| key(item) == middle)
        .expect("the median is one of them")
}

/// `name` from the environment as a comma-separated list, or `default`.
pub(crate) fn env_list<T>(name: &str, default: &[T]) -> Vec<T>
where
    T: FromStr + Clone,
    T::Err: std::fmt::Debug,
{
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => text
            .split(',')
            .map(|item| {
                item.trim()
                    .replace('_', "")
                    .parse()
                    .unwrap_or_else(|e| panic!("{name}: cannot read {item:?}: {e:?}"))
            })
            .collect(),
        _ => default.to_vec(),
    }
}
