//! The conformance suite of spool's durable backends: every backend keeps the same
//! promises ([`spool_durable::DurableStore`]), checked here by the same cases, one
//! `#[test]` per case and backend (`conformance!` in each backend's module).

#![allow(clippy::unwrap_used)]

pub mod postgres;
pub mod sqlite;
pub mod suite;

use spool_durable::DurableStore;
use suite::Options;

/// Opens the store a locator names (what [`suite::Backend::locate`] gave, passed to a
/// child process): `sqlite:PATH` or `postgres:URL`.
pub fn open_located(locator: &str, options: &Options) -> Box<dyn DurableStore> {
    if let Some(url) = locator.strip_prefix("postgres:") {
        return postgres::open_url(url, options)
            .unwrap_or_else(|e| panic!("cannot open {locator}: {e}"));
    }
    if let Some(path) = locator.strip_prefix("sqlite:") {
        return sqlite::open_path(std::path::Path::new(path), options)
            .unwrap_or_else(|e| panic!("cannot open {locator}: {e}"));
    }
    panic!("a locator of no backend: {locator}")
}
