//! What a node checks before it joins: that no running node has its name, and that its
//! token is the one the running nodes share (a request one node passes to another
//! carries the client's token, and is signed with a key made from it).

use std::time::{Duration, Instant};

use spool_postgres::Cluster;

use crate::stored::{Failure, failed};

/// The cluster's setting that holds a check of the nodes' token: a hash made from it
/// that does not give it away.
const TOKEN_CHECK: &str = "token_check";

/// How often a node whose name has a fresh heartbeat looks again.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// Checks that node `me`, with `token`, may join the cluster of `cluster` whose
/// leases last `ttl`. A node of the same name whose heartbeat is younger than the ttl
/// is waited for (it may be this node's previous life, killed a moment ago) until its
/// heartbeat is older than the ttl; one that keeps beating is another node, and this
/// one is refused.
pub(crate) fn check(
    cluster: &Cluster,
    me: &str,
    token: &str,
    ttl: Duration,
) -> Result<(), Failure> {
    let until = Instant::now() + ttl * 2;
    let mut last_age = None;
    loop {
        let status = cluster
            .status()
            .map_err(|e| failed("cannot read the cluster", e))?;
        let Some(named) = status.nodes.iter().find(|n| n.node == me) else {
            break;
        };
        if named.heartbeat_age >= ttl {
            break;
        }
        if last_age.is_some_and(|last| named.heartbeat_age < last) || Instant::now() >= until {
            return Err(Failure::Failed(format!(
                "a node named `{me}` is running (its heartbeat is {} ms old): give this one \
                 another --node-id",
                named.heartbeat_age.as_millis()
            )));
        }
        last_age = Some(named.heartbeat_age);
        std::thread::sleep(LOOK_EVERY);
    }
    let ours = blake3::derive_key("spool cluster 2026-11 token check", token.as_bytes());
    let ours = blake3::Hash::from(ours).to_hex().to_string();
    let theirs = cluster
        .setting(TOKEN_CHECK)
        .map_err(|e| failed("cannot read the cluster", e))?;
    if theirs.as_deref() != Some(ours.as_str()) && theirs.is_some() {
        let running: Vec<String> = cluster
            .live_nodes(ttl)
            .map_err(|e| failed("cannot read the cluster", e))?
            .into_iter()
            .filter(|n| n != me)
            .collect();
        if !running.is_empty() {
            return Err(Failure::Failed(format!(
                "this node's token is not the one the nodes running now ({}) share: start \
                 every node with the same --token-file (to change it, stop them all first)",
                running.join(", ")
            )));
        }
    }
    if theirs.as_deref() != Some(ours.as_str()) {
        cluster
            .set_setting(TOKEN_CHECK, &ours)
            .map_err(|e| failed("cannot write the cluster's settings", e))?;
    }
    Ok(())
}
