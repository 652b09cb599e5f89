//! The lease thread: every third of the ttl it renews the node's leases, stops the
//! shards it could not renew in time, and takes or releases shards towards its fair
//! share; on [`Event::Stop`] it stops every shard and releases every lease.

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Instant;

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
    /// Shards that lost their lease, asked to stop; joined once their thread ended.
    stopping: Vec<(ShardId, RunningShard)>,
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
            stopping: Vec::new(),
            events,
            events_rx,
        }
    }

    /// Runs rounds every third of the ttl until told to stop, then leaves.
    pub(crate) fn run(mut self) -> Result<(), ClusterError> {
        let mut next_round = Instant::now() + self.options.renew_every();
        loop {
            let wait_until = self
                .running
                .values()
                .map(|shard| shard.hold_until)
                .fold(next_round, Instant::min);
            let timeout = wait_until.saturating_duration_since(Instant::now());
            match self.events_rx.recv_timeout(timeout) {
                Ok(Event::Stop) | Err(RecvTimeoutError::Disconnected) => return self.leave(),
                Ok(Event::Ended {
                    shard,
                    epoch,
                    error,
                }) => self.ended(shard, epoch, error),
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.expire();
            if Instant::now() >= next_round {
                self.round();
                next_round = Instant::now() + self.options.renew_every();
            }
            self.reap();
        }
    }

    /// One round: renew, stop what could not be renewed in time, move towards the
    /// fair share.
    pub(crate) fn round(&mut self) {
        self.renew();
        self.expire();
        self.rebalance();
    }

    /// Renews the node's row and its leases; a lease the database no longer gives
    /// this node (another took it, or its epoch moved) stops its shard at once.
    fn renew(&mut self) {
        let asked_at = Instant::now();
        let kept = match self.leases.renew() {
            Ok(kept) => kept,
            Err(error) => {
                tracing::warn!(node = %self.options.node_id, "cannot renew the leases: {error}");
                return;
            }
        };
        let lost: Vec<ShardId> = self
            .running
            .iter_mut()
            .filter_map(|(shard, running)| {
                match kept
                    .iter()
                    .find(|l| l.shard == *shard && l.epoch == running.epoch)
                {
                    Some(lease) => {
                        running.hold_until = asked_at + self.options.hold_for(lease.expires_in);
                        None
                    }
                    None => Some(*shard),
                }
            })
            .collect();
        for shard in lost {
            tracing::warn!(node = %self.options.node_id, shard, "the lease was lost; the shard stops");
            self.lose(shard);
        }
    }

    /// Stops every shard whose lease was not renewed in time, by the node's clock.
    fn expire(&mut self) {
        let now = Instant::now();
        let late: Vec<ShardId> = self
            .running
            .iter()
            .filter(|(_, running)| running.hold_until <= now)
            .map(|(shard, _)| *shard)
            .collect();
        for shard in late {
            tracing::warn!(
                node = %self.options.node_id,
                shard,
                "the lease was not renewed before it expires; the shard stops"
            );
            self.lose(shard);
        }
    }

    /// Stops `shard` without waiting for it: its lease is not this node's to release.
    fn lose(&mut self, shard: ShardId) {
        self.unlist(shard);
        if let Some(running) = self.running.remove(&shard) {
            running.ask_to_stop();
            self.stopping.push((shard, running));
        }
    }

    /// A shard's runtime ended by itself: it is no longer run, and its lease is
    /// released (if a newer owner fenced it, the lease is no longer this node's, and
    /// the release changes nothing).
    fn ended(&mut self, shard: ShardId, epoch: u64, error: Option<ClusterError>) {
        if self.running.get(&shard).is_none_or(|r| r.epoch != epoch) {
            // One the node stopped itself.
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

    /// Takes up to `count` free or expired shards and starts them.
    fn take(&mut self, count: usize) {
        let asked_at = Instant::now();
        let taken = match self.leases.take(count) {
            Ok(taken) => taken,
            Err(error) => {
                tracing::warn!(node = %self.options.node_id, "cannot take shards: {error}");
                return;
            }
        };
        for lease in taken {
            let (shard, epoch) = (lease.shard, lease.epoch);
            let started = RunningShard::start(
                &self.url,
                &self.options,
                &*self.make,
                (lease, asked_at),
                self.events.clone(),
            );
            match started {
                Ok(running) => {
                    tracing::info!(node = %self.options.node_id, shard, epoch, "the shard runs here");
                    self.held.insert(shard, epoch, running.handle.clone());
                    self.running.insert(shard, running);
                }
                Err(error) => {
                    tracing::error!(node = %self.options.node_id, shard, "cannot start the shard: {error}");
                    self.release(shard, epoch);
                }
            }
        }
    }

    /// Stops `shard` cleanly and releases its lease for another node.
    fn hand_over(&mut self, shard: ShardId) {
        self.unlist(shard);
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

    /// Takes `shard` out of what callers see the node run.
    fn unlist(&mut self, shard: ShardId) {
        self.held.remove(shard);
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
