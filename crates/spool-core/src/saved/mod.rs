//! What a task's body is saved as — its state, or an async task's replay log — and
//! why that can fail; and the saved forms of answers and outcomes (values as JSON
//! text) that journals, snapshots and replay logs keep.

pub(crate) mod strict;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::request::RequestError;
use crate::state::TaskError;

/// What a snapshot keeps of a live task's body.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SavedTask {
    /// An explicit task's fields, encoded by the task (usually with serde; see
    /// [`SavedTask::serde`]), rebuilt by the decoder registered for its type.
    State(Vec<u8>),
    /// An async task's input and the record of its polls, replayed on restore through
    /// the constructor registered with
    /// [`TaskRegistry::with_async`](crate::TaskRegistry::with_async).
    Replay(Vec<u8>),
}

/// Why a task's state could not be saved, or read back.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The task keeps nothing a snapshot can hold (a closure, a handle to the outside
    /// world): [`AgentTask::save`](crate::AgentTask::save)'s default.
    #[error("{0}")]
    Unsaveable(String),
    /// Its state did not encode.
    #[error("its state did not encode: {0}")]
    Encode(String),
    /// The saved bytes are not its state (saved by another version of the type, or
    /// damaged).
    #[error("its saved state does not decode: {0}")]
    Decode(String),
    /// Its state would not read back as it is (a `Some(null)` that JSON saves as
    /// `null`, which reads back as `None`): only while the round-trip check saves it
    /// ([`TaskRegistry::check_round_trip`](crate::TaskRegistry::check_round_trip)).
    #[error("{0}")]
    Lossy(String),
}

impl SavedTask {
    /// An explicit task's fields, encoded with serde as JSON: self-describing, so a
    /// task's state may hold `serde_json::Value`s (an agent's conversation usually
    /// does), which a compact binary format could not carry.
    ///
    /// # Errors
    /// [`StateError::Encode`] with the serializer's message, if the value cannot be
    /// encoded. While the round-trip check saves the task
    /// ([`TaskRegistry::check_round_trip`](crate::TaskRegistry::check_round_trip)),
    /// [`StateError::Lossy`] for a value holding a `Some` of something JSON writes as
    /// `null`, which would read back as `None`.
    pub fn serde<T: Serialize>(task: &T) -> Result<SavedTask, StateError> {
        if strict::strict()
            && let Some(reason) = strict::lossy(task)
        {
            return Err(StateError::Lossy(reason));
        }
        serde_json::to_vec(task)
            .map(SavedTask::State)
            .map_err(|e| StateError::Encode(e.to_string()))
    }

    /// An explicit task's fields, encoded with serde in compact binary (postcard, behind
    /// one tag byte): several times smaller and faster than JSON for plain data —
    /// numbers, strings, vectors, enums, structs. Not for a state that holds
    /// `serde_json::Value`s (they do not read back from a binary format): use
    /// [`SavedTask::serde`] for those. [`SavedTask::decode_serde`] reads either.
    ///
    /// # Errors
    /// [`StateError::Encode`] with the serializer's message, if the value cannot be
    /// encoded.
    pub fn binary<T: Serialize>(task: &T) -> Result<SavedTask, StateError> {
        postcard::to_extend(task, vec![BINARY_TAG])
            .map(SavedTask::State)
            .map_err(|e| StateError::Encode(e.to_string()))
    }

    /// Reads back what [`SavedTask::serde`] or [`SavedTask::binary`] wrote (a binary
    /// state starts with a tag byte no JSON text starts with). Decoding binary never
    /// holds more than a small multiple of the bytes, whatever their lengths say.
    ///
    /// # Errors
    /// [`StateError::Decode`] with the deserializer's message, for bytes that are not a
    /// `T`.
    pub fn decode_serde<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StateError> {
        match bytes.split_first() {
            Some((&BINARY_TAG, rest)) => {
                let (value, after) = crate::bounded::take_from_postcard::<T>(rest)
                    .map_err(|e| StateError::Decode(e.to_string()))?;
                if !after.is_empty() {
                    return Err(StateError::Decode(format!(
                        "{} bytes follow the state",
                        after.len()
                    )));
                }
                Ok(value)
            }
            _ => serde_json::from_slice(bytes).map_err(|e| StateError::Decode(e.to_string())),
        }
    }
}

/// The first byte of a state [`SavedTask::binary`] wrote: not valid UTF-8 on its own, so
/// no JSON text starts with it.
const BINARY_TAG: u8 = 0xB1;

/// An answer's result as a journal keeps it (values as JSON text).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SavedResult {
    /// A value, as JSON text.
    Ok(String),
    /// The executor's error.
    Err(RequestError),
}

impl SavedResult {
    pub(crate) fn of(result: &Result<Value, RequestError>) -> SavedResult {
        match result {
            Ok(value) => SavedResult::Ok(serde_json::to_string(value).unwrap_or_default()),
            Err(error) => SavedResult::Err(error.clone()),
        }
    }

    pub(crate) fn to_result(&self) -> Result<Result<Value, RequestError>, String> {
        match self {
            SavedResult::Ok(text) => serde_json::from_str(text)
                .map(Ok)
                .map_err(|e| format!("an answer in the journal is not JSON: {e}")),
            SavedResult::Err(error) => Ok(Err(error.clone())),
        }
    }
}

/// A task's outcome, its value as JSON text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum OutcomeRecord {
    Ok(String),
    Err(TaskError),
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Plain {
        step: u32,
        answers: Vec<String>,
        done: Option<bool>,
    }

    fn state(saved: SavedTask) -> Vec<u8> {
        match saved {
            SavedTask::State(bytes) => bytes,
            SavedTask::Replay(_) => panic!("not a state"),
        }
    }

    #[test]
    fn binary_state_reads_back_and_is_smaller_than_json() {
        let plain = Plain {
            step: 3,
            answers: vec!["four".into(), "five".into()],
            done: None,
        };
        let binary = state(SavedTask::binary(&plain).unwrap());
        let json = state(SavedTask::serde(&plain).unwrap());
        assert_eq!(binary[0], BINARY_TAG);
        assert_eq!(binary.len(), 1 + 1 + 1 + 5 + 5 + 1);
        assert!(
            binary.len() * 3 < json.len(),
            "{} vs {}",
            binary.len(),
            json.len()
        );
        assert_eq!(SavedTask::decode_serde::<Plain>(&binary).unwrap(), plain);
        assert_eq!(SavedTask::decode_serde::<Plain>(&json).unwrap(), plain);
    }

    #[test]
    fn damaged_binary_state_is_a_decode_error() {
        let plain = Plain {
            step: 1,
            answers: vec!["x".into()],
            done: Some(true),
        };
        let mut bytes = state(SavedTask::binary(&plain).unwrap());
        bytes.push(7);
        assert_eq!(
            SavedTask::decode_serde::<Plain>(&bytes).unwrap_err(),
            StateError::Decode("1 bytes follow the state".into())
        );
        bytes.truncate(3);
        assert!(matches!(
            SavedTask::decode_serde::<Plain>(&bytes),
            Err(StateError::Decode(_))
        ));
        // A length prefix claiming a million answers fails as the input runs out.
        let huge = [BINARY_TAG, 1, 0xC0, 0x84, 0x3D];
        assert!(matches!(
            SavedTask::decode_serde::<Plain>(&huge),
            Err(StateError::Decode(_))
        ));
    }

    /// A `serde_json::Value` encodes in binary but does not read back: such a state
    /// is saved with `SavedTask::serde`.
    #[test]
    fn a_value_needs_json() {
        let value = json!({"role": "user"});
        let binary = state(SavedTask::binary(&value).unwrap());
        assert!(SavedTask::decode_serde::<serde_json::Value>(&binary).is_err());
        let json = state(SavedTask::serde(&value).unwrap());
        assert_eq!(
            SavedTask::decode_serde::<serde_json::Value>(&json).unwrap(),
            value
        );
    }
}
