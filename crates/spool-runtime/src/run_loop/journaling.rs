//! Journaling: the loop's journal and everything that waits on it. The loop forwards
//! the core's entries here, closes one group per turn, and hands over what the entries
//! caused ([`Out`]); this part keeps each until its group is durable (write-ahead),
//! takes checkpoints when they are due, and stops journaling for good at the first
//! failure. A backend plugs in here as a [`JournalSink`]; the part never touches a
//! channel or a thread itself (the sink's notices come in through the loop's mailbox).

use std::collections::VecDeque;

use crossbeam_channel::Sender;
use spool_core::{
    Commit, DurableNotice, DurableNotifier, JournalEntry, JournalError, JournalSink, Scheduler,
    SnapshotError, Stats, TraceEvent,
};

use super::{Inbound, Out};

/// How a runtime journals, as set on its builder.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct JournalSettings {
    /// Also journal the trace events the run produces.
    pub(crate) trace: bool,
    /// Checkpoint after this many entries (at least; see
    /// [`checkpoint_if_due`](Journaling::checkpoint_if_due)), or never.
    pub(crate) checkpoint_every: Option<u64>,
    /// Whether a checkpoint first checks that every live task's state round-trips.
    pub(crate) check_round_trip: bool,
}

/// The runtime's journal and durability bookkeeping: the sink, the groups committed
/// and made durable, what waits for its group, the counters as of the last durable
/// group, and checkpoint spacing.
pub(crate) struct Journaling {
    /// The journal, while journaling goes on.
    sink: Option<Box<dyn JournalSink>>,
    settings: JournalSettings,
    /// The first journal write that failed: journaling stopped and the loop shut down.
    error: Option<JournalError>,
    /// Entries written since the last checkpoint.
    since_checkpoint: u64,
    /// The last checkpoint's fixed part (a checkpoint in parts' header), in bytes: the
    /// next one waits for enough entries that writing it again costs a few bytes per
    /// entry.
    last_header: u64,
    /// Groups handed to the journal's `commit` (one per loop turn that recorded
    /// something, and one per direct call that waits).
    committed: u64,
    /// Whether an entry or checkpoint was recorded since the last commit.
    dirty: bool,
    /// Groups the journal says are durable.
    durable: u64,
    /// What waits for its group to be durable, each with its group's number, in order.
    outbox: VecDeque<(u64, Out)>,
    /// The scheduler's counters at each commit not yet durable.
    stats_at: VecDeque<(u64, Stats)>,
    /// The scheduler's counters as of the last durable group.
    durable_stats: Stats,
}

impl Journaling {
    /// Journaling for a runtime starting from `core`: with a sink, the sink gets the
    /// starting snapshot and a notifier that tells the loop (through `inbound`) when
    /// groups are durable, and the core journals every input from then on (its trace
    /// events too if the settings say so). Without one, nothing is journaled and
    /// everything held goes out at once.
    ///
    /// # Errors
    /// The sink's failure to start, or a starting scheduler that cannot be
    /// snapshotted.
    pub(crate) fn start(
        sink: Option<Box<dyn JournalSink>>,
        settings: JournalSettings,
        core: &mut Scheduler,
        inbound: &Sender<Inbound>,
    ) -> Result<Journaling, JournalError> {
        let mut sink = sink;
        if let Some(sink) = sink.as_mut() {
            if settings.trace {
                core.record_trace(true);
            }
            let bytes = core.snapshot().and_then(|s| s.encode())?;
            sink.start(&bytes)?;
            // A sink that commits on a writer thread says on the loop's channel when
            // a group is durable, which wakes a loop waiting for answers.
            let durable = inbound.clone();
            sink.notify_with(DurableNotifier::new(move |notice| {
                let _ = durable.send(Inbound::Durable(notice));
            }));
            // The core journals every input from here; the loop forwards the entries.
            core.record_journal(true);
        }
        Ok(Journaling {
            sink,
            settings,
            error: None,
            since_checkpoint: 0,
            last_header: 0,
            committed: 0,
            dirty: false,
            durable: 0,
            outbox: VecDeque::new(),
            stats_at: VecDeque::new(),
            durable_stats: core.stats().clone(),
        })
    }

    /// Why journaling stopped, if a write failed.
    pub(crate) fn error(&self) -> Option<&JournalError> {
        self.error.as_ref()
    }

    /// Whether a journal write failed (journaling stopped for good).
    pub(crate) fn failed(&self) -> bool {
        self.error.is_some()
    }

    /// Whether something was recorded in the open group (not yet committed).
    pub(crate) fn dirty(&self) -> bool {
        self.dirty
    }

    /// Whether a committed group is not yet durable.
    pub(crate) fn not_durable(&self) -> bool {
        self.durable < self.committed
    }

    /// Whether a direct call must wait for the sink's notice: journaling goes on and a
    /// committed group is not yet durable.
    pub(crate) fn awaits_notice(&self) -> bool {
        self.sink.is_some() && self.not_durable()
    }

    /// Writes the entries the core journaled since the last call to the sink, if there
    /// is one: the runtime only forwards, the core decides what is an entry.
    pub(crate) fn forward(&mut self, core: &mut Scheduler) {
        while let Some(entry) = core.poll_journal() {
            self.write(core, &entry);
        }
    }

    /// Writes `entry` to the journal, if there is one. A failed write stops journaling
    /// and shuts the loop down: what it takes in from then on could be lost.
    fn write(&mut self, core: &mut Scheduler, entry: &JournalEntry) {
        let Some(sink) = self.sink.as_mut() else {
            return;
        };
        match sink.record(entry) {
            Ok(()) => {
                self.since_checkpoint += 1;
                self.dirty = true;
            }
            Err(error) => self.fail(core, error),
        }
    }

    /// Journaling stops for good (the loop, seeing [`failed`](Journaling::failed),
    /// shuts down). Nothing held for a group not yet durable is let out: requests stay
    /// unsent, handles waiting for an acknowledgment get
    /// [`RuntimeError::Gone`](crate::RuntimeError::Gone).
    fn fail(&mut self, core: &mut Scheduler, error: JournalError) {
        tracing::error!(%error, "journal write failed; shutting down");
        self.sink = None;
        core.record_journal(false);
        self.error = Some(error);
        self.outbox.clear();
        self.stats_at.clear();
    }

    /// The group number what is let out now depends on: the open group if something
    /// was recorded in it, else the last committed.
    fn group_now(&self) -> u64 {
        self.committed + u64::from(self.dirty)
    }

    /// Keeps `out` until its group is durable
    /// ([`next_released`](Journaling::next_released) lets it out).
    pub(crate) fn hold(&mut self, out: Out) {
        self.outbox.push_back((self.group_now(), out));
    }

    /// The oldest thing held whose group is durable, taken out; `None` once the next
    /// one waits (or nothing is held).
    pub(crate) fn next_released(&mut self) -> Option<Out> {
        match self.outbox.front() {
            Some((group, _)) if *group <= self.durable => {
                self.outbox.pop_front().map(|(_, out)| out)
            }
            _ => None,
        }
    }

    /// Closes the open group, if anything was recorded in it: the sink makes it
    /// durable now or says later ([`Inbound::Durable`]). Waits while the sink's queue
    /// is full.
    pub(crate) fn end_group(&mut self, core: &mut Scheduler) {
        if !self.dirty {
            return;
        }
        let Some(sink) = self.sink.as_mut() else {
            return;
        };
        self.dirty = false;
        self.committed += 1;
        self.stats_at
            .push_back((self.committed, core.stats().clone()));
        match sink.commit() {
            Ok(Commit::Queued) => {}
            Ok(_) => self.set_durable(self.committed),
            Err(error) => self.fail(core, error),
        }
    }

    /// The first `groups` groups are durable: what they held can go.
    fn set_durable(&mut self, groups: u64) {
        self.durable = self.durable.max(groups.min(self.committed));
        while let Some((group, _)) = self.stats_at.front() {
            if *group > self.durable {
                break;
            }
            if let Some((_, stats)) = self.stats_at.pop_front() {
                self.durable_stats = stats;
            }
        }
    }

    /// The sink's notice: groups durable, or a write that failed (journaling stops).
    /// Ignored once journaling stopped.
    pub(crate) fn on_notice(&mut self, core: &mut Scheduler, notice: DurableNotice) {
        if self.sink.is_none() {
            return;
        }
        match notice {
            Ok(groups) => self.set_durable(groups),
            Err(error) => self.fail(core, error),
        }
    }

    /// The scheduler's counters as of the last group the journal made durable; without
    /// a journal (one that never failed), `core`'s counters now.
    pub(crate) fn durable_stats<'a>(&'a self, core: &'a Scheduler) -> &'a Stats {
        if self.sink.is_none() && self.error.is_none() {
            core.stats()
        } else {
            &self.durable_stats
        }
    }

    /// Records a checkpoint of `core` in the open group (durable with it).
    ///
    /// # Errors
    /// [`JournalError::Snapshot`] if the scheduler cannot be snapshotted (journaling
    /// goes on), or the sink's error (journaling stops).
    pub(crate) fn queue_checkpoint(&mut self, core: &mut Scheduler) -> Result<(), JournalError> {
        // Every entry whose effect the snapshot holds goes before it, or a recovery
        // would apply it twice.
        self.forward(core);
        let Some(sink) = self.sink.as_mut() else {
            return Ok(());
        };
        if self.settings.check_round_trip {
            // Before the snapshot: a checkpoint in parts takes the changes it writes.
            let registry = core.registry();
            core.check_round_trip(registry)
                .map_err(SnapshotError::from)?;
        }
        let written = if sink.takes_parts() {
            // The tasks that changed since the last checkpoint (all of them the first
            // time): what a checkpoint costs follows what changed.
            let parts = core.snapshot_changes()?;
            self.last_header = parts.header.len() as u64;
            sink.checkpoint_parts(parts)
        } else {
            let bytes = core.snapshot().and_then(|s| s.encode())?;
            sink.checkpoint(&bytes)
        };
        match written {
            Ok(()) => {
                self.since_checkpoint = 0;
                self.dirty = true;
                Ok(())
            }
            Err(error) => {
                self.fail(core, error.clone());
                Err(error)
            }
        }
    }

    /// Checkpoints if `checkpoint_every` entries were written since the last one — and,
    /// when the last checkpoint's header was over [`HEADER_FREE`], at least enough that
    /// writing its excess again comes to [`HEADER_BYTES_PER_ENTRY`] bytes per entry: a
    /// header follows the queues (a hundred thousand ready tasks make it hundreds of
    /// kB), and spacing checkpoints by it keeps their cost per step flat however many
    /// tasks there are. A checkpoint that fails is logged.
    pub(crate) fn checkpoint_if_due(&mut self, core: &mut Scheduler) {
        let spacing = self.last_header.saturating_sub(HEADER_FREE) / HEADER_BYTES_PER_ENTRY;
        if self
            .settings
            .checkpoint_every
            .is_some_and(|every| self.since_checkpoint >= every.max(spacing))
            && let Err(error) = self.queue_checkpoint(core)
        {
            tracing::error!(%error, "checkpoint failed");
        }
    }

    /// Writes the trace events since the last call to the journal, if asked to, and
    /// returns them (for a publisher, which sees each once); `None` if not asked to.
    pub(crate) fn record_events(&mut self, core: &mut Scheduler) -> Option<Vec<TraceEvent>> {
        if self.sink.is_none() || !self.settings.trace {
            return None;
        }
        let events = core.trace_mut().take_events();
        for event in &events {
            self.write(core, &JournalEntry::Event(event.clone()));
        }
        Some(events)
    }
}

/// How many bytes of a checkpoint's header each journal entry since the last
/// checkpoint may pay for, beyond [`HEADER_FREE`] (see
/// [`checkpoint_if_due`](Journaling::checkpoint_if_due)).
const HEADER_BYTES_PER_ENTRY: u64 = 16;

/// A header up to this size never delays a checkpoint.
const HEADER_FREE: u64 = 64 * 1024;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::{Arc, Mutex};

    use spool_core::{Config, MemoryJournal, RequestKey, Response, SnapshotParts, Time};

    use super::*;

    /// What the fake sink was asked, in order, and which call it refuses.
    #[derive(Default)]
    struct Calls {
        calls: Vec<&'static str>,
        refuse: Option<&'static str>,
    }

    /// A sink that logs its calls, commits as told (queued or durable), and refuses the
    /// call named in `refuse` with `Encode("<call> refused")`.
    #[derive(Clone, Default)]
    struct Fake {
        calls: Arc<Mutex<Calls>>,
        queued: bool,
        parts: bool,
    }

    impl Fake {
        fn call(&self, name: &'static str) -> Result<(), JournalError> {
            let mut calls = self.calls.lock().unwrap();
            calls.calls.push(name);
            if calls.refuse == Some(name) {
                return Err(JournalError::Encode(format!("{name} refused")));
            }
            Ok(())
        }

        fn calls(&self) -> Vec<&'static str> {
            self.calls.lock().unwrap().calls.clone()
        }

        fn refuse(&self, name: &'static str) {
            self.calls.lock().unwrap().refuse = Some(name);
        }
    }

    impl JournalSink for Fake {
        fn start(&mut self, _snapshot: &[u8]) -> Result<(), JournalError> {
            self.call("start")
        }

        fn record(&mut self, _entry: &JournalEntry) -> Result<(), JournalError> {
            self.call("record")
        }

        fn checkpoint(&mut self, _snapshot: &[u8]) -> Result<(), JournalError> {
            self.call("checkpoint")
        }

        fn takes_parts(&self) -> bool {
            self.parts
        }

        fn checkpoint_parts(&mut self, _parts: SnapshotParts) -> Result<(), JournalError> {
            self.call("checkpoint_parts")
        }

        fn commit(&mut self) -> Result<Commit, JournalError> {
            self.call("commit")?;
            Ok(if self.queued {
                Commit::Queued
            } else {
                Commit::Durable
            })
        }
    }

    /// The labels of the replies let out, in order.
    type Replies = Arc<Mutex<Vec<&'static str>>>;

    /// A reply that logs `label` when let out.
    fn reply(label: &'static str, replies: &Replies) -> Out {
        let replies = replies.clone();
        Out::Replied(Box::new(move || replies.lock().unwrap().push(label)))
    }

    /// Lets out everything whose group is durable; returns the labels let out now.
    fn release(journaling: &mut Journaling, replies: &Replies) -> Vec<&'static str> {
        while let Some(out) = journaling.next_released() {
            match out {
                Out::Replied(reply) => reply(),
                _ => panic!("only replies are held here"),
            }
        }
        std::mem::take(&mut *replies.lock().unwrap())
    }

    fn start(sink: impl JournalSink, settings: JournalSettings) -> (Journaling, Scheduler) {
        let mut core = Scheduler::new(Config::new());
        let (tx, _rx) = crossbeam_channel::unbounded();
        let journaling = Journaling::start(Some(Box::new(sink)), settings, &mut core, &tx).unwrap();
        (journaling, core)
    }

    /// The core journals one entry (a timeout), which is forwarded to the sink.
    fn entry(journaling: &mut Journaling, core: &mut Scheduler) {
        core.handle_timeout(Time::ZERO);
        journaling.forward(core);
    }

    #[test]
    fn a_groups_outputs_wait_until_the_sink_says_it_is_durable() {
        let sink = Fake {
            queued: true,
            ..Fake::default()
        };
        let (mut d, mut core) = start(sink.clone(), JournalSettings::default());
        let replies = Replies::default();
        // Nothing recorded yet: it depends on no group and goes at once.
        d.hold(reply("before", &replies));
        assert_eq!(release(&mut d, &replies), ["before"]);
        entry(&mut d, &mut core);
        d.hold(reply("first", &replies));
        d.end_group(&mut core);
        entry(&mut d, &mut core);
        d.hold(reply("second", &replies));
        assert_eq!(release(&mut d, &replies), Vec::<&str>::new());
        d.end_group(&mut core);
        assert!(d.awaits_notice());
        assert_eq!(release(&mut d, &replies), Vec::<&str>::new());
        d.on_notice(&mut core, Ok(1));
        assert_eq!(release(&mut d, &replies), ["first"]);
        assert!(d.not_durable());
        d.on_notice(&mut core, Ok(2));
        assert_eq!(release(&mut d, &replies), ["second"]);
        assert!(!d.awaits_notice());
        assert_eq!(
            sink.calls(),
            ["start", "record", "commit", "record", "commit"]
        );
    }

    #[test]
    fn a_sink_that_writes_as_it_records_lets_a_group_out_when_it_closes() {
        let (mut d, mut core) = start(MemoryJournal::new(), JournalSettings::default());
        let replies = Replies::default();
        entry(&mut d, &mut core);
        d.hold(reply("answer", &replies));
        assert!(d.dirty());
        assert_eq!(release(&mut d, &replies), Vec::<&str>::new());
        d.end_group(&mut core);
        assert!(!d.dirty());
        assert!(!d.not_durable());
        assert_eq!(release(&mut d, &replies), ["answer"]);
        // Nothing recorded since: closing the group again commits nothing.
        d.end_group(&mut core);
        assert!(!d.not_durable());
    }

    #[test]
    fn a_checkpoint_is_due_every_n_entries() {
        let sink = Fake::default();
        let settings = JournalSettings {
            checkpoint_every: Some(3),
            ..JournalSettings::default()
        };
        let (mut d, mut core) = start(sink.clone(), settings);
        for _ in 0..2 {
            entry(&mut d, &mut core);
            d.checkpoint_if_due(&mut core);
        }
        assert_eq!(sink.calls(), ["start", "record", "record"]);
        entry(&mut d, &mut core);
        d.checkpoint_if_due(&mut core);
        assert_eq!(
            sink.calls(),
            ["start", "record", "record", "record", "checkpoint"]
        );
        // The count starts again from the checkpoint.
        entry(&mut d, &mut core);
        d.checkpoint_if_due(&mut core);
        assert_eq!(sink.calls().last(), Some(&"record"));
    }

    #[test]
    fn a_large_checkpoint_header_spaces_checkpoints_by_its_size() {
        let sink = Fake {
            parts: true,
            ..Fake::default()
        };
        let settings = JournalSettings {
            checkpoint_every: Some(1),
            ..JournalSettings::default()
        };
        let (mut d, mut core) = start(sink.clone(), settings);
        // A header 5 entries' worth over the free size: the next checkpoint waits for
        // 5 entries rather than 1.
        d.last_header = HEADER_FREE + 5 * HEADER_BYTES_PER_ENTRY;
        for _ in 0..4 {
            entry(&mut d, &mut core);
            d.checkpoint_if_due(&mut core);
        }
        assert!(!sink.calls().contains(&"checkpoint_parts"));
        entry(&mut d, &mut core);
        d.checkpoint_if_due(&mut core);
        assert_eq!(sink.calls().last(), Some(&"checkpoint_parts"));
        // This scheduler's header is small: back to one entry apart.
        assert!(d.last_header < HEADER_FREE);
        entry(&mut d, &mut core);
        d.checkpoint_if_due(&mut core);
        assert_eq!(
            sink.calls()[5..],
            ["record", "checkpoint_parts", "record", "checkpoint_parts"]
        );
    }

    #[test]
    fn a_failed_write_stops_journaling_and_drops_what_waited() {
        let sink = Fake {
            queued: true,
            ..Fake::default()
        };
        let (mut d, mut core) = start(sink.clone(), JournalSettings::default());
        let replies = Replies::default();
        // "durable" may go but is not let out yet; "lost" waits for its group.
        entry(&mut d, &mut core);
        d.hold(reply("durable", &replies));
        d.end_group(&mut core);
        d.on_notice(&mut core, Ok(1));
        entry(&mut d, &mut core);
        d.hold(reply("lost", &replies));
        d.end_group(&mut core);
        sink.refuse("record");
        entry(&mut d, &mut core);
        assert_eq!(
            d.error(),
            Some(&JournalError::Encode("record refused".into()))
        );
        assert!(d.failed());
        // Nothing held is let out, even if a notice comes after all; a direct call does
        // not wait for one.
        d.on_notice(&mut core, Ok(2));
        assert_eq!(release(&mut d, &replies), Vec::<&str>::new());
        assert!(!d.awaits_notice());
        // The core journals nothing more, and nothing reaches the sink.
        core.handle_timeout(Time::ZERO);
        assert_eq!(core.poll_journal(), None);
        assert_eq!(
            sink.calls(),
            ["start", "record", "commit", "record", "commit", "record"]
        );
    }

    #[test]
    fn a_failed_commit_or_notice_stops_journaling() {
        let sink = Fake::default();
        let (mut d, mut core) = start(sink.clone(), JournalSettings::default());
        sink.refuse("commit");
        entry(&mut d, &mut core);
        d.end_group(&mut core);
        assert_eq!(
            d.error(),
            Some(&JournalError::Encode("commit refused".into()))
        );

        let sink = Fake {
            queued: true,
            ..Fake::default()
        };
        let (mut d, mut core) = start(sink.clone(), JournalSettings::default());
        entry(&mut d, &mut core);
        d.end_group(&mut core);
        d.on_notice(&mut core, Err(JournalError::Encode("disk full".into())));
        assert_eq!(d.error(), Some(&JournalError::Encode("disk full".into())));
        // The first error stays: a later one is ignored.
        d.on_notice(&mut core, Err(JournalError::NotStarted));
        assert_eq!(d.error(), Some(&JournalError::Encode("disk full".into())));
    }

    #[test]
    fn durable_counters_are_those_at_the_last_durable_commit() {
        let sink = Fake {
            queued: true,
            ..Fake::default()
        };
        let (mut d, mut core) = start(sink.clone(), JournalSettings::default());
        // An answer to no task: journaled, and counted as dropped.
        let key: RequestKey =
            serde_json::from_value(serde_json::json!({"task": 7, "number": 1, "slot": 0})).unwrap();
        let _ = core.handle_response(Time::ZERO, Response::ok(key, "late"));
        d.forward(&mut core);
        d.end_group(&mut core);
        assert_eq!(sink.calls(), ["start", "record", "commit"]);
        assert_eq!(core.stats().dropped_answers, 1);
        assert_eq!(d.durable_stats(&core).dropped_answers, 0);
        d.on_notice(&mut core, Ok(1));
        assert_eq!(d.durable_stats(&core), core.stats());
        assert_eq!(d.durable_stats(&core).dropped_answers, 1);
    }

    #[test]
    fn a_sink_error_in_a_turn_stops_the_loop() {
        let sink = Fake::default();
        sink.refuse("commit");
        // The first turn journals a timeout, and its group's commit fails: the loop
        // stops though nothing is left to do in the turn (the entry was committed).
        let mut runtime = crate::Runtime::builder().journal(sink.clone()).build();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let runner = std::thread::spawn(move || {
            runtime.run();
            let error = runtime.journal_error().cloned();
            let _ = done_tx.send(error);
        });
        let error = done_rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the loop stops when the journal fails");
        assert_eq!(error, Some(JournalError::Encode("commit refused".into())));
        runner.join().unwrap();
        assert_eq!(sink.calls(), ["start", "record", "commit"]);
    }
}
