//! The Citus checks, on a coordinator: every node's answer (preload, epoch, node number) judged
//! together.

use super::{finding, Finding, Status};
use crate::time::format_unix_ms;
use std::collections::BTreeMap;

/// One Citus node's answer, or its error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// host:port, or "coordinator".
    pub name: String,
    pub answer: Result<NodeState, String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// `cluster` or `session`.
    pub guard: String,
    pub epoch_unix_ms: i64,
    /// `pg_shard_id.node` (-1: not set).
    pub node_setting: i64,
    pub group_id: i64,
}

impl NodeState {
    /// The shard field `next_shard_id(seq)` uses there.
    pub fn node_number(&self) -> i64 {
        if self.node_setting >= 0 {
            self.node_setting
        } else {
            self.group_id
        }
    }
}

/// The Citus checks, from the coordinator's view of every node (itself first).
pub fn citus(nodes: &[Node]) -> Vec<Finding> {
    let unreachable: Vec<String> = nodes
        .iter()
        .filter_map(|n| n.answer.as_ref().err().map(|e| format!("{}: {e}", n.name)))
        .collect();
    let states: Vec<(&str, &NodeState)> = nodes
        .iter()
        .filter_map(|n| n.answer.as_ref().ok().map(|s| (n.name.as_str(), s)))
        .collect();
    let mut out = Vec::new();
    let not_preloaded: Vec<&str> = states
        .iter()
        .filter(|(_, s)| s.guard != "cluster")
        .map(|(name, _)| *name)
        .collect();
    out.push(if unreachable.is_empty() && not_preloaded.is_empty() {
        finding(
            "citus_preload",
            Status::Ok,
            format!("{} nodes, each with pg_shard_id preloaded", states.len()),
        )
    } else if !unreachable.is_empty() {
        finding(
            "citus_preload",
            Status::Failed,
            format!(
                "could not ask {}. Fix: CREATE EXTENSION pg_shard_id on every node (citus_add_node \
                 does it) and check that the coordinator can connect.",
                unreachable.join("; ")
            ),
        )
    } else {
        finding(
            "citus_preload",
            Status::Failed,
            format!(
                "pg_shard_id is not in shared_preload_libraries on {}: two sessions there can \
                 repeat ids, and next_shard_id(seq) refuses. Fix: shared_preload_libraries = \
                 'citus,pg_shard_id' on it, and restart it.",
                not_preloaded.join(", ")
            ),
        )
    });
    // the coordinator's epoch is the reference: it is the first node, if it answered
    let coordinator_epoch = nodes
        .first()
        .and_then(|n| n.answer.as_ref().ok())
        .map(|s| s.epoch_unix_ms);
    let other_epoch: Vec<String> = states
        .iter()
        .filter(|(_, s)| Some(s.epoch_unix_ms) != coordinator_epoch)
        .map(|(name, s)| format!("{name} ({})", format_unix_ms(s.epoch_unix_ms)))
        .collect();
    out.push(match (coordinator_epoch, other_epoch.is_empty()) {
        (Some(epoch), true) => finding(
            "citus_epoch",
            Status::Ok,
            format!("every node has pg_shard_id.epoch {}", format_unix_ms(epoch)),
        ),
        (Some(epoch), false) => finding(
            "citus_epoch",
            Status::Failed,
            format!(
                "pg_shard_id.epoch differs from the coordinator's ({}) on {}: ids of one table \
                 would not sort by time, and could repeat. Fix: the same pg_shard_id.epoch in \
                 every node's postgresql.conf, and restart them.",
                format_unix_ms(epoch),
                other_epoch.join(", ")
            ),
        ),
        (None, _) => finding(
            "citus_epoch",
            Status::Failed,
            "the coordinator did not answer for itself (see citus_preload)",
        ),
    });
    let mut by_number: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for (name, s) in &states {
        let how = if s.node_setting >= 0 {
            "pg_shard_id.node"
        } else {
            "group id"
        };
        by_number
            .entry(s.node_number())
            .or_default()
            .push(format!("{name} ({how})"));
    }
    let clashes: Vec<String> = by_number
        .iter()
        .filter(|(_, names)| names.len() > 1)
        .map(|(number, names)| format!("{number}: {}", names.join(", ")))
        .collect();
    out.push(if clashes.is_empty() {
        finding(
            "citus_node_numbers",
            Status::Ok,
            format!(
                "node numbers are distinct: {}",
                by_number
                    .iter()
                    .map(|(n, names)| format!("{n} {}", names.join(", ")))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        )
    } else {
        finding(
            "citus_node_numbers",
            Status::Failed,
            format!(
                "nodes share a node number, so next_shard_id(seq) can issue equal ids there: {}. \
                 Fix: unset pg_shard_id.node (ALTER SYSTEM RESET pg_shard_id.node; SELECT \
                 pg_reload_conf()) to use the Citus group id, or give each node a number no other \
                 node or group id uses.",
                clashes.join(" | ")
            ),
        )
    });
    out
}
