//! What a node says of itself and of the cluster: `/healthz`, `/metrics` (the node's
//! own figures, then each shard it runs, labelled with the shard) and `/v1/cluster`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use spool_postgres::cluster::{ClusterStatus, ShardStatus};

use super::front::{Front, call, no_owner};

/// `/healthz`: `ok node NAME shards LIST` — the node is up, whether or not it runs a
/// shard now (a standby runs none).
pub(crate) fn healthz(front: &Front) -> Response {
    let shards: Vec<String> = front
        .local_shards()
        .iter()
        .map(ToString::to_string)
        .collect();
    format!(
        "ok node {} shards {}\n",
        front.me(),
        if shards.is_empty() {
            "none".to_owned()
        } else {
            shards.join(",")
        }
    )
    .into_response()
}

/// `/metrics`: the node's figures (shards run, their epochs, inbox depth and lag),
/// then the metrics of every shard it runs with a `shard` label, each family once.
pub(crate) async fn metrics(front: &Front) -> Response {
    let held = front.held.get().map(|h| h.list()).unwrap_or_default();
    let status = front.peers.status(&front.db).await.ok();
    let mut text = node_metrics(front, &held, status.as_ref());
    let mut families = Families::default();
    for (shard, _, _) in &held {
        let Some(router) = front.local(*shard) else {
            continue;
        };
        let mut request = Request::new(Body::empty());
        *request.uri_mut() = axum::http::Uri::from_static("/metrics");
        if let Ok(value) = HeaderValue::from_str(&format!("Bearer {}", front.token)) {
            request.headers_mut().insert(header::AUTHORIZATION, value);
        }
        let response = call(router, request).await;
        if !response.status().is_success() {
            continue;
        }
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap_or_default();
        families.add(&String::from_utf8_lossy(&bytes), *shard);
    }
    text.push_str(&families.text());
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// The node's own figures.
fn node_metrics(
    front: &Front,
    held: &[(u32, u64, spool_runtime::RuntimeHandle)],
    status: Option<&ClusterStatus>,
) -> String {
    let node = escape(front.me());
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# HELP spool_cluster_shards The cluster's shard count.\n\
         # TYPE spool_cluster_shards gauge\nspool_cluster_shards {}",
        front.shards
    );
    let _ = writeln!(
        text,
        "# HELP spool_node_shards The shards this node runs now.\n\
         # TYPE spool_node_shards gauge\nspool_node_shards{{node=\"{node}\"}} {}",
        held.len()
    );
    let _ = writeln!(
        text,
        "# HELP spool_node_shard_epoch The lease epoch of each shard this node runs.\n\
         # TYPE spool_node_shard_epoch gauge"
    );
    for (shard, epoch, _) in held {
        let _ = writeln!(
            text,
            "spool_node_shard_epoch{{node=\"{node}\",shard=\"{shard}\"}} {epoch}"
        );
    }
    let Some(status) = status else {
        return text;
    };
    let live = status
        .nodes
        .iter()
        .filter(|n| !n.shards.is_empty() || n.heartbeat_age < Duration::from_secs(60))
        .count();
    let _ = writeln!(
        text,
        "# HELP spool_cluster_nodes Nodes whose heartbeat is under a minute old or that hold a shard.\n\
         # TYPE spool_cluster_nodes gauge\nspool_cluster_nodes {live}"
    );
    let held_shards: Vec<_> = status
        .shards
        .iter()
        .filter(|s| held.iter().any(|h| h.0 == s.shard))
        .collect();
    for (name, help, value) in [
        (
            "spool_shard_inbox",
            "Submissions waiting in the inbox of each shard this node runs.",
            (|s: &ShardStatus| s.inbox) as fn(&ShardStatus) -> u64,
        ),
        (
            "spool_shard_lag",
            "Journal entries after the latest checkpoint of each shard this node runs.",
            |s: &ShardStatus| s.lag,
        ),
    ] {
        let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} gauge");
        for shard in &held_shards {
            let _ = writeln!(text, "{name}{{shard=\"{}\"}} {}", shard.shard, value(shard));
        }
    }
    text
}

/// A label value, escaped as the text format says.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Metric families gathered from several shards' texts: each family's `# HELP` and
/// `# TYPE` once, then its samples from every shard, each with the shard's label (a
/// family's lines must stand together).
#[derive(Default)]
struct Families {
    order: Vec<String>,
    families: BTreeMap<String, (Vec<String>, Vec<String>)>,
}

impl Families {
    fn add(&mut self, text: &str, shard: u32) {
        let mut current = String::new();
        for line in text.lines() {
            if let Some(rest) = line
                .strip_prefix("# HELP ")
                .or_else(|| line.strip_prefix("# TYPE "))
            {
                current = rest.split(' ').next().unwrap_or("").to_owned();
                let family = self.family(&current);
                if !family.0.iter().any(|l| l == line) {
                    family.0.push(line.to_owned());
                }
                continue;
            }
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let labelled = with_shard(line, shard);
            let name = current.clone();
            self.family(&name).1.push(labelled);
        }
    }

    fn family(&mut self, name: &str) -> &mut (Vec<String>, Vec<String>) {
        if !self.families.contains_key(name) {
            self.order.push(name.to_owned());
        }
        self.families.entry(name.to_owned()).or_default()
    }

    fn text(&self) -> String {
        let mut text = String::new();
        for name in &self.order {
            if let Some((head, samples)) = self.families.get(name) {
                for line in head.iter().chain(samples) {
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
        text
    }
}

/// A sample line with `shard="N"` as its first label.
fn with_shard(line: &str, shard: u32) -> String {
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let (name, rest) = line.split_at(name_end);
    match rest.strip_prefix('{') {
        Some(labels) if labels.starts_with('}') => format!("{name}{{shard=\"{shard}\"{labels}"),
        Some(labels) => format!("{name}{{shard=\"{shard}\",{labels}"),
        None => format!("{name}{{shard=\"{shard}\"}}{rest}"),
    }
}

/// `GET /v1/cluster`: the nodes, the shards, who holds which, their epochs,
/// leases, inboxes and lag.
pub(crate) async fn cluster(front: &Front) -> Response {
    match front.peers.status(&front.db).await {
        Ok(status) => axum::Json(cluster_body(front.me(), &status)).into_response(),
        Err(error) => no_owner(&format!("the cluster's tables cannot be read: {error}")),
    }
}

/// The body of `GET /v1/cluster`.
pub(crate) fn cluster_body(me: &str, status: &ClusterStatus) -> Value {
    let ms = |d: Option<Duration>| d.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let shards: Vec<Value> = status
        .shards
        .iter()
        .map(|s| {
            json!({
                "shard": s.shard,
                "owner": s.owner,
                "epoch": s.epoch,
                "lease_age_ms": ms(s.lease_age),
                "expires_in_ms": ms(s.expires_in),
                "expired": s.expired,
                "inbox": s.inbox,
                "lag": s.lag,
            })
        })
        .collect();
    let nodes: Vec<Value> = status
        .nodes
        .iter()
        .map(|n| {
            json!({
                "node": n.node,
                "addr": n.addr,
                "up_for_ms": ms(Some(n.up_for)),
                "heartbeat_age_ms": ms(Some(n.heartbeat_age)),
                "draining": n.draining,
                "shards": n.shards,
            })
        })
        .collect();
    json!({"node": me, "shards": shards, "nodes": nodes})
}

#[cfg(test)]
mod tests {
    use super::{Families, with_shard};

    #[test]
    fn a_sample_gets_the_shard_as_its_first_label() {
        assert_eq!(with_shard("a 1", 3), "a{shard=\"3\"} 1");
        assert_eq!(with_shard("a{} 1", 3), "a{shard=\"3\"} 1");
        assert_eq!(
            with_shard("a{kind=\"llm\"} 2", 0),
            "a{shard=\"0\",kind=\"llm\"} 2"
        );
    }

    #[test]
    fn families_from_several_shards_stand_together() {
        let text =
            "# HELP a A.\n# TYPE a gauge\na 1\n# HELP b B.\n# TYPE b counter\nb{k=\"x\"} 2\n";
        let mut families = Families::default();
        families.add(text, 0);
        families.add(text, 1);
        assert_eq!(
            families.text(),
            "# HELP a A.\n# TYPE a gauge\na{shard=\"0\"} 1\na{shard=\"1\"} 1\n\
             # HELP b B.\n# TYPE b counter\nb{shard=\"0\",k=\"x\"} 2\nb{shard=\"1\",k=\"x\"} 2\n"
        );
    }
}
