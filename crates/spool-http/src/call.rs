//! Calls to the run loop from the async handlers: a [`RuntimeHandle`] call blocks
//! until the loop answers, so it runs on tokio's blocking threads, never on the
//! workers that serve connections.
//!
//! [`RuntimeHandle`]: spool_runtime::RuntimeHandle

use crate::problem::Problem;

/// Runs a blocking handle call off the async workers.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, Problem>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| Problem::internal("the call to the runtime did not finish"))
}
