//! Journals and replay: recorded runs replay to the same trace; async tasks are saved
//! by replaying what they received.
#![allow(clippy::unwrap_used)]

mod asker;
mod async_replay;
mod journal;
