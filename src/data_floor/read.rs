//! Reading the newest id of a column at its btree index's end, as the planner reads an index's
//! endpoint for its estimates (`get_actual_variable_endpoint` in selfuncs.c): one descent from the
//! high end, bounded in the heap pages it visits, with a snapshot that sees every row not yet
//! removable (rows being inserted or deleted right now count). It reads as the extension, whatever
//! the caller's privileges and row security: only the newest id's millisecond is used.

use super::columns::{CannotTell, Column};
use pgrx::prelude::*;

/// How many heap pages of dead entries one read visits before it gives up (PostgreSQL 16's
/// `get_actual_variable_endpoint` stops at the same number): a mass delete at the top of the id
/// range must not make a first id walk every dead entry.
const VISITED_PAGES_LIMIT: u32 = 100;

/// What a column holds at the top of its id range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Newest {
    /// The newest id at or below the bound the caller gave (the newest plausible one).
    pub plausible: Option<i64>,
    /// The newest id of all, when it is above the bound (an id no guard could have made).
    pub beyond: Option<i64>,
}

/// The newest ids in `column`, at or below `bound` and overall: `Ok(Newest::default())` when it
/// holds none, `Err` when rows may be there but no index can say which is the newest.
///
/// # Safety
/// Call inside a transaction, inside pgrx's guard, with oids from the catalog.
pub unsafe fn newest_in(column: &Column, bound: i64) -> Result<Newest, CannotTell> {
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    // SAFETY: the caller's contract. The locks (AccessShareLock, as the planner takes) are taken
    // only if free at once, and released as soon as the value is read: a first id never waits
    // for another transaction's lock (a Citus ALTER TABLE rewriting many shards at once
    // deadlocked when each shard's first id waited for the others'), nor keeps a lock on every
    // partition until its transaction ends. A lock that is not free is "cannot tell". Every
    // scan resource is released below or, after an ERROR, by the transaction's abort.
    unsafe {
        // another session's temporary table: no block count or lock of ours says anything
        if column.cannot_tell == Some(CannotTell::Temporary) {
            return Err(CannotTell::Temporary);
        }
        if !pg_sys::ConditionalLockRelationOid(column.relation, lock) {
            return Err(CannotTell::Locked);
        }
        // (a relation dropped since the catalog was read holds nothing)
        let heap = pg_sys::try_table_open(column.relation, pg_sys::NoLock as pg_sys::LOCKMODE);
        if heap.is_null() {
            pg_sys::UnlockRelationOid(column.relation, lock);
            return Ok(Newest::default());
        }
        let newest = match (column.cannot_tell, column.index) {
            // a view, a foreign table: never "empty" (its blocks, if any, are not its rows)
            (Some(CannotTell::Relation), _) => Err(CannotTell::Relation),
            _ if is_empty(heap) => Ok(Newest::default()),
            (Some(why), _) => Err(why),
            (None, Some((index, descending))) => read_bounded(heap, index, descending, bound),
            (None, None) => Err(CannotTell::NoIndex),
        };
        pg_sys::table_close(heap, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::UnlockRelationOid(column.relation, lock);
        newest
    }
}

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

/// The newest id of all, and when that one is beyond `bound`, the newest at or below it: two
/// descents at most, the second only when an implausible id sits at the top.
///
/// # Safety
/// As [`read_endpoint`].
unsafe fn read_bounded(
    heap: pg_sys::Relation,
    index: pg_sys::Oid,
    descending: bool,
    bound: i64,
) -> Result<Newest, CannotTell> {
    // SAFETY: the caller's contract.
    unsafe {
        let newest = read_endpoint(heap, index, descending, None)?;
        match newest {
            Some(id) if id > bound => Ok(Newest {
                plausible: read_endpoint(heap, index, descending, Some(bound))?,
                beyond: Some(id),
            }),
            plausible => Ok(Newest {
                plausible,
                beyond: None,
            }),
        }
    }
}

/// The highest non-NULL value (at most `at_most`) of the first column of btree `index` on `heap`
/// (a bigint), among the entries whose row is not yet removable.
///
/// # Safety
/// `heap` is open and locked; `index` is a btree index on it whose first column is bigint, in
/// bigint's default operator class.
unsafe fn read_endpoint(
    heap: pg_sys::Relation,
    index: pg_sys::Oid,
    descending: bool,
    at_most: Option<i64>,
) -> Result<Option<i64>, CannotTell> {
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    // SAFETY: the caller's contract; this is selfuncs.c's get_actual_variable_endpoint, reading
    // the index tuple of the first entry whose heap tuple the snapshot accepts.
    unsafe {
        if !pg_sys::ConditionalLockRelationOid(index, lock) {
            return Err(CannotTell::Locked);
        }
        let index_oid = index;
        let index = pg_sys::try_relation_open(index_oid, pg_sys::NoLock as pg_sys::LOCKMODE);
        if index.is_null() {
            pg_sys::UnlockRelationOid(index_oid, lock);
            return Err(CannotTell::NoIndex);
        }
        // SnapshotNonVacuumable (InitNonVacuumableSnapshot is a macro): rows inserted or deleted
        // by transactions still running, and deleted rows not yet removable, all count.
        let mut snapshot = pg_sys::SnapshotData {
            snapshot_type: pg_sys::SnapshotType::SNAPSHOT_NON_VACUUMABLE,
            vistest: pg_sys::GlobalVisTestFor(heap),
            ..Default::default()
        };
        let mut key = pg_sys::ScanKeyData::default();
        match at_most {
            // "first column <= at_most" (strict: NULLs never match)
            Some(bound) => pg_sys::ScanKeyInit(
                &mut key,
                1,
                pg_sys::BTLessEqualStrategyNumber as pg_sys::StrategyNumber,
                pg_sys::RegProcedure::from(pg_sys::F_INT8LE),
                pg_sys::Datum::from(bound),
            ),
            // "first column IS NOT NULL"
            None => pg_sys::ScanKeyEntryInitialize(
                &mut key,
                (pg_sys::SK_ISNULL | pg_sys::SK_SEARCHNOTNULL) as i32,
                1,
                0, // InvalidStrategy
                pg_sys::InvalidOid,
                pg_sys::InvalidOid,
                pg_sys::InvalidOid,
                pg_sys::Datum::from(0),
            ),
        }
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
        let mut newest = Ok(None);
        let (mut visited, mut last_block) = (0u32, pg_sys::InvalidBlockNumber);
        loop {
            let tid = pg_sys::index_getnext_tid(scan, direction);
            if tid.is_null() {
                break;
            }
            if !pg_sys::index_fetch_heap(scan, slot) {
                // a removable row: count the heap pages such entries sent us to
                let block =
                    (u32::from((*tid).ip_blkid.bi_hi) << 16) | u32::from((*tid).ip_blkid.bi_lo);
                if block != last_block {
                    visited += 1;
                    last_block = block;
                }
                if visited > VISITED_PAGES_LIMIT {
                    newest = Err(CannotTell::DeadEntries);
                    break;
                }
                continue;
            }
            if let Some(id) = first_key(scan) {
                newest = Ok(Some(id));
            }
            break;
        }
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::index_endscan(scan);
        pg_sys::relation_close(index, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::UnlockRelationOid(index_oid, lock);
        newest
    }
}

/// The bigint in the first column of the index tuple the scan is on (`None`: NULL, or no tuple).
///
/// # Safety
/// `scan` is an index scan with `xs_want_itup`, positioned by `index_getnext_tid`.
unsafe fn first_key(scan: pg_sys::IndexScanDesc) -> Option<i64> {
    // SAFETY: the caller's contract; the tuple is deformed into arrays of INDEX_MAX_KEYS.
    unsafe {
        if (*scan).xs_itup.is_null() {
            return None;
        }
        let mut values = [pg_sys::Datum::from(0); pg_sys::INDEX_MAX_KEYS as usize];
        let mut nulls = [true; pg_sys::INDEX_MAX_KEYS as usize];
        pg_sys::index_deform_tuple(
            (*scan).xs_itup,
            (*scan).xs_itupdesc,
            values.as_mut_ptr(),
            nulls.as_mut_ptr(),
        );
        (!nulls[0]).then(|| values[0].value() as i64)
    }
}

/// How [`remainders_in`] locks the table and index it reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Locking {
    /// As any reader: AccessShareLock, waited for, kept until the transaction ends.
    Held,
    /// Without waiting, let go right after the read (`CannotTell::Locked` when not granted): for
    /// a table the caller may not read, read only to learn whether another call's reservation
    /// may go, nothing of which reaches the caller (issue 55).
    Briefly,
    /// Already taken by the caller (`Briefly`'s read itself).
    Taken,
}

/// Which index entries [`remainders_in`] counts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// Every entry, whether its row is visible, being inserted, deleted or dead, without visiting
    /// the heap (an entry of a dead row only makes a remainder look taken): what a reservation is
    /// filled from.
    Entries,
    /// Only rows that can no longer go while their transaction goes on (what lets a reservation
    /// go, `pg_shard_id_core::backfill::Database::kept`): inserted by a committed transaction, by
    /// a running one outside any savepoint, or by the (sub)transaction `drawn_in` (a 64-bit id)
    /// that drew the reservation's ids. A row of a savepoint still open, or rolled back, is not
    /// counted: rolled back, its entry dies and VACUUM removes it (the 27th review).
    Kept { drawn_in: Option<u64> },
}

/// The remainders (low 10 bits) of every id from `low` to `high` (one millisecond of one shard)
/// in `column`'s index, for `next_shard_id_at`, counted as `count` says. Waits for locks: a
/// backfill is not an insert's first id. `Err` when the column cannot be read exactly.
///
/// # Safety
/// Call inside a transaction, inside pgrx's guard, with oids from the catalog.
pub unsafe fn remainders_in(
    column: &Column,
    low: i64,
    high: i64,
    locking: Locking,
    count: Count,
) -> Result<pg_shard_id_core::backfill::Remainders, CannotTell> {
    use pg_shard_id_core::backfill::{remainder_of, Remainders};
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    // SAFETY: the caller's contract. The locks are the planner's (AccessShareLock); they are
    // kept until the transaction ends, as any reader's are, or (Locking::Briefly) taken without
    // waiting and let go at the end.
    unsafe {
        if let Some(why) = column.cannot_tell {
            return Err(why);
        }
        if locking == Locking::Briefly {
            let Some((index_oid, _)) = column.index else {
                return Err(CannotTell::NoIndex);
            };
            if !pg_sys::ConditionalLockRelationOid(column.relation, lock) {
                return Err(CannotTell::Locked);
            }
            if !pg_sys::ConditionalLockRelationOid(index_oid, lock) {
                pg_sys::UnlockRelationOid(column.relation, lock);
                return Err(CannotTell::Locked);
            }
            // (dropped, and committed, after the column list was read: gone now)
            let index = pg_sys::try_relation_open(index_oid, pg_sys::NoLock as pg_sys::LOCKMODE);
            if index.is_null() {
                pg_sys::UnlockRelationOid(index_oid, lock);
                pg_sys::UnlockRelationOid(column.relation, lock);
                return Err(CannotTell::Locked);
            }
            pg_sys::relation_close(index, pg_sys::NoLock as pg_sys::LOCKMODE);
            // (the locks are held: the read opens both without taking them again)
            let read = remainders_in(column, low, high, Locking::Taken, count);
            pg_sys::UnlockRelationOid(index_oid, lock);
            pg_sys::UnlockRelationOid(column.relation, lock);
            return read;
        }
        let lock = match locking {
            Locking::Taken => pg_sys::NoLock as pg_sys::LOCKMODE,
            _ => lock,
        };
        let heap = pg_sys::try_table_open(column.relation, lock);
        if heap.is_null() {
            return Ok(Remainders::default());
        }
        let Some((index_oid, _)) = column.index else {
            let empty = is_empty(heap);
            pg_sys::table_close(heap, pg_sys::NoLock as pg_sys::LOCKMODE);
            return if empty {
                Ok(Remainders::default())
            } else {
                Err(CannotTell::NoIndex)
            };
        };
        let index = pg_sys::index_open(index_oid, lock);
        let mut snapshot = pg_sys::SnapshotData {
            snapshot_type: pg_sys::SnapshotType::SNAPSHOT_NON_VACUUMABLE,
            vistest: pg_sys::GlobalVisTestFor(heap),
            ..Default::default()
        };
        let mut keys = [
            pg_sys::ScanKeyData::default(),
            pg_sys::ScanKeyData::default(),
        ];
        let bounds = [
            (pg_sys::BTGreaterEqualStrategyNumber, pg_sys::F_INT8GE, low),
            (pg_sys::BTLessEqualStrategyNumber, pg_sys::F_INT8LE, high),
        ];
        for (key, (strategy, procedure, value)) in keys.iter_mut().zip(bounds) {
            pg_sys::ScanKeyInit(
                key,
                1,
                strategy as pg_sys::StrategyNumber,
                pg_sys::RegProcedure::from(procedure),
                pg_sys::Datum::from(value),
            );
        }
        #[cfg(feature = "pg18")]
        let scan = pg_sys::index_beginscan(heap, index, &mut snapshot, std::ptr::null_mut(), 2, 0);
        #[cfg(not(feature = "pg18"))]
        let scan = pg_sys::index_beginscan(heap, index, &mut snapshot, 2, 0);
        (*scan).xs_want_itup = true;
        pg_sys::index_rescan(scan, keys.as_mut_ptr(), 2, std::ptr::null_mut(), 0);
        let mut found = Remainders::default();
        // Count::Kept visits each entry's heap tuples (every version of its HOT chain that
        // vacuum could not remove yet); a table that is not heap cannot be read that way
        let kept = match count {
            Count::Entries => None,
            Count::Kept { drawn_in } => Some(drawn_in),
        };
        let heap_am = (*heap).rd_tableam == pg_sys::GetHeapamTableAmRoutine();
        // (read only when a row of one of the caller's own savepoints is met)
        let mut own = None;
        let slot = match kept {
            Some(_) if heap_am => pg_sys::table_slot_create(heap, std::ptr::null_mut()),
            _ => std::ptr::null_mut(),
        };
        while !pg_sys::index_getnext_tid(scan, pg_sys::ScanDirection::ForwardScanDirection)
            .is_null()
        {
            let Some(id) = first_key(scan) else { continue };
            let counts = match kept {
                None => true,
                Some(_) if !heap_am => false,
                Some(drawn_in) => {
                    let mut any = false;
                    loop {
                        if !pg_sys::index_fetch_heap(scan, slot) {
                            break;
                        }
                        any = any || tuple_is_kept(slot, drawn_in, &mut own);
                        if any || !(*scan).xs_heap_continue {
                            break;
                        }
                    }
                    any
                }
            };
            if counts {
                found.insert(remainder_of(id));
            }
        }
        if !slot.is_null() {
            pg_sys::ExecDropSingleTupleTableSlot(slot);
        }
        pg_sys::index_endscan(scan);
        pg_sys::index_close(index, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::table_close(heap, pg_sys::NoLock as pg_sys::LOCKMODE);
        Ok(found)
    }
}

/// The caller's transaction: its top-level id and the savepoints open in it that have ids,
/// found without giving any savepoint an id (a fill trigger's EXCEPTION block per row would use
/// one per row: the third review of the savepoint fix). PostgreSQL gives a savepoint's parents ids
/// before its own, so the chain from the current savepoint's id up is all of them; when the
/// current savepoint has no id, they are known only if it is directly under the top level.
struct OwnTransaction {
    top: pg_sys::TransactionId,
    open: Vec<pg_sys::TransactionId>,
    /// The open savepoints are not all known (more than [`OPEN_MAX`], or the current one has no
    /// id and is not directly under the top level): none of the caller's savepoint rows counts.
    cut_short: bool,
}

/// How many open savepoints [`OwnTransaction`] lists; past them, none of the caller's own
/// savepoint rows counts as kept.
const OPEN_MAX: usize = 10_000;

impl OwnTransaction {
    /// # Safety
    /// Inside a transaction that has a top-level id, with a snapshot.
    unsafe fn now() -> Self {
        // SAFETY: the caller's contract; pg_subtrans holds the parent of every subtransaction id
        // assigned, and this transaction's are all at or after TransactionXmin.
        unsafe {
            let top = pg_sys::GetTopTransactionIdIfAny();
            let mut open = Vec::new();
            let mut level = pg_sys::GetCurrentTransactionIdIfAny();
            if level == pg_sys::InvalidTransactionId {
                // (no id: no row of its own; known to have no open parent but the top level only
                // directly under it)
                let cut_short = pg_sys::GetCurrentTransactionNestLevel() > 2;
                return OwnTransaction {
                    top,
                    open,
                    cut_short,
                };
            }
            while level != top && level != pg_sys::InvalidTransactionId && open.len() < OPEN_MAX {
                open.push(level);
                level = pg_sys::SubTransGetParent(level);
            }
            let cut_short = level != top;
            OwnTransaction {
                top,
                open,
                cut_short,
            }
        }
    }

    /// Whether a row inserted by `xmin`, one of this transaction's (sub)transaction ids, goes only
    /// with the whole transaction: the top level, or a savepoint released into it (with every
    /// savepoint between them released too).
    ///
    /// # Safety
    /// As [`OwnTransaction::now`], with `xmin` one of this transaction's ids.
    unsafe fn goes_only_with_it(&self, xmin: pg_sys::TransactionId) -> bool {
        if self.cut_short {
            return false;
        }
        let mut level = xmin;
        for _ in 0..=OPEN_MAX {
            if level == self.top {
                return true;
            }
            if self.open.contains(&level) || level == pg_sys::InvalidTransactionId {
                return false;
            }
            // SAFETY: the caller's contract.
            level = unsafe { pg_sys::SubTransGetParent(level) };
        }
        false
    }
}

/// Whether the heap tuple in `slot` can no longer go while its inserting transaction goes on
/// ([`Count::Kept`]): inserted by a committed transaction, by a running one outside any
/// savepoint, or by the (sub)transaction `drawn_in` (64-bit); never a speculative insertion
/// whose conflict check has not ended.
///
/// # Safety
/// `slot` holds a heap tuple just fetched, inside a transaction with a snapshot (so that every
/// running transaction id is at or after `TransactionXmin`, as `pg_subtrans` needs).
unsafe fn tuple_is_kept(
    slot: *mut pg_sys::TupleTableSlot,
    drawn_in: Option<u64>,
    own: &mut Option<OwnTransaction>,
) -> bool {
    use pg_shard_id_core::backfill::widen_xid;
    // SAFETY: the caller's contract; a buffer heap slot's tuple is in the pinned buffer and is
    // not copied (should_free stays false), and only its header is read.
    unsafe {
        let mut should_free = false;
        let tuple = pg_sys::ExecFetchSlotHeapTuple(slot, false, &mut should_free);
        let header = (*tuple).t_data;
        let mask = u32::from((*header).t_infomask);
        let xmin = (*header).t_choice.t_heap.t_xmin;
        let frozen = pg_sys::HEAP_XMIN_FROZEN;
        let by_drawer = || {
            let next = pg_sys::ReadNextFullTransactionId().value;
            drawn_in == Some(widen_xid(next, xmin.into_inner()))
        };
        // A speculative insertion (INSERT ... ON CONFLICT, before its conflict check ended) carries
        // a token in t_ctid, and its transaction may still cancel it and go on (the row is then
        // "super-deleted", its xmin made invalid): not kept, whoever inserted it (the twenty-eighth
        // review).
        let speculative = u32::from((*header).t_ctid.ip_posid) == pg_sys::SpecTokenOffsetNumber;
        // (this transaction's own rows first: COPY FREEZE marks rows of a savepoint still open
        // frozen, and they go with it; the review of the savepoint fix)
        let kept = if speculative {
            false
        } else if pg_sys::TransactionIdIsCurrentTransactionId(xmin) {
            xmin == pg_sys::GetTopTransactionIdIfAny()
                || by_drawer()
                || own
                    .get_or_insert_with(|| OwnTransaction::now())
                    .goes_only_with_it(xmin)
        } else if mask & frozen == frozen || mask & pg_sys::HEAP_XMIN_COMMITTED != 0 {
            true
        } else if mask & pg_sys::HEAP_XMIN_INVALID != 0 {
            false
        } else if pg_sys::TransactionIdIsInProgress(xmin) {
            // another transaction's: its top level (a savepoint of it, open or released, cannot
            // be told apart from here), or the (sub)transaction that drew the ids
            pg_sys::SubTransGetTopmostTransaction(xmin) == xmin || by_drawer()
        } else {
            pg_sys::TransactionIdDidCommit(xmin)
        };
        if should_free {
            pg_sys::heap_freetuple(tuple);
        }
        kept
    }
}
