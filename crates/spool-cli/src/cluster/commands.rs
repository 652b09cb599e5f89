//! The commands on a cluster's database, through `spool_postgres::Cluster`.

use spool_postgres::cluster::ClusterStatus;
use spool_postgres::{Cluster, ClusterError};

use super::table::{self, LeaseView, NodeRow, ShardRow};
use crate::stored::Failure;

/// `spool cluster init`: makes the database a cluster of `shards` shards, or says it is
/// one already.
pub(super) fn init(url: &str, shards: u64) -> Result<(), Failure> {
    // Clap keeps the count in 1..=512.
    let shards = u32::try_from(shards).unwrap_or(u32::MAX);
    match Cluster::connect(url) {
        Ok(cluster) if cluster.shards() == shards => {
            outln!(
                "{} is a cluster of {} already: nothing changed",
                cluster.name(),
                counted(shards)
            );
            return Ok(());
        }
        // Another count is refused by `init`, naming both; a database that is no
        // cluster yet is made one.
        Ok(_) | Err(ClusterError::NotACluster { .. }) => {}
        Err(error) => return Err(failed(&error)),
    }
    let cluster = Cluster::init(url, shards).map_err(|e| failed(&e))?;
    outln!("made {} a cluster of {}", cluster.name(), counted(shards));
    Ok(())
}

/// `spool cluster status`: the shards and the nodes, as tables or as JSON.
pub(super) fn status(url: &str, as_json: bool) -> Result<(), Failure> {
    let cluster = Cluster::connect(url).map_err(|e| failed(&e))?;
    let status = cluster.status().map_err(|e| failed(&e))?;
    let (shards, nodes) = rows(&status);
    if as_json {
        outln!("{}", table::json(&cluster.name(), &shards, &nodes));
    } else {
        out!("{}", table::render(&cluster.name(), &shards, &nodes));
    }
    Ok(())
}

/// `spool cluster drain NODE`: marks the node as draining, and says which shards it
/// holds now.
pub(super) fn drain(url: &str, node: &str) -> Result<(), Failure> {
    let cluster = Cluster::connect(url).map_err(|e| failed(&e))?;
    cluster.drain(node).map_err(|e| failed(&e))?;
    let status = cluster.status().map_err(|e| failed(&e))?;
    let held = status
        .nodes
        .iter()
        .find(|n| n.node == node)
        .map(|n| n.shards.clone())
        .unwrap_or_default();
    outln!(
        "node `{node}` is draining: it takes no more shards; it holds {}",
        match held.len() {
            0 => "none now".to_owned(),
            1 => format!("shard {}", table::shard_list(&held)),
            _ => format!("shards {}", table::shard_list(&held)),
        }
    );
    Ok(())
}

/// The status's rows, as the tables show them.
fn rows(status: &ClusterStatus) -> (Vec<ShardRow>, Vec<NodeRow>) {
    let shards = status
        .shards
        .iter()
        .map(|s| ShardRow {
            shard: s.shard,
            owner: s.owner.clone(),
            epoch: s.epoch,
            lease: match (&s.owner, s.expired, s.lease_age, s.expires_in) {
                (None, _, _, _) => LeaseView::Free,
                (Some(_), true, _, _) => LeaseView::Expired,
                (Some(_), false, age, expires_in) => LeaseView::Held {
                    age: age.unwrap_or_default(),
                    expires_in: expires_in.unwrap_or_default(),
                },
            },
            inbox: s.inbox,
            lag: s.lag,
        })
        .collect();
    let nodes = status
        .nodes
        .iter()
        .map(|n| NodeRow {
            node: n.node.clone(),
            addr: n.addr.clone(),
            up_for: n.up_for,
            heartbeat_age: n.heartbeat_age,
            draining: n.draining,
            shards: n.shards.clone(),
        })
        .collect();
    (shards, nodes)
}

/// `N shard(s)`.
fn counted(shards: u32) -> String {
    crate::output::counted(shards as usize, "shard")
}

/// A cluster error as the command's failure (its message never holds a password).
fn failed(error: &ClusterError) -> Failure {
    Failure::Failed(error.to_string())
}
