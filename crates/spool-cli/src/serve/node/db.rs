//! The node's connections to the cluster's tables for the HTTP side (inboxes, keys,
//! owners), a few so that requests do not queue behind one another, each used off the
//! server's async threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use spool_postgres::Cluster;
use spool_postgres::cluster::ClusterError;

/// How many connections the HTTP side keeps.
const CONNECTIONS: usize = 4;

/// A few connections to the cluster, taken in turn.
#[derive(Clone, Debug)]
pub(crate) struct Db {
    connections: Arc<Vec<Cluster>>,
    next: Arc<AtomicUsize>,
}

impl Db {
    /// Connects to the cluster in the database at `url`.
    pub(crate) fn connect(url: &str) -> Result<Db, ClusterError> {
        let connections = (0..CONNECTIONS)
            .map(|_| Cluster::connect(url))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Db {
            connections: Arc::new(connections),
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// A connection to use from a thread that may block (the node's start), if there
    /// is one.
    pub(crate) fn blocking(&self) -> Option<&Cluster> {
        self.connections.first()
    }

    /// The cluster's shard count.
    pub(crate) fn shards(&self) -> u32 {
        self.connections.first().map_or(1, Cluster::shards)
    }

    /// Runs `work` on the next connection, on a blocking thread; its error as words.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Cluster) -> Result<T, ClusterError> + Send + 'static,
    ) -> Result<T, String> {
        let connections = Arc::clone(&self.connections);
        let at = self.next.fetch_add(1, Ordering::Relaxed) % connections.len().max(1);
        tokio::task::spawn_blocking(move || match connections.get(at) {
            Some(cluster) => work(cluster).map_err(|e| e.to_string()),
            None => Err("no connection to the cluster".to_owned()),
        })
        .await
        .map_err(|e| format!("the database call failed: {e}"))?
    }
}
