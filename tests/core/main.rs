//! Integration tests of the deterministic core, driven by `TestScheduler`: virtual
//! time, mocks for executors, exact traces.
#![allow(clippy::unwrap_used)]

mod async_agents;
mod async_workload;
mod bad_input;
mod bookkeeping;
mod determinism;
mod forget;
mod mocks;
mod order;
mod react_agent;
mod seed;
mod support;
mod task_graphs;
mod trace;
