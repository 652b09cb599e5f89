//! The conformance suite of spool's durable backends: every backend keeps the same
//! promises ([`spool_durable::DurableStore`]), checked here by the same cases, one
//! `#[test]` per case and backend (`conformance!` in each backend's module).

#![allow(clippy::unwrap_used)]

pub mod postgres;
pub mod sqlite;
pub mod suite;

use spool_durable::{DurableError, DurableStore};
use suite::Options;

/// Opens the store a locator names (what [`suite::Backend::locate`] gave, passed to a
/// child process): `sqlite:PATH` or `postgres:URL`. Panics if it cannot.
pub fn open_located(locator: &str, options: &Options) -> Box<dyn DurableStore> {
    try_open_located(locator, options).unwrap_or_else(|e| panic!("cannot open {locator}: {e}"))
}

/// As [`open_located`], returning the backend's error.
///
/// # Errors
/// The backend's, as its `open` gives it.
pub fn try_open_located(
    locator: &str,
    options: &Options,
) -> Result<Box<dyn DurableStore>, DurableError> {
    if let Some(url) = locator.strip_prefix("postgres:") {
        return postgres::open_url(url, options);
    }
    if let Some(path) = locator.strip_prefix("sqlite:") {
        return sqlite::open_path(std::path::Path::new(path), options);
    }
    panic!("a locator of no backend: {locator}")
}
