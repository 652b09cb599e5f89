//! Whole numbers in request bodies, written `3` or `3.0`: JSON Schema's `integer`,
//! which the OpenAPI document promises, takes a number with a zero fraction.

use serde::Deserialize;
use serde::de::Error as _;

/// A number from 0 to `u32::MAX`, written `3` or `3.0`.
pub(crate) fn u32<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let number = serde_json::Number::deserialize(d)?;
    whole(&number).ok_or_else(|| {
        D::Error::custom(format!(
            "expected a whole number from 0 to 4294967295, found {number}"
        ))
    })
}

/// As [`u32`], or `null` / absent for `None`.
pub(crate) fn optional_u32<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<u32>, D::Error> {
    let Some(number) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    whole(&number).map(Some).ok_or_else(|| {
        D::Error::custom(format!(
            "expected a whole number from 0 to 4294967295, found {number}"
        ))
    })
}

/// `number` as a `u32`, if it is a whole number in range.
fn whole(number: &serde_json::Number) -> Option<u32> {
    match number.as_u64() {
        Some(n) => ::core::primitive::u32::try_from(n).ok(),
        None => number
            .as_f64()
            .filter(|f| {
                f.fract() == 0.0 && (0.0..=f64::from(::core::primitive::u32::MAX)).contains(f)
            })
            .map(|f| f as ::core::primitive::u32),
    }
}
