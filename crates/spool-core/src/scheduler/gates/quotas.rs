//! The gates' side of agents' shares of kinds (`--agent-limit`): which gates hold
//! shares, agents' own limits, waking shares whose windows moved on, and the shares as
//! a snapshot records them.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use super::RequestGates;
use crate::id::{AgentId, RequestKey};
use crate::kind::Kind;
use crate::limiter::{Gate, QuotaRecord, Quotas, QuotasRecord, RequestLimits};
use crate::time::Time;

/// Gives every kind in which agents are limited a gate (if it has none) holding the
/// agents' shares.
pub(super) fn add_quotas(gates: &mut BTreeMap<Kind, Gate>, limits: &RequestLimits) {
    for kind in limits.agent_limited_kinds() {
        let gate = gates.entry(kind.clone()).or_insert_with(|| Gate::new(None));
        if gate.quotas.is_none() {
            let common = limits.agent_kinds.get(kind).copied().unwrap_or_default();
            gate.quotas = Some(Box::new(Quotas::new(common)));
        }
    }
}

impl RequestGates {
    /// Agent `agent` is called `name`: it takes its own limits in each kind set for
    /// that name, if any.
    pub(super) fn name_agent_quotas(&mut self, agent: AgentId, name: &str) {
        let Some(own) = self.limits.agent_kinds_for.get(name) else {
            return;
        };
        for (kind, limits) in own {
            if let Some(quotas) = self
                .gates
                .get_mut(kind)
                .and_then(|g| g.quotas.as_deref_mut())
            {
                quotas.set_own(agent, *limits);
            }
        }
    }

    /// Agent `agent` has room again across kinds: in each kind its best parked request
    /// goes back to the gate's queue (the one it had there may have been parked behind
    /// its cap across kinds).
    pub(super) fn unpark_quotas(&mut self, agent: AgentId) {
        for gate in self.gates.values_mut() {
            if let Some(quotas) = gate.quotas.as_deref_mut() {
                quotas.unpark_one(agent, &mut gate.held);
            }
        }
    }

    /// Shares whose windows have moved on by `now` send their best parked request back
    /// to the gate's queue.
    pub(super) fn wake_quotas(&mut self, now: Time) {
        for gate in self.gates.values_mut() {
            if let Some(quotas) = gate.quotas.as_deref_mut() {
                quotas.wake(now, &mut gate.held);
            }
        }
    }

    /// When time alone next lets an agent's parked request go through its window: the
    /// earliest wake of a gate not at its cap (then only an answer frees room), after
    /// its back-off (whose end is a timer of its own).
    pub(super) fn quota_free_at(&self) -> Option<Time> {
        self.gates
            .values()
            .filter(|gate| !gate.at_cap())
            .filter_map(|gate| {
                let at = gate.quotas.as_deref()?.next_wake()?;
                (at > gate.backoff.until).then_some(at)
            })
            .min()
    }

    /// Requests parked in agents' shares.
    #[cfg(test)]
    pub(super) fn quota_parked_len(&self) -> usize {
        self.gates
            .values()
            .filter_map(|g| g.quotas.as_deref())
            .flat_map(|q| q.iter().map(|(_, quota)| quota.parked.len()))
            .sum()
    }

    /// The agents' shares as a snapshot records them; `key` renumbers a request's index
    /// as the snapshot does (`None`: its task is gone).
    pub(in crate::scheduler) fn quota_records(
        &self,
        key: &impl Fn(&RequestKey) -> Option<RequestKey>,
    ) -> QuotasRecord {
        let mut shares = Vec::new();
        for (kind, gate) in &self.gates {
            let Some(quotas) = gate.quotas.as_deref() else {
                continue;
            };
            for (agent, quota) in quotas.iter() {
                let window: Vec<Time> = quota
                    .window
                    .as_ref()
                    .map(|w| w.times().collect())
                    .unwrap_or_default();
                let mut parked: Vec<_> = quota
                    .parked
                    .iter()
                    .filter_map(|(p, Reverse(seq), k)| Some((*p, *seq, key(k)?)))
                    .collect();
                if window.is_empty() && parked.is_empty() && quota.wake.is_none() {
                    continue;
                }
                parked.sort_unstable_by_key(|h| Reverse((h.0, Reverse(h.1))));
                shares.push(QuotaRecord {
                    kind: kind.clone(),
                    agent: agent.0,
                    window,
                    parked,
                    wake: quota.wake,
                });
            }
        }
        QuotasRecord {
            common: self.limits.agent_kinds.clone(),
            own: self.limits.agent_kinds_for.clone(),
            shares,
        }
    }

    /// Puts back the agents' shares of snapshot record `record` (the limits are
    /// already in place, and the counts in flight follow from the tasks).
    pub(in crate::scheduler) fn restore_quotas(&mut self, record: &QuotasRecord) {
        for share in &record.shares {
            let Some(quotas) = self
                .gates
                .get_mut(&share.kind)
                .and_then(|g| g.quotas.as_deref_mut())
            else {
                continue;
            };
            let parked = share
                .parked
                .iter()
                .map(|(p, seq, key)| (*p, Reverse(*seq), *key));
            quotas.restore(AgentId(share.agent), &share.window, parked, share.wake);
        }
    }
}
