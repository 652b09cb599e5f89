//! Payloads: the JSON a request carries, shared instead of copied.
//!
//! The scheduler keeps a copy of every request in flight (to list it, to snapshot it,
//! to send it again after a restore) while the executor works on another. A scalar is
//! copied; anything larger — an LLM conversation — is shared behind an `Arc`, so the
//! copy costs a reference count, never a deep clone of the conversation.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A request's JSON payload, cheap to clone whatever its size. Reads as a [`Value`]
/// through `Deref`; [`into_value`](Payload::into_value) takes it out.
///
/// # Example
/// ```
/// use serde_json::json;
/// use spool_core::Payload;
///
/// let p = Payload::from(json!({"prompt": "hi"}));
/// assert_eq!(p["prompt"], "hi");
/// let copy = p.clone(); // shares, does not copy the object
/// assert_eq!(copy.into_value(), json!({"prompt": "hi"}));
/// ```
#[derive(Clone)]
pub struct Payload(Repr);

#[derive(Clone)]
enum Repr {
    Inline(Value),
    Shared(Arc<Value>),
}

impl Payload {
    /// The payload as a JSON value.
    pub fn value(&self) -> &Value {
        match &self.0 {
            Repr::Inline(v) => v,
            Repr::Shared(v) => v,
        }
    }

    /// Takes the value out; clones it only if another copy still shares it.
    pub fn into_value(self) -> Value {
        match self.0 {
            Repr::Inline(v) => v,
            Repr::Shared(v) => Arc::try_unwrap(v).unwrap_or_else(|shared| (*shared).clone()),
        }
    }
}

impl From<Value> for Payload {
    fn from(value: Value) -> Payload {
        match value {
            Value::Null | Value::Bool(_) | Value::Number(_) => Payload(Repr::Inline(value)),
            other => Payload(Repr::Shared(Arc::new(other))),
        }
    }
}

impl From<Payload> for Value {
    fn from(payload: Payload) -> Value {
        payload.into_value()
    }
}

impl Deref for Payload {
    type Target = Value;
    fn deref(&self) -> &Value {
        self.value()
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.value() == other.value()
    }
}

impl PartialEq<Value> for Payload {
    fn eq(&self, other: &Value) -> bool {
        self.value() == other
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.value(), f)
    }
}

impl fmt::Display for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.value(), f)
    }
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Payload, D::Error> {
        Value::deserialize(d).map(Payload::from)
    }
}
