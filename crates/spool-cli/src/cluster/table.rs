//! How `spool cluster status` shows a cluster: the shards' table and the nodes' table
//! for people, or one JSON object for machines, from rows of its own (the backend's
//! status, copied) so that the layout is tested on exact values.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

/// A shard's lease, as the status shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LeaseView {
    /// No owner: released, or never taken.
    Free,
    /// An owner whose lease ran out: the next node to look takes the shard.
    Expired,
    /// Held: taken `age` ago, expiring in `expires_in` unless renewed.
    Held {
        /// How long ago it was taken.
        age: Duration,
        /// How long until it expires.
        expires_in: Duration,
    },
}

/// One shard's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ShardRow {
    /// The shard.
    pub(crate) shard: u32,
    /// The node holding (or that held, if expired) its lease.
    pub(crate) owner: Option<String>,
    /// Its latest lease's epoch.
    pub(crate) epoch: u64,
    /// Its lease.
    pub(crate) lease: LeaseView,
    /// Submissions waiting in its inbox.
    pub(crate) inbox: u64,
    /// Journal entries after its latest checkpoint.
    pub(crate) lag: u64,
}

/// One node's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeRow {
    /// The node's name.
    pub(crate) node: String,
    /// Its address.
    pub(crate) addr: String,
    /// How long ago it joined.
    pub(crate) up_for: Duration,
    /// How long ago its last heartbeat was.
    pub(crate) heartbeat_age: Duration,
    /// Whether it was asked to drain.
    pub(crate) draining: bool,
    /// The shards it holds, lowest first.
    pub(crate) shards: Vec<u32>,
}

/// The status as tables: a heading line naming the database, the shards, the nodes.
pub(crate) fn render(database: &str, shards: &[ShardRow], nodes: &[NodeRow]) -> String {
    let mut out = format!(
        "cluster {database}: {}, {}\n\n",
        crate::output::counted(shards.len(), "shard"),
        crate::output::counted(nodes.len(), "node")
    );
    let shard_rows: Vec<Vec<String>> = shards
        .iter()
        .map(|s| {
            vec![
                s.shard.to_string(),
                s.owner.clone().unwrap_or_else(|| "-".to_owned()),
                s.epoch.to_string(),
                lease_text(&s.lease),
                s.inbox.to_string(),
                s.lag.to_string(),
            ]
        })
        .collect();
    out.push_str(&columns(
        &["SHARD", "OWNER", "EPOCH", "LEASE", "INBOX", "LAG"],
        &shard_rows,
    ));
    out.push('\n');
    if nodes.is_empty() {
        out.push_str("no node has joined\n");
        return out;
    }
    let node_rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            vec![
                n.node.clone(),
                n.addr.clone(),
                format!("{} ago", age(n.heartbeat_age)),
                if n.draining { "yes" } else { "no" }.to_owned(),
                shard_list(&n.shards),
            ]
        })
        .collect();
    out.push_str(&columns(
        &["NODE", "ADDR", "HEARTBEAT", "DRAINING", "SHARDS"],
        &node_rows,
    ));
    out
}

/// The status as one JSON object (durations in milliseconds).
pub(crate) fn json(database: &str, shards: &[ShardRow], nodes: &[NodeRow]) -> Value {
    let shards: Vec<Value> = shards
        .iter()
        .map(|s| {
            let (lease, age, expires_in) = match &s.lease {
                LeaseView::Free => ("free", None, None),
                LeaseView::Expired => ("expired", None, None),
                LeaseView::Held { age, expires_in } => {
                    ("held", Some(millis(*age)), Some(millis(*expires_in)))
                }
            };
            json!({
                "shard": s.shard,
                "owner": s.owner,
                "epoch": s.epoch,
                "lease": lease,
                "lease_age_ms": age,
                "expires_in_ms": expires_in,
                "inbox": s.inbox,
                "lag": s.lag,
            })
        })
        .collect();
    let nodes: Vec<Value> = nodes
        .iter()
        .map(|n| {
            json!({
                "node": n.node,
                "addr": n.addr,
                "up_for_ms": millis(n.up_for),
                "heartbeat_age_ms": millis(n.heartbeat_age),
                "draining": n.draining,
                "shards": n.shards,
            })
        })
        .collect();
    json!({"database": database, "shards": shards, "nodes": nodes})
}

/// A lease in words: its age and time left, `free` or `expired`.
fn lease_text(lease: &LeaseView) -> String {
    match lease {
        LeaseView::Free => "free".to_owned(),
        LeaseView::Expired => "expired".to_owned(),
        LeaseView::Held { age: a, expires_in } => {
            format!("{} (expires in {})", age(*a), age(*expires_in))
        }
    }
}

/// Shards as `0, 1, 5`, or `-` for none.
pub(crate) fn shard_list(shards: &[u32]) -> String {
    if shards.is_empty() {
        return "-".to_owned();
    }
    let texts: Vec<String> = shards.iter().map(u32::to_string).collect();
    texts.join(", ")
}

/// A duration in whole units, at most two of them: `7s`, `3m05s`, `2h10m`, `4d03h`.
pub(crate) fn age(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..86_400 => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{:02}h", secs / 86_400, secs % 86_400 / 3600),
    }
}

/// A duration in milliseconds, for JSON.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `rows` under `headings`, each column as wide as its widest cell and two spaces
/// apart; the last column is not padded.
fn columns(headings: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headings.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let heading: Vec<String> = headings.iter().map(|h| (*h).to_owned()).collect();
    let mut out = String::new();
    for row in std::iter::once(&heading).chain(rows) {
        let last = row.len().saturating_sub(1);
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if i == last {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Every kind of lease and node, laid out in aligned columns under the heading.
    #[test]
    fn status_tables_are_aligned_and_say_every_lease() {
        let shards = vec![
            ShardRow {
                shard: 0,
                owner: Some("node-a".to_owned()),
                epoch: 7,
                lease: LeaseView::Held {
                    age: secs(12),
                    expires_in: secs(8),
                },
                inbox: 0,
                lag: 12,
            },
            ShardRow {
                shard: 1,
                owner: None,
                epoch: 3,
                lease: LeaseView::Free,
                inbox: 0,
                lag: 0,
            },
            ShardRow {
                shard: 10,
                owner: Some("node-b".to_owned()),
                epoch: 12,
                lease: LeaseView::Expired,
                inbox: 2,
                lag: 140,
            },
        ];
        let nodes = vec![
            NodeRow {
                node: "node-a".to_owned(),
                addr: "10.0.0.1:8080".to_owned(),
                up_for: secs(600),
                heartbeat_age: secs(1),
                draining: false,
                shards: vec![0],
            },
            NodeRow {
                node: "node-b".to_owned(),
                addr: "10.0.0.2:8080".to_owned(),
                up_for: secs(4000),
                heartbeat_age: secs(75),
                draining: true,
                shards: vec![],
            },
        ];
        assert_eq!(
            render("postgres://spool@db:5432/team", &shards, &nodes),
            "\
cluster postgres://spool@db:5432/team: 3 shards, 2 nodes

SHARD  OWNER   EPOCH  LEASE                INBOX  LAG
0      node-a  7      12s (expires in 8s)  0      12
1      -       3      free                 0      0
10     node-b  12     expired              2      140

NODE    ADDR           HEARTBEAT  DRAINING  SHARDS
node-a  10.0.0.1:8080  1s ago     no        0
node-b  10.0.0.2:8080  1m15s ago  yes       -
"
        );
    }

    #[test]
    fn a_cluster_without_nodes_says_so() {
        let shards = vec![ShardRow {
            shard: 0,
            owner: None,
            epoch: 0,
            lease: LeaseView::Free,
            inbox: 0,
            lag: 0,
        }];
        assert_eq!(
            render("postgres://spool@db/x", &shards, &[]),
            "\
cluster postgres://spool@db/x: 1 shard, 0 nodes

SHARD  OWNER  EPOCH  LEASE  INBOX  LAG
0      -      0      free   0      0

no node has joined
"
        );
    }

    #[test]
    fn ages_keep_two_units() {
        let cases = [
            (0, "0s"),
            (59, "59s"),
            (60, "1m00s"),
            (3599, "59m59s"),
            (3600, "1h00m"),
            (86_399, "23h59m"),
            (86_400, "1d00h"),
            (90_061, "1d01h"),
        ];
        for (s, text) in cases {
            assert_eq!(age(secs(s)), text, "{s} s");
        }
    }

    #[test]
    fn the_json_gives_every_field_in_milliseconds() {
        let shards = vec![ShardRow {
            shard: 2,
            owner: Some("n".to_owned()),
            epoch: 4,
            lease: LeaseView::Held {
                age: Duration::from_millis(1500),
                expires_in: Duration::from_millis(8500),
            },
            inbox: 1,
            lag: 3,
        }];
        let nodes = vec![NodeRow {
            node: "n".to_owned(),
            addr: "a:1".to_owned(),
            up_for: secs(2),
            heartbeat_age: Duration::from_millis(250),
            draining: false,
            shards: vec![2],
        }];
        assert_eq!(
            json("postgres://u@h/d", &shards, &nodes),
            json!({
                "database": "postgres://u@h/d",
                "shards": [{"shard": 2, "owner": "n", "epoch": 4, "lease": "held",
                    "lease_age_ms": 1500, "expires_in_ms": 8500, "inbox": 1, "lag": 3}],
                "nodes": [{"node": "n", "addr": "a:1", "up_for_ms": 2000,
                    "heartbeat_age_ms": 250, "draining": false, "shards": [2]}],
            })
        );
    }
}
