//! Strict saves: while the round-trip check saves a task, a state holding a `Some` of
//! something JSON writes as `null` is refused, since `null` reads back as `None` and a
//! second save cannot show what the first lost. A serializer that only walks the value
//! finds where.

use std::cell::Cell;
use std::fmt;

use serde::Serialize;
use serde::ser;

thread_local! {
    /// Whether saves on this thread are strict: set only while the check saves a task.
    static STRICT: Cell<bool> = const { Cell::new(false) };
}

/// Runs `save` with strict saves on (see [`lossy`]), as they were after it, even if it
/// panics.
pub(crate) fn strictly<R>(save: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            STRICT.with(|strict| strict.set(self.0));
        }
    }
    let _restore = Restore(STRICT.with(|strict| strict.replace(true)));
    save()
}

/// Whether the round-trip check is saving a task on this thread.
pub(crate) fn strict() -> bool {
    STRICT.with(Cell::get)
}

/// Where `value` holds a `Some` of something JSON writes as `null`, and what that
/// loses; `None` if it holds none. (What the value's own `Serialize` refuses is left to
/// the save that follows, which says so.)
pub(crate) fn lossy<T: Serialize + ?Sized>(value: &T) -> Option<String> {
    match value.serialize(Probe) {
        Err(ProbeError::Lossy(mut path)) => {
            path.reverse();
            let at = if path.is_empty() {
                "the state".to_owned()
            } else {
                let joined: String = path.concat();
                format!("`{}`", joined.trim_start_matches('.'))
            };
            Some(format!(
                "{at} is a `Some` of `null`, which JSON saves as `null` and reads back as `None`"
            ))
        }
        Ok(_) | Err(ProbeError::Other(_)) => None,
    }
}

/// What the probe stopped at: a `Some` of a `null` (with the path to it, innermost
/// first), or an error of the value's own.
#[derive(Debug)]
enum ProbeError {
    Lossy(Vec<String>),
    Other(String),
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::Lossy(path) => write!(f, "a `Some` of `null` at {path:?}"),
            ProbeError::Other(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for ProbeError {}

impl ser::Error for ProbeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        ProbeError::Other(msg.to_string())
    }
}

impl ProbeError {
    /// The error with `segment` added to its path, on the way out.
    fn at(self, segment: impl FnOnce() -> String) -> ProbeError {
        match self {
            ProbeError::Lossy(mut path) => {
                path.push(segment());
                ProbeError::Lossy(path)
            }
            other => other,
        }
    }
}

/// A serializer that writes nothing: it walks a value as serde_json would write it,
/// and says whether each part is written as `null`, stopping at a `Some` of one.
struct Probe;

/// A compound value being walked: the index of its next element, the key of its
/// map entry.
struct Walk {
    index: usize,
    key: Option<String>,
}

impl Walk {
    fn new() -> Walk {
        Walk {
            index: 0,
            key: None,
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ProbeError> {
        let index = self.index;
        self.index += 1;
        value
            .serialize(Probe)
            .map(|_| ())
            .map_err(|e| e.at(|| format!("[{index}]")))
    }

    fn field<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Result<(), ProbeError> {
        value
            .serialize(Probe)
            .map(|_| ())
            .map_err(|e| e.at(|| format!(".{name}")))
    }
}

type Done = Result<bool, ProbeError>;

impl ser::Serializer for Probe {
    type Ok = bool;
    type Error = ProbeError;
    type SerializeSeq = Walk;
    type SerializeTuple = Walk;
    type SerializeTupleStruct = Walk;
    type SerializeTupleVariant = Walk;
    type SerializeMap = Walk;
    type SerializeStruct = Walk;
    type SerializeStructVariant = Walk;

    fn serialize_bool(self, _: bool) -> Done {
        Ok(false)
    }
    fn serialize_i8(self, _: i8) -> Done {
        Ok(false)
    }
    fn serialize_i16(self, _: i16) -> Done {
        Ok(false)
    }
    fn serialize_i32(self, _: i32) -> Done {
        Ok(false)
    }
    fn serialize_i64(self, _: i64) -> Done {
        Ok(false)
    }
    fn serialize_i128(self, _: i128) -> Done {
        Ok(false)
    }
    fn serialize_u8(self, _: u8) -> Done {
        Ok(false)
    }
    fn serialize_u16(self, _: u16) -> Done {
        Ok(false)
    }
    fn serialize_u32(self, _: u32) -> Done {
        Ok(false)
    }
    fn serialize_u64(self, _: u64) -> Done {
        Ok(false)
    }
    fn serialize_u128(self, _: u128) -> Done {
        Ok(false)
    }
    // JSON writes a NaN or an infinity as `null`.
    fn serialize_f32(self, v: f32) -> Done {
        Ok(!v.is_finite())
    }
    fn serialize_f64(self, v: f64) -> Done {
        Ok(!v.is_finite())
    }
    fn serialize_char(self, _: char) -> Done {
        Ok(false)
    }
    fn serialize_str(self, _: &str) -> Done {
        Ok(false)
    }
    fn serialize_bytes(self, _: &[u8]) -> Done {
        Ok(false)
    }
    fn serialize_none(self) -> Done {
        Ok(true)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Done {
        if value.serialize(Probe)? {
            return Err(ProbeError::Lossy(Vec::new()));
        }
        Ok(false)
    }
    fn serialize_unit(self) -> Done {
        Ok(true)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Done {
        Ok(true)
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Done {
        Ok(false)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Done {
        value.serialize(Probe)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Done {
        value
            .serialize(Probe)
            .map(|_| false)
            .map_err(|e| e.at(|| format!(".{variant}")))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Walk, ProbeError> {
        Ok(Walk::new())
    }
    fn serialize_tuple(self, _: usize) -> Result<Walk, ProbeError> {
        Ok(Walk::new())
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Walk, ProbeError> {
        Ok(Walk::new())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Walk, ProbeError> {
        Ok(Walk {
            index: 0,
            key: Some(variant.to_owned()),
        })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Walk, ProbeError> {
        Ok(Walk::new())
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Walk, ProbeError> {
        Ok(Walk::new())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Walk, ProbeError> {
        Ok(Walk {
            index: 0,
            key: Some(variant.to_owned()),
        })
    }
}

impl ser::SerializeSeq for Walk {
    type Ok = bool;
    type Error = ProbeError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ProbeError> {
        self.element(value)
    }
    fn end(self) -> Done {
        Ok(false)
    }
}

impl ser::SerializeTuple for Walk {
    type Ok = bool;
    type Error = ProbeError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ProbeError> {
        self.element(value)
    }
    fn end(self) -> Done {
        Ok(false)
    }
}

impl ser::SerializeTupleStruct for Walk {
    type Ok = bool;
    type Error = ProbeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ProbeError> {
        self.element(value)
    }
    fn end(self) -> Done {
        Ok(false)
    }
}

impl ser::SerializeTupleVariant for Walk {
    type Ok = bool;
    type Error = ProbeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ProbeError> {
        let variant = self.key.clone().unwrap_or_default();
        self.element(value)
            .map_err(|e| e.at(|| format!(".{variant}")))
    }
    fn end(self) -> Done {
        Ok(false)
    }
}

impl ser::SerializeMap for Walk {
    type Ok = bool;
    type Error = ProbeError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), ProbeError> {
        // Keys are strings in JSON; the text names the entry in a message.
        self.key = serde_json::to_string(key).ok();
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ProbeError> {
        let key = self.key.take().unwrap_or_default();
        value
            .serialize(Probe)
            .map(|_| ())
            .map_err(|e| e.at(|| format!("[{key}]")))
    }
    fn end(self) -> Done {
        Ok(false)
    }
}

impl ser::SerializeStruct for Walk {
    type Ok = bool;
    type Error = ProbeError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), ProbeError> {
        self.field(name, value)
    }
    fn end(self) -> Done {
        Ok(false)
    }
}

impl ser::SerializeStructVariant for Walk {
    type Ok = bool;
    type Error = ProbeError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), ProbeError> {
        let variant = self.key.clone().unwrap_or_default();
        self.field(name, value)
            .map_err(|e| e.at(|| format!(".{variant}")))
    }
    fn end(self) -> Done {
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Serialize;

    use super::lossy;

    #[test]
    fn lossy_names_the_path_to_a_nested_some() {
        #[derive(Serialize)]
        enum Stage {
            Calls(Vec<Option<Option<u32>>>),
        }
        let mut by_key = BTreeMap::new();
        by_key.insert("k", Stage::Calls(vec![Some(Some(1)), Some(None)]));
        assert_eq!(
            lossy(&by_key).as_deref(),
            Some(
                "`[\"k\"].Calls[1]` is a `Some` of `null`, which JSON saves as `null` and \
                 reads back as `None`"
            )
        );
        assert_eq!(
            lossy(&Some(f64::NAN)).map(|r| r.starts_with("the state")),
            Some(true)
        );
        assert_eq!(lossy(&Some(1.5f64)), None);
    }
}
