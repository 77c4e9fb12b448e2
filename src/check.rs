//! `shard_id_check()`: gathers the facts (this server's guard, lease and clock; the database's
//! recorded epoch and DEFAULTs; on a Citus coordinator, every node's answer) and reports
//! `pg_shard_id_core::health`'s findings.

use crate::{clock, settings, shmem};
use pg_shard_id_core::health::{self, Finding, Node, NodeState, ShardDefault};
use pgrx::prelude::*;
use std::sync::atomic::Ordering;

/// Checks this server's pg_shard_id setup and says what to fix.
///
/// ```sql
/// shard_id_check() RETURNS TABLE (check text, status text, detail text)
/// SELECT * FROM shard_id_check() WHERE status <> 'ok';
/// ```
///
/// One row per check, `status` one of `ok`, `warning`, `failed`, `skipped`; a row that is not
/// `ok` says what to do in `detail`:
/// * `preload`: the library in `shared_preload_libraries` (guard mode `cluster`);
/// * `lease`: the lease in force, how far ahead of the clock, ids refused for a later epoch;
/// * `epoch`: `pg_shard_id.epoch` against the epoch recorded in `_pg_shard_id.origin`;
/// * `clock`: the newest id issued since start-up against the clock;
/// * `shard_numbers`: one shard number in `next_shard_id(seq, N)` DEFAULTs with two sequences;
/// * on a Citus coordinator, asking every worker (`run_command_on_workers`): `citus_preload`,
///   `citus_epoch`, `citus_node_numbers` (group ids and `pg_shard_id.node` together).
///
/// VOLATILE PARALLEL UNSAFE (it queries other nodes). Errors: those of the queries it runs (a
/// role that may not read the catalogs, or run Citus's functions).
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_unsafe)]
fn shard_id_check() -> TableIterator<
    'static,
    (
        name!(check, String),
        name!(status, String),
        name!(detail, String),
    ),
> {
    let epoch = settings::epoch_unix_ms();
    let now = clock::now_unix_ms();
    let shared = shmem::shared_table();
    let mut findings = vec![
        health::preload(shmem::is_cluster()),
        health::lease(
            shared.map(|t| t.lease().load(Ordering::Acquire)),
            shared.and_then(|t| t.refused_epoch()),
            epoch,
            now,
        ),
        health::epoch(epoch, recorded_epoch()),
        health::clock(
            shared
                .and_then(|t| t.stats().iter().filter_map(|s| s.last_ms).max())
                .map(|ms| ms + epoch),
            now,
        ),
        health::shard_numbers(&shard_defaults()),
    ];
    findings.extend(citus_findings());
    TableIterator::new(
        findings
            .into_iter()
            .map(|f: Finding| (f.check.to_string(), f.status.as_str().to_string(), f.detail)),
    )
}

fn one<T: IntoDatum + FromDatum>(sql: &str) -> Option<T> {
    Spi::get_one::<T>(sql).unwrap_or_else(|e| error!("pg_shard_id: {sql}: {e}"))
}

/// The earliest epoch recorded in `_pg_shard_id.origin` (see `health::epoch` for the nesting).
fn recorded_epoch() -> Option<Option<i64>> {
    one::<bool>("SELECT pg_catalog.to_regclass('_pg_shard_id.origin') IS NOT NULL")
        .unwrap_or(false)
        .then(|| {
            one::<i64>(
                "SELECT (extract(epoch FROM min(epoch)) * 1000)::bigint FROM _pg_shard_id.origin",
            )
        })
}

/// The `next_shard_id(sequence, shard)` DEFAULTs of this database, read from their deparsed text
/// (`next_shard_id('photos_id_seq'::regclass, 5)`).
fn shard_defaults() -> Vec<ShardDefault> {
    let sql = r#"
        SELECT a.adrelid::pg_catalog.regclass::text, m[1], m[2]::bigint
          FROM pg_catalog.pg_attrdef a,
               pg_catalog.regexp_match(pg_catalog.pg_get_expr(a.adbin, a.adrelid),
                   $re$next_shard_id\('((?:[^']|'')+)'::regclass, (\d{1,9})\)$re$) m"#;
    Spi::connect(|client| {
        let rows = client
            .select(sql, None, &[])
            .unwrap_or_else(|e| error!("pg_shard_id: {e}"));
        rows.map(|row| ShardDefault {
            table: row.get::<String>(1).ok().flatten().unwrap_or_default(),
            sequence: row
                .get::<String>(2)
                .ok()
                .flatten()
                .unwrap_or_default()
                .replace("''", "'"),
            shard: row.get::<i64>(3).ok().flatten().unwrap_or(-1),
        })
        .collect()
    })
}

/// What each node is asked (the coordinator directly, the workers through
/// run_command_on_workers): `guard epoch_ms node group_id`. Every name is schema-qualified, the
/// extension's function with this database's extension schema (Citus creates the extension on
/// the workers in the same schema), so no search_path can redirect it (`extract(... FROM ...)` is
/// grammar, always pg_catalog's; it cannot be written qualified).
fn node_query() -> String {
    let schema = one::<String>(
        "SELECT pg_catalog.quote_ident(n.nspname) FROM pg_catalog.pg_extension e \
         JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_shard_id'",
    )
    .unwrap_or_else(|| "public".to_string());
    format!(
        "SELECT pg_catalog.concat_ws(' ', i.guard, \
                (extract(epoch FROM i.epoch) OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8, \
                pg_catalog.current_setting('pg_shard_id.node'), \
                (SELECT l.groupid FROM pg_catalog.pg_dist_local_group l)) \
         FROM {schema}.pg_shard_id_info() i"
    )
}

fn parse_node(answer: &str) -> Result<NodeState, String> {
    let parts: Vec<&str> = answer.split(' ').collect();
    let number = |i: usize| parts.get(i).and_then(|p| p.parse::<i64>().ok());
    match (parts.first(), number(1), number(2), number(3)) {
        (Some(guard), Some(epoch_unix_ms), Some(node_setting), Some(group_id)) => Ok(NodeState {
            guard: guard.to_string(),
            epoch_unix_ms,
            node_setting,
            group_id,
        }),
        _ => Err(answer.to_string()),
    }
}

/// The Citus checks, on a coordinator of a database with Citus.
fn citus_findings() -> Vec<Finding> {
    let skipped = |why: &str| {
        vec![Finding {
            check: "citus",
            status: health::Status::Skipped,
            detail: why.to_string(),
        }]
    };
    if !one::<bool>("SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus')")
        .unwrap_or(false)
    {
        return skipped("no Citus in this database");
    }
    let group = one::<i32>("SELECT groupid FROM pg_catalog.pg_dist_local_group").unwrap_or(-1);
    if group != 0 {
        return skipped("a Citus worker: run shard_id_check() on the coordinator");
    }
    let query = node_query();
    let mut nodes = vec![Node {
        name: "coordinator".to_string(),
        answer: one::<String>(&query)
            .ok_or_else(|| "no answer".to_string())
            .and_then(|a| parse_node(&a)),
    }];
    let sql = format!(
        "SELECT pg_catalog.concat(w.nodename, ':', w.nodeport), w.success, w.result \
           FROM pg_catalog.run_command_on_workers({}) w ORDER BY 1",
        spi::quote_literal(&query)
    );
    Spi::connect(|client| {
        let rows = client
            .select(&sql, None, &[])
            .unwrap_or_else(|e| error!("pg_shard_id: {e}"));
        for row in rows {
            let name = row.get::<String>(1).ok().flatten().unwrap_or_default();
            let success = row.get::<bool>(2).ok().flatten().unwrap_or(false);
            let result = row.get::<String>(3).ok().flatten().unwrap_or_default();
            let answer = if success {
                parse_node(&result)
            } else {
                Err(result)
            };
            nodes.push(Node { name, answer });
        }
    });
    health::citus(&nodes)
}
