//! A request's fingerprint: what an idempotency key is kept with, so that a key used
//! again for a different request is told apart from a repeat of the same one.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A 128-bit digest of what defines a request (BLAKE3, truncated), kept with its
/// [key](crate::NewTask::key). Two submissions with one key and equal fingerprints are
/// the same request (the second is told of the first's task); with different ones,
/// the key was reused for a different request
/// ([`RejectReason::KeyReused`](crate::RejectReason::KeyReused)).
///
/// # Example
/// ```
/// use serde_json::json;
/// use spool_core::Fingerprint;
///
/// // Object members are taken in key order: the same request however it was written.
/// let a = Fingerprint::of_json(&json!({"type": "echo", "input": {"a": 1, "b": 2}}));
/// let b = Fingerprint::of_json(&json!({"input": {"b": 2, "a": 1}, "type": "echo"}));
/// assert_eq!(a, b);
/// assert_ne!(a, Fingerprint::of_json(&json!({"type": "echo", "input": {"a": 2}})));
/// assert_eq!(a.to_string().len(), 32);
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Fingerprint(pub [u8; 16]);

impl Fingerprint {
    /// The fingerprint of `bytes`.
    pub fn of(bytes: &[u8]) -> Fingerprint {
        let hash = blake3::hash(bytes);
        let mut out = [0u8; 16];
        out.copy_from_slice(&hash.as_bytes()[..16]);
        Fingerprint(out)
    }

    /// The fingerprint of `value` in its canonical form: compact JSON with every
    /// object's members sorted by key, so that the order a client wrote them in does
    /// not count.
    pub fn of_json(value: &Value) -> Fingerprint {
        let mut text = String::new();
        canonical(value, &mut text);
        Fingerprint::of(text.as_bytes())
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Writes `value` as compact JSON with object members sorted by key.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, member)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(member, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_canonical_form_sorts_members_at_every_depth() {
        let mut text = String::new();
        canonical(&json!({"b": [{"z": 1, "y": "x"}], "a": null}), &mut text);
        assert_eq!(text, r#"{"a":null,"b":[{"y":"x","z":1}]}"#);
    }

    #[test]
    fn a_fingerprint_is_the_first_half_of_the_blake3_digest() {
        assert_eq!(
            Fingerprint::of(b"").to_string(),
            "af1349b9f5f9a1a6a0404dea36dcc949"
        );
    }
}
