//! Integration tests of the deterministic core, driven by `TestScheduler`: virtual
//! time, mocks for executors, exact traces.
#![allow(clippy::unwrap_used)]

mod admission;
mod agent_limits;
mod async_agents;
mod async_workload;
mod bad_input;
mod bookkeeping;
mod computed_reference;
mod determinism;
mod edges;
mod executors;
mod fairness;
mod forget;
mod limiters;
mod mock_tool_call;
mod mocks;
mod order;
mod react_agent;
mod scheduler_examples;
mod seen;
mod support;
mod task_graphs;
mod timeline;
mod tokens;
mod trace;
