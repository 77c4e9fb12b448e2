//! The data floor: before a fresh guard issues its first id (the sequence's first since the server
//! started, or since its slot was given to another sequence), it is told the newest id already
//! stored in every column whose DEFAULT draws from its sequence, and its ids start above it.
//!
//! Why: ids can arrive without anything that records them. Logical replication (a blue/green
//! switchover), a dump of some schemas, `--data-only` loads and `COPY` carry rows, but not the
//! lease (it is the server's) and not `_pg_shard_id.origin` (but for a `FOR ALL TABLES`
//! publication or a whole-database dump). Sequences do not replicate before PostgreSQL 19. The
//! rows are the only record, so the rows are the floor.
//!
//! How, at microseconds per column, never a scan of a table:
//! * [`columns_of`] finds the columns from the catalog: a DEFAULT that depends on the sequence
//!   (its `regclass` constant) and on one of this extension's `next_shard_id` functions (the same
//!   dependencies `DROP SEQUENCE` sees), every leaf partition of a partitioned table, and each
//!   leaf's best index whose first column is that column (btree, valid, not partial);
//! * [`newest_in`] reads the index's endpoint as the planner does for its estimates
//!   (`get_actual_variable_endpoint` in selfuncs.c): one descent of the btree from its high end,
//!   with a snapshot that sees every row not yet removable, even rows being inserted or deleted
//!   right now. It reads the index as the extension, whatever the caller's privileges and row
//!   security: only the newest id's millisecond is used, and only to set the floor.
//! * Another session's temporary tables are left out: their buffers are that session's, and
//!   their ids came from this server's guard (a temporary table is never copied in).
//! * A DEFAULT counts when it is the `next_shard_id` call itself (`shard_id_mask(next_shard_id(..))`
//!   stores no ids). An index counts when it is a valid, non-partial btree with bigint's default
//!   operator class on the column. Locks are taken only if free at once (a first id never waits
//!   for another transaction's lock: that deadlocked a Citus ALTER TABLE rewriting many shards)
//!   and released as soon as the value is read; a lock that is not free is "cannot tell".
//! * A stored id more than [`PLAUSIBLE_AHEAD_MS`] ahead of the clock is not trusted (a WARNING
//!   names it): one hand-written row must not move every new id decades ahead.
//! * A leaf that holds no block is empty. A column the data cannot tell about (rows in a table
//!   with no usable index, a foreign table or a view, a column that is not bigint) gets the floor the
//!   origin uses for data made elsewhere: 10 min 1 s ahead of the clock, with a LOG line naming it;
//!   `shard_id_check()` reports it (row `data_floor`) with the `CREATE INDEX` that fixes it.
//!
//! Runs on the slow path only (inside pgrx's guard): SPI and catalog access, locks, ERRORs.

use crate::errors::relation_name;
use pg_shard_id_core::guard::{FloorRequest, MAX_LEAD_MS};
use pg_shard_id_core::layout::ms_of;
use pg_shard_id_core::lease::LEASE_STEP_MS;
use pg_shard_id_core::origin::floor_for_other_servers;
use pg_shard_id_core::slots::{sequence_of, SlotKey, SlotTable};
use pg_shard_id_core::time::format_unix_ms;
use pgrx::prelude::*;

/// One column whose DEFAULT draws from the sequence, in one leaf relation.
pub struct Column {
    pub relation: pg_sys::Oid,
    /// `schema.table.column`, for messages.
    pub name: String,
    /// A bigint column of a plain table: its index can be read.
    pub readable: bool,
    /// The btree index whose first column it is, if any, and whether it sorts descending.
    pub index: Option<(pg_sys::Oid, bool)>,
}

/// What the stored rows say about where a sequence's ids must start.
pub struct Stored {
    /// The newest id in the columns that could be read, and its column (`None`: nothing stored).
    pub newest: Option<(i64, String)>,
    /// Columns holding rows whose newest id cannot be read cheaply (no index, not a plain table,
    /// not bigint).
    pub unreadable: Vec<String>,
    /// Whether any column draws from the sequence at all.
    pub has_columns: bool,
}

const COLUMNS_SQL: &str = r#"
WITH RECURSIVE ours AS (
    SELECT e.objid AS oid
      FROM pg_catalog.pg_depend e
      JOIN pg_catalog.pg_extension x ON x.oid OPERATOR(pg_catalog.=) e.refobjid AND x.extname OPERATOR(pg_catalog.=) 'pg_shard_id'
      JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) e.objid AND p.proname OPERATOR(pg_catalog.=) 'next_shard_id'
     WHERE e.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
       AND e.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass AND e.deptype OPERATOR(pg_catalog.=) 'e'
), defaults AS (
    SELECT DISTINCT sd.refobjid AS seq, ad.adrelid AS relid, a.attname
      FROM pg_catalog.pg_attrdef ad
      JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) ad.adrelid AND a.attnum OPERATOR(pg_catalog.=) ad.adnum
      JOIN pg_catalog.pg_depend sd
        ON sd.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_attrdef'::pg_catalog.regclass AND sd.objid OPERATOR(pg_catalog.=) ad.oid
       AND sd.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
      JOIN pg_catalog.pg_class sc ON sc.oid OPERATOR(pg_catalog.=) sd.refobjid AND sc.relkind OPERATOR(pg_catalog.=) 'S'
     WHERE ($1::pg_catalog.oid IS NULL OR sd.refobjid OPERATOR(pg_catalog.=) $1)
       -- the DEFAULT is the call itself (shard_id_mask(next_shard_id(...)) stores no ids), read
       -- from the stored expression tree: pg_get_expr would lock the table, and a first id must
       -- never wait for a lock (a Citus ALTER TABLE rewriting shards in parallel deadlocked)
       AND (pg_catalog.regexp_match(ad.adbin::pg_catalog.text,
                $re$^(\{COERCETODOMAIN :arg )?\{FUNCEXPR :funcid (\d+) $re$))[2]::pg_catalog.oid
           OPERATOR(pg_catalog.=) ANY (SELECT oid FROM ours)
       AND EXISTS (SELECT FROM pg_catalog.pg_depend d
                    WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_attrdef'::pg_catalog.regclass
                      AND d.objid OPERATOR(pg_catalog.=) ad.oid
                      AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                      AND d.refobjid OPERATOR(pg_catalog.=) ANY (SELECT oid FROM ours))
), tree AS (
    -- a partitioned table and every partition below it, from pg_inherits (pg_partition_tree
    -- would lock each partition, and a first id must never wait for a lock)
    SELECT d.seq, d.relid, d.attname FROM defaults d
    UNION
    SELECT t.seq, i.inhrelid, t.attname
      FROM tree t JOIN pg_catalog.pg_inherits i ON i.inhparent OPERATOR(pg_catalog.=) t.relid
), leaves AS (
    SELECT t.seq, t.relid, t.attname
      FROM tree t JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.relid
     WHERE c.relkind OPERATOR(pg_catalog.<>) 'p'
)
SELECT l.relid, l.seq,
       pg_catalog.format('%s.%I', l.relid::pg_catalog.regclass, a.attname),
       c.relkind OPERATOR(pg_catalog.=) 'r' AND 'pg_catalog.int8'::pg_catalog.regtype OPERATOR(pg_catalog.=) ANY (ARRAY[a.atttypid, ty.typbasetype]),
       i.indexrelid,
       coalesce((i.indoption[0]::pg_catalog.int4 OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.=) 1, false)
  FROM leaves l
  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) l.relid
   -- another session's temporary table: its buffers are that session's and cannot be read here
   -- (its ids came from this server's guard, and go with that session)
   AND (c.relpersistence OPERATOR(pg_catalog.<>) 't' OR c.relnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema())
  JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) l.relid AND a.attname OPERATOR(pg_catalog.=) l.attname
                                AND NOT a.attisdropped
  JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) a.atttypid
  LEFT JOIN LATERAL (
      SELECT x.indexrelid, x.indoption
        FROM pg_catalog.pg_index x
        JOIN pg_catalog.pg_class ic ON ic.oid OPERATOR(pg_catalog.=) x.indexrelid
        JOIN pg_catalog.pg_am am ON am.oid OPERATOR(pg_catalog.=) ic.relam
       WHERE x.indrelid OPERATOR(pg_catalog.=) l.relid AND x.indkey[0] OPERATOR(pg_catalog.=) a.attnum AND x.indisvalid AND x.indisready
         AND x.indpred IS NULL AND am.amname OPERATOR(pg_catalog.=) 'btree'
         -- bigint's own order (a reversed operator class would give the other end)
         AND x.indclass[0] OPERATOR(pg_catalog.=) (SELECT o.oid FROM pg_catalog.pg_opclass o
                               WHERE o.opcmethod OPERATOR(pg_catalog.=) am.oid AND o.opcdefault
                                 AND o.opcintype OPERATOR(pg_catalog.=) 'pg_catalog.int8'::pg_catalog.regtype)
       ORDER BY x.indisunique DESC, x.indexrelid
       LIMIT 1) i ON true
 ORDER BY 3"#;

/// The columns (leaf partitions expanded) whose DEFAULT calls `next_shard_id` with `sequence`
/// (`None`: with any sequence).
pub fn columns_of(sequence: Option<pg_sys::Oid>) -> Vec<Column> {
    Spi::connect(|client| {
        let rows = client
            .select(COLUMNS_SQL, None, &[sequence.into()])
            .unwrap_or_else(|e| error!("pg_shard_id: reading the columns of a sequence: {e}"));
        rows.map(|row| {
            let index = row.get::<pg_sys::Oid>(5).ok().flatten();
            let descending = row.get::<bool>(6).ok().flatten().unwrap_or(false);
            Column {
                relation: row.get::<pg_sys::Oid>(1).ok().flatten().unwrap_or_default(),
                name: row.get::<String>(3).ok().flatten().unwrap_or_default(),
                readable: row.get::<bool>(4).ok().flatten().unwrap_or(false),
                index: index.map(|oid| (oid, descending)),
            }
        })
        .collect()
    })
}

/// What the rows stored for `sequence` say: the newest id of every column that can be read, and
/// the columns that hold rows but cannot be read cheaply.
pub fn stored(sequence: pg_sys::Oid) -> Stored {
    let columns = columns_of(Some(sequence));
    let mut newest: Option<(i64, String)> = None;
    let mut unreadable = Vec::new();
    for column in &columns {
        // SAFETY: a relation and index oid just read from the catalog, inside a transaction.
        match unsafe { newest_in(column) } {
            Ok(Some(id)) if newest.as_ref().is_none_or(|(n, _)| id > *n) => {
                newest = Some((id, column.name.clone()))
            }
            Ok(_) => {}
            Err(CannotTell) => unreadable.push(column.name.clone()),
        }
    }
    Stored {
        newest,
        unreadable,
        has_columns: !columns.is_empty(),
    }
}

/// The column holds rows, and its newest id cannot be read through an index.
pub struct CannotTell;

/// Whether a relation holds no block at all (never written, or truncated).
///
/// # Safety
/// `relation` must be open.
unsafe fn is_empty(relation: pg_sys::Relation) -> bool {
    // SAFETY: the caller's contract.
    unsafe {
        pg_sys::RelationGetNumberOfBlocksInFork(relation, pg_sys::ForkNumber::MAIN_FORKNUM) == 0
    }
}

/// The newest id in `column`: `Ok(None)` when it holds none, `Err(CannotTell)` when rows may be
/// there but no index can say which is the newest (and for anything that is not a plain table
/// with a bigint column: a foreign table or a view is never "empty").
///
/// # Safety
/// Call inside a transaction, inside pgrx's guard, with oids from the catalog.
pub unsafe fn newest_in(column: &Column) -> Result<Option<i64>, CannotTell> {
    if !column.readable {
        return Err(CannotTell);
    }
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    // SAFETY: the caller's contract. The locks (AccessShareLock, as the planner takes) are taken
    // only if free at once, and released as soon as the value is read: a first id never waits
    // for another transaction's lock (a Citus ALTER TABLE rewriting many shards at once
    // deadlocked when each shard's first id waited for the others'), nor keeps a lock on every
    // partition until its transaction ends. A lock that is not free is "cannot tell". Every
    // scan resource is released below or, after an ERROR, by the transaction's abort.
    unsafe {
        if !pg_sys::ConditionalLockRelationOid(column.relation, lock) {
            return Err(CannotTell);
        }
        // (a relation dropped since the catalog was read holds nothing)
        let heap = pg_sys::try_table_open(column.relation, pg_sys::NoLock as pg_sys::LOCKMODE);
        if heap.is_null() {
            pg_sys::UnlockRelationOid(column.relation, lock);
            return Ok(None);
        }
        let newest = match column.index {
            _ if is_empty(heap) => Ok(None),
            Some((index, descending)) => read_endpoint(heap, index, descending),
            None => Err(CannotTell),
        };
        pg_sys::table_close(heap, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::UnlockRelationOid(column.relation, lock);
        newest
    }
}

/// The highest non-NULL value of the first column of btree `index` on `heap` (a bigint), among the
/// entries whose row is not yet removable; `Err(CannotTell)` when the index is gone.
///
/// # Safety
/// `heap` is open and locked; `index` is a btree index on it whose first column is bigint.
unsafe fn read_endpoint(
    heap: pg_sys::Relation,
    index: pg_sys::Oid,
    descending: bool,
) -> Result<Option<i64>, CannotTell> {
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    // SAFETY: the caller's contract; this is selfuncs.c's get_actual_variable_endpoint, reading
    // the index tuple of the first entry whose heap tuple the snapshot accepts.
    unsafe {
        if !pg_sys::ConditionalLockRelationOid(index, lock) {
            return Err(CannotTell);
        }
        let index_oid = index;
        let index = pg_sys::try_relation_open(index_oid, pg_sys::NoLock as pg_sys::LOCKMODE);
        if index.is_null() {
            pg_sys::UnlockRelationOid(index_oid, lock);
            return Err(CannotTell);
        }
        // SnapshotNonVacuumable (InitNonVacuumableSnapshot is a macro): rows inserted or deleted
        // by transactions still running, and deleted rows not yet removable, all count.
        let mut snapshot = pg_sys::SnapshotData {
            snapshot_type: pg_sys::SnapshotType::SNAPSHOT_NON_VACUUMABLE,
            vistest: pg_sys::GlobalVisTestFor(heap),
            ..Default::default()
        };
        // "first column IS NOT NULL"
        let mut key = pg_sys::ScanKeyData::default();
        pg_sys::ScanKeyEntryInitialize(
            &mut key,
            (pg_sys::SK_ISNULL | pg_sys::SK_SEARCHNOTNULL) as i32,
            1,
            0, // InvalidStrategy
            pg_sys::InvalidOid,
            pg_sys::InvalidOid,
            pg_sys::InvalidOid,
            pg_sys::Datum::from(0),
        );
        #[cfg(feature = "pg18")]
        let scan = pg_sys::index_beginscan(heap, index, &mut snapshot, std::ptr::null_mut(), 1, 0);
        #[cfg(not(feature = "pg18"))]
        let scan = pg_sys::index_beginscan(heap, index, &mut snapshot, 1, 0);
        (*scan).xs_want_itup = true;
        pg_sys::index_rescan(scan, &mut key, 1, std::ptr::null_mut(), 0);
        let slot = pg_sys::table_slot_create(heap, std::ptr::null_mut());
        let direction = if descending {
            pg_sys::ScanDirection::ForwardScanDirection
        } else {
            pg_sys::ScanDirection::BackwardScanDirection
        };
        let mut newest = None;
        if pg_sys::index_getnext_slot(scan, direction, slot) && !(*scan).xs_itup.is_null() {
            let mut values = [pg_sys::Datum::from(0); pg_sys::INDEX_MAX_KEYS as usize];
            let mut nulls = [true; pg_sys::INDEX_MAX_KEYS as usize];
            pg_sys::index_deform_tuple(
                (*scan).xs_itup,
                (*scan).xs_itupdesc,
                values.as_mut_ptr(),
                nulls.as_mut_ptr(),
            );
            if !nulls[0] {
                newest = Some(values[0].value() as i64);
            }
        }
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::index_endscan(scan);
        pg_sys::relation_close(index, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::UnlockRelationOid(index_oid, lock);
        Ok(newest)
    }
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
    let floor = floor_for(
        pg_sys::Oid::from(sequence_of(key)),
        epoch_unix_ms,
        now_ms,
        floor_for_other_servers(now_ms),
        table.elsewhere_floor(),
    );
    if let Some(request) = request {
        table.settle_data_floor(key, request, floor);
    }
    floor
}

/// Where a fresh guard of `sequence` must start (ms since the epoch), from the rows stored for it:
/// one past the newest id's millisecond; 10 min 1 s ahead of the clock (`jump_ms`) when a column
/// holds rows no index can tell about, or when the newest id is further ahead than
/// [`PLAUSIBLE_AHEAD_MS`] (not trusted, with a WARNING naming it); the database's floor for data
/// made elsewhere (`elsewhere_floor`) when no column holds an id. Logs where ids start when that
/// is ahead of the clock.
fn floor_for(
    sequence: pg_sys::Oid,
    epoch_unix_ms: i64,
    now_ms: i64,
    jump_ms: i64,
    elsewhere_floor: Option<i64>,
) -> Option<i64> {
    let stored = stored(sequence);
    let name = relation_name(sequence);
    let mut floor = None;
    let mut jumped = false;
    match &stored.newest {
        Some((id, column))
            if ms_of(*id).is_ok_and(|ms| ms > now_ms.saturating_add(PLAUSIBLE_AHEAD_MS)) =>
        {
            ereport!(
                PgLogLevel::WARNING,
                PgSqlErrorCode::ERRCODE_WARNING,
                format!(
                    "pg_shard_id: {column} holds the id {id}, more than 1 hour 10 minutes ahead of \
                     the clock: not taken as the floor of sequence \"{name}\""
                ),
                "No guard makes ids that far ahead: it was written by hand or by another generator. \
                 New ids start 10 minutes ahead of the clock instead; delete or fix that row, or give \
                 the column its own sequence."
            );
            floor = Some(jump_ms);
            jumped = true;
        }
        Some((id, _)) if ms_of(*id).is_ok() => floor = ms_of(*id).ok().map(|ms| ms + 1),
        _ => floor = floor.max(elsewhere_floor),
    }
    if !stored.unreadable.is_empty() {
        floor = floor.max(Some(jump_ms));
        jumped = true;
        log!(
            "pg_shard_id: {} may hold rows whose newest id no index can read (no index on the \
             column, a foreign table or view, not bigint), so sequence \"{name}\" cannot start \
             right above them: new ids start at {}, 10 min ahead of the clock (CREATE INDEX on the \
             column to start them right above the rows)",
            stored.unreadable.join(", "),
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
