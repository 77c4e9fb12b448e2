//! `shard_id_check()`: gathers the facts (this server's guard, lease and clock; the database's
//! recorded epoch and DEFAULTs; on a Citus coordinator, every node's answer) and reports
//! `pg_shard_id_core::health`'s findings.

use crate::data_floor::{self, CannotTell, Newest};
use crate::errors::relation_name;
use crate::{clock, errors, mask, privilege, scoped, settings, shmem};
use pg_shard_id_core::health::{
    self, Finding, Floor, FloorColumns, Node, NodeState, Replicated, ShardDefault,
};
use pg_shard_id_core::layout;
use pg_shard_id_core::slots::slot_key;
use pg_shard_id_core::time::format_unix_ms;
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
/// * `data_floor`: DEFAULT columns that hold rows without an index on the id (a sequence's first
///   id then starts 10 minutes ahead instead of right above the rows), or an id too far ahead to
///   be a floor, or stored ids above where the sequence issues (a stored id, and its time, shown
///   only to a caller with SELECT on the table and no row security on it), or rows in a table
///   whose owner may not draw from the sequence (not read by the data floor, so new ids can
///   repeat them);
/// * `replication`: tables this database receives through an enabled subscription whose newest
///   id has a shard number this server's DEFAULTs issue too;
/// * `publication`: a publication that publishes deletes of `_pg_shard_id.origin` while it has no
///   replica identity (the SQL before 0.6.0);
/// * `mask_keys`: the mask key file (`pg_shard_id.keys`) against the check values this database
///   recorded: refused (a symbolic link, another owner, readable by others, invalid), a key id
///   whose key differs from its record (failed), keys with no record (warning), no file (skipped);
/// * on a Citus coordinator, asking every worker (`run_command_on_workers`): `citus_preload`,
///   `citus_epoch`, `citus_node_numbers` (group ids and `pg_shard_id.node` together).
///
/// VOLATILE PARALLEL UNSAFE (it queries other nodes), with `search_path = pg_catalog, pg_temp`
/// for the SQL it runs (no name in it is resolved through the caller's path). Errors: those of the
/// queries it runs (a role that may not read the catalogs, or run Citus's functions).
#[allow(clippy::type_complexity)]
#[pg_extern(sql = r#"
CREATE FUNCTION shard_id_check() RETURNS TABLE ("check" text, "status" text, "detail" text)
    VOLATILE STRICT PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_check_wrapper';
"#)]
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
    let (columns, not_read) = read_columns(epoch, now);
    let node = this_node();
    let defaults = shard_defaults(&columns, node);
    let mut findings = vec![
        health::preload(shmem::is_cluster()),
        health::lease(
            shared.map(|t| t.lease().load(Ordering::Acquire)),
            shared.and_then(|t| t.refused_epoch()),
            epoch,
            now,
        ),
        without_hanging("epoch", recorded_epoch)
            .map_or_else(|skipped| skipped, |recorded| health::epoch(epoch, recorded)),
        newest_against_clock(shared, epoch, now),
        health::shard_numbers(&defaults),
        data_floor_finding(&columns, &not_read, shared, epoch, node),
        health::replication(enabled_subscriptions(), &replicated(&columns), &defaults),
        without_hanging("publication", publications_refusing_the_origin)
            .map_or_else(|skipped| skipped, |p| health::publication(&p)),
        without_hanging("mask_keys", mask::check_finding).unwrap_or_else(|skipped| skipped),
    ];
    findings.extend(citus_findings());
    TableIterator::new(
        findings
            .into_iter()
            .map(|f: Finding| (f.check.to_string(), f.status.as_str().to_string(), f.detail)),
    )
}

/// How long a row of the check waits for a lock on a table it reads before it reports itself
/// skipped: a health check must answer, behind a migration's or an `ALTER EXTENSION`'s lock too.
const LOCK_WAIT: &std::ffi::CStr = c"1s";

/// Runs `read`, a row's query of a table another transaction may hold locked (the origin table,
/// the publications' tables), waiting at most [`LOCK_WAIT`] for a lock (in a subtransaction, with
/// `lock_timeout` set for it alone); after that the row is `skipped`, saying why. Any other ERROR
/// is raised as it was.
fn without_hanging<T>(
    check: &'static str,
    read: impl FnOnce() -> T + std::panic::UnwindSafe,
) -> Result<T, Finding> {
    let caught = match scoped::in_subtransaction(|| {
        scoped::with_setting(c"lock_timeout", LOCK_WAIT, read)
    }) {
        Ok(value) => return Ok(value),
        Err(caught) => caught,
    };
    if scoped::sql_error_code(&caught) != PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE {
        (*caught).rethrow();
    }
    Err(Finding {
        check,
        status: health::Status::Skipped,
        detail: "not read: another transaction held a lock on what this row reads for more than \
                 1 s (a migration, ALTER EXTENSION); run shard_id_check() again when it is done"
            .to_string(),
    })
}

fn one<T: IntoDatum + FromDatum>(sql: &str) -> Option<T> {
    crate::read::one::<T>(sql).unwrap_or_else(|e| error!("pg_shard_id: {sql}: {e}"))
}

/// The earliest and the latest epochs recorded in `_pg_shard_id.origin` (see `health::epoch`).
fn recorded_epoch() -> Option<Option<(i64, i64)>> {
    one::<bool>("SELECT pg_catalog.to_regclass('_pg_shard_id.origin') IS NOT NULL")
        .unwrap_or(false)
        .then(|| {
            one::<Vec<i64>>(
                "SELECT ARRAY[(extract(epoch FROM min(epoch)) * 1000)::bigint, \
                              (extract(epoch FROM max(epoch)) * 1000)::bigint] \
                 FROM _pg_shard_id.origin HAVING count(*) > 0",
            )
            .map(|both| (both[0], both[1]))
        })
}

/// The newest id issued since start-up against the clock, with the floor its guard started from
/// (the data floor of its sequence, or the server's floor), so that a lead a floor explains is
/// not blamed on the clock.
fn newest_against_clock(
    shared: Option<pg_shard_id_core::slots::SlotTable>,
    epoch: i64,
    now: i64,
) -> Finding {
    let Some(table) = shared else {
        return health::clock(None, None, now);
    };
    let newest = table
        .stats()
        .into_iter()
        .filter(|s| s.last_ms.is_some())
        .max_by_key(|s| s.last_ms);
    let server_floor = [Some(table.floor()), table.elsewhere_floor()]
        .into_iter()
        .flatten()
        .filter(|&f| f != i64::MIN)
        .max();
    // the guard's data floor when the rows raised it, otherwise the server's floors
    let floor = newest
        .as_ref()
        .and_then(|s| match (s.data_floor, server_floor) {
            (Some(data), _) => Some(Floor::Data(data + epoch)),
            (None, Some(server)) => Some(Floor::Server(server + epoch)),
            (None, None) => None,
        });
    health::clock(
        newest.and_then(|s| s.last_ms).map(|ms| ms + epoch),
        floor,
        now,
    )
}

/// A `next_shard_id` DEFAULT column and what reading its newest id gave.
type Read = (data_floor::Column, Result<Newest, CannotTell>);

/// Every `next_shard_id` DEFAULT column of this database with its newest id, read once for the
/// `data_floor` and `replication` rows; then those the data floor does not read (their table's
/// owner may not draw from the sequence) that hold rows. Never waits: the catalog query takes no
/// lock, and a table or index locked by another transaction is reported as such, not waited for.
fn read_columns(epoch: i64, now_unix_ms: i64) -> (Vec<Read>, Vec<NotRead>) {
    let bound = data_floor::last_id_of(now_unix_ms - epoch + data_floor::PLAUSIBLE_AHEAD_MS);
    let newest = |column: &data_floor::Column| {
        // SAFETY: oids just read from the catalog, inside a transaction and pgrx's guard.
        unsafe { data_floor::newest_in(column, bound) }
    };
    let (read, not_read) = data_floor::columns_by_owner(None);
    let read = read
        .into_iter()
        .map(|column| {
            let newest = newest(&column);
            (column, newest)
        })
        .collect();
    let holding_rows = not_read
        .into_iter()
        .filter_map(|column| match newest(&column) {
            Ok(n) if n.plausible.is_none() && n.beyond.is_none() => None,
            Ok(_) => Some((column, None)),
            Err(why) => Some((column, Some(why))), // may hold rows
        })
        .collect();
    (read, holding_rows)
}

/// A column the data floor does not read (its table's owner may not draw from the sequence) that
/// holds rows, or may (`Some(why)`: no index can tell).
type NotRead = (data_floor::Column, Option<CannotTell>);

/// The DEFAULT columns that may hold rows whose newest id no index can tell (and why), those that
/// hold an id too far ahead to be a floor (`data_floor::PLAUSIBLE_AHEAD_MS`), those holding ids
/// above where their sequence's guard issues, and those the data floor does not read that hold
/// rows (`not_read`).
fn data_floor_finding(
    columns: &[Read],
    not_read: &[NotRead],
    shared: Option<pg_shard_id_core::slots::SlotTable>,
    epoch: i64,
    node: Option<i64>,
) -> Finding {
    let (mut unreadable, mut implausible, mut above) = (Vec::new(), Vec::new(), Vec::new());
    // where each live guard of this database issues now
    let issuing: std::collections::HashMap<u64, i64> = shared
        .map(|t| t.stats())
        .unwrap_or_default()
        .into_iter()
        // (a guard still waiting for its data floor holds the table's floor, not an issued id)
        .filter(|s| !s.awaiting_data_floor)
        .filter_map(|s| Some((s.key, s.last_ms?)))
        .collect();
    // SAFETY: a backend global, set once at connection.
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    // a column listed with two sequences (a DEFAULT naming both, or a child with a DEFAULT of
    // its own under a parent's): its newest id may be the other sequence's
    let mut sequences_of: std::collections::HashMap<&str, std::collections::HashSet<_>> =
        Default::default();
    for (column, _) in columns {
        sequences_of
            .entry(&column.name)
            .or_default()
            .insert(column.sequence);
    }
    for (column, newest) in columns {
        // a stored id of the column's own shard above where its sequence's guard issues: rows
        // came in after its first id (loaded into a live table, or a table that was locked then),
        // and new ids may repeat them (another shard's rows, a replica's writes, cannot)
        let shard = column.shard_number(node);
        let stored = newest
            .as_ref()
            .ok()
            .and_then(|n| n.plausible)
            .filter(|&id| shard.is_some() && layout::shard_of(id).ok() == shard)
            .filter(|_| sequences_of.get(column.name.as_str()).map(|s| s.len()) == Some(1));
        let key = column.sequence.map(|s| slot_key(database, s.to_u32()));
        if let (Some(id), Some(last_ms)) = (stored, key.and_then(|k| issuing.get(&k))) {
            if layout::ms_of(id).is_ok_and(|ms| ms > *last_ms) {
                // the stored id's time only for a caller who could have selected it
                let sequence = relation_name(column.sequence.unwrap_or_default());
                let issuing_at = format_unix_ms(last_ms + epoch);
                let holds = if privilege::caller_may_read(column.relation) {
                    let stored_at = format_unix_ms(layout::ms_of(id).unwrap_or(0) + epoch);
                    format!("holds ids up to {stored_at} while sequence {sequence} issues at {issuing_at}")
                } else {
                    format!("holds ids above where sequence {sequence} issues ({issuing_at})")
                };
                above.push(format!(
                    "{} {holds}: run SELECT shard_id_resync('{sequence}')",
                    column.name
                ));
            }
        }
        match newest {
            Err(why) => unreadable.push((column.name.clone(), *why)),
            Ok(Newest {
                beyond: Some(id), ..
            }) => implausible.push(if privilege::caller_may_read(column.relation) {
                format!("{} ({id})", column.name)
            } else {
                column.name.clone()
            }),
            Ok(_) => {}
        }
    }
    let unreadable: Vec<String> = unreadable
        .iter()
        .map(|u| data_floor::describe(std::slice::from_ref(u)))
        .collect();
    let not_read = not_read
        .iter()
        .map(|(c, may)| {
            let sequence = c
                .sequence
                .map(|s| format!("sequence {}", errors::qualified_relation_name(s)));
            let may = may.map(|why| format!("may hold rows: {}", why.why()));
            match [sequence, may].into_iter().flatten().collect::<Vec<_>>() {
                notes if notes.is_empty() => c.name.clone(),
                notes => format!("{} ({})", c.name, notes.join("; ")),
            }
        })
        .collect();
    health::data_floor(&FloorColumns {
        unreadable,
        implausible,
        above,
        not_read,
    })
}

/// How many subscriptions of this database are enabled.
fn enabled_subscriptions() -> usize {
    one::<i64>(
        "SELECT count(*) FROM pg_catalog.pg_subscription s \
          WHERE s.subenabled AND s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d \
                                               WHERE d.datname = pg_catalog.current_database())",
    )
    .unwrap_or(0) as usize
}

/// The tables enabled subscriptions bring rows into that have a `next_shard_id` DEFAULT column,
/// with the shard of the newest id they hold.
fn replicated(columns: &[Read]) -> Vec<Replicated> {
    let subscribed: Vec<(String, pg_sys::Oid)> = Spi::connect(|client| {
        client
            .select(
                "SELECT s.subname::text, r.srrelid FROM pg_catalog.pg_subscription_rel r \
                   JOIN pg_catalog.pg_subscription s ON s.oid = r.srsubid \
                  WHERE s.subenabled AND s.subdbid = (SELECT d.oid FROM pg_catalog.pg_database d \
                                   WHERE d.datname = pg_catalog.current_database())",
                None,
                &[],
            )
            .unwrap_or_else(|e| error!("pg_shard_id: {e}"))
            .filter_map(|row| {
                Some((
                    row.get::<String>(1).ok()??,
                    row.get::<pg_sys::Oid>(2).ok()??,
                ))
            })
            .collect()
    });
    if subscribed.is_empty() {
        return Vec::new();
    }
    columns
        .iter()
        .filter_map(|(c, newest)| {
            let (subscription, _) = subscribed.iter().find(|(_, rel)| *rel == c.relation)?;
            let newest = newest.as_ref().ok()?;
            let newest = newest.beyond.or(newest.plausible)?;
            Some(Replicated {
                subscription: subscription.clone(),
                table: c.name.clone(),
                shard: layout::shard_of(newest).ok()?,
            })
        })
        .collect()
}

/// Publications that publish deletes of `_pg_shard_id.origin` while it has no replica identity.
fn publications_refusing_the_origin() -> Vec<String> {
    let sql = "SELECT DISTINCT pt.pubname::text FROM pg_catalog.pg_publication_tables pt \
                 JOIN pg_catalog.pg_publication p ON p.pubname = pt.pubname \
                WHERE p.pubdelete AND pt.schemaname = '_pg_shard_id' AND pt.tablename = 'origin' \
                  AND (SELECT c.relreplident FROM pg_catalog.pg_class c \
                        WHERE c.oid = pg_catalog.to_regclass('_pg_shard_id.origin')) IN ('d', 'n') \
                  AND NOT EXISTS (SELECT FROM pg_catalog.pg_index i \
                        WHERE i.indrelid = pg_catalog.to_regclass('_pg_shard_id.origin') \
                          AND (i.indisprimary OR i.indisreplident))";
    Spi::connect(|client| {
        client
            .select(sql, None, &[])
            .unwrap_or_else(|e| error!("pg_shard_id: {e}"))
            .filter_map(|row| row.get::<String>(1).ok().flatten())
            .collect()
    })
}

/// The `next_shard_id` DEFAULT columns of this database (every shape the data floor sees: a
/// column's DEFAULT or its domain's, leaf partitions listed) with their shard numbers: the node
/// form (`next_shard_id('photos_id_seq')`) counts with this server's node number (its
/// `pg_shard_id.node`, or its Citus group id), and is left out only where neither is set (it
/// cannot issue there).
fn shard_defaults(columns: &[Read], node: Option<i64>) -> Vec<ShardDefault> {
    columns
        .iter()
        .filter_map(|(column, _)| {
            Some(ShardDefault {
                table: column.name.clone(),
                sequence: column
                    .sequence
                    .map_or_else(|| "a sequence named by text".to_string(), relation_name),
                shard: column.shard_number(node)?,
            })
        })
        .collect()
}

/// The shard number of `next_shard_id(seq)` on this server: `pg_shard_id.node`, or the Citus
/// group id; `None` when neither is set.
fn this_node() -> Option<i64> {
    let configured = settings::node();
    if configured >= 0 {
        return Some(configured);
    }
    one::<bool>("SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus')")
        .unwrap_or(false)
        .then(|| one::<i32>("SELECT groupid FROM pg_catalog.pg_dist_local_group"))
        .flatten()
        .map(i64::from)
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
