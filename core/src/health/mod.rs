//! `shard_id_check()`'s judgements: facts about a server (gathered by `src/check.rs`) in,
//! findings (check, status, detail) out. Every finding that is not `ok` names the fix.

use crate::guard::MAX_LEAD_MS;
use crate::lease::LEASE_STEP_MS;
use crate::time::format_unix_ms;
use std::collections::BTreeMap;

mod citus;
mod copies;
mod keys;
pub use citus::{citus, Node, NodeState};
pub use copies::{data_floor, publication, replication, FloorColumns, Replicated};
pub use keys::{mask_keys, KeyFileState};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    Warning,
    Failed,
    /// Does not apply here (no Citus, no lease without preloading).
    Skipped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warning => "warning",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub check: &'static str,
    pub status: Status,
    pub detail: String,
}

pub(crate) fn finding(check: &'static str, status: Status, detail: impl Into<String>) -> Finding {
    Finding {
        check,
        status,
        detail: detail.into(),
    }
}

/// The library in `shared_preload_libraries` (guard mode `cluster`) or not.
pub fn preload(cluster: bool) -> Finding {
    if cluster {
        finding(
            "preload",
            Status::Ok,
            "pg_shard_id is in shared_preload_libraries: one guard for every session (guard mode cluster)",
        )
    } else {
        finding(
            "preload",
            Status::Failed,
            "guard mode session: each session has its own guard, so two sessions can issue the \
             same id. Fix: add pg_shard_id to shared_preload_libraries and restart PostgreSQL.",
        )
    }
}

/// Ids of a clock this far ahead of the lease are unusual: more than borrow's own lead and a step.
const FAR_AHEAD_MS: i64 = MAX_LEAD_MS + LEASE_STEP_MS;

/// The lease in force (`None` in guard mode `session`; `Some(i64::MIN)`: none yet), a refused
/// epoch, the configured epoch and the clock (all Unix ms).
pub fn lease(
    lease_unix_ms: Option<i64>,
    refused_epoch_unix_ms: Option<i64>,
    epoch_unix_ms: i64,
    now_unix_ms: i64,
) -> Finding {
    let Some(lease) = lease_unix_ms else {
        return finding(
            "lease",
            Status::Skipped,
            "no lease in guard mode session (see the check preload)",
        );
    };
    if let Some(recorded) = refused_epoch_unix_ms {
        return finding(
            "lease",
            Status::Failed,
            format!(
                "ids are refused (55000): pg_shard_id.epoch ({}) is later than the epoch this \
                 server's ids were made with ({}). Fix: set pg_shard_id.epoch = '{}' in \
                 postgresql.conf and restart.",
                format_unix_ms(epoch_unix_ms),
                format_unix_ms(recorded),
                format_unix_ms(recorded)
            ),
        );
    }
    if lease == i64::MIN {
        return finding(
            "lease",
            Status::Ok,
            "no lease yet: the first id writes one (pg_shard_id.lease and the WAL)",
        );
    }
    let ahead = lease - now_unix_ms;
    if ahead > FAR_AHEAD_MS {
        return finding(
            "lease",
            Status::Warning,
            format!(
                "the lease ({}) is {} s ahead of the clock, more than borrow's 10 minutes: the \
                 clock was stepped back, or was ahead when ids were issued. Ids stay unique; \
                 their timestamps run ahead until the clock catches up. Fix: check the server \
                 clock (NTP).",
                format_unix_ms(lease),
                ahead / 1000
            ),
        );
    }
    let when = if ahead >= 0 {
        format!("{ahead} ms ahead of the clock")
    } else {
        format!("{} s behind the clock: no ids since", -ahead / 1000)
    };
    finding(
        "lease",
        Status::Ok,
        format!("lease until {} ({when})", format_unix_ms(lease)),
    )
}

/// What `_pg_shard_id.origin` holds: `None` if the table is missing (the SQL of a version before
/// 0.4.0), `Some(None)` if it has no rows, `Some(Some((earliest, latest)))` with the earliest and
/// the latest recorded epochs (a server that moved its epoch earlier keeps its row of the later
/// one beside the new one: the latest is the epoch the first of the ids here were made with).
pub fn epoch(configured_unix_ms: i64, recorded: Option<Option<(i64, i64)>>) -> Finding {
    let configured = format_unix_ms(configured_unix_ms);
    match recorded {
        None => finding(
            "epoch",
            Status::Warning,
            "this database has the SQL of a version before 0.4.0, which records no epoch. Fix: \
             ALTER EXTENSION pg_shard_id UPDATE.",
        ),
        Some(None) => finding(
            "epoch",
            Status::Ok,
            format!("no ids recorded in this database yet; the first records pg_shard_id.epoch ({configured})"),
        ),
        Some(Some((recorded, _))) if configured_unix_ms > recorded => finding(
            "epoch",
            Status::Failed,
            format!(
                "pg_shard_id.epoch ({configured}) is later than the epoch this database's ids \
                 were made with ({r}): next_shard_id refuses (55000). Fix: set \
                 pg_shard_id.epoch = '{r}' in postgresql.conf and restart.",
                r = format_unix_ms(recorded)
            ),
        ),
        // An earlier epoch keeps ids unique (new ones are above the old), so the server issues;
        // but every id decodes to another time than it was made at, which is what a typo on one
        // standby would do silently after a failover (issue 58): failed, so the alert fires while
        // the standby is still a standby.
        Some(Some((_, recorded))) if configured_unix_ms < recorded => finding(
            "epoch",
            Status::Failed,
            format!(
                "pg_shard_id.epoch ({configured}) is earlier than the epoch this database's ids \
                 were made with ({r}): ids stay unique (new ones are above the old), but every id \
                 decodes to a time {gap} ms earlier than it was made at. Fix: if the setting is a \
                 mistake, set pg_shard_id.epoch = '{r}' in postgresql.conf and restart before this \
                 server issues ids (once it has, {r} is later than its lease and refused: keep \
                 {configured}); if the epoch was moved on purpose, on every server, a superuser \
                 records it in each database: UPDATE _pg_shard_id.origin SET epoch = \
                 '{configured}'.",
                r = format_unix_ms(recorded),
                gap = recorded - configured_unix_ms
            ),
        ),
        Some(Some(_)) => finding(
            "epoch",
            Status::Ok,
            format!("pg_shard_id.epoch ({configured}) is the one recorded in this database"),
        ),
    }
}

/// What put the newest id where it is, when it is a floor rather than the clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Floor {
    /// One past the newest id stored in the sequence's DEFAULT columns (Unix ms): rows made by
    /// another server, copied in, or a lead.
    Data(i64),
    /// The server's floor under fresh guards (Unix ms): the lease after a restart, a reused slot,
    /// ids made by another server or database.
    Server(i64),
}

/// The newest millisecond issued on this server (Unix ms, `None`: none since start-up) against
/// the clock, and the floor its guard started from, if any.
pub fn clock(newest_unix_ms: Option<i64>, floor: Option<Floor>, now_unix_ms: i64) -> Finding {
    let Some(newest) = newest_unix_ms else {
        return finding(
            "clock",
            Status::Ok,
            "no ids issued since the server started",
        );
    };
    let ahead = newest - now_unix_ms;
    if ahead > LEASE_STEP_MS {
        // ids that continued right above a floor are ahead because of the floor, not the clock
        let explained = match floor {
            Some(Floor::Data(f)) if newest - f <= LEASE_STEP_MS => Some(format!(
                "ids continue above rows already stored (the data floor at {}: rows made by \
                 another server, copied in by logical replication, a dump or COPY, or a lead)",
                format_unix_ms(f)
            )),
            Some(Floor::Server(f)) if newest - f <= LEASE_STEP_MS => Some(format!(
                "ids continue above the server's floor at {} (the lease after a restart, a \
                 reused guard slot, or ids made by another server or database)",
                format_unix_ms(f)
            )),
            _ => None,
        };
        if let Some(why) = explained.filter(|_| ahead <= FAR_AHEAD_MS) {
            return finding(
                "clock",
                Status::Ok,
                format!(
                    "the newest id ({}) is {ahead} ms ahead of the clock: {why}. Ids stay unique; \
                     their timestamps fall back to the clock as it catches up. Nothing to fix.",
                    format_unix_ms(newest)
                ),
            );
        }
        let status = if ahead > FAR_AHEAD_MS {
            Status::Failed
        } else {
            Status::Warning
        };
        return finding(
            "clock",
            status,
            format!(
                "the newest id ({}) is {ahead} ms ahead of the clock: borrow's lead, or the clock \
                 stepped back. Ids stay unique; their timestamps run ahead until the clock catches \
                 up. Fix: if the clock is wrong, correct it (NTP); if it is borrow, draw less than \
                 1024 ids per ms per sequence or wait for the lead to shrink.",
                format_unix_ms(newest)
            ),
        );
    }
    finding(
        "clock",
        Status::Ok,
        format!(
            "the newest id ({}) is {} ms {} the clock",
            format_unix_ms(newest),
            ahead.abs(),
            if ahead > 0 { "ahead of" } else { "behind" }
        ),
    )
}

/// A column DEFAULT `next_shard_id(sequence, shard)` of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardDefault {
    pub table: String,
    pub sequence: String,
    pub shard: i64,
}

/// Two sequences with one shard number can issue equal ids (the guard is per sequence).
pub fn shard_numbers(defaults: &[ShardDefault]) -> Finding {
    let mut by_shard: BTreeMap<i64, BTreeMap<&str, Vec<&str>>> = BTreeMap::new();
    for d in defaults {
        by_shard
            .entry(d.shard)
            .or_default()
            .entry(&d.sequence)
            .or_default()
            .push(&d.table);
    }
    let shared: Vec<String> = by_shard
        .iter()
        .filter(|(_, sequences)| sequences.len() > 1)
        .map(|(shard, sequences)| {
            let uses: Vec<String> = sequences
                .iter()
                .map(|(sequence, tables)| format!("{} ({sequence})", tables.join(", ")))
                .collect();
            format!("shard {shard}: {}", uses.join("; "))
        })
        .collect();
    if shared.is_empty() {
        return finding(
            "shard_numbers",
            Status::Ok,
            format!(
                "{} next_shard_id DEFAULT columns; no shard number is used with two sequences",
                defaults.len()
            ),
        );
    }
    finding(
        "shard_numbers",
        Status::Warning,
        format!(
            "one shard number with several sequences, whose ids can be equal: {}. Fine if those \
             tables' ids never meet (one id space per table); otherwise fix: give each sequence \
             its own shard number, or let the tables share one sequence.",
            shared.join(" | ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: i64 = 1_767_225_600_000; // 2026-01-01
    const NOW: i64 = EPOCH + 1_000_000_000;

    #[test]
    fn preload_and_lease() {
        assert_eq!(preload(true).status, Status::Ok);
        let p = preload(false);
        assert_eq!(p.status, Status::Failed);
        assert!(p
            .detail
            .contains("Fix: add pg_shard_id to shared_preload_libraries"));
        assert_eq!(lease(None, None, EPOCH, NOW).status, Status::Skipped);
        assert_eq!(lease(Some(i64::MIN), None, EPOCH, NOW).status, Status::Ok);
        let ok = lease(Some(NOW + 700), None, EPOCH, NOW);
        assert_eq!(
            (ok.status, ok.detail.contains("700 ms ahead")),
            (Status::Ok, true)
        );
        let idle = lease(Some(NOW - 90_000), None, EPOCH, NOW);
        assert!(
            idle.detail.contains("90 s behind the clock"),
            "{}",
            idle.detail
        );
        let far = lease(Some(NOW + 3_600_000), None, EPOCH, NOW);
        assert_eq!(far.status, Status::Warning);
        assert!(far.detail.contains("3600 s ahead") && far.detail.contains("Fix:"));
        let refused = lease(Some(NOW), Some(EPOCH - 86_400_000), EPOCH, NOW);
        assert_eq!(refused.status, Status::Failed);
        assert!(
            refused.detail.contains("'2025-12-31 00:00:00.000+00'"),
            "{}",
            refused.detail
        );
    }

    #[test]
    fn epoch_configured_against_recorded() {
        assert_eq!(epoch(EPOCH, None).status, Status::Warning);
        assert_eq!(epoch(EPOCH, Some(None)).status, Status::Ok);
        assert_eq!(epoch(EPOCH, Some(Some((EPOCH, EPOCH)))).status, Status::Ok);
        // earlier than the recorded one: unique still, but every id decodes to another time
        let earlier = epoch(EPOCH, Some(Some((EPOCH + 1000, EPOCH + 1000))));
        assert_eq!(earlier.status, Status::Failed);
        assert!(
            earlier
                .detail
                .contains("(2026-01-01 00:00:00.000+00) is earlier than")
                && earlier
                    .detail
                    .contains("made with (2026-01-01 00:00:01.000+00)")
                && earlier.detail.contains("1000 ms earlier"),
            "{}",
            earlier.detail
        );
        // ids made here since with the earlier epoch (its row beside the old one): still failed
        assert_eq!(
            epoch(EPOCH, Some(Some((EPOCH, EPOCH + 1000)))).status,
            Status::Failed
        );
        let later = epoch(EPOCH, Some(Some((EPOCH - 1000, EPOCH - 1000))));
        assert_eq!(later.status, Status::Failed);
        assert!(later
            .detail
            .contains("Fix: set pg_shard_id.epoch = '2025-12-31 23:59:59.000+00'"));
    }

    #[test]
    fn clock_against_the_newest_id() {
        assert_eq!(clock(None, None, NOW).status, Status::Ok);
        assert_eq!(clock(Some(NOW - 5), None, NOW).status, Status::Ok);
        assert_eq!(clock(Some(NOW + 900), None, NOW).status, Status::Ok);
        assert_eq!(clock(Some(NOW + 5_000), None, NOW).status, Status::Warning);
        assert_eq!(
            clock(Some(NOW + 3_600_000), None, NOW).status,
            Status::Failed
        );
        // right above a floor: the floor, named, not a clock step
        let data = clock(Some(NOW + 5_200), Some(Floor::Data(NOW + 5_000)), NOW);
        assert_eq!(data.status, Status::Ok);
        assert!(
            data.detail.contains("above rows already stored"),
            "{}",
            data.detail
        );
        assert!(!data.detail.contains("stepped back"), "{}", data.detail);
        let server = clock(Some(NOW + 601_000), Some(Floor::Server(NOW + 601_000)), NOW);
        assert_eq!(server.status, Status::Ok);
        assert!(
            server.detail.contains("the server's floor"),
            "{}",
            server.detail
        );
        // far above the floor: the guard's own lead again
        assert_eq!(
            clock(Some(NOW + 60_000), Some(Floor::Data(NOW + 5_000)), NOW).status,
            Status::Warning
        );
    }

    fn d(table: &str, sequence: &str, shard: i64) -> ShardDefault {
        ShardDefault {
            table: table.into(),
            sequence: sequence.into(),
            shard,
        }
    }

    #[test]
    fn one_shard_number_with_two_sequences_is_named() {
        let fine = [d("a", "s", 1), d("b", "s", 1), d("c", "t", 2)];
        assert_eq!(shard_numbers(&fine).status, Status::Ok);
        let shared = shard_numbers(&[d("a", "s", 1), d("b", "t", 1), d("c", "u", 2)]);
        assert_eq!(shared.status, Status::Warning);
        assert!(
            shared.detail.contains("shard 1: a (s); b (t)"),
            "{}",
            shared.detail
        );
    }

    fn node(name: &str, guard: &str, epoch: i64, setting: i64, group: i64) -> Node {
        Node {
            name: name.into(),
            answer: Ok(NodeState {
                guard: guard.into(),
                epoch_unix_ms: epoch,
                node_setting: setting,
                group_id: group,
            }),
        }
    }

    #[test]
    fn citus_nodes() {
        let healthy = [
            node("coordinator", "cluster", EPOCH, -1, 0),
            node("w1:5432", "cluster", EPOCH, -1, 1),
            node("w2:5432", "cluster", EPOCH, 7, 2),
        ];
        assert!(citus(&healthy).iter().all(|f| f.status == Status::Ok));
        let sick = [
            node("coordinator", "cluster", EPOCH, -1, 0),
            node("w1:5432", "session", EPOCH, -1, 1),
            node("w2:5432", "cluster", EPOCH + 1, 1, 2),
        ];
        let found = citus(&sick);
        assert!(
            found.iter().all(|f| f.status == Status::Failed),
            "{found:?}"
        );
        assert!(found[0].detail.contains("w1:5432"));
        assert!(found[1].detail.contains("w2:5432"));
        assert!(found[2]
            .detail
            .contains("1: w1:5432 (group id), w2:5432 (pg_shard_id.node)"));
        let gone = [
            node("coordinator", "cluster", EPOCH, -1, 0),
            Node {
                name: "w3:5432".into(),
                answer: Err("connection refused".into()),
            },
        ];
        assert_eq!(citus(&gone)[0].status, Status::Failed);
        assert!(citus(&gone)[0]
            .detail
            .contains("w3:5432: connection refused"));
    }
}
