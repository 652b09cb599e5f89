//! Recorded answers played back to a task: what a fork reuses of its origin.
//!
//! A fork runs its task's code again from the start; each request the code makes that
//! the tape holds an answer for is answered from the tape at once, inside the
//! scheduler — never sent, never counted against a limit — and the first one it does
//! not hold goes out live. Each recorded answer carries the digest of the request it
//! answered: a request that differs (the code changed, or the fork's edited input took
//! it elsewhere) ends the playback there, and the task goes on live from that request.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::id::TaskId;
use crate::kind::Kind;
use crate::saved::SavedResult;
use crate::state::TaskState;

/// A digest of a request's payload: the same JSON value gives the same digest on any
/// machine (object keys in the order the value holds them, numbers by their text).
pub fn payload_digest(value: &Value) -> u64 {
    let mut hash = Fnv::new();
    hash.value(value);
    hash.0
}

/// A digest of a request: its kind and payload (see [`payload_digest`]). What a
/// journal keeps of the request each answer answers.
pub fn request_digest(kind: &Kind, payload: &Value) -> u64 {
    let mut hash = Fnv::new();
    hash.text(&kind.to_string());
    hash.value(payload);
    hash.0
}

/// A digest of how a task ended, and the ending in words (cut to 120 characters): a
/// value by its [`payload_digest`], an error or a cancellation by its message. `None`
/// for a state that is not an ending.
pub fn ending_digest(state: &TaskState) -> Option<(u64, String)> {
    let mut hash = Fnv::new();
    let words = match state {
        TaskState::Completed(Ok(value)) => {
            hash.bytes(b"ok");
            hash.value(value);
            value.to_string()
        }
        TaskState::Completed(Err(error)) => {
            let words = format!("error: {error}");
            hash.bytes(b"error");
            hash.text(&words);
            words
        }
        TaskState::Canceled(reason) => {
            let words = format!("canceled: {reason}");
            hash.bytes(b"canceled");
            hash.text(&words);
            words
        }
        _ => return None,
    };
    let preview = match words.char_indices().nth(120) {
        Some((end, _)) => format!("{}…", &words[..end]),
        None => words,
    };
    Some((hash.0, preview))
}

/// FNV-1a, fed a JSON value's structure with a tag byte before each part, so that
/// values of different shapes never feed the same bytes.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn bytes(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn text(&mut self, text: &str) {
        self.bytes(&(text.len() as u64).to_le_bytes());
        self.bytes(text.as_bytes());
    }

    fn value(&mut self, value: &Value) {
        match value {
            Value::Null => self.bytes(b"n"),
            Value::Bool(b) => self.bytes(if *b { b"t" } else { b"f" }),
            Value::Number(n) => {
                self.bytes(b"#");
                self.text(&n.to_string());
            }
            Value::String(s) => {
                self.bytes(b"s");
                self.text(s);
            }
            Value::Array(items) => {
                self.bytes(b"[");
                self.bytes(&(items.len() as u64).to_le_bytes());
                for item in items {
                    self.value(item);
                }
            }
            Value::Object(map) => {
                self.bytes(b"{");
                self.bytes(&(map.len() as u64).to_le_bytes());
                for (key, item) in map {
                    self.text(key);
                    self.value(item);
                }
            }
        }
    }
}

/// What a recorded answer answered: the request's kind and payload digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Asked {
    /// The request's kind.
    pub kind: Kind,
    /// [`payload_digest`] of its payload.
    pub digest: u64,
}

/// One recorded answer on a tape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TapeAnswer {
    /// The request's number within its task, from 1.
    pub request: u32,
    /// What the request was, when known: a request that differs ends the playback.
    pub asked: Option<Asked>,
    /// The answer.
    pub result: SavedResult,
    /// Tokens the provider reported.
    pub tokens_used: Option<u32>,
}

/// Recorded answers by request number, played back to a forked task, and the code
/// changes whose new branch the origin took
/// ([`patched`](crate::TaskContext::patched)): while the tape plays, the fork takes
/// the origin's branches (the old one of a change the origin never asked about).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tape {
    /// The answers, by request number (each number once).
    answers: Vec<TapeAnswer>,
    /// The changes whose new branch the origin took.
    patches: Vec<String>,
}

impl Tape {
    /// A tape of `answers`; a later answer to the same request number replaces an
    /// earlier one.
    pub fn new(answers: impl IntoIterator<Item = TapeAnswer>) -> Tape {
        let mut tape = Tape::default();
        for answer in answers {
            tape.put(answer);
        }
        tape
    }

    /// Puts `answer` on the tape, replacing one to the same request.
    pub fn put(&mut self, answer: TapeAnswer) {
        match self
            .answers
            .binary_search_by_key(&answer.request, |a| a.request)
        {
            Ok(at) => self.answers[at] = answer,
            Err(at) => self.answers.insert(at, answer),
        }
    }

    /// The answers, by request number.
    pub fn answers(&self) -> &[TapeAnswer] {
        &self.answers
    }

    /// The tape with the origin's code-change decisions: the names of the changes
    /// whose new branch it took.
    #[must_use]
    pub fn with_patches(mut self, patches: Vec<String>) -> Tape {
        self.patches = patches;
        self
    }

    /// While answers are left, the changes whose new branch the origin took; `None`
    /// once the tape is played out (the fork then decides as a live run).
    pub(crate) fn playing_patches(&self) -> Option<&[String]> {
        (!self.answers.is_empty()).then_some(&self.patches[..])
    }

    /// While answers are left, the branch the origin took for the change `name`.
    pub(crate) fn branch(&self, name: &str) -> Option<bool> {
        self.playing_patches()
            .map(|names| names.iter().any(|n| n == name))
    }

    /// Whether no answer is left.
    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }

    /// The answer to request `number`, if the tape holds one.
    pub(crate) fn get(&self, number: u32) -> Option<&TapeAnswer> {
        let at = self
            .answers
            .binary_search_by_key(&number, |a| a.request)
            .ok()?;
        self.answers.get(at)
    }

    /// Takes the answer to request `number` off the tape.
    pub(crate) fn take(&mut self, number: u32) -> Option<TapeAnswer> {
        let at = self
            .answers
            .binary_search_by_key(&number, |a| a.request)
            .ok()?;
        Some(self.answers.remove(at))
    }

    /// Drops every answer: the task goes on live.
    pub(crate) fn clear(&mut self) {
        self.answers.clear();
    }
}

/// Where a fork comes from: the task and the step (poll, from 0) it was forked at.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOrigin {
    /// The task it was forked from.
    pub task: TaskId,
    /// The step of that task's history it starts from.
    pub step: u32,
}

/// What a forked task keeps: where it comes from, the answers left on its tape, and
/// how the playback went.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ForkState {
    pub(crate) origin: ForkOrigin,
    pub(crate) tape: Tape,
    pub(crate) playback: Playback,
}

/// How a fork's playback went: what it took from the tape, and where it went live
/// because its code asked for something other than what was recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Playback {
    /// Answers taken from the tape.
    pub played: u32,
    /// The request that differed from the recorded one, if one did: the playback
    /// stopped there and the task went on live.
    pub diverged_at: Option<u32>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn digests_tell_shapes_apart_and_are_stable() {
        let a = payload_digest(&json!({"messages": [{"role": "user", "content": "hi"}]}));
        assert_eq!(
            a,
            payload_digest(&json!({"messages": [{"role": "user", "content": "hi"}]}))
        );
        assert_ne!(
            a,
            payload_digest(&json!({"messages": [{"role": "user", "content": "ho"}]}))
        );
        assert_ne!(payload_digest(&json!("1")), payload_digest(&json!(1)));
        assert_ne!(
            payload_digest(&json!(["a", "b"])),
            payload_digest(&json!(["ab"]))
        );
        assert_ne!(payload_digest(&json!(null)), payload_digest(&json!(false)));
        // Pinned: journals keep digests, so they must not change between builds.
        assert_eq!(payload_digest(&json!({"q": 1})), 0xda2e_19c6_bf23_49d2);
    }

    #[test]
    fn a_tape_keeps_one_answer_per_request_in_order() {
        let answer = |request, text: &str| TapeAnswer {
            request,
            asked: None,
            result: SavedResult::Ok(text.to_owned()),
            tokens_used: None,
        };
        let mut tape = Tape::new([answer(3, "\"c\""), answer(1, "\"a\""), answer(3, "\"C\"")]);
        assert_eq!(
            tape.answers().iter().map(|a| a.request).collect::<Vec<_>>(),
            [1, 3]
        );
        assert_eq!(
            tape.take(3).unwrap().result,
            SavedResult::Ok("\"C\"".into())
        );
        assert_eq!(tape.take(2), None);
        assert!(!tape.is_empty());
        tape.clear();
        assert!(tape.is_empty());
    }
}
