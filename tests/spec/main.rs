//! When a schedule fires: hand-computed next fires (calendar rules, both daylight-saving
//! changes in two zones), catch-up after downtime, every error message, serde, and a
//! fuzz of random expressions. Instants are RFC 3339 strings, computed by hand.
#![allow(clippy::unwrap_used)]

mod dst;
mod errors;
mod fuzz;
mod last;
mod next;
mod serde;

use jiff::Timestamp;
use spool_core::{CronSpec, Spec};

/// An instant from its RFC 3339 spelling.
fn ts(text: &str) -> Timestamp {
    text.parse().unwrap()
}

/// A cron spec that must parse.
fn cron(expr: &str, tz: &str) -> Spec {
    Spec::Cron(CronSpec::parse(expr, tz).unwrap())
}

/// The next `n` fires after `start`, as RFC 3339 strings.
fn fires(spec: &Spec, start: &str, n: usize) -> Vec<String> {
    let mut at = ts(start);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        at = spec.next_after(at).unwrap();
        out.push(at.to_string());
    }
    out
}
