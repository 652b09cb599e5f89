//! A run's figures ([`RunStats`]), taken the same way from the recorded run and from a
//! what-if run: from the trace, as it is produced, through each task's
//! [`Timeline`], and from the scheduler's [`Stats`](spool_core::Stats).

use std::collections::BTreeMap;
use std::time::Duration;

use spool_core::{Cause, Kind, Phase, Scheduler, TaskId, Time, Timeline};

/// A run's figures, side by side comparable between a recorded run and a what-if run.
///
/// A task's **wait** is the time the scheduler's rules held it back: waiting for a
/// slot to run (`queued`), for the tasks it depends on (`blocked`), and with a request
/// held at its kind's gate or backing off after a 429 (`rate_limited`), as its
/// [`Timeline`]'s [`Totals`](spool_core::Totals) count them. The time its requests
/// spent with executors, its timers, its children and the time it was ready or being
/// polled are not waits. A task still live at the end waits until the end.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunStats {
    /// The run-queue policy's name (`fifo`, `priority`, `fair-share`, ...).
    pub policy: String,
    /// Tasks the run had: submitted, and spawned by others.
    pub tasks: u64,
    /// Tasks that completed with a value.
    pub completed: u64,
    /// Tasks that completed with an error.
    pub failed: u64,
    /// Tasks that were canceled.
    pub canceled: u64,
    /// From the first task's arrival to the last task's end (zero if none ended).
    pub makespan: Duration,
    /// Every task's wait.
    pub waits: Waits,
    /// The waits of each agent's tasks, by agent name.
    pub agents: BTreeMap<String, Waits>,
    /// Requests that went out to executors (a request sent again counts again).
    pub requests: u64,
    /// Answers that were a 429 (`RequestError::RateLimited`).
    pub rate_limited: u64,
    /// The most requests in flight at once (sent and not answered), as
    /// [`Stats::peak_in_flight`](spool_core::Stats::peak_in_flight) counts them.
    pub peak_in_flight: u64,
    /// Requests the recorded run never sent (none in the recorded run's figures).
    pub unmatched: Vec<UnmatchedRequest>,
}

/// The distribution of some tasks' waits: nearest-rank percentiles (the `p`th is the
/// smallest wait that at least `p`% of the tasks do not exceed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waits {
    /// How many tasks.
    pub tasks: usize,
    /// The median wait.
    pub p50: Duration,
    /// The 95th percentile.
    pub p95: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Waits {
    /// The distribution of `waits` (in any order).
    pub fn of(mut waits: Vec<Duration>) -> Waits {
        waits.sort_unstable();
        let rank = |p: usize| {
            let at = (p * waits.len()).div_ceil(100).max(1) - 1;
            waits.get(at).copied().unwrap_or_default()
        };
        Waits {
            tasks: waits.len(),
            p50: rank(50),
            p95: rank(95),
            max: waits.last().copied().unwrap_or_default(),
        }
    }
}

/// A request of a what-if run that the recorded run never sent.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnmatchedRequest {
    /// Its task, by its id in the what-if run.
    pub task: TaskId,
    /// Its number within the task.
    pub number: u32,
    /// Its kind.
    pub kind: Kind,
}

/// Counts a driver keeps of what it sent and what it was answered.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Counts {
    /// Requests sent.
    pub(super) requests: u64,
    /// 429 answers.
    pub(super) rate_limited: u64,
}

/// Follows a run's trace: each task's timeline from its first event to its end, and
/// its wait once it has ended.
#[derive(Debug, Default)]
pub(super) struct Observer {
    /// Live tasks: their agent and timeline.
    live: BTreeMap<TaskId, (String, Timeline)>,
    /// The waits of ended tasks, by agent.
    waits: BTreeMap<String, Vec<Duration>>,
    /// Tasks seen.
    tasks: u64,
    /// The first task's arrival.
    first: Option<Time>,
    /// The last task's end.
    last_end: Option<Time>,
}

impl Observer {
    /// Takes the trace events `scheduler` produced since the last call; returns the
    /// tasks spawned among them, as (child, parent), in order.
    pub(super) fn take(&mut self, scheduler: &mut Scheduler) -> Vec<(TaskId, TaskId)> {
        let events = scheduler.trace_mut().take_events();
        let mut spawned = Vec::new();
        for event in &events {
            if matches!(event.from, Phase::New) {
                if let Cause::Spawned(parent) = event.cause {
                    spawned.push((event.task, parent));
                }
                let agent = scheduler
                    .task(event.task)
                    .map(|info| info.agent)
                    .unwrap_or_default();
                self.tasks += 1;
                self.first = Some(self.first.map_or(event.time, |f| f.min(event.time)));
                self.live.insert(event.task, (agent, Timeline::new()));
            }
            let Some((_, timeline)) = self.live.get_mut(&event.task) else {
                continue;
            };
            timeline.take(event);
            if let Some(end) = timeline.ended()
                && let Some((agent, timeline)) = self.live.remove(&event.task)
            {
                self.close(agent, &timeline, end);
            }
        }
        spawned
    }

    /// Counts the wait of a task whose timeline stops at `end`.
    fn close(&mut self, agent: String, timeline: &Timeline, end: Time) {
        let totals = timeline.totals(end);
        let wait = totals.queued + totals.blocked + totals.rate_limited;
        self.waits.entry(agent).or_default().push(wait);
        if timeline.ended().is_some() {
            self.last_end = Some(self.last_end.map_or(end, |last| last.max(end)));
        }
    }

    /// The run's figures, `scheduler` being at its end: tasks still live wait until
    /// its time.
    pub(super) fn finish(
        mut self,
        scheduler: &Scheduler,
        counts: Counts,
        policy: &str,
        unmatched: Vec<UnmatchedRequest>,
    ) -> RunStats {
        let now = scheduler.now();
        for (agent, timeline) in std::mem::take(&mut self.live).into_values() {
            self.close(agent, &timeline, now);
        }
        let makespan = match (self.first, self.last_end) {
            (Some(first), Some(last)) => last.saturating_since(first),
            _ => Duration::ZERO,
        };
        let all = self.waits.values().flatten().copied().collect();
        let stats = scheduler.stats();
        RunStats {
            policy: policy.to_owned(),
            tasks: self.tasks,
            completed: stats.completed,
            failed: stats.failed,
            canceled: stats.canceled,
            makespan,
            waits: Waits::of(all),
            agents: self
                .waits
                .into_iter()
                .map(|(agent, waits)| (agent, Waits::of(waits)))
                .collect(),
            requests: counts.requests,
            rate_limited: counts.rate_limited,
            peak_in_flight: stats.peak_in_flight,
            unmatched,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let ms = Duration::from_millis;
        let waits = Waits::of((1..=20).rev().map(ms).collect());
        assert_eq!(
            (waits.tasks, waits.p50, waits.p95, waits.max),
            (20, ms(10), ms(19), ms(20))
        );
        let one = Waits::of(vec![ms(7)]);
        assert_eq!((one.p50, one.p95, one.max), (ms(7), ms(7), ms(7)));
        assert_eq!(Waits::of(Vec::new()), Waits::default());
    }
}
