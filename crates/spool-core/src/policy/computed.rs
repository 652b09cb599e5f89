//! Computed priority: a score from the task's type, age, depth and retries;
//! the highest score goes first; among equal scores the one submitted first (earlier
//! submission time, then lower task id: a stable sort over tasks listed in the order
//! they were created).
//!
//! `score = base(type) + min(age_max, whole minutes waited × age_per_minute)
//!        + depth × depth_per_level − min(retry_max, (iteration − 1) × retry_per_iteration)`,
//! with these defaults (ralph 100, phase 80, spec 60, plan 40; +1 a minute up to
//! +50; +10 a level; −5 a retry down to −30).
//!
//! The score changes as time passes, but only through the age term, and that term is
//! the same non-decreasing function of age for every task. So tasks with the same
//! static part (everything but age) keep their order forever — oldest first, which is
//! also highest score first — and only the heads of those groups need comparing at a
//! pop. Push is O(log n); pop is O(g + log n) for `g` distinct static scores queued
//! (type bases × depths × retry levels: a few dozen, whatever the number of tasks).
//! Nothing is re-sorted as time passes.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

use super::{Policy, QueueEntry, TaskRef};
use crate::id::TaskId;
use crate::time::Time;

/// The terms of the score. `Default` gives the numbers above.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct ComputedConfig {
    /// Base score by task type name.
    pub bases: BTreeMap<String, i64>,
    /// Base score of a type not in `bases`.
    pub default_base: i64,
    /// Points per whole `age_unit` since submission.
    pub age_per_unit: i64,
    /// The age unit (a minute).
    pub age_unit: Duration,
    /// The most the age term adds.
    pub age_max: i64,
    /// Points per level of depth.
    pub depth_per_level: i64,
    /// Points taken per iteration after the first.
    pub retry_per_iteration: i64,
    /// The most the retry term takes.
    pub retry_max: i64,
}

impl Default for ComputedConfig {
    fn default() -> ComputedConfig {
        let bases = [("ralph", 100), ("phase", 80), ("spec", 60), ("plan", 40)];
        ComputedConfig {
            bases: bases.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            default_base: 0,
            age_per_unit: 1,
            age_unit: Duration::from_secs(60),
            age_max: 50,
            depth_per_level: 10,
            retry_per_iteration: 5,
            retry_max: 30,
        }
    }
}

impl ComputedConfig {
    /// The default terms and type bases (the same as `default()`).
    pub fn new() -> ComputedConfig {
        ComputedConfig::default()
    }

    /// Sets the base score of the task type `name`.
    #[must_use]
    pub fn base(mut self, name: impl Into<String>, base: i64) -> ComputedConfig {
        self.bases.insert(name.into(), base);
        self
    }

    /// The part of the score that does not change with time.
    pub fn static_score(&self, entry: &QueueEntry) -> i64 {
        let base = self
            .bases
            .get(entry.type_name)
            .copied()
            .unwrap_or(self.default_base);
        let depth = i64::from(entry.depth).saturating_mul(self.depth_per_level);
        let retries = i64::from(entry.iteration.saturating_sub(1));
        let penalty = retries
            .saturating_mul(self.retry_per_iteration)
            .min(self.retry_max);
        base.saturating_add(depth).saturating_sub(penalty)
    }

    /// The age term for a task submitted at `created`, at `now`.
    pub fn age_boost(&self, created: Time, now: Time) -> i64 {
        // In u64 nanoseconds (585 years): a 128-bit division per head cost more than
        // the rest of the comparison.
        let unit = u64::try_from(self.age_unit.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        let age = now.as_nanos().saturating_sub(created.as_nanos());
        let units = i64::try_from(age / unit).unwrap_or(i64::MAX);
        units.saturating_mul(self.age_per_unit).min(self.age_max)
    }

    /// The whole score at `now`.
    pub fn score(&self, entry: &QueueEntry, now: Time) -> i64 {
        self.static_score(entry)
            .saturating_add(self.age_boost(entry.created_at, now))
    }
}

/// One static score's tasks, first submitted first: `(created, task id, seq, task)`.
type Group = BinaryHeap<Reverse<(Time, TaskId, u64, TaskRef)>>;

/// The computed-priority policy; see the module documentation.
#[derive(Debug)]
pub struct ComputedPriority {
    config: ComputedConfig,
    /// By static score: the group's tasks, oldest first.
    groups: BTreeMap<i64, Group>,
    len: usize,
}

impl ComputedPriority {
    /// An empty queue with these terms.
    pub fn new(config: ComputedConfig) -> ComputedPriority {
        ComputedPriority {
            config,
            groups: BTreeMap::new(),
            len: 0,
        }
    }

    /// The terms.
    pub fn config(&self) -> &ComputedConfig {
        &self.config
    }
}

impl Policy for ComputedPriority {
    fn push(&mut self, entry: &QueueEntry) {
        let group = self.config.static_score(entry);
        self.groups.entry(group).or_default().push(Reverse((
            entry.created_at,
            entry.task.task,
            entry.seq,
            entry.task,
        )));
        self.len += 1;
    }

    fn pop(&mut self, now: Time) -> Option<TaskRef> {
        // The best head: highest score, then submitted first.
        let mut best: Option<(i64, Time, TaskId, i64)> = None;
        for (group, heap) in &self.groups {
            let Some(Reverse((created, id, _, _))) = heap.peek() else {
                continue;
            };
            let score = group.saturating_add(self.config.age_boost(*created, now));
            let better = match best {
                None => true,
                Some((s, c, i, _)) => {
                    (score, Reverse(*created), Reverse(*id)) > (s, Reverse(c), Reverse(i))
                }
            };
            if better {
                best = Some((score, *created, *id, *group));
            }
        }
        let (_, _, _, group) = best?;
        let heap = self.groups.get_mut(&group)?;
        let Reverse((_, _, _, task)) = heap.pop()?;
        if heap.is_empty() {
            self.groups.remove(&group);
        }
        self.len -= 1;
        Some(task)
    }

    fn len(&self) -> usize {
        self.len
    }

    fn name(&self) -> &'static str {
        "computed"
    }

    fn score(&self, entry: &QueueEntry, now: Time) -> Option<i64> {
        Some(self.config.score(entry, now))
    }

    fn queued(&self) -> Option<Vec<(u64, TaskRef)>> {
        let entries = self.groups.values().flat_map(|group| group.iter());
        Some(
            entries
                .map(|Reverse((_, _, seq, task))| (*seq, *task))
                .collect(),
        )
    }
}
