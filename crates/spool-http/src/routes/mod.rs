//! The endpoints' handlers and the bodies they take and answer with, one module per
//! resource; [`router`](fn@crate::router) puts them on their paths.

pub(crate) mod confirmations;
pub(crate) mod events;
pub(crate) mod history;
pub(crate) mod ops;
pub(crate) mod queue;
pub(crate) mod schedules;
pub(crate) mod sessions;
pub(crate) mod tasks;
pub(crate) mod web;
