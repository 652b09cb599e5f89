//! The lease thread: every third of the ttl it renews the node's leases, stops the
//! shards whose lease was lost, and takes or releases shards towards its fair share;
//! on [`Event::Stop`] it stops every shard and releases every lease. (The watchdog
//! stops a shard whose lease runs out while this thread waits on the database.)

use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Instant;

use spool_postgres::cluster::Lease;
use spool_runtime::RuntimeBuilder;

use crate::error::ClusterError;
use crate::event::Event;
use crate::held::Held;
use crate::leases::Leases;
use crate::options::{NodeOptions, ShardId};
use crate::shard::RunningShard;

/// What makes a shard's runtime.
pub(crate) type Make = Box<dyn Fn(ShardId) -> RuntimeBuilder + Send>;

/// The lease thread's state: the leases it holds and the runtimes it runs under them.
pub(crate) struct LeaseLoop {
    url: String,
    options: NodeOptions,
    leases: Leases,
    make: Make,
    held: Held,
    running: BTreeMap<ShardId, RunningShard>,
    /// Leases taken and not started yet, each with when it was last given (taken or
    /// renewed): a round that takes many shards renews between their starts.
    pending: VecDeque<(Lease, Instant)>,
    /// Shards that lost their lease, asked to stop; joined once their thread ended.
    stopping: Vec<(ShardId, RunningShard)>,
    /// When the last renewal that the database answered was asked for.
    renewed_at: Instant,
    events: Sender<Event>,
    events_rx: Receiver<Event>,
}

impl LeaseLoop {
    /// The loop of a node that joined the cluster through `leases`.
    pub(crate) fn new(
        url: String,
        options: NodeOptions,
        leases: Leases,
        make: Make,
        held: Held,
        (events, events_rx): (Sender<Event>, Receiver<Event>),
    ) -> LeaseLoop {
        LeaseLoop {
            url,
            options,
            leases,
            make,
            held,
            running: BTreeMap::new(),
            pending: VecDeque::new(),
            stopping: Vec::new(),
            renewed_at: Instant::now(),
            events,
            events_rx,
        }
    }

    /// Runs a first round and says so on `first_round`, then rounds every third of
    /// the ttl until told to stop, then leaves.
    pub(crate) fn run(mut self, first_round: Sender<()>) -> Result<(), ClusterError> {
        self.round();
        // The node may have stopped waiting.
        let _ = first_round.send(());
        let mut next_round = Instant::now() + self.options.renew_every();
        loop {
            let timeout = next_round.saturating_duration_since(Instant::now());
            match self.events_rx.recv_timeout(timeout) {
                Ok(Event::Stop) | Err(RecvTimeoutError::Disconnected) => return self.leave(),
                Ok(Event::Ended {
                    shard,
                    epoch,
                    error,
                }) => self.ended(shard, epoch, error),
                Err(RecvTimeoutError::Timeout) => {}
            }
            if Instant::now() >= next_round {
                self.round();
                next_round = Instant::now() + self.options.renew_every();
            }
            self.reap();
        }
    }

    /// One round: renew, then move towards the fair share (not when the database did
    /// not answer the renewal).
    fn round(&mut self) {
        if self.renew() {
            self.rebalance();
        }
    }

    /// Renews the node's row and its leases. A lease the database no longer gives
    /// this node (another took it, or it expired first) stops its shard at once; a
    /// lease it gives that the node runs nothing under (left by an earlier life of a
    /// node of this name) is released, so that it can be taken at once under a new
    /// epoch. `false` if the database did not answer.
    fn renew(&mut self) -> bool {
        let asked_at = Instant::now();
        let kept = match self.leases.renew() {
            Ok(kept) => kept,
            Err(error) => {
                tracing::warn!(node = %self.options.node_id, "cannot renew the leases: {error}");
                return false;
            }
        };
        self.renewed_at = asked_at;
        let given = |shard: ShardId, epoch: u64| {
            kept.iter()
                .find(|lease| lease.shard == shard && lease.epoch == epoch)
        };
        let mut lost = Vec::new();
        for (shard, running) in &self.running {
            let renewed = given(*shard, running.epoch).is_some_and(|lease| {
                let until = asked_at + self.options.hold_for(lease.expires_in);
                self.held.renew(*shard, running.epoch, until)
            });
            if !renewed {
                lost.push(*shard);
            }
        }
        for shard in lost {
            tracing::warn!(node = %self.options.node_id, shard, "the lease was lost; the shard stops");
            self.lose(shard);
        }
        self.pending
            .retain_mut(|(lease, at)| match given(lease.shard, lease.epoch) {
                Some(renewed) => {
                    *lease = *renewed;
                    *at = asked_at;
                    true
                }
                None => false,
            });
        let left: Vec<Lease> = kept
            .iter()
            .filter(|lease| {
                !self.running.contains_key(&lease.shard)
                    && !self.pending.iter().any(|(p, _)| p.shard == lease.shard)
            })
            .copied()
            .collect();
        for lease in left {
            self.release(lease.shard, lease.epoch);
        }
        true
    }

    /// Stops `shard` without waiting for it: its lease is not this node's any more.
    fn lose(&mut self, shard: ShardId) {
        self.held.remove(shard);
        if let Some(running) = self.running.remove(&shard) {
            running.ask_to_stop();
            self.stopping.push((shard, running));
        }
    }

    /// A shard's runtime ended by itself (its journal failed, or the watchdog stopped
    /// it): it is no longer run, and its lease is released (if a newer owner fenced
    /// it, the lease is no longer this node's, and the release changes nothing).
    fn ended(&mut self, shard: ShardId, epoch: u64, error: Option<ClusterError>) {
        if self.running.get(&shard).is_none_or(|r| r.epoch != epoch) {
            // One the lease thread stopped itself; a write refused on the way out is
            // still said, with its shard.
            if let Some(error) = &error {
                tracing::warn!(node = %self.options.node_id, shard, epoch, "the stopped shard's last write failed: {error}");
            }
            return;
        }
        match &error {
            Some(error) => {
                tracing::error!(node = %self.options.node_id, shard, "the shard stopped: {error}");
            }
            None => tracing::warn!(node = %self.options.node_id, shard, "the shard stopped"),
        }
        self.lose(shard);
        self.release(shard, epoch);
    }

    /// Takes shards up to the fair share, or releases those above it.
    fn rebalance(&mut self) {
        let share = match self.leases.fair_share() {
            Ok(share) => share,
            Err(error) => {
                tracing::warn!(node = %self.options.node_id, "cannot count the live nodes: {error}");
                return;
            }
        };
        let holding = self.running.len();
        if holding > share {
            // The highest first: the lowest stay where they are.
            let extras: Vec<ShardId> = self
                .running
                .keys()
                .rev()
                .take(holding - share)
                .copied()
                .collect();
            for shard in extras {
                self.hand_over(shard);
            }
        } else if holding < share {
            self.take(share - holding);
        }
    }

    /// Takes up to `count` free or expired shards and starts them one by one,
    /// renewing every lease between two starts once a third of the ttl has passed
    /// (recovering a shard may take a while).
    fn take(&mut self, count: usize) {
        let asked_at = Instant::now();
        match self.leases.take(count) {
            Ok(taken) => self.pending = taken.into_iter().map(|l| (l, asked_at)).collect(),
            Err(error) => {
                tracing::warn!(node = %self.options.node_id, "cannot take shards: {error}");
                return;
            }
        }
        while !self.pending.is_empty() {
            if self.renewed_at.elapsed() >= self.options.renew_every() && !self.renew() {
                // The database does not answer: the leases not started run out.
                self.pending.clear();
                return;
            }
            let Some((lease, given_at)) = self.pending.pop_front() else {
                return;
            };
            self.start(lease, given_at);
        }
    }

    /// Starts the shard of `lease`, given at `given_at`; a shard that cannot start is
    /// released for another node (or this one, later).
    fn start(&mut self, lease: Lease, given_at: Instant) {
        let (shard, epoch) = (lease.shard, lease.epoch);
        // An older run of the shard here (its lease expired by the database's clock
        // first) is fenced by the new writer; stop it.
        self.lose(shard);
        let started = RunningShard::start(
            &self.url,
            &self.options,
            &*self.make,
            lease,
            self.events.clone(),
        );
        match started {
            Ok(running) => {
                tracing::info!(node = %self.options.node_id, shard, epoch, "the shard runs here");
                let until = given_at + self.options.hold_for(lease.expires_in);
                self.held
                    .insert(shard, epoch, running.handle.clone(), until);
                self.running.insert(shard, running);
            }
            Err(error) => {
                tracing::error!(node = %self.options.node_id, shard, "cannot start the shard: {error}");
                self.release(shard, epoch);
            }
        }
    }

    /// Stops `shard` cleanly and releases its lease for another node.
    fn hand_over(&mut self, shard: ShardId) {
        self.held.remove(shard);
        let Some(running) = self.running.remove(&shard) else {
            return;
        };
        let epoch = running.epoch;
        running.ask_to_stop();
        if let Err(error) = running.join(shard) {
            tracing::error!(node = %self.options.node_id, shard, "{error}");
        }
        self.release(shard, epoch);
        tracing::info!(node = %self.options.node_id, shard, "the shard was handed over");
    }

    /// Releases `shard`'s lease of `epoch`, if the node still holds it.
    fn release(&mut self, shard: ShardId, epoch: u64) {
        if let Err(error) = self.leases.release(shard, epoch) {
            tracing::warn!(node = %self.options.node_id, shard, "cannot release the lease: {error}");
        }
    }

    /// Joins the lost shards whose threads ended.
    fn reap(&mut self) {
        let (ended, still): (Vec<_>, Vec<_>) = std::mem::take(&mut self.stopping)
            .into_iter()
            .partition(|(_, running)| running.is_finished());
        self.stopping = still;
        for (shard, running) in ended {
            if let Err(error) = running.join(shard) {
                tracing::error!(node = %self.options.node_id, shard, "{error}");
            }
        }
    }

    /// Stops every shard (all asked at once, then waited for), releases every lease
    /// and leaves the cluster.
    fn leave(mut self) -> Result<(), ClusterError> {
        let running = std::mem::take(&mut self.running);
        self.held.clear();
        for shard in running.values() {
            shard.ask_to_stop();
        }
        let mut panicked = None;
        let stopping = std::mem::take(&mut self.stopping);
        for (shard, running) in running.into_iter().chain(stopping) {
            if let Err(error) = running.join(shard) {
                panicked.get_or_insert(error);
            }
        }
        self.leases.leave()?;
        panicked.map_or(Ok(()), Err)
    }
}
