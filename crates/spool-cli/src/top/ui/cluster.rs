//! The cluster's panel, at the top of the side column on a cluster node: each node with
//! the shards it holds, the age of its last heartbeat and whether it drains; then, as
//! room allows, each shard with its owner, lease epoch, inbox and lag, the shard whose
//! queue the dashboard shows marked `▶`.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph};

use super::{clip, count, duration};
use crate::top::model::{Cluster, ClusterNode, ClusterShard, Model};

/// The width of a node's shards on its line; its name takes what the other columns
/// leave of the panel's width.
const SHARDS: usize = 8;
/// A line's columns but the name (node) or the owner (shard), with their spaces.
const NODE_REST: usize = 1 + SHARDS + 1 + 5 + 1 + 5;
const SHARD_REST: usize = 3 + 1 + 1 + 5 + 1 + 5 + 1 + 4;

/// The panel's height: its borders, the nodes' header and lines, then the shards'
/// header and lines, at most `room` (at least a node's line).
pub(super) fn height(cluster: &Cluster, room: u16) -> u16 {
    let nodes = cluster.nodes.len().max(1);
    let wanted = 2 + 1 + nodes + 1 + cluster.shards.len();
    u16::try_from(wanted).unwrap_or(u16::MAX).min(room).max(4)
}

/// Draws the panel in `area`: the nodes first, then the shards that fit.
pub(super) fn draw(frame: &mut Frame<'_>, area: Rect, model: &Model, base: Style) {
    let Some(cluster) = &model.cluster else {
        return;
    };
    let colour = |c: Color| {
        if model.stale() {
            Style::default()
        } else {
            Style::default().fg(c)
        }
    };
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let rows = usize::from(area.height.saturating_sub(2));
    let inside = usize::from(area.width.saturating_sub(2));
    let name = inside.saturating_sub(NODE_REST).max(4);
    let owner = inside.saturating_sub(SHARD_REST).max(4);
    let mut lines = vec![Line::styled(
        format!("{:<name$} {:<SHARDS$} {:>5}", "NODE", "SHARDS", "BEAT"),
        bold,
    )];
    let nodes = cluster.nodes_listed();
    if nodes.is_empty() {
        lines.push(Line::from("no node has joined"));
    }
    for node in nodes.iter().take(rows.saturating_sub(1).max(1)) {
        let style = if node.draining {
            colour(Color::Yellow)
        } else {
            Style::default()
        };
        lines.push(Line::styled(node_line(node, name), style));
    }
    let left = rows.saturating_sub(lines.len());
    if left >= 2 && !cluster.shards.is_empty() {
        lines.push(Line::styled(
            format!(
                "{:<3} {:<owner$} {:>5} {:>5} {:>4}",
                "SH", "OWNER", "EPOCH", "INBOX", "LAG"
            ),
            bold,
        ));
        let shown = left - 1;
        // A window of the shards that holds the one whose queue is shown.
        let at = cluster
            .shards
            .iter()
            .position(|s| s.shard == model.shard)
            .unwrap_or(0);
        let first = (at + 1).saturating_sub(shown);
        for shard in cluster.shards.iter().skip(first).take(shown) {
            let viewed = shard.shard == model.shard;
            let mut style = if shard.expired || shard.owner.is_none() {
                colour(Color::Red)
            } else {
                Style::default()
            };
            if viewed {
                style = style.add_modifier(Modifier::BOLD);
            }
            lines.push(Line::styled(shard_line(shard, viewed, owner), style));
        }
    }
    let title = format!(" Cluster via {} ", clip(&cluster.node, 18));
    let block = Block::default().borders(Borders::ALL).title(title);
    frame.render_widget(Paragraph::new(lines).style(base).block(block), area);
}

/// `node-a      0-1      300ms drain`: its name (in `name` columns), its shards, its
/// heartbeat's age, and whether it drains.
fn node_line(node: &ClusterNode, name: usize) -> String {
    let shards = if node.shards.is_empty() {
        "-".to_owned()
    } else {
        clip(&ranges(&node.shards), SHARDS)
    };
    let line = format!(
        "{:<name$} {shards:<SHARDS$} {:>5}",
        clip(&node.node, name),
        duration(node.heartbeat_age_ms)
    );
    if node.draining {
        format!("{line} drain")
    } else {
        line
    }
}

/// `▶ 0 node-a          3     0   12`: the shard (marked when its queue is shown), its
/// owner in `width` columns (`-` when free, `expired` when its owner let the lease
/// lapse), the lease's epoch, the submissions in its inbox, and its journal entries
/// after its latest checkpoint.
fn shard_line(shard: &ClusterShard, viewed: bool, width: usize) -> String {
    let owner = match (&shard.owner, shard.expired) {
        (None, _) => "-".to_owned(),
        (Some(_), true) => "expired".to_owned(),
        (Some(owner), false) => clip(owner, width),
    };
    format!(
        "{}{:>2} {owner:<width$} {:>5} {:>5} {:>4}",
        if viewed { "▶" } else { " " },
        shard.shard,
        shard.epoch,
        count(shard.inbox),
        count(shard.lag)
    )
}

/// Shard numbers (lowest first) as runs: `0-3,8,10-11`.
fn ranges(shards: &[u32]) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &shard in shards {
        match runs.last_mut() {
            Some((_, end)) if end.checked_add(1) == Some(shard) => *end = shard,
            _ => runs.push((shard, shard)),
        }
    }
    runs.iter()
        .map(|&(start, end)| {
            if start == end {
                start.to_string()
            } else {
                format!("{start}-{end}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::ranges;

    #[test]
    fn shards_read_as_runs() {
        assert_eq!(ranges(&[]), "");
        assert_eq!(ranges(&[4]), "4");
        assert_eq!(ranges(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(ranges(&[1, 3, 5]), "1,3,5");
    }
}
