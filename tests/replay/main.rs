//! Journals and replay: recorded runs replay to the same trace; async tasks are saved
//! by replaying what they received.
#![allow(clippy::unwrap_used)]

mod async_replay;
mod journal;
mod recorded;
/// The snapshot tests' saveable task types, shared.
#[path = "../snapshot/tasks.rs"]
#[allow(dead_code)]
mod tasks;
