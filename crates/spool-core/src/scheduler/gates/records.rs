//! The gates as a snapshot records them, and put back from one.

use std::cmp::Reverse;
use std::time::Duration;

use super::RequestGates;
use crate::id::{AgentId, RequestKey};
use crate::limiter::{Gate, Retried};
use crate::snapshot::{GateRecord, HeldRecord, SnapshotData};

impl RequestGates {
    /// The gates as a snapshot records them; `key` renumbers a request's index as the
    /// snapshot does (`None`: its task is gone).
    pub(in crate::scheduler) fn gate_records(
        &self,
        key: &impl Fn(&RequestKey) -> Option<RequestKey>,
    ) -> Vec<GateRecord> {
        self.gates
            .iter()
            .map(|(kind, gate)| {
                let mut held: Vec<_> = gate
                    .held
                    .iter()
                    .filter_map(|(p, Reverse(seq), k)| Some((*p, *seq, key(k)?)))
                    .collect();
                held.sort_unstable_by_key(|h| Reverse((h.0, Reverse(h.1))));
                GateRecord {
                    kind: kind.clone(),
                    window: gate
                        .window
                        .as_ref()
                        .map(|w| w.times().collect())
                        .unwrap_or_default(),
                    tokens: gate
                        .tokens
                        .as_ref()
                        .map(|w| {
                            w.entries()
                                .map(|(t, k, n)| {
                                    (
                                        t,
                                        key(&k).unwrap_or(RequestKey::new(
                                            k.task(),
                                            k.number(),
                                            u32::MAX,
                                        )),
                                        n,
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                    backoff_until: gate.backoff.until,
                    hits: gate.backoff.hits,
                    epoch: gate.backoff.epoch,
                    held,
                }
            })
            .collect()
    }

    /// The requests parked behind agents' caps, by agent, as a snapshot records them.
    pub(in crate::scheduler) fn parked_records(
        &self,
        key: &impl Fn(&RequestKey) -> Option<RequestKey>,
    ) -> Vec<(u32, Vec<HeldRecord>)> {
        self.parked
            .iter()
            .map(|(agent, held)| {
                let held = held
                    .iter()
                    .filter_map(|(p, Reverse(seq), k)| Some((*p, *seq, key(k)?)))
                    .collect();
                (agent.0, held)
            })
            .collect()
    }

    /// The retries after 429s, by key, as a snapshot records them.
    pub(in crate::scheduler) fn retry_records(
        &self,
        key: &impl Fn(&RequestKey) -> Option<RequestKey>,
    ) -> Vec<(RequestKey, u32, Duration)> {
        self.retries
            .iter()
            .filter_map(|(k, r)| Some((key(k)?, r.tries, r.waited)))
            .collect()
    }

    /// Puts back the gates' side of snapshot `d`: windows, back-offs, held and parked
    /// requests, retries. The counts of requests in flight follow from the tasks and
    /// are taken with [`count`](RequestGates::count).
    pub(in crate::scheduler) fn restore(&mut self, d: &SnapshotData) {
        for record in &d.gates {
            let limits = self.limits.kinds.get(&record.kind);
            let gate = self
                .gates
                .entry(record.kind.clone())
                .or_insert_with(|| Gate::new(limits));
            if let Some(window) = gate.window.as_mut() {
                window.restore(record.window.iter().copied());
            }
            if let Some(window) = gate.tokens.as_mut() {
                window.restore(record.tokens.iter().copied());
            }
            gate.backoff.until = record.backoff_until;
            gate.backoff.hits = record.hits;
            gate.backoff.epoch = record.epoch;
            for (priority, seq, key) in &record.held {
                gate.held.push((*priority, Reverse(*seq), *key));
            }
        }
        for (agent, held) in &d.parked_requests {
            let held = held
                .iter()
                .map(|(p, seq, key)| (*p, Reverse(*seq), *key))
                .collect();
            self.parked.insert(AgentId(*agent), held);
        }
        self.restore_quotas(&d.addenda.v6.agent_limits);
        self.hold_seq = d.hold_seq;
        self.retries = d
            .retries
            .iter()
            .map(|&(key, tries, waited)| (key, Retried { tries, waited }))
            .collect();
        self.gating = d.gating;
    }
}
