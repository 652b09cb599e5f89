//! The HTTP API over loopback with a real client: a runtime with a scripted LLM and a
//! task type of the test's own, journaled to memory (with its trace) so that what the
//! server says can be checked against what the loop did. Every error is checked for
//! its exact status and problem body.

#![allow(clippy::unwrap_used)]

mod budgets;
mod confirmations;
mod connections;
mod deltas;
mod docs;
mod events;
mod hosts;
mod idempotency;
mod large_results;
mod openapi;
mod ops;
mod readiness;
mod restart;
mod schedules;
mod security;
mod sessions;
mod support;
mod tasks;
mod web;
