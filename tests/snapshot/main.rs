//! Snapshots: round trips, restores that go on as the original would, bad bytes.
#![allow(clippy::unwrap_used)]

mod agent_limits;
mod backoff;
mod bad_input;
mod fingerprints;
mod limits;
mod resend;
mod resume;
mod round_trip;
mod tasks;
