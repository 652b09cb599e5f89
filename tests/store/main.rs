//! The store's integration tests: recovery through the threaded runtime, storage that
//! grows with what is new, damaged files, and a process killed mid-write.

#![allow(clippy::unwrap_used)]

mod api;
mod crash;
mod damage;
mod file;
mod fingerprints;
mod keys;
mod parts;
mod recovery;
mod storage;
mod tasks;
