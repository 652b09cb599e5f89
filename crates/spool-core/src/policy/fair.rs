//! Weighted fair share across agents: the agent with the fewest tasks in
//! flight relative to its weight goes first; within an agent, priority levels, FIFO
//! within a level. Equal shares go to the agent whose next task has waited longest.
//!
//! Agents with queued tasks are kept in an ordered set keyed by their share, so push,
//! pop, forget and a change of an agent's count are O(log a) for `a` agents, plus
//! O(log n) in the agent's own queue. A task that ends while queued is taken out at once
//! ([`Policy::forget`]): an agent's place in line is its oldest *live* task's.

use std::collections::BTreeMap;

use std::cmp::Ordering;
use std::collections::BTreeSet;

use super::{Policy, QueueEntry, TaskRef};
use crate::id::AgentId;
use crate::time::Time;

/// An agent's running tasks over its weight, compared without division.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Share {
    running: u64,
    weight: u64,
}

impl Ord for Share {
    fn cmp(&self, other: &Share) -> Ordering {
        let a = u128::from(self.running) * u128::from(other.weight);
        let b = u128::from(other.running) * u128::from(self.weight);
        a.cmp(&b)
    }
}

impl PartialOrd for Share {
    fn partial_cmp(&self, other: &Share) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Ordered by share; a share equal as a fraction but with other numbers is the same
/// share, so the order falls through to the head's sequence number and the agent.
#[derive(Copy, Clone, Debug)]
struct Key {
    share: Share,
    head: u64,
    agent: AgentId,
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Key {}
impl Ord for Key {
    fn cmp(&self, other: &Key) -> Ordering {
        self.share
            .cmp(&other.share)
            .then(self.head.cmp(&other.head))
            .then(self.agent.cmp(&other.agent))
    }
}
impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug, Default)]
struct AgentQueue {
    /// By priority level (`Low` = 0): `(seq, task)`, in sequence order.
    levels: [BTreeSet<(u64, TaskRef)>; 4],
    len: usize,
    running: u64,
    weight: u64,
}

impl AgentQueue {
    fn head(&self) -> Option<u64> {
        self.levels
            .iter()
            .rev()
            .find_map(|level| level.first().map(|(seq, _)| *seq))
    }

    fn key(&self, agent: AgentId) -> Option<Key> {
        Some(Key {
            share: Share {
                running: self.running,
                weight: self.weight.max(1),
            },
            head: self.head()?,
            agent,
        })
    }
}

/// Weighted fair share across agents; see the module documentation.
#[derive(Debug, Default)]
pub struct FairShare {
    agents: Vec<AgentQueue>,
    order: BTreeSet<Key>,
    /// Where each queued task is: its agent, level and sequence number.
    queued: BTreeMap<TaskRef, (AgentId, usize, u64)>,
    len: usize,
}

impl FairShare {
    /// An empty queue.
    pub fn new() -> FairShare {
        FairShare::default()
    }

    fn agent_mut(&mut self, agent: AgentId) -> &mut AgentQueue {
        let index = agent.0 as usize;
        if self.agents.len() <= index {
            self.agents.resize_with(index + 1, || AgentQueue {
                weight: 1,
                ..AgentQueue::default()
            });
        }
        &mut self.agents[index]
    }

    /// Applies `change` to an agent, keeping its place in the order right.
    fn update(&mut self, agent: AgentId, change: impl FnOnce(&mut AgentQueue)) {
        let queue = self.agent_mut(agent);
        let before = queue.key(agent);
        change(queue);
        let after = queue.key(agent);
        if before.map(|k| (k.share, k.head)) != after.map(|k| (k.share, k.head)) {
            if let Some(key) = before {
                self.order.remove(&key);
            }
            if let Some(key) = after {
                self.order.insert(key);
            }
        }
    }
}

impl Policy for FairShare {
    fn push(&mut self, entry: &QueueEntry) {
        let level = entry.priority as usize;
        let item = (entry.seq, entry.task);
        let weight = u64::from(entry.weight.max(1));
        self.update(entry.agent, |q| {
            q.weight = weight;
            q.levels[level].insert(item);
            q.len += 1;
        });
        self.queued
            .insert(entry.task, (entry.agent, level, entry.seq));
        self.len += 1;
    }

    fn pop(&mut self, _now: Time) -> Option<TaskRef> {
        let agent = self.order.first()?.agent;
        let mut popped = None;
        self.update(agent, |q| {
            for level in q.levels.iter_mut().rev() {
                if let Some((_, task)) = level.pop_first() {
                    popped = Some(task);
                    q.len -= 1;
                    break;
                }
            }
        });
        if let Some(task) = popped {
            self.queued.remove(&task);
            self.len -= 1;
        }
        popped
    }

    fn len(&self) -> usize {
        self.len
    }

    fn name(&self) -> &'static str {
        "fair-share"
    }

    fn queued(&self) -> Option<Vec<(u64, TaskRef)>> {
        let agents = self.agents.iter();
        Some(
            agents
                .flat_map(|q| q.levels.iter().flatten().copied())
                .collect(),
        )
    }

    fn forget(&mut self, task: TaskRef) {
        let Some((agent, level, seq)) = self.queued.remove(&task) else {
            return;
        };
        self.update(agent, |q| {
            if q.levels[level].remove(&(seq, task)) {
                q.len -= 1;
            }
        });
        self.len -= 1;
    }

    fn task_started(&mut self, agent: AgentId) {
        self.update(agent, |q| q.running += 1);
    }

    fn task_ended(&mut self, agent: AgentId) {
        self.update(agent, |q| q.running = q.running.saturating_sub(1));
    }
}
