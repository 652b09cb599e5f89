//! The schedule table's state: the schedules by slug (each at a numbered index, which
//! its timer names), the runs going, the sessions, and the anchor that maps the
//! scheduler's time to the wall clock. What a fire does with tasks is in
//! `scheduler/schedules.rs`; this file holds the data and the decisions that need no
//! task.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    CatchUp, ScheduleDef, ScheduleInfo, ScheduleStatus, SessionInfo, SessionLimits, SessionTrimmer,
};
use crate::id::TaskId;
use crate::spec::Spec;
use crate::time::Time;

/// The most missed fires counted one by one after an outage; past it, a cron
/// schedule's count stops there (an interval's is computed exactly).
pub(crate) const MAX_COUNTED: u64 = 100_000;

/// Where the scheduler's time meets the wall clock: the time `at` was the wall-clock
/// instant `wall`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Anchor {
    pub(crate) at: Time,
    pub(crate) wall: Timestamp,
}

impl Anchor {
    /// The wall-clock instant of `time`.
    pub(crate) fn wall(&self, time: Time) -> Timestamp {
        let nanos = if time >= self.at {
            i128::from((time - self.at).as_nanos() as u64)
        } else {
            -i128::from((self.at - time).as_nanos() as u64)
        };
        let offset = SignedDuration::from_nanos_i128(nanos);
        self.wall.checked_add(offset).unwrap_or(if nanos >= 0 {
            Timestamp::MAX
        } else {
            Timestamp::MIN
        })
    }

    /// The scheduler's time of the wall-clock instant `wall` (not before `now`: what
    /// was due before is due now).
    pub(crate) fn time(&self, wall: Timestamp, now: Time) -> Time {
        let ahead = wall.duration_since(self.wall);
        let at = if ahead.is_negative() {
            self.at
        } else {
            let d = Duration::try_from(ahead).unwrap_or(Duration::MAX);
            self.at + d
        };
        at.max(now)
    }
}

/// One schedule in the table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// Its number, never reused: its timers carry it, so a timer of a deleted
    /// schedule never fires another at the same index.
    pub(crate) uid: u64,
    pub(crate) def: ScheduleDef,
    pub(crate) created_at: Timestamp,
    pub(crate) updated_at: Timestamp,
    pub(crate) status: ScheduleStatus,
    /// The scheduler's time its timer is set for (`Time::MAX`: none).
    pub(crate) timer: Time,
    /// Its timer's sequence number (a restore puts the timer back with it, so fires
    /// due at the same time keep their order).
    pub(crate) timer_seq: u64,
}

impl Entry {
    /// It as listed.
    pub(crate) fn info(&self) -> ScheduleInfo {
        ScheduleInfo {
            def: self.def.clone(),
            created_at: self.created_at,
            updated_at: self.updated_at,
            status: self.status.clone(),
        }
    }

    /// The wall-clock instant it next has something to do: its next fire, a busy
    /// run's retry, or (with `now`) a buffered fire whose turn came.
    pub(crate) fn wake_at(&self, now: Timestamp) -> Option<Timestamp> {
        let buffered =
            (self.status.running.is_empty() && !self.status.buffered.is_empty()).then_some(now);
        let next = if self.def.enabled {
            self.status.next_run
        } else {
            None
        };
        [next, self.status.retry.map(|(_, at)| at), buffered]
            .into_iter()
            .flatten()
            .min()
    }
}

/// A run going: its schedule (index and number), the nominal fire it runs for, and the
/// session it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RunRef {
    pub(crate) index: u32,
    pub(crate) uid: u64,
    pub(crate) nominal: Timestamp,
    pub(crate) session: Option<String>,
}

/// What the due fires of a schedule come to, at a wall-clock instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fire {
    /// The fires to run, oldest first.
    pub(crate) run: Vec<Timestamp>,
    /// Fires counted missed.
    pub(crate) missed: u64,
    /// The next fire after these.
    pub(crate) next: Option<Timestamp>,
}

/// The fires of `spec` due at `now`, the first being `first`, under `catch_up`.
/// One due fire runs whatever the policy (it is on time, or late by a stall); with
/// several, the policy decides. An interval goes on from its last fire; after an
/// outage, from `now`.
pub(crate) fn due_fires(spec: &Spec, catch_up: CatchUp, first: Timestamp, now: Timestamp) -> Fire {
    let after_first = spec.next_after(first);
    let Some(second) = after_first.filter(|t| *t <= now) else {
        return Fire {
            run: vec![first],
            missed: 0,
            next: after_first,
        };
    };
    let after_outage = match spec {
        Spec::Every(interval) => now.checked_add(*interval).ok(),
        _ => spec.next_after(now),
    };
    let latest = spec.last_between(second, now).unwrap_or(second).max(second);
    let all = count_between(spec, first, latest);
    match catch_up {
        CatchUp::Latest => Fire {
            run: vec![latest],
            missed: all.saturating_sub(1),
            next: after_outage,
        },
        CatchUp::None => Fire {
            run: Vec::new(),
            missed: all,
            next: after_outage,
        },
        CatchUp::All { window } => {
            let from = now
                .checked_sub(SignedDuration::try_from(window).unwrap_or(SignedDuration::MAX))
                .unwrap_or(Timestamp::MIN);
            let mut run = Vec::new();
            let mut fire = Some(first);
            while let Some(at) = fire.filter(|t| *t <= latest) {
                if at >= from {
                    run.push(at);
                    if run.len() >= super::MAX_BUFFERED {
                        break;
                    }
                }
                fire = spec.next_after(at);
            }
            Fire {
                missed: all.saturating_sub(run.len() as u64),
                run,
                next: after_outage,
            }
        }
    }
}

/// How many fires of `spec` fall in `[first, last]` (at most [`MAX_COUNTED`] for a
/// cron expression).
fn count_between(spec: &Spec, first: Timestamp, last: Timestamp) -> u64 {
    if last < first {
        return 0;
    }
    match spec {
        Spec::Every(interval) if !interval.is_zero() => {
            let span = last.duration_since(first).as_nanos();
            (span / interval.as_nanos() as i128) as u64 + 1
        }
        Spec::Once(_) => 1,
        _ => {
            let mut n = 1;
            let mut at = first;
            while n < MAX_COUNTED {
                match spec.next_after(at) {
                    Some(next) if next <= last => {
                        n += 1;
                        at = next;
                    }
                    _ => break,
                }
            }
            n
        }
    }
}

/// One session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Session {
    #[serde(with = "super::json_text_vec")]
    pub(crate) messages: Vec<Value>,
    pub(crate) holder: Option<TaskId>,
    pub(crate) created_at: Timestamp,
    pub(crate) updated_at: Timestamp,
}

/// The sessions, by id, and the counter that names new ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Sessions {
    pub(crate) by_id: BTreeMap<String, Session>,
    /// The number of the last session made without a name (`s-1`, `s-2`, ...).
    pub(crate) last: u64,
}

impl Sessions {
    /// Makes a session named `id`, or the next `s-N` if `None`; returns its id.
    pub(crate) fn make(&mut self, id: Option<&str>, now: Timestamp) -> String {
        let id = match id {
            Some(id) => id.to_owned(),
            None => loop {
                self.last += 1;
                let id = format!("s-{}", self.last);
                if !self.by_id.contains_key(&id) {
                    break id;
                }
            },
        };
        self.by_id.entry(id.clone()).or_insert(Session {
            messages: Vec::new(),
            holder: None,
            created_at: now,
            updated_at: now,
        });
        id
    }

    /// Session `id` as listed.
    pub(crate) fn info(&self, id: &str) -> Option<SessionInfo> {
        self.by_id.get(id).map(|s| SessionInfo {
            id: id.to_owned(),
            messages: s.messages.clone(),
            holder: s.holder,
            created_at: s.created_at,
            updated_at: s.updated_at,
        })
    }
}

/// The bytes `message` counts for in a session's [limits](SessionLimits): the length
/// of its compact JSON.
///
/// # Example
/// ```
/// use serde_json::json;
/// use spool_core::message_bytes;
/// assert_eq!(message_bytes(&json!({"role": "user", "content": "hi"})), 30);
/// ```
pub fn message_bytes(message: &Value) -> usize {
    /// Counts what is written to it.
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, message);
    count.0
}

/// Whether `message` begins a turn: a message whose `role` is not `assistant` or
/// `tool` (a `user` or `system` message, or one that is not in the chat format).
/// An assistant's message and the tool results that answer its `tool_calls` belong to
/// the turn before them.
fn starts_turn(message: &Value) -> bool {
    !matches!(
        message.get("role").and_then(Value::as_str),
        Some("assistant" | "tool")
    )
}

/// The default rule for a session over its `limits`: drops the oldest turns, whole,
/// until what is left is within both limits. A turn starts at each message that is not
/// an assistant's or a tool's ([OpenAI chat format](https://platform.openai.com/docs/api-reference/chat));
/// so a tool result is never kept without the assistant message that called it, and
/// the session starts with a user (or system) message. The newest turn is always
/// kept whole, even alone over a limit: the session then holds that one turn (it is
/// not cut inside, which could leave a tool call without its result).
///
/// # Example
/// ```
/// use serde_json::json;
/// use spool_core::{SessionLimits, trim_session};
///
/// let turn = |q: &str| vec![
///     json!({"role": "user", "content": q}),
///     json!({"role": "assistant", "tool_calls": [{"id": "c1"}]}),
///     json!({"role": "tool", "tool_call_id": "c1", "content": "42"}),
///     json!({"role": "assistant", "content": "42"}),
/// ];
/// let messages: Vec<_> = ["a", "b", "c"].into_iter().flat_map(turn).collect();
/// // At most 6 messages: the oldest turn goes whole (4 messages), not just 6 of 12.
/// let kept = trim_session(messages, SessionLimits::new(6, 1 << 20));
/// assert_eq!(kept.len(), 4);
/// assert_eq!(kept[0], json!({"role": "user", "content": "c"}));
/// ```
pub fn trim_session(mut messages: Vec<Value>, limits: SessionLimits) -> Vec<Value> {
    let sizes: Vec<usize> = messages.iter().map(message_bytes).collect();
    let mut bytes: usize = sizes.iter().sum();
    let mut count = messages.len();
    let mut cut = 0;
    for start in (1..messages.len()).filter(|i| starts_turn(&messages[*i])) {
        if count <= limits.max_messages && bytes <= limits.max_bytes {
            break;
        }
        bytes -= sizes[cut..start].iter().sum::<usize>();
        count -= start - cut;
        cut = start;
    }
    messages.drain(..cut);
    messages
}

/// The embedder's [`SessionTrimmer`], if it gave one.
#[derive(Clone, Default)]
pub(crate) struct Trimmer(pub(crate) Option<Arc<dyn SessionTrimmer>>);

impl fmt::Debug for Trimmer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Trimmer(embedder's)"
        } else {
            "Trimmer(default)"
        })
    }
}

/// The schedule table.
#[derive(Debug, Default)]
pub(crate) struct Schedules {
    /// Where the scheduler's time meets the wall clock (`None`: never told).
    pub(crate) anchor: Option<Anchor>,
    /// Schedules by index (a timer names its schedule's index); `None`: free.
    pub(crate) entries: Vec<Option<Entry>>,
    /// Indexes by slug.
    pub(crate) by_slug: BTreeMap<String, u32>,
    /// Free indexes, the lowest last (so indexes are reused lowest first).
    free: Vec<u32>,
    /// Runs going, by task.
    pub(crate) runs: BTreeMap<TaskId, RunRef>,
    /// The last schedule number given.
    pub(crate) last_uid: u64,
    pub(crate) sessions: Sessions,
    /// How much a session keeps.
    pub(crate) limits: SessionLimits,
    /// How a session over its limits is trimmed, if not by the default rule.
    pub(crate) trimmer: Trimmer,
}

impl Schedules {
    /// An empty table whose sessions keep at most `limits`.
    pub(crate) fn with_limits(limits: SessionLimits) -> Schedules {
        Schedules {
            limits,
            ..Schedules::default()
        }
    }

    /// Brings session `id` within the limits, if it is over them: through the
    /// embedder's trimmer if there is one, then the default rule ([`trim_session`]) for
    /// whatever is still over. Returns how many messages it holds fewer.
    pub(crate) fn trim(&mut self, id: &str) -> usize {
        let limits = self.limits;
        let Some(session) = self.sessions.by_id.get_mut(id) else {
            return 0;
        };
        if !limits.exceeded_by(&session.messages) {
            return 0;
        }
        let before = session.messages.len();
        let mut messages = std::mem::take(&mut session.messages);
        if let Some(trimmer) = &self.trimmer.0 {
            messages = trimmer.trim(id, messages, limits);
        }
        if limits.exceeded_by(&messages) {
            messages = trim_session(messages, limits);
        }
        session.messages = messages;
        before.saturating_sub(session.messages.len())
    }

    /// The schedule named `slug`, with its index.
    pub(crate) fn find(&self, slug: &str) -> Option<(u32, &Entry)> {
        let index = *self.by_slug.get(slug)?;
        self.entries
            .get(index as usize)
            .and_then(Option::as_ref)
            .map(|e| (index, e))
    }

    /// The schedule at `index`, to change.
    pub(crate) fn get_mut(&mut self, index: u32) -> Option<&mut Entry> {
        self.entries
            .get_mut(index as usize)
            .and_then(Option::as_mut)
    }

    /// The schedule at `index` if its number is `uid`.
    pub(crate) fn get_uid(&self, index: u32, uid: u64) -> Option<&Entry> {
        self.entries
            .get(index as usize)
            .and_then(Option::as_ref)
            .filter(|e| e.uid == uid)
    }

    /// Puts `entry` in a free index; returns the index.
    pub(crate) fn add(&mut self, entry: Entry) -> u32 {
        let slug = entry.def.slug.clone();
        let index = match self.free.pop() {
            Some(free) => {
                self.entries[free as usize] = Some(entry);
                free
            }
            None => {
                self.entries.push(Some(entry));
                (self.entries.len() - 1) as u32
            }
        };
        self.by_slug.insert(slug, index);
        index
    }

    /// Takes the schedule named `slug` out.
    pub(crate) fn remove(&mut self, slug: &str) -> Option<Entry> {
        let index = self.by_slug.remove(slug)?;
        let entry = self.entries.get_mut(index as usize).and_then(Option::take);
        // Kept sorted high to low: the lowest free index is taken first.
        let at = self.free.partition_point(|f| *f > index);
        self.free.insert(at, index);
        entry
    }

    /// A new schedule number.
    pub(crate) fn next_uid(&mut self) -> u64 {
        self.last_uid += 1;
        self.last_uid
    }

    /// Every schedule, by slug.
    pub(crate) fn list(&self) -> Vec<ScheduleInfo> {
        self.by_slug
            .values()
            .filter_map(|index| self.entries.get(*index as usize).and_then(Option::as_ref))
            .map(Entry::info)
            .collect()
    }

    /// The table as a snapshot records it.
    pub(crate) fn record(&self) -> SchedulesRecord {
        SchedulesRecord {
            anchor: self.anchor,
            entries: self
                .entries
                .iter()
                .enumerate()
                .filter_map(|(index, e)| e.as_ref().map(|e| (index as u32, e.clone())))
                .collect(),
            runs: self
                .runs
                .iter()
                .map(|(id, run)| (*id, run.clone()))
                .collect(),
            last_uid: self.last_uid,
            sessions: self.sessions.clone(),
        }
    }

    /// The table a snapshot recorded.
    pub(crate) fn restore(record: &SchedulesRecord) -> Result<Schedules, String> {
        let mut table = Schedules {
            anchor: record.anchor,
            last_uid: record.last_uid,
            sessions: record.sessions.clone(),
            ..Schedules::default()
        };
        for (index, entry) in &record.entries {
            // A new index is only made when none is free: there are never more indexes
            // than schedules ever made.
            if u64::from(*index) >= record.last_uid {
                return Err(format!(
                    "schedule index {index} is out of range (only {} schedules were made)",
                    record.last_uid
                ));
            }
            let index = *index as usize;
            if table.entries.len() <= index {
                table.entries.resize(index + 1, None);
            }
            if table.entries[index].is_some() {
                return Err(format!("schedule index {index} is recorded twice"));
            }
            if entry.uid > record.last_uid {
                return Err(format!(
                    "schedule {:?} has number {} past the counter {}",
                    entry.def.slug, entry.uid, record.last_uid
                ));
            }
            if table
                .by_slug
                .insert(entry.def.slug.clone(), index as u32)
                .is_some()
            {
                return Err(format!("schedule {:?} is recorded twice", entry.def.slug));
            }
            table.entries[index] = Some(entry.clone());
        }
        table.runs = record.runs.iter().cloned().collect();
        table.free = (0..table.entries.len() as u32)
            .rev()
            .filter(|index| table.entries[*index as usize].is_none())
            .collect();
        Ok(table)
    }
}

/// The schedule table as a snapshot records it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct SchedulesRecord {
    pub(crate) anchor: Option<Anchor>,
    /// `(index, schedule)`, by index.
    pub(crate) entries: Vec<(u32, Entry)>,
    pub(crate) runs: Vec<(TaskId, RunRef)>,
    pub(crate) last_uid: u64,
    pub(crate) sessions: Sessions,
}
