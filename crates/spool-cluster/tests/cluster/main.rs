//! The node's tests, on throwaway PostgreSQL clusters: shards taken and split, handed
//! over when a node stops, taken after the ttl when a node dies, a fenced writer
//! stopped, and the inbox.

#![allow(clippy::unwrap_used)]

mod failover;
mod history;
mod inbox;
mod nodes;
mod support;
