//! An observer independent of the scheduler: it sees only what leaves it (the requests
//! the driver takes, the answers it hands back, the trace) and checks the run's
//! invariants from that — no limit exceeded, every request answered at most once,
//! every task ends exactly once, every timeline tiles its task's life.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use spool_core::{Kind, Phase, RequestKey, TaskId, Time, Timeline, TraceEvent};

use super::report::Violation;
use super::workload::SimLimits;

/// What the observer keeps.
#[derive(Debug, Default)]
pub(crate) struct Observer {
    /// Requests with executors: their kind and their task's agent.
    out: BTreeMap<RequestKey, (Kind, String)>,
    /// Requests with executors, by kind.
    by_kind: BTreeMap<Kind, u32>,
    /// Requests with executors, by agent.
    by_agent: BTreeMap<String, u32>,
    /// When each LLM request was sent, with its estimated tokens.
    llm_sent: VecDeque<(Time, u32)>,
    /// LLM requests with executors, by agent.
    llm_by_agent: BTreeMap<String, u32>,
    /// When each agent's LLM requests were sent, oldest first.
    llm_sent_by_agent: BTreeMap<String, VecDeque<Time>>,
    /// Requests whose answer reached their task.
    delivered: BTreeSet<RequestKey>,
    /// How many times each task ended.
    ends: BTreeMap<TaskId, u32>,
    /// Every task made, as its first event says.
    pub(crate) made: Vec<TaskId>,
}

impl Observer {
    /// The driver took request `key` of `kind` (estimated `tokens`) of a task of `agent`
    /// at `now`: checks every limit against what is with executors and what was sent.
    pub(crate) fn sent(
        &mut self,
        limits: &SimLimits,
        now: Time,
        key: RequestKey,
        kind: &Kind,
        tokens: u32,
        agent: &str,
    ) -> Result<(), Violation> {
        if self
            .out
            .insert(key, (kind.clone(), agent.to_owned()))
            .is_some()
        {
            return Err(Violation::SentTwice(key));
        }
        let in_kind = self.by_kind.entry(kind.clone()).or_default();
        *in_kind += 1;
        let cap = match kind {
            Kind::Llm => limits.llm_in_flight,
            Kind::Tool(_) => limits.tool_in_flight,
            _ => None,
        };
        if let Some(cap) = cap.filter(|cap| *in_kind > *cap) {
            return Err(Violation::Limit(format!(
                "{} `{kind}` requests with executors at {now}, over the cap of {cap}",
                *in_kind
            )));
        }
        let in_agent = self.by_agent.entry(agent.to_owned()).or_default();
        *in_agent += 1;
        if let Some(cap) = limits.per_agent_in_flight.filter(|cap| *in_agent > *cap) {
            return Err(Violation::Limit(format!(
                "{} requests of agent `{agent}` with executors at {now}, over its cap of {cap}",
                *in_agent
            )));
        }
        if *kind == Kind::Llm {
            self.llm_windows(limits, now, tokens)?;
            self.llm_share(limits, now, agent)?;
        }
        Ok(())
    }

    /// An LLM request of `agent` sent at `now` keeps to the agent's share of the LLM:
    /// its LLM requests with executors, and those sent in the window ending at `now`
    /// (this one included), are at most the share's.
    fn llm_share(&mut self, limits: &SimLimits, now: Time, agent: &str) -> Result<(), Violation> {
        let out = self.llm_by_agent.entry(agent.to_owned()).or_default();
        *out += 1;
        if let Some(cap) = limits.llm_agent_in_flight.filter(|cap| *out > *cap) {
            return Err(Violation::Limit(format!(
                "{} LLM requests of agent `{agent}` with executors at {now}, over its share \
                 of {cap}",
                *out
            )));
        }
        let sent = self.llm_sent_by_agent.entry(agent.to_owned()).or_default();
        if let Some((max, per)) = limits.llm_agent_window {
            let per = Duration::from_millis(per);
            while sent.front().is_some_and(|at| *at + per <= now) {
                sent.pop_front();
            }
            let n = sent.len() as u32 + 1;
            if n > max {
                return Err(Violation::Limit(format!(
                    "{n} LLM requests of agent `{agent}` sent in the {per:?} ending at {now}, \
                     over its share's window of {max}"
                )));
            }
            sent.push_back(now);
        }
        Ok(())
    }

    /// An LLM request of `tokens` sent at `now` keeps to the LLM windows: the requests
    /// sent in the window ending at `now` (this one included) are at most its maximum,
    /// and their tokens too (unless it is the only one: a request bigger than the
    /// window goes alone).
    fn llm_windows(&mut self, limits: &SimLimits, now: Time, tokens: u32) -> Result<(), Violation> {
        let longest = [
            limits.llm_window.map(|w| w.1),
            limits.llm_tokens.map(|w| w.1),
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0);
        while self
            .llm_sent
            .front()
            .is_some_and(|(at, _)| *at + Duration::from_millis(longest) <= now)
        {
            self.llm_sent.pop_front();
        }
        let within = |per: u64| {
            let sent = &self.llm_sent;
            sent.iter()
                .filter(move |(at, _)| *at + Duration::from_millis(per) > now)
        };
        if let Some((max, per)) = limits.llm_window {
            let n = within(per).count() as u32 + 1;
            if n > max {
                return Err(Violation::Limit(format!(
                    "{n} LLM requests sent in the {per} ms ending at {now}, over the window's {max}"
                )));
            }
        }
        if let Some((max, per)) = limits.llm_tokens {
            let before: Vec<u32> = within(per).map(|(_, t)| *t).collect();
            let sum: u64 = before.iter().map(|t| u64::from(*t)).sum::<u64>() + u64::from(tokens);
            if !before.is_empty() && sum > max {
                return Err(Violation::Limit(format!(
                    "{sum} LLM tokens sent in the {per} ms ending at {now}, over the window's {max}"
                )));
            }
        }
        self.llm_sent.push_back((now, tokens));
        Ok(())
    }

    /// Request `key` is no longer with its executor (answered, or its cancel signal
    /// taken).
    pub(crate) fn settled(&mut self, key: RequestKey) {
        if let Some((kind, agent)) = self.out.remove(&key) {
            if let Some(n) = self.by_kind.get_mut(&kind) {
                *n -= 1;
            }
            if let Some(n) = self.by_agent.get_mut(&agent) {
                *n -= 1;
            }
            if kind == Kind::Llm
                && let Some(n) = self.llm_by_agent.get_mut(&agent)
            {
                *n -= 1;
            }
        }
    }

    /// The answer to `key` reached its task.
    pub(crate) fn delivered(&mut self, key: RequestKey) -> Result<(), Violation> {
        if self.delivered.insert(key) {
            Ok(())
        } else {
            Err(Violation::AnsweredTwice(key))
        }
    }

    /// A trace event: a task made, or ended.
    pub(crate) fn event(&mut self, event: &TraceEvent) -> Result<(), Violation> {
        if event.from == Phase::New {
            self.made.push(event.task);
        }
        if matches!(event.to, Phase::Completed | Phase::Failed | Phase::Canceled) {
            let ends = self.ends.entry(event.task).or_default();
            *ends += 1;
            if *ends > 1 {
                return Err(Violation::EndedTwice(event.task));
            }
        }
        Ok(())
    }

    /// At the end of the run: every task made ended exactly once, and its timeline,
    /// from `events`, tiles its life from its first event to its end.
    pub(crate) fn finish(&self, events: &[TraceEvent]) -> Result<(), Violation> {
        let mut by_task: BTreeMap<TaskId, Vec<&TraceEvent>> = BTreeMap::new();
        for event in events {
            by_task.entry(event.task).or_default().push(event);
        }
        for task in &self.made {
            if self.ends.get(task).copied().unwrap_or(0) != 1 {
                return Err(Violation::NeverEnded(*task));
            }
            let mine: Vec<TraceEvent> = by_task
                .get(task)
                .map(|e| e.iter().map(|e| (*e).clone()).collect())
                .unwrap_or_default();
            tiles(*task, &mine)?;
        }
        Ok(())
    }
}

/// Whether the timeline of `task` from its `events` tiles its life: intervals one
/// after another, with no gap and no overlap, from its first event to its end, adding
/// up to its lifetime.
fn tiles(task: TaskId, events: &[TraceEvent]) -> Result<(), Violation> {
    let wrong = |reason: String| Err(Violation::Timeline { task, reason });
    let Some(first) = events.first() else {
        return wrong("it has no events".to_owned());
    };
    let timeline = Timeline::of(task, events);
    let Some(ended) = timeline.ended() else {
        return wrong("its timeline has no end".to_owned());
    };
    let intervals: Vec<_> = timeline.intervals(ended).collect();
    let mut at = first.time;
    for interval in &intervals {
        if interval.start != at {
            return wrong(format!(
                "an interval starts at {}, not {at}",
                interval.start
            ));
        }
        if interval.end < interval.start {
            return wrong(format!("the interval {interval} ends before it starts"));
        }
        at = interval.end;
    }
    if at != ended {
        return wrong(format!("its intervals end at {at}, it ended at {ended}"));
    }
    let total: Duration = intervals.iter().map(|i| i.duration()).sum();
    if total != ended.saturating_since(first.time) {
        return wrong(format!("its intervals add up to {total:?}"));
    }
    Ok(())
}
