//! The round-trip check: a live task's saved state, restored through its registered
//! decoder and saved again, must give the same bytes — and the first save must not
//! already have lost something the restored task would miss.
//!
//! The second part exists because a save that loses something often saves again to
//! the same bytes: JSON writes `Some(null)` and `None` alike (`null`), so a task holding
//! `Option<Value>` = `Some(Value::Null)` is saved as `null`, restored as `None`, saved
//! again as `null`, and takes another branch after the restore. While the check runs,
//! [`SavedTask::serde`] saves strictly: it refuses a state holding a `Some` of something
//! JSON writes as `null` (`Some(Value::Null)`, `Some(None)`, `Some(())`, `Some(f64::NAN)`),
//! naming where it is.

use crate::id::TaskId;
use crate::registry::TaskRegistry;
use crate::saved::strict::strictly;
use crate::saved::{SavedTask, StateError};
use crate::task::AgentTask;

/// Why a live task's saved state does not round-trip: restored and saved again it
/// gives other bytes, or it cannot be restored or saved again, or its first save
/// already lost something (see [`TaskRegistry::check_round_trip`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RoundTripError {
    /// The state holds something its encoding cannot tell apart from something else
    /// (a `Some(null)` in JSON reads back as `None`).
    #[error("task {task} (type `{type_name}`) does not round-trip: {reason}")]
    Lossy {
        /// The task.
        task: TaskId,
        /// Its type.
        type_name: String,
        /// What is lost, and where in the state.
        reason: String,
    },
    /// The registry has no decoder for the task's type, so a restore would fail.
    #[error(
        "task {task} (type `{type_name}`) does not round-trip: the registry does not know its type"
    )]
    UnknownType {
        /// The task.
        task: TaskId,
        /// Its type.
        type_name: String,
    },
    /// The registered decoder refused the saved state.
    #[error(
        "task {task} (type `{type_name}`) does not round-trip: its state does not restore: {reason}"
    )]
    Restore {
        /// The task.
        task: TaskId,
        /// Its type.
        type_name: String,
        /// The decoder's message.
        reason: String,
    },
    /// The task, or the task restored, could not be saved (other than by being a task
    /// that keeps nothing, which is not checked).
    #[error("task {task} (type `{type_name}`) does not round-trip: {reason}")]
    Save {
        /// The task.
        task: TaskId,
        /// Its type.
        type_name: String,
        /// What its `save` said.
        reason: String,
    },
    /// Restored and saved again, the state is other bytes.
    #[error(
        "task {task} (type `{type_name}`) does not round-trip: saved, restored and saved \
         again, its state differs from byte {offset} on ({saved_len} bytes, then \
         {again_len}): `{saved}` became `{again}`"
    )]
    Differs {
        /// The task.
        task: TaskId,
        /// Its type.
        type_name: String,
        /// The first byte that differs (the shorter length, if one is a prefix of the
        /// other).
        offset: usize,
        /// How long the first save is.
        saved_len: usize,
        /// How long the save of the restored task is.
        again_len: usize,
        /// The first save around `offset` (bytes that are not printable ASCII escaped).
        saved: String,
        /// The save of the restored task around `offset`.
        again: String,
    },
}

impl RoundTripError {
    /// The task that does not round-trip.
    pub fn task(&self) -> TaskId {
        match self {
            RoundTripError::Lossy { task, .. }
            | RoundTripError::UnknownType { task, .. }
            | RoundTripError::Restore { task, .. }
            | RoundTripError::Save { task, .. }
            | RoundTripError::Differs { task, .. } => *task,
        }
    }

    /// Its type.
    pub fn type_name(&self) -> &str {
        match self {
            RoundTripError::Lossy { type_name, .. }
            | RoundTripError::UnknownType { type_name, .. }
            | RoundTripError::Restore { type_name, .. }
            | RoundTripError::Save { type_name, .. }
            | RoundTripError::Differs { type_name, .. } => type_name,
        }
    }
}

impl TaskRegistry {
    /// Checks that `body`, the live task `task`, round-trips: its state — saved
    /// strictly (see below) — restored through the decoder registered for its type
    /// (an async task made again and replayed) and saved again is the same bytes.
    /// Returns `false` for a task that keeps nothing a snapshot can hold
    /// ([`StateError::Unsaveable`]), which is not checked, `true` for a task that
    /// round-trips. The task is not changed.
    ///
    /// Saving strictly, [`SavedTask::serde`] refuses a state holding a `Some` of
    /// something JSON writes as `null` (`Some(Value::Null)`, `Some(None)`, `Some(())`,
    /// a `Some` of a NaN): it would save as `null` and read back as `None`, and the
    /// bytes alone do not show it (the restored task saves as `null` again).
    ///
    /// # Errors
    /// A [`RoundTripError`] naming the task and its type: what is lost, that the type
    /// is not registered, what the decoder or `save` said, or where the two saves
    /// first differ.
    ///
    /// # Example
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use serde_json::Value;
    /// use spool_core::{AgentTask, Config, NewTask, SavedTask, Scheduler, StateError, Step,
    ///     TaskContext, TaskRegistry, Time};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Note { extra: Option<Value> }
    ///
    /// impl AgentTask for Note {
    ///     fn poll(&mut self, _cx: &mut TaskContext<'_>) -> Step { Step::done(self.extra.is_some()) }
    ///     fn type_name(&self) -> &'static str { "note" }
    ///     fn save(&self) -> Result<SavedTask, StateError> { SavedTask::serde(self) }
    /// }
    ///
    /// let registry = TaskRegistry::new().with_serde::<Note>("note");
    /// let mut scheduler = Scheduler::new(Config::new());
    /// let fine = Note { extra: Some(Value::from(3)) };
    /// scheduler.submit(Time::ZERO, NewTask::new(fine)).unwrap();
    /// assert_eq!(scheduler.check_round_trip(Some(&registry)), Ok(1));
    ///
    /// let lossy = Note { extra: Some(Value::Null) };
    /// let id = scheduler.submit(Time::ZERO, NewTask::new(lossy)).unwrap().id;
    /// let error = scheduler.check_round_trip(Some(&registry)).unwrap_err();
    /// assert_eq!(error.task(), id);
    /// assert_eq!(
    ///     error.to_string(),
    ///     "task 2 (type `note`) does not round-trip: `extra` is a `Some` of `null`, \
    ///      which JSON saves as `null` and reads back as `None`"
    /// );
    /// ```
    pub fn check_round_trip(
        &self,
        task: TaskId,
        body: &dyn AgentTask,
    ) -> Result<bool, RoundTripError> {
        check(Some(self), task, body)
    }
}

/// Checks `body`, the live task `task`: with a registry, as
/// [`TaskRegistry::check_round_trip`]; without one, only that its state saves strictly.
pub(crate) fn check(
    registry: Option<&TaskRegistry>,
    task: TaskId,
    body: &dyn AgentTask,
) -> Result<bool, RoundTripError> {
    let type_name = body.type_name();
    let saved = match strictly(|| body.save()) {
        Ok(saved) => saved,
        Err(StateError::Unsaveable(_)) => return Ok(false),
        Err(error) => return Err(save_error(task, type_name, error, "")),
    };
    let Some(registry) = registry else {
        return Ok(true);
    };
    let restored = match &saved {
        SavedTask::State(bytes) => registry.decode(type_name, bytes),
        SavedTask::Replay(bytes) => registry
            .rebuild_async(type_name, task, bytes)
            .map(|r| r.map_err(|e| e.to_string())),
    };
    let restored = match restored {
        None => {
            return Err(RoundTripError::UnknownType {
                task,
                type_name: type_name.to_owned(),
            });
        }
        Some(Err(reason)) => {
            return Err(RoundTripError::Restore {
                task,
                type_name: type_name.to_owned(),
                reason,
            });
        }
        Some(Ok(restored)) => restored,
    };
    let again = strictly(|| restored.save())
        .map_err(|error| save_error(task, type_name, error, "restored, "))?;
    let (saved, again) = match (&saved, &again) {
        (SavedTask::State(a), SavedTask::State(b))
        | (SavedTask::Replay(a), SavedTask::Replay(b)) => (a.as_slice(), b.as_slice()),
        // A state restored as a replay, or the other way: nothing in common.
        (
            SavedTask::State(a) | SavedTask::Replay(a),
            SavedTask::State(b) | SavedTask::Replay(b),
        ) => (a.as_slice(), &b[..0]),
    };
    match first_difference(saved, again) {
        None => Ok(true),
        Some(offset) => Err(RoundTripError::Differs {
            task,
            type_name: type_name.to_owned(),
            offset,
            saved_len: saved.len(),
            again_len: again.len(),
            saved: excerpt(saved, offset),
            again: excerpt(again, offset),
        }),
    }
}

fn save_error(task: TaskId, type_name: &str, error: StateError, when: &str) -> RoundTripError {
    let type_name = type_name.to_owned();
    match error {
        StateError::Lossy(reason) => RoundTripError::Lossy {
            task,
            type_name,
            reason: format!("{when}{reason}"),
        },
        other => RoundTripError::Save {
            task,
            type_name,
            reason: format!("{when}{other}"),
        },
    }
}

/// Where `a` and `b` first differ: a byte, or the end of the shorter.
fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(offset) => Some(offset),
        None if a.len() == b.len() => None,
        None => Some(a.len().min(b.len())),
    }
}

/// Bytes to show either side of a difference.
const EXCERPT: usize = 24;

/// `bytes` around `offset`, printable: `…` where it is cut, bytes other than printable
/// ASCII escaped (`\x00`).
fn excerpt(bytes: &[u8], offset: usize) -> String {
    let start = offset.saturating_sub(EXCERPT).min(bytes.len());
    let end = offset.saturating_add(EXCERPT).min(bytes.len());
    let mut text = String::new();
    if start > 0 {
        text.push('…');
    }
    for &byte in &bytes[start..end] {
        if byte.is_ascii_graphic() || byte == b' ' {
            text.push(char::from(byte));
        } else {
            text.extend(std::ascii::escape_default(byte).map(char::from));
        }
    }
    if end < bytes.len() {
        text.push('…');
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde::{Deserialize, Serialize};
    use serde_json::{Value, json};

    use super::*;
    use crate::scheduler::Scheduler;
    use crate::task::{NewTask, Step, TaskContext};
    use crate::time::Time;

    #[derive(Debug, Serialize, Deserialize)]
    struct Note {
        extra: Option<Value>,
        count: u32,
    }

    impl AgentTask for Note {
        fn poll(&mut self, _cx: &mut TaskContext<'_>) -> Step {
            Step::Yield
        }
        fn type_name(&self) -> &'static str {
            "note"
        }
        fn save(&self) -> Result<SavedTask, StateError> {
            SavedTask::serde(self)
        }
    }

    fn registry() -> TaskRegistry {
        TaskRegistry::new().with_serde::<Note>("note")
    }

    /// `Some(null)` saves and saves again to the same bytes, yet reads back as `None`:
    /// the strict save names it; `Some` of anything else round-trips.
    #[test]
    fn a_some_of_null_is_lossy_and_named() {
        let lossy = Note {
            extra: Some(Value::Null),
            count: 1,
        };
        assert_eq!(
            registry().check_round_trip(TaskId(4), &lossy),
            Err(RoundTripError::Lossy {
                task: TaskId(4),
                type_name: "note".into(),
                reason: "`extra` is a `Some` of `null`, which JSON saves as `null` and reads \
                         back as `None`"
                    .into(),
            })
        );
        // Outside the check, the save goes on as before.
        assert_eq!(
            lossy.save(),
            Ok(SavedTask::State(br#"{"extra":null,"count":1}"#.to_vec()))
        );
        for fine in [
            None,
            Some(json!(0)),
            Some(json!({"a": null})),
            Some(json!([null])),
        ] {
            let note = Note {
                extra: fine,
                count: 1,
            };
            assert_eq!(registry().check_round_trip(TaskId(4), &note), Ok(true));
        }
    }

    /// A decoder that does not read what `save` wrote gives other bytes, and the error
    /// shows where.
    #[test]
    fn other_bytes_after_a_restore_are_shown_where_they_differ() {
        let registry = TaskRegistry::new().with("note", |bytes| {
            let mut note: Note = SavedTask::decode_serde(bytes)?;
            note.count += 1;
            Ok(Box::new(note) as Box<dyn AgentTask>)
        });
        let note = Note {
            extra: None,
            count: 7,
        };
        let error = registry.check_round_trip(TaskId(2), &note).unwrap_err();
        assert_eq!(
            error.to_string(),
            "task 2 (type `note`) does not round-trip: saved, restored and saved again, its \
             state differs from byte 22 on (24 bytes, then 24): \
             `{\"extra\":null,\"count\":7}` became `{\"extra\":null,\"count\":8}`"
        );
        assert_eq!((error.task(), error.type_name()), (TaskId(2), "note"));
        assert_eq!(
            TaskRegistry::new().check_round_trip(TaskId(2), &note),
            Err(RoundTripError::UnknownType {
                task: TaskId(2),
                type_name: "note".into()
            })
        );
    }

    #[test]
    fn excerpts_are_cut_and_escaped() {
        let bytes: Vec<u8> = (0u8..80).collect();
        let text = excerpt(&bytes, 40);
        assert!(text.starts_with("…\\x10"), "{text}");
        assert!(
            text.ends_with(" !\"#$%&'()*+,-./0123456789:;<=>?…"),
            "{text}"
        );
        assert_eq!(first_difference(b"abc", b"abd"), Some(2));
        assert_eq!(first_difference(b"ab", b"abc"), Some(2));
        assert_eq!(first_difference(b"abc", b"abc"), None);
    }

    /// The scheduler checks every live task, skips those that keep nothing, and
    /// without a registry checks the strict save alone.
    #[test]
    fn a_scheduler_checks_its_live_tasks() {
        let mut scheduler = Scheduler::new(Default::default());
        let fine = Note {
            extra: Some(json!(1)),
            count: 0,
        };
        let fine = scheduler.submit(Time::ZERO, NewTask::new(fine)).unwrap().id;
        let closure = scheduler
            .submit(
                Time::ZERO,
                NewTask::new(crate::task::task_fn("closure", |_| Step::Yield)),
            )
            .unwrap()
            .id;
        assert_eq!(scheduler.check_round_trip(Some(&registry())), Ok(1));
        let lossy = Note {
            extra: Some(Value::Null),
            count: 0,
        };
        let id = scheduler
            .submit(Time::ZERO, NewTask::new(lossy))
            .unwrap()
            .id;
        let error = scheduler.check_round_trip(None).unwrap_err();
        assert_eq!(error.task(), id);
        assert!(matches!(error, RoundTripError::Lossy { .. }));
        assert_eq!(scheduler.check_task_round_trip(fine, None), Ok(true));
        assert_eq!(scheduler.check_task_round_trip(closure, None), Ok(false));
        assert_eq!(scheduler.check_task_round_trip(TaskId(99), None), Ok(false));
    }
}
