//! The one path untrusted postcard goes through: decoding that holds no more than a
//! small multiple of its input.
//!
//! postcard reads a collection's length from the input and tells serde, through
//! `SeqAccess::size_hint` / `MapAccess::size_hint`; serde's `Vec` (and `HashMap`, ...)
//! then allocates that many elements up front (up to 1 MiB of them). postcard caps the
//! count at the bytes left, but not their size: a damaged length prefix in a 600-byte
//! snapshot made the decoder allocate room for 600 task records, some 80 kB, before it
//! found the input ran out.
//!
//! [`from_postcard`] wraps postcard's deserializer in [`Bounded`], which forwards every
//! call unchanged except that every sequence and map reports no size hint. Collections
//! then grow as their elements are actually decoded — each of which the input holds —
//! so what a decode holds is at most about twice what it has decoded, whatever the
//! length prefixes say. The wrapper wraps every nested deserializer (elements, map
//! keys and values, `Some`, newtypes, enum variants), so the rule holds at any depth.
//! Errors are postcard's own, unchanged.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, Visitor};

/// Decodes a `T` from postcard `bytes` with every collection grown as it is read, never
/// preallocated from a length prefix. Like `postcard::from_bytes`, bytes after the
/// value are not looked at.
///
/// # Errors
/// postcard's error for bytes that are not a `T`.
pub(crate) fn from_postcard<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> postcard::Result<T> {
    let mut deserializer = postcard::Deserializer::from_bytes(bytes);
    T::deserialize(Bounded(&mut deserializer))
}

/// As [`from_postcard`], and the bytes after the value.
///
/// # Errors
/// postcard's error for bytes that do not start with a `T`.
pub(crate) fn take_from_postcard<'a, T: Deserialize<'a>>(
    bytes: &'a [u8],
) -> postcard::Result<(T, &'a [u8])> {
    let mut deserializer = postcard::Deserializer::from_bytes(bytes);
    let value = T::deserialize(Bounded(&mut deserializer))?;
    Ok((value, deserializer.finalize()?))
}

/// A deserializer that forwards to `D`, with no size hints for sequences and maps.
struct Bounded<D>(D);

/// A visitor that forwards to `V`, handing it bounded accessors and deserializers.
struct Wrap<V>(V);

/// A seed that deserializes from a bounded deserializer.
struct Seed<S>(S);

/// A sequence, with no size hint.
struct Seq<A>(A);

/// A map, with no size hint.
struct Map<A>(A);

/// An enum's variant, read through bounded deserializers.
struct Enum<A>(A);

/// Forwards `deserialize_*` methods that take only a visitor.
macro_rules! forward {
    ($($method:ident)*) => {$(
        #[inline]
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.0.$method(Wrap(visitor))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Bounded<D> {
    type Error = D::Error;

    forward! {
        deserialize_any deserialize_bool
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
        deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_option deserialize_unit deserialize_seq deserialize_map
        deserialize_identifier deserialize_ignored_any
    }

    #[inline]
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_unit_struct(name, Wrap(visitor))
    }

    #[inline]
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_newtype_struct(name, Wrap(visitor))
    }

    #[inline]
    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple(len, Wrap(visitor))
    }

    #[inline]
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple_struct(name, len, Wrap(visitor))
    }

    #[inline]
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_struct(name, fields, Wrap(visitor))
    }

    #[inline]
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_enum(name, variants, Wrap(visitor))
    }

    #[inline]
    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// Forwards `visit_*` methods that take one plain value.
macro_rules! forward_visit {
    ($($method:ident($ty:ty))*) => {$(
        #[inline]
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.0.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.expecting(f)
    }

    forward_visit! {
        visit_bool(bool)
        visit_i8(i8) visit_i16(i16) visit_i32(i32) visit_i64(i64) visit_i128(i128)
        visit_u8(u8) visit_u16(u16) visit_u32(u32) visit_u64(u64) visit_u128(u128)
        visit_f32(f32) visit_f64(f64) visit_char(char)
        visit_str(&str) visit_borrowed_str(&'de str) visit_string(String)
        visit_bytes(&[u8]) visit_borrowed_bytes(&'de [u8]) visit_byte_buf(Vec<u8>)
    }

    #[inline]
    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_none()
    }

    #[inline]
    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_unit()
    }

    #[inline]
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.0.visit_some(Bounded(deserializer))
    }

    #[inline]
    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<V::Value, D::Error> {
        self.0.visit_newtype_struct(Bounded(deserializer))
    }

    #[inline]
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.0.visit_seq(Seq(seq))
    }

    #[inline]
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(Map(map))
    }

    #[inline]
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.0.visit_enum(Enum(data))
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;

    #[inline]
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Bounded(deserializer))
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Seq<A> {
    type Error = A::Error;

    #[inline]
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(Seed(seed))
    }

    /// None: the length prefix is not trusted to size an allocation.
    #[inline]
    fn size_hint(&self) -> Option<usize> {
        None
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Map<A> {
    type Error = A::Error;

    #[inline]
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.0.next_key_seed(Seed(seed))
    }

    #[inline]
    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.0.next_value_seed(Seed(seed))
    }

    #[inline]
    fn next_entry_seed<K: DeserializeSeed<'de>, T: DeserializeSeed<'de>>(
        &mut self,
        key: K,
        value: T,
    ) -> Result<Option<(K::Value, T::Value)>, A::Error> {
        self.0.next_entry_seed(Seed(key), Seed(value))
    }

    /// None: the length prefix is not trusted to size an allocation.
    #[inline]
    fn size_hint(&self) -> Option<usize> {
        None
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Enum<A> {
    type Error = A::Error;
    type Variant = Enum<A::Variant>;

    #[inline]
    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self::Variant), A::Error> {
        self.0
            .variant_seed(Seed(seed))
            .map(|(value, variant)| (value, Enum(variant)))
    }
}

impl<'de, A: de::VariantAccess<'de>> de::VariantAccess<'de> for Enum<A> {
    type Error = A::Error;

    #[inline]
    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }

    #[inline]
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.0.newtype_variant_seed(Seed(seed))
    }

    #[inline]
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, Wrap(visitor))
    }

    #[inline]
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.0.struct_variant(fields, Wrap(visitor))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Serialize};

    use super::from_postcard;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Shape {
        Unit,
        New(Vec<u16>),
        Tuple(u8, Option<String>),
        Struct {
            map: BTreeMap<String, i64>,
            raw: Vec<u8>,
        },
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Every {
        shapes: Vec<Shape>,
        keyed: BTreeMap<u32, (bool, char)>,
        wide: (i128, u128, f32, f64),
        newtype: Wrapper,
        unit: (),
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Wrapper(Option<Box<Wrapper>>);

    fn every() -> Every {
        Every {
            shapes: vec![
                Shape::Unit,
                Shape::New(vec![1, 300, 65535]),
                Shape::Tuple(7, Some("text".to_owned())),
                Shape::Tuple(8, None),
                Shape::Struct {
                    map: [("a".to_owned(), -1), ("b".to_owned(), i64::MAX)].into(),
                    raw: vec![0, 255],
                },
            ],
            keyed: [(1, (true, 'é')), (2, (false, 'z'))].into(),
            wide: (i128::MIN, u128::MAX, 1.5, -2.25),
            newtype: Wrapper(Some(Box::new(Wrapper(None)))),
            unit: (),
        }
    }

    /// Every shape serde has reads back as `postcard::from_bytes` reads it.
    #[test]
    fn reads_what_postcard_reads() {
        let bytes = postcard::to_allocvec(&every()).expect("encodes");
        let bounded: Every = from_postcard(&bytes).expect("decodes");
        let plain: Every = postcard::from_bytes(&bytes).expect("decodes");
        assert_eq!(bounded, every());
        assert_eq!(plain, bounded);
    }

    /// Damaged bytes fail with postcard's own errors, at every truncation.
    #[test]
    fn fails_as_postcard_fails() {
        let bytes = postcard::to_allocvec(&every()).expect("encodes");
        for end in 0..bytes.len() {
            let bounded = from_postcard::<Every>(&bytes[..end]).map_err(|e| e.to_string());
            let plain = postcard::from_bytes::<Every>(&bytes[..end]).map_err(|e| e.to_string());
            assert_eq!(bounded, plain, "truncated at {end}");
        }
    }

    /// A huge length prefix is no longer a huge allocation: the count is read, and the
    /// elements run out.
    #[test]
    fn a_huge_length_prefix_fails_cleanly() {
        // A `Vec<[u64; 32]>` claiming 2^32 - 1 elements, with one byte after.
        let bytes = [0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x00];
        assert!(from_postcard::<Vec<[u64; 32]>>(&bytes).is_err());
        assert!(from_postcard::<BTreeMap<u64, u64>>(&bytes).is_err());
    }
}
