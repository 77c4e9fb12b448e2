//! The data floor: before a fresh guard issues its first id (the sequence's first since the server
//! started, or since its slot was given to another sequence and its kept entry lost: see
//! `pg_shard_id_core::slots`), it is told the newest id already stored in every column whose
//! DEFAULT draws from its sequence, and its ids start above it.
//!
//! Why: ids can arrive without anything that records them. Logical replication (a blue/green
//! switchover), a dump of some schemas, `--data-only` loads and `COPY` carry rows, but not the
//! lease (it is the server's) and not `_pg_shard_id.origin` (but for a `FOR ALL TABLES`
//! publication or a whole-database dump). Sequences do not replicate before PostgreSQL 19. The
//! rows are the only record, so the rows are the floor.
//!
//! How, at microseconds per column, never a scan of a table:
//! * [`columns_of`] (`columns.rs`, the query `sql/data_floor_columns.sql`) finds every column whose
//!   default depends on one of this extension's `next_shard_id` functions: a column DEFAULT or a
//!   domain's default at any depth, of any shape (a cast, a wrapper), with the sequences it names
//!   (none named: the sequence comes from text at run time, and the column counts for every
//!   sequence); every leaf partition and inheritance child; each leaf's best index whose first
//!   column it is (a valid, non-partial btree in bigint's own order). Only tables whose owner may
//!   draw from the sequence count: no role moves another role's ids with a table of its own. It
//!   reads the catalog with the latest snapshot, so a REPEATABLE READ transaction sees a DEFAULT
//!   or partition added after it began. For one sequence it reads only what `pg_depend` lists
//!   against the sequence, with a plan the backend keeps, so that its cost does not grow with the
//!   database (issue 51), unless the database has defaults that name no sequence, which count for
//!   every sequence: whether it has any is remembered across backends until a catalog change
//!   (`crate::catalog_watch`).
//! * [`newest_in`] (`read.rs`) reads the index's endpoint as the planner does for its estimates
//!   (`get_actual_variable_endpoint` in selfuncs.c): one descent of the btree from its high end,
//!   with a snapshot that sees every row not yet removable, even rows being inserted or deleted
//!   right now, visiting at most 100 heap pages of dead entries. It reads the index as the
//!   extension, whatever the caller's privileges and row security: only the newest id's
//!   millisecond is used, and only to set the floor.
//! * The leaves of a table partitioned by RANGE on the column itself (`shard_id_partition_bounds`)
//!   are read from the highest upper bound down, stopping where the rest cannot hold a newer id,
//!   and not at all when they begin past the plausible bound (`bounds.rs`,
//!   `pg_shard_id_core::newest_first`): a day-partitioned table reads its newest days, not its
//!   thousands of partitions (issue 57).
//! * The floor is the newest *plausible* id: one more than [`PLAUSIBLE_AHEAD_MS`] ahead of the
//!   clock is passed over (a second, bounded descent finds the newest below it, and a WARNING
//!   names the other): one hand-written row must neither hide the copied rows below it nor move
//!   every new id decades ahead.
//! * Locks are taken only if free at once (a first id never waits for another transaction's lock:
//!   that deadlocked a Citus ALTER TABLE rewriting many shards) and released as soon as the value
//!   is read.
//! * A leaf that holds no block is empty. A column no index can tell about ([`CannotTell`]: a
//!   wrapped or cast DEFAULT, not bigint, another session's temporary table, not a heap table, no
//!   index, locked, too many dead entries) gets the floor the origin uses for data made
//!   elsewhere: 10 min 1 s ahead of the clock, with a LOG line naming it and why;
//!   `shard_id_check()` reports it (row `data_floor`). Rows copied in further ahead than that can
//!   still be reached: README, guarantee 9.
//!
//! Every caller that finds the guard awaiting reads the floor itself (issue 36 asked for one
//! reader per request). Decided against a claim that makes the others wait for the first reader:
//! that is a wait on another backend, which may be slow, cancelled or stuck behind its own
//! statement, and "a first id never waits" is the rule this module keeps; each read is bounded
//! instead (one catalog query without locks, one or two descents per column, at most 100 heap
//! pages of dead entries), and only the callers that arrive before the first read settles repeat
//! it.
//!
//! Runs on the slow path only (inside pgrx's guard): SPI and catalog access, locks, ERRORs.

mod bounds;
mod columns;
mod read;

pub use columns::{columns_by_owner, columns_of, CannotTell, Column};
pub use read::{newest_in, remainders_in, Count, Locking, Newest};

use crate::errors::relation_name;
use pg_shard_id_core::guard::{FloorRequest, MAX_LEAD_MS};
use pg_shard_id_core::layout::{ms_of, MAX_MS, TIMESTAMP_SHIFT};
use pg_shard_id_core::lease::LEASE_STEP_MS;
use pg_shard_id_core::origin::floor_for_other_servers;
use pg_shard_id_core::slots::{sequence_of, SlotKey, SlotTable};
use pg_shard_id_core::time::format_unix_ms;
use pgrx::prelude::*;

/// What the rows stored for a sequence say about where its ids must start.
pub struct Stored {
    /// The newest plausible id in the columns that could be read, and its column (`None`: none
    /// stored).
    pub newest: Option<(i64, String)>,
    /// Ids further ahead than [`PLAUSIBLE_AHEAD_MS`], with their column: passed over.
    pub beyond: Vec<(i64, String)>,
    /// Columns that may hold rows whose newest id no index can tell, and why.
    pub unreadable: Vec<(String, CannotTell)>,
    /// Whether any column draws from the sequence at all.
    pub has_columns: bool,
}

/// The largest id whose millisecond is at most `ms` (ms since the epoch).
pub fn last_id_of(ms: i64) -> i64 {
    if ms >= MAX_MS {
        i64::MAX
    } else {
        ((ms.max(-1) + 1) << TIMESTAMP_SHIFT) - 1
    }
}

/// What the rows stored for `sequence` say at `now_ms` (ms since the epoch): the newest plausible
/// id of every column that can be read, the ids beyond plausibility, and the columns that may
/// hold rows but cannot be read cheaply.
pub fn stored(sequence: pg_sys::Oid, now_ms: i64) -> Stored {
    let columns = columns_of(Some(sequence));
    let bound = last_id_of(now_ms.saturating_add(PLAUSIBLE_AHEAD_MS));
    let mut found = Stored {
        newest: None,
        beyond: Vec::new(),
        unreadable: Vec::new(),
        has_columns: !columns.is_empty(),
    };
    // (RANGE partitions on the id: the newest first, until the rest cannot hold a newer id, and
    // none that begins past the plausible bound, whose ids would be passed over; a column whose
    // catalog already says no index can tell has no bound worth trusting)
    // SAFETY: relation oids just read from the catalog, inside a transaction.
    let bounds = unsafe { bounds::read(&columns) };
    let range = |column: &Column| {
        column
            .cannot_tell
            .is_none()
            .then(|| bounds.range(column))
            .flatten()
    };
    pg_shard_id_core::newest_first::newest_over(&columns, range, bound, |column| {
        // SAFETY: a relation and index oid just read from the catalog, inside a transaction.
        match unsafe { newest_in(column, bound) } {
            Ok(newest) => {
                if let Some(id) = newest.plausible {
                    if found.newest.as_ref().is_none_or(|(n, _)| id > *n) {
                        found.newest = Some((id, column.name.clone()));
                    }
                }
                if let Some(id) = newest.beyond {
                    found.beyond.push((id, column.name.clone()));
                }
                newest.plausible
            }
            Err(why) => {
                found.unreadable.push((column.name.clone(), why));
                None
            }
        }
    });
    bounds.release();
    found
}

/// `name (why), ...` for messages.
pub fn describe(unreadable: &[(String, CannotTell)]) -> String {
    unreadable
        .iter()
        .map(|(name, why)| format!("{name} ({})", why.why()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How far ahead of the clock a stored id may be and still be taken as a floor: borrow's whole
/// lead, one lease step, and an hour for a clock that is behind the one the id was made with. An
/// id further ahead cannot have come from a guard (a hand-written id, another generator, masked
/// values): one such row must not move every new id decades ahead, or past the layout.
pub const PLAUSIBLE_AHEAD_MS: i64 = MAX_LEAD_MS + LEASE_STEP_MS + 3_600_000;

/// Reads the data floor of `key`'s sequence now (`now_ms`: the clock in ms since the epoch) and
/// answers its guard's `request` with it ([`SlotTable::settle_data_floor`]; `None`: no guard
/// waits); returns the floor. The one way a guard learns its data floor: a fresh guard's first id
/// (`crate::issue`) and `shard_id_resync`.
pub fn settle(
    table: &SlotTable,
    key: SlotKey,
    request: Option<FloorRequest>,
    epoch_unix_ms: i64,
    now_ms: i64,
) -> Option<i64> {
    // its own resource owner: the catalog query must not leave the caller's in hash mode
    // (`crate::scoped::with_own_resource_owner`)
    let floor = crate::scoped::with_own_resource_owner(c"pg_shard_id data floor", || {
        floor_for(
            pg_sys::Oid::from(sequence_of(key)),
            epoch_unix_ms,
            now_ms,
            floor_for_other_servers(now_ms),
            table.elsewhere_floor(),
        )
    });
    if let Some(request) = request {
        table.settle_data_floor(key, request, floor);
    }
    floor
}

/// Where a fresh guard of `sequence` must start (ms since the epoch), from the rows stored for it:
/// one past the newest plausible id's millisecond (ids more than [`PLAUSIBLE_AHEAD_MS`] ahead are
/// passed over, with a WARNING naming them: one hand-written row must not hide the plausible ones
/// below it, nor move every new id decades ahead); at least 10 min 1 s ahead of the clock
/// (`jump_ms`) when a column may hold rows no index can tell about; the database's floor for data
/// made elsewhere (`elsewhere_floor`) when no column holds an id. Logs where ids start when that
/// is ahead of the clock.
fn floor_for(
    sequence: pg_sys::Oid,
    epoch_unix_ms: i64,
    now_ms: i64,
    jump_ms: i64,
    elsewhere_floor: Option<i64>,
) -> Option<i64> {
    let stored = stored(sequence, now_ms);
    let name = relation_name(sequence);
    let mut floor = match &stored.newest {
        Some((id, _)) => ms_of(*id).ok().map(|ms| ms + 1),
        None => elsewhere_floor,
    };
    for (id, column) in &stored.beyond {
        ereport!(
            PgLogLevel::WARNING,
            PgSqlErrorCode::ERRCODE_WARNING,
            format!(
                "pg_shard_id: {column} holds the id {id}, more than 1 hour 10 minutes ahead of \
                 the clock: not taken as the floor of sequence \"{name}\""
            ),
            "No guard makes ids that far ahead: it was written by hand or by another generator. \
             New ids start above the newest id below that bound; delete or fix that row, or give \
             the column its own sequence."
        );
    }
    let jumped = !stored.unreadable.is_empty();
    if jumped {
        floor = floor.max(Some(jump_ms));
        log!(
            "pg_shard_id: {} may hold rows whose newest id no index can read, so sequence \
             \"{name}\" cannot start right above them: new ids start at {} or later, 10 min ahead \
             of the clock (rows copied in more than 10 minutes ahead of this clock can still be \
             reached; shard_id_check() says how to fix each column)",
            describe(&stored.unreadable),
            format_unix_ms(jump_ms + epoch_unix_ms)
        );
    }
    match floor {
        Some(f) if f > now_ms && !jumped && stored.has_columns => log!(
            "pg_shard_id: ids of sequence \"{name}\" start at {}, above the rows already stored \
             ({} ms ahead of the clock; made by another server, a lead, or copied in)",
            format_unix_ms(f + epoch_unix_ms),
            f - now_ms
        ),
        _ => {}
    }
    floor
}
